//! `profile = "small"` on a llama.cpp-like mock (a `response_format` is a
//! grammar over the whole reply): the Arbiter's form is a non-strict union
//! of intent and message only, under its short prompt; the Orchestrator
//! works in union steps (no `tools` field, one member per tool plus the
//! answer), its calls and results sent back as text; every request at
//! temperature 0. The seed flow still does the work.

use crate::common;

use arbiter_llm::{Profile, Provider, Server, StructuredOutput};
use arbiter_protocol::SessionState;
use arbiter_tests::{ChatRequestExt, OpenAiReply, Semantics};
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const HUMAN: &str = "Put hello in hello.txt";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_model_summons_and_its_orchestrator_works_in_union_steps() {
    let mut sys = System::start_with(Options {
        provider: Provider::OpenAi,
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.openai.set_semantics(Semantics::LlamaCpp);
    let mut coordinator = sys.coordinator_config();
    coordinator.model.server = Some(Server::LlamaCpp);
    coordinator.model.profile = Profile::Small;
    sys.spawn_coordinator_with(coordinator);
    let mut worker = sys.worker_config("worker-0", 4, 200_000);
    worker.model.server = Some(Server::LlamaCpp);
    worker.model.profile = Profile::Small;
    assert_eq!(worker.model.structured_output, StructuredOutput::Auto);
    sys.spawn_worker_with(worker);

    let session = "s-small";
    let log = sys.watch_log(session).await;
    let arb = arbiter_lane(HUMAN);
    // The small model's restatement loses the file's content; the brief
    // carries the human's words after it.
    let said = "Create the file.";
    let brief = format!("{said}\n\nThe human's words, as written: {HUMAN}");
    let orch = orch_lane(&brief);
    // A small model fills team fields anyway: they are dropped, not refused.
    sys.openai.push(
        &arb,
        OpenAiReply::answer(&json!({
            "intent": "summon_orchestrator", "message": said,
            "strategy": "parallel", "count": 3, "pool": "native",
        })),
    );
    sys.openai.push(
        &orch,
        OpenAiReply::answer(&json!({
            "name": "write", "parameters": {"path": "hello.txt", "content": "hello\n"},
        })),
    );
    sys.openai.push(
        &orch,
        OpenAiReply::answer(&json!({
            "name": "respond",
            "parameters": {"expects_response": true, "message": "Wrote hello.txt."},
        })),
    );
    sys.openai.push(
        &arb,
        OpenAiReply::answer(
            &json!({"intent": "release_orchestrators", "message": "hello.txt holds hello."}),
        ),
    );
    sys.send(session, HUMAN).await;
    let status = sys.settled(session, 5).await;
    assert_eq!(status.state, SessionState::Idle);
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", HUMAN),
            pair("Summoned Orchestrator I", &brief),
            pair("Orchestrator I", "Wrote hello.txt."),
            pair("Released", "I"),
            // The closing words carry the last report and its evidence.
            pair(
                "Arbiter",
                "hello.txt holds hello.\n\nThe last report: Orchestrator I: Wrote hello.txt.\n\
                 [Evidence from the worker, not written by Orchestrator I: 1 tool call (write \
                 1), 1 file changed (created: hello.txt)]"
            ),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(sys.workspace(session).join("hello.txt")).unwrap(),
        "hello\n"
    );

    // The Arbiter: its short prompt, a non-strict union of the decision only.
    let arbiter = sys.openai.requests_for(&arb);
    assert_eq!(arbiter.len(), 2);
    for r in &arbiter {
        assert!(
            r.chat_system()
                .starts_with("You are the Arbiter. A human gives you a task.")
        );
        assert_eq!(r.body["response_format"]["json_schema"]["strict"], false);
        assert_eq!(r.body["temperature"], 0.0);
        let members = r.chat_output_schema()["anyOf"].as_array().unwrap().clone();
        assert_eq!(members.len(), 5);
        for member in &members {
            assert_eq!(member["required"], json!(["intent", "message"]), "{member}");
            let mut fields: Vec<&String> =
                member["properties"].as_object().unwrap().keys().collect();
            fields.sort();
            assert_eq!(fields, ["intent", "message"], "{member}");
        }
    }

    // The Orchestrator: no tools field; one member per tool (no `task`) and
    // the answer, the tool named first; its step and result as text.
    let steps = sys.openai.requests_for(&orch);
    assert_eq!(steps.len(), 2);
    for r in &steps {
        assert!(r.body.get("tools").is_none(), "{}", r.body);
        assert_eq!(r.body["temperature"], 0.0);
        let names: Vec<Value> = r.chat_output_schema()["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                assert_eq!(m["required"], json!(["name", "parameters"]), "{m}");
                m["properties"]["name"]["enum"][0].clone()
            })
            .collect();
        assert!(
            names.contains(&json!("write")) && names.contains(&json!("bash")),
            "{names:?}"
        );
        assert!(!names.contains(&json!("task")), "{names:?}");
        assert_eq!(names.last(), Some(&json!("respond")));
        assert!(r.chat_system().contains("# Steps"));
    }
    assert_eq!(steps[0].chat_system(), steps[1].chat_system());
    let first = steps[0].messages();
    let task = first.iter().find(|m| m["role"] == "user").unwrap();
    assert!(task["content"].as_str().unwrap().contains(&brief), "{task}");
    let second = steps[1].messages();
    assert!(
        second
            .iter()
            .all(|m| m.get("tool_calls").is_none() && m["role"] != "tool")
    );
    let step = second.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        step["content"],
        r#"{"name":"write","parameters":{"content":"hello\n","path":"hello.txt"}}"#
    );
    let result = second.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("[result of write]\n"),
        "{result}"
    );
}

/// `auto` under the full profile on a llama.cpp server (#45, 3): the
/// Orchestrator is first asked with its tools and the `respond` tool; a
/// model that answers twice with its calls written as text (none native)
/// is asked in union steps from then on, and its written calls still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_turns_to_union_steps_for_a_model_that_writes_no_native_calls() {
    let mut sys = System::start_with(Options {
        provider: Provider::OpenAi,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.openai.set_semantics(Semantics::LlamaCpp);
    let mut worker = sys.worker_config("worker-0", 4, 200_000);
    worker.model.server = Some(Server::LlamaCpp);
    assert!(worker.model.adaptive_mode());
    sys.spawn_worker_with(worker);

    let session = "s-adapt";
    let log = sys.watch_log(session).await;
    let human = "Put a and b in files";
    let brief = "Write a.txt and b.txt.";
    let arb = arbiter_lane(human);
    let orch = orch_lane(brief);
    let say = |intent: &str, message: &str| {
        OpenAiReply::json(&json!({"intent": intent, "message": message}))
    };
    sys.openai.push(&arb, say("summon_orchestrator", brief));
    // Written out as text, as a small model does: taken as calls.
    for (path, content) in [("a.txt", "a\n"), ("b.txt", "b\n")] {
        sys.openai.push(
            &orch,
            OpenAiReply::text(
                json!({"name": "write", "arguments": {"path": path, "content": content}})
                    .to_string(),
            ),
        );
    }
    sys.openai.push(
        &orch,
        OpenAiReply::answer(&json!({
            "name": "respond",
            "parameters": {"expects_response": true, "message": "Wrote both."},
        })),
    );
    sys.openai
        .push(&arb, say("release_orchestrators", "Both are written."));
    sys.send(session, human).await;
    let status = sys.settled(session, 5).await;
    assert_eq!(status.state, SessionState::Idle);
    assert!(log.bodies().iter().any(
        |b| matches!(b, arbiter_protocol::LogBody::Orchestrator(o) if o.text == "Wrote both.")
    ));
    for file in ["a.txt", "b.txt"] {
        assert!(sys.workspace(session).join(file).exists(), "{file}");
    }
    let steps = sys.openai.requests_for(&orch);
    assert_eq!(steps.len(), 3);
    // The first two with tools and `respond`, no response_format (a grammar
    // would forbid the calls); the third in union steps: no tools field.
    for r in &steps[..2] {
        let names = r.chat_tool_names();
        assert!(
            names.iter().any(|n| n == "write") && names.iter().any(|n| n == "respond"),
            "{names:?}"
        );
        assert!(r.body.get("response_format").is_none(), "{}", r.body);
    }
    assert!(steps[2].body.get("tools").is_none(), "{}", steps[2].body);
    assert!(
        steps[2].chat_output_schema()["anyOf"]
            .as_array()
            .is_some_and(|members| members.len() > 2),
        "{}",
        steps[2].body
    );
}
