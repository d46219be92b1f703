//! An in-process mock of the Anthropic Messages API that records requests and answers
//! with replies the test scripted per lane (the lanes, recording and serving are
//! [`crate::mock_server`]'s).

mod reply;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::mock_server::{MockServer, Shared};
pub use reply::{MockReply, MockUsage};

/// The mock Anthropic server: `POST /v1/messages`, `GET /v1/models/{id}`, and
/// the Responses API (`POST /v1/responses`) read as a Messages request. It
/// stops when dropped.
pub type MockAnthropic = MockServer<MockReply>;

/// What the mock says of its model, beside its lanes.
pub struct Model {
    /// `(max_input_tokens, max_tokens)` for `GET /v1/models/{id}`.
    limits: Mutex<(u64, u64)>,
    /// Numbers the `tool_use` blocks, for their ids.
    tool_counter: AtomicU64,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            limits: Mutex::new((200_000, 64_000)),
            tool_counter: AtomicU64::new(0),
        }
    }
}

impl MockServer<MockReply> {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> MockAnthropic {
        Self::start_on("127.0.0.1".parse().expect("an IP")).await
    }

    /// Binds `ip` on a free port (another host's test reaches it there) and starts serving.
    pub async fn start_on(ip: std::net::IpAddr) -> MockAnthropic {
        Self::start_at(SocketAddr::new(ip, 0)).await
    }

    /// Binds `addr` (port 0: a free one) and starts serving.
    pub async fn start_at(addr: SocketAddr) -> MockAnthropic {
        let routes = Router::new()
            .route("/v1/messages", post(messages))
            // The Responses API (the Codex CLI's), for a client whose base
            // URL is `<base>/v1`: the request is read as a Messages request
            // (its user and assistant texts), so lanes and responders work
            // the same, and the reply is sent as Responses API events.
            .route("/v1/responses", post(responses))
            .route("/v1/models/{id}", get(model_info))
            .fallback(not_found);
        MockServer::serve(addr, routes).await
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): the client's base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// What `GET /v1/models/{id}` reports as `max_input_tokens` and `max_tokens`.
    pub fn set_model_limits(&self, context_window: u64, max_output: u64) {
        *self
            .shared
            .extra
            .limits
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = (context_window, max_output);
    }
}

type Mock = State<Arc<Shared<MockReply>>>;

/// `POST /v1/messages`: record, pick the lane's next reply, render it.
async fn messages(State(shared): Mock, headers: HeaderMap, body: Bytes) -> Response {
    let arrived = std::time::Instant::now();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("mock: request body is not JSON: {e}");
            return json_error(StatusCode::BAD_REQUEST, "invalid_request_error", &msg);
        }
    };
    let (reply, n) = match decide(&shared, &headers, &body, arrived).await {
        Ok(decided) => decided,
        Err(response) => return response,
    };
    let ctx = reply::RenderCtx {
        model: body["model"].as_str().unwrap_or("claude-mock").to_owned(),
        message_id: format!("msg_mock_{n}"),
        request_id: format!("req_mock_{n}"),
        tool_counter: &shared.extra.tool_counter,
    };
    let stream = body["stream"].as_bool().unwrap_or(false);
    reply.render(&ctx, stream)
}

/// `POST /v1/responses`: the request as a Messages body, the reply as
/// Responses API events.
async fn responses(State(shared): Mock, headers: HeaderMap, body: Bytes) -> Response {
    let arrived = std::time::Instant::now();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("mock: request body is not JSON: {e}");
            return json_error(StatusCode::BAD_REQUEST, "invalid_request_error", &msg);
        }
    };
    let messages: Vec<Value> = body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| {
            item["type"] == "message" && (item["role"] == "user" || item["role"] == "assistant")
        })
        .filter_map(|item| {
            let texts: Vec<Value> = item["content"]
                .as_array()?
                .iter()
                .filter_map(|b| b["text"].as_str())
                // The CLI's own `<environment_context>` and the like.
                .filter(|t| !t.starts_with('<'))
                .map(|t| json!({"type": "text", "text": t}))
                .collect();
            (!texts.is_empty()).then(|| json!({"role": item["role"], "content": texts}))
        })
        .collect();
    let tools: Vec<Value> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(|name| json!({"name": name})))
        .collect();
    let translated =
        json!({"model": body["model"], "messages": messages, "tools": tools, "stream": true});
    let (reply, n) = match decide(&shared, &headers, &translated, arrived).await {
        Ok(decided) => decided,
        Err(response) => return response,
    };
    reply.to_openai().render_responses(n)
}

/// Records a request and picks its reply (its lane's next, else the
/// responder's), waiting out the reply's delay and gate.
async fn decide(
    shared: &Shared<MockReply>,
    headers: &HeaderMap,
    body: &Value,
    arrived: std::time::Instant,
) -> Result<(MockReply, u64), Response> {
    let (recorded, n) = shared.record(headers, body, arrived);
    let Some(reply) = shared.reply_to(&recorded).await else {
        let msg = format!("mock: no scripted reply for lane {}", recorded.lane);
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &msg,
        ));
    };
    if !shared.hold(&reply).await {
        return Err(shutting_down());
    }
    Ok((reply, n))
}

/// `GET /v1/models/{id}`: the model's limits as set by `set_model_limits`.
async fn model_info(State(shared): Mock, Path(id): Path<String>) -> Response {
    let (context, max_output) = *shared
        .extra
        .limits
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    axum::Json(json!({
        "type": "model",
        "id": id,
        "display_name": format!("Mock {id}"),
        "created_at": "2026-01-01T00:00:00Z",
        "max_input_tokens": context,
        "max_tokens": max_output,
    }))
    .into_response()
}

async fn not_found() -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        "not_found_error",
        "mock: no such endpoint",
    )
}

fn shutting_down() -> Response {
    json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "api_error",
        "mock: shutting down",
    )
}

fn json_error(status: StatusCode, error_type: &str, message: &str) -> Response {
    let body = reply::error_body(error_type, message, "req_mock").to_string();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::{MockAnthropic, MockReply};
    use serde_json::json;

    /// One plain (not streamed) request saying "hi".
    async fn say_hi(mock: &MockAnthropic) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/messages", mock.base_url()))
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn recording_can_be_turned_off() {
        let mock = MockAnthropic::start().await;
        mock.set_responder(|_| Some(MockReply::text("decided")));
        let ask = || async {
            let resp = say_hi(&mock).await;
            let body: serde_json::Value = resp.json().await.unwrap();
            body["content"][0]["text"].as_str().unwrap().to_owned()
        };
        assert_eq!(ask().await, "decided");
        mock.set_recording(false);
        assert_eq!(ask().await, "decided");
        assert_eq!(mock.requests().len(), 1);
    }

    /// What the benchmark's `--model-delay-ms` relies on: a delayed reply
    /// is stamped when it leaves, after its delay, not when it was chosen.
    #[tokio::test]
    async fn a_delayed_reply_is_stamped_when_it_leaves() {
        use std::sync::{Arc, Mutex};
        use std::time::{Duration, Instant};
        let mock = MockAnthropic::start().await;
        let left: Arc<Mutex<Option<Instant>>> = Arc::default();
        let stamp = left.clone();
        mock.set_responder(move |_| {
            let stamp = stamp.clone();
            Some(
                MockReply::text("late")
                    .delay(Duration::from_millis(40))
                    .on_release(move || *stamp.lock().unwrap() = Some(Instant::now())),
            )
        });
        let asked = Instant::now();
        let resp = say_hi(&mock).await;
        let answered = Instant::now();
        assert!(resp.status().is_success());
        let left = left.lock().unwrap().expect("the reply was never released");
        assert!(left.duration_since(asked) >= Duration::from_millis(40));
        assert!(left <= answered);
    }
}
