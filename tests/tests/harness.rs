//! Tests of the test support itself: the nats-server wrapper and the mock Anthropic server.

use std::time::Duration;

use arbiter_tests::{Gate, MockAnthropic, MockReply, NatsServer, init_tracing};
use async_nats::jetstream::{kv, stream};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const SECS_5: Duration = Duration::from_secs(5);

// ---------- nats-server ----------

#[tokio::test]
async fn nats_server_pubsub_stream_and_kv() {
    init_tracing();
    let server = NatsServer::start().await;
    assert!(
        server.url().starts_with("nats://127.0.0.1:"),
        "{}",
        server.url()
    );

    let client = server.client().await;
    let mut sub = client.subscribe("greet.>").await.unwrap();
    client.publish("greet.joe", "hello".into()).await.unwrap();
    client.flush().await.unwrap();
    let msg = tokio::time::timeout(SECS_5, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (msg.subject.as_str(), &msg.payload[..]),
        ("greet.joe", &b"hello"[..])
    );

    let js = server.jetstream().await;
    let stream = js
        .create_stream(stream::Config {
            name: "EVENTS".into(),
            subjects: vec!["events.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let ack = js
        .publish("events.a", "one".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!((ack.stream.as_str(), ack.sequence), ("EVENTS", 1));
    let stored = stream.get_raw_message(1).await.unwrap();
    assert_eq!(&stored.payload[..], b"one");

    let kv = js
        .create_key_value(kv::Config {
            bucket: "sessions".into(),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("s1", "open".into()).await.unwrap();
    assert_eq!(kv.get("s1").await.unwrap().as_deref(), Some(&b"open"[..]));
}

#[tokio::test]
async fn nats_server_restart_keeps_file_stored_messages_and_port() {
    init_tracing();
    let mut server = NatsServer::start().await;
    let url = server.url().to_owned();
    let js = server.jetstream().await;
    js.create_stream(stream::Config {
        name: "DURABLE".into(),
        subjects: vec!["durable.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("durable.x", "kept".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(server.store_dir().is_dir());

    server.restart().await;
    assert_eq!(server.url(), url);
    assert!(server.is_running());
    let js = server.jetstream().await;
    let mut stream = js.get_stream("DURABLE").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
    let msg = stream.get_raw_message(1).await.unwrap();
    assert_eq!(&msg.payload[..], b"kept");

    // A crash (SIGKILL) then a restart also comes back on the same port.
    server.kill();
    assert!(!server.is_running());
    server.restart().await;
    assert_eq!(server.url(), url);
    let js = server.jetstream().await;
    let mut stream = js.get_stream("DURABLE").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
    assert!(server.log().contains("Server is ready"), "{}", server.log());
}

// ---------- mock Anthropic ----------

fn request(model: &str, stream: bool, user_text: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "system": [{"type": "text", "text": "You are a test."}],
        "messages": [{"role": "user", "content": user_text}],
    })
}

async fn post(mock: &MockAnthropic, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.base_url()))
        .header("x-api-key", "sk-test")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Parses a complete SSE body into (event name, JSON data) pairs, by hand.
fn parse_sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|chunk| !chunk.trim().is_empty())
        .map(|chunk| {
            let mut event = None;
            let mut data = None;
            for line in chunk.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(v).unwrap());
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            (event.unwrap(), data.unwrap())
        })
        .collect()
}

#[tokio::test]
async fn mock_streams_text_with_the_real_event_sequence() {
    let mock = MockAnthropic::start().await;
    mock.push(
        "claude-test",
        MockReply::text("Hello, streaming world!").usage(10, 7, 3, 4),
    );
    let resp = post(&mock, &request("claude-test", true, "hi")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());

    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "content_block_delta")
        .count();
    assert!(
        deltas >= 2,
        "text must come in at least 2 deltas: {names:?}"
    );
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str());
    }

    assert_eq!(
        events[0].1,
        json!({"type": "message_start", "message": {
            "id": "msg_mock_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1,
                      "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4},
        }})
    );
    assert_eq!(
        events[2].1,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    );
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(
                (d["index"].clone(), d["delta"]["type"].clone()),
                (json!(0), json!("text_delta"))
            );
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "Hello, streaming world!");
    assert_eq!(
        events[events.len() - 2].1,
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 7}})
    );
    assert_eq!(mock.pending("claude-test"), 0);
}

#[tokio::test]
async fn mock_answers_tool_use_without_streaming() {
    let mock = MockAnthropic::start().await;
    mock.push(
        "claude-test",
        MockReply::tool_use("grep", json!({"pattern": "fn main"}))
            .and_tool_use("read_file", json!({"path": "src/main.rs"}))
            .with_text("Let me look."),
    );
    let resp = post(&mock, &request("claude-test", false, "find main")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({
            "id": "msg_mock_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_mock_1", "name": "grep", "input": {"pattern": "fn main"}},
                {"type": "tool_use", "id": "toolu_mock_2", "name": "read_file", "input": {"path": "src/main.rs"}},
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 20,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        })
    );
}

#[tokio::test]
async fn mock_streams_tool_input_as_json_fragments() {
    let mock = MockAnthropic::start().await;
    let input = json!({"path": "src/lib.rs", "lines": [1, 2, 3]});
    mock.push("m", MockReply::tool_use("read_file", input.clone()));
    let resp = post(&mock, &request("m", true, "read")).await;
    let events = parse_sse(&resp.text().await.unwrap());
    let start = &events
        .iter()
        .find(|(n, _)| n == "content_block_start")
        .unwrap()
        .1;
    assert_eq!(
        start["content_block"],
        json!({"type": "tool_use", "id": "toolu_mock_1", "name": "read_file", "input": {}})
    );
    let fragments: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert!(fragments.len() >= 2, "{fragments:?}");
    let joined: Value = serde_json::from_str(&fragments.concat()).unwrap();
    assert_eq!(joined, input);
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn mock_http_error_carries_status_body_and_retry_after() {
    let mock = MockAnthropic::start().await;
    mock.push(
        "m",
        MockReply::http_error(429, "rate_limit_error", "slow down").header("retry-after", "2"),
    );
    let resp = post(&mock, &request("m", true, "hi")).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert_eq!(resp.headers()["request-id"], "req_mock_1");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"},
               "request_id": "req_mock_1"})
    );
}

#[tokio::test]
async fn mock_stream_error_breaks_the_stream_after_http_200() {
    let mock = MockAnthropic::start().await;
    mock.push(
        "m",
        MockReply::stream_error("overloaded_error", "Overloaded"),
    );
    let resp = post(&mock, &request("m", true, "hi")).await;
    assert_eq!(resp.status(), 200);
    let events = parse_sse(&resp.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..3],
        ["message_start", "ping", "content_block_start"]
    );
    assert!(
        names[3..names.len() - 1]
            .iter()
            .all(|n| *n == "content_block_delta"),
        "{names:?}"
    );
    assert_eq!(
        events.last().unwrap(),
        &(
            "error".to_owned(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        )
    );
    // Without streaming the same reply is an HTTP error.
    mock.push(
        "m",
        MockReply::stream_error("overloaded_error", "Overloaded"),
    );
    assert_eq!(
        post(&mock, &request("m", false, "hi"))
            .await
            .status()
            .as_u16(),
        529
    );
}

#[tokio::test]
async fn mock_records_requests_by_lane() {
    let mock = MockAnthropic::start().await;
    mock.set_lane_fn(|body| {
        let system = body["system"][0]["text"].as_str().unwrap_or_default();
        if system.contains("planner") {
            "planner".into()
        } else {
            "worker".into()
        }
    });
    mock.push("planner", MockReply::json(&json!({"steps": ["a", "b"]})));
    mock.push("worker", MockReply::text("done"));
    mock.push("worker", MockReply::text("done again"));
    assert_eq!(mock.pending("worker"), 2);

    let mut planner = request("claude-x", false, "plan it");
    planner["system"][0]["text"] = json!("You are the planner.");
    let body: Value = post(&mock, &planner).await.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], r#"{"steps":["a","b"]}"#);
    let body: Value = post(&mock, &request("claude-x", false, "do it"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["content"][0]["text"], "done");

    let all = mock.requests();
    let lanes: Vec<&str> = all.iter().map(|r| r.lane.as_str()).collect();
    assert_eq!(lanes, ["planner", "worker"]);
    let worker = mock.wait_for_requests("worker", 1, SECS_5).await;
    assert_eq!(worker[0].header("X-Api-Key"), Some("sk-test"));
    assert_eq!(worker[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(worker[0].header("content-type"), Some("application/json"));
    assert_eq!(worker[0].system_text(), "You are a test.");
    assert_eq!(worker[0].last_user_text(), "do it");
    assert_eq!(mock.requests_for("planner")[0].last_user_text(), "plan it");
    assert_eq!(mock.pending("worker"), 1);
}

#[tokio::test]
async fn mock_unscripted_lane_gets_400_and_late_pushes_are_used() {
    let mock = MockAnthropic::start().await;
    mock.set_reply_wait(Duration::from_millis(200));
    let resp = post(&mock, &request("nobody", false, "hi")).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "invalid_request_error",
               "message": "mock: no scripted reply for lane nobody"}, "request_id": "req_mock"})
    );

    // A reply pushed while the request waits is used.
    mock.set_reply_wait(SECS_5);
    let late = tokio::spawn({
        let body = request("late", false, "hi");
        let url = format!("{}/v1/messages", mock.base_url());
        async move {
            reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    });
    mock.wait_for_requests("late", 1, SECS_5).await;
    mock.push("late", MockReply::text("just in time"));
    let body: Value = late.await.unwrap().json().await.unwrap();
    assert_eq!(body["content"][0]["text"], "just in time");
}

#[tokio::test]
async fn mock_gated_reply_waits_for_the_gate() {
    let mock = MockAnthropic::start().await;
    let gate = Gate::new();
    mock.push("m", MockReply::text("released").gated(gate.clone()));
    let call = tokio::spawn({
        let body = request("m", false, "hi");
        let url = format!("{}/v1/messages", mock.base_url());
        async move {
            reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    });
    mock.wait_for_requests("m", 1, SECS_5).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!call.is_finished());
    gate.open();
    let body: Value = tokio::time::timeout(SECS_5, call)
        .await
        .unwrap()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["content"][0]["text"], "released");
}

#[tokio::test]
async fn mock_serves_model_limits() {
    let mock = MockAnthropic::start().await;
    mock.set_model_limits(1_000_000, 128_000);
    let url = format!("{}/v1/models/claude-opus-5-5", mock.base_url());
    let body: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "model", "id": "claude-opus-5-5", "display_name": "Mock claude-opus-5-5",
               "created_at": "2026-01-01T00:00:00Z", "max_input_tokens": 1_000_000,
               "max_tokens": 128_000})
    );
}
