//! API keys never appear in errors, `Debug` output or traces, even when a
//! server echoes the key back or the connection fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use arbiter_llm::config::{self, ConfigFile, ProviderOverrides, RoleOverrides};
use arbiter_llm::{AnthropicClient, ApiKey, Model, OpenAiClient, Provider};
use arbiter_protocol::Role;
use arbiter_tests::{MockAnthropic, MockOpenAi, MockReply, OpenAiReply};
use common::*;

/// Everything written by the tracing subscriber under test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(KEY), "the key leaked into {what}: {text}");
}

#[tokio::test(start_paused = true)]
async fn the_key_appears_in_no_error_debug_output_or_trace() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let anthropic_mock = MockAnthropic::start().await;
    let openai_mock = MockOpenAi::start().await;
    let anthropic =
        AnthropicClient::new(config(Provider::Anthropic, "m", &anthropic_mock.base_url())).unwrap();
    let openai = OpenAiClient::new(config(Provider::OpenAi, "m", &openai_mock.base_url())).unwrap();
    let echo = format!("invalid x-api-key: {KEY}");
    let mut errors = Vec::new();

    // 401s that echo the key, retried 529s and a mid-stream error that echo it too.
    anthropic_mock.push(
        "m",
        MockReply::http_error(401, "authentication_error", &echo),
    );
    errors.push(anthropic.complete(request("a")).await.unwrap_err());
    anthropic_mock.push("m", MockReply::http_error(529, "overloaded_error", &echo));
    anthropic_mock.push("m", MockReply::stream_error("overloaded_error", &echo));
    anthropic_mock.push("m", MockReply::text("ok"));
    anthropic.complete(request("b")).await.unwrap();
    openai_mock.push(
        "m",
        OpenAiReply::http_error(401, "invalid_request_error", &echo),
    );
    errors.push(openai.complete(request("c")).await.unwrap_err());
    openai_mock.push("m", OpenAiReply::http_error(500, "server_error", &echo));
    openai_mock.push("m", OpenAiReply::stream_error("server_error", &echo));
    openai_mock.push("m", OpenAiReply::text("ok"));
    openai.complete(request("d")).await.unwrap();

    // A refused connection, after retries.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let client = arbiter_llm::client_for(&config(provider, "m", &dead)).unwrap();
        errors.push(client.complete(request("e")).await.unwrap_err());
    }

    for error in &errors {
        assert_clean("an error's Display", &error.to_string());
        assert_clean("an error's Debug", &format!("{error:?}"));
        assert_clean(
            "a wire error",
            &serde_json::to_string(&error.to_wire(Role::Orchestrator)).unwrap(),
        );
    }
    assert!(
        errors[0].to_string().contains("<redacted>"),
        "{}",
        errors[0]
    );

    // Debug of every structure that holds a key.
    let file = ConfigFile::parse("[arbiter]\nmodel = \"openai:m\"\n").unwrap();
    let flags = ProviderOverrides {
        anthropic_api_key: Some(ApiKey::new(KEY)),
        openai_api_key: Some(ApiKey::new(KEY)),
        ..Default::default()
    };
    let role = config::resolve(
        &file,
        Role::Arbiter,
        &flags,
        &RoleOverrides::default(),
        &|_| None,
    )
    .unwrap();
    assert!(role.model.api_key.is_some());
    let shown = [
        format!("{:?}", ApiKey::new(KEY)),
        format!("{anthropic:?}"),
        format!("{openai:?}"),
        format!("{:?}", anthropic.config()),
        format!("{role:?}"),
        format!("{flags:?}"),
        format!("{:#?}", openai.config()),
    ];
    for text in &shown {
        assert_clean("Debug output", text);
        assert!(text.contains("redacted"), "{text}");
    }

    let trace = captured.text();
    assert!(trace.contains("retrying"), "the capture works: {trace}");
    assert_clean("the trace", &trace);
    // The requests did carry it, as headers.
    assert_eq!(anthropic_mock.requests()[0].header("x-api-key"), Some(KEY));
    let bearer = format!("Bearer {KEY}");
    assert_eq!(
        openai_mock.requests()[0].header("authorization"),
        Some(bearer.as_str())
    );
}
