//! The system under test for one phase: a fresh nats-server, the coordinator
//! and the workers as child processes, and the benchmark's own connection,
//! through which it speaks as the human (as a console does).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{HumanMessage, VERSION, subjects};
use arbiter_tests::{MockAnthropic, NatsServer};
use async_nats::jetstream::consumer::pull;
use futures::StreamExt as _;

use crate::model::Recorder;
use crate::procs::{CpuSnapshot, Proc};
use crate::roles;

pub struct System {
    pub nats: NatsServer,
    nats_pid: Option<u32>,
    pub bus: Bus,
    pub coordinator: Proc,
    pub workers: Vec<Proc>,
    /// Process start → consuming, per child.
    pub ready_after: Vec<(String, Duration)>,
    watcher: tokio::task::JoinHandle<()>,
    /// With a webhook: the events stored for it as the sessions run (see
    /// `hooks.rs`).
    events: Option<tokio::task::JoinHandle<()>>,
    /// How the coordinator was started, to start another in its place.
    coordinator_args: Vec<String>,
    dir: std::path::PathBuf,
    otlp: Option<String>,
}

/// How a phase wants its system.
pub struct Shape<'a> {
    pub nats_config: Option<&'a Path>,
    pub workers: usize,
    pub slots_per_worker: usize,
    pub dir: &'a Path,
    /// The OTLP endpoint the children export to; `None`: export off.
    pub otlp: Option<&'a str>,
    /// The webhook the coordinator POSTs its events to; `None`: no hook.
    pub hook_url: Option<&'a str>,
    pub runtime: arbiter_worker::Runtime,
    pub claude_bin: Option<&'a Path>,
    pub codex_bin: Option<&'a Path>,
    /// How long an Orchestrator waits before it parks; `None`: the worker's default.
    pub park_after: Option<Duration>,
}

impl System {
    pub async fn start(
        mock: &MockAnthropic,
        recorder: &Arc<Recorder>,
        shape: Shape<'_>,
    ) -> anyhow::Result<System> {
        let nats = start_nats(shape.nats_config).await;
        let nats_pid = nats.pid();
        let client = arbiter_bus::connect(nats.url(), "arbiter-bench", false).await?;
        let bus = Bus::setup(client.clone()).await?;
        let watcher = watch_summons(&client, recorder.clone()).await?;
        let llm = mock.base_url();
        let coordinator_args = roles::coordinator_args(nats.url(), &llm, shape.hook_url, None);
        let coordinator = Proc::spawn("coordinator", &coordinator_args, shape.dir, shape.otlp)?;
        let mut workers = Vec::new();
        for i in 0..shape.workers {
            let root = shape.dir.join("workspaces");
            let args = roles::worker_args(
                nats.url(),
                &llm,
                &roles::WorkerShape {
                    slots: shape.slots_per_worker,
                    workspace_root: &root,
                    worker_id: &format!("bench-worker-{i}"),
                    runtime: shape.runtime,
                    clis: roles::CliBins {
                        claude: shape.claude_bin,
                        codex: shape.codex_bin,
                    },
                    park_after: shape.park_after,
                },
            );
            workers.push(Proc::spawn(
                &format!("worker-{i}"),
                &args,
                shape.dir,
                shape.otlp,
            )?);
        }
        let mut system = System {
            nats,
            nats_pid,
            bus,
            coordinator,
            workers,
            ready_after: Vec::new(),
            watcher,
            events: None,
            coordinator_args,
            dir: shape.dir.to_owned(),
            otlp: shape.otlp.map(str::to_owned),
        };
        system.wait_ready().await?;
        if shape.hook_url.is_some() {
            system.events = Some(crate::hooks::feed(system.bus.clone()));
        }
        Ok(system)
    }

    /// Waits until the coordinator and every worker are pulling from their
    /// consumers, and notes how long each took from its process start.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut pending: Vec<(String, Instant, &str, String, usize)> = vec![(
            self.coordinator.name.clone(),
            self.coordinator.started,
            subjects::HUMAN_STREAM,
            subjects::COORDINATOR_HUMAN_CONSUMER.to_owned(),
            1,
        )];
        if let Some(first) = self.workers.first() {
            pending.push((
                first.name.clone(),
                first.started,
                subjects::SUMMONS_STREAM,
                subjects::pool_consumer("default"),
                self.workers.len(),
            ));
        }
        while !pending.is_empty() {
            self.coordinator.check()?;
            for worker in &mut self.workers {
                worker.check()?;
            }
            let mut still = Vec::new();
            for (name, started, stream, consumer, waiting) in pending {
                if pull_waiting(&self.bus, stream, &consumer).await >= waiting {
                    self.ready_after.push((name, started.elapsed()));
                } else {
                    still.push((name, started, stream, consumer, waiting));
                }
            }
            pending = still;
            if Instant::now() > deadline {
                bail!("the system did not get ready within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Kills the coordinator with SIGKILL and starts a new one, whose
    /// coordinator id is `id`, in its place; returns when the old one was
    /// dead.
    pub async fn replace_coordinator(&mut self, id: &str) -> anyhow::Result<Instant> {
        let mut args = self.coordinator_args.clone();
        args.extend(["--coordinator-id".into(), id.into()]);
        // Killed first: the new one is spawned after the old one is gone.
        let killed = self.coordinator.kill().await;
        self.coordinator = Proc::spawn(
            &format!("coordinator-{id}"),
            &args,
            &self.dir,
            self.otlp.as_deref(),
        )?;
        Ok(killed)
    }

    /// Fails if a child has died.
    pub fn check(&mut self) -> anyhow::Result<()> {
        self.coordinator.check()?;
        for worker in &mut self.workers {
            worker.check()?;
        }
        Ok(())
    }

    /// The processes whose CPU time is reported.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let mut pids = vec![("coordinator".to_owned(), self.coordinator.pid)];
        for w in &self.workers {
            pids.push((w.name.clone(), w.pid));
        }
        if let Some(pid) = self.nats_pid {
            pids.push(("nats-server".to_owned(), pid));
        }
        pids.push(("bench+mock".to_owned(), std::process::id()));
        pids
    }

    pub fn cpu(&self) -> CpuSnapshot {
        CpuSnapshot::take(&self.pids())
    }

    /// Messages written to the system's streams so far (the sum of their
    /// last sequences), every stream but the benchmark's own.
    pub async fn js_writes(&self) -> anyhow::Result<u64> {
        let mut total = 0;
        let mut streams = self.bus.js.streams();
        while let Some(info) = streams.next().await {
            let info = info?;
            if !info.config.name.starts_with("BENCH_") {
                total += info.state.last_sequence;
            }
        }
        Ok(total)
    }

    pub fn nats_rss(&self) -> Option<u64> {
        self.nats_pid.and_then(|pid| crate::procs::rss(pid).ok())
    }

    pub async fn stop(self) {
        self.watcher.abort();
        if let Some(events) = self.events {
            events.abort();
        }
        self.coordinator.stop().await;
        for w in self.workers {
            w.stop().await;
        }
        // Closed before the server goes, so it does not try to reconnect.
        let _ = self.bus.client.drain().await;
        drop(self.nats);
    }
}

/// Publishes a human message, as a console does (acked by JetStream).
pub async fn send_human(bus: &Bus, session: &str, text: &str) -> anyhow::Result<()> {
    let (subject, headers, payload) = human_message(session, text)?;
    bus.js
        .publish_with_headers(subject, headers, payload)
        .await?
        .await?;
    Ok(())
}

/// A human message as a console publishes it: subject, headers (message id,
/// trace context) and payload.
pub fn human_message(
    session: &str,
    text: &str,
) -> anyhow::Result<(String, async_nats::HeaderMap, bytes::Bytes)> {
    let message_id = uuid::Uuid::now_v7().to_string();
    let message = HumanMessage {
        v: VERSION,
        session_id: session.to_owned(),
        message_id: message_id.clone(),
        text: text.to_owned(),
        sent_at: chrono::Utc::now(),
        command: None,
        budget: None,
        workspace: None,
        approval: None,
        policy: None,
        rewind: None,
    };
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(arbiter_bus::MSG_ID_HEADER, message_id.as_str());
    TraceContext::none().inject(&mut headers);
    let payload = serde_json::to_vec(&message)?;
    Ok((subjects::session_human(session), headers, payload.into()))
}

/// Pull requests waiting on a durable consumer (0 if it does not exist yet).
async fn pull_waiting(bus: &Bus, stream: &str, consumer: &str) -> usize {
    let Ok(stream) = bus.js.get_stream(stream).await else {
        return 0;
    };
    let Ok(mut consumer) = stream.get_consumer::<pull::Config>(consumer).await else {
        return 0;
    };
    consumer.info().await.map_or(0, |info| info.num_waiting)
}

/// Notes when each summons appears on NATS (a core subscription sees the
/// publish as the stream stores it).
async fn watch_summons(
    client: &async_nats::Client,
    recorder: Arc<Recorder>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut sub = client
        .subscribe(subjects::ALL_SUMMONS)
        .await
        .context("subscribing to summons")?;
    client.flush().await?;
    Ok(tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let at = Instant::now();
            if let Ok(summon) = serde_json::from_slice::<arbiter_protocol::Summon>(&msg.payload) {
                recorder.summon_seen(summon.session_id, at);
            }
        }
    }))
}

/// A fresh nats-server, with the config file if one is given.
pub async fn start_nats(config: Option<&Path>) -> NatsServer {
    match config {
        Some(config) => NatsServer::start_with_config(config).await,
        None => NatsServer::start().await,
    }
}
