//! `arbiter-bench validate`: what checking one model reply against its
//! schema costs, with the `jsonschema` crate Arbiter uses and with the
//! hand-written validator it replaced, in one run on the same replies.
//! Printed per reply, beside what parsing the reply's JSON costs.

mod handwritten;

use std::hint::black_box;
use std::time::{Duration, Instant};

use arbiter_protocol::{ArbiterOutput, OrchestratorOutput};
use serde_json::{Value, json};

/// How long each measurement runs.
const SPAN: Duration = Duration::from_millis(700);

/// Replies as models write them: valid ones, and ones a repair is asked for.
fn replies() -> Vec<(&'static str, Value, Value)> {
    let arbiter = arbiter_llm::schema::for_model::<ArbiterOutput>();
    let orch = arbiter_llm::schema::for_model::<OrchestratorOutput>();
    let words = "The tests pass; the parser now accepts a fenced block. ".repeat(8);
    vec![
        (
            "arbiter, valid",
            arbiter.clone(),
            json!({"intent": "address_human", "message": words}),
        ),
        (
            "arbiter, bad intent",
            arbiter,
            json!({"intent": "shout", "message": "x"}),
        ),
        (
            "orchestrator, valid",
            orch.clone(),
            json!({"expects_response": true, "message": words, "handoff": handoff()}),
        ),
        (
            "orchestrator, extra field",
            orch,
            json!({"expects_response": true, "message": "x", "mood": "calm"}),
        ),
    ]
}

/// A handoff packet of a few items, as an Orchestrator at 85 % sends.
fn handoff() -> Value {
    let done: Vec<Value> = (1..=6)
        .map(|i| json!({"id": format!("T{i}"), "what": "Parser accepts fences", "files": ["src/parse.rs", "tests/parse.rs"]}))
        .collect();
    json!({
        "done": done,
        "open": [{"id": "T7", "what": "Document the flag"}],
        "decisions": [{"decision": "Keep the old flag", "why": "Scripts use it"}],
        "questions": [],
        "next_step": "Write the docs for --fence."
    })
}

/// Calls `f` for [`SPAN`] and returns the mean time of one call.
fn per_call(mut f: impl FnMut()) -> Duration {
    for _ in 0..100 {
        f();
    }
    let start = Instant::now();
    let mut n: u32 = 0;
    while start.elapsed() < SPAN {
        for _ in 0..100 {
            f();
        }
        n += 100;
    }
    start.elapsed() / n
}

fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

/// Measures and prints the table.
pub fn run() -> anyhow::Result<()> {
    println!(
        "{:<28} {:>12} {:>14} {:>16} {:>16} {:>14}",
        "reply", "parse JSON", "hand-written", "jsonschema", "jsonschema", "ratio"
    );
    println!(
        "{:<28} {:>12} {:>14} {:>16} {:>16} {:>14}",
        "", "", "", "compiled once", "+ compile", "(once/hand)"
    );
    for (name, schema, reply) in replies() {
        let text = reply.to_string();
        let checker = arbiter_llm::schema::Checker::new(&schema).map_err(anyhow::Error::msg)?;
        // Both must agree on whether the reply is valid.
        let hand = handwritten::validate(&reply, &schema);
        let crate_says = checker.check(&reply);
        anyhow::ensure!(
            hand.is_ok() == crate_says.is_ok(),
            "{name}: the validators disagree: {hand:?} vs {crate_says:?}"
        );
        let parse = per_call(|| {
            black_box(serde_json::from_str::<Value>(black_box(&text)).ok());
        });
        let hand = per_call(|| {
            black_box(handwritten::validate(black_box(&reply), &schema).ok());
        });
        let once = per_call(|| {
            black_box(checker.check(black_box(&reply)).ok());
        });
        let compiled = per_call(|| {
            black_box(arbiter_llm::schema::validate(black_box(&reply), &schema).ok());
        });
        println!(
            "{name:<28} {:>12} {:>14} {:>16} {:>16} {:>14}",
            micros(parse),
            micros(hand),
            micros(once),
            micros(compiled),
            format!("{:.2}", once.as_secs_f64() / hand.as_secs_f64()),
        );
    }
    let generate = per_call(|| {
        black_box(arbiter_llm::schema::for_model::<OrchestratorOutput>());
    });
    println!(
        "generating the Orchestrator's schema from its type (schemars, normalised): {}",
        micros(generate)
    );
    Ok(())
}
