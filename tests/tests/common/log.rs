//! A session's log as a test reads it: gathered as it grows, and reduced
//! to `(kind, text)` pairs for whole-log asserts.

use std::sync::{Arc, Mutex};

use arbiter_protocol::{LogBody, LogEntry};
use arbiter_tests::eventually;
use tokio::task::JoinHandle;

use super::WAIT;

/// The `summoned` entries of the log once there are `n`, in member order.
pub async fn summoned(log: &LogWatch, n: usize) -> Vec<arbiter_protocol::SummonedEntry> {
    eventually(WAIT, "the members' summoned entries", || async {
        let mut members: Vec<arbiter_protocol::SummonedEntry> = log
            .bodies()
            .into_iter()
            .filter_map(|b| match b {
                LogBody::Summoned(e) => Some(e),
                _ => None,
            })
            .collect();
        members.sort_by_key(|e| e.member);
        (members.len() >= n).then_some(members)
    })
    .await
}

/// A session's log, gathered as it grows.
pub struct LogWatch {
    pub(super) entries: Arc<Mutex<Vec<LogEntry>>>,
    pub(super) task: JoinHandle<()>,
}

impl Drop for LogWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LogWatch {
    pub fn entries(&self) -> Vec<LogEntry> {
        self.entries.lock().unwrap().clone()
    }

    pub fn bodies(&self) -> Vec<LogBody> {
        self.entries().into_iter().map(|e| e.body).collect()
    }

    /// Waits for at least `n` entries and returns them all.
    pub async fn wait_len(&self, n: usize) -> Vec<LogBody> {
        eventually(WAIT, &format!("{n} log entries"), || async {
            let bodies = self.bodies();
            (bodies.len() >= n).then_some(bodies)
        })
        .await
    }

    /// Waits for an entry matching `pred` and returns its index.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&LogBody) -> bool) -> usize {
        eventually(WAIT, what, || async {
            self.bodies().iter().position(&pred)
        })
        .await
    }
}

/// A log body reduced to `(kind, text)` for whole-log asserts.
pub fn brief(body: &LogBody) -> (String, String) {
    match body {
        LogBody::Human(e) => ("You".into(), e.text.clone()),
        LogBody::Arbiter(e) => ("Arbiter".into(), e.text.clone()),
        LogBody::ArbiterToOrchestrator(e) => (
            format!(
                "Arbiter → {}",
                arbiter_protocol::member_name(e.number, e.member)
            ),
            e.text.clone(),
        ),
        LogBody::Orchestrator(e) if e.expects_response => (
            arbiter_protocol::member_name(e.number, e.member),
            e.text.clone(),
        ),
        LogBody::Orchestrator(e) => (
            format!(
                "{} (note)",
                arbiter_protocol::member_name(e.number, e.member)
            ),
            e.text.clone(),
        ),
        LogBody::Musing(e) => ("Musing".into(), e.text.clone()),
        LogBody::Step(_) => ("Step".into(), String::new()),
        LogBody::Summoned(e) => (
            format!(
                "Summoned {}",
                arbiter_protocol::member_name(e.number, e.member)
            ),
            e.brief.clone(),
        ),
        LogBody::Released(e) => (
            "Released".into(),
            e.numbers
                .iter()
                .map(|n| arbiter_protocol::roman(*n))
                .collect::<Vec<_>>()
                .join(","),
        ),
        LogBody::System(e) => ("System".into(), e.text.clone()),
        LogBody::Rewound(e) => ("Rewound".into(), e.checkpoint.clone()),
        LogBody::ApprovalAsked(e) => (format!("Approval {} asked", e.approval), e.line()),
        LogBody::ApprovalAnswered(e) => (format!("Approval {} answered", e.approval), e.line()),
        LogBody::Error(e) => ("Error".into(), e.error.to_string()),
        LogBody::ArbiterHandoff(e) => (
            format!("Arbiter, generation {}", e.generation),
            e.packet.goal.clone(),
        ),
        LogBody::Strategy(e) => (
            "Strategy".into(),
            format!(
                "{} x{}{}",
                e.strategy.as_str(),
                e.members,
                e.rejected
                    .as_deref()
                    .map(|r| format!(" refused: {r}"))
                    .unwrap_or_default()
            ),
        ),
        LogBody::Consensus(e) => ("Consensus".into(), e.summary()),
    }
}

pub fn briefs(bodies: &[LogBody]) -> Vec<(String, String)> {
    bodies.iter().map(brief).collect()
}

pub fn pair(kind: &str, text: &str) -> (String, String) {
    (kind.to_owned(), text.to_owned())
}
