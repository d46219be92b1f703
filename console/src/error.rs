//! The console's error type: what can end a console run early.

use arbiter_bus::BusError;

pub type Result<T, E = ConsoleError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// `--session` is not usable as a subject token.
    #[error("invalid session id {id:?}: a session id is 1 to 64 ASCII letters, digits, '-' or '_'")]
    InvalidSessionId { id: String },
    /// The console identity is not usable as a subject token.
    #[error(
        "invalid console identity {identity:?}: it is 1 to 64 ASCII letters, digits, '-' or '_'"
    )]
    InvalidIdentity { identity: String },
    /// `--workspace` is not usable as a key of the memory bucket.
    #[error(
        "invalid workspace {name:?}: a workspace name is 1 to 64 ASCII letters, digits, '-' or '_'"
    )]
    InvalidWorkspace { name: String },
    /// A memory command failed (no such entry, the bucket not readable).
    #[error("memory of workspace {workspace}: {message}")]
    Memory { workspace: String, message: String },
    /// Connecting to NATS or declaring the streams failed.
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot subscribe to {subject}: {message}")]
    Subscribe { subject: String, message: String },
    /// The session log could not be opened, or its consumer kept failing.
    #[error("cannot read the log of session {session_id}: {message}")]
    Log { session_id: String, message: String },
    /// A checkpoint that cannot be found, shown or rewound to, or a rewind
    /// the session refused.
    #[error("checkpoints of session {session_id}: {message}")]
    Checkpoint { session_id: String, message: String },
    /// The sessions bucket could not be read.
    #[error("cannot read the status of session {session_id}: {message}")]
    Status { session_id: String, message: String },
    /// The list of sessions could not be read (the bucket exists, or its
    /// existence could not be told).
    #[error("cannot read the sessions bucket {bucket}: {message}")]
    Sessions { bucket: String, message: String },
    #[error("cannot encode a log entry as JSON: {0}")]
    Encode(#[from] serde_json::Error),
    /// Reading stdin or writing stdout/stderr failed (e.g. a closed pipe).
    #[error("terminal I/O failed: {0}")]
    Io(#[from] std::io::Error),
}
