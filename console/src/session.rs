//! One console run on one session: connect, replay and follow the log, send
//! what the human types, and stop once the session has settled.

use std::future::Future;
use std::time::Duration;
use tracing::Instrument as _;

use arbiter_bus::direct::Follow;
use arbiter_bus::{Bus, TraceContext};
use arbiter_bus::{NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{LogEntry, SessionStatus, WireError, subjects};
use async_nats::jetstream::consumer::DeliverPolicy;
use futures::StreamExt;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite};
use tokio::time::Instant;

use crate::command::Typed;
use crate::inert;
use crate::render::render;
use crate::settle::Progress;
use crate::shown::ShownSeqs;
use crate::{Config, ConsoleError, Ended, Result, write_line};

/// The name this client shows in the server's connection list.
pub(crate) const CLIENT_NAME: &str = "arbiter-console";
/// With no status for the session and nothing sent, an empty log after this
/// long means there is nothing to wait for.
const REPLAY_WINDOW: Duration = Duration::from_secs(1);
/// The log consumer recreates itself on most errors; this many in a row, for
/// longer than the bus rides out the loss of a server, means it cannot.
const MAX_LOG_ERRORS: u32 = 10;
/// How often the connection is looked at for a reconnect (to another node).
const RECONNECT_CHECK: Duration = Duration::from_millis(500);

/// The human's side: what they type, where the log goes, where notices go.
pub(crate) struct Terminal<'a, R, W, E> {
    pub(crate) input: R,
    pub(crate) output: W,
    pub(crate) notices: &'a mut E,
}

/// Connects and runs the console loop until the session settles (after the
/// input ends, unless following) or `shutdown` completes. The run counts as
/// attached once the log is open.
#[tracing::instrument(skip_all, fields(session.id = %session_id))]
pub(crate) async fn run<R, W, E>(
    config: &Config,
    session_id: &str,
    terminal: Terminal<'_, R, W, E>,
    shutdown: impl Future<Output = ()>,
) -> Ended
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    tokio::pin!(shutdown);
    let not_attached = |result| Ended {
        attached: false,
        result,
    };
    let attached = tokio::select! {
        attached = attach(&config.nats, session_id) => match attached {
            Ok(attached) => attached,
            Err(e) => return not_attached(Err(e)),
        },
        () = &mut shutdown => return not_attached(Ok(())),
    };
    let archived = attached.status.as_ref().and_then(|s| s.archived_at);
    let mut console = Console {
        config,
        session_id,
        bus: attached.bus,
        output: terminal.output,
        notices: terminal.notices,
        progress: Progress::default(),
        shown: ShownSeqs::default(),
        status: attached.status.clone(),
    };
    if let Some(at) = archived {
        return Ended {
            attached: true,
            result: console.show_archive(at).await,
        };
    }
    if let Some(status) = attached.status {
        console.progress.status(status);
    }
    // While it follows, it says so to the coordinator (see `feed::answer_watchers`).
    let watchers = tokio::spawn(crate::feed::answer_watchers(
        console.bus.client.clone(),
        attached.watchers_sub,
    ));
    let result = console
        .follow(terminal.input, attached.status_sub, attached.log, shutdown)
        .await;
    watchers.abort();
    Ended {
        attached: true,
        result,
    }
}

/// What the console holds once connected.
struct Attached {
    bus: Bus,
    /// Live session status, subscribed before anything is sent.
    status_sub: async_nats::Subscriber,
    /// The coordinator's question whether a console follows the session.
    watchers_sub: async_nats::Subscriber,
    /// The latest status from the bucket, if the session has one.
    status: Option<SessionStatus>,
    log: Follow,
}

async fn attach(nats: &NatsOptions, session_id: &str) -> Result<Attached> {
    let conn = arbiter_bus::connect_with(nats, CLIENT_NAME, Reach::FailFast).await?;
    let bus = Bus::open(conn, NatsRole::Console, Reach::FailFast).await?;

    let subject = subjects::session_status(session_id);
    let subscribe_error = |e: &dyn std::fmt::Display| ConsoleError::Subscribe {
        subject: subject.clone(),
        message: e.to_string(),
    };
    let status_sub = bus
        .client
        .subscribe(subject.clone())
        .await
        .map_err(|e| subscribe_error(&e))?;
    let watchers_sub = bus
        .client
        .subscribe(subjects::session_watchers(session_id))
        .await
        .map_err(|e| subscribe_error(&e))?;
    // The server must know the subscription before the bucket is read, or a
    // status published in between would be missed.
    bus.client.flush().await.map_err(|e| subscribe_error(&e))?;

    let status = stored_status(&bus, session_id).await?;
    let log = open_log(&bus, session_id).await?;
    Ok(Attached {
        bus,
        status_sub,
        watchers_sub,
        status,
        log,
    })
}

/// Whether the session is archived (read-only); `false` when that cannot be
/// read (the run that follows reports why).
pub(crate) async fn is_archived(nats: &NatsOptions, session_id: &str) -> bool {
    let Ok(conn) = arbiter_bus::connect_with(nats, CLIENT_NAME, Reach::FailFast).await else {
        return false;
    };
    let Ok(bus) = Bus::open(conn, NatsRole::Console, Reach::FailFast).await else {
        return false;
    };
    matches!(stored_status(&bus, session_id).await, Ok(Some(s)) if s.archived_at.is_some())
}

/// The session's latest status from the sessions bucket; `None` if it has none
/// yet, or if the stored value cannot be read (the next live one replaces it).
pub(crate) async fn stored_status(bus: &Bus, session_id: &str) -> Result<Option<SessionStatus>> {
    let value = bus
        .sessions_kv
        .get(session_id)
        .await
        .map_err(|e| ConsoleError::Status {
            session_id: session_id.to_owned(),
            message: e.to_string(),
        })?;
    let Some(bytes) = value else {
        return Ok(None);
    };
    let key = format!("{}/{session_id}", subjects::SESSIONS_BUCKET);
    match arbiter_bus::decode::<SessionStatus>(&key, &bytes) {
        Ok(status) => Ok(Some(status)),
        Err(e) => {
            tracing::warn!(error = %inert::one_line(&e.to_string()), "stored session status ignored");
            Ok(None)
        }
    }
}

/// The whole log of the session, from its first entry on.
async fn open_log(bus: &Bus, session_id: &str) -> Result<Follow> {
    open_log_from(bus, session_id, DeliverPolicy::All).await
}

/// The log of the session, from where `deliver_policy` says (`All`,
/// `ByStartSequence` or `New`): its entries on `.log` and the ones that
/// are inputs (protocol v3), in stream order. Read by direct gets, woken by
/// core subscriptions on those subjects: a console may make no consumer
/// (docs/security.md, "No consumer that writes where its role may not").
pub(crate) async fn open_log_from(
    bus: &Bus,
    session_id: &str,
    deliver_policy: DeliverPolicy,
) -> Result<Follow> {
    let log_error = |e: &dyn std::fmt::Display| ConsoleError::Log {
        session_id: session_id.to_owned(),
        message: e.to_string(),
    };
    let from = match deliver_policy {
        DeliverPolicy::ByStartSequence { start_sequence } => start_sequence,
        DeliverPolicy::New => {
            let stream = bus
                .js
                .get_stream(subjects::SESSIONS_STREAM)
                .await
                .map_err(|e| log_error(&e))?;
            stream.cached_info().state.last_sequence + 1
        }
        _ => 1,
    };
    let log = subjects::session_log(session_id);
    let inputs = subjects::session_inputs(session_id);
    let input_prefix = inputs.trim_end_matches('>').to_owned();
    let keep = {
        let log = log.clone();
        move |subject: &str| subject == log || subject.starts_with(&input_prefix)
    };
    Follow::open(
        bus,
        subjects::SESSIONS_STREAM,
        &subjects::session_fence(session_id),
        keep,
        &[log, inputs],
        from,
    )
    .await
    .map_err(|e| log_error(&e))
}

struct Console<'a, W, E> {
    config: &'a Config,
    session_id: &'a str,
    bus: Bus,
    output: W,
    notices: &'a mut E,
    progress: Progress,
    /// Each log seq is printed (or reported malformed) at most once.
    shown: ShownSeqs,
    /// The newest session status, for `/budget`.
    status: Option<SessionStatus>,
}

impl<W, E> Console<'_, W, E>
where
    W: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    async fn follow<R: AsyncBufRead + Unpin>(
        &mut self,
        input: R,
        mut status_sub: async_nats::Subscriber,
        mut log: Follow,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        tokio::pin!(shutdown);
        let mut lines = input.lines();
        let mut input_open = true;
        let replay_deadline = Instant::now() + REPLAY_WINDOW;
        let mut replay_window_over = false;
        let mut log_errors = 0;
        let mut failing_since = Instant::now();
        // On a cluster the log's consumer lives on one node: when the
        // connection comes back (on another node), or the consumer ends, it
        // is opened again after the last entry taken, as the screen's feed
        // does. Entries seen twice are shown once (`ShownSeqs`).
        let mut last_stream_seq: Option<u64> = None;
        let stats = self.bus.client.statistics();
        let connects = || stats.connects.load(std::sync::atomic::Ordering::Relaxed);
        let mut seen_connects = connects();
        let mut connection_check = tokio::time::interval(RECONNECT_CHECK);
        // A consumer that delivers nothing while the status says the log
        // holds more starts over too (`feed::stalled`).
        let mut last_delivery = Instant::now();
        let mut delivered = 0;
        loop {
            if !input_open && !self.config.follow && self.progress.settled(replay_window_over) {
                tracing::debug!("session settled");
                return Ok(());
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                message = log.next() => match message {
                    Some(Ok(message)) => {
                        log_errors = 0;
                        last_delivery = Instant::now();
                        last_stream_seq = Some(message.seq);
                        let seq = self.log_message(&message.subject, &message.payload).await?;
                        delivered = delivered.max(seq.unwrap_or(0));
                    }
                    // A credential from before the console read this way.
                    Some(Err(e @ arbiter_bus::BusError::NotAllowed { .. })) => {
                        return Err(self.log_error(e));
                    }
                    Some(Err(e)) => {
                        if log_errors == 0 {
                            failing_since = Instant::now();
                        }
                        log_errors += 1;
                        tracing::warn!(error = %e, "log consumer error");
                        if log_errors >= MAX_LOG_ERRORS
                            && failing_since.elapsed() >= arbiter_bus::RIDE_OUT
                        {
                            return Err(self.log_error(e));
                        }
                    }
                    None => log = self.reopen_log(last_stream_seq).await?,
                },
                _ = connection_check.tick() => {
                    let up = self.bus.client.connection_state()
                        == async_nats::connection::State::Connected;
                    if up && connects() != seen_connects {
                        seen_connects = connects();
                        tracing::info!("reconnected: the log consumer starts over");
                        log = self.reopen_log(last_stream_seq).await?;
                        last_delivery = Instant::now();
                    }
                    let stored = self.status.as_ref().map_or(0, |s| s.last_seq);
                    if up && crate::feed::stalled(stored, delivered, last_delivery.elapsed()) {
                        tracing::warn!(stored, delivered, "the log consumer delivered nothing for 10 s while the log holds more: it starts over");
                        log = self.reopen_log(last_stream_seq).await?;
                        last_delivery = Instant::now();
                    }
                }
                message = status_sub.next() => match message {
                    Some(message) => self.status_message(&message.subject, &message.payload),
                    None => {
                        return Err(ConsoleError::Subscribe {
                            subject: subjects::session_status(self.session_id),
                            message: "the subscription ended".to_owned(),
                        });
                    }
                },
                line = lines.next_line(), if input_open => match line? {
                    Some(text) if text.trim().is_empty() => {}
                    Some(text) => self.send(text).await?,
                    None => {
                        tracing::debug!("input ended");
                        input_open = false;
                    }
                },
                () = tokio::time::sleep_until(replay_deadline), if !replay_window_over => {
                    replay_window_over = true;
                }
            }
        }
    }

    /// An archived session: its log as the archive holds it, then a notice
    /// that it is read-only. Nothing is sent.
    async fn show_archive(&mut self, at: chrono::DateTime<chrono::Utc>) -> Result<()> {
        let notice = format!(
            "session {} is archived (since {}): its log, from the archive; it is read-only, start a new session to go on",
            self.session_id,
            at.format("%Y-%m-%d %H:%M UTC")
        );
        write_line(self.notices, &notice).await?;
        let archive = arbiter_bus::retention::read_archive(&self.bus, self.session_id)
            .await
            .map_err(|e| self.log_error(e))?;
        let subject = subjects::session_log(self.session_id);
        for entry in &archive.log {
            let bytes = serde_json::to_vec(entry).unwrap_or_default();
            let _ = self.log_message(&subject, &bytes).await?;
        }
        write_line(
            self.notices,
            &format!("({} log entries, archived)", archive.log.len()),
        )
        .await
    }

    fn log_error(&self, e: impl std::fmt::Display) -> ConsoleError {
        ConsoleError::Log {
            session_id: self.session_id.to_owned(),
            message: e.to_string(),
        }
    }

    /// Prints one log entry, or reports it on stderr if it cannot be decoded;
    /// an entry whose seq was already printed or reported is skipped.
    /// Opens the log again after stream sequence `after` (from the start
    /// when nothing was taken yet), trying for `arbiter_bus::RIDE_OUT`.
    async fn reopen_log(&self, after: Option<u64>) -> Result<Follow> {
        let deliver_policy = match after {
            Some(seq) => DeliverPolicy::ByStartSequence {
                start_sequence: seq + 1,
            },
            None => DeliverPolicy::All,
        };
        let started = Instant::now();
        loop {
            match open_log_from(&self.bus, self.session_id, deliver_policy).await {
                Ok(log) => return Ok(log),
                Err(e) if started.elapsed() >= arbiter_bus::RIDE_OUT => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot open the log again yet");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Shows one log entry (once per seq); its seq, when it has one.
    async fn log_message(&mut self, subject: &str, payload: &[u8]) -> Result<Option<u64>> {
        let entry = match arbiter_bus::decode::<LogEntry>(subject, payload) {
            Ok(entry) => entry,
            Err(e) => {
                let seq = LogEntry::readable_seq(payload);
                self.progress.malformed(seq);
                if let Some(seq) = seq
                    && !self.shown.first_time(seq)
                {
                    tracing::warn!(seq, "malformed log entry with a seq already shown skipped");
                    return Ok(Some(seq));
                }
                let detail = match e {
                    WireError::MalformedMessage { detail, .. } => detail,
                    other => other.to_string(),
                };
                // The detail can quote the entry's JSON: it is made inert.
                tracing::warn!(%subject, detail = %inert::one_line(&detail), "malformed log entry");
                let notice = inert::block("! malformed log entry skipped: ", &detail);
                write_line(self.notices, &notice).await?;
                return Ok(seq);
            }
        };
        // A step entry only carries the coordinator's record: nothing to show.
        if matches!(entry.body, arbiter_protocol::LogBody::Step(_)) {
            return Ok(Some(entry.seq));
        }
        if !self.shown.first_time(entry.seq) {
            tracing::warn!(
                seq = entry.seq,
                "log entry with a seq already shown skipped"
            );
            return Ok(Some(entry.seq));
        }
        self.progress.entry(&entry);
        if let Some(text) = render(&entry, self.config.output, self.config.show_musings)? {
            write_line(&mut self.output, &text).await?;
        }
        Ok(Some(entry.seq))
    }

    fn status_message(&mut self, subject: &str, payload: &[u8]) {
        match arbiter_bus::decode::<SessionStatus>(subject, payload) {
            Ok(status) => {
                let newer = self.status.as_ref().is_none_or(|s| s.at <= status.at);
                if newer {
                    self.status = Some(status.clone());
                }
                self.progress.status(status);
            }
            Err(e) => {
                tracing::warn!(error = %inert::one_line(&e.to_string()), "session status ignored");
            }
        }
    }

    /// Publishes one line typed by the human. A failed publish is reported and
    /// the console goes on: the human may type it again.
    async fn send(&mut self, text: String) -> Result<()> {
        let typed = crate::command::typed(&text);
        match &typed {
            Typed::Wrong(why) => {
                // Refused here: nothing is sent, the human may type it again.
                return write_line(self.notices, &inert::block("! ", why)).await;
            }
            Typed::Show => {
                let summary = crate::budget::summary(self.status.as_ref());
                return write_line(self.notices, &inert::block("", &summary)).await;
            }
            Typed::Rewind { checkpoint, .. }
                if !arbiter_protocol::Rewind::is_commit(checkpoint) =>
            {
                let why = format!(
                    "/rewind: in line mode give the checkpoint's whole id \
                     (`arbiter-console checkpoints --session {}` lists them); nothing was sent",
                    self.session_id
                );
                return write_line(self.notices, &inert::block("! ", &why)).await;
            }
            Typed::Words
            | Typed::Stop
            | Typed::Change(_)
            | Typed::Approval(_)
            | Typed::Policy(_)
            | Typed::Rewind { .. } => {}
        }
        let message_id = uuid::Uuid::now_v7().to_string();
        let message = crate::command::message(
            self.session_id,
            &message_id,
            text,
            self.config.workspace.as_deref(),
        );
        // An answer to an approval is logged as its answered entry, not as
        // the human's words: there is no entry of this message to wait for.
        let awaited = !matches!(typed, Typed::Approval(_));
        if awaited {
            self.progress.sending(&message_id);
        }
        let span = crate::line_span(self.session_id, &message_id);
        let sent = self
            .bus
            .publish_js(
                subjects::session_human_from(self.session_id, &self.config.identity),
                &message_id,
                &TraceContext::of(&span),
                &message,
            )
            .instrument(span)
            .await;
        if let Err(e) = sent {
            self.progress.not_sent(&message_id);
            let error = crate::not_sent::reason(&e);
            tracing::warn!(error = %inert::one_line(&error), "human message not sent");
            let notice = inert::block("! message not sent: ", &error);
            write_line(self.notices, &notice).await?;
        }
        Ok(())
    }
}
