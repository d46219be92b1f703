//! Reading an Orchestrator's records back (following pointers into the
//! object store) and claiming it: the first thing a worker does with a
//! summons, whether the Orchestrator is new, ran elsewhere, or has ended.

use std::time::Duration;

use arbiter_bus::steplog::AppendError;
use arbiter_llm::{Message, MessageRole};
use arbiter_protocol::{Summon, subjects};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use tokio_util::sync::CancellationToken;

use super::{Phase, Record, Restored, Snapshot, StateBackend, StateStore};
use crate::transcript;

/// Times a claim is retried when another worker writes in between.
const CLAIM_ATTEMPTS: u32 = 10;

/// Reads every record of an Orchestrator (`.state` and `.out`), in order,
/// from the last rollup on. `None` for one with none.
pub(crate) async fn load(
    backend: &StateBackend,
    orch_id: &str,
) -> Result<Option<Restored>, String> {
    let subject = subjects::orch_records(orch_id);
    let Some(replay) = backend
        .log
        .replay(&subject)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let last_seq = replay.last_seq;
    let out = subjects::orch_out(orch_id);
    let mut messages_of = Vec::new();
    let mut last_record = None;
    let mut baseline = None;
    let mut cli_transcript: Option<String> = None;
    // Whether the last record is its outputs (stored on `.out`).
    let mut last_was_output = false;
    for stored in replay.records {
        let seq = stored.seq;
        if stored.subject == out && !is_record(&stored.bytes) {
            // A bare output (beside a pointer, or another worker's): not a record.
            continue;
        }
        let mut record: Record = serde_json::from_slice(&stored.bytes)
            .map_err(|e| format!("state record {seq} is unreadable: {e}"))?;
        if record.rollup {
            // It holds the whole transcript: what came before is in it.
            messages_of.clear();
            baseline = None;
            cli_transcript = None;
        }
        last_was_output = stored.subject == out;
        for message in std::mem::take(&mut record.append) {
            transcript::push(&mut messages_of, message);
        }
        if let Some(walk) = record.baseline.take() {
            baseline = Some(walk);
        }
        if let Some(piece) = record.cli_transcript.take() {
            match &mut cli_transcript {
                Some(file) if !piece.reset => file.push_str(&piece.append),
                _ => cli_transcript = Some(piece.append),
            }
        }
        last_record = Some(record);
    }
    let Some(last_record) = last_record else {
        return Ok(None);
    };
    // Outputs stored as the record itself are on `.out` already; those of a
    // record on `.state` (a pointer, or a record of an older version) may
    // not be.
    let outbox = if last_was_output {
        Vec::new()
    } else {
        last_record.outbox
    };
    Ok(Some(Restored {
        transcript: messages_of,
        snapshot: last_record.snapshot,
        outbox,
        rev: last_record.rev,
        last_seq,
        worker_id: last_record.worker_id,
        summons_seq: last_record.summons_seq,
        baseline,
        cli_transcript,
    }))
}

/// Whether a payload on `.out` is a state record (it has an `outbox`) rather
/// than a bare output.
fn is_record(payload: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default)]
        outbox: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(payload).is_ok_and(|p| p.outbox.is_some())
}

/// What claiming an Orchestrator found.
pub(crate) enum Claim {
    /// No state yet: it starts from its brief (already stored).
    Fresh(StateStore, Vec<Message>),
    /// It ran before: it goes on from its records.
    Resumed(StateStore, Box<Restored>),
    /// It ended before: nothing to run.
    Ended,
    /// Another summons of the same Orchestrator is still in the queue, held
    /// (or to be taken over) by the worker named: this one is a duplicate.
    Duplicate { holder: String },
}

/// Takes an Orchestrator over: loads its records and stores a record of this
/// worker's own on top, fenced on the last one, so the previous holder's next
/// write (or lease check) fails. When the last record is on `.state` with
/// outputs (a pointer, or an older version's record), those outputs may
/// never have been published: the claim record carries them over, on
/// `.state` like every claim record, and they are published bare after it.
/// `Ok(None)` when other writers kept getting in between.
///
/// `summons_seq` is the stream sequence of the summons this worker took. A
/// takeover comes with the holder's own summons, delivered again; a summons
/// with another sequence while the holder's is still queued is a duplicate
/// (one published again after the server's duplicate window): taking over on
/// it would fence a live holder, whose summons would later take it back, and
/// so on, each time at the cost of a model call.
pub(crate) async fn claim(
    backend: &StateBackend,
    summon: &Summon,
    summons_seq: u64,
    worker_id: &str,
    until: &CancellationToken,
) -> Result<Option<Claim>, String> {
    // Most summons start an Orchestrator that has no records yet. Its first
    // record is written at once, fenced on the subject having none: one round
    // trip less than reading first. A refusal means records exist (a
    // takeover, an end, a duplicate): they are read as below.
    match fresh(backend, summon, worker_id, summons_seq, until).await {
        Ok(claim) => return Ok(Some(claim)),
        Err(AppendError::Stopped) => return Ok(None),
        Err(AppendError::Fenced) => {}
    }
    for attempt in 1..=CLAIM_ATTEMPTS {
        let restored = load(backend, &summon.orch_id).await?;
        let written = match restored {
            Some(restored) if matches!(restored.snapshot.phase, Phase::Ended { .. }) => {
                return Ok(Some(Claim::Ended));
            }
            Some(restored)
                if restored.summons_seq != 0
                    && restored.summons_seq != summons_seq
                    && summons_queued(backend, restored.summons_seq).await =>
            {
                return Ok(Some(Claim::Duplicate {
                    holder: restored.worker_id,
                }));
            }
            Some(mut restored) => {
                let mut store = StateStore::new(
                    backend,
                    summon,
                    worker_id,
                    summons_seq,
                    restored.rev,
                    restored.last_seq,
                );
                let outbox = std::mem::take(&mut restored.outbox);
                // A step another writer stored after the read refuses the
                // claim, which then reads again: never a claim on top of a
                // step it has not read (a paused holder's output on `.out`).
                store.writer.strict();
                let written = store
                    .write_as(Vec::new(), &restored.snapshot, outbox, true, until)
                    .await;
                store.writer.stop_stepping_over();
                written.map(|()| Claim::Resumed(store, Box::new(restored)))
            }
            None => fresh(backend, summon, worker_id, summons_seq, until).await,
        };
        match written {
            Ok(claim) => return Ok(Some(claim)),
            Err(AppendError::Stopped) => return Ok(None),
            Err(AppendError::Fenced) => {
                tracing::info!(
                    attempt,
                    "another worker wrote while claiming; reading again"
                );
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
        }
    }
    Ok(None)
}

/// Claims an Orchestrator with no records: stores its first record (the
/// brief, then the predecessor's packet as it was written), fenced on there
/// being none.
async fn fresh(
    backend: &StateBackend,
    summon: &Summon,
    worker_id: &str,
    summons_seq: u64,
    until: &CancellationToken,
) -> Result<Claim, AppendError> {
    let mut store = StateStore::new(backend, summon, worker_id, summons_seq, 0, 0);
    let mut content = vec![arbiter_llm::Block::Text {
        text: summon.brief.clone(),
    }];
    if let Some(handoff) = &summon.handoff {
        content.push(arbiter_llm::Block::Text {
            text: handoff.for_successor(),
        });
    }
    let transcript = vec![Message {
        role: MessageRole::User,
        content,
    }];
    store
        .write(transcript.clone(), &Snapshot::new(), Vec::new(), until)
        .await
        .map(|()| Claim::Fresh(store, transcript))
}

/// Whether the summons with this stream sequence is still in the work queue
/// (it leaves when acknowledged). When the server cannot say, it is taken as
/// gone: a takeover is safe, if costly; a lost Orchestrator is not.
async fn summons_queued(backend: &StateBackend, seq: u64) -> bool {
    let stream = match backend.bus.js.get_stream(subjects::SUMMONS_STREAM).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(error = %e, "could not open the summons stream");
            return false;
        }
    };
    match stream.get_raw_message(seq).await {
        Ok(_) => true,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => false,
        Err(e) => {
            tracing::warn!(error = %e, seq, "could not look the holder's summons up");
            false
        }
    }
}
