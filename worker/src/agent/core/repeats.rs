//! The stop for an Orchestrator that goes round in circles: the same tool
//! call (the tool and its arguments, normalised) made again and again, in a
//! row. At [`crate::Config::repeat_warn`] calls in a row the model is told,
//! with that call's result; at [`crate::Config::repeat_stop`] the call is
//! not run, the Orchestrator's work stops and the Arbiter gets a report
//! naming the call and the count (a normal output: it decides what comes
//! next). Any other call in between starts the count over. The count is
//! stored with the Orchestrator's snapshot, so a takeover goes on counting.
//!
//! What this catches is a model stuck on one call (the same `ls`, the same
//! failing test run with nothing edited in between); a poll that waits on
//! something changing is rarely that many identical calls in a row.
//!
//! A model can also go round a wider circle (`ls`, `cat a`, `ls`, `cat a`…).
//! So every call that ran is also kept as its call and its result: one whose
//! call and result were both seen before (among the last [`SEEN`]) brought
//! nothing new. [`crate::Config::stale_warn`] such calls in a row and the
//! model is told; [`crate::Config::stale_stop`] and the work stops, after
//! that call, the same way. A call that gave anything new (a file written, a
//! different output) starts that count over.
//!
//! And a model can talk instead of act: note after note (`expects_response:
//! false`) with no tool call between them, each saying the work goes on or
//! is done (a small model does this for a whole context window). At
//! [`IDLE_WARN`] such notes in a row the model is told, once, that a note
//! does no work; at [`IDLE_STOP`] the note goes to the Arbiter as a report
//! that the Orchestrator looks stuck, and it waits for an answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Calls of one tool with the same arguments in a row before the model is
/// told (0: never).
pub const DEFAULT_REPEAT_WARN: u32 = 5;
/// Calls in a row at which the call is not run and the work stops (0: never).
pub const DEFAULT_REPEAT_STOP: u32 = 10;
/// Calls in a row that brought nothing new (their call and result seen
/// before) before the model is told (0: never).
pub const DEFAULT_STALE_WARN: u32 = 15;
/// ... and at which the work stops (0: never).
pub const DEFAULT_STALE_STOP: u32 = 30;
/// Notes in a row with no tool call before each (since the output before
/// it) at which the model is told that notes do no work.
pub const IDLE_WARN: u32 = 2;
/// ... and at which the note goes to the Arbiter as a report that the
/// Orchestrator looks stuck.
pub const IDLE_STOP: u32 = 4;
/// Tool calls in a row that failed (an error result, or a command that
/// did not exit 0), whatever the calls, at which the model is told.
pub const FAILED_WARN: u32 = 6;
/// ... and at which the work stops and the Arbiter is told.
pub const FAILED_STOP: u32 = 12;
/// Characters of the call shown in a warning or a report.
const SHOWN_CHARS: usize = 200;
/// Calls and results kept to tell what is new.
const SEEN: usize = 128;

/// The last call and how many times in a row it was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Repeats {
    /// The last call, normalised (`tool {arguments}`), as a hash: its
    /// arguments may be large (a file's content), and the snapshot is
    /// stored with every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<u64>,
    /// Times it was made in a row (this one included).
    #[serde(default)]
    pub count: u32,
    /// The last calls that ran, each with its result, as hashes: what is
    /// not new.
    #[serde(default, skip_serializing_if = "std::collections::VecDeque::is_empty")]
    pub seen: std::collections::VecDeque<u64>,
    /// Calls in a row that brought nothing new.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stale: u32,
    /// Notes in a row with no tool call before each.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_notes: u32,
    /// The Orchestrator's tool count at its last output.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tools_at_output: u32,
    /// Tool calls in a row that failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What to do with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Run,
    /// Run it, and tell the model this (after its result).
    Warn(String),
    /// Do not run it: the work stops, and the Arbiter reads this.
    Stop(String),
}

impl Repeats {
    pub(crate) fn is_empty(&self) -> bool {
        self.call.is_none()
            && self.seen.is_empty()
            && self.idle_notes == 0
            && self.tools_at_output == 0
            && self.failed == 0
    }

    /// Counts a call that ran and whether it failed (`call`, [`normalised`],
    /// for the report): [`FAILED_WARN`] failures in a row and the model is
    /// told, [`FAILED_STOP`] and the work stops. One success starts over.
    pub(crate) fn failed(&mut self, call: &str, failed: bool) -> Verdict {
        if !failed {
            self.failed = 0;
            return Verdict::Run;
        }
        self.failed = self.failed.saturating_add(1);
        let n = self.failed;
        if n >= FAILED_STOP {
            self.failed = 0;
            return Verdict::Stop(format!(
                "Stopped: my last {n} tool calls all failed (the last was {}). Tell me what \
                 to do differently, or release me.",
                shown(call)
            ));
        }
        if n == FAILED_WARN {
            return Verdict::Warn(format!(
                "[system] Your last {n} tool calls all failed. Read the errors, and change \
                 what you do (check the path, read the file before you edit it, run a \
                 simpler command), or report to the Arbiter what blocks you. At {FAILED_STOP} \
                 failures in a row your work is stopped and the Arbiter is told."
            ));
        }
        Verdict::Run
    }

    /// Counts an output made when the Orchestrator had made `tool_count`
    /// tool calls in all: a note (`note`) with no tool call since the
    /// output before it is idle. Says what to do with a note.
    pub(crate) fn output(&mut self, tool_count: u32, note: bool) -> Verdict {
        let acted = tool_count != self.tools_at_output;
        self.tools_at_output = tool_count;
        if !note || acted {
            self.idle_notes = 0;
            return Verdict::Run;
        }
        self.idle_notes = self.idle_notes.saturating_add(1);
        let idle = self.idle_notes;
        if idle >= IDLE_STOP {
            self.idle_notes = 0;
            return Verdict::Stop(format!(
                "[system] Stopped: I sent {idle} notes in a row without calling a tool \
                 between them, so my work has not moved. Tell me exactly which tool to call \
                 next, or release me. My last note:"
            ));
        }
        if idle == IDLE_WARN {
            return Verdict::Warn(format!(
                "[system] That is {idle} notes in a row with no tool call: a note does no \
                 work, and says nothing the workspace shows. Call the tool that does the next \
                 step now (write, edit, bash …), or, if the brief is done, report to the \
                 Arbiter with expects_response true. At {IDLE_STOP} such notes your work is \
                 stopped and the Arbiter is told."
            ));
        }
        Verdict::Run
    }

    /// Counts what `call` ([`normalised`]) gave (`result`), with the limits
    /// `warn` and `stop` on calls in a row that brought nothing new.
    pub(crate) fn ran(&mut self, call: &str, result: &str, warn: u32, stop: u32) -> Verdict {
        let hash = hash_of(&format!("{call}\n{result}"));
        if self.seen.contains(&hash) {
            self.stale = self.stale.saturating_add(1);
        } else {
            self.stale = 0;
            self.seen.push_back(hash);
            if self.seen.len() > SEEN {
                self.seen.pop_front();
            }
        }
        let stale = self.stale;
        if stop > 0 && stale >= stop {
            self.stale = 0;
            self.seen.clear();
            return Verdict::Stop(format!(
                "Stopped: my last {stale} tool calls brought nothing new (each call and its \
                 result were ones I had already seen; the last was {}). Tell me what to do \
                 differently, or release me.",
                shown(call)
            ));
        }
        if warn > 0 && stale == warn {
            let at = if stop > 0 {
                format!(" At {stop} in a row your work is stopped and the Arbiter is told.")
            } else {
                String::new()
            };
            return Verdict::Warn(format!(
                "[system] Your last {stale} tool calls brought nothing new: each call and its \
                 result are ones you have seen already. Change approach, or report to the \
                 Arbiter what blocks you.{at}"
            ));
        }
        Verdict::Run
    }

    /// Counts `call` ([`normalised`]), with the limits `warn` and `stop`
    /// (0: off), and says what to do with it.
    pub(crate) fn see(&mut self, call: &str, warn: u32, stop: u32) -> Verdict {
        let hash = hash_of(call);
        if self.call == Some(hash) {
            self.count = self.count.saturating_add(1);
        } else {
            self.call = Some(hash);
            self.count = 1;
        }
        let shown = shown(call);
        let count = self.count;
        if stop > 0 && count >= stop {
            // Counted afresh from here: the Arbiter may send it on.
            *self = Self::default();
            return Verdict::Stop(format!(
                "Stopped: I made the same tool call {count} times in a row, with the same \
                 arguments, and it gave me nothing new: {shown}. The last one was not run. \
                 Tell me what to do differently, or release me."
            ));
        }
        if warn > 0 && count == warn {
            let at = if stop > 0 {
                format!(" At {stop} in a row your work is stopped and the Arbiter is told.")
            } else {
                String::new()
            };
            return Verdict::Warn(format!(
                "[system] You have made this exact call {count} times in a row ({shown}), \
                 and it gives the same kind of result each time. Do something different, or \
                 report to the Arbiter what blocks you.{at}"
            ));
        }
        Verdict::Run
    }
}

/// `tool {arguments}`, the arguments as compact JSON with their keys in
/// order and every run of whitespace in a string made one space, so that
/// `ls  -la` and `ls -la ` are the same call.
pub(crate) fn normalised(name: &str, input: &Value) -> String {
    fn squeeze(value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(s.split_whitespace().collect::<Vec<_>>().join(" ")),
            Value::Array(items) => Value::Array(items.iter().map(squeeze).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), squeeze(v)))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_iter()
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    format!("{name} {}", squeeze(input))
}

/// The first 8 bytes of the text's SHA-256: the same on every worker and
/// version, so a takeover goes on counting.
fn hash_of(text: &str) -> u64 {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(head)
}

fn shown(call: &str) -> String {
    let mut out: String = call.chars().take(SHOWN_CHARS).collect();
    if call.chars().count() > SHOWN_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn verdicts(calls: &[(&str, Value)], warn: u32, stop: u32) -> Vec<Verdict> {
        let mut repeats = Repeats::default();
        calls
            .iter()
            .map(|(name, input)| repeats.see(&normalised(name, input), warn, stop))
            .collect()
    }

    #[test]
    fn the_same_call_is_warned_of_once_then_stopped() {
        let ls = ("bash", json!({"command": "ls"}));
        let got = verdicts(&vec![ls; 10], 5, 10);
        assert!(got[..4].iter().all(|v| *v == Verdict::Run), "{got:?}");
        let Verdict::Warn(text) = &got[4] else {
            panic!("the 5th is warned of: {got:?}");
        };
        assert!(
            text.contains(r#"5 times in a row (bash {"command":"ls"})"#),
            "{text}"
        );
        assert!(text.contains("At 10 in a row"), "{text}");
        assert!(got[5..9].iter().all(|v| *v == Verdict::Run), "{got:?}");
        let Verdict::Stop(text) = &got[9] else {
            panic!("the 10th stops: {got:?}");
        };
        assert!(
            text.starts_with(r#"Stopped: I made the same tool call 10 times in a row"#)
                && text.contains(r#"bash {"command":"ls"}"#),
            "{text}"
        );
    }

    #[test]
    fn another_call_in_between_starts_the_count_over() {
        let ls = ("bash", json!({"command": "ls"}));
        let edit = ("write", json!({"path": "a.txt", "content": "x"}));
        let mut calls = vec![ls.clone(); 4];
        calls.push(edit);
        calls.extend(vec![ls; 4]);
        assert!(
            verdicts(&calls, 5, 10).iter().all(|v| *v == Verdict::Run),
            "no five in a row"
        );
    }

    #[test]
    fn spacing_and_key_order_do_not_make_a_call_new() {
        let calls = [
            ("grep", json!({"pattern": "fn main", "path": "src"})),
            ("grep", json!({"path": "src", "pattern": "fn  main "})),
        ];
        let got = verdicts(&calls, 2, 0);
        assert!(matches!(got[1], Verdict::Warn(_)), "{got:?}");
        let other = [
            ("bash", json!({"command": "ls"})),
            ("bash", json!({"command": "ls -la"})),
        ];
        assert_eq!(verdicts(&other, 2, 0), vec![Verdict::Run, Verdict::Run]);
    }

    #[test]
    fn zero_turns_either_limit_off() {
        let ls = ("bash", json!({"command": "ls"}));
        assert!(
            verdicts(&vec![ls.clone(); 30], 0, 0)
                .iter()
                .all(|v| *v == Verdict::Run)
        );
        let got = verdicts(&vec![ls; 3], 0, 3);
        assert!(matches!(got[2], Verdict::Stop(_)), "{got:?}");
    }

    #[test]
    fn a_wider_circle_is_told_then_stopped_and_anything_new_starts_over() {
        let mut repeats = Repeats::default();
        let circle = [("bash", "ls", "a.txt"), ("read", "a.txt", "hello")];
        let mut got = Vec::new();
        for i in 0..8 {
            let (name, arg, result) = circle[i % 2];
            got.push(repeats.ran(&normalised(name, &json!({"x": arg})), result, 3, 6));
        }
        // Calls 1 and 2 are new; 3, 4, 5 are the 1st..3rd seen again.
        assert!(got[..4].iter().all(|v| *v == Verdict::Run), "{got:?}");
        assert!(
            matches!(&got[4], Verdict::Warn(t) if t.contains("Your last 3 tool calls")),
            "{got:?}"
        );
        assert_eq!(got[5], Verdict::Run);
        assert_eq!(got[6], Verdict::Run);
        assert!(
            matches!(&got[7], Verdict::Stop(t) if t.contains("my last 6 tool calls")),
            "{got:?}"
        );
        // A new result (the file changed) starts over.
        let mut repeats = Repeats::default();
        for _ in 0..2 {
            repeats.ran(&normalised("bash", &json!({"x": "ls"})), "a.txt", 2, 3);
        }
        assert_eq!(repeats.stale, 1);
        repeats.ran(
            &normalised("bash", &json!({"x": "ls"})),
            "a.txt b.txt",
            2,
            3,
        );
        assert_eq!(repeats.stale, 0);
    }

    #[test]
    fn what_is_kept_stays_small_whatever_the_arguments() {
        let mut repeats = Repeats::default();
        let big = "x".repeat(1_000_000);
        for _ in 0..3 {
            let call = normalised("write", &json!({"path": "a", "content": big}));
            repeats.see(&call, 5, 10);
            repeats.ran(&call, "wrote", 15, 30);
        }
        let stored = serde_json::to_string(&repeats).unwrap();
        assert!(stored.len() < 200, "{} bytes", stored.len());
        assert_eq!(repeats.count, 3);
    }

    #[test]
    fn after_a_stop_the_count_starts_afresh() {
        let ls = ("bash", json!({"command": "ls"}));
        let got = verdicts(&vec![ls; 6], 0, 3);
        assert!(matches!(got[2], Verdict::Stop(_)));
        assert!(matches!(got[5], Verdict::Stop(_)), "{got:?}");
        assert_eq!(got[3], Verdict::Run);
    }

    /// Notes with no tool call between them: told at the second, stopped
    /// at the fourth; a tool call, or a report, starts the count over.
    #[test]
    fn notes_without_a_tool_call_are_told_once_then_stopped() {
        let mut r = Repeats::default();
        let kinds = |v: &Verdict| match v {
            Verdict::Run => "run",
            Verdict::Warn(_) => "warn",
            Verdict::Stop(_) => "stop",
        };
        // (tool calls made by then, a note?) → verdict
        let script: &[(u32, bool, &str)] = &[
            (0, true, "run"),  // a note before any tool call: 1 idle
            (0, true, "warn"), // 2
            (0, true, "run"),  // 3
            (0, true, "stop"), // 4: to the Arbiter
            (0, true, "run"),  // counted afresh after the stop
            (1, true, "run"),  // a tool ran since: not idle
            (1, true, "run"),  // 1
            (1, false, "run"), // a report starts the count over
            (1, true, "run"),  // 1
            (1, true, "warn"), // 2
            (2, true, "run"),  // acted
        ];
        for (i, &(tools, note, want)) in script.iter().enumerate() {
            let got = r.output(tools, note);
            assert_eq!(kinds(&got), want, "step {i}: {got:?}");
        }
        let mut r = Repeats::default();
        r.output(0, true);
        let Verdict::Warn(told) = r.output(0, true) else {
            unreachable!()
        };
        assert!(told.contains("a note does no work"), "{told}");
        r.output(0, true);
        let Verdict::Stop(report) = r.output(0, true) else {
            unreachable!()
        };
        assert!(
            report.contains("4 notes in a row without calling a tool"),
            "{report}"
        );
        // Stored with the snapshot: a takeover goes on counting.
        let mut r = Repeats::default();
        r.output(3, true);
        r.output(3, true);
        let stored: Repeats = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(stored, r);
        assert!(!r.is_empty());
    }

    /// Failures in a row, whatever the calls: told at 6, stopped at 12;
    /// one success starts over.
    #[test]
    fn failures_in_a_row_are_told_then_stopped() {
        let mut r = Repeats::default();
        let mut got = Vec::new();
        for i in 0..12 {
            got.push(r.failed(&format!("edit {{\"path\":\"f{i}\"}}"), true));
        }
        assert!(got[..5].iter().all(|v| *v == Verdict::Run));
        assert!(matches!(&got[5], Verdict::Warn(w) if w.contains("last 6 tool calls all failed")));
        assert!(got[6..11].iter().all(|v| *v == Verdict::Run));
        let Verdict::Stop(report) = &got[11] else {
            unreachable!("{got:?}")
        };
        assert!(
            report.starts_with("Stopped: my last 12 tool calls all failed (the last was edit"),
            "{report}"
        );
        for _ in 0..5 {
            r.failed("bash", true);
        }
        assert_eq!(r.failed("bash", false), Verdict::Run);
        assert_eq!(r.failed("bash", true), Verdict::Run);
        assert_eq!(r.failed, 1);
    }
}
