//! `arbiter-mock-model`: the mock Anthropic Messages server as a process, with
//! the scripted conversation of `scripts/compose-e2e` (a worker killed in the
//! middle of an Orchestrator's task, and another worker finishing it).
//!
//! Every reply is decided from the request, so a worker that takes an
//! Orchestrator over gets the same answers:
//!
//! - the Arbiter (model `mock-arbiter`): a human line summons an Orchestrator
//!   with [`BRIEF`]; the Orchestrator's report releases it with [`FINAL`],
//!   the answer the human sees.
//! - the Orchestrator (model `mock-orch`), by the tool results it has: none →
//!   a `bash` call that appends `one` to `steps.txt` and prints the worker
//!   container's host name; one → the call appending `two`, held the first
//!   time (the worker holding it is the one to kill: the mock prints
//!   `holding: <host name>`) and answered at once from then on; two → its
//!   report.
//!
//! Usage: `arbiter-mock-model [ADDRESS]` (default `0.0.0.0:8080`). It prints
//! `listening on ADDRESS` when it serves.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use arbiter_tests::{Gate, MockAnthropic, MockReply, RecordedRequest};
use serde_json::json;

/// The Orchestrator's brief.
const BRIEF: &str = "Append one and then two to steps.txt, one command each.";
/// The Orchestrator's report.
const REPORT: &str = "Done: steps.txt has one and two.";
/// The Arbiter's final answer to the human.
const FINAL: &str = "It is done: steps.txt has one and two.";
/// Marks the worker's host name in the first command's output.
const HOLDER: &str = "holder=";

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "0.0.0.0:8080".into());
    let addr: SocketAddr = match addr.parse() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("arbiter-mock-model: bad address {addr:?}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mock = MockAnthropic::start_at(addr).await;
    mock.set_recording(false);
    // The held reply is never given: its worker is killed holding it.
    let never = Gate::new();
    let held = AtomicBool::new(false);
    mock.set_responder(move |request| Some(reply(request, &never, &held)));
    say(&format!("listening on {}", mock.addr()));
    let _ = tokio::signal::ctrl_c().await;
    std::process::ExitCode::SUCCESS
}

/// One line on stdout, at once (the e2e script reads the container's log).
fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn reply(request: &RecordedRequest, never: &Gate, held: &AtomicBool) -> MockReply {
    if request.model() == "mock-arbiter" {
        let (intent, message) = if request.last_user_text().contains(REPORT) {
            ("release_orchestrators", FINAL)
        } else {
            ("summon_orchestrator", BRIEF)
        };
        say(&format!("arbiter: {intent}"));
        return MockReply::json(&json!({"intent": intent, "message": message}));
    }
    let results = tool_results(request);
    say(&format!("orchestrator: call with {results} tool results"));
    match results {
        0 => bash(&format!(
            "echo {HOLDER}$(cat /etc/hostname); echo one >> steps.txt"
        )),
        1 if !held.swap(true, Ordering::SeqCst) => {
            // The first command's output, in the request's last tool result.
            let text = request.last_user_text();
            let holder = text
                .split(HOLDER)
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or("unknown");
            say(&format!("holding: {holder}"));
            bash("echo two >> steps.txt").gated(never.clone())
        }
        1 => {
            say("resumed");
            bash("echo two >> steps.txt")
        }
        _ => MockReply::json(&json!({"expects_response": true, "message": REPORT})),
    }
}

fn bash(command: &str) -> MockReply {
    MockReply::tool_use("bash", json!({ "command": command }))
}

/// The `tool_result` blocks in the request's messages.
fn tool_results(request: &RecordedRequest) -> usize {
    request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|block| block["type"] == "tool_result")
        .count()
}
