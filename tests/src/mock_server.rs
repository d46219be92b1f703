//! What the two mock model servers share, written once: lanes of scripted
//! replies, the requests they recorded, a responder for a lane with nothing
//! queued, holding a reply for its delay and gate, and serving on a port
//! until dropped. [`crate::mock_llm`] (Anthropic's Messages API) and
//! [`crate::mock_openai`] (Chat Completions and the Responses API) keep only
//! their routes and their wire formats.

mod gate;
mod recorded;
pub(crate) mod wire;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::HeaderMap;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use gate::Gate;
pub use recorded::{RecordedRequest, first_words};

/// How long a request waits for a reply to be pushed onto its empty lane by default.
const DEFAULT_REPLY_WAIT: Duration = Duration::from_secs(5);

type LaneFn = Arc<dyn Fn(&Value) -> String + Send + Sync + 'static>;
type Responder<R> = Arc<dyn Fn(&RecordedRequest) -> Option<R> + Send + Sync + 'static>;

/// A reply that a mock server scripts: what it waits for before it leaves.
pub trait Scripted: Send + 'static {
    /// The server's name in its panics and logs.
    const SERVER: &'static str;
    /// What the server keeps beside its lanes (its model's limits, whose
    /// semantics it copies).
    type Extra: Default + Send + Sync + 'static;
    /// Held this long before it is sent.
    fn delay(&self) -> Option<Duration>;
    /// Held until this gate opens.
    fn gate(&self) -> Option<&Gate>;
    /// Called when the reply leaves, after its delay and gate.
    fn released(&self) {}
}

/// A mock model server. It stops when dropped.
///
/// Every request is recorded and assigned to a lane (by default its `model`);
/// it is answered with the next reply pushed onto that lane, else with what
/// the responder makes of it, else it waits up to 5 s for a push and gets a
/// 400 `invalid_request_error`.
pub struct MockServer<R: Scripted> {
    pub(crate) shared: Arc<Shared<R>>,
    addr: SocketAddr,
}

/// The state a server's handlers reach.
pub struct Shared<R: Scripted> {
    state: Mutex<State<R>>,
    /// Bumped on every push and every recorded request; waiters subscribe to it.
    changed: watch::Sender<u64>,
    /// Requests numbered from 1, for the ids in the replies.
    counter: AtomicU64,
    shutdown: CancellationToken,
    pub(crate) extra: R::Extra,
}

struct State<R> {
    queues: HashMap<String, VecDeque<R>>,
    requests: Vec<RecordedRequest>,
    lane_fn: LaneFn,
    responder: Option<Responder<R>>,
    record: bool,
    reply_wait: Duration,
}

impl<R: Scripted> Shared<R> {
    fn lock(&self) -> MutexGuard<'_, State<R>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Numbers a request, assigns its lane and keeps it (unless recording is
    /// off). `arrived`: when its body had been read in full.
    pub(crate) fn record(
        &self,
        headers: &HeaderMap,
        body: &Value,
        arrived: Instant,
    ) -> (RecordedRequest, u64) {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let (lane_fn, record) = {
            let state = self.lock();
            (state.lane_fn.clone(), state.record)
        };
        let recorded = RecordedRequest {
            lane: lane_fn(body),
            body: body.clone(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                    (k.as_str().to_owned(), value)
                })
                .collect(),
            received_at: SystemTime::now(),
            arrived,
        };
        if record {
            self.lock().requests.push(recorded.clone());
        }
        self.bump();
        (recorded, n)
    }

    /// The reply to `request`: its lane's next, else the responder's, else
    /// the first pushed before the reply wait runs out (`None`: nothing came,
    /// or the server is stopping).
    pub(crate) async fn reply_to(&self, request: &RecordedRequest) -> Option<R> {
        let (queued, responder, wait) = {
            let mut state = self.lock();
            let queued = state
                .queues
                .get_mut(&request.lane)
                .and_then(VecDeque::pop_front);
            (queued, state.responder.clone(), state.reply_wait)
        };
        if let Some(reply) = queued {
            return Some(reply);
        }
        if let Some(reply) = responder.and_then(|responder| responder(request)) {
            return Some(reply);
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut rx = self.changed.subscribe();
            if let Some(reply) = self
                .lock()
                .queues
                .get_mut(&request.lane)
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

    /// Puts `reply` back at the head of `lane`, to be given again.
    pub(crate) fn push_front(&self, lane: &str, reply: R) {
        self.lock()
            .queues
            .entry(lane.to_owned())
            .or_default()
            .push_front(reply);
        self.bump();
    }

    /// Waits out the reply's delay and gate, then calls its release hook.
    /// `false`: the server is stopping, and the reply is not to be sent.
    pub(crate) async fn hold(&self, reply: &R) -> bool {
        if let Some(delay) = reply.delay() {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.cancelled() => return false,
            }
        }
        if let Some(gate) = reply.gate() {
            tokio::select! {
                () = gate.wait() => {}
                () = self.shutdown.cancelled() => return false,
            }
        }
        reply.released();
        true
    }
}

impl<R: Scripted> MockServer<R> {
    /// Binds `addr` (port 0: a free one) and serves `routes` on it until the
    /// server is dropped.
    pub(crate) async fn serve(addr: SocketAddr, routes: Router<Arc<Shared<R>>>) -> MockServer<R> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("{}: cannot bind {addr}: {e}", R::SERVER));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{}: no local address: {e}", R::SERVER));
        let by_model: LaneFn =
            Arc::new(|body: &Value| body["model"].as_str().unwrap_or_default().to_owned());
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queues: HashMap::new(),
                requests: Vec::new(),
                lane_fn: by_model,
                responder: None,
                record: true,
                reply_wait: DEFAULT_REPLY_WAIT,
            }),
            changed: watch::Sender::new(0),
            counter: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
            extra: R::Extra::default(),
        });
        let app = routes.with_state(shared.clone());
        let stop = shared.shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::warn!(error = %e, server = R::SERVER, "mock server stopped with an error");
            }
        });
        MockServer { shared, addr }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues `reply` behind any replies already pending on `lane` (FIFO).
    pub fn push(&self, lane: &str, reply: R) {
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
    pub fn set_responder(&self, f: impl Fn(&RecordedRequest) -> Option<R> + Send + Sync + 'static) {
        self.shared.lock().responder = Some(Arc::new(f));
    }

    /// Whether requests are kept for [`MockServer::requests`] (default: yes).
    /// Long runs (the benchmark) turn it off, so memory does not grow with
    /// every request.
    pub fn set_recording(&self, record: bool) {
        self.shared.lock().record = record;
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
                () = tokio::time::sleep_until(deadline) => panic!(
                    "{}: timed out after {timeout:?} waiting for {n} request(s) on lane \
                     {lane:?}; requests per lane: {:?}",
                    R::SERVER,
                    self.lane_counts()
                ),
            }
        }
    }
}

impl<R: Scripted> Drop for MockServer<R> {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl<R: Scripted> std::fmt::Debug for MockServer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("server", &R::SERVER)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}
