//! The OpenAI-compatible client against the mock Chat Completions server and
//! recorded SSE fixtures: tool calls assembled by index, strict structured
//! output, usage present or unknown, Bearer auth, any base URL, retries and
//! failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use arbiter_llm::structured;
use arbiter_llm::{
    LlmError, Model, ModelConfig, OpenAiClient, Provider, StopReason, StreamEvent, Usage,
};
use arbiter_protocol::{ArbiterIntent, ArbiterOutput, OrchestratorOutput};
use arbiter_tests::{ChatRequestExt, MockOpenAi, OpenAiReply};
use common::*;
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::time::Instant;

const MODEL: &str = "qwen2.5-coder";

async fn setup() -> (MockOpenAi, OpenAiClient) {
    let mock = MockOpenAi::start().await;
    let client = OpenAiClient::new(config(Provider::OpenAi, MODEL, &mock.base_url())).unwrap();
    (mock, client)
}

fn no_retries(client: &OpenAiClient) -> OpenAiClient {
    let mut config: ModelConfig = client.config().clone();
    config.retry.max_retries = 0;
    OpenAiClient::new(config).unwrap()
}

#[tokio::test]
async fn a_tool_use_loop_with_parallel_calls_assembled_by_index() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::tool_call("read", json!({"path": "a.txt"}))
            .and_tool_call("read", json!({"path": "b.txt"}))
            .with_text("Reading both."),
    );
    mock.push(
        MODEL,
        OpenAiReply::text("a says hi, b says bye.").usage(1200, 9, 1024),
    );
    let responses = tool_loop(&client, request("Compare a.txt and b.txt"), |_, input| {
        format!("contents of {}", input["path"].as_str().unwrap())
    })
    .await;
    assert_eq!(responses[0].stop_reason, StopReason::ToolUse);
    let calls: Vec<_> = responses[0]
        .tool_uses()
        .map(|(_, _, input)| input["path"].clone())
        .collect();
    assert_eq!(calls, vec![json!("a.txt"), json!("b.txt")]);
    assert_eq!(responses[1].text(), "a says hi, b says bye.");
    // prompt_tokens includes the cached ones: 176 fresh + 1024 read = 1200 in context.
    assert_eq!(
        responses[1].usage,
        Some(Usage {
            input_tokens: 176,
            output_tokens: 9,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 1024
        })
    );
    assert_eq!(responses[1].context_tokens(), Some(1200));

    let requests = mock.requests_for(MODEL);
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert!(r.header("x-api-key").is_none());
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["stream_options"], json!({"include_usage": true}));
        assert_eq!(r.body["max_completion_tokens"], 16_000);
        assert_eq!(r.chat_system(), "You are a careful assistant.");
        assert_eq!(r.chat_tool_names(), vec!["read"]);
    }
    let second = requests[1].messages();
    let assistant = &second[2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "Reading both.");
    let ids: Vec<&str> = assistant["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": ids[0], "content": "contents of a.txt"})
    );
    assert_eq!(
        second[4],
        json!({"role": "tool", "tool_call_id": ids[1], "content": "contents of b.txt"})
    );
    assert_eq!(
        requests[1].chat_last_input(),
        "contents of a.txt\ncontents of b.txt"
    );
}

#[tokio::test]
async fn a_recorded_stream_interleaving_two_calls() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::raw(200, "text/event-stream", fixture("openai_tool_calls.sse")),
    );
    let events: Vec<StreamEvent> = client
        .stream(request("go"))
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    let calls: Vec<(String, serde_json::Value)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall { id, input, .. } => Some((id.clone(), input.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_Ab1".to_owned(), json!({"path": "a.txt"})),
            ("call_Cd2".to_owned(), json!({"pattern": "fn main"})),
        ]
    );
    let Some(StreamEvent::Completed(response)) = events.last() else {
        panic!("{events:?}")
    };
    let usage = response.usage.unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.cache_read_input_tokens,
            usage.output_tokens
        ),
        (132, 3968, 57)
    );
}

#[tokio::test]
async fn structured_output_is_strict_json_schema_and_validated() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::json(&json!({"expects_response": true, "message": "Done."})),
    );
    let mut req = request("report");
    req.tools = Default::default();
    let reply = structured::complete::<OrchestratorOutput>(&client, req, 1)
        .await
        .unwrap();
    assert!(reply.value.expects_response);
    let r = &mock.requests_for(MODEL)[0];
    let format = &r.body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["strict"], true);
    assert_eq!(
        r.chat_output_schema()["required"],
        // Strict mode lists every property; the optional handoff packet and
        // verdict are nullable rather than left out.
        json!(["expects_response", "handoff", "message", "verdict"])
    );
    assert_eq!(r.chat_output_schema()["additionalProperties"], false);
}

#[tokio::test]
async fn a_server_without_usage_reports_it_unknown_not_zero() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::raw(
            200,
            "text/event-stream",
            fixture("openai_ollama_no_usage.sse"),
        ),
    );
    let reply = structured::complete::<ArbiterOutput>(&client, request("hi"), 0)
        .await
        .unwrap();
    assert_eq!(reply.value.intent, ArbiterIntent::AddressHuman);
    assert_eq!(reply.response.usage, None);
    assert_eq!(reply.response.context_tokens(), None);

    mock.push(MODEL, OpenAiReply::text("plain").no_usage());
    let response = client.complete(request("hi")).await.unwrap();
    assert_eq!(response.usage, None);
}

#[tokio::test]
async fn a_server_that_ignores_stream_gets_a_whole_completion_read() {
    let (mock, client) = setup().await;
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "whole"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
    });
    mock.push(
        MODEL,
        OpenAiReply::raw(200, "application/json", body.to_string()),
    );
    let response = client.complete(request("hi")).await.unwrap();
    assert_eq!(response.text(), "whole");
    assert_eq!(response.context_tokens(), Some(10));
}

#[tokio::test]
async fn any_base_url_and_no_key_for_local_servers() {
    let mock = MockOpenAi::start().await;
    // A server mounted under another path than /v1: the base is used as given.
    let base = format!("http://{}/custom-mount", mock.addr());
    let mut config = config(Provider::OpenAi, MODEL, &base);
    config.api_key = None;
    config.max_tokens_field = "max_tokens".into();
    let client = OpenAiClient::new(config).unwrap();
    mock.push(MODEL, OpenAiReply::text("local"));
    assert_eq!(
        client.complete(request("hi")).await.unwrap().text(),
        "local"
    );
    let r = &mock.requests_for(MODEL)[0];
    assert!(r.header("authorization").is_none());
    assert_eq!(r.body["max_tokens"], 16_000);
    assert!(r.body.get("max_completion_tokens").is_none());
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_429_then_success() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::http_error(429, "rate_limit_exceeded", "Rate limit reached")
            .header("retry-after", "4"),
    );
    mock.push(MODEL, OpenAiReply::text("ok"));
    let start = Instant::now();
    assert_eq!(client.complete(request("go")).await.unwrap().text(), "ok");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_millis(4_500),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_retried_and_quota_is_not() {
    let (mock, client) = setup().await;
    mock.push(MODEL, OpenAiReply::http_error(500, "server_error", "boom"));
    mock.push(
        MODEL,
        OpenAiReply::http_error(503, "server_error", "The engine is currently overloaded"),
    );
    mock.push(MODEL, OpenAiReply::text("ok"));
    assert_eq!(client.complete(request("go")).await.unwrap().text(), "ok");
    assert_eq!(mock.requests_for(MODEL).len(), 3);

    mock.push(
        MODEL,
        OpenAiReply::http_error(429, "insufficient_quota", "You exceeded your current quota"),
    );
    mock.push(MODEL, OpenAiReply::text("not reached"));
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::SpendLimit { .. }), "{err:?}");
    assert_eq!(mock.requests_for(MODEL).len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_that_mentions_quota_is_retried_not_a_spend_limit() {
    let (mock, client) = setup().await;
    // OpenAI's per-minute limit, and Azure's (whose text links to "quotaincrease").
    mock.push(
        MODEL,
        OpenAiReply::http_error(
            429,
            "tokens",
            "Rate limit reached for qwen2.5-coder on tokens per min (TPM): Limit 30000, \
             Used 29800, Requested 900. Please try again in 1.8s. Your quota resets every minute.",
        ),
    );
    mock.push(
        MODEL,
        OpenAiReply::http_error(
            429,
            "",
            "Requests to the ChatCompletions_Create Operation have exceeded token rate limit \
             of your current pricing tier. Please retry after 2 seconds. Please go here: \
             https://aka.ms/oai/quotaincrease if you would like to further increase the \
             default rate limit.",
        )
        .header("retry-after", "2"),
    );
    // A server error whose text mentions billing is still a server error.
    mock.push(
        MODEL,
        OpenAiReply::http_error(503, "server_error", "the billing service is unavailable"),
    );
    mock.push(MODEL, OpenAiReply::text("ok"));
    assert_eq!(client.complete(request("go")).await.unwrap().text(), "ok");
    assert_eq!(mock.requests_for(MODEL).len(), 4);
    assert_eq!(mock.pending(MODEL), 0);

    // Seen without retries: the typed kinds.
    let once = no_retries(&client);
    mock.push(
        MODEL,
        OpenAiReply::http_error(429, "tokens", "Rate limit reached; quota resets soon"),
    );
    let err = once.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::RateLimited { .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn unauthorized_is_not_retried_and_reads_plainly() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::http_error(401, "invalid_request_error", "Incorrect API key provided"),
    );
    let err = client.complete(request("go")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "authentication failed: Incorrect API key provided (is the API key right?)"
    );
    assert_eq!(mock.requests_for(MODEL).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_mid_stream_is_typed_and_retried() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::stream_error("server_error", "upstream died"),
    );
    mock.push(MODEL, OpenAiReply::text("second try"));
    assert_eq!(
        client.complete(request("go")).await.unwrap().text(),
        "second try"
    );

    mock.push(
        MODEL,
        OpenAiReply::stream_error("server_error", "upstream died"),
    );
    let err = no_retries(&client)
        .complete(request("go"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            LlmError::Api {
                status: 200,
                retryable: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("upstream died"), "{err}");
}

#[tokio::test]
async fn malformed_sse_is_a_stream_error() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::raw(200, "text/event-stream", fixture("openai_malformed.sse")),
    );
    let err = no_retries(&client)
        .complete(request("go"))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Stream(_)), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_mid_tool_call_never_yields_the_call() {
    let (mock, client) = setup().await;
    mock.push(
        MODEL,
        OpenAiReply::raw(200, "text/event-stream", fixture("openai_cut_mid_tool.sse")),
    );
    let items: Vec<_> = client.stream(request("go")).await.unwrap().collect().await;
    assert_eq!(items.len(), 1, "{items:?}");
    let err = items[0].as_ref().unwrap_err();
    assert!(
        err.to_string()
            .contains("closed before the reply was finished"),
        "{err}"
    );

    mock.push(
        MODEL,
        OpenAiReply::tool_call("read", json!({"path": "x"})).cut_after(3),
    );
    mock.push(MODEL, OpenAiReply::tool_call("read", json!({"path": "x"})));
    let response = client.complete(request("go")).await.unwrap();
    assert_eq!(response.tool_uses().count(), 1);
    assert_eq!(mock.requests_for(MODEL).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_silent_stream_times_out() {
    let (mock, client) = setup().await;
    let mut config = client.config().clone();
    config.retry.max_retries = 0;
    config.timeouts.idle = Duration::from_secs(20);
    let client = OpenAiClient::new(config).unwrap();
    mock.push(
        MODEL,
        OpenAiReply::text("slow").event_delay(Duration::from_secs(30)),
    );
    let err = client.complete(request("go")).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout(_)), "{err:?}");
}

#[tokio::test]
async fn a_base_url_without_v1_is_not_completed_and_a_404_says_so() {
    let mock = MockOpenAi::start().await;
    // The server's API is under /v1, but the base leaves it out: nothing is
    // inserted, and the error names the URL asked and the likely fix.
    let base = mock.base_url().replace("/v1", "");
    let client = OpenAiClient::new(config(Provider::OpenAi, MODEL, &base)).unwrap();
    mock.push(MODEL, OpenAiReply::text("never"));
    let error = client
        .complete(request("hi"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("POST {base}/chat/completions")),
        "{error}"
    );
    assert!(error.contains("usually want it to end in /v1"), "{error}");
    assert!(mock.requests_for(MODEL).is_empty());
}
