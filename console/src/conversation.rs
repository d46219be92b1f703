//! The conversation as the screen shows it: the log's entries, the Arbiter's
//! reply while it streams in, and the human's messages not yet in the log.

use arbiter_protocol::{
    ArbiterDelta, ArbiterIntent, LogBody, LogEntry, member_name, orchestrator_name, roman,
};
use chrono::{DateTime, Utc};

use crate::inert::escape;
use crate::shown::ShownSeqs;

/// Who speaks in one entry of the conversation, which decides how it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `You: …`
    Human,
    /// `Arbiter: …` (to the human)
    Arbiter,
    /// `Arbiter → I: …`
    ArbiterToOrchestrator(u32, Option<u32>),
    /// `Orchestrator I: …`, a message that waits for the Arbiter.
    Orchestrator(u32, Option<u32>),
    /// `Orchestrator I: …`, a status note (dimmed).
    Note(u32, Option<u32>),
    /// The Arbiter's private thoughts (hidden unless asked for).
    Musing,
    /// `· Orchestrator I summoned.` and other events (dimmed).
    Event,
    /// `? Approval 3: Orchestrator I asks to run bash: …`, a call that
    /// waits for the human's word.
    Approval,
    /// `· Evidence: …` under a report: what its worker saw (dimmed).
    Evidence,
    /// `! Check: …` under a report that claims work with nothing to show.
    Check,
    /// `! …`
    Error,
}

/// One entry of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub text: String,
}

impl Entry {
    fn new(kind: Kind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
        }
    }
}

/// The Arbiter's reply while the model writes it (from `session.<id>.delta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streaming {
    pub turn: u64,
    /// The attempt within the turn; a later one replaces what an earlier one wrote.
    pub attempt: u32,
    pub intent: Option<ArbiterIntent>,
    pub text: String,
    /// `at` of the newest piece.
    pub at: DateTime<Utc>,
}

/// A message this console sent that the log does not show yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub message_id: String,
    pub text: String,
}

/// Everything said in the session, in log order.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    entries: Vec<Entry>,
    /// The log seqs shown, each once.
    shown: ShownSeqs,
    streaming: Option<Streaming>,
    /// When the last reply was closed (by its log entry, or by an idle
    /// status); pieces written before then are stale.
    closed_at: Option<DateTime<Utc>>,
    pending: Vec<Pending>,
}

impl Conversation {
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn streaming(&self) -> Option<&Streaming> {
        self.streaming.as_ref()
    }

    pub fn pending(&self) -> &[Pending] {
        &self.pending
    }

    /// Highest log seq shown so far.
    pub fn last_seq(&self) -> u64 {
        self.shown.highest()
    }

    /// Adds a log entry. Returns the text of a human message, for the input
    /// history. An entry whose seq was already shown is ignored.
    pub fn log(&mut self, entry: &LogEntry) -> Option<String> {
        if !self.shown.first_time(entry.seq) {
            return None;
        }
        if closes_reply(&entry.body) {
            self.close(entry.at);
        }
        let mut human = None;
        match &entry.body {
            LogBody::Human(e) => {
                self.pending.retain(|p| p.message_id != e.message_id);
                self.entries.push(Entry::new(Kind::Human, escape(&e.text)));
                human = Some(e.text.clone());
            }
            LogBody::Arbiter(e) => self
                .entries
                .push(Entry::new(Kind::Arbiter, escape(&e.text))),
            LogBody::ArbiterToOrchestrator(e) => self.entries.push(Entry::new(
                Kind::ArbiterToOrchestrator(e.number, e.member),
                escape(&e.text),
            )),
            LogBody::Orchestrator(e) => {
                let kind = if e.expects_response {
                    Kind::Orchestrator(e.number, e.member)
                } else {
                    Kind::Note(e.number, e.member)
                };
                self.entries.push(Entry::new(kind, escape(&e.text)));
                if let Some(line) = crate::render::evidence_line(e) {
                    let kind = if line.flagged {
                        Kind::Check
                    } else {
                        Kind::Evidence
                    };
                    self.entries.push(Entry::new(kind, escape(&line.text)));
                }
            }
            LogBody::Musing(e) => self.entries.push(Entry::new(Kind::Musing, escape(&e.text))),
            LogBody::Summoned(e) => {
                let name = member_name(e.number, e.member);
                self.entries
                    .push(Entry::new(Kind::Event, format!("{name} summoned.")));
                self.entries.push(Entry::new(
                    Kind::ArbiterToOrchestrator(e.number, e.member),
                    escape(&e.brief),
                ));
            }
            LogBody::Released(e) => {
                let text = match (e.member, e.numbers.as_slice()) {
                    (Some(m), [n]) => format!("{} released.", member_name(*n, Some(m))),
                    _ => released(&e.numbers),
                };
                self.entries.push(Entry::new(Kind::Event, text));
            }
            LogBody::Strategy(e) => self.entries.push(Entry::new(
                Kind::Event,
                escape(&format!("Strategy: {}", crate::render::strategy(e))),
            )),
            LogBody::Consensus(e) => self.entries.push(Entry::new(
                Kind::Event,
                escape(&crate::render::consensus(e)),
            )),
            LogBody::System(e) => self.entries.push(Entry::new(Kind::Event, escape(&e.text))),
            LogBody::ApprovalAsked(e) => self
                .entries
                .push(Entry::new(Kind::Approval, crate::approval::asked_screen(e))),
            LogBody::ApprovalAnswered(e) => self.entries.push(Entry::new(
                Kind::Event,
                escape(&format!("Approval {}: {}", e.approval, e.line())),
            )),
            LogBody::Error(e) => self
                .entries
                .push(Entry::new(Kind::Error, escape(&e.error.to_string()))),
            LogBody::ArbiterHandoff(e) => self.entries.push(Entry::new(
                Kind::Event,
                escape(&crate::render::arbiter_handoff(e)),
            )),
            LogBody::Rewound(e) => self
                .entries
                .push(Entry::new(Kind::Event, escape(&crate::render::rewound(e)))),
            // Only the coordinator's record (the feed drops these first).
            LogBody::Step(_) => {}
        }
        human
    }

    /// Adds a line that is not in the log (a notice of this console).
    pub fn notice(&mut self, kind: Kind, text: &str) {
        self.entries.push(Entry::new(kind, escape(text)));
    }

    /// Adds a piece of the Arbiter's reply. A piece written before the last
    /// reply was closed is stale. Order is judged by `at` (the coordinator's
    /// clock for both deltas and log entries), not by `turn`, which a
    /// restarted coordinator may count afresh.
    pub fn delta(&mut self, delta: &ArbiterDelta) {
        if self.closed_at.is_some_and(|c| delta.at <= c) {
            return;
        }
        match &mut self.streaming {
            Some(s) if s.turn == delta.turn && s.attempt == delta.attempt => {
                s.text.push_str(&escape(&delta.text));
                s.intent = delta.intent.or(s.intent);
                s.at = s.at.max(delta.at);
            }
            // A piece of an attempt already given up.
            Some(s) if s.turn == delta.turn && delta.attempt < s.attempt => {}
            // A piece of an earlier reply, arriving late.
            Some(s) if delta.at < s.at => {}
            _ => {
                self.streaming = Some(Streaming {
                    turn: delta.turn,
                    attempt: delta.attempt,
                    intent: delta.intent,
                    text: escape(&delta.text),
                    at: delta.at,
                });
            }
        }
    }

    /// The Arbiter is idle and the log has been shown up to `last_seq`: a
    /// reply still streaming was abandoned (its turn failed), so it goes.
    pub fn idle(&mut self, last_seq: u64, at: DateTime<Utc>) {
        if last_seq <= self.shown.highest() && self.streaming.as_ref().is_some_and(|s| s.at <= at) {
            self.close(at);
        }
    }

    /// Ends the streamed reply at `at`.
    fn close(&mut self, at: DateTime<Utc>) {
        self.streaming = None;
        self.closed_at = Some(self.closed_at.map_or(at, |c| c.max(at)));
    }

    pub fn sending(&mut self, message_id: &str, text: &str) {
        self.pending.push(Pending {
            message_id: message_id.to_owned(),
            text: escape(text),
        });
    }

    /// The message could not be published: it will never reach the log.
    pub fn not_sent(&mut self, message_id: &str) {
        self.pending.retain(|p| p.message_id != message_id);
    }
}

/// Entries that end an Arbiter turn: they replace the streamed words.
fn closes_reply(body: &LogBody) -> bool {
    matches!(
        body,
        LogBody::Arbiter(_)
            | LogBody::ArbiterToOrchestrator(_)
            | LogBody::Musing(_)
            | LogBody::Summoned(_)
            | LogBody::Released(_)
            | LogBody::Error(_)
    )
}

fn released(numbers: &[u32]) -> String {
    match numbers {
        [] => "Orchestrators released.".to_owned(),
        [n] => format!("{} released.", orchestrator_name(*n)),
        _ => {
            let numerals: Vec<String> = numbers.iter().copied().map(roman).collect();
            format!("Orchestrators {} released.", numerals.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{
        ArbiterEntry, HumanEntry, MusingEntry, OrchestratorEntry, ReleasedEntry, SummonedEntry,
    };
    use chrono::Duration;
    use pretty_assertions::assert_eq;

    fn entry(seq: u64, at: DateTime<Utc>, body: LogBody) -> LogEntry {
        LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at,
            body,
        }
    }

    fn delta(turn: u64, at: DateTime<Utc>, text: &str) -> ArbiterDelta {
        ArbiterDelta {
            v: 1,
            session_id: "s".into(),
            turn,
            attempt: 0,
            intent: Some(ArbiterIntent::AddressHuman),
            text: text.into(),
            at,
        }
    }

    fn arbiter(text: &str) -> LogBody {
        LogBody::Arbiter(ArbiterEntry { text: text.into() })
    }

    #[test]
    fn a_report_is_followed_by_its_evidence_or_its_check() {
        let t = Utc::now();
        let mut c = Conversation::default();
        let report = |seq, text: &str, evidence| {
            entry(
                seq,
                t,
                LogBody::Orchestrator(OrchestratorEntry {
                    member: None,
                    number: 1,
                    orch_id: "o1".into(),
                    expects_response: true,
                    text: text.into(),
                    evidence,
                    handoff: None,
                }),
            )
        };
        let wrote = arbiter_protocol::Evidence {
            files: arbiter_protocol::FileChanges {
                created: vec!["a\u{202e}.py".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        c.log(&report(1, "Wrote it.", Some(wrote)));
        c.log(&report(2, "hello.py is created.", Some(Default::default())));
        c.log(&report(3, "Done.", None));
        assert_eq!(
            c.entries(),
            [
                Entry::new(Kind::Orchestrator(1, None), "Wrote it."),
                Entry::new(
                    Kind::Evidence,
                    "0 tool calls, 1 file changed (created: a\\u{202e}.py)"
                ),
                Entry::new(Kind::Orchestrator(1, None), "hello.py is created."),
                Entry::new(
                    Kind::Check,
                    "Orchestrator I reports done: 0 tool calls, 0 files changed. Nothing of it \
                     shows in the workspace."
                ),
                Entry::new(Kind::Orchestrator(1, None), "Done."),
            ]
        );
    }

    #[test]
    fn log_entries_become_conversation_entries() {
        let t = Utc::now();
        let mut c = Conversation::default();
        c.sending("m1", "hi");
        let human = c.log(&entry(
            1,
            t,
            LogBody::Human(HumanEntry {
                message_id: "m1".into(),
                text: "hi\tthere\u{1b}[31m".into(),
            }),
        ));
        assert_eq!(human.as_deref(), Some("hi\tthere\u{1b}[31m"));
        assert!(
            c.pending().is_empty(),
            "the log replaces the pending message"
        );
        c.log(&entry(
            2,
            t,
            LogBody::Summoned(SummonedEntry {
                member: None,
                number: 2,
                orch_id: "o2".into(),
                pool: "default".into(),
                brief: "Do it.".into(),
            }),
        ));
        c.log(&entry(
            3,
            t,
            LogBody::Orchestrator(OrchestratorEntry {
                member: None,
                number: 2,
                orch_id: "o2".into(),
                expects_response: false,
                text: "Working.".into(),
                evidence: None,
                handoff: None,
            }),
        ));
        c.log(&entry(3, t, arbiter("a duplicate seq is ignored")));
        c.log(&entry(
            4,
            t,
            LogBody::Released(ReleasedEntry {
                member: None,
                numbers: vec![1, 2],
            }),
        ));
        c.log(&entry(
            5,
            t,
            LogBody::Musing(MusingEntry { text: "Hm.".into() }),
        ));
        assert_eq!(
            c.entries(),
            [
                Entry::new(Kind::Human, "hi    there\\x1b[31m"),
                Entry::new(Kind::Event, "Orchestrator II summoned."),
                Entry::new(Kind::ArbiterToOrchestrator(2, None), "Do it."),
                Entry::new(Kind::Note(2, None), "Working."),
                Entry::new(Kind::Event, "Orchestrators I, II released."),
                Entry::new(Kind::Musing, "Hm."),
            ]
        );
        assert_eq!(c.last_seq(), 5);
    }

    #[test]
    fn the_screen_shows_active_characters_escaped() {
        // The human sees the override and the C1 CSI spelled out, where the
        // override used to reach the terminal and reverse the line.
        let t = Utc::now();
        let mut c = Conversation::default();
        c.log(&entry(
            1,
            t,
            arbiter("\u{202e}txet \u{9b}2J\u{1b}]0;t\u{7}"),
        ));
        c.notice(Kind::Error, "bad \u{2066}entry");
        assert_eq!(
            c.entries(),
            [
                Entry::new(Kind::Arbiter, "\\u{202e}txet \\u{9b}2J\\x1b]0;t\\x07"),
                Entry::new(Kind::Error, "bad \\u{2066}entry"),
            ]
        );
    }

    #[test]
    fn deltas_stream_until_the_log_entry_replaces_them() {
        let t = Utc::now();
        let mut c = Conversation::default();
        c.delta(&delta(1, t, "So it"));
        c.delta(&delta(1, t + Duration::milliseconds(1), " shall"));
        let s = c.streaming().unwrap();
        assert_eq!((s.turn, s.text.as_str()), (1, "So it shall"));

        c.log(&entry(
            1,
            t + Duration::milliseconds(5),
            arbiter("So it shall be."),
        ));
        assert_eq!(c.streaming(), None);
        // A late piece of the closed turn does not resurrect it.
        c.delta(&delta(1, t + Duration::milliseconds(2), " be."));
        assert_eq!(c.streaming(), None);
        // Nor does a piece older than the closing entry, whatever its turn.
        c.delta(&delta(7, t + Duration::milliseconds(3), "stale"));
        assert_eq!(c.streaming(), None);

        // The next turn starts a new reply; a late piece of the one before is dropped.
        c.delta(&delta(2, t + Duration::milliseconds(10), "Next"));
        c.delta(&delta(3, t + Duration::milliseconds(12), "Newer"));
        c.delta(&delta(2, t + Duration::milliseconds(11), " old"));
        assert_eq!(c.streaming().unwrap().text, "Newer");
        // A restarted coordinator counting turns afresh still streams.
        c.log(&entry(2, t + Duration::milliseconds(20), arbiter("Newer.")));
        c.delta(&delta(1, t + Duration::milliseconds(30), "Again"));
        assert_eq!(c.streaming().unwrap().text, "Again");
    }

    #[test]
    fn a_new_attempt_replaces_the_words_of_the_last() {
        let t = Utc::now();
        let ms = Duration::milliseconds;
        let mut c = Conversation::default();
        c.delta(&delta(4, t, "{broken"));
        let mut retry = delta(4, t + ms(2), "Fixed");
        retry.attempt = 1;
        c.delta(&retry);
        let mut late = delta(4, t + ms(1), " junk");
        late.attempt = 0;
        c.delta(&late);
        retry.text = " reply.".into();
        retry.at = t + ms(3);
        c.delta(&retry);
        let s = c.streaming().unwrap();
        assert_eq!((s.attempt, s.text.as_str()), (1, "Fixed reply."));
    }

    #[test]
    fn an_idle_session_drops_an_abandoned_reply() {
        let t = Utc::now();
        let mut c = Conversation::default();
        c.log(&entry(1, t, arbiter("One.")));
        c.delta(&delta(2, t + Duration::seconds(1), "half a rep"));
        c.idle(2, t + Duration::seconds(2));
        assert!(c.streaming().is_some(), "entry 2 may still be on its way");
        c.idle(1, t + Duration::seconds(2));
        assert_eq!(c.streaming(), None);
        c.delta(&delta(2, t + Duration::milliseconds(1_500), "ly"));
        assert_eq!(c.streaming(), None, "a late piece of the abandoned reply");
    }

    #[test]
    fn a_split_consensus_is_an_event_line_of_the_tui() {
        use arbiter_protocol::{ConsensusEntry, ConsensusOutcome, DecisionVotes};
        let mut c = Conversation::default();
        let votes = |decision: &str, members: &[u32]| DecisionVotes {
            decision: decision.into(),
            members: members.to_vec(),
        };
        c.log(&entry(
            1,
            Utc::now(),
            LogBody::Consensus(ConsensusEntry {
                number: 2,
                members: 3,
                outcome: ConsensusOutcome::Split,
                decisions: vec![votes("ship", &[1, 3]), votes("hold\u{202e}", &[2])],
                no_verdict: Vec::new(),
                verdicts: Vec::new(),
            }),
        ));
        assert_eq!(
            c.entries(),
            [Entry::new(
                Kind::Event,
                "Consensus on Orchestrator II: split 2–1: \"ship\" (II.1, II.3) vs \
                 \"hold\\u{202e}\" (II.2)"
            )]
        );
    }

    #[test]
    fn unsent_messages_are_withdrawn() {
        let mut c = Conversation::default();
        c.sending("m1", "one");
        c.sending("m2", "two");
        c.not_sent("m1");
        assert_eq!(
            c.pending(),
            [Pending {
                message_id: "m2".into(),
                text: "two".into()
            }]
        );
    }
}
