//! A session's status as a client reads it, and the sessions list, in the
//! console's own words (`console::sessions::{state, attention, ago}`,
//! `console::budget::summary`): the state, the live Orchestrators, the
//! Arbiter's context, the cost, and what waits for the human. Text that
//! came off the wire is made one inert line.

use arbiter_console::inert::one_line;
use arbiter_console::sessions;
use arbiter_protocol::{SessionStatus, member_name};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;

/// One session's status.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Status {
    pub session: String,
    /// `idle`, `thinking`, `thinking (2 queued)`, `working` (an Orchestrator
    /// works while the Arbiter waits), `archived`; `starting` before the
    /// coordinator has published a status.
    pub state: String,
    /// Why the session needs the human now, if it does: `1 approval
    /// waiting`, `waits for your word`, `something failed`, `stalled`, `at its budget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_you: Option<String>,
    /// What the coordinator said waits for the human, besides approvals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
    /// Tool calls waiting for the human's word, oldest first.
    pub approvals: Vec<Approval>,
    /// The Orchestrators alive now.
    pub orchestrators: Vec<Orchestrator>,
    /// Orchestrators summoned so far.
    pub summoned: u32,
    /// Human lines and reports waiting for the Arbiter.
    pub queued: u32,
    /// How full the Arbiter's context is, in percent.
    pub context_pct: f64,
    pub context_tokens: u64,
    /// What the session's model requests cost so far.
    pub cost: String,
    /// The caps and what is left, as `/budget` says it.
    pub budget: String,
    /// The seq of the newest log entry (read on with `read`).
    pub last_seq: u64,
    /// When the session last changed.
    pub last_activity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Attention {
    /// `needs_input`, `failed`, `stalled` or `budget`.
    pub kind: String,
    /// One line; it may quote a model.
    pub summary: String,
    /// The log entry that caused it.
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Approval {
    /// Its number, for `/allow <n>`, `/always <n>` or `/deny <n> [reason]` (send them with `send`).
    pub approval: u32,
    pub orchestrator: String,
    pub tool: String,
    /// The command or path (it may quote a model).
    pub summary: String,
    /// Denied if nobody answers by then.
    pub deadline: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Orchestrator {
    /// `Orchestrator I`, `Orchestrator II.1` (a team's member).
    pub name: String,
    pub orch_id: String,
    /// It has reported on its brief since it was summoned.
    pub reported: bool,
}

fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!(
        "{} ({})",
        at.format("%Y-%m-%d %H:%M:%S UTC"),
        sessions::ago(now, at)
    )
}

impl Status {
    pub fn of(s: &SessionStatus, now: DateTime<Utc>) -> Self {
        let mut live = s.team.clone();
        if live.is_empty() {
            live.extend(s.active.clone());
        }
        Self {
            session: one_line(&s.session_id),
            state: sessions::state(s),
            needs_you: sessions::attention(s),
            attention: s.attention.as_ref().map(|a| Attention {
                kind: serde_json::to_value(a.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                summary: one_line(&a.summary),
                seq: a.seq,
            }),
            approvals: s
                .approvals
                .iter()
                .map(|a| Approval {
                    approval: a.approval,
                    orchestrator: member_name(a.number, a.member),
                    tool: one_line(&a.tool),
                    summary: one_line(&a.summary),
                    deadline: a.deadline.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                })
                .collect(),
            orchestrators: live
                .iter()
                .map(|o| Orchestrator {
                    name: member_name(o.number, o.member),
                    orch_id: one_line(&o.orch_id),
                    reported: o.reported,
                })
                .collect(),
            summoned: s.summoned,
            queued: s.queued,
            // In f64, so that 0.1 is written `0.1` and not `0.10000000149011612`.
            context_pct: (f64::from(s.arbiter_context_pct) * 10.0).round() / 10.0,
            context_tokens: s.arbiter_context_tokens,
            cost: s.spend.total.cost_text(),
            budget: arbiter_console::budget::summary(Some(s)),
            last_seq: s.last_seq,
            last_activity: when(s.at, now),
            archived_at: s
                .archived_at
                .map(|at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string()),
        }
    }

    /// A session whose log has begun but that has no status yet.
    pub fn starting(session: &str) -> Self {
        Self {
            session: session.to_owned(),
            state: "starting".to_owned(),
            needs_you: None,
            attention: None,
            approvals: Vec::new(),
            orchestrators: Vec::new(),
            summoned: 0,
            queued: 0,
            context_pct: 0.0,
            context_tokens: 0,
            cost: String::new(),
            budget: arbiter_console::budget::summary(None),
            last_seq: 0,
            last_activity: String::new(),
            archived_at: None,
        }
    }
}

/// One row of the sessions list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Row {
    pub session: String,
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_you: Option<String>,
    /// The first live Orchestrator, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orchestrator: Option<String>,
    pub summoned: u32,
    pub tokens: u64,
    pub cost: String,
    pub last_activity: String,
}

/// Every session, newest activity first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Sessions {
    pub sessions: Vec<Row>,
}

impl Row {
    pub fn of(s: &SessionStatus, now: DateTime<Utc>) -> Self {
        Self {
            session: one_line(&s.session_id),
            state: sessions::state(s),
            needs_you: sessions::attention(s),
            orchestrator: s.active.as_ref().map(|a| member_name(a.number, a.member)),
            summoned: s.summoned,
            tokens: s.spend.total.tokens(),
            cost: s.spend.total.cost_text(),
            last_activity: when(s.at, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn status(extra: serde_json::Value) -> SessionStatus {
        let mut value = json!({
            "session_id": "s-1",
            "state": "idle",
            "queued": 0,
            "arbiter_context_pct": 12.345,
            "arbiter_context_tokens": 1234,
            "summoned": 1,
            "last_seq": 9,
            "created_at": "2026-12-01T10:00:00Z",
            "at": "2026-12-01T10:00:00Z",
        });
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    fn now() -> DateTime<Utc> {
        "2026-12-01T10:00:42Z".parse().unwrap()
    }

    #[test]
    fn an_idle_session_in_the_consoles_words() {
        let report = Status::of(&status(json!({})), now());
        assert_eq!(report.state, "idle");
        assert_eq!(report.needs_you, None);
        assert_eq!(report.context_pct, 12.3);
        assert_eq!(report.last_activity, "2026-12-01 10:00:00 UTC (42 s ago)");
        assert!(report.orchestrators.is_empty());
        assert!(
            report.budget.starts_with("Budget: session "),
            "{}",
            report.budget
        );
    }

    #[test]
    fn what_waits_for_the_human_is_said_with_the_live_orchestrators() {
        let s = status(json!({
            "active": {"orch_id": "o-1", "number": 2},
            "approvals": [{
                "approval": 3, "number": 2, "tool": "bash", "summary": "git push\u{1b}[2J",
                "asked_at": "2026-12-01T10:00:00Z", "deadline": "2026-12-01T10:05:00Z"
            }],
            "attention": {"kind": "needs_input", "summary": "The Arbiter asks:\nwhich branch?", "seq": 8},
        }));
        let report = Status::of(&s, now());
        assert_eq!(report.state, "working");
        assert_eq!(
            report.needs_you.as_deref(),
            Some("1 approval waiting, waits for your word")
        );
        assert_eq!(
            report.orchestrators,
            [Orchestrator {
                name: "Orchestrator II".into(),
                orch_id: "o-1".into(),
                reported: false
            }]
        );
        assert_eq!(
            report.approvals,
            [Approval {
                approval: 3,
                orchestrator: "Orchestrator II".into(),
                tool: "bash".into(),
                summary: "git push\\x1b[2J".into(),
                deadline: "2026-12-01 10:05:00 UTC".into(),
            }]
        );
        let attention = report.attention.unwrap();
        assert_eq!(attention.kind, "needs_input");
        assert!(!attention.summary.contains('\n'), "{}", attention.summary);
    }

    #[test]
    fn a_row_of_the_sessions_list() {
        let row = Row::of(&status(json!({"state": "thinking", "queued": 2})), now());
        assert_eq!(row.state, "thinking (2 queued)");
        assert_eq!(row.orchestrator, None);
        assert_eq!(row.session, "s-1");
    }
}
