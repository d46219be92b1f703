//! An in-process mock of an OpenAI-compatible Chat Completions server
//! (OpenAI, Ollama, vLLM, llama.cpp): it records requests and answers with
//! replies the test scripted per lane, as JSON or as `data:` SSE chunks.
//! It also answers the Responses API (`POST /v1/responses`, streamed, what
//! the Codex CLI speaks) from the same lanes and replies. The lanes,
//! recording and serving are [`crate::mock_server`]'s.

mod reply;
mod semantics;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;

use crate::RecordedRequest;
use crate::mock_server::{MockServer, Shared};
pub use reply::OpenAiReply;
pub use semantics::{Semantics, output_cap};

/// The mock OpenAI-compatible server: `POST /v1/chat/completions` (also
/// under `/custom-mount`, as a proxy mounts it) and `POST /v1/responses`.
/// It stops when dropped.
pub type MockOpenAi = MockServer<OpenAiReply>;

/// What of a real server the mock copies: its handling of `tools` beside
/// `response_format`, and its context window.
#[derive(Default)]
pub struct Copied(Mutex<Server>);

#[derive(Debug, Clone, Copy, Default)]
struct Server {
    semantics: Semantics,
    /// llama-server's `n_ctx` per slot (see [`MockServer::set_window`]).
    window: Option<u64>,
}

/// The prompt tokens the mock counts for a Chat Completions request: a
/// token per 4 bytes of its messages, tools and `response_format` as JSON,
/// rounded up. Deterministic, so that a test can check each request it
/// recorded against the window.
pub fn prompt_tokens(request: &Value) -> u64 {
    let bytes: usize = ["messages", "tools", "response_format"]
        .iter()
        .map(|key| match &request[*key] {
            Value::Null => 0,
            value => value.to_string().len(),
        })
        .sum();
    (bytes as u64).div_ceil(4)
}

impl MockServer<OpenAiReply> {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> MockOpenAi {
        let routes = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/responses", post(responses))
            // A server mounted under another path (a proxy's): the client
            // must use the base URL as given.
            .route("/custom-mount/chat/completions", post(completions))
            .fallback(|| async {
                reply::error_response(404, "not_found_error", "mock: no such endpoint", &[])
            });
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        MockServer::serve(addr, routes).await
    }

    /// `http://127.0.0.1:PORT/v1`, as `OPENAI_BASE_URL` is usually written.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr())
    }

    /// Which server's handling of `tools` beside `response_format` to copy
    /// (default: OpenAI's).
    pub fn set_semantics(&self, semantics: Semantics) {
        self.server(|s| s.semantics = semantics);
    }

    /// Copies a llama-server whose slot holds `window` tokens: a request
    /// whose prompt ([`prompt_tokens`]) and output cap together pass it is
    /// refused with llama-server's 400 `exceed_context_size_error` (its
    /// reply stays on the lane), and every reply's usage reports the
    /// counted prompt.
    pub fn set_window(&self, window: Option<u64>) {
        self.server(|s| s.window = window);
    }

    fn server(&self, change: impl FnOnce(&mut Server)) {
        change(
            &mut self
                .shared
                .extra
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
}

/// Helpers for asserting on Chat Completions requests.
pub trait ChatRequestExt {
    /// The content of the `system` message.
    fn chat_system(&self) -> String;
    /// The content of the last `user` or `tool` message(s) after the last assistant turn, joined by "\n".
    fn chat_last_input(&self) -> String;
    /// The names of the offered functions.
    fn chat_tool_names(&self) -> Vec<String>;
    /// The `response_format.json_schema.schema`, or `null`.
    fn chat_output_schema(&self) -> &Value;
}

impl ChatRequestExt for RecordedRequest {
    fn chat_system(&self) -> String {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "system")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn chat_last_input(&self) -> String {
        let messages = self.messages();
        let start = messages
            .iter()
            .rposition(|m| m["role"] == "assistant")
            .map_or(0, |i| i + 1);
        messages[start..]
            .iter()
            .filter(|m| m["role"] == "user" || m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn chat_tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn chat_output_schema(&self) -> &Value {
        &self.body["response_format"]["json_schema"]["schema"]
    }
}

/// Helpers for asserting on Responses API requests (the Codex CLI's).
pub trait ResponsesRequestExt {
    /// The texts of the `input` messages of `role` (`developer`, `user`,
    /// `assistant`), in order.
    fn input_texts(&self, role: &str) -> Vec<String>;
    /// The `text.format.schema` the request asks the answer to follow, or `null`.
    fn responses_output_schema(&self) -> &Value;
}

impl ResponsesRequestExt for RecordedRequest {
    fn input_texts(&self, role: &str) -> Vec<String> {
        self.body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == "message" && item["role"] == role)
            .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
            .filter_map(|block| block["text"].as_str().map(str::to_owned))
            .collect()
    }

    fn responses_output_schema(&self) -> &Value {
        &self.body["text"]["format"]["schema"]
    }
}

type Mock = State<Arc<Shared<OpenAiReply>>>;

async fn completions(State(shared): Mock, headers: HeaderMap, body: Bytes) -> Response {
    answer(&shared, &headers, &body, false).await
}

async fn responses(State(shared): Mock, headers: HeaderMap, body: Bytes) -> Response {
    answer(&shared, &headers, &body, true).await
}

/// Records the request and answers it with its lane's next reply, as
/// Chat Completions or (`responses_api`) as Responses API events.
async fn answer(
    shared: &Shared<OpenAiReply>,
    headers: &HeaderMap,
    body: &[u8],
    responses_api: bool,
) -> Response {
    let arrived = std::time::Instant::now();
    let body: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("mock: request body is not JSON: {e}");
            return reply::error_response(400, "invalid_request_error", &msg, &[]);
        }
    };
    let server = *shared
        .extra
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let semantics = server.semantics;
    let (recorded, n) = shared.record(headers, &body, arrived);
    let prompt = prompt_tokens(&body);
    let cap = output_cap(&body).unwrap_or(u64::MAX);
    if let Some(window) = server.window
        && prompt.saturating_add(cap) > window
    {
        return reply::exceeds_context(prompt, window);
    }
    let Some(mut reply) = shared.reply_to(&recorded).await else {
        let msg = format!("mock: no scripted reply for lane {}", recorded.lane);
        return reply::error_response(400, "invalid_request_error", &msg, &[]);
    };
    if server.window.is_some() {
        reply = reply.with_prompt_tokens(prompt);
    }
    let reply = match reply.needs_tokens {
        Some(needs) if needs > cap => {
            // Cut off; the same model writes the same reply again next time.
            let cut = reply.resolve(&body, semantics).cut();
            shared.push_front(&recorded.lane, reply);
            cut
        }
        _ => reply.resolve(&body, semantics),
    };
    if !shared.hold(&reply).await {
        return reply::shutting_down();
    }
    if responses_api {
        reply.render_responses(n)
    } else {
        reply.render(&body, n)
    }
}
