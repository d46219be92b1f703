//! The conversation loop, unchanged, on an OpenAI-compatible server: the
//! Arbiter and the Orchestrator both configured for the Chat Completions
//! mock, through a summons, a tool call, a report and a release; on a mock
//! with OpenAI's semantics (tools stay free beside `response_format`) and on
//! mocks with llama.cpp's and Ollama's (a `response_format` beside tools is a
//! grammar, so no tool call can come out).

use crate::common;

use arbiter_llm::{Provider, RESPOND_TOOL, Server, StructuredOutput};
use arbiter_protocol::SessionState;
use arbiter_tests::mock_openai::output_cap;
use arbiter_tests::{ChatRequestExt, OpenAiReply, RecordedRequest, Semantics};
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const BRIEF: &str = "Write hello.txt in the workspace, saying hello.";

fn arbiter_says(intent: &str, message: &str) -> OpenAiReply {
    OpenAiReply::json(&json!({"intent": intent, "message": message}))
}

/// What one run of the seed flow left behind.
struct Run {
    sys: System,
    session: &'static str,
    arbiter: Vec<RecordedRequest>,
    orch: Vec<RecordedRequest>,
    log: Vec<(String, String)>,
    /// Scripted Orchestrator replies never asked for.
    orch_unused: usize,
}

/// The seed flow (summon, a `write`, a report, a release) on a mock server
/// with `semantics`, every role configured with `server` and `mode`.
async fn seed_flow(semantics: Semantics, server: Option<Server>, mode: StructuredOutput) -> Run {
    seed_flow_capped(semantics, server, mode, None).await
}

/// [`seed_flow`]; with `cap`, the Orchestrator's output cap is `cap` and
/// its report takes 1.5 × `cap` tokens.
async fn seed_flow_capped(
    semantics: Semantics,
    server: Option<Server>,
    mode: StructuredOutput,
    cap: Option<u64>,
) -> Run {
    let mut sys = System::start_with(Options {
        provider: Provider::OpenAi,
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.openai.set_semantics(semantics);
    let mut coordinator = sys.coordinator_config();
    coordinator.model.server = server;
    coordinator.model.structured_output = mode;
    sys.spawn_coordinator_with(coordinator);
    let mut worker = sys.worker_config("worker-0", 4, 200_000);
    worker.model.server = server;
    worker.model.structured_output = mode;
    if let Some(cap) = cap {
        worker.model.max_output_tokens = cap;
    }
    sys.spawn_worker_with(worker);

    let session = "s-openai";
    let log = sys.watch_log(session).await;
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
    let mut report =
        OpenAiReply::answer(&json!({"expects_response": true, "message": "Wrote hello.txt."}))
            .no_usage();
    if let Some(cap) = cap {
        report = report.needs_tokens(cap * 3 / 2);
    }
    sys.openai.push(&orch, report);
    sys.openai.push(
        &arb,
        arbiter_says("release_orchestrators", "It is written.").usage(1100, 20, 896),
    );
    sys.send(session, "Greet the world in a file").await;

    let status = sys.settled(session, 5).await;
    assert_eq!(status.state, SessionState::Idle);
    assert_eq!(status.summoned, 1);
    // The Arbiter's context is the last reported prompt, cached tokens included.
    assert_eq!(status.arbiter_context_tokens, 1100);
    assert!(
        sys.mock.requests().is_empty(),
        "nothing reached the Anthropic mock"
    );
    let arbiter = sys.openai.requests_for(&arb);
    // The Arbiter's form (coordinator/src/rules/form.rs): strict and flat
    // where the server may be OpenAI; a non-strict union, the decision
    // required first, where the server compiles it into a grammar.
    assert_eq!(arbiter.len(), 2);
    let grammar = matches!(
        server,
        Some(Server::LlamaCpp | Server::Ollama | Server::Vllm | Server::LmStudio)
    );
    for r in &arbiter {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {API_KEY}").as_str())
        );
        assert!(r.chat_system().contains("Arbiter"));
        assert!(r.chat_tool_names().is_empty());
        let schema = r.chat_output_schema();
        assert_eq!(r.body["response_format"]["json_schema"]["strict"], !grammar);
        let intents: Vec<Value> = if grammar {
            let members = schema["anyOf"].as_array().expect("a union");
            for member in members {
                assert_eq!(member["required"][0], "intent", "{member}");
                assert_eq!(member["required"][1], "message", "{member}");
            }
            members
                .iter()
                .map(|m| m["properties"]["intent"]["enum"][0].clone())
                .collect()
        } else {
            assert!(schema.get("anyOf").is_none(), "{schema}");
            schema["properties"]["intent"]["enum"]
                .as_array()
                .unwrap()
                .clone()
        };
        let mut intents: Vec<&str> = intents.iter().filter_map(Value::as_str).collect();
        intents.sort_unstable();
        intents.dedup();
        assert_eq!(intents.len(), 5, "{schema}");
    }
    Run {
        orch: sys.openai.requests_for(&orch),
        orch_unused: sys.openai.pending(&orch),
        log: briefs(&log.bodies()),
        arbiter,
        sys,
        session,
    }
}

impl Run {
    /// The flow did the work: hello.txt written, reported, released.
    fn assert_the_work_was_done(&self) {
        assert_eq!(
            self.log,
            vec![
                pair("You", "Greet the world in a file"),
                pair("Summoned Orchestrator I", BRIEF),
                pair("Orchestrator I", "Wrote hello.txt."),
                pair("Released", "I"),
                pair("Arbiter", "It is written."),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(self.sys.workspace(self.session).join("hello.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(
            self.arbiter[1].chat_last_input(),
            "Orchestrator I: Wrote hello.txt.\n[Evidence from the worker, not written by Orchestrator I: 1 tool call (write 1), 1 file changed (created: hello.txt)]"
        );
        assert_eq!(self.orch_unused, 0);
        let second = self.orch[1].messages();
        let call = second.iter().find(|m| m["role"] == "assistant").unwrap();
        assert_eq!(call["content"], "Writing it.");
        let id = call["tool_calls"][0]["id"].as_str().unwrap();
        let result = second.iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(result["tool_call_id"], id);
        assert!(
            result["content"].as_str().unwrap().contains("hello.txt"),
            "{result}"
        );
        // The tools and the system prompt are byte-identical from call to
        // call: the server's prompt cache keys on them.
        assert_eq!(self.orch[0].body["tools"], self.orch[1].body["tools"]);
        assert_eq!(self.orch[0].chat_system(), self.orch[1].chat_system());
    }

    /// Every Orchestrator request offered the final-answer tool and no `response_format`.
    fn assert_the_answer_was_a_tool(&self) {
        for r in &self.orch {
            assert!(r.body.get("response_format").is_none(), "{}", r.body);
            let names = r.chat_tool_names();
            assert_eq!(names.last().map(String::as_str), Some(RESPOND_TOOL));
            assert!(names.contains(&"write".to_owned()), "{names:?}");
            let respond = r.body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["function"]["name"] == RESPOND_TOOL)
                .unwrap();
            assert_eq!(
                respond["function"]["parameters"]["required"],
                json!(["expects_response", "message"])
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversation_loop_runs_on_an_openai_compatible_server() {
    // OpenAI keeps tool calls free beside a response_format: auto keeps it.
    let run = seed_flow(
        Semantics::OpenAi,
        Some(Server::OpenAi),
        StructuredOutput::Auto,
    )
    .await;
    run.assert_the_work_was_done();
    assert_eq!(run.orch.len(), 2);
    assert!(run.orch[0].chat_tool_names().contains(&"write".to_owned()));
    assert!(
        !run.orch[0]
            .chat_tool_names()
            .contains(&RESPOND_TOOL.to_owned())
    );
    assert_eq!(
        run.orch[0].chat_output_schema()["required"],
        // Strict mode lists every property; the optional handoff and
        // verdict are nullable.
        json!(["expects_response", "handoff", "message", "verdict"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_llama_cpp_the_orchestrator_calls_its_tools_and_answers_through_respond() {
    let run = seed_flow(
        Semantics::LlamaCpp,
        Some(Server::LlamaCpp),
        StructuredOutput::Auto,
    )
    .await;
    run.assert_the_work_was_done();
    assert_eq!(run.orch.len(), 2);
    run.assert_the_answer_was_a_tool();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ollama_the_orchestrator_calls_its_tools_and_answers_through_respond() {
    let run = seed_flow(
        Semantics::Ollama,
        Some(Server::Ollama),
        StructuredOutput::Auto,
    )
    .await;
    run.assert_the_work_was_done();
    assert_eq!(run.orch.len(), 2);
    run.assert_the_answer_was_a_tool();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_server_gets_the_answer_tool_so_a_grammar_cannot_block_tools() {
    let run = seed_flow(Semantics::LlamaCpp, None, StructuredOutput::Auto).await;
    run.assert_the_work_was_done();
    assert_eq!(run.orch.len(), 2);
    run.assert_the_answer_was_a_tool();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_report_cut_at_its_cap_succeeds_on_one_retry_with_a_larger_cap() {
    let run = seed_flow_capped(
        Semantics::LlamaCpp,
        Some(Server::LlamaCpp),
        StructuredOutput::Auto,
        Some(1_024),
    )
    .await;
    run.assert_the_work_was_done();
    // One extra call: the report, cut at 1,024, asked again at 2,048.
    let caps: Vec<_> = run.orch.iter().map(|r| output_cap(&r.body)).collect();
    assert_eq!(caps, vec![Some(1_024), Some(1_024), Some(2_048)]);
    assert_eq!(run.orch[1].messages(), run.orch[2].messages());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forcing_response_format_on_llama_cpp_leaves_an_orchestrator_that_cannot_call_tools() {
    let run = seed_flow(
        Semantics::LlamaCpp,
        Some(Server::LlamaCpp),
        StructuredOutput::ResponseFormat,
    )
    .await;
    // The grammar let only schema-shaped JSON out: a "report" resting on no work.
    assert_eq!(run.orch.len(), 1);
    assert!(run.orch[0].body["response_format"].is_object());
    assert_eq!(
        run.orch_unused, 1,
        "the report after the work was never reached"
    );
    assert_eq!(run.log[2], pair("Orchestrator I", "ok"));
    assert!(!run.sys.workspace(run.session).join("hello.txt").exists());
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
