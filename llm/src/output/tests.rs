//! Unit tests of the output modes: what each asks for, what comes back.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::Message;

fn request() -> Request {
    Request {
        system: "sys".into(),
        tools: vec![ToolSpec {
            name: "write".into(),
            description: "Write".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]
        .into(),
        output_schema: Some(std::sync::Arc::new(json!({
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        }))),
        ..Default::default()
    }
}

fn reply(content: Vec<Block>, stop_reason: StopReason) -> Response {
    Response {
        content,
        stop_reason,
        usage: None,
    }
}

fn text(s: &str) -> Block {
    Block::Text { text: s.into() }
}

fn call(name: &str, input: Value) -> Block {
    Block::ToolUse {
        id: "c1".into(),
        name: name.into(),
        input,
    }
}

#[test]
fn auto_keeps_tools_free_on_every_server_but_the_two_that_allow_both() {
    use Server::*;
    let with_tools: Vec<(Server, Mode)> =
        [OpenAi, Anthropic, LlamaCpp, Vllm, Ollama, LmStudio, Other]
            .into_iter()
            .map(|s| (s, StructuredOutput::Auto.resolve(s, true)))
            .collect();
    assert_eq!(
        with_tools,
        vec![
            (OpenAi, Mode::ResponseFormat),
            (Anthropic, Mode::ResponseFormat),
            (LlamaCpp, Mode::Tool),
            (Vllm, Mode::Tool),
            (Ollama, Mode::Tool),
            (LmStudio, Mode::Tool),
            (Other, Mode::Tool),
        ]
    );
    for server in [OpenAi, LlamaCpp, Other] {
        assert_eq!(
            StructuredOutput::Auto.resolve(server, false),
            Mode::ResponseFormat
        );
        assert_eq!(
            StructuredOutput::Tool.resolve(server, false),
            Mode::ResponseFormat
        );
        assert_eq!(StructuredOutput::Prompt.resolve(server, true), Mode::Prompt);
        assert_eq!(
            StructuredOutput::ResponseFormat.resolve(server, true),
            Mode::ResponseFormat
        );
    }
}

#[test]
fn settings_parse_and_bad_values_name_the_allowed_ones() {
    assert_eq!(
        "tool".parse::<StructuredOutput>().unwrap(),
        StructuredOutput::Tool
    );
    let err = "json".parse::<StructuredOutput>().unwrap_err().to_string();
    assert!(err.contains("structured_output must be \"auto\", \"response_format\", \"tool\", \"prompt\" or \"union\", not \"json\""), "{err}");
    assert_eq!("llama.cpp".parse::<Server>().unwrap(), Server::LlamaCpp);
    let err = "tgi".parse::<Server>().unwrap_err().to_string();
    assert!(
        err.contains("server must be") && err.contains("\"tgi\""),
        "{err}"
    );
    assert_eq!(
        Server::detect(Provider::OpenAi, "https://api.openai.com/v1"),
        Server::OpenAi
    );
    assert_eq!(
        Server::detect(Provider::OpenAi, "http://127.0.0.1:8080/v1"),
        Server::Other
    );
    assert_eq!(
        Server::detect(Provider::Anthropic, "http://127.0.0.1:1"),
        Server::Anthropic
    );
}

#[test]
fn tool_mode_asks_for_a_respond_call_and_gives_back_its_arguments_as_text() {
    let request = request();
    let wire = shape(&request, Mode::Tool);
    assert_eq!(wire.output_schema, None);
    let names: Vec<&str> = wire.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["write", RESPOND_TOOL]);
    assert_eq!(
        Some(&wire.tools[1].input_schema),
        request.output_schema.as_deref()
    );
    assert!(
        wire.system.starts_with("sys\n\n# Ending a turn"),
        "{}",
        wire.system
    );
    // Byte-stable: the same request gives the same wire request.
    assert_eq!(*shape(&request, Mode::Tool), *wire);

    let done = unshape(
        reply(
            vec![text("Done."), call(RESPOND_TOOL, json!({"message": "ok"}))],
            StopReason::ToolUse,
        ),
        Mode::Tool,
        &request,
    );
    assert_eq!(done.content, vec![text(r#"{"message":"ok"}"#)]);
    assert_eq!(done.stop_reason, StopReason::EndTurn);

    // With work still to run, the answer waits.
    let early = unshape(
        reply(
            vec![
                call("write", json!({"path": "a"})),
                call(RESPOND_TOOL, json!({"message": "ok"})),
            ],
            StopReason::ToolUse,
        ),
        Mode::Tool,
        &request,
    );
    assert_eq!(early.content, vec![call("write", json!({"path": "a"}))]);
    assert_eq!(early.stop_reason, StopReason::ToolUse);
}

#[test]
fn calls_written_as_text_are_taken_as_calls() {
    let request = request();
    let fenced = "```json\n{\"name\": \"write\", \"arguments\": {\"path\": \"a\"}}\n```";
    let taken = unshape(
        reply(vec![text(fenced)], StopReason::EndTurn),
        Mode::Tool,
        &request,
    );
    assert_eq!(taken.stop_reason, StopReason::ToolUse);
    let calls: Vec<(&str, &Value)> = taken.tool_uses().map(|(_, n, i)| (n, i)).collect();
    assert_eq!(calls, vec![("write", &json!({"path": "a"}))]);
    assert_eq!(taken.text(), "");

    let answered = unshape(
        reply(
            vec![text(
                r#"{"name": "respond", "arguments": {"message": "ok"}}"#,
            )],
            StopReason::EndTurn,
        ),
        Mode::Tool,
        &request,
    );
    assert_eq!(answered.text(), r#"{"message":"ok"}"#);

    // Not a call: an unknown tool, extra keys, or the answer itself.
    for other in [
        r#"{"name": "rm", "arguments": {}}"#,
        r#"{"name": "write", "arguments": {}, "x": 1}"#,
        r#"{"message": "ok"}"#,
    ] {
        let kept = unshape(
            reply(vec![text(other)], StopReason::EndTurn),
            Mode::Tool,
            &request,
        );
        assert_eq!(kept.content, vec![text(other)]);
    }
    // response_format mode never rewrites a reply.
    let kept = unshape(
        reply(vec![text(fenced)], StopReason::EndTurn),
        Mode::ResponseFormat,
        &request,
    );
    assert_eq!(kept.content, vec![text(fenced)]);
}

#[test]
fn prompt_mode_puts_the_schema_in_the_system_prompt_only() {
    let request = request();
    let wire = shape(&request, Mode::Prompt);
    assert_eq!(wire.output_schema, None);
    assert_eq!(wire.tools, request.tools);
    assert!(wire.system.contains("# Reply format"));
    assert!(
        wire.system.contains(r#""required":["message"]"#),
        "{}",
        wire.system
    );
}

#[test]
fn union_mode_sends_one_member_per_tool_and_no_tools() {
    let mut with_call = request();
    with_call.messages = std::sync::Arc::new(vec![
        Message::user("make it"),
        Message {
            role: crate::MessageRole::Assistant,
            content: vec![call("write", json!({"path": "a.py"}))],
        },
        Message {
            role: crate::MessageRole::User,
            content: vec![Block::ToolResult {
                tool_use_id: "c1".into(),
                content: "wrote a.py".into(),
                is_error: false,
            }],
        },
    ]);
    let wire = shape(&with_call, Mode::Union);
    assert!(wire.tools.is_empty());
    let schema = wire.output_schema.as_deref().unwrap();
    let names: Vec<&Value> = schema["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["properties"]["name"]["enum"][0])
        .collect();
    assert_eq!(names, [&json!("write"), &json!(RESPOND_TOOL)]);
    assert!(wire.system.contains("- `write`: Write"), "{}", wire.system);
    // The calls and results are text: no tool_calls for the server to render.
    let texts: Vec<String> = wire
        .messages
        .iter()
        .map(|m| match m.content.as_slice() {
            [Block::Text { text }] => text.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts[1], r#"{"name":"write","parameters":{"path":"a.py"}}"#);
    assert_eq!(texts[2], "[result of write]\nwrote a.py");
    // Back: a step is a call, the final member the answer.
    let step = unshape(
        reply(
            vec![text(r#"{"name":"write","parameters":{"path":"b.py"}}"#)],
            StopReason::EndTurn,
        ),
        Mode::Union,
        &with_call,
    );
    assert_eq!(
        step.tool_uses().map(|(_, n, _)| n).collect::<Vec<_>>(),
        ["write"]
    );
    let done = unshape(
        reply(
            vec![text(
                r#"{"name":"respond","parameters":{"message":"done"}}"#,
            )],
            StopReason::EndTurn,
        ),
        Mode::Union,
        &with_call,
    );
    assert_eq!(done.text(), r#"{"message":"done"}"#);
    // Without tools it is response_format as usual.
    assert_eq!(
        StructuredOutput::Union.resolve(Server::LlamaCpp, false),
        Mode::ResponseFormat
    );
}

#[test]
fn a_report_without_a_schema_still_runs_a_written_call() {
    // A subagent: tools, no output schema.
    let mut sub = request();
    sub.output_schema = None;
    for mode in [Mode::Tool, Mode::Prompt, Mode::Union] {
        let out = unshape(
            reply(
                vec![text(
                    "I will write it.\n```json\n{\"name\": \"write\", \"arguments\": {\"path\": \"x\"}}\n```",
                )],
                StopReason::EndTurn,
            ),
            mode,
            &sub,
        );
        assert_eq!(out.tool_uses().count(), 1, "{mode:?}");
    }
    let report = unshape(
        reply(
            vec![text(
                r#"{"name":"respond","parameters":{"text":"All done: x written."}}"#,
            )],
            StopReason::EndTurn,
        ),
        Mode::Union,
        &sub,
    );
    assert_eq!(report.text(), "All done: x written.");
}

/// A model that answers calls with tools without a native call, twice and
/// never with one, is asked in union steps from then on; one that made a
/// native call once never is; nothing changes unless the mode may adapt.
#[test]
fn a_model_that_writes_no_native_calls_is_asked_in_union_steps() {
    let written = reply(
        vec![text(r#"{"name": "write", "arguments": {"path": "a"}}"#)],
        StopReason::EndTurn,
    );
    let native = reply(
        vec![call("write", json!({"path": "a"}))],
        StopReason::ToolUse,
    );
    let habit = Habit::default();
    assert_eq!(habit.mode(Mode::Tool, true), Mode::Tool);
    habit.learn(Mode::Tool, true, &written, "m");
    assert_eq!(habit.mode(Mode::Tool, true), Mode::Tool);
    habit.learn(Mode::Tool, true, &written, "m");
    assert_eq!(habit.mode(Mode::Tool, true), Mode::Union);
    // Only calls with tools change mode; a config that fixed it keeps it.
    assert_eq!(habit.mode(Mode::ResponseFormat, true), Mode::ResponseFormat);
    assert_eq!(habit.mode(Mode::Tool, false), Mode::Tool);

    let able = Habit::default();
    able.learn(Mode::Tool, true, &native, "m");
    for _ in 0..5 {
        able.learn(Mode::Tool, true, &written, "m");
    }
    assert_eq!(able.mode(Mode::Tool, true), Mode::Tool);
    // Replies to calls in another mode, or not adaptive, teach nothing.
    let other = Habit::default();
    for _ in 0..3 {
        other.learn(Mode::Union, true, &written, "m");
        other.learn(Mode::Tool, false, &written, "m");
    }
    assert_eq!(other.mode(Mode::Tool, true), Mode::Tool);
}

/// The mode may adapt only under `auto`, the full profile and a local server.
#[test]
fn only_auto_on_a_local_server_under_the_full_profile_adapts() {
    use crate::{ModelConfig, Profile, Provider};
    let mut local = ModelConfig::new(Provider::OpenAi, "local");
    local.server = Some(Server::LlamaCpp);
    assert!(local.adaptive_mode());
    let mut small = local.clone();
    small.profile = Profile::Small;
    assert!(!small.adaptive_mode());
    let mut fixed = local.clone();
    fixed.structured_output = StructuredOutput::Tool;
    assert!(!fixed.adaptive_mode());
    let mut openai = local.clone();
    openai.server = Some(Server::OpenAi);
    assert!(!openai.adaptive_mode());
    assert!(!ModelConfig::new(Provider::Anthropic, "claude").adaptive_mode());
}
