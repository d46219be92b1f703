//! Shared set-up of the provider tests: client configurations pointed at the
//! mock servers, fixtures, and a tool-use loop driven the way the worker does.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbiter_llm::{
    ApiKey, Block, Message, MessageRole, Model, ModelConfig, Provider, Request, Response,
    RetryPolicy, ToolSpec,
};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

pub const KEY: &str = "sk-test-secret-key-4f1e9c";

/// A client configuration for the mock at `base_url`: fast retries, no waiting on real time.
pub fn config(provider: Provider, model: &str, base_url: &str) -> ModelConfig {
    let mut config = ModelConfig::new(provider, model);
    config.base_url = base_url.to_owned();
    config.api_key = Some(ApiKey::new(KEY));
    config.retry = RetryPolicy {
        max_retries: 3,
        initial_backoff: Duration::from_millis(500),
        max_backoff: Duration::from_secs(8),
        max_retry_after: Duration::from_secs(60),
    };
    config
}

pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn read_tool() -> ToolSpec {
    ToolSpec {
        name: "read".into(),
        description: "Read a file.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"]
        }),
    }
}

pub fn request(user: &str) -> Request {
    Request {
        system: "You are a careful assistant.".into(),
        messages: vec![Message::user(user)].into(),
        tools: vec![read_tool()].into(),
        output_schema: None,
        max_output_tokens: None,
    }
}

/// Calls the model, answering every tool call with `result(name, input)`,
/// until it replies without one. Returns every response, in order.
pub async fn tool_loop(
    model: &dyn Model,
    mut request: Request,
    result: impl Fn(&str, &serde_json::Value) -> String,
) -> Vec<Response> {
    let mut responses = Vec::new();
    for _ in 0..5 {
        let response = model.complete(request.clone()).await.unwrap();
        std::sync::Arc::make_mut(&mut request.messages).push(Message {
            role: MessageRole::Assistant,
            content: response.content.clone(),
        });
        let results: Vec<Block> = response
            .tool_uses()
            .map(|(id, name, input)| Block::ToolResult {
                tool_use_id: id.to_owned(),
                content: result(name, input),
                is_error: false,
            })
            .collect();
        let done = results.is_empty();
        responses.push(response);
        if done {
            return responses;
        }
        std::sync::Arc::make_mut(&mut request.messages).push(Message {
            role: MessageRole::User,
            content: results,
        });
    }
    panic!("the tool loop did not end in 5 calls");
}

/// A TCP front for a mock server whose first `drop` connections are closed
/// as soon as a request's headers have arrived (a server that crashed or
/// a proxy that gave up mid-request); later connections are passed through.
pub struct FlakyProxy {
    pub base_url: String,
    connections: Arc<AtomicUsize>,
}

impl FlakyProxy {
    pub async fn start(target: SocketAddr, drop: usize) -> FlakyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if n < drop {
                        let mut seen = Vec::new();
                        let mut buf = [0u8; 4096];
                        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            match client.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(read) => seen.extend_from_slice(&buf[..read]),
                            }
                        }
                        return; // dropped: the connection closes, unanswered
                    }
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        FlakyProxy {
            base_url,
            connections,
        }
    }

    /// Connections accepted so far, dropped ones included.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}
