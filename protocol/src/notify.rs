//! Notifications: the events a coordinator POSTs to the webhooks a user
//! configured (see docs/notifications.md). Each is decided by a session's core
//! with the step that causes it and stored before it is delivered, so a
//! restart loses none; its `id` is fixed by that step, so a receiver that
//! gets one twice (delivery is at least once) can tell.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotificationKind {
    /// The human is needed: an approval waits, or the Arbiter asked them a question.
    NeedsInput,
    /// The session settled: its Orchestrators released, nothing queued.
    Completed,
    /// An Orchestrator failed, or a turn could not be routed.
    Failed,
    /// A budget cap reached 80 %, or was reached.
    Budget,
    /// No progress for the configured time.
    Stalled,
}

impl NotificationKind {
    pub const ALL: [NotificationKind; 5] = [
        NotificationKind::NeedsInput,
        NotificationKind::Completed,
        NotificationKind::Failed,
        NotificationKind::Budget,
        NotificationKind::Stalled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotificationKind::NeedsInput => "needs_input",
            NotificationKind::Completed => "completed",
            NotificationKind::Failed => "failed",
            NotificationKind::Budget => "budget",
            NotificationKind::Stalled => "stalled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One event, as its JSON body is POSTed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Notification {
    #[serde(default = "crate::version")]
    pub v: u32,
    /// Fixed by the step that decided it: `<session_id>.<log seq>.<type>`.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: NotificationKind,
    pub session_id: String,
    /// The log entry it is about (what a console shows at that seq).
    pub seq: u64,
    /// One line for a person, written by the coordinator. It may quote
    /// what a model wrote: a receiver shows it as text, never as markup.
    pub summary: String,
    /// The approval waiting, for `needs_input` on an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::WaitingApproval>,
    pub at: DateTime<Utc>,
}

impl Notification {
    /// The id of the `kind` event decided with log entry `seq` of `session_id`.
    pub fn id_of(session_id: &str, seq: u64, kind: NotificationKind) -> String {
        format!("{session_id}.{seq}.{}", kind.as_str())
    }
}
