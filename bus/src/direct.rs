//! Reading a stream with no consumer: batched direct gets (NATS ≥ 2.11) of
//! the messages on a subject filter from a sequence on, answered from the
//! stream's store, and a bucket's keys from the subjects its stream holds.
//! The console and the worker read this way (a session's log, an
//! Orchestrator's records, an object's chunks, the sessions), because a role that
//! may create a consumer may create one that delivers where the role may
//! not publish: the server reads the delivery subject from the payload,
//! which permissions never see (docs/security.md, "No consumer that writes
//! where its role may not").

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use arbiter_protocol::subjects;
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::{Alarms, Bus, BusError, READ_ANSWER_WAIT, Result};

/// At most this many messages in one batch.
pub const BATCH: usize = 256;
/// The server stops a batch once it has sent this many bytes (a log entry
/// can be near 1 MB: a step record rides on it).
const BATCH_BYTES: usize = 4 * 1024 * 1024;

/// One stored message, as a direct get returns it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub subject: String,
    /// Its stream sequence.
    pub seq: u64,
    pub payload: Bytes,
}

/// What one batch brought: the messages, and how many more match after them.
#[derive(Debug, Default)]
pub struct Batch {
    pub messages: Vec<Stored>,
    pub pending: u64,
}

/// Up to `max` messages of `stream` on `filter` (wildcards allowed) with a
/// sequence of `from` or more, in stream order. `alarms` (the connection's)
/// turns a permission the credential lacks into an error at once instead of
/// a timeout.
pub async fn batch(
    client: &Client,
    alarms: Option<&Alarms>,
    stream: &str,
    filter: &str,
    from: u64,
    max: usize,
) -> Result<Batch> {
    let what = || format!("reading {filter} of {stream} by direct get");
    let seen = alarms.map(Alarms::denial_count);
    let read = read_batch(client, stream, filter, from, max, &what);
    let denied = async {
        match (alarms, seen) {
            (Some(alarms), Some(seen)) => alarms.denied_after(seen).await,
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        result = read => result,
        denied = denied => Err(BusError::NotAllowed { what: what(), denied }),
    }
}

async fn read_batch(
    client: &Client,
    stream: &str,
    filter: &str,
    from: u64,
    max: usize,
    what: &impl Fn() -> String,
) -> Result<Batch> {
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| crate::js_error(what(), e))?;
    let request = serde_json::json!({
        "seq": from.max(1),
        "next_by_subj": filter,
        "batch": max.max(1),
        "max_bytes": BATCH_BYTES,
    });
    client
        .publish_with_reply(
            subjects::direct_get(stream),
            inbox,
            request.to_string().into(),
        )
        .await
        .map_err(|e| crate::js_error(what(), e))?;
    let mut out = Batch::default();
    loop {
        let Some(message) = tokio::time::timeout(READ_ANSWER_WAIT, replies.next())
            .await
            .map_err(|_| {
                crate::js_error(
                    what(),
                    format!("no answer within {READ_ANSWER_WAIT:?} (a leader election?)"),
                )
            })?
        else {
            return Err(crate::js_error(what(), "the reply subscription ended"));
        };
        match message.status.map(|s| s.as_u16()) {
            None => out
                .messages
                .push(stored(message.headers.as_ref(), message.payload)?),
            // The end of the batch: how many more there are.
            Some(204) => {
                out.pending = header(message.headers.as_ref(), "Nats-Num-Pending")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                return Ok(out);
            }
            // Nothing at or after `from`.
            Some(404) => return Ok(out),
            Some(503) => {
                return Err(crate::js_error(
                    what(),
                    "no responders (the stream is missing or allows no direct get)",
                ));
            }
            Some(code) => {
                return Err(crate::js_error(
                    what(),
                    format!(
                        "{code} {}",
                        message.description.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
    }
}

fn header<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    headers.and_then(|h| h.get(name)).map(|v| v.as_str())
}

fn stored(headers: Option<&HeaderMap>, payload: Bytes) -> Result<Stored> {
    let subject = header(headers, "Nats-Subject");
    let seq = header(headers, "Nats-Sequence").and_then(|v| v.parse().ok());
    match (subject, seq) {
        (Some(subject), Some(seq)) => Ok(Stored {
            subject: subject.to_owned(),
            seq,
            payload,
        }),
        _ => Err(crate::js_error(
            "a direct get",
            "the server's answer has no Nats-Subject or Nats-Sequence",
        )),
    }
}

/// Every message on `filter` from the first to the newest there is when the
/// last batch is read, in stream order; `None` when there is none.
pub async fn replay(
    client: &Client,
    alarms: Option<&Alarms>,
    stream: &str,
    filter: &str,
) -> Result<Option<(Vec<Stored>, u64)>> {
    let mut out: Vec<Stored> = Vec::new();
    let mut from = 1;
    loop {
        let batch = batch(client, alarms, stream, filter, from, BATCH).await?;
        let more = batch.pending > 0 && !batch.messages.is_empty();
        out.extend(batch.messages);
        if !more {
            break;
        }
        from = out.last().map_or(from, |m| m.seq + 1);
    }
    Ok(out.last().map(|m| m.seq).map(|last| (out, last)))
}

/// An object of object store `bucket` (stream `OBJ_<bucket>`), read by
/// direct gets of its chunks; `None` if it is not there.
pub async fn object(
    client: &Client,
    alarms: Option<&Alarms>,
    store: &async_nats::jetstream::object_store::ObjectStore,
    bucket: &str,
    name: &str,
) -> Result<Option<Vec<u8>>> {
    use async_nats::jetstream::object_store::InfoErrorKind;
    let what = || format!("reading object {name} of {bucket}");
    let info = match store.info(name).await {
        Ok(info) => info,
        Err(e) if e.kind() == InfoErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(crate::js_error(what(), e)),
    };
    if info.deleted {
        return Ok(None);
    }
    let stream = subjects::object_stream(bucket);
    let chunks = subjects::object_chunks(bucket, &info.nuid);
    let mut bytes = Vec::with_capacity(info.size);
    let mut read = 0;
    let mut from = 1;
    while read < info.chunks {
        let batch = batch(client, alarms, &stream, &chunks, from, BATCH).await?;
        let Some(last) = batch.messages.last().map(|m| m.seq) else {
            break;
        };
        for chunk in batch.messages {
            bytes.extend_from_slice(&chunk.payload);
            read += 1;
        }
        from = last + 1;
    }
    if read != info.chunks || bytes.len() != info.size {
        return Err(crate::js_error(
            what(),
            format!(
                "{read} of its {} chunks read, {} of its {} bytes (purged meanwhile?)",
                info.chunks,
                bytes.len(),
                info.size
            ),
        ));
    }
    Ok(Some(bytes))
}

/// The keys of `store` that start with `prefix` (every key for ""), from the
/// subjects its stream holds (`STREAM.INFO` with a subjects filter): no
/// consumer, which the console's role may not make (docs/security.md, "No
/// consumer that writes where its role may not"). A deleted or purged key
/// is listed too (its marker is stored on its subject); a get finds nothing.
pub async fn keys(store: &async_nats::jetstream::kv::Store, prefix: &str) -> Result<Vec<String>> {
    let what = || format!("listing the keys of {}", store.name);
    let base = store.prefix.clone();
    // A prefix that is not whole subject tokens is filtered here, not by the server.
    let filter = match prefix.strip_suffix('.') {
        Some(tokens) if !tokens.is_empty() && crate::valid_filter_tokens(tokens) => {
            format!("{base}{tokens}.>")
        }
        _ => format!("{base}>"),
    };
    let mut subjects = store
        .stream
        .info_with_subjects(filter)
        .await
        .map_err(|e| crate::js_error(what(), e))?;
    let mut keys = Vec::new();
    while let Some(next) = subjects.next().await {
        let (subject, _) = next.map_err(|e| crate::js_error(what(), e))?;
        if let Some(key) = subject.strip_prefix(&base)
            && key.starts_with(prefix)
        {
            keys.push(key.to_owned());
        }
    }
    keys.sort();
    Ok(keys)
}

/// How long a [`Follow`] that has caught up waits before it looks again
/// without a wake-up (one missed during a reconnection, or a credential
/// that may not subscribe to the wake-up subjects).
pub const FOLLOW_POLL: Duration = Duration::from_secs(1);
/// After a wake-up that found nothing new yet (the stream stores it a moment
/// after the core message is out), it looks again this soon, then twice as
/// late each time up to [`FOLLOW_POLL`].
const FOLLOW_RELOOK: Duration = Duration::from_millis(2);

/// Follows the messages of a stream on a subject filter, from a sequence
/// on, for as long as it is polled: batches of direct gets, woken by core
/// subscriptions on the subjects that matter. It keeps no state on the
/// server, so it survives reconnections and leader elections as it is; an
/// error (a batch that failed) is yielded, and the next poll tries again
/// after a pause that doubles with each failure in a row (up to
/// [`FOLLOW_POLL`]).
pub struct Follow {
    inner: Pin<Box<dyn Stream<Item = Result<Stored>> + Send>>,
}

impl Follow {
    /// Messages of `stream` on `filter` from sequence `from` on, those whose
    /// subject `keep` accepts; woken by core subscriptions on `wake`.
    pub async fn open(
        bus: &Bus,
        stream: &str,
        filter: &str,
        keep: impl Fn(&str) -> bool + Send + Sync + 'static,
        wake: &[String],
        from: u64,
    ) -> Result<Self> {
        let mut subscriptions = Vec::with_capacity(wake.len());
        for subject in wake {
            subscriptions.push(
                bus.client
                    .subscribe(subject.clone())
                    .await
                    .map_err(|e| crate::js_error(format!("subscribing to {subject}"), e))?,
            );
        }
        let state = FollowState {
            client: bus.client.clone(),
            alarms: bus.alarms.clone(),
            stream: stream.to_owned(),
            filter: filter.to_owned(),
            keep: Box::new(keep),
            wake: futures::stream::select_all(subscriptions),
            buffered: VecDeque::new(),
            next: from.max(1),
            relook: None,
            failed: 0,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await;
            Some((item, state))
        });
        Ok(Self {
            inner: Box::pin(inner),
        })
    }
}

impl Stream for Follow {
    type Item = Result<Stored>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

struct FollowState {
    client: Client,
    alarms: Alarms,
    stream: String,
    filter: String,
    keep: Box<dyn Fn(&str) -> bool + Send + Sync>,
    wake: futures::stream::SelectAll<async_nats::Subscriber>,
    buffered: VecDeque<Stored>,
    /// The sequence to read from next.
    next: u64,
    /// How soon to look again after a wake-up that found nothing.
    relook: Option<Duration>,
    /// Batches failed in a row: the next waits before it asks.
    failed: u32,
}

impl FollowState {
    async fn next(&mut self) -> Result<Stored> {
        loop {
            if let Some(message) = self.buffered.pop_front() {
                return Ok(message);
            }
            if self.failed > 0 {
                let pause = FOLLOW_RELOOK * 2u32.saturating_pow(self.failed.min(20));
                tokio::time::sleep(pause.min(FOLLOW_POLL)).await;
            }
            let batch = match batch(
                &self.client,
                Some(&self.alarms),
                &self.stream,
                &self.filter,
                self.next,
                BATCH,
            )
            .await
            {
                Ok(batch) => {
                    self.failed = 0;
                    batch
                }
                Err(e) => {
                    self.failed += 1;
                    return Err(e);
                }
            };
            if let Some(last) = batch.messages.last() {
                self.next = last.seq + 1;
                self.relook = None;
                let keep = &self.keep;
                self.buffered
                    .extend(batch.messages.into_iter().filter(|m| keep(&m.subject)));
                continue;
            }
            let wait = self.relook.unwrap_or(FOLLOW_POLL);
            tokio::select! {
                woken = self.wake.next(), if !self.wake.is_empty() => {
                    if woken.is_some() {
                        self.relook = Some(FOLLOW_RELOOK);
                    }
                }
                () = tokio::time::sleep(wait) => {
                    self.relook = self.relook.map(|d| d * 2).filter(|d| *d < FOLLOW_POLL);
                }
            }
        }
    }
}
