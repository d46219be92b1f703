//! Errors as they travel on the wire: data carried inside log entries and
//! orchestrator events, never bare strings. `Display` is for humans.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ArbiterIntent;

/// Which kind of session a model call belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Arbiter,
    Orchestrator,
    Subagent,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Arbiter => "Arbiter",
            Role::Orchestrator => "Orchestrator",
            Role::Subagent => "subagent",
        })
    }
}

/// The classes of model failure a reader may want to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelErrorKind {
    RateLimited,
    Overloaded,
    Authentication,
    PermissionDenied,
    InvalidRequest,
    ContextExceeded,
    Timeout,
    Network,
    Api,
    Stream,
    Other,
}

/// A failure that the conversation log shows to the human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum WireError {
    /// A model kept replying with output that does not match its schema.
    SchemaViolation {
        role: Role,
        attempts: u32,
        detail: String,
    },
    /// A model call failed for good (after any retries).
    Model {
        role: Role,
        class: ModelErrorKind,
        message: String,
    },
    /// A message on a subject could not be decoded; it was dropped.
    MalformedMessage { subject: String, detail: String },
    /// The Arbiter kept choosing an intent that cannot be carried out.
    IntentRejected {
        intent: ArbiterIntent,
        reason: String,
    },
    /// An Orchestrator stopped on its worker.
    OrchestratorFailed { number: u32, message: String },
    /// A message was larger than the conversation takes; it was refused.
    MessageTooLarge {
        subject: String,
        bytes: u64,
        limit: u64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::SchemaViolation {
                role,
                attempts,
                detail,
            } => write!(
                f,
                "the {role}'s reply did not match its schema after {attempts} attempts: {detail}"
            ),
            WireError::Model {
                role,
                class: _,
                message,
            } => write!(f, "the {role}'s model call failed: {message}"),
            WireError::MalformedMessage { subject, detail } => {
                write!(f, "a malformed message on {subject} was rejected: {detail}")
            }
            WireError::IntentRejected { intent, reason } => {
                write!(
                    f,
                    "the Arbiter's {} could not be carried out: {reason}",
                    intent.as_str()
                )
            }
            WireError::OrchestratorFailed { number, message } => {
                write!(
                    f,
                    "{} stopped: {message}",
                    crate::orchestrator_name(*number)
                )
            }
            WireError::MessageTooLarge {
                subject,
                bytes,
                limit,
            } => write!(
                f,
                "a message of {} KiB on {subject} was refused: the limit is {} KiB; \
                 put long text in a file in the workspace and point to it",
                bytes.div_ceil(1024),
                limit / 1024
            ),
        }
    }
}
