//! Driving workers directly, as the coordinator does, for the runtime tests:
//! publish summons, inputs and control messages; gather every Orchestrator
//! output and status; ask the workers' presence service.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_protocol::{
    Control, ControlAction, OrchestratorEvent, OrchestratorMessage, OrchestratorOutput,
    OrchestratorState, OrchestratorStatus, Summon, VERSION, subjects,
};
use arbiter_tests::eventually;
use arbiter_worker::WorkerPresence;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::StreamExt;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::common::{System, WAIT};

/// Publishes a summons to `pool`, as the coordinator does.
pub async fn summon(sys: &System, pool: &str, session: &str, orch_id: &str, brief: &str) {
    summon_into(sys, pool, session, orch_id, brief, None).await;
}

/// Publishes a summons that names its workspace.
pub async fn summon_into(
    sys: &System,
    pool: &str,
    session: &str,
    orch_id: &str,
    brief: &str,
    workspace: Option<&str>,
) {
    summon_as(sys, pool, session, orch_id, brief, workspace, orch_id).await;
}

/// Publishes a summons under the message id `msg_id` (the coordinator uses
/// the orch id; another id stands for one published again after the
/// server's duplicate window).
pub async fn summon_as(
    sys: &System,
    pool: &str,
    session: &str,
    orch_id: &str,
    brief: &str,
    workspace: Option<&str>,
    msg_id: &str,
) {
    publish_summons(&sys.bus, pool, session, orch_id, brief, workspace, msg_id).await;
}

/// Publishes a summons on `bus` (the admin's in an open system; a
/// coordinator's credential in a secure one, which alone may summon).
pub async fn publish_summons(
    bus: &arbiter_bus::Bus,
    pool: &str,
    session: &str,
    orch_id: &str,
    brief: &str,
    workspace: Option<&str>,
    msg_id: &str,
) {
    let summon = Summon {
        member: None,
        v: VERSION,
        session_id: session.into(),
        orch_id: orch_id.into(),
        number: 1,
        brief: brief.into(),
        workspace: workspace.map(str::to_owned),
        pool: pool.into(),
        summoned_at: chrono::Utc::now(),
        runtime: None,
        needs: Vec::new(),
        handoff: None,
        budget: None,
        emergency: false,
        policy: None,
        arbiter_policy: None,
        start_from: None,
        link: None,
    };
    bus.publish_js(
        subjects::summon(pool),
        msg_id,
        &TraceContext::none(),
        &summon,
    )
    .await
    .unwrap();
}

/// Sends the Arbiter's `seq`-th message to an Orchestrator, as a
/// coordinator of protocol v3 does: the log entry that is the input, on its
/// own subject (no record rides on it here).
pub async fn input(sys: &System, session: &str, orch_id: &str, seq: u64, text: &str) {
    let entry = arbiter_protocol::LogEntry {
        v: VERSION,
        session_id: session.into(),
        seq,
        at: chrono::Utc::now(),
        body: arbiter_protocol::LogBody::ArbiterToOrchestrator(
            arbiter_protocol::ArbiterToOrchestratorEntry {
                number: 1,
                member: None,
                orch_id: orch_id.into(),
                text: text.into(),
                input_seq: Some(seq),
                budget: None,
            },
        ),
    };
    sys.bus
        .publish_js(
            subjects::session_input(session, orch_id, seq),
            &format!("{session}:log:{orch_id}:{seq}"),
            &TraceContext::none(),
            &entry,
        )
        .await
        .unwrap();
}

/// Releases or cancels an Orchestrator.
pub async fn control(sys: &System, orch_id: &str, action: ControlAction) {
    let control = Control {
        v: VERSION,
        orch_id: orch_id.into(),
        action,
        sent_at: chrono::Utc::now(),
    };
    sys.bus
        .publish_js(
            subjects::orch_ctl(orch_id),
            &format!("{orch_id}:ctl:{action:?}"),
            &TraceContext::none(),
            &control,
        )
        .await
        .unwrap();
}

/// Every Orchestrator output and status, gathered as they are published.
pub struct Watch {
    outputs: Arc<Mutex<Vec<OrchestratorMessage>>>,
    statuses: Arc<Mutex<Vec<OrchestratorStatus>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Watch {
    /// Starts gathering; call it before the first summons.
    pub async fn start(sys: &System) -> Self {
        let outputs = Arc::new(Mutex::new(Vec::new()));
        let statuses = Arc::new(Mutex::new(Vec::new()));
        let stream = sys
            .bus
            .js
            .get_stream(subjects::ORCH_STATE_STREAM)
            .await
            .unwrap();
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: subjects::ALL_ORCH_OUT.into(),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut messages = consumer.messages().await.unwrap();
        let sink = outputs.clone();
        let out_task = tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                // A state record that is its outputs, or a bare output.
                #[derive(serde::Deserialize)]
                struct Record {
                    outbox: Vec<OrchestratorMessage>,
                }
                let messages = match serde_json::from_slice::<Record>(&msg.payload) {
                    Ok(record) => record.outbox,
                    Err(_) => vec![serde_json::from_slice(&msg.payload).unwrap()],
                };
                sink.lock().unwrap().extend(messages);
            }
        });
        let mut subscription = sys
            .bus
            .client
            .subscribe(subjects::ALL_ORCH_STATUS)
            .await
            .unwrap();
        sys.bus.client.flush().await.unwrap();
        let sink = statuses.clone();
        let status_task = tokio::spawn(async move {
            while let Some(msg) = subscription.next().await {
                let status: OrchestratorStatus = serde_json::from_slice(&msg.payload).unwrap();
                sink.lock().unwrap().push(status);
            }
        });
        Self {
            outputs,
            statuses,
            tasks: vec![out_task, status_task],
        }
    }

    /// The events of one Orchestrator so far, in order.
    pub fn events(&self, orch_id: &str) -> Vec<OrchestratorEvent> {
        self.outputs
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m.orch_id == orch_id)
            .map(|m| m.event.clone())
            .collect()
    }

    /// Waits until an Orchestrator has sent `n` events and returns them.
    pub async fn wait_events(&self, orch_id: &str, n: usize) -> Vec<OrchestratorEvent> {
        eventually(WAIT, &format!("{n} events from {orch_id}"), || async {
            let events = self.events(orch_id);
            (events.len() >= n).then_some(events)
        })
        .await
    }

    /// Waits for an Orchestrator's `n`-th event and returns it as an output.
    pub async fn wait_output(&self, orch_id: &str, n: usize) -> OrchestratorOutput {
        match self.wait_events(orch_id, n).await.swap_remove(n - 1) {
            OrchestratorEvent::Output(output) => output,
            other => panic!("{orch_id}: expected an output, got {other:?}"),
        }
    }

    /// The evidence of one Orchestrator's latest message that carries one.
    pub fn evidence(&self, orch_id: &str) -> Option<arbiter_protocol::Evidence> {
        self.outputs
            .lock()
            .unwrap()
            .iter()
            .rev()
            .filter(|m| m.orch_id == orch_id)
            .find_map(|m| m.evidence.clone())
    }

    /// The evidence of one Orchestrator's message numbered `seq`.
    pub fn evidence_of(&self, orch_id: &str, seq: u64) -> Option<arbiter_protocol::Evidence> {
        self.outputs
            .lock()
            .unwrap()
            .iter()
            .find(|m| m.orch_id == orch_id && m.seq == seq)
            .and_then(|m| m.evidence.clone())
    }

    /// Every status published so far, in order.
    pub fn statuses(&self) -> Vec<OrchestratorStatus> {
        self.statuses.lock().unwrap().clone()
    }

    /// The statuses of one Orchestrator.
    pub fn statuses_of(&self, orch_id: &str) -> Vec<OrchestratorStatus> {
        self.statuses()
            .into_iter()
            .filter(|s| s.orch_id == orch_id)
            .collect()
    }

    /// Waits for a status of `orch_id` matching `pred`.
    pub async fn wait_status(
        &self,
        orch_id: &str,
        what: &str,
        pred: impl Fn(&OrchestratorStatus) -> bool,
    ) -> OrchestratorStatus {
        eventually(WAIT, what, || async {
            self.statuses_of(orch_id).into_iter().find(|s| pred(s))
        })
        .await
    }

    /// Waits until the worker has published `orch_id` as stopped.
    pub async fn wait_stopped(&self, orch_id: &str) -> OrchestratorStatus {
        self.wait_status(orch_id, &format!("{orch_id} to stop"), |s| {
            s.state == OrchestratorState::Stopped
        })
        .await
    }
}

/// Sends a `$SRV` request to the worker service; the first reply, decoded,
/// or `None` while no worker answers.
pub async fn try_srv(sys: &System, verb: &str) -> Option<Value> {
    let subject = format!("$SRV.{verb}.{}", arbiter_worker::presence::SERVICE_NAME);
    let reply = tokio::time::timeout(
        Duration::from_secs(2),
        sys.bus.client.request(subject, "".into()),
    )
    .await
    .ok()?
    .ok()?;
    Some(serde_json::from_slice(&reply.payload).unwrap())
}

/// Like [`try_srv`], waiting for a worker to answer.
pub async fn srv(sys: &System, verb: &str) -> Value {
    eventually(WAIT, &format!("an answer to $SRV.{verb}"), || {
        try_srv(sys, verb)
    })
    .await
}

/// A worker's slots, from `$SRV.STATS` (one worker running). A service
/// that answers before its endpoint is added (no endpoints yet) is asked
/// again; a presence that does not decode fails the test.
pub async fn presence(sys: &System) -> WorkerPresence {
    let stats = eventually(WAIT, "a worker's presence endpoint", || async {
        try_srv(sys, "STATS")
            .await
            .filter(|stats| stats["endpoints"].as_array().is_some_and(|e| !e.is_empty()))
    })
    .await;
    let data = stats["endpoints"][0]["data"].clone();
    serde_json::from_value(data).unwrap_or_else(|e| panic!("bad presence {stats}: {e}"))
}

/// The slots of the worker named `id`, from its presence endpoint; `None`
/// while it does not answer.
pub async fn worker_presence(sys: &System, id: &str) -> Option<WorkerPresence> {
    let subject = arbiter_worker::presence::presence_subject(id);
    let reply = tokio::time::timeout(
        Duration::from_secs(1),
        sys.bus.client.request(subject, "".into()),
    )
    .await
    .ok()?
    .ok()?;
    arbiter_worker::presence::decode_presence(&reply.payload).ok()
}

/// Waits until the worker named `id` answers on its presence endpoint.
pub async fn worker_ready(sys: &System, id: &str) -> WorkerPresence {
    eventually(WAIT, &format!("worker {id} to be ready"), || {
        worker_presence(sys, id)
    })
    .await
}

/// Summonses of `pool` delivered to a worker and not acknowledged yet: the
/// leases held on running Orchestrators.
/// Summonses in the work queue: waiting, or held by a worker.
pub async fn summons_queued(sys: &System) -> u64 {
    let mut stream = sys
        .bus
        .js
        .get_stream(subjects::SUMMONS_STREAM)
        .await
        .unwrap();
    stream.info().await.unwrap().state.messages
}

pub async fn leases_held(sys: &System, pool: &str) -> Option<usize> {
    let stream = sys.bus.js.get_stream(subjects::SUMMONS_STREAM).await.ok()?;
    let mut consumer = stream
        .get_consumer::<pull::Config>(&subjects::pool_consumer(pool))
        .await
        .ok()?;
    Some(consumer.info().await.ok()?.num_ack_pending)
}

/// Summons of `pool` not yet handed to any worker; `None` until a worker of
/// the pool has created its consumer.
pub async fn queued(sys: &System, pool: &str) -> Option<u64> {
    let stream = sys.bus.js.get_stream(subjects::SUMMONS_STREAM).await.ok()?;
    let mut consumer = stream
        .get_consumer::<pull::Config>(&subjects::pool_consumer(pool))
        .await
        .ok()?;
    Some(consumer.info().await.ok()?.num_pending)
}

/// Whether a process is still running; a zombie waiting for its reaper is not.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A name no other process has. Tools' commands run in a PID namespace of
/// their own, where `$$` means nothing out here: a command that starts
/// `exec -a <marker>-shell sleep 60` is found by [`processes`] instead.
pub fn marker(what: &str) -> String {
    format!("arbiter-test-{what}-{}", uuid::Uuid::new_v4().simple())
}

/// The live processes (zombies aside) whose argv[0] starts with `prefix`.
pub fn processes(prefix: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.starts_with(prefix.as_bytes()) && alive(*pid)
        })
        .collect()
}

/// Waits until `n` processes named `prefix…` run.
pub async fn processes_started(prefix: &str, n: usize) {
    eventually(WAIT, &format!("{n} processes {prefix}…"), || async {
        (processes(prefix).len() >= n).then_some(())
    })
    .await;
}

/// The `tool_result` blocks of a request's last message: `(content, is_error)`.
pub fn tool_results(request: &arbiter_tests::RecordedRequest) -> Vec<(String, bool)> {
    let last = request.messages().last().cloned().unwrap_or_default();
    last["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| {
                    let content = match &b["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (content, b["is_error"].as_bool().unwrap_or(false))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Counts the blocks of `kind` across a request's messages.
pub fn count_blocks(request: &arbiter_tests::RecordedRequest, kind: &str) -> usize {
    request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == kind)
        .count()
}

/// Who wrote an Orchestrator's state records, in order: `(rev, worker_id)`.
pub async fn state_writers(sys: &System, orch_id: &str) -> Vec<(u64, String)> {
    state_records(sys, orch_id)
        .await
        .into_iter()
        .map(|record| {
            (
                record["rev"].as_u64().unwrap(),
                record["worker_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The last message stored over an Orchestrator's records (`.state` and
/// `.out`), if any.
pub async fn last_record_message(
    sys: &System,
    orch_id: &str,
) -> Option<async_nats::jetstream::message::StreamMessage> {
    let stream = sys
        .bus
        .js
        .get_stream(subjects::ORCH_STATE_STREAM)
        .await
        .ok()?;
    stream
        .get_last_raw_message_by_subject(&subjects::orch_records(orch_id))
        .await
        .ok()
}

/// An Orchestrator's state records as stored (JSON), in order: on `.state`
/// and, a step with outputs, on `.out`; from the last rollup on.
pub async fn state_records(sys: &System, orch_id: &str) -> Vec<Value> {
    let Ok(stream) = sys.bus.js.get_stream(subjects::ORCH_STATE_STREAM).await else {
        return Vec::new();
    };
    let subject = subjects::orch_records(orch_id);
    let Ok(last) = stream.get_last_raw_message_by_subject(&subject).await else {
        return Vec::new();
    };
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut records: Vec<Value> = Vec::new();
    while let Some(Ok(msg)) = messages.next().await {
        let record: Value = serde_json::from_slice(&msg.payload).unwrap();
        // A reader starts at the last rollup (it holds all before it); a
        // bare output is no record.
        if record["rollup"] == true {
            records.clear();
        }
        if record.get("rev").is_some() {
            records.push(record);
        }
        if msg.info().unwrap().stream_sequence >= last.sequence {
            break;
        }
    }
    records
}

/// Sends a signal (`KILL`, `STOP`, `CONT`) to a process by its pid.
pub fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid} failed");
}
