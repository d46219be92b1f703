//! An Orchestrator's durable state. Every step appends one record to
//! `arbiter.v1.orch.<orch_id>.state`: the transcript messages it added, a
//! snapshot of the small state, and the outputs it decided (its outbox).
//! Records are fenced: each is published with
//! `Nats-Expected-Last-Subject-Sequence` set to the sequence of the previous
//! record, so a worker that lost its lease cannot write another one (see
//! `lease.rs`). A record too large for one NATS message is stored whole in
//! the object store, and the subject gets a small pointer to it.

use std::time::Duration;

use arbiter_bus::Bus;
use arbiter_llm::Message;
use arbiter_protocol::{OrchestratorMessage, Summon, VERSION, subjects};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{object_store, stream};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::evidence::{Baseline, Tally};

mod claim;

pub(crate) use claim::{Claim, claim};

/// Longest wait between attempts to store a record.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Records larger than this keep their transcript part in the object store
/// (NATS caps a message at 1 MB by default).
const INLINE_LIMIT: usize = 900 * 1024;
/// Room left for headers and the rest of the record under the server's `max_payload`.
const HEADROOM: usize = 64 * 1024;

/// Where an Orchestrator stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(crate) enum Phase {
    /// Calling the model or running tools.
    Working,
    /// Its last output expects the Arbiter's answer.
    Waiting,
    /// Released, cancelled or failed: never runs again.
    Ended { reason: EndReason },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EndReason {
    Released,
    Cancelled,
    Failed,
}

/// Everything about an Orchestrator except its transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "OrchestratorSnapshot")]
pub(crate) struct Snapshot {
    #[serde(flatten)]
    pub phase: Phase,
    /// The seq of the last output decided (`orch.<id>.out`).
    pub out_seq: u64,
    /// The seq of the last input stored (`orch.<id>.in`), in the inbox or the transcript.
    pub in_seq: u64,
    /// Inputs stored while the model or a tool was busy, for the next model call.
    #[serde(default)]
    pub inbox: Vec<String>,
    pub tool_count: u32,
    /// Notes (`expects_response: false`) sent since the Arbiter last heard a message.
    pub notes_in_a_row: u32,
    /// Schema repairs asked for in the current turn.
    pub repairs: u32,
    /// Input tokens of the last model call, cache included.
    pub context_tokens: u64,
    /// Tool calls by tool and commands run, for the outputs' evidence.
    #[serde(default)]
    pub tally: Tally,
    /// The Claude Code CLI's own figures of each turn (claude-code runtime;
    /// `spend` holds the tokens and cost of both runtimes).
    #[serde(default, skip_serializing_if = "Cost::is_empty")]
    pub cost: Cost,
    /// What its model requests (its subagents' included) cost so far.
    #[serde(default)]
    pub spend: arbiter_protocol::Spend,
}

/// An Orchestrator's model use as the Claude Code CLI reported it: totals
/// over its turns, and the last turn's figures as the CLI gave them. Every
/// record carries it, so the records hold each turn's figures in turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Cost {
    pub turns: u64,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    /// The last turn: `{usage, model_usage, cost_usd}` from its `result` line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<serde_json::Value>,
}

impl Cost {
    fn is_empty(&self) -> bool {
        self.turns == 0
    }

    /// Adds one finished CLI turn.
    pub(crate) fn add(&mut self, turn: &crate::runtime::claude::TurnDone) {
        let usage = &turn.usage;
        let n = |key: &str| usage[key].as_u64().unwrap_or(0);
        self.turns += 1;
        self.cost_usd += turn.cost_usd;
        self.input_tokens += n("input_tokens");
        self.output_tokens += n("output_tokens");
        self.cache_read_input_tokens += n("cache_read_input_tokens");
        self.cache_creation_input_tokens += n("cache_creation_input_tokens");
        self.last_turn = Some(serde_json::json!({
            "usage": turn.usage,
            "model_usage": turn.model_usage,
            "cost_usd": turn.cost_usd,
        }));
    }
}

impl Snapshot {
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::Working,
            out_seq: 0,
            in_seq: 0,
            inbox: Vec::new(),
            tool_count: 0,
            notes_in_a_row: 0,
            repairs: 0,
            context_tokens: 0,
            tally: Tally::default(),
            cost: Cost::default(),
            spend: arbiter_protocol::Spend::default(),
        }
    }
}

/// One stored step of an Orchestrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "OrchestratorStateRecord")]
pub(crate) struct Record {
    #[serde(default = "arbiter_protocol::version")]
    pub v: u32,
    pub orch_id: String,
    pub session_id: String,
    pub number: u32,
    /// 1, 2, 3… per Orchestrator, across workers.
    pub rev: u64,
    /// The worker that wrote it (it held the lease).
    pub worker_id: String,
    /// Stream sequence of the summons that worker holds the lease under
    /// (0 in records from before it was kept). A second summons for the same
    /// Orchestrator, while this one is still in the queue, is a duplicate.
    #[serde(default)]
    pub summons_seq: u64,
    /// Transcript messages the step added; a message with the role of the
    /// one before it continues that message.
    #[serde(default)]
    pub append: Vec<Message>,
    pub snapshot: Snapshot,
    /// Outputs the step decided, published after the record is stored.
    #[serde(default)]
    pub outbox: Vec<OrchestratorMessage>,
    /// The workspace as walked at the summons (or at a takeover that found
    /// none): in the first record written after the walk, and no other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// What the Claude Code CLI's session transcript grew by since the
    /// last record that carried it (claude-code runtime only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_transcript: Option<CliTranscript>,
    pub at: DateTime<Utc>,
}

/// A piece of the CLI's session transcript (`<session>.jsonl`), which the
/// CLI only appends to: the records' pieces in order make the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct CliTranscript {
    /// The bytes added since the last piece (the whole file when `reset`).
    pub append: String,
    /// The file did not start with what was stored: this piece is all of it.
    #[serde(default)]
    pub reset: bool,
}

/// What the subject holds instead of a record too large for one message:
/// where in the object store the whole record is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "OrchestratorStatePointer")]
pub(crate) struct Pointer {
    #[serde(default = "arbiter_protocol::version")]
    v: u32,
    orch_id: String,
    session_id: String,
    number: u32,
    rev: u64,
    worker_id: String,
    /// The object's name in the blob bucket.
    blob: String,
    at: DateTime<Utc>,
}

/// An Orchestrator as its records left it.
pub(crate) struct Restored {
    pub transcript: Vec<Message>,
    pub snapshot: Snapshot,
    pub outbox: Vec<OrchestratorMessage>,
    pub rev: u64,
    /// Stream sequence of the last record: what the next one is fenced on.
    pub last_seq: u64,
    /// The worker that wrote the last record.
    pub worker_id: String,
    /// The summons that worker held it under.
    pub summons_seq: u64,
    /// The workspace walk its outputs compare against, if one was stored.
    pub baseline: Option<Baseline>,
    /// The CLI's session transcript as stored (claude-code runtime).
    pub cli_transcript: Option<String>,
}

/// Why a record was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteError {
    /// Another worker wrote in between: this one lost the lease.
    Fenced,
    /// Given up on because the Orchestrator is stopping.
    Stopped,
}

/// The JetStream handles the state lives in.
#[derive(Clone)]
pub(crate) struct StateBackend {
    pub bus: Bus,
    pub stream: stream::Stream,
    pub blobs: object_store::ObjectStore,
}

impl StateBackend {
    /// Opens the state stream and the blob bucket (declared by the
    /// coordinator or `arbiter-admin setup`; [`arbiter_bus::Bus::open`] has
    /// checked that they exist).
    pub(crate) async fn setup(bus: &Bus) -> Result<Self, String> {
        let stream = bus
            .js
            .get_stream(subjects::ORCH_STATE_STREAM)
            .await
            .map_err(|e| format!("opening the Orchestrator state stream: {e}"))?;
        let blobs = bus
            .js
            .get_object_store(subjects::ORCH_BLOBS_BUCKET)
            .await
            .map_err(|e| format!("opening the Orchestrator blob bucket: {e}"))?;
        Ok(Self {
            bus: bus.clone(),
            stream,
            blobs,
        })
    }

    /// Sequence and `Nats-Msg-Id` of the last record on `subject`; `None` if it has none.
    async fn last_record(&self, subject: &str) -> Result<Option<(u64, String)>, String> {
        match self.stream.get_last_raw_message_by_subject(subject).await {
            Ok(msg) => {
                let id = msg
                    .headers
                    .get(arbiter_bus::MSG_ID_HEADER)
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default();
                Ok(Some((msg.sequence, id)))
            }
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(format!("reading the last state record: {e}")),
        }
    }
}

/// Checks that the last record on an Orchestrator's subject is still one this
/// lease wrote; the lease runs it between renewals.
#[derive(Clone)]
pub(crate) struct Fence {
    backend: StateBackend,
    subject: String,
    suffix: String,
}

impl Fence {
    /// `Some(false)` once another worker has written; `None` when it cannot tell.
    pub(crate) async fn holds(&self) -> Option<bool> {
        match self.backend.last_record(&self.subject).await {
            Ok(Some((_, id))) => Some(id.ends_with(&self.suffix)),
            Ok(None) => Some(false),
            Err(e) => {
                tracing::debug!(error = %e, "lease check skipped");
                None
            }
        }
    }
}

/// Writes one Orchestrator's records for the worker that holds its lease.
pub(crate) struct StateStore {
    backend: StateBackend,
    orch_id: String,
    session_id: String,
    number: u32,
    worker_id: String,
    summons_seq: u64,
    /// Unique per claim: part of every record's message id.
    lease: String,
    subject: String,
    rev: u64,
    last_seq: u64,
    inline_limit: usize,
    /// A workspace walk to store with the next record.
    baseline: Option<Baseline>,
    /// A piece of the CLI's transcript to store with the next record.
    cli_transcript: Option<CliTranscript>,
}

impl StateStore {
    fn new(
        backend: &StateBackend,
        summon: &Summon,
        worker_id: &str,
        summons_seq: u64,
        rev: u64,
        last_seq: u64,
    ) -> Self {
        // Unknown (0) before the first connect: assume the default 1 MB.
        let max_payload = match backend.bus.client.server_info().max_payload {
            0 => 1024 * 1024,
            n => n,
        };
        Self {
            backend: backend.clone(),
            orch_id: summon.orch_id.clone(),
            session_id: summon.session_id.clone(),
            number: summon.number,
            worker_id: worker_id.to_owned(),
            summons_seq,
            lease: uuid::Uuid::new_v4().simple().to_string(),
            subject: subjects::orch_state(&summon.orch_id),
            rev,
            last_seq,
            inline_limit: INLINE_LIMIT.min(max_payload.saturating_sub(HEADROOM).max(1024)),
            baseline: None,
            cli_transcript: None,
        }
    }

    /// Stores `baseline` with the next record (then never again): a worker
    /// that takes the Orchestrator over compares against the same walk.
    pub(crate) fn keep_baseline(&mut self, baseline: Baseline) {
        self.baseline = Some(baseline);
    }

    /// Stores a piece of the CLI's transcript with the next record.
    pub(crate) fn keep_cli_transcript(&mut self, piece: CliTranscript) {
        self.cli_transcript = Some(piece);
    }

    pub(crate) fn fence(&self) -> Fence {
        Fence {
            backend: self.backend.clone(),
            subject: self.subject.clone(),
            suffix: format!(":{}", self.lease),
        }
    }

    /// Stores the next record, retrying until it is stored, fenced, or `until` fires.
    pub(crate) async fn write(
        &mut self,
        append: Vec<Message>,
        snapshot: &Snapshot,
        outbox: Vec<OrchestratorMessage>,
        until: &CancellationToken,
    ) -> Result<(), WriteError> {
        self.rev += 1;
        let record = Record {
            v: VERSION,
            orch_id: self.orch_id.clone(),
            session_id: self.session_id.clone(),
            number: self.number,
            rev: self.rev,
            worker_id: self.worker_id.clone(),
            summons_seq: self.summons_seq,
            append,
            snapshot: snapshot.clone(),
            outbox,
            baseline: self.baseline.clone(),
            cli_transcript: self.cli_transcript.clone(),
            at: Utc::now(),
        };
        let msg_id = format!("{}:state:{}:{}", self.orch_id, self.rev, self.lease);
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(50);
        let mut payload = encode(&record);
        if payload.len() > self.inline_limit {
            let name = subjects::orch_blob(&self.orch_id, self.rev, &self.lease);
            tracing::info!(bytes = payload.len(), %name, "state record too large for a message; storing it in the object store");
            loop {
                match self
                    .backend
                    .blobs
                    .put(name.as_str(), &mut payload.as_ref())
                    .await
                {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not store a large state record; retrying");
                        backoff(&mut delay, until).await?;
                    }
                }
            }
            let pointer = Pointer {
                v: VERSION,
                orch_id: record.orch_id,
                session_id: record.session_id,
                number: record.number,
                rev: record.rev,
                worker_id: record.worker_id,
                blob: name,
                at: record.at,
            };
            payload = Bytes::from(serde_json::to_vec(&pointer).unwrap_or_default());
        }
        loop {
            match self.publish(&msg_id, payload.clone()).await {
                // Also a try of this very write that was stored but not
                // acknowledged: on R3 the server answers it with a duplicate
                // PubAck carrying the stored sequence (on R1 with 10071,
                // below).
                Ok(seq) => {
                    self.last_seq = seq;
                    self.baseline = None;
                    self.cli_transcript = None;
                    return Ok(());
                }
                Err(Some(PublishErrorKind::WrongLastSequence)) => {
                    match self.backend.last_record(&self.subject).await {
                        // Our own write, whose ack was lost: stored.
                        Ok(Some((seq, id))) if id == msg_id => {
                            self.last_seq = seq;
                            self.baseline = None;
                            self.cli_transcript = None;
                            return Ok(());
                        }
                        // An earlier write of this lease that was given up on
                        // but landed: still ours, so go on from it.
                        Ok(Some((seq, id))) if id.ends_with(&format!(":{}", self.lease)) => {
                            self.last_seq = seq;
                        }
                        Ok(_) => {
                            tracing::warn!(
                                rev = self.rev,
                                "another worker wrote this Orchestrator's state: the lease is lost"
                            );
                            return Err(WriteError::Fenced);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not check the state's last record; retrying");
                            backoff(&mut delay, until).await?;
                        }
                    }
                }
                Err(kind) => {
                    // What the loss of a NATS node gives is said quietly
                    // for `RIDE_OUT`; the same `Nats-Msg-Id` is sent again.
                    let passing = matches!(
                        kind,
                        Some(
                            PublishErrorKind::StreamNotFound
                                | PublishErrorKind::TimedOut
                                | PublishErrorKind::BrokenPipe
                        )
                    );
                    if passing && started.elapsed() < arbiter_bus::RIDE_OUT {
                        tracing::debug!(
                            ?kind,
                            "Orchestrator state not stored yet (a NATS leader election?); retrying"
                        );
                    } else {
                        tracing::warn!(?kind, "could not store the Orchestrator state; retrying");
                    }
                    backoff(&mut delay, until).await?;
                }
            }
        }
    }

    /// One fenced publish; the stream sequence it got, or the error's kind.
    async fn publish(&self, msg_id: &str, payload: Bytes) -> Result<u64, Option<PublishErrorKind>> {
        let message = PublishMessage::build()
            .payload(payload)
            .message_id(msg_id)
            .expected_last_subject_sequence(self.last_seq);
        let ack = self
            .backend
            .bus
            .js
            .send_publish(self.subject.clone(), message)
            .await
            .map_err(|e| Some(e.kind()))?;
        ack.await.map(|a| a.sequence).map_err(|e| Some(e.kind()))
    }
}

fn encode(record: &Record) -> Bytes {
    // A record is plain data: encoding cannot fail.
    Bytes::from(serde_json::to_vec(record).unwrap_or_default())
}

async fn backoff(delay: &mut Duration, until: &CancellationToken) -> Result<(), WriteError> {
    tokio::select! {
        () = until.cancelled() => return Err(WriteError::Stopped),
        () = tokio::time::sleep(*delay) => {}
    }
    *delay = (*delay * 2).min(MAX_BACKOFF);
    Ok(())
}

#[cfg(test)]
mod tests;
