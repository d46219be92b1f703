//! An Orchestrator's durable state. Every step appends one record: the
//! transcript messages it added, a snapshot of the small state, and the
//! outputs it decided (its outbox). A step with outputs is stored on
//! `arbiter.v1.orch.<orch_id>.out`, where the record itself is the output
//! the coordinator reads (one stored message, not a record plus a copy); any
//! other on `arbiter.v1.orch.<orch_id>.state`. Both subjects are in one
//! stream, and records are fenced over both: each is published with
//! `Nats-Expected-Last-Subject-Sequence` set to the sequence of the previous
//! record and `Nats-Expected-Last-Subject-Sequence-Subject:
//! arbiter.v1.orch.<orch_id>.*`, so a worker that lost its lease cannot write
//! another one (see `lease.rs`). A record too large for one NATS message is
//! stored whole in the object store, and `.state` gets a small pointer to
//! it; that step's outputs are then published bare on `.out`, as workers in
//! other languages publish theirs, each fenced like a record. The writing, fencing and retrying is the
//! step log of `arbiter_bus::steplog`; this module keeps the Orchestrator's
//! own records.

use arbiter_bus::Bus;
use arbiter_bus::steplog::{self, AppendError, StepLog, Writer};
use arbiter_llm::Message;
use arbiter_protocol::{OrchestratorMessage, Summon, VERSION, subjects};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::evidence::{Baseline, Tally};

mod claim;

pub(crate) use claim::{Claim, claim};

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
    /// The agent CLI's own figures of each turn (claude-code and codex
    /// runtimes; `spend` holds the tokens and cost of every runtime).
    #[serde(default, skip_serializing_if = "Cost::is_empty")]
    pub cost: Cost,
    /// What its model requests (its subagents' included) cost so far.
    #[serde(default)]
    pub spend: arbiter_protocol::Spend,
    /// The most its model requests may spend (from its summons, or the
    /// latest input that carried one); absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<arbiter_protocol::Cap>,
    /// The Codex CLI's thread (codex runtime), once its first turn ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex: Option<CodexThread>,
    /// The last tool call and how many times in a row it was made (see
    /// `agent/core/repeats.rs`).
    #[serde(default, skip_serializing_if = "crate::agent::Repeats::is_empty")]
    pub repeats: crate::agent::Repeats,
    /// The policy layers its tool calls are decided by (the worker's
    /// floor, the session's from the summons, and what the human allowed
    /// for the session), set at its start; absent in records from before
    /// approvals (every call runs). See `approval.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<arbiter_protocol::Layers>,
    /// The tool call waiting for the human's approval, and once it came,
    /// the answer (stored before the call runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::approval::Pending>,
    /// Its last report (an output that expects a response), and the last
    /// handoff packet it sent: what the message of the branch its work is
    /// handed over on is written from (`checkpoint.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Box<arbiter_protocol::Handoff>>,
}

/// An Orchestrator's Codex thread: what a worker that takes it over needs,
/// beside the rollout file itself (in `cli_transcript`), to resume it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct CodexThread {
    pub thread_id: String,
    /// Where the rollout file lies under the CLI's `CODEX_HOME`
    /// (`sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl`): Codex
    /// finds a thread only at that path.
    pub rollout: String,
    /// The thread's `turn.completed.usage` after the last stored turn:
    /// cumulative, so the next turn's usage is the difference.
    pub usage: serde_json::Value,
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
        self.add_turn(&turn.usage, &turn.model_usage, turn.cost_usd);
    }

    /// Adds one finished turn of either CLI: `usage` with Anthropic's keys
    /// (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
    /// `cache_creation_input_tokens`).
    pub(crate) fn add_turn(
        &mut self,
        usage: &serde_json::Value,
        model_usage: &serde_json::Value,
        cost_usd: f64,
    ) {
        let n = |key: &str| usage[key].as_u64().unwrap_or(0);
        self.turns += 1;
        self.cost_usd += cost_usd;
        self.input_tokens += n("input_tokens");
        self.output_tokens += n("output_tokens");
        self.cache_read_input_tokens += n("cache_read_input_tokens");
        self.cache_creation_input_tokens += n("cache_creation_input_tokens");
        self.last_turn = Some(serde_json::json!({
            "usage": usage,
            "model_usage": model_usage,
            "cost_usd": cost_usd,
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
            budget: None,
            codex: None,
            repeats: crate::agent::Repeats::default(),
            layers: None,
            approval: None,
            report: None,
            handoff: None,
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
    /// Outputs the step decided. Non-empty: the record is stored on `.out`
    /// and is those outputs (or, as a pointer, on `.state`, and the outputs
    /// are published bare after it).
    #[serde(default)]
    pub outbox: Vec<OrchestratorMessage>,
    /// The end-of-life rollup: it holds the whole transcript, and a reader
    /// ignores every record before the last one so marked (`Nats-Rollup:
    /// sub` removes the earlier `.state` records, not the `.out` ones).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollup: bool,
    /// The workspace as walked at the summons (or at a takeover that found
    /// none): in the first record written after the walk, and no other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// What the agent CLI's session transcript grew by since the last
    /// record that carried it (claude-code: the session's `.jsonl`; codex:
    /// the thread's rollout file).
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
    /// Outputs of the last record that may not be on `.out` yet (it was
    /// stored on `.state`: a pointer, or an older version's record); after
    /// a claim, those the claim record could not store as itself.
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

/// The JetStream handles the state lives in.
#[derive(Clone)]
pub(crate) struct StateBackend {
    pub bus: Bus,
    pub log: StepLog,
}

impl StateBackend {
    /// Opens the state stream and the blob bucket (declared by the
    /// coordinator or `arbiter-admin setup`; [`arbiter_bus::Bus::open`] has
    /// checked that they exist). Records and objects are read back by direct
    /// get: the worker's role may make no consumer there (docs/security.md,
    /// "No consumer that writes where its role may not").
    pub(crate) async fn setup(bus: &Bus) -> Result<Self, String> {
        let log = StepLog::open(
            bus,
            subjects::ORCH_STATE_STREAM,
            subjects::ORCH_BLOBS_BUCKET,
        )
        .await
        .map_err(|e| format!("opening the Orchestrator state: {e}"))?
        .reading_directly();
        Ok(Self {
            bus: bus.clone(),
            log,
        })
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
        let last = match self.backend.log.last_msg_id(&self.subject).await {
            Ok(last) => Ok(last),
            // A stream made before direct gets were allowed on it (until
            // the coordinator's next start brings it up to date).
            Err(e) => {
                tracing::debug!(error = %e, "lease check by direct get failed; asking the stream");
                self.backend
                    .log
                    .last(&self.subject)
                    .await
                    .map(|last| last.map(|last| last.msg_id))
            }
        };
        match last {
            Ok(Some(msg_id)) => Some(msg_id.ends_with(&self.suffix)),
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
    /// Appends the records, fenced; its lease token is unique per claim.
    writer: Writer,
    rev: u64,
    /// A workspace walk to store with the next record.
    baseline: Option<Baseline>,
    /// A piece of the CLI's transcript to store with the next record.
    cli_transcript: Option<CliTranscript>,
    /// The trace context the next record (an output) goes with.
    trace: Option<arbiter_bus::TraceContext>,
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
        Self {
            backend: backend.clone(),
            orch_id: summon.orch_id.clone(),
            session_id: summon.session_id.clone(),
            number: summon.number,
            worker_id: worker_id.to_owned(),
            summons_seq,
            writer: backend
                .log
                .writer(
                    subjects::orch_state(&summon.orch_id),
                    &summon.orch_id,
                    last_seq,
                )
                .fenced_over(subjects::orch_records(&summon.orch_id)),
            rev,
            baseline: None,
            cli_transcript: None,
            trace: None,
        }
    }

    /// Stores the next records with this trace context (an output's is
    /// the span of the turn that made it).
    pub(crate) fn trace_with(&mut self, trace: arbiter_bus::TraceContext) {
        self.trace = Some(trace);
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
            // Every claim writes on `.state`: its last record says who holds it.
            subject: self.writer.subject().to_owned(),
            suffix: format!(":{}", self.writer.lease()),
        }
    }

    /// Stores the next record, retrying until it is stored, fenced, or
    /// `until` fires. A record with outputs is stored on `.out` and is them;
    /// one too large for a message is a pointer on `.state`, and its outputs
    /// are then published bare on `.out`, fenced the same way.
    pub(crate) async fn write(
        &mut self,
        append: Vec<Message>,
        snapshot: &Snapshot,
        outbox: Vec<OrchestratorMessage>,
        until: &CancellationToken,
    ) -> Result<(), AppendError> {
        self.write_as(append, snapshot, outbox, false, until).await
    }

    /// [`StateStore::write`]; `claim`: on `.state` whatever its outbox (a
    /// claim record is where the next holder sees it was fenced out: on
    /// `.out`, bare outputs others publish could hide it), its outputs then
    /// published bare after it.
    pub(crate) async fn write_as(
        &mut self,
        append: Vec<Message>,
        snapshot: &Snapshot,
        outbox: Vec<OrchestratorMessage>,
        claim: bool,
        until: &CancellationToken,
    ) -> Result<(), AppendError> {
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
            rollup: false,
            baseline: self.baseline.clone(),
            cli_transcript: self.cli_transcript.clone(),
            at: Utc::now(),
        };
        let encoded = encode(&record);
        let as_output =
            !claim && !record.outbox.is_empty() && self.backend.log.fits_inline(encoded.len());
        let pointer = |blob: &str| pointer_to(&record, blob);
        let step = steplog::Step {
            rev: self.rev,
            record: encoded,
            pointer: &pointer,
            blob: subjects::orch_blob(&self.orch_id, self.rev, self.writer.lease()),
            trace: self.trace.as_ref(),
        };
        let out = subjects::orch_out(&self.orch_id);
        if as_output {
            self.writer.append_on(&out, step, until).await?;
        } else {
            self.writer.append(step, until).await?;
            // A pointer's outputs, bare: fenced, so a holder that lost the
            // lease publishes none (whoever claimed carries them over).
            for message in &record.outbox {
                let msg_id =
                    subjects::orch_out_msg_id(&self.orch_id, message.seq, self.writer.lease());
                let payload = Bytes::from(serde_json::to_vec(message).unwrap_or_default());
                self.writer
                    .append_message_on(&out, &msg_id, payload, self.trace.as_ref(), until)
                    .await?;
            }
        }
        self.baseline = None;
        self.cli_transcript = None;
        Ok(())
    }
}

/// The small record that stands on the subject for one stored in the object store.
fn pointer_to(record: &Record, blob: &str) -> Bytes {
    let pointer = Pointer {
        v: VERSION,
        orch_id: record.orch_id.clone(),
        session_id: record.session_id.clone(),
        number: record.number,
        rev: record.rev,
        worker_id: record.worker_id.clone(),
        blob: blob.to_owned(),
        at: record.at,
    };
    Bytes::from(serde_json::to_vec(&pointer).unwrap_or_default())
}

impl StateStore {
    /// Once the end is stored: replaces every `.state` record of the
    /// Orchestrator by one snapshot (`Nats-Rollup: sub`, fenced like any
    /// record) that holds the whole transcript in its `append` and the ended
    /// snapshot, marked `rollup`. Its `.out` records stay (the coordinator
    /// may not have read them yet): a reader starts at the last record marked
    /// `rollup` and concatenates `append`s from there. `false`
    /// when the stream does not allow rollups (its records are kept).
    pub(crate) async fn roll_up(
        &mut self,
        transcript: Vec<Message>,
        snapshot: &Snapshot,
        until: &CancellationToken,
    ) -> Result<bool, AppendError> {
        let rev = self.rev + 1;
        let record = Record {
            v: VERSION,
            orch_id: self.orch_id.clone(),
            session_id: self.session_id.clone(),
            number: self.number,
            rev,
            worker_id: self.worker_id.clone(),
            summons_seq: self.summons_seq,
            append: transcript,
            snapshot: snapshot.clone(),
            outbox: Vec::new(),
            rollup: true,
            baseline: None,
            cli_transcript: None,
            at: Utc::now(),
        };
        let pointer = |blob: &str| pointer_to(&record, blob);
        let step = steplog::Step {
            rev,
            record: encode(&record),
            pointer: &pointer,
            blob: subjects::orch_blob(&self.orch_id, rev, self.writer.lease()),
            trace: None,
        };
        let rolled = self.writer.roll_up(step, ROLLUP_TRIES, until).await?;
        if rolled {
            self.rev = rev;
        }
        Ok(rolled)
    }
}

/// Attempts at the end-of-life rollup before the records are left as they are.
const ROLLUP_TRIES: u32 = 3;

fn encode(record: &Record) -> Bytes {
    // A record is plain data: encoding cannot fail.
    Bytes::from(serde_json::to_vec(record).unwrap_or_default())
}

#[cfg(test)]
mod tests;
