//! The step log's writer: appends one subject's records for the writer
//! that owns it, each fenced on the last one (see the module above), and
//! tells a lost ack from another writer's record after a refusal.

use super::*;

impl StepLog {
    /// A writer of `subject` whose last record has sequence `last_seq` (0:
    /// none). `id` names the owner (a session or Orchestrator id) in message
    /// ids; each writer has a lease token of its own, in every message id it
    /// writes, so a retried write is told apart from another writer's.
    pub fn writer(&self, subject: String, id: &str, last_seq: u64) -> Writer {
        Writer {
            log: self.clone(),
            fence: subject.clone(),
            subject,
            id: id.to_owned(),
            lease: uuid_like(),
            last_seq,
            own_seen: last_seq > 0,
            step_over: None,
        }
    }
}

/// What a writer makes of the log after the server refused an append for a
/// wrong last sequence ([`Writer::after_refusal`]).
enum Refusal {
    /// The append had landed (its ack was lost), at this sequence.
    Stored(u64),
    /// The log moved on without a claim (an earlier write of this writer, or
    /// another publisher's message over a wildcard): append again after this
    /// sequence.
    GoOn(u64),
    /// Another writer appended: this one is fenced out.
    Fenced,
    /// The log could not be read; worth trying again.
    Unread(ReadError),
}

/// The header that makes a record replace every earlier one of its subject.
const ROLLUP_HEADER: &str = "Nats-Rollup";
/// The header that names the subject (a wildcard allowed) whose last
/// sequence `Nats-Expected-Last-Subject-Sequence` is checked against.
const EXPECTED_LAST_SUBJECT_HEADER: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

/// One step to append.
pub struct Step<'a> {
    /// 1, 2, 3… per subject, across writers: part of the message id.
    pub rev: u64,
    /// The encoded record.
    pub record: Bytes,
    /// What to store instead when the record goes to the object store
    /// under the given name.
    pub pointer: &'a (dyn Fn(&str) -> Bytes + Sync),
    /// The object's name should the record be too large for a message.
    pub blob: String,
    /// Trace context carried in the headers.
    pub trace: Option<&'a TraceContext>,
}

/// Appends the records of one subject for the writer that owns it.
pub struct Writer {
    log: StepLog,
    subject: String,
    /// The subject whose last sequence every append is fenced on: `subject`
    /// itself, or a wildcard over the owner's subjects ([`Writer::fenced_over`]).
    fence: String,
    id: String,
    lease: String,
    last_seq: u64,
    /// The writer's own subject is known to hold a record (it was found
    /// with records, or this writer stored one there): found empty later,
    /// it was purged (an archive, a delete), and the writer is fenced out.
    own_seen: bool,
    /// Which messages under the fence are others' to write ([`Writer::stepping_over`]).
    step_over: Option<StepOver>,
}

/// What a writer whose fence also covers other publishers' subjects steps
/// over, and what it owns.
struct StepOver {
    /// Whether a subject under the fence is another publisher's.
    foreign: fn(&str) -> bool,
    /// Every subject (or wildcard) under the fence that is the owner's.
    owned: Vec<String>,
}

impl Writer {
    /// This writer's lease token (in every message id and blob name it writes).
    pub fn lease(&self) -> &str {
        &self.lease
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Fences every append on the last sequence of `fence` (a subject
    /// wildcard of the same stream, e.g. `arbiter.v1.orch.<id>.*`) rather
    /// than of the writer's subject alone, so records the owner appends on
    /// several subjects ([`Writer::append_on`]) make one fenced log.
    /// `last_seq` must then be the last sequence over `fence`. Only a record
    /// of another writer on the writer's own subject fences it out (a claim
    /// must write one there): a message another publisher put on one of the
    /// other subjects is stepped over.
    #[must_use]
    pub fn fenced_over(mut self, fence: String) -> Self {
        self.fence = fence;
        self
    }

    /// For a fence that also covers subjects other publishers write (a
    /// session's human lines, under `session.<id>.>`): a refusal caused by
    /// such a message (`foreign` says which subjects are theirs) is stepped
    /// over, once the writer's own subjects (`owned`, which together with
    /// the foreign ones make up the fence) are known to hold nothing newer
    /// than its fence that it did not write. Any other writer's message on
    /// them fences it out, a claim or not: a claim that steps over another
    /// writer's step would build on a state that lacks it.
    #[must_use]
    pub fn stepping_over(mut self, foreign: fn(&str) -> bool, owned: Vec<String>) -> Self {
        self.step_over = Some(StepOver { foreign, owned });
        self
    }

    /// Fences every append on the writer's own subject again, with no
    /// stepping over (after a claim written over a wider fence; the claim is
    /// on the own subject, so the last sequence stays right).
    pub fn fence_own(&mut self) {
        self.fence = self.subject.clone();
        self.step_over = None;
    }

    /// For a claim over a wildcard fence: any message another writer stored
    /// under the fence since `last_seq` refuses it ([`AppendError::Fenced`]),
    /// so that the claimer reads again rather than stepping over a step it
    /// has not read. [`Writer::stop_stepping_over`] ends it.
    pub fn strict(&mut self) {
        self.step_over = Some(StepOver {
            foreign: |_| false,
            owned: Vec::new(),
        });
    }

    /// Back to the default handling of refusals (after a claim).
    pub fn stop_stepping_over(&mut self) {
        self.step_over = None;
    }

    /// The subject (or wildcard) appends are fenced on.
    pub fn fence_subject(&self) -> &str {
        &self.fence
    }

    /// The stream sequence the next append is fenced on.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Fences the next append on `last_seq` instead (a caller that read the
    /// subject again; tests that replay a write whose ack was lost).
    pub fn fence_on(&mut self, last_seq: u64) {
        self.last_seq = last_seq;
    }

    /// The `Nats-Msg-Id` of the record with `rev`.
    pub fn msg_id(&self, rev: u64) -> String {
        arbiter_protocol::subjects::step_msg_id(&self.id, rev, &self.lease)
    }

    /// Whether a message id was written by this writer.
    pub fn wrote(&self, msg_id: &str) -> bool {
        msg_id
            .rsplit_once(':')
            .is_some_and(|(_, lease)| lease == self.lease)
    }

    /// Stores a step, fenced on the last one, retrying until it is stored,
    /// fenced, or `until` fires. Returns the stream sequence it got.
    pub async fn append(
        &mut self,
        step: Step<'_>,
        until: &CancellationToken,
    ) -> Result<u64, AppendError> {
        let subject = self.subject.clone();
        self.append_on(&subject, step, until).await
    }

    /// [`Writer::append`] on another subject of the same stream (one that
    /// the fence covers, see [`Writer::fenced_over`]): a record that is also
    /// a message of its own kind, e.g. an Orchestrator step that is its output.
    pub async fn append_on(
        &mut self,
        subject: &str,
        step: Step<'_>,
        until: &CancellationToken,
    ) -> Result<u64, AppendError> {
        let msg_id = self.msg_id(step.rev);
        let mut payload = step.record;
        if payload.len() > self.log.inline_limit {
            let name = step.blob;
            tracing::info!(bytes = payload.len(), blob = %name, "step record too large for a message; storing it in the object store");
            let store = &self.log.blobs;
            retry(until, "store a large step record", || async {
                store.put(name.as_str(), &mut payload.as_ref()).await
            })
            .await
            .ok_or(AppendError::Stopped)?;
            payload = (step.pointer)(&name);
        }
        self.store(subject, &msg_id, payload, step.trace, until)
            .await
    }

    /// Appends one message under the caller's own message id, fenced on the
    /// last one like a step (a log entry that follows its step's record on
    /// the same subject), retrying until it is stored, fenced, or `until`
    /// fires. A message id that this writer did not make (see
    /// [`Writer::wrote`]) is still recognised when it is the last on the
    /// subject: the write whose ack was lost.
    pub async fn append_message(
        &mut self,
        msg_id: &str,
        payload: Bytes,
        trace: Option<&TraceContext>,
        until: &CancellationToken,
    ) -> Result<u64, AppendError> {
        let subject = self.subject.clone();
        self.store(&subject, msg_id, payload, trace, until).await
    }

    /// [`Writer::append_message`] on another subject of the same stream
    /// (one the fence covers, see [`Writer::fenced_over`]): e.g. an output
    /// published beside a pointer record, under a `msg_id` that ends with
    /// `:<lease>` (see [`Writer::wrote`]) and is unique per message.
    pub async fn append_message_on(
        &mut self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
        trace: Option<&TraceContext>,
        until: &CancellationToken,
    ) -> Result<u64, AppendError> {
        self.store(subject, msg_id, payload, trace, until).await
    }

    /// The fenced publish on `subject` with its retries, shared by every append.
    async fn store(
        &mut self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
        trace: Option<&TraceContext>,
        until: &CancellationToken,
    ) -> Result<u64, AppendError> {
        let mut delay = FIRST_BACKOFF;
        loop {
            match self
                .publish_with(subject, msg_id, payload.clone(), trace, false)
                .await
            {
                // A duplicate PubAck (on a cluster) is our own earlier write: stored.
                Ok(seq) => {
                    self.stored_at(subject, seq);
                    return Ok(seq);
                }
                Err(Some(PublishErrorKind::WrongLastSequence)) => {
                    match self.after_refusal(subject, msg_id).await {
                        Refusal::Stored(seq) => {
                            self.stored_at(subject, seq);
                            return Ok(seq);
                        }
                        Refusal::GoOn(seq) => self.last_seq = seq,
                        Refusal::Fenced => {
                            tracing::warn!(
                                subject = %self.subject,
                                fence = %self.fence,
                                msg_id,
                                "another writer appended to this step log: fenced out"
                            );
                            return Err(AppendError::Fenced);
                        }
                        Refusal::Unread(e) => {
                            tracing::warn!(error = %e, "could not check the step log's last record; retrying");
                            if !pause(&mut delay, until).await {
                                return Err(AppendError::Stopped);
                            }
                        }
                    }
                }
                Err(kind) => {
                    tracing::warn!(subject, ?kind, "could not store a step; retrying");
                    if !pause(&mut delay, until).await {
                        return Err(AppendError::Stopped);
                    }
                }
            }
        }
    }

    /// Notes a message stored on `subject` at `seq`: the fence moves only
    /// when the fence covers the subject (a message on a subject outside it,
    /// e.g. a session's input fenced on its `.log`, leaves the fence's last
    /// sequence as it was).
    fn stored_at(&mut self, subject: &str, seq: u64) {
        if covers(&self.fence, subject) {
            self.last_seq = seq;
        }
        self.own_seen |= subject == self.subject;
    }

    /// What the log's last record says after an append of `msg_id` was
    /// refused for a wrong last sequence.
    async fn after_refusal(&self, subject: &str, msg_id: &str) -> Refusal {
        let last = match self.log.last(&self.fence).await {
            Ok(last) => last,
            Err(e) => return Refusal::Unread(e),
        };
        match last {
            // Our own write, whose ack was lost: stored.
            Some(last) if last.msg_id == msg_id => Refusal::Stored(last.seq),
            // An earlier write of this writer that was given up on but
            // landed: still ours, so go on from it.
            Some(last) if self.wrote(&last.msg_id) && last.seq != self.last_seq => {
                Refusal::GoOn(last.seq)
            }
            // Over a wildcard, only a record on the writer's own subject
            // (every claim writes one) fences it: what others published on
            // the other subjects is not a claim, so go on from it.
            Some(last) if self.step_over.is_some() => self.after_foreign(&last).await,
            // An own subject found empty after it held records was purged:
            // fenced out as well.
            Some(last) if self.fence != self.subject => match self.log.last(&self.subject).await {
                Ok(own)
                    if own.as_ref().map_or(!self.own_seen, |own| {
                        own.seq <= self.last_seq || self.wrote(&own.msg_id)
                    }) =>
                {
                    tracing::info!(subject, msg_id = %last.msg_id, "another publisher's message on a fenced subject; not a claim, going on");
                    Refusal::GoOn(last.seq)
                }
                Ok(_) => Refusal::Fenced,
                Err(e) => Refusal::Unread(e),
            },
            _ => Refusal::Fenced,
        }
    }

    /// After a refusal whose last message over the fence is `last`, not this
    /// writer's: see [`Writer::stepping_over`].
    async fn after_foreign(&self, last: &Last) -> Refusal {
        let Some(step_over) = &self.step_over else {
            return Refusal::Fenced;
        };
        if !(step_over.foreign)(&last.subject) {
            return Refusal::Fenced;
        }
        for owned in &step_over.owned {
            match self.log.last(owned).await {
                Err(e) => return Refusal::Unread(e),
                Ok(None) if *owned == self.subject && self.own_seen => return Refusal::Fenced,
                Ok(Some(own)) if own.seq > self.last_seq && !self.wrote(&own.msg_id) => {
                    return Refusal::Fenced;
                }
                Ok(_) => {}
            }
        }
        tracing::debug!(subject = %last.subject, "another publisher's message on a fenced subject; stepped over");
        Refusal::GoOn(last.seq)
    }

    /// Stores `step` as the subject's only record (`Nats-Rollup: sub`,
    /// fenced like any append): the server drops every earlier one. `false`
    /// when the stream refuses rollups (10111) or another error persists
    /// for `tries` attempts: the records are left as they are.
    pub async fn roll_up(
        &mut self,
        step: Step<'_>,
        tries: u32,
        until: &CancellationToken,
    ) -> Result<bool, AppendError> {
        let msg_id = self.msg_id(step.rev);
        let mut payload = step.record;
        if payload.len() > self.log.inline_limit {
            let name = step.blob;
            let store = &self.log.blobs;
            retry(until, "store a large rollup record", || async {
                store.put(name.as_str(), &mut payload.as_ref()).await
            })
            .await
            .ok_or(AppendError::Stopped)?;
            payload = (step.pointer)(&name);
        }
        let mut delay = FIRST_BACKOFF;
        for _ in 0..tries.max(1) {
            match self
                .publish_with(&self.subject, &msg_id, payload.clone(), step.trace, true)
                .await
            {
                Ok(seq) => {
                    self.last_seq = seq;
                    self.own_seen = true;
                    return Ok(true);
                }
                Err(Some(PublishErrorKind::WrongLastSequence)) => {
                    match self.log.last(&self.fence).await {
                        Ok(Some(last)) if last.msg_id == msg_id => {
                            self.last_seq = last.seq;
                            return Ok(true);
                        }
                        Ok(_) => return Err(AppendError::Fenced),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not check the step log's last record")
                        }
                    }
                }
                Err(kind) => {
                    tracing::warn!(subject = %self.subject, ?kind, "could not roll the step log up");
                }
            }
            if !pause(&mut delay, until).await {
                return Err(AppendError::Stopped);
            }
        }
        Ok(false)
    }

    /// One fenced publish on `subject`, as a rollup when `rollup`; the
    /// stream sequence it got, or the error's kind.
    async fn publish_with(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
        trace: Option<&TraceContext>,
        rollup: bool,
    ) -> Result<u64, Option<PublishErrorKind>> {
        let mut headers = HeaderMap::new();
        if rollup {
            headers.insert(ROLLUP_HEADER, "sub");
        }
        if let Some(trace) = trace {
            trace.inject(&mut headers);
        }
        headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id);
        headers.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            self.last_seq.to_string().as_str(),
        );
        if self.fence != subject {
            headers.insert(EXPECTED_LAST_SUBJECT_HEADER, self.fence.as_str());
        }
        let message = PublishMessage::build().payload(payload).headers(headers);
        let ack = self
            .log
            .bus
            .js
            .send_publish(subject.to_owned(), message)
            .await
            .map_err(|e| Some(e.kind()))?;
        ack.await.map(|a| a.sequence).map_err(|e| Some(e.kind()))
    }
}
