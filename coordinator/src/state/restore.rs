//! Reading a session's records back: restoring one from its log (or, for a
//! session from before protocol v2, from its state subject), and finding at
//! start the sessions whose last step was left unfinished.

use arbiter_bus::steplog::ReadError;

use super::*;

/// Any message of a session's log, read for the record it may carry: in
/// the clear (`step`) or, on an input, sealed.
#[derive(Deserialize)]
struct Carried {
    seq: u64,
    #[serde(default)]
    step: Option<Record>,
    #[serde(default)]
    sealed: Option<String>,
}

impl Carried {
    /// Its record, opened when sealed.
    fn record(
        self,
        sealer: &Sealer,
        session_id: &str,
        subject: &str,
    ) -> Result<Option<Record>, WireError> {
        let Some(sealed) = self.sealed else {
            return Ok(self.step);
        };
        let unreadable = |detail: String| WireError::MalformedMessage {
            subject: subject.to_owned(),
            detail,
        };
        let plain = sealer
            .open(session_id, &sealed)
            .map_err(|e| unreadable(format!("log entry {}: {e}", self.seq)))?;
        arbiter_bus::decode::<Record>(subject, &plain).map(Some)
    }
}

/// The `seq` of a log message whose record could not be read.
#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// A session's log message, decoded, its record opened.
fn carried(
    sealer: &Sealer,
    session_id: &str,
    subject: &str,
    bytes: &[u8],
) -> Result<(u64, Option<Record>), WireError> {
    let carried = arbiter_bus::decode::<Carried>(subject, bytes)?;
    let seq = carried.seq;
    Ok((seq, carried.record(sealer, session_id, subject)?))
}

/// Reads a session's log back: its records in order, and where the log
/// stands. A message that cannot be decoded is skipped (and reported in
/// `unreadable`): one bad record costs the turns it held, not the whole
/// session. A session whose log carries no record yet (one stored before
/// protocol v2) is read from its state subject. An error is a failure to
/// read at all, worth trying again.
pub(crate) async fn load(
    log: &StepLog,
    legacy: &StepLog,
    sealer: &Sealer,
    session_id: &str,
) -> Result<Loaded, ReadError> {
    let Some(replay) = log
        .replay_all(&subjects::session_log_filters(session_id))
        .await?
    else {
        return Ok(Loaded {
            restored: legacy_load(legacy, session_id).await?,
            last_seq: 0,
            shown_seq: 0,
        });
    };
    let mut state = Folded::default();
    let mut shown_seq = 0;
    for stored in replay.records {
        match carried(sealer, session_id, &stored.subject, &stored.bytes) {
            Ok((seq, record)) => {
                shown_seq = seq;
                if let Some(record) = record {
                    state.fold(record);
                }
            }
            Err(error) => {
                // Its entry may still show (a sealed record that does not
                // open rides on a readable input): the log goes on after it.
                if let Ok(entry) = serde_json::from_slice::<SeqOnly>(&stored.bytes) {
                    shown_seq = entry.seq;
                }
                tracing::error!(session.id = %session_id, seq = stored.seq, %error, "a stored step is unreadable; skipped");
                state.unreadable.push(error);
            }
        }
    }
    let restored = match state.finish() {
        Some(restored) => Some(restored),
        None => legacy_load(legacy, session_id).await?,
    };
    Ok(Loaded {
        restored,
        last_seq: replay.last_seq,
        shown_seq,
    })
}

/// Records folded into a session's state, oldest first.
#[derive(Default)]
struct Folded {
    transcript: Vec<Turn>,
    last: Option<(Snapshot, u64, Vec<Effect>)>,
    unreadable: Vec<WireError>,
}

impl Folded {
    fn fold(&mut self, record: Record) {
        if record.replace {
            self.transcript.clear();
        }
        self.transcript.extend(record.append);
        self.last = Some((record.snapshot, record.rev, record.outbox));
    }

    fn finish(self) -> Option<Restored> {
        if self.last.is_none() && self.unreadable.is_empty() {
            return None;
        }
        let skipped = self.unreadable.len() as u64;
        let (snapshot, rev, outbox) = self
            .last
            .unwrap_or_else(|| (Snapshot::new(chrono::Utc::now()), 0, Vec::new()));
        Some(Restored {
            transcript: self.transcript,
            snapshot,
            // Message ids carry the writer's own lease, so a rev only has to
            // grow; counting the unreadable ones keeps it past them.
            rev: rev + skipped,
            outbox,
            unreadable: self.unreadable,
        })
    }
}

/// A session's records from before protocol v2, on its state subject.
async fn legacy_load(legacy: &StepLog, session_id: &str) -> Result<Option<Restored>, ReadError> {
    let subject = subjects::session_state(session_id);
    let Some(replay) = legacy.replay(&subject).await? else {
        return Ok(None);
    };
    let mut state = Folded::default();
    for stored in replay.records {
        match arbiter_bus::decode::<Record>(&subject, &stored.bytes) {
            Ok(record) => state.fold(record),
            Err(error) => {
                tracing::error!(session.id = %session_id, seq = stored.seq, %error, "a stored step is unreadable; skipped");
                state.unreadable.push(error);
            }
        }
    }
    Ok(state.finish())
}

/// Sessions whose last stored step left work undone: a turn in flight, queued
/// input, or an outbox that may not have been published in full. Read from the
/// logs themselves, the only place a step is known to have happened (and,
/// for sessions untouched since protocol v2, from their state subjects).
pub(crate) async fn unfinished(
    log: &StepLog,
    legacy: &StepLog,
    sealer: &Sealer,
) -> Result<Vec<String>, String> {
    let bus = log.bus();
    let mut unfinished = Vec::new();
    let logs = subjects_of(bus, subjects::SESSIONS_STREAM, subjects::ALL_SESSION_LOG).await?;
    let mut seen = std::collections::HashSet::new();
    for subject in logs {
        let Some(id) = subjects::id_of(&subject, "session", "log") else {
            continue;
        };
        let id = id.to_owned();
        seen.insert(id.clone());
        // The last message over the whole session: on `.log`, an input, or
        // (in a session stream made before the human intake) a human line
        // no step took yet: work undone. A line in the intake comes again
        // from the consumer and wakes its session by itself.
        let fence = subjects::session_fence(&id);
        let last = match log.last(&fence).await {
            Ok(Some(last)) if subjects::human_of(&last.subject).is_some() => {
                unfinished.push(id);
                continue;
            }
            Ok(Some(last)) => last,
            Ok(None) => continue,
            Err(e) => {
                // Restoring it costs a read; missing an interrupted turn would
                // leave it waiting for the human's next message.
                tracing::warn!(session.id = %id, error = %e, "could not read the session's log; resuming the session to be safe");
                unfinished.push(id);
                continue;
            }
        };
        let carried = log
            .resolve(&last.payload)
            .await
            .map(|bytes| carried(sealer, &id, &last.subject, &bytes));
        let done = match carried {
            Ok(Ok((_, Some(record)))) => settled(bus, &record).await,
            // The last entry of a step's outbox: the rest of that step's
            // outbox is out, but whether its record left work undone is in
            // the record. A session untouched since protocol v2 is judged by
            // its state subject's last record, which stands where the log does.
            Ok(Ok((seq, None))) => match legacy_last(legacy, &id).await {
                Some(record) if record.snapshot.log_seq == seq => settled(bus, &record).await,
                _ => false,
            },
            // Restoring reads it again, and reports what it cannot read.
            Ok(Err(_)) | Err(_) => false,
        };
        if !done {
            unfinished.push(id);
        }
    }
    // Sessions stored before protocol v2 whose log holds nothing at all.
    let states = subjects_of(
        legacy.bus(),
        subjects::STATE_STREAM,
        subjects::ALL_SESSION_STATE,
    )
    .await?;
    for subject in states {
        let Some(id) = subjects::id_of(&subject, "session", "state") else {
            continue;
        };
        if seen.contains(id) {
            continue;
        }
        let done = match legacy_last(legacy, id).await {
            Some(record) => settled(bus, &record).await,
            None => false,
        };
        if !done {
            unfinished.push(id.to_owned());
        }
    }
    Ok(unfinished)
}

/// The subjects of a stream that match `filter`.
async fn subjects_of(bus: &Bus, stream: &str, filter: &str) -> Result<Vec<String>, String> {
    use futures::TryStreamExt;
    let stream = bus.js.get_stream(stream).await.map_err(|e| e.to_string())?;
    let mut info = stream
        .info_with_subjects(filter)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some((subject, _)) = info.try_next().await.map_err(|e| e.to_string())? {
        out.push(subject);
    }
    Ok(out)
}

/// The last record of a session stored before protocol v2, if it has one
/// that can be read.
async fn legacy_last(legacy: &StepLog, session_id: &str) -> Option<Record> {
    let subject = subjects::session_state(session_id);
    let last = legacy.last(&subject).await.ok()??;
    let bytes = legacy.resolve(&last.payload).await.ok()?;
    arbiter_bus::decode::<Record>(&subject, &bytes).ok()
}

/// Whether a step's record left nothing to do: no turn in flight, nothing
/// queued, no Arbiter handoff pending, and its outbox known to be out.
async fn settled(bus: &Bus, record: &Record) -> bool {
    !record.snapshot.turn_in_flight
        && record.snapshot.queue.is_empty()
        && record.snapshot.arbiter.pending.is_none()
        && outbox_published(bus, &record.outbox).await
}

/// Whether an outbox is known to be out. Effects are published in order with
/// log entries last ([`publish_order`]), so the last entry in the log proves
/// the rest. Without log entries, inputs are looked up by `seq`; any other
/// effect is taken as unpublished.
async fn outbox_published(bus: &Bus, outbox: &[Effect]) -> bool {
    if let Some(entry) = outbox.iter().rev().find_map(|e| match e {
        Effect::Log(entry) => Some(entry),
        _ => None,
    }) {
        return last_seq(bus, subjects::SESSIONS_STREAM, &entry_subject(entry))
            .await
            .is_some_and(|seq| seq >= entry.seq);
    }
    for effect in outbox {
        let Effect::Input(input) = effect else {
            return false;
        };
        let out = last_seq(
            bus,
            subjects::ORCH_STREAM,
            &subjects::orch_in(&input.orch_id),
        )
        .await
        .is_some_and(|seq| seq >= input.seq);
        if !out {
            return false;
        }
    }
    true
}
