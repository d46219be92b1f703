//! The conversation loop, unchanged, on an OpenAI-compatible server: the
//! Arbiter and the Orchestrator both configured for the Chat Completions
//! mock, through a summons, a tool call, a report and a release.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use arbiter_llm::Provider;
use arbiter_protocol::SessionState;
use arbiter_tests::{ChatRequestExt, OpenAiReply};
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const BRIEF: &str = "Write hello.txt in the workspace, saying hello.";

fn arbiter_says(intent: &str, message: &str) -> OpenAiReply {
    OpenAiReply::json(&json!({"intent": intent, "message": message}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversation_loop_runs_on_an_openai_compatible_server() {
    let sys = System::start_with(Options {
        provider: Provider::OpenAi,
        ..Default::default()
    })
    .await;
    let s = "s-openai";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Greet the world in a file");
    let orch = orch_lane(BRIEF);

    sys.openai.push(
        &arb,
        arbiter_says("summon_orchestrator", BRIEF).usage(900, 30, 0),
    );
    sys.openai.push(
        &orch,
        OpenAiReply::tool_call("write", json!({"path": "hello.txt", "content": "hello\n"}))
            .with_text("Writing it.")
            .usage(1500, 40, 1024),
    );
    // A server that reports no usage: the run goes on, the figure stays unknown.
    sys.openai.push(
        &orch,
        OpenAiReply::json(&json!({"expects_response": true, "message": "Wrote hello.txt."}))
            .no_usage(),
    );
    sys.openai.push(
        &arb,
        arbiter_says("release_orchestrators", "It is written.").usage(1100, 20, 896),
    );
    sys.send(s, "Greet the world in a file").await;

    let status = sys.settled(s, 5).await;
    assert_eq!(status.state, SessionState::Idle);
    assert_eq!(status.summoned, 1);
    // The Arbiter's context is the last reported prompt, cached tokens included.
    assert_eq!(status.arbiter_context_tokens, 1100);
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Greet the world in a file"),
            pair("Summoned Orchestrator I", BRIEF),
            pair("Orchestrator I", "Wrote hello.txt."),
            pair("Released", "I"),
            pair("Arbiter", "It is written."),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(sys.workspace(s).join("hello.txt")).unwrap(),
        "hello\n"
    );

    // Everything went to the OpenAI-compatible server, in its shapes.
    assert!(
        sys.mock.requests().is_empty(),
        "nothing reached the Anthropic mock"
    );
    let arbiter_requests = sys.openai.requests_for(&arb);
    assert_eq!(arbiter_requests.len(), 2);
    for r in &arbiter_requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {API_KEY}").as_str())
        );
        assert!(r.chat_system().contains("Arbiter"));
        assert!(r.chat_tool_names().is_empty());
        assert_eq!(r.body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(
            r.chat_output_schema()["properties"]["intent"]["enum"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
    }
    assert_eq!(
        arbiter_requests[1].chat_last_input(),
        "Orchestrator I: Wrote hello.txt.\n[Evidence from the worker, not written by Orchestrator I: 1 tool call (write 1), 1 file changed (created: hello.txt)]"
    );
    let orch_requests = sys.openai.requests_for(&orch);
    assert_eq!(orch_requests.len(), 2);
    assert!(
        orch_requests[0]
            .chat_tool_names()
            .contains(&"write".to_owned())
    );
    assert_eq!(
        orch_requests[0].chat_output_schema()["required"],
        json!(["expects_response", "message"])
    );
    let second = orch_requests[1].messages();
    let call = second.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(call["content"], "Writing it.");
    let id = call["tool_calls"][0]["id"].as_str().unwrap();
    let result = second.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_call_id"], id);
    assert!(
        result["content"].as_str().unwrap().contains("hello.txt"),
        "{result}"
    );
}

#[tokio::test]
async fn both_services_read_the_config_file_and_refuse_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[orchestrator]\nmodle = \"anthropic:x\"\n").unwrap();
    let keyed = dir.path().join("keyed.toml");
    std::fs::write(&keyed, "[anthropic]\napi_key = \"sk-ant-in-a-file-42\"\n").unwrap();
    for name in ["arbiter-coordinator", "arbiter-worker"] {
        let out = tokio::process::Command::new(arbiter_tests::bin(name))
            .env_clear()
            .env("ARBITER_CONFIG", &bad)
            .env("NATS_URL", "nats://127.0.0.1:1")
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("unknown field `modle`"), "{name}: {err}");
        let out = tokio::process::Command::new(arbiter_tests::bin(name))
            .env_clear()
            .args(["--config", keyed.to_str().unwrap()])
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("api_key_env"), "{name}: {err}");
        assert!(!err.contains("sk-ant-in-a-file-42"), "{name}: {err}");
    }
}
