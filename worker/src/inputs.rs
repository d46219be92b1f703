//! An Orchestrator's inputs and control, read straight from the streams,
//! with no consumer on the server.
//!
//! Input `n` is the session's log entry that shows it, stored once on a
//! subject of its own, `session.<id>.in.<orch_id>.<n>` (protocol v3), and
//! read by direct get of exactly that subject: the worker reads input
//! `in_seq + 1`, then the next, and nothing else of the session. Control
//! is the last message on `orch.<id>.ctl`. Core subscriptions only wake the
//! reader: a message they bring is read again from the stream (where it may
//! appear a moment later, on a follower of a cluster even later, so an input
//! or a control announced and not there yet is looked for again), so
//! nothing the server did not store is ever taken. A wake-up lost (a slow
//! subscriber, a reconnect) is made good by the next wake-up, by reads at
//! and after a reconnect of the connection or a slow-consumer event (see
//! [`RECHECKS`]), or by a poll every [`POLL`].
//! Nothing is acknowledged: what the Orchestrator has taken is the `in_seq` of its stored state, and
//! a worker that takes it over reads on from there. So claiming an
//! Orchestrator creates and deletes nothing on the server (protocol.md,
//! "Reading inputs and control").

use std::time::Duration;

use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{Control, LogBody, LogEntry, subjects};
use async_nats::jetstream::stream::{DirectGetErrorKind, Stream};
use async_nats::{Subscriber, jetstream::message::StreamMessage};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::stop::{Cause, Stopper};

/// Longest time a stored input can go unseen when its wake-up was lost
/// with no sign: a reconnect and a subscription that lost messages (a slow
/// consumer) have the streams read at once. Each poll is two direct gets
/// per Orchestrator, so it is a backstop only.
pub(crate) const POLL: Duration = Duration::from_secs(30);
/// Looks again at once, before any wait, for an input or a control message
/// announced but not readable yet (see [`Looks`]). A core subscriber gets a message before the server has
/// stored it; the store usually lands within a direct get's round trip or
/// two (0.1–0.5 ms), well under the timer's 1 ms grain, so these looks are
/// paced by the round trip itself.
const QUICK_LOOKS: u32 = 3;
/// When the first timed look for such a message is due, counted from its
/// wake-up (later ones twice as far apart each time).
const FIRST_RETRY: Duration = Duration::from_millis(1);
/// Longest wait between those looks (the server may have refused it).
const LAST_RETRY: Duration = Duration::from_secs(5);
/// Reads after a reconnect or a slow-consumer event, beyond the one made at
/// once, waiting [`FIRST_RECHECK`], then twice as long each time. A message
/// stored around a reconnect may have reached the server before this
/// connection's subscriptions were made again, and been stored only after
/// the read made at once: its wake-up is lost, and without these reads it
/// would wait for the next [`POLL`].
const RECHECKS: u32 = 4;
/// The wait before the first of those reads (then 2, 4, 8 s).
const FIRST_RECHECK: Duration = Duration::from_secs(1);
/// Wait after a failed read (the server restarting, an election).
const READ_RETRY: Duration = Duration::from_millis(250);

/// One message from the Arbiter, or the answer to an approval.
pub(crate) struct Input {
    pub seq: u64,
    /// The Arbiter's words (empty for an approval's answer).
    pub text: String,
    /// The answer to a call that waited for approval (the log's
    /// `approval_answered` entry, stored as this input): not words for the
    /// model, but what the waiting call does (see `approval.rs`).
    pub approval: Option<arbiter_protocol::ApprovalAnsweredEntry>,
    /// The Orchestrator's allowance from this input on, if it carries one.
    pub budget: Option<arbiter_protocol::Cap>,
    /// Its sequence in the stream: the same however often it is read.
    pub stream_seq: u64,
    /// The trace context it was published with.
    pub trace: TraceContext,
    /// Seen on its wake-up only, not read from the stream yet: the server
    /// may have refused to store it (a fenced-out coordinator's publish
    /// still reaches core subscribers). The agent may start the model call
    /// such an input would make, and takes that call's reply only if the
    /// input read from the stream asks for the same request (see
    /// `agent::Foreseen`); it never takes a hint itself.
    pub hint: bool,
}

/// What reading an Orchestrator's inputs needs, opened before its first turn.
pub(crate) struct Feed {
    /// `ARBITER_SESSIONS`, where the inputs are.
    sessions: Stream<()>,
    /// `ARBITER_ORCH`, where control is.
    orch: Stream<()>,
    session_id: String,
    orch_id: String,
    wake_in: Subscriber,
    wake_ctl: Subscriber,
    reconnects: watch::Receiver<u64>,
}

/// Subscribes to the wake-ups (before anything is read, so none is missed).
pub(crate) async fn open(bus: &Bus, session_id: &str, orch_id: &str) -> Result<Feed, String> {
    let sessions = bus
        .js
        .get_stream_no_info(subjects::SESSIONS_STREAM)
        .await
        .map_err(|e| format!("opening the sessions stream: {e}"))?;
    let orch = bus
        .js
        .get_stream_no_info(subjects::ORCH_STREAM)
        .await
        .map_err(|e| format!("opening the Orchestrator stream: {e}"))?;
    let wake_in = bus
        .client
        .subscribe(subjects::session_inputs_of(session_id, orch_id))
        .await
        .map_err(|e| format!("subscribing to the inputs: {e}"))?;
    let wake_ctl = bus
        .client
        .subscribe(subjects::orch_ctl(orch_id))
        .await
        .map_err(|e| format!("subscribing to control: {e}"))?;
    Ok(Feed {
        sessions,
        orch,
        session_id: session_id.to_owned(),
        orch_id: orch_id.to_owned(),
        wake_in,
        wake_ctl,
        reconnects: bus.alarms.reconnects(),
    })
}

/// Hands the agent every input past `taken` (the stored `in_seq`) in
/// order, and turns a release or cancel into a stop. Malformed messages are
/// logged and passed over.
pub(crate) async fn read(
    mut feed: Feed,
    taken: u64,
    inputs: mpsc::Sender<Input>,
    stopper: Stopper,
) {
    let stop = stopper.token().clone();
    let mut reader = Reader::new(&feed, taken);
    // The highest input number announced by a wake-up, and the looks for it
    // while the stream does not show it yet (never given up: inputs are
    // taken in order, so every later one waits on it).
    let mut announced = 0;
    let mut input_looks = Looks::new(None);
    // Reads still due after a reconnect, and the wait before the next.
    let mut rechecks = 0;
    let mut recheck = FIRST_RECHECK;
    let mut check_control = true;
    // A control wake-up whose message the stream did not show yet (given
    // up after the poll's time: the server may have refused it).
    let mut control_looks = Looks::new(Some(POLL));
    loop {
        if !reader.drain(&feed.sessions, &inputs, &stop).await {
            return;
        }
        if check_control || control_looks.due() {
            if let Some(action) = reader.control(&feed.orch).await {
                tracing::info!(?action, "control received");
                stopper.stop(Cause::Control { action });
                return;
            }
            check_control = control_looks.missed();
            if check_control {
                continue;
            }
        }
        if announced < reader.next {
            input_looks.stop();
        } else if input_looks.missed() {
            continue;
        }
        let wait = if rechecks > 0 { recheck } else { POLL };
        // A look owed sooner wakes the loop, which makes it at the top.
        let look = [input_looks.wait(), control_looks.wait()]
            .into_iter()
            .flatten()
            .min()
            .filter(|next| *next < wait);
        tokio::select! {
            () = stop.cancelled() => return,
            woke = feed.wake_in.next() => {
                let Some(msg) = woke else { return };
                if let Some((_, _, n)) = subjects::input_of(msg.subject.as_str()) {
                    announced = announced.max(n);
                    input_looks.start();
                    // The next input as its wake-up shows it goes ahead as
                    // a hint (never waited for: the read below is what
                    // counts), unless a later one was announced already: the
                    // read would take both, and the hint's call be wasted.
                    if n == announced
                        && let Some(hint) = reader.hint(n, &msg)
                    {
                        let _ = inputs.try_send(hint);
                    }
                }
            }
            woke = feed.wake_ctl.next() => {
                if woke.is_none() { return }
                check_control = true;
                control_looks.start();
            }
            changed = feed.reconnects.changed() => {
                if changed.is_err() { return }
                check_control = true;
                rechecks = RECHECKS;
                recheck = FIRST_RECHECK;
            }
            () = tokio::time::sleep(look.unwrap_or(wait)) => {
                if look.is_some() {
                    continue;
                }
                check_control = true;
                if rechecks > 0 {
                    rechecks -= 1;
                    recheck *= 2;
                }
            }
        }
    }
}

/// The looks for an input or a control message that a wake-up announced
/// and the stream did not show yet: [`QUICK_LOOKS`] at once, then after 1,
/// 2, 4 … ms, at most [`LAST_RETRY`] apart, until it is found or, if the
/// looks have a limit, for that long (the poll goes on after it). Without
/// them, a message read a moment before it was stored waited for the next
/// wake-up or poll.
struct Looks {
    /// How long the looks go on; `None`: until [`Looks::stop`].
    limit: Option<Duration>,
    /// When the wake-up came; `None`: no look is owed.
    since: Option<tokio::time::Instant>,
    quick: u32,
    next: Option<tokio::time::Instant>,
    step: Duration,
}

impl Looks {
    fn new(limit: Option<Duration>) -> Self {
        Self {
            limit,
            since: None,
            quick: 0,
            next: None,
            step: FIRST_RETRY,
        }
    }

    /// A wake-up announced a message: the looks start again from the first.
    fn start(&mut self) {
        let now = tokio::time::Instant::now();
        self.since = Some(now);
        self.quick = QUICK_LOOKS;
        self.next = Some(now + FIRST_RETRY);
        self.step = FIRST_RETRY;
    }

    /// Found (or given up): no look is owed.
    fn stop(&mut self) {
        *self = Self::new(self.limit);
    }

    /// A look is owed now.
    fn due(&self) -> bool {
        self.next
            .is_some_and(|next| next <= tokio::time::Instant::now())
    }

    /// A look found nothing: true when the next is to be made at once.
    fn missed(&mut self) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        if self.quick > 0 {
            self.quick -= 1;
            return true;
        }
        let now = tokio::time::Instant::now();
        if self.next.is_some_and(|next| next <= now) {
            self.step = (self.step * 2).min(LAST_RETRY);
            self.next = Some(now + self.step);
        }
        if self
            .limit
            .is_some_and(|limit| now.duration_since(since) >= limit)
        {
            self.stop();
        }
        false
    }

    /// How long until the next look, if one is owed.
    fn wait(&self) -> Option<Duration> {
        self.next
            .map(|next| next.saturating_duration_since(tokio::time::Instant::now()))
    }
}

/// What an input's log entry holds for the Orchestrator.
#[derive(Debug)]
struct Parsed {
    text: String,
    budget: Option<arbiter_protocol::Cap>,
    approval: Option<arbiter_protocol::ApprovalAnsweredEntry>,
}

/// Input `n` of Orchestrator `orch_id` from its log entry: the Arbiter's
/// words (`arbiter_to_orchestrator`) or an approval's answer
/// (`approval_answered`), each numbered `n` for it; anything else is not
/// that input.
fn parse_entry(body: LogBody, orch_id: &str, n: u64) -> Result<Parsed, String> {
    match body {
        LogBody::ArbiterToOrchestrator(input)
            if input.orch_id == orch_id && input.input_seq == Some(n) =>
        {
            Ok(Parsed {
                text: input.text,
                budget: input.budget,
                approval: None,
            })
        }
        LogBody::ApprovalAnswered(answer) if answer.orch_id == orch_id && answer.input_seq == n => {
            Ok(Parsed {
                text: String::new(),
                budget: None,
                approval: Some(answer),
            })
        }
        _ => Err("not an input to this Orchestrator with this number".to_owned()),
    }
}

/// Where reading stands.
struct Reader {
    session_id: String,
    orch_id: String,
    ctl_subject: String,
    /// The number of the next input to read: the stored `in_seq` + 1 at first.
    next: u64,
    /// The stream sequence of a malformed control message already reported.
    bad_control: u64,
    /// The stream sequence of the last input message looked at (a
    /// malformed one is reported once).
    bad_input: u64,
    /// The input number last sent as a hint.
    hinted: u64,
}

impl Reader {
    fn new(feed: &Feed, taken: u64) -> Self {
        Self {
            session_id: feed.session_id.clone(),
            orch_id: feed.orch_id.clone(),
            ctl_subject: subjects::orch_ctl(&feed.orch_id),
            next: taken + 1,
            bad_control: 0,
            bad_input: 0,
            hinted: 0,
        }
    }

    /// Reads every input stored from `next` on. False when the reading is over.
    async fn drain(
        &mut self,
        stream: &Stream<()>,
        inputs: &mpsc::Sender<Input>,
        stop: &tokio_util::sync::CancellationToken,
    ) -> bool {
        loop {
            if stop.is_cancelled() {
                return false;
            }
            let subject = subjects::session_input(&self.session_id, &self.orch_id, self.next);
            let msg = match stream.direct_get_last_for_subject(subject.as_str()).await {
                Ok(msg) => msg,
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the inputs; trying again");
                    tokio::select! {
                        () = stop.cancelled() => return false,
                        () = tokio::time::sleep(READ_RETRY) => continue,
                    }
                }
            };
            // A message that is not input `next` is passed over, and the
            // reader waits on the subject: only the coordinator writes it,
            // and what it writes there next is the input itself (direct get
            // reads the subject's newest message).
            let Some(input) = self.input(&msg) else {
                return true;
            };
            self.next += 1;
            if inputs.send(input).await.is_err() {
                return false;
            }
        }
    }

    /// Input `next` from its stored log entry; `None` (logged once) when
    /// the entry is not an input to this Orchestrator numbered `next`.
    fn input(&mut self, msg: &StreamMessage) -> Option<Input> {
        let subject = msg.subject.as_str();
        let first = self.bad_input != msg.sequence;
        self.bad_input = msg.sequence;
        match self.parse(subject, &msg.payload) {
            Ok(Parsed {
                text,
                budget,
                approval,
            }) => {
                arbiter_bus::metrics::hop_since(msg.time, "coordinator→orchestrator");
                Some(Input {
                    seq: self.next,
                    text,
                    approval,
                    budget,
                    stream_seq: msg.sequence,
                    trace: TraceContext::from_headers(Some(&msg.headers)),
                    hint: false,
                })
            }
            Err(error) => {
                if first {
                    tracing::error!(%subject, stream_seq = msg.sequence, %error, "malformed input passed over");
                }
                None
            }
        }
    }

    /// Input `n` as its wake-up message shows it, once, when it is the
    /// next one to read; `None` otherwise (a malformed one is reported
    /// when it is read from the stream).
    fn hint(&mut self, n: u64, msg: &async_nats::Message) -> Option<Input> {
        if n != self.next || self.hinted >= n {
            return None;
        }
        self.hinted = n;
        let parsed = self.parse(msg.subject.as_str(), &msg.payload).ok()?;
        // An approval's answer starts no model call: nothing to foresee.
        if parsed.approval.is_some() {
            return None;
        }
        Some(Input {
            seq: n,
            text: parsed.text,
            approval: None,
            budget: parsed.budget,
            stream_seq: 0,
            trace: TraceContext::from_headers(msg.headers.as_ref()),
            hint: true,
        })
    }

    /// Input `next` as its entry holds it, or why the entry is not it:
    /// the Arbiter's words, or an approval's answer.
    fn parse(&self, subject: &str, payload: &[u8]) -> Result<Parsed, String> {
        let entry = arbiter_bus::decode::<LogEntry>(subject, payload).map_err(|e| e.to_string())?;
        parse_entry(entry.body, &self.orch_id, self.next)
    }

    /// The release or cancel stored for this Orchestrator, if any.
    async fn control(&mut self, stream: &Stream<()>) -> Option<arbiter_protocol::ControlAction> {
        let msg = match stream
            .direct_get_last_for_subject(self.ctl_subject.as_str())
            .await
        {
            Ok(msg) => msg,
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => return None,
            Err(e) => {
                // Looked at again at the next wake-up or poll.
                tracing::warn!(error = %e, "could not read control");
                return None;
            }
        };
        match arbiter_bus::decode::<Control>(msg.subject.as_str(), &msg.payload) {
            Ok(control) => Some(control.action),
            Err(error) => {
                if self.bad_control != msg.sequence {
                    self.bad_control = msg.sequence;
                    tracing::error!(subject = %msg.subject, %error, "malformed control message passed over");
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn past() -> Instant {
        Instant::now() - Duration::from_millis(1)
    }

    #[test]
    fn an_approvals_answer_is_an_input_and_words_are_one_too() {
        use arbiter_protocol::{Answerer, ApprovalAnsweredEntry, ApprovalDecision};
        let answer = ApprovalAnsweredEntry {
            approval: 1,
            number: 1,
            member: None,
            orch_id: "o1".into(),
            call_id: "toolu_1".into(),
            decision: ApprovalDecision::AllowOnce,
            reason: None,
            by: Answerer::Console {
                name: "alice".into(),
            },
            rule: None,
            input_seq: 3,
        };
        let parsed = parse_entry(LogBody::ApprovalAnswered(answer.clone()), "o1", 3).unwrap();
        assert_eq!(parsed.approval, Some(answer.clone()));
        assert!(parsed.text.is_empty());
        // Another Orchestrator's, or another number: not this input.
        assert!(parse_entry(LogBody::ApprovalAnswered(answer.clone()), "o2", 3).is_err());
        assert!(parse_entry(LogBody::ApprovalAnswered(answer), "o1", 4).is_err());
    }

    #[test]
    fn no_look_is_owed_without_a_wake_up() {
        let mut looks = Looks::new(Some(POLL));
        assert!(!looks.due());
        assert!(!looks.missed());
        assert_eq!(looks.wait(), None);
    }

    /// Quick looks, then looks further apart up to the longest step.
    fn look_until_the_longest_step(looks: &mut Looks) {
        for _ in 0..QUICK_LOOKS {
            assert!(looks.missed(), "a quick look");
        }
        assert!(!looks.missed());
        assert!(looks.wait().is_some_and(|wait| wait <= FIRST_RETRY * 2));
        // Each look once due finds nothing: the next waits twice as long.
        let step = looks.step;
        looks.next = Some(past());
        assert!(looks.due());
        assert!(!looks.missed());
        assert_eq!(looks.step, step * 2);
        assert!(!looks.due());
        for _ in 0..20 {
            looks.next = Some(past());
            looks.missed();
        }
        assert_eq!(looks.step, LAST_RETRY);
    }

    #[test]
    fn control_announced_is_looked_for_at_once_then_further_apart_until_the_poll() {
        let mut looks = Looks::new(Some(POLL));
        looks.start();
        look_until_the_longest_step(&mut looks);
        // Given up after the poll's time: the poll goes on.
        looks.since = Some(Instant::now() - POLL);
        looks.next = Some(past());
        looks.missed();
        assert!(!looks.due());
        assert_eq!(looks.wait(), None);
    }

    #[test]
    fn an_input_announced_is_looked_for_until_found_and_a_new_wake_up_starts_again() {
        let mut looks = Looks::new(None);
        looks.start();
        look_until_the_longest_step(&mut looks);
        // Never given up while it is missing.
        looks.since = Some(Instant::now() - POLL * 10);
        looks.next = Some(past());
        looks.missed();
        assert!(looks.wait().is_some_and(|wait| wait <= LAST_RETRY));
        // A later input's wake-up: quick looks again, from the first step.
        looks.start();
        assert!(looks.missed());
        assert_eq!(looks.step, FIRST_RETRY);
        // Found: nothing owed.
        looks.stop();
        assert!(!looks.missed());
        assert_eq!(looks.wait(), None);
    }
}
