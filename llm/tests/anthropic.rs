//! The Anthropic client against the mock Messages server and recorded SSE
//! fixtures: tool-use round trips, structured output, caching and usage,
//! model limits, retries and their timing (paused clock), and every kind of
//! failure a long run meets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use arbiter_llm::structured;
use arbiter_llm::{
    AnthropicClient, Block, LlmError, Model, ModelLimits, Provider, StopReason, StreamEvent, Usage,
};
use arbiter_protocol::{ArbiterIntent, ArbiterOutput};
use arbiter_tests::{MockAnthropic, MockReply};
use common::*;
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::time::Instant;

const MODEL: &str = "claude-sonnet-5-5";

async fn setup() -> (MockAnthropic, AnthropicClient) {
    let mock = MockAnthropic::start().await;
    let client =
        AnthropicClient::new(config(Provider::Anthropic, MODEL, &mock.base_url())).unwrap();
    (mock, client)
}

#[tokio::test]
async fn a_tool_use_loop_round_trips_ids_results_and_cache_breakpoints() {
    let (mock, client) = setup().await;
    mock.set_model_limits(1_000_000, 4_000);
    mock.push(
        MODEL,
        MockReply::tool_use("read", json!({"path": "a.txt"})).with_text("Looking."),
    );
    mock.push(MODEL, MockReply::text("It says hi.").usage(40, 5, 0, 900));
    let responses = tool_loop(&client, request("What is in a.txt?"), |name, input| {
        format!("{name} {}: hi", input["path"].as_str().unwrap())
    })
    .await;
    assert_eq!(responses.len(), 2);
    assert_eq!(responses[0].stop_reason, StopReason::ToolUse);
    assert_eq!(responses[0].text(), "Looking.");
    assert_eq!(responses[1].text(), "It says hi.");
    assert_eq!(
        responses[1].usage,
        Some(Usage {
            input_tokens: 40,
            output_tokens: 5,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 900
        })
    );
    assert_eq!(responses[1].context_tokens(), Some(940));

    let requests = mock.requests_for(MODEL);
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert!(r.is_stream());
        // The output cap is lowered to what GET /v1/models/{id} reports.
        assert_eq!(r.body["max_tokens"], 4_000);
        assert_eq!(r.body["tools"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(r.body["system"][0]["cache_control"]["type"], "ephemeral");
        for sampling in ["temperature", "top_p", "top_k"] {
            assert!(r.body.get(sampling).is_none());
        }
    }
    let second = requests[1].messages();
    assert_eq!(second[1]["content"][1]["type"], "tool_use");
    let id = second[1]["content"][1]["id"].as_str().unwrap();
    assert_eq!(
        second[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": id, "content": "read a.txt: hi",
               "is_error": false, "cache_control": {"type": "ephemeral"}})
    );
    // The growing transcript carries a breakpoint on each of its last two user turns.
    assert_eq!(
        second[0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
}

#[tokio::test]
async fn the_stream_yields_text_as_it_comes_and_tool_calls_only_whole() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::tool_use("read", json!({"path": "a/long/path/to/a/file.txt"}))
            .with_text("Let me look at that."),
    );
    let events: Vec<StreamEvent> = client
        .stream(request("go"))
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Let me look at that.");
    assert!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
            .count()
            >= 2
    );
    let calls: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCall { .. }))
        .collect();
    assert_eq!(calls.len(), 1);
    assert!(
        matches!(calls[0], StreamEvent::ToolCall { input, .. } if input["path"] == "a/long/path/to/a/file.txt")
    );
    assert!(matches!(events.last(), Some(StreamEvent::Completed(_))));
}

#[tokio::test]
async fn a_recorded_stream_with_thinking_and_unknown_events_and_cache_usage() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::raw(200, "text/event-stream", fixture("anthropic_tool_use.sse")),
    );
    let response = client.complete(request("go")).await.unwrap();
    assert_eq!(
        response.content,
        vec![
            Block::Thinking {
                thinking: "The file is needed first.".into(),
                signature: "EqQBCgIYAhIM1gbcDa9GJwZA".into()
            },
            Block::Text {
                text: "I'll read the file.".into()
            },
            Block::ToolUse {
                id: "toolu_01A09q90qw90lq917835lq9".into(),
                name: "read".into(),
                input: json!({"path": "src/main.rs"})
            },
        ]
    );
    let usage = response.usage.unwrap();
    assert_eq!(
        usage,
        Usage {
            input_tokens: 12,
            output_tokens: 89,
            cache_creation_input_tokens: 2048,
            cache_read_input_tokens: 30000
        }
    );
    // Total input = input + cache creation + cache read.
    assert_eq!(usage.total_input(), 32_060);
}

#[tokio::test]
async fn structured_output_goes_through_output_config() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::json(&json!({"intent": "address_human", "message": "Speak."})),
    );
    let mut req = request("hello");
    req.tools = Default::default();
    let reply = structured::complete::<ArbiterOutput>(&client, req, 2)
        .await
        .unwrap();
    assert_eq!(reply.value.intent, ArbiterIntent::AddressHuman);
    assert_eq!(reply.repairs, 0);
    let body = &mock.requests_for(MODEL)[0].body;
    assert_eq!(body["output_config"]["format"]["type"], "json_schema");
    let schema = &body["output_config"]["format"]["schema"];
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["intent", "message"]));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::http_error(429, "rate_limit_error", "slow down").header("retry-after", "7"),
    );
    mock.push(MODEL, MockReply::text("ok"));
    let start = Instant::now();
    let response = client.complete(request("go")).await.unwrap();
    let waited = start.elapsed();
    assert_eq!(response.text(), "ok");
    assert_eq!(mock.requests_for(MODEL).len(), 2);
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_millis(7_500),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_wins_over_retry_after() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::http_error(503, "api_error", "busy")
            .header("retry-after-ms", "2500")
            .header("retry-after", "30"),
    );
    mock.push(MODEL, MockReply::text("ok"));
    let start = Instant::now();
    client.complete(request("go")).await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(2_500) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn overloaded_529_then_success_backs_off_with_jitter() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::http_error(529, "overloaded_error", "Overloaded"),
    );
    mock.push(
        MODEL,
        MockReply::http_error(529, "overloaded_error", "Overloaded"),
    );
    mock.push(MODEL, MockReply::text("ok"));
    let start = Instant::now();
    let response = client.complete(request("go")).await.unwrap();
    let waited = start.elapsed();
    assert_eq!(response.text(), "ok");
    assert_eq!(mock.requests_for(MODEL).len(), 3);
    // 0.5 s then 1 s, each up to a quarter shorter.
    assert!(
        waited >= Duration::from_millis(1_125) && waited <= Duration::from_millis(1_600),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn overload_past_the_budget_is_a_typed_error() {
    let (mock, client) = setup().await;
    for _ in 0..4 {
        mock.push(
            MODEL,
            MockReply::http_error(529, "overloaded_error", "Overloaded"),
        );
    }
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Overloaded { .. }), "{err:?}");
    assert_eq!(mock.requests_for(MODEL).len(), 4);
}

#[tokio::test(start_paused = true)]
async fn unauthorized_is_not_retried_and_reads_plainly() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::http_error(401, "authentication_error", "invalid x-api-key"),
    );
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "authentication failed: invalid x-api-key (is the API key right?)"
    );
    assert_eq!(mock.requests_for(MODEL).len(), 1);
    assert_eq!(mock.pending(MODEL), 0);
}

#[tokio::test(start_paused = true)]
async fn client_errors_and_spend_limits_are_never_retried() {
    let (mock, client) = setup().await;
    let cases = [
        (400, "invalid_request_error", "messages: field required"),
        (403, "permission_error", "not allowed"),
        (413, "request_too_large", "too big"),
        (402, "billing_error", "your credit balance is too low"),
        (
            400,
            "invalid_request_error",
            "You have reached your specified API usage limits",
        ),
    ];
    for (status, kind, message) in cases {
        // x-should-retry: true must not override the rule.
        mock.push(
            MODEL,
            MockReply::http_error(status, kind, message).header("x-should-retry", "true"),
        );
        mock.push(MODEL, MockReply::text("should not be reached"));
        let err = client.complete(request("go")).await.unwrap_err();
        assert!(!err.is_retryable(), "{status}: {err:?}");
        assert_eq!(mock.pending(MODEL), 1, "{status} was retried");
        client.complete(request("drain")).await.unwrap();
    }
    assert_eq!(mock.requests_for(MODEL).len(), 10);
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_false_stops_a_retry() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::http_error(529, "overloaded_error", "Overloaded")
            .header("x-should-retry", "false"),
    );
    mock.push(MODEL, MockReply::text("not reached"));
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Overloaded { .. }), "{err:?}");
    assert_eq!(mock.requests_for(MODEL).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_event_mid_stream_is_retried_from_the_start() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::stream_error("overloaded_error", "Overloaded"),
    );
    mock.push(MODEL, MockReply::text("whole answer"));
    let response = client.complete(request("go")).await.unwrap();
    assert_eq!(response.text(), "whole answer");
    assert_eq!(mock.requests_for(MODEL).len(), 2);

    // Seen through stream(): the partial text, then the typed error, no tool call.
    mock.push(
        MODEL,
        MockReply::raw(
            200,
            "text/event-stream",
            fixture("anthropic_error_event.sse"),
        ),
    );
    let items: Vec<_> = client.stream(request("go")).await.unwrap().collect().await;
    assert!(
        items
            .iter()
            .all(|i| !matches!(i, Ok(StreamEvent::ToolCall { .. })))
    );
    let last = items.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(last, LlmError::Overloaded { .. }), "{last:?}");
}

#[tokio::test]
async fn malformed_sse_is_a_stream_error() {
    let (mock, mut_client) = setup().await;
    let mut config = mut_client.config().clone();
    config.retry.max_retries = 0;
    let client = AnthropicClient::new(config).unwrap();
    mock.push(
        MODEL,
        MockReply::raw(200, "text/event-stream", fixture("anthropic_malformed.sse")),
    );
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Stream(_)), "{err:?}");
    assert!(err.to_string().contains("malformed SSE data"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_mid_tool_call_never_yields_the_call() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        MockReply::raw(
            200,
            "text/event-stream",
            fixture("anthropic_cut_mid_tool.sse"),
        ),
    );
    let items: Vec<_> = client.stream(request("go")).await.unwrap().collect().await;
    assert!(items.iter().all(|i| !matches!(
        i,
        Ok(StreamEvent::ToolCall { .. }) | Ok(StreamEvent::Completed(_))
    )));
    let last = items.last().unwrap().as_ref().unwrap_err();
    assert!(
        last.to_string().contains("closed before message_stop"),
        "{last}"
    );

    // complete() starts over and returns only a whole reply.
    mock.push(
        MODEL,
        MockReply::raw(
            200,
            "text/event-stream",
            fixture("anthropic_cut_mid_tool.sse"),
        ),
    );
    mock.push(
        MODEL,
        MockReply::raw(200, "text/event-stream", fixture("anthropic_tool_use.sse")),
    );
    let response = client.complete(request("go")).await.unwrap();
    assert_eq!(response.tool_uses().count(), 1);
}

#[tokio::test]
async fn model_limits_come_from_the_models_endpoint_unless_configured() {
    let (mock, client) = setup().await;
    mock.set_model_limits(1_000_000, 128_000);
    assert_eq!(
        client.limits().await,
        ModelLimits {
            context_window: Some(1_000_000),
            max_output_tokens: Some(128_000)
        }
    );
    assert_eq!(arbiter_llm::context_budget(&client, 200_000).await, 200_000);

    let mut config = client.config().clone();
    config.limits.context_window = Some(150_000);
    let overridden = AnthropicClient::new(config).unwrap();
    assert_eq!(
        overridden.limits().await,
        ModelLimits {
            context_window: Some(150_000),
            max_output_tokens: Some(128_000)
        }
    );
    // The budget is what percentages are measured against: never past the
    // window less the output cap, so a prompt within it leaves room for a
    // whole reply.
    let cap = overridden.config().max_output_tokens;
    assert!(cap > 0 && cap < 150_000);
    assert_eq!(
        arbiter_llm::context_budget(&overridden, 200_000).await,
        150_000 - cap
    );
    assert_eq!(arbiter_llm::context_budget(&overridden, 1_000).await, 1_000);
}

#[tokio::test(start_paused = true)]
async fn a_silent_stream_and_a_silent_server_time_out() {
    let (mock, base) = setup().await;
    let mut config = base.config().clone();
    config.retry.max_retries = 0;
    config.timeouts.idle = Duration::from_secs(30);
    config.timeouts.request = Duration::from_secs(60);
    let client = AnthropicClient::new(config).unwrap();
    mock.push(
        MODEL,
        MockReply::text("slow words").event_delay(Duration::from_secs(45)),
    );
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout(_)), "{err:?}");
    assert!(err.to_string().contains("idle"), "{err}");

    mock.push(
        MODEL,
        MockReply::text("late").delay(Duration::from_secs(90)),
    );
    let start = Instant::now();
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout(_)), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(61));
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_a_network_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = AnthropicClient::new(config(
        Provider::Anthropic,
        MODEL,
        &format!("http://{addr}"),
    ))
    .unwrap();
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Network(_)), "{err:?}");
}

#[tokio::test]
async fn a_dropped_connection_is_retried_and_then_succeeds() {
    let mock = MockAnthropic::start().await;
    let proxy = FlakyProxy::start(mock.addr(), 1).await;
    let mut config = config(Provider::Anthropic, MODEL, &proxy.base_url);
    // Known limits: no GET /v1/models/{id}, so the first connection is the call.
    config.limits = ModelLimits {
        context_window: Some(200_000),
        max_output_tokens: Some(8_000),
    };
    config.retry.initial_backoff = Duration::from_millis(50);
    let client = AnthropicClient::new(config).unwrap();
    mock.push(MODEL, MockReply::text("made it"));
    let response = client.complete(request("go")).await.unwrap();
    assert_eq!(response.text(), "made it");
    // Two attempts: the dropped one, then one that reached the server.
    assert_eq!(proxy.connections(), 2);
    assert_eq!(mock.requests_for(MODEL).len(), 1);

    // Without retries the same failure is a typed network error.
    let mut once = client.config().clone();
    once.retry.max_retries = 0;
    let proxy = FlakyProxy::start(mock.addr(), 1).await;
    once.base_url = proxy.base_url.clone();
    let err = AnthropicClient::new(once)
        .unwrap()
        .complete(request("go"))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Network(_)), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn a_configured_anthropic_version_is_the_header_sent() {
    let mock = MockAnthropic::start().await;
    let file = arbiter_llm::ConfigFile::parse(
        "[anthropic]\nversion = \"2026-10-21\"\n[orchestrator]\nmodel = \"anthropic:claude-sonnet-5-5\"\n",
    )
    .unwrap();
    let providers = arbiter_llm::ProviderOverrides {
        anthropic_base_url: Some(mock.base_url()),
        anthropic_api_key: Some(arbiter_llm::ApiKey::new(KEY)),
        ..Default::default()
    };
    let role = arbiter_llm::config::resolve(
        &file,
        arbiter_protocol::Role::Orchestrator,
        &providers,
        &arbiter_llm::RoleOverrides::default(),
        &|_| None,
    )
    .unwrap();
    assert_eq!(role.model.anthropic_version, "2026-10-21");
    let client = arbiter_llm::client_for(&role.model).unwrap();
    mock.push(MODEL, MockReply::text("ok"));
    assert_eq!(client.complete(request("go")).await.unwrap().text(), "ok");
    let requests = mock.requests_for(MODEL);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("anthropic-version"), Some("2026-10-21"));
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
}
