//! Tool-call approvals in a console (docs/approvals.md): how an asked one
//! reads (with what to type to answer it), and which wait in the session
//! the full-screen view shows, for its prompt and its bell.
//!
//! The log is the truth: an approval waits from its asked entry until its
//! answered entry. A session status is the truth up to its `last_seq`: an
//! approval asked at or before it that the status does not list is not
//! waiting any more (answered before this console attached, or withdrawn
//! when its Orchestrator ended, which logs no answer).

use arbiter_protocol::{ApprovalAskedEntry, LogBody, LogEntry, SessionStatus, member_name};
use chrono::{DateTime, Utc};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::inert;

/// The keys of the full-screen prompt.
const KEYS: &str = "? [y]es once / [a]lways / [n]o";

/// The command or path an asked call is about (its arguments, as JSON,
/// when the tool has neither). Not yet inert.
fn what(e: &ApprovalAskedEntry) -> String {
    arbiter_protocol::approval::subject(&e.request.tool, &e.request.input)
        .unwrap_or_else(|| e.request.input.to_string())
}

/// The line modes' form of an asked approval: who asks to run what, and
/// what to type: `? Approval 3: Orchestrator I asks to run bash: git push
/// origin main (ask bash(git push*)) — /allow 3, /always 3, /deny 3 [reason]`.
/// The arguments are the model's: made inert, a newline in them marked as
/// a continuation, never a line of its own.
pub fn asked_plain(e: &ApprovalAskedEntry) -> String {
    let n = e.approval;
    inert::block(
        &format!("? Approval {n}: "),
        &format!("{} — /allow {n}, /always {n}, /deny {n} [reason]", e.line()),
    )
}

/// The full-screen view's conversation line of an asked approval, on one
/// line whatever the arguments hold: `Approval 3: Orchestrator I asks to
/// run bash: git push origin main (ask bash(git push*))`.
pub fn asked_screen(e: &ApprovalAskedEntry) -> String {
    inert::one_line(&format!("Approval {}: {}", e.approval, e.line()))
}

/// An approval waiting in the session viewed, inert and on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub approval: u32,
    /// The log seq of its asked entry.
    pub seq: u64,
    /// `Orchestrator I`, `Orchestrator II.2`.
    pub who: String,
    pub tool: String,
    /// The command or path.
    pub what: String,
    pub deadline: DateTime<Utc>,
}

/// The approvals waiting in the session the full-screen view shows.
#[derive(Debug, Clone, Default)]
pub struct Approvals {
    /// Oldest first.
    waiting: Vec<Asked>,
    /// The newest session status: its `last_seq`, its `at`, the approvals it lists.
    status: Option<(u64, DateTime<Utc>, Vec<u32>)>,
    /// Answers this console sent that the log does not show yet:
    /// (message id, approval).
    sent: Vec<(String, u32)>,
    /// The highest approval the bell rang for.
    rung: u32,
}

impl Approvals {
    /// Takes a log entry: an asked approval waits, an answered one no longer.
    pub fn log(&mut self, entry: &LogEntry) {
        match &entry.body {
            LogBody::ApprovalAsked(e) => {
                if self.waiting.iter().any(|w| w.approval == e.approval)
                    || self.settled(entry.seq, e.approval)
                {
                    return;
                }
                let at = self.waiting.partition_point(|w| w.approval < e.approval);
                self.waiting.insert(
                    at,
                    Asked {
                        approval: e.approval,
                        seq: entry.seq,
                        who: member_name(e.number, e.member),
                        tool: inert::one_line(&e.request.tool),
                        what: inert::one_line(&what(e)),
                        deadline: e.deadline,
                    },
                );
            }
            LogBody::ApprovalAnswered(e) => self.gone(e.approval),
            _ => {}
        }
    }

    /// Takes a session status: approvals asked up to its `last_seq` that it
    /// does not list wait no more. An older status changes nothing.
    pub fn status(&mut self, status: &SessionStatus) {
        if self
            .status
            .as_ref()
            .is_some_and(|(seq, at, _)| (*seq, *at) > (status.last_seq, status.at))
        {
            return;
        }
        let listed = status.approvals.iter().map(|a| a.approval).collect();
        self.status = Some((status.last_seq, status.at, listed));
        let settled: Vec<u32> = self
            .waiting
            .iter()
            .filter(|w| self.settled(w.seq, w.approval))
            .map(|w| w.approval)
            .collect();
        for approval in settled {
            self.gone(approval);
        }
    }

    /// Whether the newest status says that `approval`, asked at `seq`, is
    /// not waiting.
    fn settled(&self, seq: u64, approval: u32) -> bool {
        self.status
            .as_ref()
            .is_some_and(|(last_seq, _, listed)| seq <= *last_seq && !listed.contains(&approval))
    }

    fn gone(&mut self, approval: u32) {
        self.waiting.retain(|w| w.approval != approval);
        self.sent.retain(|(_, a)| *a != approval);
    }

    /// Every approval waiting, oldest first.
    pub fn waiting(&self) -> &[Asked] {
        &self.waiting
    }

    /// The oldest approval this console has not answered yet, and how many
    /// more wait after it.
    pub fn next(&self) -> Option<(&Asked, usize)> {
        let mut open = self
            .waiting
            .iter()
            .filter(|w| !self.sent.iter().any(|(_, a)| *a == w.approval));
        let first = open.next()?;
        Some((first, open.count()))
    }

    /// An answer to `approval` went out as message `message_id`: the prompt
    /// moves on to the next while the log has yet to say so.
    pub fn sent(&mut self, message_id: &str, approval: u32) {
        self.sent.push((message_id.to_owned(), approval));
    }

    /// The message could not be published: its approval is asked again.
    pub fn not_sent(&mut self, message_id: &str) {
        self.sent.retain(|(id, _)| id != message_id);
    }

    /// Whether the bell is to ring: an approval waits that it has not rung
    /// for yet. Each rings once.
    pub fn bell(&mut self) -> bool {
        match self.waiting.iter().map(|w| w.approval).max() {
            Some(newest) if newest > self.rung => {
                self.rung = newest;
                true
            }
            _ => false,
        }
    }
}

/// The prompt above the input, within `width` columns: `Allow bash: git
/// push origin main? [y]es once / [a]lways / [n]o (+2 more)`. The command is
/// cut first, so the keys stay in view; `None` when nothing waits for this
/// console's answer.
pub fn prompt(approvals: &Approvals, width: usize) -> Option<String> {
    let Some((asked, more)) = approvals.next() else {
        let sent = approvals.waiting.first()?;
        return Some(cut(
            &format!("Approval {}: your answer is on its way ⋯", sent.approval),
            width,
        ));
    };
    let head = format!("Allow {}: ", asked.tool);
    let tail = match more {
        0 => KEYS.to_owned(),
        n => format!("{KEYS} (+{n} more)"),
    };
    let room = width.saturating_sub(head.width() + tail.width());
    if room < 8 {
        // Too narrow for the command: the keys stay (the conversation has it).
        return Some(cut(&format!("Allow {}{tail}", asked.tool), width));
    }
    Some(format!("{head}{}{tail}", cut(&asked.what, room)))
}

/// `text` within `width` columns, `…` at its end when cut.
fn cut(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{
        Answerer, ApprovalAnsweredEntry, ApprovalDecision, ApprovalRequest, WaitingApproval,
    };
    use pretty_assertions::assert_eq;

    fn asked(approval: u32, command: &str) -> LogBody {
        LogBody::ApprovalAsked(ApprovalAskedEntry {
            approval,
            number: 1,
            member: None,
            orch_id: "o1".into(),
            request: ApprovalRequest {
                call_id: format!("call-{approval}"),
                tool: "bash".into(),
                input: serde_json::json!({ "command": command }),
                rule: "ask bash(git push*)".into(),
            },
            deadline: Utc::now(),
        })
    }

    fn answered(approval: u32) -> LogBody {
        LogBody::ApprovalAnswered(ApprovalAnsweredEntry {
            approval,
            number: 1,
            member: None,
            orch_id: "o1".into(),
            call_id: format!("call-{approval}"),
            decision: ApprovalDecision::AllowOnce,
            reason: None,
            by: Answerer::Console {
                name: "alice".into(),
            },
            rule: None,
            input_seq: 1,
        })
    }

    fn entry(seq: u64, body: LogBody) -> LogEntry {
        LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at: Utc::now(),
            body,
        }
    }

    fn status(last_seq: u64, listed: &[u32]) -> SessionStatus {
        let mut status: SessionStatus = serde_json::from_value(serde_json::json!({
            "session_id": "s", "state": "idle", "queued": 0, "arbiter_context_pct": 0.0,
            "arbiter_context_tokens": 0, "summoned": 0, "last_seq": last_seq,
            "created_at": "2026-11-26T00:00:00Z", "at": Utc::now()
        }))
        .unwrap();
        status.approvals = listed
            .iter()
            .map(|&approval| WaitingApproval {
                approval,
                number: 1,
                member: None,
                tool: "bash".into(),
                summary: "x".into(),
                asked_at: Utc::now(),
                deadline: Utc::now(),
            })
            .collect();
        status
    }

    fn numbers(a: &Approvals) -> Vec<u32> {
        a.waiting().iter().map(|w| w.approval).collect()
    }

    #[test]
    fn an_asked_approval_reads_with_what_to_type() {
        let LogBody::ApprovalAsked(e) = asked(3, "git push origin main") else {
            unreachable!()
        };
        assert_eq!(
            asked_plain(&e),
            "? Approval 3: Orchestrator I asks to run bash: git push origin main (ask \
             bash(git push*)) — /allow 3, /always 3, /deny 3 [reason]"
        );
        assert_eq!(
            asked_screen(&e),
            "Approval 3: Orchestrator I asks to run bash: git push origin main (ask \
             bash(git push*))"
        );
    }

    #[test]
    fn hostile_arguments_stay_inert_and_in_their_line() {
        let LogBody::ApprovalAsked(e) = asked(2, "ls\u{1b}[2J\nArbiter: all is well\u{202e}")
        else {
            unreachable!()
        };
        let plain = asked_plain(&e);
        assert_eq!(
            plain,
            "? Approval 2: Orchestrator I asks to run bash: ls\\x1b[2J\n  │ Arbiter: all is \
             well\\u{202e} (ask bash(git push*)) — /allow 2, /always 2, /deny 2 [reason]"
        );
        let screen = asked_screen(&e);
        assert!(!screen.contains('\n'), "{screen}");
        assert!(
            screen.contains("ls\\x1b[2J\\x0aArbiter: all is well"),
            "{screen}"
        );
        for text in [plain, screen] {
            assert!(
                !text.chars().any(|c| c != '\n' && inert::is_active(c)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn waiting_from_the_log_until_answered() {
        let mut a = Approvals::default();
        a.log(&entry(1, asked(1, "git push")));
        a.log(&entry(2, asked(2, "rm -rf build")));
        a.log(&entry(2, asked(2, "rm -rf build")));
        assert_eq!(numbers(&a), [1, 2]);
        assert!(a.bell(), "new approvals ring");
        assert!(!a.bell(), "once");
        let (next, more) = a.next().unwrap();
        assert_eq!((next.approval, more), (1, 1));
        a.log(&entry(3, answered(1)));
        assert_eq!(numbers(&a), [2]);
        assert!(!a.bell(), "an answer does not ring");
        a.log(&entry(4, asked(3, "git push -f")));
        assert!(a.bell());
    }

    #[test]
    fn a_status_settles_what_it_no_longer_lists() {
        // Attaching: the stored status (at seq 10) lists approval 2 only; the
        // replay brings 1 (answered before, its answer later in the replay) and 2.
        let mut a = Approvals::default();
        a.status(&status(10, &[2]));
        a.log(&entry(3, asked(1, "git push")));
        a.log(&entry(5, asked(2, "git push -f")));
        assert_eq!(numbers(&a), [2], "1 was settled before the console came");
        assert!(a.bell(), "2 still waits: the human is told");
        // Asked after the status: the status cannot speak of it.
        a.log(&entry(11, asked(3, "git push --tags")));
        assert_eq!(numbers(&a), [2, 3]);
        // Its Orchestrator ended: withdrawn, with no answer in the log.
        a.status(&status(12, &[3]));
        assert_eq!(numbers(&a), [3]);
        // An older status changes nothing.
        a.status(&status(9, &[]));
        assert_eq!(numbers(&a), [3]);
    }

    #[test]
    fn an_answer_sent_moves_the_prompt_on() {
        let mut a = Approvals::default();
        a.log(&entry(1, asked(1, "git push")));
        a.log(&entry(2, asked(2, "git push -f")));
        a.sent("m1", 1);
        assert_eq!(a.next().map(|(w, more)| (w.approval, more)), Some((2, 0)));
        a.sent("m2", 2);
        assert!(a.next().is_none());
        assert_eq!(
            prompt(&a, 80).unwrap(),
            "Approval 1: your answer is on its way ⋯"
        );
        a.not_sent("m1");
        assert_eq!(a.next().map(|(w, _)| w.approval), Some(1));
    }

    #[test]
    fn the_prompt_keeps_its_keys_in_view() {
        let mut a = Approvals::default();
        assert_eq!(prompt(&a, 80), None);
        a.log(&entry(1, asked(1, "git push origin main")));
        assert_eq!(
            prompt(&a, 80).unwrap(),
            "Allow bash: git push origin main? [y]es once / [a]lways / [n]o"
        );
        a.log(&entry(2, asked(2, "x")));
        a.log(&entry(3, asked(3, "y")));
        assert_eq!(
            prompt(&a, 60).unwrap(),
            "Allow bash: git pus…? [y]es once / [a]lways / [n]o (+2 more)"
        );
        assert_eq!(prompt(&a, 60).unwrap().width(), 60);
        assert_eq!(
            prompt(&a, 52).unwrap(),
            "Allow bash? [y]es once / [a]lways / [n]o (+2 more)"
        );
        assert_eq!(prompt(&a, 30).unwrap(), "Allow bash? [y]es once / [a]l…");
    }
}
