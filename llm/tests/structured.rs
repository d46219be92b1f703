//! Structured output through both providers: a reply that does not match
//! the schema is sent back with the validation error and repaired, or, past
//! the repair budget, given up on with a typed error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use arbiter_llm::structured;
use arbiter_llm::{AnthropicClient, LlmError, OpenAiClient, Provider, Request};
use arbiter_protocol::{ArbiterIntent, ArbiterOutput, OrchestratorOutput, Role, WireError};
use arbiter_tests::mock_openai::output_cap;
use arbiter_tests::{ChatRequestExt, MockAnthropic, MockOpenAi, MockReply, OpenAiReply};
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

fn ask() -> Request {
    Request {
        system: "Answer in JSON.".into(),
        messages: vec![arbiter_llm::Message::user("Where does this go?")].into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn anthropic_an_invalid_reply_is_repaired_with_the_validation_error() {
    let mock = MockAnthropic::start().await;
    let client = AnthropicClient::new(config(Provider::Anthropic, "m", &mock.base_url())).unwrap();
    mock.push(
        "m",
        MockReply::json(&json!({"intent": "shout", "message": "HEY"})),
    );
    mock.push("m", MockReply::text("Sure! Here it is."));
    mock.push(
        "m",
        MockReply::json(&json!({"intent": "address_human", "message": "Quietly."})),
    );
    let reply = structured::complete::<ArbiterOutput>(&client, ask(), 2)
        .await
        .unwrap();
    assert_eq!(
        reply.value,
        ArbiterOutput::new(ArbiterIntent::AddressHuman, "Quietly.")
    );
    assert_eq!(reply.repairs, 2);
    let requests = mock.requests_for("m");
    assert_eq!(requests.len(), 3);
    let first_repair = requests[1].last_user_text();
    assert!(
        first_repair.contains("$.intent: \"shout\" is not one of"),
        "{first_repair}"
    );
    assert!(
        requests[1].all_text().contains("\"shout\""),
        "the rejected reply is shown back"
    );
    let second_repair = requests[2].last_user_text();
    assert!(
        second_repair.contains("the reply is not valid JSON"),
        "{second_repair}"
    );
}

#[tokio::test]
async fn anthropic_a_reply_that_stays_invalid_is_given_up_on() {
    let mock = MockAnthropic::start().await;
    let client = AnthropicClient::new(config(Provider::Anthropic, "m", &mock.base_url())).unwrap();
    for _ in 0..2 {
        mock.push(
            "m",
            MockReply::json(&json!({"expects_response": "yes", "message": "x"})),
        );
    }
    let err = structured::complete::<OrchestratorOutput>(&client, ask(), 1)
        .await
        .unwrap_err();
    let LlmError::SchemaViolation { attempts, detail } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*attempts, 2);
    assert_eq!(
        detail,
        "$.expects_response: expected boolean, got a string (\"yes\")"
    );
    assert!(matches!(
        err.to_wire(Role::Orchestrator),
        WireError::SchemaViolation { attempts: 2, .. }
    ));
    assert_eq!(mock.requests_for("m").len(), 2);
}

#[tokio::test]
async fn openai_an_invalid_reply_is_repaired_and_one_given_up_on() {
    let mock = MockOpenAi::start().await;
    let client = OpenAiClient::new(config(Provider::OpenAi, "m", &mock.base_url())).unwrap();
    mock.push("m", OpenAiReply::json(&json!({"intent": "address_human"})));
    mock.push(
        "m",
        OpenAiReply::json(&json!({"intent": "musings", "message": "Hm.", "extra": 1})),
    );
    mock.push(
        "m",
        OpenAiReply::json(&json!({"intent": "musings", "message": "Hm."})),
    );
    let reply = structured::complete::<ArbiterOutput>(&client, ask(), 2)
        .await
        .unwrap();
    assert_eq!(reply.value.intent, ArbiterIntent::Musings);
    let requests = mock.requests_for("m");
    assert!(
        requests[1]
            .chat_last_input()
            .contains("missing required property \"message\"")
    );
    assert!(
        requests[2]
            .chat_last_input()
            .contains("unexpected property \"extra\"")
    );

    mock.push("m", OpenAiReply::text("no JSON here"));
    let err = structured::complete::<ArbiterOutput>(&client, ask(), 0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::SchemaViolation { attempts: 1, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_reply_cut_at_the_models_own_limit_is_repaired_not_parsed() {
    let mock = MockOpenAi::start().await;
    let mut config = config(Provider::OpenAi, "m", &mock.base_url());
    // Already at the model's maximum: no larger cap to ask for.
    config.max_output_tokens = 1024;
    config.limits.max_output_tokens = Some(1024);
    let client = OpenAiClient::new(config).unwrap();
    mock.push(
        "m",
        OpenAiReply::text("{\"intent\": \"address_hu").finish_reason("length"),
    );
    mock.push(
        "m",
        OpenAiReply::json(&json!({"intent": "address_human", "message": "Short."})),
    );
    let reply = structured::complete::<ArbiterOutput>(&client, ask(), 1)
        .await
        .unwrap();
    assert_eq!(reply.value.message, "Short.");
    let requests = mock.requests_for("m");
    assert!(
        requests[1]
            .chat_last_input()
            .contains("cut off at the output token limit")
    );
    let caps: Vec<_> = requests.iter().map(|r| output_cap(&r.body)).collect();
    assert_eq!(caps, vec![Some(1024), Some(1024)]);
}

/// A client of the mock whose configured cap is 1,024 tokens.
fn capped(mock: &MockOpenAi) -> OpenAiClient {
    let mut config = config(Provider::OpenAi, "m", &mock.base_url());
    config.max_output_tokens = 1024;
    OpenAiClient::new(config).unwrap()
}

#[tokio::test]
async fn a_reply_cut_at_its_cap_succeeds_on_one_retry_with_a_larger_cap() {
    for streamed in [false, true] {
        let mock = MockOpenAi::start().await;
        let client = capped(&mock);
        // The answer takes 1,500 tokens: cut off under 1,024, whole under 2,048.
        mock.push(
            "m",
            OpenAiReply::json(&json!({"intent": "address_human", "message": "A long brief."}))
                .needs_tokens(1_500),
        );
        let mut attempts = Vec::new();
        let reply = if streamed {
            structured::complete_with::<ArbiterOutput, _>(&client, ask(), 2, |p| {
                if let structured::Progress::Attempt(n) = p {
                    attempts.push(n);
                }
            })
            .await
        } else {
            structured::complete::<ArbiterOutput>(&client, ask(), 2).await
        }
        .unwrap();
        assert_eq!(reply.value.message, "A long brief.");
        assert_eq!(reply.repairs, 0, "a larger cap is not a repair");
        let requests = mock.requests_for("m");
        let caps: Vec<_> = requests.iter().map(|r| output_cap(&r.body)).collect();
        assert_eq!(caps, vec![Some(1024), Some(2048)], "streamed: {streamed}");
        // The same request otherwise: nothing of the cut reply was added.
        assert_eq!(requests[0].messages(), requests[1].messages());
        if streamed {
            assert_eq!(attempts, vec![0, 1], "the cut attempt's text is void");
        }
        assert_eq!(mock.pending("m"), 0);
    }
}

#[tokio::test]
async fn a_reply_repeating_itself_is_stopped_early_and_repaired() {
    let mock = MockOpenAi::start().await;
    let client = capped(&mock);
    let unit = "I will write hello.py and run it. ";
    let looping = format!(
        "{{\"intent\": \"summon_orchestrator\", \"message\": \"{}",
        unit.repeat(400)
    );
    // ~570 chunks, 5 ms apart: the whole stream would take about 3 s.
    mock.push(
        "m",
        OpenAiReply::text(looping).event_delay(std::time::Duration::from_millis(5)),
    );
    mock.push(
        "m",
        OpenAiReply::json(
            &json!({"intent": "summon_orchestrator", "message": "Write hello.py, run it."}),
        ),
    );
    let started = std::time::Instant::now();
    let mut streamed = String::new();
    let reply = structured::complete_with::<ArbiterOutput, _>(&client, ask(), 1, |p| {
        if let structured::Progress::Text(t) = p {
            streamed.push_str(t);
        }
    })
    .await
    .unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1500),
        "stopped early: {:?}",
        started.elapsed()
    );
    assert!(streamed.len() < 2_000, "{} bytes streamed", streamed.len());
    assert_eq!(reply.value.message, "Write hello.py, run it.");
    assert_eq!(reply.repairs, 1);
    let requests = mock.requests_for("m");
    assert_eq!(requests.len(), 2);
    let repair = requests[1].messages();
    let n = repair.len();
    // The stopped reply goes back with the loop cut out, then the targeted repair.
    let sent_back = repair[n - 2]["content"].as_str().unwrap();
    assert_eq!(sent_back.matches("hello.py").count(), 1, "{sent_back}");
    assert!(
        repair[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("began repeating the same text over and over"),
        "{}",
        repair[n - 1]
    );
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct Tree {
    name: String,
    children: Vec<Tree>,
}

#[tokio::test]
async fn a_recursive_output_type_is_an_invalid_request_and_nothing_is_sent() {
    let mock = MockAnthropic::start().await;
    let client = AnthropicClient::new(config(Provider::Anthropic, "m", &mock.base_url())).unwrap();
    mock.push("m", MockReply::json(&json!({"name": "a", "children": []})));
    let err = structured::complete::<Tree>(&client, ask(), 2)
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::InvalidRequest { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("the schema of Tree is recursive ($.properties.children.items"),
        "{err}"
    );
    let err = structured::complete_with::<Tree, _>(&client, ask(), 2, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::InvalidRequest { .. }), "{err:?}");
    assert!(mock.requests_for("m").is_empty());
    assert_eq!(mock.pending("m"), 1);
}
