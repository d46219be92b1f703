//! An in-process mock of an OpenAI-compatible Chat Completions server
//! (OpenAI, Ollama, vLLM, llama.cpp): it records requests and answers with
//! replies the test scripted per lane, as JSON or as `data:` SSE chunks.
//! It also answers the Responses API (`POST /v1/responses`, streamed, what
//! the Codex CLI speaks) from the same lanes and replies.

mod reply;
mod semantics;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::RecordedRequest;
pub use reply::OpenAiReply;
pub use semantics::{Semantics, output_cap};

const DEFAULT_REPLY_WAIT: Duration = Duration::from_secs(5);

type LaneFn = Arc<dyn Fn(&Value) -> String + Send + Sync + 'static>;

/// The mock server. It stops when dropped.
///
/// Every `POST /v1/chat/completions` is recorded and assigned to a lane (by
/// default its `model`); it is answered with the next [`OpenAiReply`] pushed
/// onto that lane, waiting up to 5 s for one, else with a 400.
pub struct MockOpenAi {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

struct Shared {
    state: Mutex<MockState>,
    changed: watch::Sender<u64>,
    counter: AtomicU64,
    shutdown: CancellationToken,
}

struct MockState {
    queues: HashMap<String, VecDeque<OpenAiReply>>,
    requests: Vec<RecordedRequest>,
    lane_fn: LaneFn,
    reply_wait: Duration,
    semantics: Semantics,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, MockState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    async fn take_reply(&self, lane: &str, wait: Duration) -> Option<OpenAiReply> {
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

impl MockOpenAi {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> MockOpenAi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("mock OpenAI: cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("mock OpenAI: no local address: {e}"));
        let by_model: LaneFn =
            Arc::new(|body: &Value| body["model"].as_str().unwrap_or_default().to_owned());
        let shared = Arc::new(Shared {
            state: Mutex::new(MockState {
                queues: HashMap::new(),
                requests: Vec::new(),
                lane_fn: by_model,
                reply_wait: DEFAULT_REPLY_WAIT,
                semantics: Semantics::default(),
            }),
            changed: watch::Sender::new(0),
            counter: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/responses", post(responses))
            // A server mounted under another path (a proxy's): the client
            // must use the base URL as given.
            .route("/custom-mount/chat/completions", post(completions))
            .fallback(|| async {
                reply::error_response(404, "not_found_error", "mock: no such endpoint", &[])
            })
            .with_state(shared.clone());
        let stop = shared.shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::warn!(error = %e, "mock OpenAI server stopped with an error");
            }
        });
        MockOpenAi { shared, addr }
    }

    /// `http://127.0.0.1:PORT/v1`, as `OPENAI_BASE_URL` is usually written.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues `reply` behind any replies already pending on `lane` (FIFO).
    pub fn push(&self, lane: &str, reply: OpenAiReply) {
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

    /// Which server's handling of `tools` beside `response_format` to copy
    /// (default: OpenAI's).
    pub fn set_semantics(&self, semantics: Semantics) {
        self.shared.lock().semantics = semantics;
    }

    /// How long a request on an empty lane waits for a push (default 5 s).
    pub fn set_reply_wait(&self, wait: Duration) {
        self.shared.lock().reply_wait = wait;
    }

    /// Every recorded request, in arrival order.
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

    /// Recorded requests per lane.
    pub fn lane_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.shared.lock().requests {
            *counts.entry(r.lane.clone()).or_default() += 1;
        }
        counts
    }

    /// Waits until `lane` has at least `n` recorded requests and returns them all.
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
                () = tokio::time::sleep_until(deadline) => panic!(
                    "mock OpenAI: timed out after {timeout:?} waiting for {n} request(s) on lane \
                     {lane:?}; requests per lane: {:?}",
                    self.lane_counts()
                ),
            }
        }
    }
}

impl Drop for MockOpenAi {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl std::fmt::Debug for MockOpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockOpenAi")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
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

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(shared, headers, body, false).await
}

async fn responses(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(shared, headers, body, true).await
}

/// Records the request and answers it with its lane's next reply, as
/// Chat Completions or (`responses_api`) as Responses API events.
async fn answer(
    shared: Arc<Shared>,
    headers: HeaderMap,
    body: Bytes,
    responses_api: bool,
) -> Response {
    let arrived = std::time::Instant::now();
    let n = shared.counter.fetch_add(1, Ordering::Relaxed) + 1;
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("mock: request body is not JSON: {e}");
            return reply::error_response(400, "invalid_request_error", &msg, &[]);
        }
    };
    let (lane_fn, wait, semantics) = {
        let state = shared.lock();
        (state.lane_fn.clone(), state.reply_wait, state.semantics)
    };
    let lane = lane_fn(&body);
    let headers = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    shared.lock().requests.push(RecordedRequest {
        lane: lane.clone(),
        body: body.clone(),
        headers,
        received_at: std::time::SystemTime::now(),
        arrived,
    });
    shared.bump();
    let Some(reply) = shared.take_reply(&lane, wait).await else {
        let msg = format!("mock: no scripted reply for lane {lane}");
        return reply::error_response(400, "invalid_request_error", &msg, &[]);
    };
    let cap = output_cap(&body).unwrap_or(u64::MAX);
    let reply = match reply.needs_tokens {
        Some(needs) if needs > cap => {
            // Cut off; the same model writes the same reply again next time.
            let cut = reply.resolve(&body, semantics).cut();
            shared
                .lock()
                .queues
                .entry(lane.clone())
                .or_default()
                .push_front(reply);
            cut
        }
        _ => reply.resolve(&body, semantics),
    };
    if let Some(delay) = reply.delay {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shared.shutdown.cancelled() => return reply::shutting_down(),
        }
    }
    if let Some(gate) = &reply.gate {
        tokio::select! {
            () = gate.wait() => {}
            () = shared.shutdown.cancelled() => return reply::shutting_down(),
        }
    }
    if responses_api {
        reply.render_responses(n)
    } else {
        reply.render(&body, n)
    }
}
