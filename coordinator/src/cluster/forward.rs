//! Messages of sessions owned by another coordinator. Every coordinator
//! pulls from the same two durables, so it gets messages of sessions it does
//! not own. It passes each to the owner over a core request on the owner's
//! own subject (`coordinator.<id>.forward`), in order per session, and
//! acknowledges the JetStream message only once the owner answers that the
//! step that took it is stored. Any other answer (not the owner any more, no
//! owner listening, no answer in time) puts the message back on the server,
//! to be routed again: nothing is dropped, and the owner drops what it
//! already took (human message ids, output `seq`s), so nothing is doubled.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_nats::{Client, HeaderMap, Subject};
use bytes::Bytes;
use tokio::sync::mpsc;

/// How long a forwarded message waits for the owner's answer; well inside
/// the consumers' ack wait (10 s), so it is put back before the server
/// would send it again by itself.
const ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How long a message that found no owner waits before the server sends it again.
pub(crate) const RETRY_DELAY: Duration = Duration::from_millis(500);
/// Messages waiting to be forwarded, per session.
const QUEUE: usize = 256;

/// Header: the subject the message was published on.
const SUBJECT_HEADER: &str = "Arbiter-Subject";
/// Header: its stream sequence (the same for every delivery of it).
const SEQ_HEADER: &str = "Arbiter-Stream-Seq";

/// The owner's answers.
const STORED: &str = "stored";
const PUT_BACK: &str = "put_back";
const NOT_OWNER: &str = "not_owner";

/// How an input is acknowledged once the step that took it is stored.
pub(crate) enum Delivery {
    /// Pulled by this coordinator.
    Js(Box<jetstream::Message>),
    /// Pulled by another coordinator and passed here; answered on `reply`.
    Forwarded {
        client: Client,
        reply: Subject,
        stream_seq: u64,
    },
}

impl Delivery {
    /// The stream sequence of the message: the same for every delivery of it.
    pub(crate) fn stream_seq(&self) -> Option<u64> {
        match self {
            Delivery::Js(msg) => msg.info().ok().map(|info| info.stream_sequence),
            Delivery::Forwarded { stream_seq, .. } => Some(*stream_seq),
        }
    }

    /// The step that took it is stored (or it was rejected): done with.
    pub(crate) async fn ack(self) {
        match self {
            Delivery::Js(msg) => {
                if let Err(e) = msg.ack_with(AckKind::Ack).await {
                    tracing::warn!(subject = %msg.subject, error = %e, "ack failed; the message may come again and be dropped as seen");
                }
            }
            Delivery::Forwarded { client, reply, .. } => answer(&client, reply, STORED).await,
        }
    }

    /// Not taken: the server sends it again after `delay`.
    pub(crate) async fn put_back(self, delay: Duration) {
        match self {
            Delivery::Js(msg) => {
                if let Err(e) = msg.ack_with(AckKind::Nak(Some(delay))).await {
                    tracing::warn!(error = %e, "could not put a message back; it comes again after the ack wait");
                }
            }
            Delivery::Forwarded { client, reply, .. } => answer(&client, reply, PUT_BACK).await,
        }
    }
}

async fn answer(client: &Client, reply: Subject, word: &'static str) {
    if let Err(e) = client
        .publish(reply, Bytes::from_static(word.as_bytes()))
        .await
    {
        tracing::warn!(error = %e, "could not answer a forwarding coordinator; it puts the message back and it comes again");
    }
}

/// A message as the intake reads it, pulled or forwarded.
pub(crate) struct Incoming {
    pub subject: String,
    pub payload: Bytes,
    pub headers: Option<HeaderMap>,
    pub delivery: Delivery,
}

impl Incoming {
    pub(crate) fn pulled(msg: jetstream::Message) -> Self {
        Self {
            subject: msg.subject.to_string(),
            payload: msg.payload.clone(),
            headers: msg.headers.clone(),
            delivery: Delivery::Js(Box::new(msg)),
        }
    }

    /// A forwarded request; `None` (after saying why) when it does not say
    /// where it came from or carries no reply subject.
    pub(crate) fn forwarded(client: &Client, msg: async_nats::Message) -> Option<Self> {
        let headers = msg.headers?;
        let subject = headers.get(SUBJECT_HEADER)?.as_str().to_owned();
        let stream_seq = headers.get(SEQ_HEADER)?.as_str().parse().ok()?;
        Some(Self {
            subject,
            payload: msg.payload,
            delivery: Delivery::Forwarded {
                client: client.clone(),
                reply: msg.reply?,
                stream_seq,
            },
            headers: Some(headers),
        })
    }

    /// Answers a forwarded message that this coordinator does not own.
    pub(crate) async fn not_owner(self) {
        if let Delivery::Forwarded { client, reply, .. } = self.delivery {
            answer(&client, reply, NOT_OWNER).await;
        }
    }
}

/// Passes one session's messages to its owner, in order.
pub(crate) struct Forwarder {
    tx: mpsc::Sender<Box<jetstream::Message>>,
}

impl Forwarder {
    /// Starts forwarding to coordinator `owner` the messages of `session_id`.
    pub(crate) fn start(client: Client, session_id: String, owner: String) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(client, session_id, owner, rx));
        Self { tx }
    }

    /// Queues a message; handed back when the forwarder has stopped or is full.
    pub(crate) fn offer(
        &self,
        msg: Box<jetstream::Message>,
    ) -> Result<(), Box<jetstream::Message>> {
        self.tx.try_send(msg).map_err(|e| match e {
            mpsc::error::TrySendError::Full(msg) | mpsc::error::TrySendError::Closed(msg) => msg,
        })
    }
}

async fn run(
    client: Client,
    session_id: String,
    owner: String,
    mut rx: mpsc::Receiver<Box<jetstream::Message>>,
) {
    let subject = arbiter_protocol::subjects::coordinator_forward(&owner);
    while let Some(msg) = rx.recv().await {
        let mut headers = msg.headers.clone().unwrap_or_default();
        headers.insert(SUBJECT_HEADER, msg.subject.as_str());
        let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
        headers.insert(SEQ_HEADER, seq.to_string().as_str());
        let request = async_nats::Request::new()
            .payload(msg.payload.clone())
            .headers(headers)
            .timeout(Some(ANSWER_WAIT));
        let answer = client.send_request(subject.clone(), request).await;
        match answer.as_ref().map(|a| a.payload.as_ref()) {
            Ok(word) if word == STORED.as_bytes() => {
                if let Err(e) = msg.ack_with(AckKind::Ack).await {
                    tracing::warn!(session.id = %session_id, error = %e, "ack of a forwarded message failed; it comes again and the owner drops it as seen");
                }
                continue;
            }
            Ok(word) if word == PUT_BACK.as_bytes() => {
                put_back(&msg, crate::session::PUT_BACK_DELAY).await;
                continue;
            }
            Ok(word) => {
                tracing::warn!(session.id = %session_id, coordinator = %owner, answer = %String::from_utf8_lossy(word), "the coordinator that owned the session no longer does; the message is put back to be routed again")
            }
            Err(e) => {
                tracing::warn!(session.id = %session_id, coordinator = %owner, error = %e, "the coordinator that owns the session did not take a message; it is put back to be routed again")
            }
        }
        // The owner changed or is gone: this message and the ones queued
        // behind it go back, and the next one is routed afresh.
        put_back(&msg, RETRY_DELAY).await;
        rx.close();
        while let Some(msg) = rx.recv().await {
            put_back(&msg, RETRY_DELAY).await;
        }
        return;
    }
}

async fn put_back(msg: &jetstream::Message, delay: Duration) {
    if let Err(e) = msg.ack_with(AckKind::Nak(Some(delay))).await {
        tracing::warn!(error = %e, "could not put a message back; it comes again after the ack wait");
    }
}
