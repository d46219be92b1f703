//! The Arbiter console: a human's terminal on one Arbiter session. This crate
//! holds the full-screen view (ratatui: [`app`] is its state, [`ui`] draws
//! it, `screen`, `tui` and `feed` do the I/O) and the line modes (plain text
//! or JSON, one log entry per line); the binary in `main.rs` only parses
//! flags, sets up logging and calls [`run`] or [`sessions::print`].
//!
//! In the line modes stdout carries the conversation log and nothing else;
//! notices (the session id, the resume hint, skipped entries) go to stderr.
//! The full-screen view owns the terminal; only the resume hint is printed,
//! on stderr, once the terminal is restored.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod app;
pub mod approval;
pub mod approvals;
pub mod budget;
mod command;
pub use command::check_policy;
pub mod conversation;
mod error;
pub mod feed;
pub mod inert;
pub mod input;
pub mod memory;
pub mod not_sent;
pub mod render;
pub mod rewind;
mod screen;
mod session;
pub mod sessions;
mod settle;
mod shown;
pub mod stop;
mod tui;
pub mod ui;
pub mod vitals;

use std::future::Future;

use arbiter_protocol::subjects;
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader};

pub use error::{ConsoleError, Result};
pub use render::OutputMode;

/// The identity of a console that was given none.
pub const DEFAULT_IDENTITY: &str = "local";

/// Everything a console run needs to know, resolved from flags and env.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How to reach NATS, and the console's credential.
    pub nats: arbiter_bus::NatsOptions,
    /// Attach to this session; `None` starts a new one.
    pub session: Option<String>,
    pub output: OutputMode,
    /// Show the Arbiter's musings in plain mode (JSON mode always includes them).
    pub show_musings: bool,
    /// Keep following the log after stdin ends, until shutdown.
    pub follow: bool,
    /// Run the full-screen view instead of a line mode. The caller decides:
    /// `main` does when stdin and stdout are terminals and no line mode was asked for.
    pub screen: bool,
    /// Who this console is to the coordinator: the last token of the subject
    /// it publishes the human's messages on, and what the coordinator's
    /// per-console limits count against. The NATS user name of the console's
    /// credential, so that server permissions can hold it to it.
    pub identity: String,
    /// The workspace (project) the console works in, named in every
    /// message: a new session starts with its memory, and keeps what it
    /// learns there. `None`: the session has no memory.
    pub workspace: Option<String>,
    /// The session's policy to set as the console starts (`--policy`), as
    /// typed: sent as `/policy …` before anything else.
    pub policy: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nats: arbiter_bus::NatsOptions::default(),
            session: None,
            output: OutputMode::Plain,
            show_musings: false,
            follow: false,
            screen: false,
            identity: DEFAULT_IDENTITY.to_owned(),
            workspace: None,
            policy: None,
        }
    }
}

/// Runs the console on the process's stdin, stdout and stderr: the
/// full-screen view until the human quits (or `shutdown`), or a line mode
/// until the session settles after stdin ends (with `follow`, until `shutdown`).
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    check_identity(&config.identity)?;
    if config.screen {
        let session_id = session_id(config.session.as_deref())?;
        if session::is_archived(&config.nats, &session_id).await {
            // Read-only: its log is printed from the archive, as in line mode.
            return run_with_io(
                config,
                BufReader::new(tokio::io::stdin()),
                tokio::io::stdout(),
                tokio::io::stderr(),
                shutdown,
            )
            .await;
        }
        command::send_policy(&config, &session_id).await?;
        let ended = screen::run(&config, &session_id, shutdown).await;
        return ended.finish(&mut tokio::io::stderr(), &session_id).await;
    }
    run_with_io(
        config,
        BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
        tokio::io::stderr(),
        shutdown,
    )
    .await
}

/// [`run`] with the terminal replaced: `input` is what the human types,
/// `output` receives the log, `notices` what would go to stderr.
///
/// Returns `Ok` when the session has settled after `input` ended, or when
/// `shutdown` completes; prints `session <id>` first and, if the console got
/// as far as the session, the resume hint last.
pub async fn run_with_io<R, W, E>(
    config: Config,
    input: R,
    output: W,
    mut notices: E,
    shutdown: impl Future<Output = ()>,
) -> Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    check_identity(&config.identity)?;
    let session_id = session_id(config.session.as_deref())?;
    write_line(&mut notices, &format!("session {session_id}")).await?;
    command::send_policy(&config, &session_id).await?;
    let ended = session::run(
        &config,
        &session_id,
        session::Terminal {
            input,
            output,
            notices: &mut notices,
        },
        shutdown,
    )
    .await;
    ended.finish(&mut notices, &session_id).await
}

/// How a console run ended, and whether it got as far as the session.
pub(crate) struct Ended {
    /// The console attached to the session (so there is one to come back to).
    pub(crate) attached: bool,
    pub(crate) result: Result<()>,
}

impl Ended {
    /// The run's result, after printing the resume hint on `notices` if the
    /// console had attached: a console that never reached the server has no
    /// session to resume.
    async fn finish<E: AsyncWrite + Unpin>(self, notices: &mut E, session_id: &str) -> Result<()> {
        if !self.attached {
            return self.result;
        }
        let hint = write_line(notices, &resume_hint(session_id)).await;
        self.result.and(hint)
    }
}

/// The line printed at exit: the command that comes back to this session.
fn resume_hint(session_id: &str) -> String {
    format!("resume: arbiter-console --session {session_id}")
}

/// Where the full-screen console logs when no `--log-file` is given:
/// `$XDG_STATE_HOME/arbiter/console.log`, else `~/.local/state/arbiter/console.log`,
/// else `arbiter-console.log` in the temporary directory.
/// The span of one line the human sent: the root of its trace.
pub(crate) fn line_span(session_id: &str, message_id: &str) -> tracing::Span {
    tracing::info_span!(
        parent: None,
        "human_line",
        otel.name = "console human line",
        otel.kind = "producer",
        session.id = %session_id,
        message.id = %message_id,
    )
}

pub fn default_log_file() -> std::path::PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| std::path::Path::new(&home).join(".local").join("state"))
        });
    match state {
        Some(dir) => dir.join("arbiter").join("console.log"),
        None => std::env::temp_dir().join("arbiter-console.log"),
    }
}

/// The session to attach to: the given one if it is a valid subject token,
/// else a new time-ordered id.
fn check_identity(identity: &str) -> Result<()> {
    if subjects::is_valid_token(identity) {
        Ok(())
    } else {
        Err(ConsoleError::InvalidIdentity {
            identity: identity.to_owned(),
        })
    }
}

fn session_id(given: Option<&str>) -> Result<String> {
    match given {
        Some(id) if subjects::is_valid_token(id) => Ok(id.to_owned()),
        Some(id) => Err(ConsoleError::InvalidSessionId { id: id.to_owned() }),
        None => Ok(uuid::Uuid::now_v7().to_string()),
    }
}

/// Writes one line and flushes, so a reader on the other end sees it at once.
pub(crate) async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &str) -> Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    w.write_all(&bytes).await?;
    w.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        assert_eq!(session_id(Some("abc-1_X")).unwrap(), "abc-1_X");
        let err = session_id(Some("a.b")).unwrap_err();
        assert!(matches!(err, ConsoleError::InvalidSessionId { ref id } if id == "a.b"));
        let new = session_id(None).unwrap();
        assert!(subjects::is_valid_token(&new), "{new}");
        assert_eq!(uuid::Uuid::parse_str(&new).unwrap().get_version_num(), 7);
    }
}
