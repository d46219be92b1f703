//! When a console whose input has ended may exit: everything it sent is in
//! the log, the Arbiter is idle, and the log has been shown up to the status.

use std::collections::HashSet;

use arbiter_protocol::{LogBody, LogEntry, SessionState, SessionStatus};

/// What this console has sent and seen so far.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Message ids sent and not yet seen in the log.
    pending: HashSet<String>,
    sent_any: bool,
    /// Log entries seen, valid or not.
    entries: u64,
    /// Highest log seq seen (hidden musings and readable malformed entries included).
    max_seq: u64,
    /// Seq of the newest entry that logged a message this console sent.
    own_seq: u64,
    status: Option<SessionStatus>,
}

impl Progress {
    /// Records a message about to be published, before it is, so that its log
    /// entry cannot be missed.
    pub(crate) fn sending(&mut self, message_id: &str) {
        self.pending.insert(message_id.to_owned());
        self.sent_any = true;
    }

    /// The publish failed: the message will never show up in the log.
    pub(crate) fn not_sent(&mut self, message_id: &str) {
        self.pending.remove(message_id);
    }

    pub(crate) fn entry(&mut self, entry: &LogEntry) {
        self.seen(Some(entry.seq));
        if let LogBody::Human(human) = &entry.body
            && self.pending.remove(&human.message_id)
        {
            self.own_seq = self.own_seq.max(entry.seq);
        }
    }

    /// An entry that could not be decoded; `seq` if it could still be read.
    pub(crate) fn malformed(&mut self, seq: Option<u64>) {
        self.seen(seq);
    }

    fn seen(&mut self, seq: Option<u64>) {
        self.entries += 1;
        if let Some(seq) = seq {
            self.max_seq = self.max_seq.max(seq);
        }
    }

    /// Keeps the newest status; the bucket read at start may lose a race with
    /// a live one.
    pub(crate) fn status(&mut self, status: SessionStatus) {
        match &self.status {
            Some(current) if current.at > status.at => {}
            _ => self.status = Some(status),
        }
    }

    /// Whether the session has settled. `replay_window_over` matters only for a
    /// session with no status at all: then an empty log after the window means
    /// there is nothing to wait for.
    pub(crate) fn settled(&self, replay_window_over: bool) -> bool {
        if !self.pending.is_empty() {
            return false;
        }
        match &self.status {
            // `own_seq` guards against a status older than our own messages:
            // it would say idle while the Arbiter has yet to answer them.
            Some(s) => {
                s.state == SessionState::Idle
                    && s.queued == 0
                    && s.active.is_none()
                    && s.last_seq <= self.max_seq
                    && s.last_seq >= self.own_seq
            }
            None => !self.sent_any && self.entries == 0 && replay_window_over,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{ActiveOrchestrator, ArbiterEntry, HumanEntry};
    use chrono::{Duration, Utc};

    fn entry(seq: u64, body: LogBody) -> LogEntry {
        LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at: Utc::now(),
            body,
        }
    }

    fn human(seq: u64, id: &str) -> LogEntry {
        entry(
            seq,
            LogBody::Human(HumanEntry {
                message_id: id.into(),
                text: "hi".into(),
            }),
        )
    }

    fn arbiter(seq: u64) -> LogEntry {
        entry(seq, LogBody::Arbiter(ArbiterEntry { text: "ok".into() }))
    }

    fn status(state: SessionState, last_seq: u64) -> SessionStatus {
        SessionStatus {
            team: Vec::new(),
            spend: Default::default(),
            archived_at: None,
            budget: Default::default(),
            approvals: Vec::new(),
            attention: None,
            v: 1,
            session_id: "s".into(),
            state,
            queued: 0,
            arbiter_context_pct: 0.0,
            arbiter_context_tokens: 0,
            active: None,
            summoned: 0,
            last_seq,
            created_at: Utc::now(),
            at: Utc::now(),
        }
    }

    #[test]
    fn empty_session_settles_after_the_replay_window() {
        let p = Progress::default();
        assert!(!p.settled(false));
        assert!(p.settled(true));
    }

    #[test]
    fn a_log_without_status_never_settles() {
        let mut p = Progress::default();
        p.entry(&arbiter(1));
        assert!(!p.settled(true));
    }

    #[test]
    fn waits_for_own_message_then_idle_status_then_replay() {
        let mut p = Progress::default();
        p.status(status(SessionState::Idle, 0));
        p.sending("m1");
        assert!(!p.settled(true), "message not logged yet");
        p.entry(&human(1, "m1"));
        assert!(!p.settled(true), "status predates our message");
        p.status(status(SessionState::Thinking, 1));
        assert!(!p.settled(true), "thinking");
        p.status(status(SessionState::Idle, 2));
        assert!(!p.settled(true), "entry 2 not shown yet");
        p.entry(&arbiter(2));
        assert!(p.settled(false));
    }

    #[test]
    fn busy_states_do_not_settle() {
        let mut p = Progress::default();
        p.entry(&arbiter(1));
        let mut queued = status(SessionState::Idle, 1);
        queued.queued = 1;
        p.status(queued);
        assert!(!p.settled(true));
        let mut active = status(SessionState::Idle, 1);
        active.active = Some(ActiveOrchestrator {
            member: None,
            reported: false,
            orch_id: "o1".into(),
            number: 1,
        });
        p.status(active);
        assert!(!p.settled(true));
        p.status(status(SessionState::Idle, 1));
        assert!(p.settled(false));
    }

    #[test]
    fn failed_sends_and_malformed_entries() {
        let mut p = Progress::default();
        p.status(status(SessionState::Idle, 2));
        p.sending("m1");
        p.not_sent("m1");
        p.entry(&arbiter(1));
        assert!(!p.settled(true));
        p.malformed(Some(2));
        assert!(p.settled(true));
    }

    #[test]
    fn an_older_status_does_not_replace_a_newer_one() {
        let mut p = Progress::default();
        p.entry(&arbiter(1));
        let newer = status(SessionState::Idle, 1);
        let mut older = status(SessionState::Thinking, 0);
        older.at = newer.at - Duration::seconds(1);
        p.status(newer);
        p.status(older);
        assert!(p.settled(false));
    }
}
