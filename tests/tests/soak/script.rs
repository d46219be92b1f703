//! The soak's conversation, the same for every session: round r is a human
//! message, an Orchestrator summoned for it that runs a tool loop (bash
//! appends to `work.log`, one `task` subagent), asks the Arbiter a question,
//! gets the answer, works on and reports; the Arbiter releases it and replies.
//! Every model reply is computed from the request itself, so a call made
//! again after a kill gets the same answer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arbiter_protocol::roman;
use arbiter_tests::{MockReply, RecordedRequest};
use serde_json::json;

use crate::common::{ARBITER_MODEL, ORCH_MODEL, SUB_MODEL, arbiter, orch, orch_lane, pair};

/// Tool calls before the Orchestrator asks its question.
pub const TOOLS_BEFORE: usize = 3;
/// Tool calls after the answer; the second of them is a `task`.
pub const TOOLS_AFTER: usize = 3;

/// A small, seedable random source shared by the soak's tasks.
pub struct Rng(AtomicU64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed.max(1)))
    }

    pub fn next(&self) -> u64 {
        let mut x = self.0.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.store(x, Ordering::Relaxed);
        x
    }

    /// A number in `lo..hi`.
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

pub fn tag(session: &str, round: u32) -> String {
    format!("[{session}/r{round}]")
}
pub fn human(tag: &str) -> String {
    format!("Round {tag} begins.")
}
pub fn brief(tag: &str) -> String {
    format!("Brief {tag}: append the steps to work.log.")
}
fn question(tag: &str) -> String {
    format!("Question {tag}")
}
fn answer(tag: &str) -> String {
    format!("Answer {tag}")
}
fn done(tag: &str) -> String {
    format!("Done {tag}")
}
pub fn reply(tag: &str) -> String {
    format!("Reply {tag}")
}

/// The last tag (`[<session>/r<round>]`) in a text. Not merely the last
/// `[...]`: under a report the Arbiter reads the worker's evidence, a line
/// in brackets of its own that quotes the commands run, tags and all.
fn tag_in(text: &str) -> Option<&str> {
    text.match_indices('[')
        .filter_map(|(start, _)| {
            let end = start + text[start..].find(']')?;
            let (session, round) = text[start + 1..end].split_once("/r")?;
            let word = |s: &str, ok: fn(char) -> bool| !s.is_empty() && s.chars().all(ok);
            (word(session, |c| c.is_ascii_alphanumeric()) && word(round, |c| c.is_ascii_digit()))
                .then(|| &text[start..=end])
        })
        .next_back()
}

/// What round `round` of a session must leave in its log, as `briefs` pairs.
pub fn expected_round(session: &str, round: u32) -> Vec<(String, String)> {
    let t = tag(session, round);
    let name = arbiter_protocol::orchestrator_name(round);
    vec![
        pair("You", &human(&t)),
        pair(&format!("Summoned {name}"), &brief(&t)),
        pair(&name, &question(&t)),
        pair(&format!("Arbiter → {name}"), &answer(&t)),
        pair(&name, &done(&t)),
        pair("Released", &roman(round)),
        pair("Arbiter", &reply(&t)),
    ]
}

/// The lines round `round` appends to `work.log`, in order.
pub fn expected_work(session: &str, round: u32) -> Vec<String> {
    let t = tag(session, round);
    (0..TOOLS_BEFORE + TOOLS_AFTER)
        .filter(|k| *k != TOOLS_BEFORE + 1)
        .map(|k| {
            let phase = if k < TOOLS_BEFORE { 'a' } else { 'b' };
            format!("{t}/{phase}{k}")
        })
        .collect()
}

/// The Orchestrator lane of a session's `number`-th Orchestrator (round = number).
pub fn lane_of_orchestrator(session: &str, number: u32) -> String {
    orch_lane(&brief(&tag(session, number)))
}

/// The mock's answers, and when each lane was called.
pub struct Script {
    rng: Rng,
    pub calls: Mutex<Vec<(String, Instant)>>,
}

impl Script {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            calls: Mutex::new(Vec::new()),
        }
    }

    pub fn respond(&self, request: &RecordedRequest) -> Option<MockReply> {
        self.calls
            .lock()
            .unwrap()
            .push((request.lane.clone(), Instant::now()));
        let delay = Duration::from_millis(self.rng.range(0, 150));
        let reply = match request.model() {
            ARBITER_MODEL => arbiter_reply(&request.last_user_text())?,
            ORCH_MODEL => orchestrator_reply(request)?,
            SUB_MODEL => {
                let t = tag_in(&request.last_user_text())?.to_owned();
                MockReply::text(format!("Checked {t}: all there."))
            }
            _ => return None,
        };
        Some(reply.delay(delay))
    }
}

fn arbiter_reply(text: &str) -> Option<MockReply> {
    let t = tag_in(text)?;
    Some(if text.contains("Question [") {
        arbiter("address_orchestrator", &answer(t))
    } else if text.contains("Done [") {
        arbiter("release_orchestrators", &reply(t))
    } else if text.contains("Round [") {
        arbiter("summon_orchestrator", &brief(t))
    } else {
        arbiter("address_human", &format!("Confused by: {text}"))
    })
}

fn orchestrator_reply(request: &RecordedRequest) -> Option<MockReply> {
    let first = request
        .messages()
        .first()
        .map(|m| match &m["content"] {
            serde_json::Value::String(s) => s.clone(),
            other => other[0]["text"].as_str().unwrap_or_default().to_owned(),
        })
        .unwrap_or_default();
    let t = tag_in(&first)?.to_owned();
    let results = request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .count();
    let answered = request.all_text().contains(&answer(&t));
    let bash = |phase: char| {
        MockReply::tool_use(
            "bash",
            json!({"command": format!("echo '{t}/{phase}{results}' >> work.log")}),
        )
    };
    Some(if !answered {
        if results < TOOLS_BEFORE {
            bash('a')
        } else {
            orch(true, &question(&t))
        }
    } else if results < TOOLS_BEFORE + TOOLS_AFTER {
        if results == TOOLS_BEFORE + 1 {
            MockReply::tool_use(
                "task",
                json!({"description": "Check the log", "prompt": format!("Check work.log for {t}.")}),
            )
        } else {
            bash('b')
        }
    } else {
        orch(true, &done(&t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_of_a_report_is_found_past_its_evidence_line() {
        // A report as the Arbiter reads it (coordinator/src/outputs.rs, report).
        let report = "Orchestrator I: Question [s6/r1]\n\
            [Evidence from the worker, not written by Orchestrator I: 3 tool calls (bash 3), \
            1 file changed (created: work.log); commands: `echo '[s6/r1]/a0' >> work.log` \
            exit 0, `echo '[s6/r1]/a1' >> work.log` exit 0, `echo '[s6/r1]/a2' >> work.log` \
            exit 0]";
        assert_eq!(tag_in(report), Some("[s6/r1]"));
        assert_eq!(tag_in(&human(&tag("s12", 40))), Some("[s12/r40]"));
        assert_eq!(tag_in("Check work.log for [s2/r3]."), Some("[s2/r3]"));
        assert_eq!(tag_in("[Evidence: 0 tool calls] [s/r] [s1/rx]"), None);
    }
}
