//! The durable step log that an Arbiter session (coordinator) and an
//! Orchestrator (worker) each keep on a subject of their own: one record per
//! step, appended inline, or as a small pointer to the object store when the
//! record is too large for one message. Every append is fenced on the
//! subject's last sequence (`Nats-Expected-Last-Subject-Sequence`), so once
//! another writer has claimed the subject this one's next write is refused
//! by the server. Retries go through [`retry`], and a write whose ack was
//! lost is recognised by its `Nats-Msg-Id` (a 10071 on one server, a
//! duplicate PubAck on a cluster). [`StepLog::replay`] reads a subject's
//! records back, pointers resolved, on restart or takeover.
//!
//! Each crate keeps its own record types and rules; this module only moves
//! bytes.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{object_store, stream};
use bytes::Bytes;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::{Bus, BusError, MSG_ID_HEADER, TraceContext};

mod writer;

pub use writer::{Step, Writer};

/// Longest wait between two attempts of anything retried here.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// First wait between two attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Records larger than this go to the object store (NATS caps a message at
/// 1 MB by default) ...
const INLINE_LIMIT: usize = 900 * 1024;
/// ... or than the server's `max_payload` less this, for headers and framing.
const HEADROOM: usize = 64 * 1024;

/// Retries `attempt` with doubling pauses (50 ms up to [`MAX_BACKOFF`]) until it
/// succeeds; `None` once `until` is cancelled. Each failure is logged at WARN
/// as "could not {what}".
pub async fn retry<T, E, F, Fut>(until: &CancellationToken, what: &str, mut attempt: F) -> Option<T>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut delay = FIRST_BACKOFF;
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(e) => {
                tracing::warn!(error = %e, ?delay, "could not {what}; retrying");
                if !pause(&mut delay, until).await {
                    return None;
                }
            }
        }
    }
}

/// Sleeps `delay` and doubles it; false if `until` fires first.
async fn pause(delay: &mut Duration, until: &CancellationToken) -> bool {
    tokio::select! {
        () = until.cancelled() => return false,
        () = tokio::time::sleep(*delay) => {}
    }
    *delay = (*delay * 2).min(MAX_BACKOFF);
    true
}

/// Why a step was not appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// Another writer appended in between: this one no longer owns the subject.
    #[error("another writer appended to the step log: fenced out")]
    Fenced,
    /// Given up on because `until` was cancelled.
    #[error("stopped before the step was stored")]
    Stopped,
}

/// Why a step log could not be read ([`StepLog::last`], [`StepLog::replay`]
/// and the other reads): every kind is worth trying again.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A JetStream read failed, or had no answer in time.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// The server would not give the last record of `subject`.
    #[error("reading the last record of {subject}: {source}")]
    Last {
        subject: String,
        source: stream::LastRawMessageError,
    },
    /// Direct gets failed a moment ago, and are not tried for a while
    /// ([`StepLog::last_msg_id`]).
    #[error("reading the last record id of {subject}: direct gets failed lately")]
    DirectOff { subject: String },
    /// A direct get had no answer within its wait.
    #[error("reading the last record id of {subject}: no answer within {DIRECT_ANSWER_WAIT:?}")]
    DirectUnanswered { subject: String },
    /// A direct get could not be asked.
    #[error("reading the last record id of {subject}: {source}")]
    DirectRequest {
        subject: String,
        source: async_nats::RequestError,
    },
    /// A direct get was answered with an error status.
    #[error("reading the last record id of {subject}: the server answered {status} {description}")]
    DirectRefused {
        subject: String,
        status: async_nats::StatusCode,
        description: String,
    },
    /// A message of a replay over `subject` came without its metadata.
    #[error("replaying {subject}: {source}")]
    Metadata {
        subject: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The replica answering direct gets lags the stream's leader.
    #[error(
        "replaying {subject}: the direct gets reach sequence {reached}, the stream's leader \
         holds {leader} (a replica behind for {REPLICA_CATCH_UP:?})"
    )]
    Behind {
        subject: String,
        reached: u64,
        leader: u64,
    },
    /// A pointer names an object the store does not hold.
    #[error("reading {name} from the object store: no such object")]
    NoObject { name: String },
    /// The object a pointer names could not be read.
    #[error("reading {name} from the object store: {source}")]
    Object {
        name: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Record `seq` of a replay over `subject` could not be resolved.
    #[error("record {seq} of {subject}: {source}")]
    Record {
        seq: u64,
        subject: String,
        source: Box<ReadError>,
    },
}

/// One stored record, pointer resolved.
#[derive(Debug)]
pub struct Stored {
    /// Its stream sequence.
    pub seq: u64,
    /// The subject it was stored on (a replay over a wildcard reads several).
    pub subject: String,
    /// The record's bytes as the writer encoded them.
    pub bytes: Vec<u8>,
}

/// A subject's records, oldest first.
#[derive(Debug)]
pub struct Replay {
    pub records: Vec<Stored>,
    /// Stream sequence of the last record: what the next append is fenced on.
    pub last_seq: u64,
}

/// The last record of a subject as stored (a pointer is not resolved).
#[derive(Debug)]
pub struct Last {
    pub seq: u64,
    /// The subject it was stored on (the last over a wildcard may be on any).
    pub subject: String,
    /// Its `Nats-Msg-Id`, empty if it has none.
    pub msg_id: String,
    pub payload: Bytes,
}

/// A step log: a stream of per-owner subjects, and the object store that
/// holds records too large for a message.
#[derive(Clone)]
pub struct StepLog {
    bus: Bus,
    stream: stream::Stream,
    stream_name: String,
    blobs: object_store::ObjectStore,
    blobs_name: String,
    inline_limit: usize,
    /// Replays and objects are read by direct get, with no consumer
    /// ([`StepLog::reading_directly`]).
    direct_reads: bool,
    /// Until when [`StepLog::last_msg_id`] answers at once with an error
    /// (a direct get failed: a stream without `allow_direct`, a credential
    /// from before it, which costs a timeout each time), shared by clones.
    direct_off_until: std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// How long a replay by direct gets waits for the replica answering them to
/// hold the leader's last record.
const REPLICA_CATCH_UP: Duration = Duration::from_secs(3);
/// How long direct gets are left alone after one failed.
const DIRECT_RETRY_AFTER: Duration = Duration::from_secs(300);
/// How long a direct get is waited for. Shorter than other reads: the caller
/// can ask the stream instead, and a credential from before direct gets
/// were allowed is refused with no answer, inside a lease renewal.
const DIRECT_ANSWER_WAIT: Duration = Duration::from_secs(1);

impl StepLog {
    /// Opens the stream and the object store (declared by the coordinator or
    /// `arbiter-admin setup`).
    pub async fn open(bus: &Bus, stream: &str, blobs: &str) -> crate::Result<Self> {
        let opened = bus
            .js
            .get_stream(stream)
            .await
            .map_err(|e| crate::js_error(format!("opening stream {stream}"), e))?;
        let store = bus
            .js
            .get_object_store(blobs)
            .await
            .map_err(|e| crate::js_error(format!("opening the object store {blobs}"), e))?;
        // Unknown (0) before the first connect: assume the default 1 MB.
        let max_payload = match bus.client.server_info().max_payload {
            0 => 1024 * 1024,
            n => n,
        };
        Ok(Self {
            bus: bus.clone(),
            stream: opened,
            stream_name: stream.to_owned(),
            direct_off_until: Default::default(),
            blobs: store,
            blobs_name: blobs.to_owned(),
            direct_reads: false,
            inline_limit: INLINE_LIMIT.min(max_payload.saturating_sub(HEADROOM).max(1024)),
        })
    }

    /// Reads replays (of one subject or wildcard) and objects by direct get
    /// instead of through consumers: for a role that may make none (the
    /// worker; docs/security.md, "No consumer that writes where its role
    /// may not"). The stream and the object store must allow direct gets.
    pub fn reading_directly(mut self) -> Self {
        self.direct_reads = true;
        self
    }

    /// The bus this log writes through.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Whether a record of `len` bytes is stored inline (else the subject
    /// gets a pointer to it in the object store).
    pub fn fits_inline(&self, len: usize) -> bool {
        len <= self.inline_limit
    }

    /// The last record on `subject`; `None` if it has none.
    pub async fn last(&self, subject: &str) -> Result<Option<Last>, ReadError> {
        let what = || format!("reading the last record of {subject}");
        let answer =
            crate::answered(self.stream.get_last_raw_message_by_subject(subject), &what).await?;
        match answer {
            Ok(msg) => Ok(Some(Last {
                seq: msg.sequence,
                subject: msg.subject.to_string(),
                msg_id: msg
                    .headers
                    .get(MSG_ID_HEADER)
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default(),
                payload: msg.payload,
            })),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(source) => Err(ReadError::Last {
                subject: subject.to_owned(),
                source,
            }),
        }
    }

    /// The message id of the last record on `subject` (a wildcard may name
    /// several subjects), `None` if it has none: one direct get
    /// (`{"last_by_subj": …}` in the request, since the subject form takes
    /// no wildcard), which the server answers from the stream itself, not
    /// through its JetStream API queue as [`StepLog::last`]'s. On a cluster
    /// any replica may answer, a moment behind the leader: for a check
    /// whether another writer took over, which the next check makes good
    /// (writes stay fenced by the server), never for a fence itself.
    /// After a failure it fails at once for a while ([`DIRECT_RETRY_AFTER`]):
    /// the caller then asks the stream ([`StepLog::last`]).
    pub async fn last_msg_id(&self, subject: &str) -> Result<Option<String>, ReadError> {
        let subject_owned = || subject.to_owned();
        let off = || {
            self.direct_off_until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if off().is_some_and(|until| std::time::Instant::now() < until) {
            return Err(ReadError::DirectOff {
                subject: subject_owned(),
            });
        }
        let api = format!("$JS.API.DIRECT.GET.{}", self.stream_name);
        let body = serde_json::json!({ "last_by_subj": subject }).to_string();
        let answer = tokio::time::timeout(
            DIRECT_ANSWER_WAIT,
            self.bus.client.request(api, body.into()),
        )
        .await
        .map_err(|_| ReadError::DirectUnanswered {
            subject: subject_owned(),
        })
        .and_then(|reply| {
            reply.map_err(|source| ReadError::DirectRequest {
                subject: subject_owned(),
                source,
            })
        });
        let reply = match answer {
            Ok(reply) => reply,
            Err(e) => {
                *off() = Some(std::time::Instant::now() + DIRECT_RETRY_AFTER);
                return Err(e);
            }
        };
        match reply.status {
            Some(status) if status == async_nats::StatusCode::NOT_FOUND => Ok(None),
            Some(status) if status != async_nats::StatusCode::OK => Err(ReadError::DirectRefused {
                subject: subject_owned(),
                status,
                description: reply.description.unwrap_or_default(),
            }),
            _ => Ok(Some(
                reply
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(MSG_ID_HEADER))
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default(),
            )),
        }
    }

    /// A record's bytes as stored: inline, or read from the object store
    /// when the payload is a pointer (a JSON object with a `blob` field).
    /// An error is a failure to read the object, worth trying again.
    pub async fn resolve(&self, payload: &[u8]) -> Result<Vec<u8>, ReadError> {
        #[derive(Deserialize)]
        struct Probe {
            #[serde(default)]
            blob: Option<String>,
        }
        let Ok(Probe { blob: Some(name) }) = serde_json::from_slice::<Probe>(payload) else {
            return Ok(payload.to_vec());
        };
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| ReadError::Object {
            name: name.clone(),
            source,
        };
        if self.direct_reads {
            let bus = &self.bus;
            let read = crate::direct::object(
                &bus.client,
                Some(&bus.alarms),
                &self.blobs,
                &self.blobs_name,
                &name,
            )
            .await;
            match read {
                Ok(Some(bytes)) => return Ok(bytes),
                Ok(None) => return Err(ReadError::NoObject { name }),
                // A credential from before direct reads: read it as before.
                Err(e @ BusError::NotAllowed { .. }) => {
                    tracing::debug!(error = %e, "reading the object through a consumer");
                }
                Err(e) => return Err(failed(e.into())),
            }
        }
        let mut object = self.blobs.get(&name).await.map_err(|e| failed(e.into()))?;
        let mut bytes = Vec::new();
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(bytes)
    }

    /// Every record of `subject`, in order, pointers resolved; `None` for
    /// a subject with none. An error is a failure to read, worth trying again.
    pub async fn replay(&self, subject: &str) -> Result<Option<Replay>, ReadError> {
        self.replay_all(&[subject.to_owned()]).await
    }

    /// [`StepLog::replay`] over several subjects at once, in stream order
    /// (a session's `.log` and its inputs).
    pub async fn replay_all(&self, subjects: &[String]) -> Result<Option<Replay>, ReadError> {
        let subject = subjects.join(", ");
        let read: Vec<(u64, String, Bytes)>;
        let last_seq;
        match subjects {
            [one] if self.direct_reads => {
                let Some((messages, last)) = self.replay_direct(one).await? else {
                    return Ok(None);
                };
                last_seq = last;
                read = messages
                    .into_iter()
                    .map(|m| (m.seq, m.subject, m.payload))
                    .collect();
            }
            _ => {
                let Some((messages, last)) = self
                    .bus
                    .replay_subjects(&self.stream_name, subjects)
                    .await?
                else {
                    return Ok(None);
                };
                last_seq = last;
                let mut out = Vec::with_capacity(messages.len());
                for msg in messages {
                    let seq = msg
                        .info()
                        .map_err(|source| ReadError::Metadata {
                            subject: subject.clone(),
                            source,
                        })?
                        .stream_sequence;
                    out.push((seq, msg.subject.to_string(), msg.payload.clone()));
                }
                read = out;
            }
        }
        let mut records = Vec::with_capacity(read.len());
        for (seq, subject_of, payload) in read {
            let bytes = self
                .resolve(&payload)
                .await
                .map_err(|e| ReadError::Record {
                    seq,
                    subject: subject.clone(),
                    source: Box::new(e),
                })?;
            records.push(Stored {
                seq,
                subject: subject_of,
                bytes,
            });
        }
        Ok(Some(Replay { records, last_seq }))
    }

    /// The records of `subject` by direct gets, made good against the
    /// stream's leader: any replica may answer a direct get, a moment behind
    /// the leader, so the leader's last record (`STREAM.MSG.GET`) is read too,
    /// and what the replica lacked is asked for again until it is there (a
    /// claim fences its first write on the last sequence a replay returns).
    async fn replay_direct(
        &self,
        subject: &str,
    ) -> Result<Option<(Vec<crate::direct::Stored>, u64)>, ReadError> {
        let bus = &self.bus;
        let (client, alarms) = (&bus.client, Some(&bus.alarms));
        let mut out = crate::direct::replay(client, alarms, &self.stream_name, subject)
            .await?
            .map(|(messages, _)| messages)
            .unwrap_or_default();
        let Some(leader) = self.last(subject).await?.map(|l| l.seq) else {
            return Ok(None);
        };
        let deadline = std::time::Instant::now() + REPLICA_CATCH_UP;
        let mut last = out.last().map_or(0, |m| m.seq);
        while last < leader {
            let batch = crate::direct::batch(
                client,
                alarms,
                &self.stream_name,
                subject,
                last + 1,
                crate::direct::BATCH,
            )
            .await?;
            match batch.messages.last().map(|m| m.seq) {
                Some(seq) => {
                    last = seq;
                    out.extend(batch.messages);
                }
                None if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(FIRST_BACKOFF).await;
                }
                None => {
                    return Err(ReadError::Behind {
                        subject: subject.to_owned(),
                        reached: last,
                        leader,
                    });
                }
            }
        }
        Ok((!out.is_empty()).then_some((out, leader.max(last))))
    }
}

/// Whether the subject filter `filter` (`*` one token, `>` the rest)
/// matches `subject`.
pub fn covers(filter: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for token in filter.split('.') {
        match (token, subject.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (t, Some(s)) if t == s => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

/// A random token, 32 hex digits.
fn uuid_like() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::{ReadError, covers};

    #[test]
    fn read_errors_say_what_failed_and_keep_why() {
        use std::error::Error as _;
        let behind = ReadError::Behind {
            subject: "arbiter.v1.orch.o1.*".into(),
            reached: 4,
            leader: 6,
        };
        assert_eq!(
            behind.to_string(),
            "replaying arbiter.v1.orch.o1.*: the direct gets reach sequence 4, the stream's \
             leader holds 6 (a replica behind for 3s)"
        );
        let record = ReadError::Record {
            seq: 7,
            subject: "arbiter.v1.orch.o1.*".into(),
            source: Box::new(ReadError::NoObject {
                name: "o1-7".into(),
            }),
        };
        assert_eq!(
            record.to_string(),
            "record 7 of arbiter.v1.orch.o1.*: reading o1-7 from the object store: no such object"
        );
        assert!(
            matches!(&record, ReadError::Record { source, .. } if matches!(**source, ReadError::NoObject { .. }))
        );
        assert_eq!(
            record.source().map(ToString::to_string).as_deref(),
            Some("reading o1-7 from the object store: no such object")
        );
        let off = ReadError::DirectOff {
            subject: "arbiter.v1.orch.o1.state".into(),
        };
        assert_eq!(
            off.to_string(),
            "reading the last record id of arbiter.v1.orch.o1.state: direct gets failed lately"
        );
    }

    #[test]
    fn subject_filters_match_as_nats_matches_them() {
        let s = "arbiter.v1.session.s1.in.o1.3";
        assert!(covers(s, s));
        assert!(covers("arbiter.v1.session.s1.>", s));
        assert!(covers("arbiter.v1.session.*.in.*.*", s));
        assert!(!covers("arbiter.v1.session.s1.log", s));
        assert!(!covers("arbiter.v1.session.s1.in.*", s));
        assert!(!covers("arbiter.v1.session.s1.in.o1.3.>", s));
        assert!(!covers("arbiter.v1.session.s2.>", s));
        assert!(covers("arbiter.v1.orch.o1.*", "arbiter.v1.orch.o1.out"));
    }
}
