//! NATS plumbing shared by the Arbiter binaries: connecting, declaring the
//! streams and buckets (idempotently), publishing protocol messages with
//! their `Nats-Msg-Id` and trace context, decoding them strictly, and the
//! OpenTelemetry pipeline every binary shares (`telemetry`).

#![deny(clippy::print_stdout, clippy::print_stderr)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod connect;
pub mod direct;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
pub mod memory;
pub mod metrics;
pub mod retention;
pub mod seal;
pub mod seq;
pub mod setup;
pub mod steplog;
pub mod telemetry;
mod trace;

use std::time::Duration;

use arbiter_protocol::WireError;
use arbiter_protocol::roles::NatsRole;
use async_nats::jetstream::{self, kv, stream};
use async_nats::{Client, HeaderMap};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use connect::{Alarms, Connection, NatsOptions, Reach, Secret, connect_with};
pub use trace::TraceContext;

/// The header JetStream deduplicates on.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";
/// How long JetStream remembers message ids for deduplication.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// How long a JetStream write or check is retried, quietly and with the
/// same `Nats-Msg-Id`, through the loss of one server of a cluster before it
/// is reported: a stream or consumer whose leader died elects another in
/// 4–9 s (hard-coded in nats-server), and meanwhile publishes answer "no
/// responders" and fetches time out. See docs/protocol.md, "A NATS cluster".
pub const RIDE_OUT: Duration = Duration::from_secs(30);
/// Longest wait between two tries within [`RIDE_OUT`].
const RIDE_OUT_STEP: Duration = Duration::from_secs(1);

pub type Result<T, E = BusError> = std::result::Result<T, E>;

/// What a bus operation failed on. Each variant is a kind a caller can
/// match on; where the failure came from another error, that error is kept
/// (`std::error::Error::source`) and its text is part of this one's, as the
/// logs and messages say it. Say one with its sources on one line with
/// [`error_chain`], which does not repeat a source the text already holds.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// A server that could not be reached (at once, or within the wait).
    #[error("cannot connect to NATS at {url}: {}", error_chain(.source))]
    Connect {
        url: String,
        source: async_nats::ConnectError,
    },
    /// The server refused the credentials (at connect, or on a reconnect: revoked).
    #[error("{0}")]
    Refused(String),
    /// TLS failed: `cause` says which side refused what, with a hint.
    #[error("TLS with NATS at {url} failed: {cause}")]
    Tls {
        url: String,
        cause: String,
        source: async_nats::ConnectError,
    },
    /// A file the connection settings name cannot be used.
    #[error("cannot use {what} {path}: {problem}")]
    File {
        what: String,
        path: String,
        #[source]
        problem: connect::FileProblem,
    },
    #[error("{0}")]
    Config(String),
    /// A server off this machine, reached without TLS or a credential,
    /// and no `--insecure`.
    #[error(
        "refusing to connect to NATS at {url} {lacks}: it is not on this machine, so anyone \
         on the network could read and forge every message; connect with tls:// and a \
         credential bundle (`arbiter-admin init`), or give --insecure (ARBITER_INSECURE=1)"
    )]
    Insecure { url: String, lacks: &'static str },
    #[error(
        "NATS denied this {role} credential an operation it needs ({denied}); \
         was it issued for another role? (`arbiter-admin issue {role} NAME`)"
    )]
    Denied { role: NatsRole, denied: String },
    #[error(
        "the stream {stream} does not exist: start the coordinator (it creates the \
         streams) or run `arbiter-admin setup`"
    )]
    Missing { stream: String },
    #[error(
        "the stream {stream} was deleted while this process ran: restart the coordinator \
         (it creates the streams again; what they held is gone) or run `arbiter-admin setup`"
    )]
    Deleted { stream: String },
    /// A JetStream operation failed; made by [`js_error`].
    #[error("JetStream {what} failed: {source}")]
    JetStream {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server denied a read this credential's role is given now: the
    /// credential was issued before (it keeps the grants it was signed with).
    #[error(
        "{what} failed: NATS denied it ({denied}); a credential issued before its role could \
         read this way lacks the permission: issue it again (docs/security.md)"
    )]
    NotAllowed { what: String, denied: String },
    /// A payload that does not encode as JSON.
    #[error("cannot encode a message for {subject}: {source}")]
    Encode {
        subject: String,
        source: serde_json::Error,
    },
}

/// A failed JetStream operation: `what` was being done ("publish to …",
/// "opening the memory bucket"), `e` is what failed, the server's error or
/// words of the caller's own.
pub fn js_error(
    what: impl Into<String>,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> BusError {
    BusError::JetStream {
        what: what.into(),
        source: e.into(),
    }
}

/// An error and its sources on one line, joined by `: `, leaving out a
/// source whose text is already said (async-nats' own text is often just
/// the kind, or already holds its source's).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

/// Connects with a client name and no credential (tests, local tools);
/// retries in the background for a server that is not up yet when
/// `wait_for_server` is set, fails at once otherwise.
pub async fn connect(url: &str, name: &str, wait_for_server: bool) -> Result<Client> {
    let reach = if wait_for_server {
        Reach::Wait
    } else {
        Reach::FailFast
    };
    Ok(connect_with(&NatsOptions::url(url), name, reach)
        .await?
        .client)
}

/// Whether `tokens` (dot-separated) can stand in a subject filter as they
/// are: no empty token, no wildcard, no whitespace.
pub(crate) fn valid_filter_tokens(tokens: &str) -> bool {
    tokens
        .split('.')
        .all(|t| !t.is_empty() && t != "*" && t != ">" && !t.chars().any(char::is_whitespace))
}

/// A URL with any user:password part hidden, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}<credentials>{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The JetStream handles every binary works with.
#[derive(Clone)]
pub struct Bus {
    pub client: Client,
    pub js: jetstream::Context,
    pub sessions_kv: kv::Store,
    /// Refusals and denials the server reported on this connection.
    pub alarms: Alarms,
    /// The user name of the credential, when it names one.
    pub user: Option<String>,
}

impl Bus {
    /// Declares everything that is missing and opens the bus, as the admin
    /// does: for tests, tools and the benchmark on an open server.
    pub async fn setup(client: Client) -> Result<Self> {
        let conn = Connection {
            client,
            alarms: Alarms::default(),
            user: None,
            replicas: None,
        };
        let bus = Self::open(conn, NatsRole::Admin, Reach::FailFast).await?;
        retention::apply_limits(&bus.js, &retention::Limits::default()).await?;
        Ok(bus)
    }

    /// Publishes to a JetStream subject and waits for the server's ack.
    /// `msg_id` makes a resend within [`DUPLICATE_WINDOW`] a no-op.
    pub async fn publish_js<T: Serialize>(
        &self,
        subject: String,
        msg_id: &str,
        trace: &TraceContext,
        payload: &T,
    ) -> Result<()> {
        let bytes = encode(&subject, payload)?;
        self.publish_js_bytes(subject, msg_id, trace, bytes.into())
            .await
    }

    /// [`Bus::publish_js`] for a payload already encoded.
    pub async fn publish_js_bytes(
        &self,
        subject: String,
        msg_id: &str,
        trace: &TraceContext,
        payload: bytes::Bytes,
    ) -> Result<()> {
        let mut headers = HeaderMap::new();
        headers.insert(MSG_ID_HEADER, msg_id);
        trace.inject(&mut headers);
        // Tried again with the same headers (so the same `Nats-Msg-Id`: a
        // try that was stored but not acknowledged is not stored twice)
        // while the failure is one a leader election gives.
        let started = std::time::Instant::now();
        let mut delay = Duration::from_millis(50);
        loop {
            let sent = match self
                .js
                .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                .await
            {
                Ok(ack) => ack.await.map(|_| ()),
                Err(e) => Err(e),
            };
            match sent {
                Ok(()) => return Ok(()),
                Err(e) if passing(&e) && started.elapsed() < RIDE_OUT => {
                    tracing::debug!(%subject, error = %e, "publish not acknowledged yet (a NATS leader election?); trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RIDE_OUT_STEP);
                }
                Err(e) => return Err(js_error(format!("publish to {subject}"), e)),
            }
        }
    }

    /// Every message stored on `subject`, oldest first, up to the newest one
    /// at the time of the call (the stream sequence of which is returned too).
    /// `None` when the subject holds no message (or it was purged meanwhile).
    pub async fn replay_subject(
        &self,
        stream: &str,
        subject: &str,
    ) -> Result<Option<(Vec<jetstream::Message>, u64)>> {
        self.replay_subjects(stream, &[subject.to_owned()]).await
    }

    /// [`Bus::replay_subject`] over several subjects of one stream (one
    /// ordered read of them all, in stream order).
    pub async fn replay_subjects(
        &self,
        stream: &str,
        subjects: &[String],
    ) -> Result<Option<(Vec<jetstream::Message>, u64)>> {
        let what = || format!("replaying {}", subjects.join(", "));
        let stream = self
            .js
            .get_stream_no_info(stream)
            .await
            .map_err(|e| js_error(what(), e))?;
        let last_now = || async {
            let mut newest = None;
            for subject in subjects {
                match answered(stream.get_last_raw_message_by_subject(subject), &what).await? {
                    Ok(last) => newest = newest.max(Some(last.sequence)),
                    Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {}
                    Err(e) => return Err(js_error(what(), e)),
                }
            }
            Ok(newest)
        };
        let Some(mut last) = last_now().await? else {
            return Ok(None);
        };
        let (filter_subject, filter_subjects) = match subjects {
            [one] => (one.clone(), Vec::new()),
            many => (String::new(), many.to_vec()),
        };
        let consumer = answered(
            stream.create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject,
                filter_subjects,
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            }),
            &what,
        )
        .await?
        .map_err(|e| js_error(what(), e))?;
        let mut messages = consumer.messages().await.map_err(|e| js_error(what(), e))?;
        let mut out = Vec::new();
        let mut seen = 0;
        while seen < last {
            let next =
                match tokio::time::timeout(REPLAY_QUIET, futures::StreamExt::next(&mut messages))
                    .await
                {
                    Ok(Some(next)) => next,
                    Ok(None) => break,
                    // Nothing for a while: the subject may have been purged (an
                    // archive, a rollup) after its last sequence was read, and a
                    // consumer waits for purged messages forever. Ask again.
                    Err(_) => match last_now().await? {
                        Some(now) if now > seen => {
                            last = now;
                            continue;
                        }
                        _ => break,
                    },
                };
            let msg = next.map_err(|e| js_error(what(), e))?;
            seen = msg.info().map_err(|e| js_error(what(), e))?.stream_sequence;
            out.push(msg);
        }
        if out.is_empty() {
            return Ok(None);
        }
        Ok(Some((out, last)))
    }

    /// Publishes on core NATS (status, heartbeats): fire and forget.
    pub async fn publish_core<T: Serialize>(&self, subject: String, payload: &T) -> Result<()> {
        let bytes = encode(&subject, payload)?;
        self.client
            .publish(subject.clone(), bytes.into())
            .await
            .map_err(|e| js_error(format!("publish to {subject}"), e))
    }
}

/// How long [`Bus::replay_subject`] waits for the next message before it
/// checks whether the subject still holds what it set out to read.
const REPLAY_QUIET: Duration = Duration::from_secs(2);

/// How long a read the caller will retry ([`Bus::replay_subject`],
/// [`steplog::StepLog::last`]) waits for the server's answer. On a cluster
/// the server drops a request that reaches it while the stream has no leader
/// (4–9 s after its leader dies) and never answers it late; while the dead
/// node stays down, about a third of new ephemeral consumers are placed on it
/// and their creation goes unanswered too. The client's own 10 s wait made
/// each such miss cost 10 s: a session took 25–55 s to come back after a
/// leader was killed, where asking again soon takes it back within seconds of
/// the election.
pub(crate) const READ_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// `request`'s outcome, or an error (worth retrying) when the server has not
/// answered within [`READ_ANSWER_WAIT`].
pub(crate) async fn answered<T>(
    request: impl Future<Output = T>,
    what: &impl Fn() -> String,
) -> Result<T> {
    tokio::time::timeout(READ_ANSWER_WAIT, request)
        .await
        .map_err(|_| {
            js_error(
                what(),
                format!("no answer within {READ_ANSWER_WAIT:?} (a leader election?)"),
            )
        })
}

/// How long one pull request of a followed consumer ([`follow`]) lasts.
const FOLLOW_EXPIRES: Duration = Duration::from_secs(5);
/// The idle heartbeat of a followed consumer: two missed, and the pull is
/// replaced.
const FOLLOW_HEARTBEAT: Duration = Duration::from_secs(1);

/// Follows a durable pull consumer with short pull requests and a 1 s idle
/// heartbeat. On a cluster, a pull request dies with the consumer's leader;
/// with async-nats' defaults (30 s requests, 15 s heartbeat) it was replaced
/// 30 s or more later, which stalled a session's intake that long after a
/// 4–9 s election. Now it is replaced within seconds of the new leader.
pub async fn follow(
    consumer: &jetstream::consumer::PullConsumer,
) -> std::result::Result<jetstream::consumer::pull::Stream, jetstream::consumer::StreamError> {
    consumer
        .stream()
        .expires(FOLLOW_EXPIRES)
        .heartbeat(FOLLOW_HEARTBEAT)
        .messages()
        .await
}

/// Whether a failed publish may succeed when tried again shortly: what the
/// loss of a server gives (no responders while a stream elects a leader,
/// no ack in time, the connection dropped, JetStream "temporarily
/// unavailable"), as opposed to a refusal (a wrong expected sequence).
pub fn passing(e: &jetstream::context::PublishError) -> bool {
    use jetstream::context::PublishErrorKind as Kind;
    match e.kind() {
        Kind::StreamNotFound | Kind::TimedOut | Kind::BrokenPipe => true,
        Kind::Other => {
            let text = e.to_string().to_lowercase();
            text.contains("unavailable") || text.contains("10008")
        }
        _ => false,
    }
}

fn encode<T: Serialize>(subject: &str, payload: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(payload).map_err(|source| BusError::Encode {
        subject: subject.to_owned(),
        source,
    })
}

/// Decodes a payload strictly; a failure is the wire error the log shows.
pub fn decode<T: DeserializeOwned>(subject: &str, payload: &[u8]) -> Result<T, WireError> {
    serde_json::from_slice(payload).map_err(|e| WireError::MalformedMessage {
        subject: subject.to_owned(),
        detail: e.to_string(),
    })
}

/// The stream a message was copied from when the server stored a JetStream
/// API answer in its place: whoever may make a direct get names where its
/// answer goes (the reply subject, which permissions never check), and the
/// server adds `Nats-Stream` to every such answer, which no process of
/// Arbiter ever sets on what it publishes. Every reader of a subject that
/// some role's publish may not reach rejects such a message (a summons, a
/// human line, an Orchestrator's output; docs/security.md, "No consumer
/// that writes where its role may not").
pub fn relayed(headers: Option<&async_nats::HeaderMap>) -> Option<&str> {
    headers?
        .get(async_nats::header::NATS_STREAM)
        .map(|v| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_answer_stored_in_a_message_s_place_is_told_by_its_stream_header() {
        let mut answer = async_nats::HeaderMap::new();
        answer.insert(async_nats::header::NATS_STREAM, "KV_arbiter_memory");
        answer.insert(async_nats::header::NATS_SUBJECT, "$KV.arbiter_memory.w.m1");
        assert_eq!(relayed(Some(&answer)), Some("KV_arbiter_memory"));
        let mut published = async_nats::HeaderMap::new();
        published.insert(async_nats::header::NATS_MESSAGE_ID, "m1");
        assert_eq!(relayed(Some(&published)), None);
        assert_eq!(relayed(None), None);
    }

    #[test]
    fn credentials_are_hidden_in_urls() {
        assert_eq!(
            redact_url("nats://user:s3cret@host:4222"),
            "nats://<credentials>@host:4222"
        );
        assert_eq!(redact_url("nats://host:4222"), "nats://host:4222");
    }

    #[test]
    fn errors_keep_their_source_and_say_it_once() {
        use std::error::Error as _;
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let file = BusError::File {
            what: "the credentials file (--creds, NATS_CREDS)".into(),
            path: "/nonexistent/w.creds".into(),
            problem: connect::FileProblem::Unreadable(missing),
        };
        assert_eq!(
            file.to_string(),
            "cannot use the credentials file (--creds, NATS_CREDS) /nonexistent/w.creds: no \
             such file"
        );
        let Some(connect::FileProblem::Unreadable(io)) = file
            .source()
            .and_then(|p| p.downcast_ref::<connect::FileProblem>())
        else {
            panic!("the file's problem is its source: {file:?}");
        };
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(error_chain(&file), file.to_string());

        struct Unencodable;
        impl Serialize for Unencodable {
            fn serialize<S: serde::Serializer>(
                &self,
                _: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        let encode = encode("a.b", &Unencodable).unwrap_err();
        assert_eq!(encode.to_string(), "cannot encode a message for a.b: no");
        assert!(
            encode
                .source()
                .is_some_and(|e| e.downcast_ref::<serde_json::Error>().is_some())
        );
        // Said once: a source whose text is already in the message is left out.
        assert_eq!(error_chain(&encode), "cannot encode a message for a.b: no");

        let js = js_error("publish to a.b", "no responders");
        assert_eq!(
            js.to_string(),
            "JetStream publish to a.b failed: no responders"
        );
    }

    #[test]
    fn decode_reports_the_subject() {
        let err = decode::<arbiter_protocol::HumanMessage>("a.b", b"{oops").unwrap_err();
        assert!(matches!(err, WireError::MalformedMessage { ref subject, .. } if subject == "a.b"));
    }
}
