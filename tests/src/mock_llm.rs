//! An in-process mock of the Anthropic Messages API that records requests and answers
//! with replies the test scripted per lane.

mod gate;
mod recorded;
mod reply;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use gate::Gate;
pub use recorded::{RecordedRequest, first_words};
pub use reply::{MockReply, MockUsage};

/// How long a request waits for a reply to be pushed onto its empty lane by default.
const DEFAULT_REPLY_WAIT: Duration = Duration::from_secs(5);

type LaneFn = Arc<dyn Fn(&Value) -> String + Send + Sync + 'static>;
type Responder = Arc<dyn Fn(&RecordedRequest) -> Option<MockReply> + Send + Sync + 'static>;

/// The mock server. It stops when dropped.
///
/// Every `POST /v1/messages` is recorded and assigned to a lane (by default its
/// `model`); it is answered with the next [`MockReply`] pushed onto that lane, waiting
/// up to 5 s for one, else with a 400 `invalid_request_error`.
pub struct MockAnthropic {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

struct Shared {
    state: Mutex<MockState>,
    /// Bumped on every push and every recorded request; waiters subscribe to it.
    changed: watch::Sender<u64>,
    message_counter: AtomicU64,
    tool_counter: AtomicU64,
    shutdown: CancellationToken,
}

struct MockState {
    queues: HashMap<String, VecDeque<MockReply>>,
    requests: Vec<RecordedRequest>,
    lane_fn: LaneFn,
    responder: Option<Responder>,
    record: bool,
    reply_wait: Duration,
    context_window: u64,
    max_output: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, MockState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Pops the next reply for `lane`, waiting for a push until `wait` runs out.
    async fn take_reply(&self, lane: &str, wait: Duration) -> Option<MockReply> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut rx = self.changed.subscribe();
            if let Some(reply) = self
                .lock()
                .queues
                .get_mut(lane)
                .and_then(VecDeque::pop_front)
            {
                return Some(reply);
            }
            tokio::select! {
                _ = rx.changed() => {}
                () = tokio::time::sleep_until(deadline) => return None,
                () = self.shutdown.cancelled() => return None,
            }
        }
    }
}

impl MockAnthropic {
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
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("mock LLM: cannot bind {addr}: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("mock LLM: no local address: {e}"));
        let by_model: LaneFn =
            Arc::new(|body: &Value| body["model"].as_str().unwrap_or_default().to_owned());
        let shared = Arc::new(Shared {
            state: Mutex::new(MockState {
                queues: HashMap::new(),
                requests: Vec::new(),
                lane_fn: by_model,
                responder: None,
                record: true,
                reply_wait: DEFAULT_REPLY_WAIT,
                context_window: 200_000,
                max_output: 64_000,
            }),
            changed: watch::Sender::new(0),
            message_counter: AtomicU64::new(0),
            tool_counter: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
            // The Responses API (the Codex CLI's), for a client whose base
            // URL is `<base>/v1`: the request is read as a Messages request
            // (its user and assistant texts), so lanes and responders work
            // the same, and the reply is sent as Responses API events.
            .route("/v1/responses", post(responses))
            .route("/v1/models/{id}", get(model_info))
            .fallback(not_found)
            .with_state(shared.clone());
        let stop = shared.shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::warn!(error = %e, "mock LLM server stopped with an error");
            }
        });
        MockAnthropic { shared, addr }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): the client's base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues `reply` behind any replies already pending on `lane` (FIFO).
    pub fn push(&self, lane: &str, reply: MockReply) {
        self.shared
            .lock()
            .queues
            .entry(lane.to_owned())
            .or_default()
            .push_back(reply);
        self.shared.bump();
    }

    /// Replaces the lane function (default: the request's `"model"`).
    pub fn set_lane_fn(&self, f: impl Fn(&Value) -> String + Send + Sync + 'static) {
        self.shared.lock().lane_fn = Arc::new(f);
    }

    /// Answers requests whose lane has nothing queued with `f` (pushed replies
    /// go first; `None` falls back to waiting for a push). A reply computed
    /// from the request stays right when a call is made again, e.g. by a
    /// worker that took an Orchestrator over.
    pub fn set_responder(
        &self,
        f: impl Fn(&RecordedRequest) -> Option<MockReply> + Send + Sync + 'static,
    ) {
        self.shared.lock().responder = Some(Arc::new(f));
    }

    /// Whether requests are kept for [`MockAnthropic::requests`] (default: yes).
    /// Long runs (the benchmark) turn it off, so memory does not grow with
    /// every request.
    pub fn set_recording(&self, record: bool) {
        self.shared.lock().record = record;
    }

    /// How long a request on an empty lane waits for a push (default 5 s).
    pub fn set_reply_wait(&self, wait: Duration) {
        self.shared.lock().reply_wait = wait;
    }

    /// What `GET /v1/models/{id}` reports as `max_input_tokens` and `max_tokens`.
    pub fn set_model_limits(&self, context_window: u64, max_output: u64) {
        let mut state = self.shared.lock();
        state.context_window = context_window;
        state.max_output = max_output;
    }

    /// Every recorded `POST /v1/messages`, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The recorded requests of one lane, in arrival order.
    pub fn requests_for(&self, lane: &str) -> Vec<RecordedRequest> {
        let state = self.shared.lock();
        state
            .requests
            .iter()
            .filter(|r| r.lane == lane)
            .cloned()
            .collect()
    }

    /// Scripted replies on `lane` not yet consumed.
    pub fn pending(&self, lane: &str) -> usize {
        self.shared.lock().queues.get(lane).map_or(0, VecDeque::len)
    }

    /// Waits until `lane` has at least `n` recorded requests and returns them all.
    /// Panics on timeout, listing every lane's count.
    pub async fn wait_for_requests(
        &self,
        lane: &str,
        n: usize,
        timeout: Duration,
    ) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut rx = self.shared.changed.subscribe();
            let got = self.requests_for(lane);
            if got.len() >= n {
                return got;
            }
            tokio::select! {
                _ = rx.changed() => {}
                () = tokio::time::sleep_until(deadline) => {
                    panic!(
                        "mock LLM: timed out after {timeout:?} waiting for {n} request(s) on lane \
                         {lane:?}; requests per lane: {:?}",
                        self.lane_counts()
                    );
                }
            }
        }
    }

    /// Recorded requests per lane.
    pub fn lane_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.shared.lock().requests {
            *counts.entry(r.lane.clone()).or_default() += 1;
        }
        counts
    }
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl std::fmt::Debug for MockAnthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockAnthropic")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// `POST /v1/messages`: record, pick the lane's next reply, render it.
async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let arrived = std::time::Instant::now();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("mock: request body is not JSON: {e}");
            return json_error(StatusCode::BAD_REQUEST, "invalid_request_error", &msg);
        }
    };
    let (reply, n) = match decide(&shared, headers, &body, arrived).await {
        Ok(decided) => decided,
        Err(response) => return response,
    };
    let ctx = reply::RenderCtx {
        model: body["model"].as_str().unwrap_or("claude-mock").to_owned(),
        message_id: format!("msg_mock_{n}"),
        request_id: format!("req_mock_{n}"),
        tool_counter: &shared.tool_counter,
    };
    let stream = body["stream"].as_bool().unwrap_or(false);
    reply.render(&ctx, stream)
}

/// `POST /v1/responses`: the request as a Messages body, the reply as
/// Responses API events.
async fn responses(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
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
    let (reply, n) = match decide(&shared, headers, &translated, arrived).await {
        Ok(decided) => decided,
        Err(response) => return response,
    };
    reply.to_openai().render_responses(n)
}

/// Records a request and picks its reply (its lane's next, else the
/// responder's), waiting out the reply's delay and gate.
async fn decide(
    shared: &Arc<Shared>,
    headers: HeaderMap,
    body: &Value,
    arrived: std::time::Instant,
) -> Result<(MockReply, u64), Response> {
    let n = shared.message_counter.fetch_add(1, Ordering::Relaxed) + 1;
    let (lane_fn, responder, wait, record) = {
        let state = shared.lock();
        (
            state.lane_fn.clone(),
            state.responder.clone(),
            state.reply_wait,
            state.record,
        )
    };
    let lane = lane_fn(body);
    let headers = headers
        .iter()
        .map(|(k, v)| {
            let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
            (k.as_str().to_owned(), value)
        })
        .collect();
    let recorded = RecordedRequest {
        lane: lane.clone(),
        body: body.clone(),
        headers,
        received_at: std::time::SystemTime::now(),
        arrived,
    };
    if record {
        shared.lock().requests.push(recorded.clone());
    }
    shared.bump();

    let queued = shared
        .lock()
        .queues
        .get_mut(&lane)
        .and_then(VecDeque::pop_front);
    let reply = match (queued, responder) {
        (Some(reply), _) => Some(reply),
        (None, Some(responder)) => match responder(&recorded) {
            Some(reply) => Some(reply),
            None => shared.take_reply(&lane, wait).await,
        },
        (None, None) => shared.take_reply(&lane, wait).await,
    };
    let Some(reply) = reply else {
        let msg = format!("mock: no scripted reply for lane {lane}");
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &msg,
        ));
    };
    if let Some(delay) = reply.delay {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shared.shutdown.cancelled() => return Err(shutting_down()),
        }
    }
    if let Some(gate) = &reply.gate {
        tokio::select! {
            () = gate.wait() => {}
            () = shared.shutdown.cancelled() => return Err(shutting_down()),
        }
    }
    if let Some(released) = &reply.released {
        (released.0)();
    }
    Ok((reply, n))
}

/// `GET /v1/models/{id}`: the model's limits as set by `set_model_limits`.
async fn model_info(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let (context, max_output) = {
        let state = shared.lock();
        (state.context_window, state.max_output)
    };
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
