//! The core's table cases: CLI runtimes.

use super::*;

#[test]
fn a_claude_turn_counts_its_tools_and_cost_and_takes_its_structured_output() {
    let mut core = cli_core();
    let done = crate::runtime::claude::TurnDone {
        structured: Some(json!({"expects_response": true, "message": "Wrote it."})),
        tools: vec![crate::runtime::claude::ToolCall {
            name: "Write".into(),
            input: json!({"file_path": "a.txt", "content": "x"}),
            is_error: false,
        }],
        context_tokens: Some(5_000),
        usage: json!({"input_tokens": 10, "output_tokens": 20}),
        cost_usd: 0.5,
        ..Default::default()
    };
    let output = core.claude_turn(&done).unwrap();
    assert_eq!(output.message, "Wrote it.");
    assert_eq!(core.snap.tool_count, 1);
    assert_eq!(core.snap.context_tokens, 5_000);
    assert_eq!(core.snap.spend.input_tokens, 10);
    assert_eq!(core.snap.spend.cost_nanos, 500_000_000);
    assert_eq!(
        core.transcript.messages().last().unwrap().role,
        MessageRole::Assistant
    );
}

#[test]
fn a_claude_turn_without_structured_output_goes_back_for_repair() {
    let mut core = cli_core();
    let done = crate::runtime::claude::TurnDone {
        text: "I am done.".into(),
        ..Default::default()
    };
    let detail = core.claude_turn(&done).unwrap_err();
    assert!(detail.contains("without a StructuredOutput call"));
    assert!(detail.contains("I am done."));
}

#[test]
fn a_codex_turn_charges_the_difference_of_the_threads_usage() {
    let mut core = Core::new(settings(Runtime::Codex), Vec::new(), Snapshot::new());
    let turn = |usage: Value| crate::runtime::codex::TurnDone {
        thread_id: "t1".into(),
        text: Some(output_json(true, "ok")),
        tools: Vec::new(),
        usage,
    };
    core.codex_turn(
        turn(json!({"input_tokens": 100, "output_tokens": 10})),
        "r.jsonl".into(),
        Some(100),
    )
    .unwrap();
    core.codex_turn(
        turn(json!({"input_tokens": 250, "output_tokens": 30})),
        "r.jsonl".into(),
        None,
    )
    .unwrap();
    assert_eq!(core.snap.spend.requests, 2);
    assert_eq!(core.snap.spend.output_tokens, 30, "10, then 20 more");
    assert_eq!(core.snap.context_tokens, 100);
    assert_eq!(core.snap.codex.as_ref().unwrap().thread_id, "t1");
}

#[test]
fn a_cli_turn_sends_the_pending_user_message_or_says_carry_on() {
    assert_eq!(cli_core().cli_input(), "[system] Continue your work.");
    let mut core = cli_core();
    core.take_words(input(1, "a"), true);
    core.take_words(input(2, "b"), true);
    assert_eq!(core.cli_input(), "a\n\nb");
}
