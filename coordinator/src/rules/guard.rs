//! Guards against work that runs away: an exchange between the Arbiter and its
//! Orchestrator that makes no progress (the same words back and forth, no tool
//! calls between), more Arbiter turns for one human message than the cap, and
//! the human's own `/stop`. Each puts the session **on hold**: no Arbiter turn
//! starts until the human writes again; what was queued waits with the hold
//! and reaches the Arbiter with the human's next message, so nothing is lost.

use std::collections::VecDeque;

use arbiter_protocol::{
    Control, ControlAction, LogBody, ReleasedEntry, SystemEntry, VERSION, member_name,
    orchestrator_name,
};
use serde::{Deserialize, Serialize};

use crate::rules::Core;
use crate::state::{Effect, Pending};

/// Rounds in a row without progress before an exchange is stopped, by default.
pub const DEFAULT_LOOP_ROUNDS: u32 = 3;
/// Arbiter turns for one human message, by default: generous (a long task
/// takes a few turns per Orchestrator generation), but finite.
pub const DEFAULT_MAX_TURNS_PER_MESSAGE: u32 = 100;
/// How alike two messages must be (0–1, over their words) to count as the same.
const SAME_ENOUGH: f64 = 0.8;
/// Characters of a message compared: enough to tell, bounded in cost.
const COMPARED_CHARS: usize = 4000;

/// Why the session holds, and what waits for the human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Hold {
    pub reason: String,
    pub waiting: VecDeque<Pending>,
    /// Held at the session's budget cap: only raising the cap ends it (see
    /// `budget.rs`), not the human's next message.
    #[serde(default)]
    pub budget: bool,
}

/// What the guard remembers of the exchange with the active Orchestrator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Exchange {
    /// The Arbiter's last two messages to the Orchestrator, newest last.
    pub to_orchestrator: VecDeque<String>,
    /// The Orchestrator's last report.
    pub last_report: Option<String>,
    /// Its tool calls so far, as the worker's evidence counts them.
    pub tool_calls: Option<u64>,
    /// Rounds in a row that made no progress.
    pub stale_rounds: u32,
}

impl Exchange {
    /// A round ends with `report`: true when it is the `limit`-th in a row
    /// that made no progress (the count starts again).
    pub(crate) fn round(&mut self, report: &str, tool_calls: Option<u64>, limit: u32) -> bool {
        let report = clip(report);
        let said = self.to_orchestrator.back();
        let report_stale = self
            .last_report
            .as_deref()
            .is_some_and(|r| same(r, &report))
            || said.is_some_and(|s| same(s, &report));
        let arbiter_stale = said.is_some_and(|s| {
            self.to_orchestrator.len() == 2 && same(&self.to_orchestrator[0], s)
                || self.last_report.as_deref().is_some_and(|r| same(r, s))
        });
        let no_tools = match (self.tool_calls, tool_calls) {
            (Some(before), Some(now)) => now <= before,
            _ => true,
        };
        self.stale_rounds = if report_stale && arbiter_stale && no_tools {
            self.stale_rounds + 1
        } else {
            0
        };
        self.last_report = Some(report);
        if tool_calls.is_some() {
            self.tool_calls = tool_calls;
        }
        if limit > 0 && self.stale_rounds >= limit {
            self.stale_rounds = 0;
            return true;
        }
        false
    }
}

impl Core {
    /// Puts something in line for the Arbiter: queued, or with the hold.
    pub(crate) fn enqueue(&mut self, pending: Pending) {
        match self.state.hold.as_mut() {
            Some(hold) => hold.waiting.push_back(pending),
            None => self.state.queue.push_back(pending),
        }
    }

    /// Stops Arbiter turns until the human writes; says why in one line.
    pub(crate) fn hold(&mut self, reason: String) {
        self.log(LogBody::System(SystemEntry {
            text: reason.clone(),
        }));
        let waiting = std::mem::take(&mut self.state.queue);
        match self.state.hold.as_mut() {
            Some(hold) => hold.waiting.extend(waiting),
            None => {
                self.state.hold = Some(Hold {
                    reason,
                    waiting,
                    budget: false,
                });
            }
        }
    }

    /// The human wrote: a hold ends, and what waited goes first.
    pub(crate) fn human_spoke(&mut self) {
        self.state.turns_since_human = 0;
        self.state.attention = None;
        self.state.exchange.stale_rounds = 0;
        if self.state.hold.as_ref().is_some_and(|h| h.budget) {
            // Held at the budget cap: the message waits with the hold.
            return;
        }
        if let Some(hold) = self.state.hold.take() {
            let mut queue = hold.waiting;
            queue.append(&mut self.state.queue);
            self.state.queue = queue;
        }
    }

    /// Before a turn starts: past the cap, the session holds instead.
    /// True when the turn may start.
    pub(crate) fn may_start_turn(&mut self) -> bool {
        let cap = self.config.max_turns_per_message;
        if cap == 0 || self.state.turns_since_human < cap {
            self.state.turns_since_human += 1;
            return true;
        }
        self.hold(format!(
            "Held: the Arbiter took {cap} turns since your last message (the limit, \
             arbiter-coordinator --max-turns-per-message or ARBITER_MAX_TURNS_PER_MESSAGE). \
             Write to go on, or /stop."
        ));
        self.notify(
            arbiter_protocol::NotificationKind::NeedsInput,
            format!("The session holds: the Arbiter took {cap} turns since your last message. Write to go on, or /stop."),
        );
        false
    }

    /// The Arbiter speaks to its Orchestrator.
    pub(crate) fn note_to_orchestrator(&mut self, text: &str) {
        let sent = &mut self.state.exchange.to_orchestrator;
        sent.push_back(clip(text));
        while sent.len() > 2 {
            sent.pop_front();
        }
    }

    /// The Orchestrator reported and waits for an answer: a round ends. A
    /// round makes no progress when the report repeats the last one or
    /// echoes the Arbiter, the Arbiter's message repeated its last one or
    /// echoed the report before, and no tool was called in between (as far
    /// as the worker's evidence tells; without evidence, words alone count).
    pub(crate) fn check_round(&mut self, number: u32, report: &str, tool_calls: Option<u64>) {
        let limit = self.config.loop_rounds;
        if self.state.exchange.round(report, tool_calls, limit) {
            let rounds = limit;
            self.hold(format!(
                "Held: the Arbiter and {} have repeated themselves for {rounds} rounds with no \
                 tool call between, so the exchange was stopped. Write to go on (say what should \
                 change), or /stop.",
                orchestrator_name(number)
            ));
            self.notify(
                arbiter_protocol::NotificationKind::NeedsInput,
                format!(
                    "The session holds: the Arbiter and {} repeated themselves for {rounds} rounds. Write to go on, or /stop.",
                    orchestrator_name(number)
                ),
            );
        }
    }

    /// A new Orchestrator: its exchange starts afresh.
    pub(crate) fn new_exchange(&mut self) {
        self.state.exchange = Exchange::default();
    }

    /// The human's `/stop`: the Arbiter's turn is abandoned, the active
    /// Orchestrator cancelled, and the session holds until the human writes.
    /// Returns true when a running turn must be abandoned.
    pub(crate) fn stop(&mut self, console: &str) -> bool {
        let abandon = self.state.turn_in_flight;
        self.state.turn_in_flight = false;
        let mut stopped = Vec::new();
        if abandon {
            stopped.push("the Arbiter's turn was abandoned".to_owned());
        }
        self.state.gather = None;
        for active in std::mem::take(&mut self.state.team) {
            self.effect(Effect::Control(Control {
                v: VERSION,
                orch_id: active.orch_id.clone(),
                action: ControlAction::Cancel,
                sent_at: self.now.wall,
            }));
            self.state.notes.retain(|(n, _)| *n != active.number);
            self.log(LogBody::Released(ReleasedEntry {
                numbers: vec![active.number],
                member: active.member,
            }));
            stopped.push(format!(
                "{} was cancelled",
                member_name(active.number, active.member)
            ));
        }
        if stopped.is_empty() {
            stopped.push("nothing was running".to_owned());
        }
        let what = stopped.join("; ");
        let note = format!(
            "The human stopped the work ({what}). Wait for the human's next message before acting."
        );
        // Writing does not end a hold at the budget cap: only raising it does.
        let go_on = if self.state.hold.as_ref().is_some_and(|h| h.budget) {
            "The session is held at its budget cap: raise it (/budget) to go on."
        } else {
            "Write to go on."
        };
        self.hold(format!("Stopped by console {console}: {what}. {go_on}"));
        self.enqueue(Pending::System { text: note });
        abandon
    }
}

/// A message cut to the part compared.
fn clip(text: &str) -> String {
    text.chars().take(COMPARED_CHARS).collect()
}

/// Whether two messages say the same thing: equal once case, punctuation
/// and spacing are set aside, or sharing nearly all their words. Numbers
/// and Roman numerals are set aside too: an echo that counts its rounds
/// ("Orchestrator II.1 …", "Orchestrator II.14 …") is still an echo, and a
/// round that made progress shows it by its tool calls, not by a counter.
fn same(a: &str, b: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty() && !is_counter(w))
            .map(str::to_lowercase)
            .collect()
    };
    let (a, b) = (words(a), words(b));
    if a.is_empty() || b.is_empty() {
        return a == b;
    }
    if a == b {
        return true;
    }
    let a: std::collections::HashSet<&String> = a.iter().collect();
    let b: std::collections::HashSet<&String> = b.iter().collect();
    let shared = a.intersection(&b).count() as f64;
    let all = a.union(&b).count() as f64;
    shared / all >= SAME_ENOUGH
}

/// A word that only counts: digits, or a Roman numeral (`II`, `xiv`).
fn is_counter(word: &str) -> bool {
    word.chars().all(|c| c.is_ascii_digit())
        || word
            .chars()
            .all(|c| matches!(c.to_ascii_lowercase(), 'i' | 'v' | 'x' | 'l' | 'c'))
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn an_echo_that_counts_its_rounds_is_still_an_echo() {
        // (one message, the next, the same?)
        let cases = [
            (
                "Orchestrator II.1: continue with hello.py.",
                "Orchestrator II.14: continue with hello.py.",
                true,
            ),
            ("Try again (attempt 3).", "Try again (attempt 4).", true),
            (
                "Round 9 of 10: make sure the file exists",
                "Round 10 of 10: make sure the file exists",
                true,
            ),
            ("Create hello.py.", "Run hello.py with python3.", false),
            (
                "Wrote 14 bytes to hello.py",
                "Ran hello.py: it printed hello",
                false,
            ),
        ];
        for (a, b, expected) in cases {
            assert_eq!(same(a, b), expected, "{a:?} / {b:?}");
        }
    }

    #[test]
    fn the_same_words_are_the_same_message() {
        assert!(same("Please create hello.py.", "please create hello.py"));
        assert!(same(
            "I will create hello.py now and report back",
            "I will create hello.py now, and report back."
        ));
        assert!(!same(
            "Create hello.py.",
            "hello.py is created and runs: prints hi"
        ));
        assert!(!same("", "something"));
    }
}
