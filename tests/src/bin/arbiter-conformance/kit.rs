//! What the checks stand on: the nats-server, the mock model, the workers
//! under test, and what the kit sees on the wire (every output with whether
//! its state record was stored before it, every status).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arbiter_protocol::subjects;
use arbiter_tests::{MockAnthropic, NatsServer};
use async_nats::jetstream;
use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::Value;

/// The pool the kit summons to.
pub const POOL: &str = "conformance";
/// The model name the workers are given (`anthropic:<MODEL>`).
pub const MODEL: &str = "conformance-model";
/// Schema repairs the workers are told to allow.
pub const SCHEMA_REPAIRS: u32 = 1;

/// One message seen on `orch.<id>.out`.
#[derive(Debug, Clone)]
pub struct Out {
    pub orch_id: String,
    pub seq: u64,
    pub body: Value,
    /// A state record deciding this seq was on the subject when it came.
    pub stored_first: bool,
}

pub struct Kit {
    pub nats: NatsServer,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub mock: MockAnthropic,
    pub lease: Duration,
    pub log_dir: PathBuf,
    worker_cmd: String,
    _log_tmp: Option<tempfile::TempDir>,
    workspaces: tempfile::TempDir,
    workers: Mutex<Vec<(String, tokio::process::Child)>>,
    pub outs: Arc<Mutex<Vec<Out>>>,
    pub statuses: Arc<Mutex<Vec<Value>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Kit {
    pub async fn start(
        worker_cmd: String,
        lease_secs: f64,
        log_dir: Option<PathBuf>,
    ) -> Result<Kit, String> {
        let nats = NatsServer::start().await;
        let client = nats.client().await;
        let js = jetstream::new(client.clone());
        arbiter_bus::setup::declare(&js)
            .await
            .map_err(|e| format!("declaring the streams: {e}"))?;
        arbiter_bus::setup::ensure_pool_consumer(&js, POOL)
            .await
            .map_err(|e| format!("making the pool consumer: {e}"))?;
        let mock = MockAnthropic::start().await;
        // A lane per Orchestrator: its brief, the first user message's text.
        mock.set_lane_fn(|body| {
            let first = &body["messages"][0]["content"];
            match first {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .find_map(|b| b["text"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                _ => String::new(),
            }
        });
        mock.set_reply_wait(Duration::from_secs(60));
        let (log_tmp, log_dir) = match log_dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                (None, dir)
            }
            None => {
                let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
                let path = tmp.path().to_owned();
                (Some(tmp), path)
            }
        };
        let kit = Kit {
            nats,
            client,
            js,
            mock,
            lease: Duration::from_secs_f64(lease_secs),
            log_dir,
            worker_cmd,
            _log_tmp: log_tmp,
            workspaces: tempfile::tempdir().map_err(|e| e.to_string())?,
            workers: Mutex::new(Vec::new()),
            outs: Arc::new(Mutex::new(Vec::new())),
            statuses: Arc::new(Mutex::new(Vec::new())),
        };
        kit.watch().await?;
        Ok(kit)
    }

    /// Follows every output and status. An output is checked at once
    /// against the state subject: the record that decided it must be there.
    async fn watch(&self) -> Result<(), String> {
        let mut outs = self
            .client
            .subscribe(subjects::ALL_ORCH_OUT)
            .await
            .map_err(|e| e.to_string())?;
        let mut statuses = self
            .client
            .subscribe(subjects::ALL_ORCH_STATUS)
            .await
            .map_err(|e| e.to_string())?;
        let js = self.js.clone();
        let seen = self.outs.clone();
        tokio::spawn(async move {
            while let Some(msg) = outs.next().await {
                let body: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                // A state record that is its outputs (stored, so stored first).
                if let Some(outbox) = body["outbox"].as_array() {
                    for body in outbox {
                        lock(&seen).push(Out {
                            orch_id: body["orch_id"].as_str().unwrap_or_default().to_owned(),
                            seq: body["seq"].as_u64().unwrap_or(0),
                            body: body.clone(),
                            stored_first: true,
                        });
                    }
                    continue;
                }
                let orch_id = body["orch_id"].as_str().unwrap_or_default().to_owned();
                let seq = body["seq"].as_u64().unwrap_or(0);
                let stored_first = last_record(&js, &orch_id)
                    .await
                    .is_some_and(|r| r["snapshot"]["out_seq"].as_u64().unwrap_or(0) >= seq);
                lock(&seen).push(Out {
                    orch_id,
                    seq,
                    body,
                    stored_first,
                });
            }
        });
        let seen = self.statuses.clone();
        tokio::spawn(async move {
            while let Some(msg) = statuses.next().await {
                let body: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                lock(&seen).push(body);
            }
        });
        Ok(())
    }

    /// Starts a worker under test as `id`, in a process group of its own.
    pub fn spawn_worker(&self, id: &str) -> Result<(), String> {
        let log = std::fs::File::create(self.log_dir.join(format!("{id}.log")))
            .map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = tokio::process::Command::new("sh");
        command
            .arg("-c")
            .arg(&self.worker_cmd)
            .env("NATS_URL", self.nats.url())
            .env("ARBITER_POOL", POOL)
            .env("ARBITER_WORKER_ID", id)
            .env("ARBITER_LEASE_SECS", self.lease.as_secs_f64().to_string())
            .env("ARBITER_MAX_ORCHESTRATORS", "8")
            .env("ARBITER_WORKSPACE_ROOT", self.workspaces.path())
            .env("ARBITER_PARK_AFTER_SECS", "0")
            .env("ANTHROPIC_BASE_URL", self.mock.base_url())
            .env("ANTHROPIC_API_KEY", "conformance-key")
            .env("ORCHESTRATOR_MODEL", format!("anthropic:{MODEL}"))
            .env("ORCHESTRATOR_MODEL_RETRIES", "0")
            .env("ORCHESTRATOR_SCHEMA_REPAIRS", SCHEMA_REPAIRS.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|e| format!("cannot run the worker command: {e}"))?;
        lock(&self.workers).push((id.to_owned(), child));
        Ok(())
    }

    /// SIGKILL to the worker's whole process group: no goodbye.
    pub async fn kill_worker(&self, id: &str) {
        let child = {
            let mut workers = lock(&self.workers);
            let at = workers.iter().position(|(w, _)| w == id);
            at.map(|i| workers.remove(i).1)
        };
        if let Some(mut child) = child {
            if let Some(pid) = child.id() {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.wait().await;
        }
    }

    /// Whether a worker is still running (it must not exit on its own).
    pub fn worker_alive(&self, id: &str) -> bool {
        let mut workers = lock(&self.workers);
        workers
            .iter_mut()
            .find(|(w, _)| w == id)
            .is_some_and(|(_, c)| matches!(c.try_wait(), Ok(None)))
    }

    pub async fn stop(&self) {
        let ids: Vec<String> = lock(&self.workers).iter().map(|(w, _)| w.clone()).collect();
        for id in ids {
            self.kill_worker(&id).await;
        }
    }

    /// Publishes on JetStream with a message id, waiting for the PubAck;
    /// the stream sequence it got.
    pub async fn publish(&self, subject: String, msg_id: &str, payload: Bytes) -> u64 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", msg_id);
        match self
            .js
            .publish_with_headers(subject, headers, payload)
            .await
        {
            Ok(ack) => ack.await.map(|a| a.sequence).unwrap_or(0),
            Err(_) => 0,
        }
    }

    pub fn outs_of(&self, orch_id: &str) -> Vec<Out> {
        lock(&self.outs)
            .iter()
            .filter(|o| o.orch_id == orch_id)
            .cloned()
            .collect()
    }

    pub fn statuses_of(&self, orch_id: &str) -> Vec<Value> {
        lock(&self.statuses)
            .iter()
            .filter(|s| s["orch_id"] == orch_id)
            .cloned()
            .collect()
    }

    /// Every state record of an Orchestrator, in order: those on `.state`
    /// and those on `.out` that are records (a step stored as its outputs),
    /// not bare outputs.
    pub async fn records(&self, orch_id: &str) -> Vec<Value> {
        let Ok(stream) = self.js.get_stream(subjects::ORCH_STATE_STREAM).await else {
            return Vec::new();
        };
        let subject = subjects::orch_records(orch_id);
        let Ok(last) = stream.get_last_raw_message_by_subject(&subject).await else {
            return Vec::new();
        };
        let Ok(consumer) = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subject,
                ..Default::default()
            })
            .await
        else {
            return Vec::new();
        };
        let Ok(mut messages) = consumer.messages().await else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Ok(Some(Ok(msg))) =
            tokio::time::timeout(Duration::from_secs(2), messages.next()).await
        {
            let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(u64::MAX);
            let record: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
            if msg.subject.as_str() != subjects::orch_out(orch_id) || is_record(&record) {
                out.push(record);
            }
            if seq >= last.sequence {
                break;
            }
        }
        out
    }

    /// The workspace of a session, as the worker is told to find it.
    pub fn workspace(&self, session_id: &str) -> PathBuf {
        self.workspaces.path().join(session_id)
    }

    /// An object of `arbiter_orch_blobs`, as JSON.
    pub async fn blob(&self, name: &str) -> Result<Value, String> {
        let store = self
            .js
            .get_object_store(subjects::ORCH_BLOBS_BUCKET)
            .await
            .map_err(|e| format!("object store {}: {e}", subjects::ORCH_BLOBS_BUCKET))?;
        let mut object = store
            .get(name)
            .await
            .map_err(|e| format!("object {name}: {e}"))?;
        let mut bytes = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut object, &mut bytes)
            .await
            .map_err(|e| format!("object {name}: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("object {name} is no JSON: {e}"))
    }

    /// Whether the message at `seq` is still in the summons stream.
    pub async fn summons_present(&self, seq: u64) -> bool {
        match self.js.get_stream(subjects::SUMMONS_STREAM).await {
            Ok(stream) => stream.get_raw_message(seq).await.is_ok(),
            Err(_) => true,
        }
    }

    /// Whether the input consumer `orch-<id>` exists.
    pub async fn input_consumer_exists(&self, orch_id: &str) -> bool {
        match self.js.get_stream(subjects::ORCH_STREAM).await {
            Ok(stream) => stream
                .get_consumer::<jetstream::consumer::pull::Config>(&subjects::orch_consumer(
                    orch_id,
                ))
                .await
                .is_ok(),
            Err(_) => true,
        }
    }

    /// The pool consumer's count of redelivered summonses.
    pub async fn pool_redelivered(&self) -> Option<u64> {
        let stream = self.js.get_stream(subjects::SUMMONS_STREAM).await.ok()?;
        let mut consumer = stream
            .get_consumer::<jetstream::consumer::pull::Config>(&subjects::pool_consumer(POOL))
            .await
            .ok()?;
        let info = consumer.info().await.ok()?;
        Some(info.num_redelivered as u64)
    }
}

/// Whether a payload on `orch.<id>.out` is a state record (that is its
/// outputs) rather than a bare output.
fn is_record(body: &Value) -> bool {
    body.get("outbox").is_some()
}

/// The last state record of an Orchestrator (a pointer record as it is):
/// the last over `.state` and `.out` when that one is a record, else (the
/// last is a bare output) the last on `.state`.
pub async fn last_record(js: &jetstream::Context, orch_id: &str) -> Option<Value> {
    let stream = js.get_stream(subjects::ORCH_STATE_STREAM).await.ok()?;
    if let Ok(msg) = stream
        .get_last_raw_message_by_subject(&subjects::orch_records(orch_id))
        .await
        && let Ok(body) = serde_json::from_slice::<Value>(&msg.payload)
        && (msg.subject.as_str() != subjects::orch_out(orch_id) || is_record(&body))
    {
        return Some(body);
    }
    let msg = stream
        .get_last_raw_message_by_subject(&subjects::orch_state(orch_id))
        .await
        .ok()?;
    serde_json::from_slice(&msg.payload).ok()
}

/// Polls `f` every 100 ms until it gives `Some`, or `timeout` passes.
pub async fn until<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// At most 200 characters of `text`, for a reason in the table.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}
