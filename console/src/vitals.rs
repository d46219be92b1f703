//! What the status area shows: the Arbiter's and the active Orchestrator's
//! latest status, and whether they are alive, derived from when each status
//! arrived. Nothing here is guessed: no status, no claim; and silence that
//! this console could not have heard (while it was offline) counts for nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arbiter_protocol::{OrchestratorState, OrchestratorStatus, SessionState, SessionStatus};

/// Workers and the coordinator republish status this often while nothing changes.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A working Orchestrator silent for this long (three heartbeats) is stalled.
pub const STALLED_AFTER: Duration = Duration::from_secs(6);
/// Anything silent for this long is lost.
pub const LOST_AFTER: Duration = Duration::from_secs(15);
/// After the console reconnects, liveness stays unknown this long (three
/// heartbeats) unless a status arrives first.
pub const RECONNECT_GRACE: Duration = STALLED_AFTER;

/// Why this console cannot tell whether something is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blind {
    /// The console's own connection to NATS is down: no status can arrive.
    Offline,
    /// The console reconnected less than [`RECONNECT_GRACE`] ago and no
    /// status has arrived since.
    Reconnected,
    /// The console attached less than [`RECONNECT_GRACE`] ago and holds only
    /// the status stored at the last change, which says nothing of whether
    /// its publisher is alive now; no heartbeat has arrived yet.
    Attached,
}

/// How an Orchestrator is doing, as its status stream says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Active, but no status has arrived yet (for less than [`LOST_AFTER`]).
    Starting,
    /// Calling the model or running a tool, heartbeats on time.
    Working,
    /// Waiting for the Arbiter, heartbeats on time.
    Waiting,
    /// Working, but no status for longer than [`STALLED_AFTER`].
    Stalled { silent: Duration },
    /// No status for longer than [`LOST_AFTER`].
    Lost { silent: Duration },
    /// Its worker said it stopped.
    Stopped,
    /// This console cannot hear its statuses, or has not yet since reconnecting.
    Unknown(Blind),
}

/// What the Arbiter is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArbiterLiveness {
    Idle,
    /// A turn is in flight (`queued` more inputs wait for it).
    Thinking {
        queued: u32,
    },
    /// Thinking, but the coordinator has been silent for longer than [`LOST_AFTER`].
    Lost {
        silent: Duration,
    },
    /// This console cannot hear the coordinator, or has not yet since reconnecting.
    Unknown(Blind),
}

/// A status and the moment this console received it.
#[derive(Debug, Clone)]
struct Received<T> {
    value: T,
    arrived: Instant,
    /// When its publisher last spoke, as far as this console knows: its
    /// arrival for a published copy, the moment of its `at` for one read
    /// from the bucket (stored at the last change, perhaps long ago).
    heard: Instant,
    /// Read from the bucket, and no published copy since.
    stored: bool,
}

/// The latest statuses of one session.
#[derive(Debug, Clone)]
pub struct Vitals {
    session_id: String,
    session: Option<Received<SessionStatus>>,
    /// Latest status per Orchestrator of this session, by orch id.
    orchestrators: HashMap<String, Received<OrchestratorStatus>>,
    /// The active Orchestrator and when this console learned it was active.
    active_since: Option<(String, Instant)>,
    /// The console's connection to NATS is down.
    offline: bool,
    /// When the connection last came back; `None` if it was never lost.
    online_since: Option<Instant>,
    /// The Arbiter's generation, from the log's `arbiter_handoff` entries.
    arbiter_generation: u32,
}

impl Vitals {
    pub fn new(session_id: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            session: None,
            orchestrators: HashMap::new(),
            active_since: None,
            offline: false,
            online_since: None,
            arbiter_generation: 1,
        }
    }

    /// A log entry: an Arbiter handoff moves the generation on.
    pub fn log(&mut self, entry: &arbiter_protocol::LogEntry) {
        if let arbiter_protocol::LogBody::ArbiterHandoff(e) = &entry.body {
            self.arbiter_generation = self.arbiter_generation.max(e.generation);
        }
    }

    /// The Arbiter's generation: 1 until it first hands itself off.
    pub fn arbiter_generation(&self) -> u32 {
        self.arbiter_generation
    }

    /// The console lost (`up == false`) or regained its connection to NATS at
    /// `now`. While it is down nothing can be heard, so nothing is claimed.
    pub fn connection(&mut self, up: bool, now: Instant) {
        if up && self.offline {
            self.online_since = Some(now);
        }
        self.offline = !up;
    }

    /// Why liveness cannot be told for something last heard at `heard`, if so.
    fn blind(&self, heard: Option<Instant>, now: Instant) -> Option<Blind> {
        if self.offline {
            return Some(Blind::Offline);
        }
        let back = self.online_since?;
        let heard_since_back = heard.is_some_and(|heard| heard >= back);
        (!heard_since_back && now.saturating_duration_since(back) <= RECONNECT_GRACE)
            .then_some(Blind::Reconnected)
    }

    /// How long something last heard (or expected from) at `heard` has been
    /// silent, counting only the time this console could have heard it.
    fn silent(&self, heard: Instant, now: Instant) -> Duration {
        let from = self.online_since.map_or(heard, |back| heard.max(back));
        now.saturating_duration_since(from)
    }

    /// Keeps the status with the newest `at`; a copy as new as the one held
    /// (a heartbeat) only refreshes its arrival. Returns whether it was kept.
    pub fn session(&mut self, status: SessionStatus, now: Instant) -> bool {
        self.keep_session(status, now, None)
    }

    /// Takes the status read from the bucket on attaching, `age` old by its
    /// `at` (the bucket holds the last change, not the last heartbeat). It
    /// counts as heard `age` ago, and claims no liveness until a heartbeat
    /// comes or [`RECONNECT_GRACE`] passes: a coordinator that died long ago
    /// must not look as if it were thinking now.
    pub fn stored_session(&mut self, status: SessionStatus, age: Duration, now: Instant) -> bool {
        self.keep_session(status, now, Some(age))
    }

    fn keep_session(&mut self, status: SessionStatus, now: Instant, age: Option<Duration>) -> bool {
        if status.session_id != self.session_id
            || self
                .session
                .as_ref()
                .is_some_and(|held| held.value.at > status.at)
        {
            return false;
        }
        let active = status.active.as_ref().map(|a| a.orch_id.clone());
        match (&active, &self.active_since) {
            (Some(id), Some((held, _))) if held == id => {}
            (Some(id), _) => self.active_since = Some((id.clone(), now)),
            (None, _) => self.active_since = None,
        }
        self.session = Some(Received {
            value: status,
            arrived: now,
            heard: age.map_or(now, |age| now.checked_sub(age).unwrap_or(now)),
            stored: age.is_some(),
        });
        self.forget_stopped();
        true
    }

    /// Keeps the newest status of each Orchestrator of this session.
    pub fn orchestrator(&mut self, status: OrchestratorStatus, now: Instant) -> bool {
        if status.session_id != self.session_id {
            return false;
        }
        if let Some(held) = self.orchestrators.get(&status.orch_id)
            && held.value.at > status.at
        {
            return false;
        }
        self.orchestrators.insert(
            status.orch_id.clone(),
            Received {
                value: status,
                arrived: now,
                heard: now,
                stored: false,
            },
        );
        self.forget_stopped();
        true
    }

    /// Drops stopped Orchestrators that are not the active one, so the map
    /// holds no more than the live ones.
    fn forget_stopped(&mut self) {
        let active = self.active_id().map(str::to_owned);
        self.orchestrators.retain(|id, r| {
            r.value.state != OrchestratorState::Stopped || active.as_deref() == Some(id)
        });
    }

    pub fn session_status(&self) -> Option<&SessionStatus> {
        self.session.as_ref().map(|r| &r.value)
    }

    fn active_id(&self) -> Option<&str> {
        self.session_status()?
            .active
            .as_ref()
            .map(|a| a.orch_id.as_str())
    }

    /// The Arbiter's context use, 0–100; `None` until a status has told it.
    pub fn arbiter_pct(&self) -> Option<f32> {
        self.session_status().map(|s| s.arbiter_context_pct)
    }

    /// The number the next summoned Orchestrator will have.
    pub fn next_number(&self) -> u32 {
        self.session_status().map_or(1, |s| s.summoned + 1)
    }

    /// The active Orchestrator's number, if one is active.
    pub fn active_number(&self) -> Option<u32> {
        self.session_status()?.active.as_ref().map(|a| a.number)
    }

    /// The session's live Orchestrators (one, or each member of a team).
    pub fn team(&self) -> &[arbiter_protocol::ActiveOrchestrator] {
        self.session_status().map_or(&[], |s| s.team.as_slice())
    }

    /// The latest status of Orchestrator `orch_id` of this session, if heard.
    pub fn status_of(&self, orch_id: &str) -> Option<&OrchestratorStatus> {
        self.orchestrators.get(orch_id).map(|r| &r.value)
    }

    /// The active Orchestrator's latest status, if one is active and has reported.
    pub fn active_status(&self) -> Option<&OrchestratorStatus> {
        let id = self.active_id()?;
        self.orchestrators.get(id).map(|r| &r.value)
    }

    pub fn arbiter(&self, now: Instant) -> ArbiterLiveness {
        if let Some(blind) = self.blind(self.session.as_ref().map(|r| r.arrived), now) {
            return ArbiterLiveness::Unknown(blind);
        }
        let Some(received) = &self.session else {
            return ArbiterLiveness::Idle;
        };
        let status = &received.value;
        if status.state == SessionState::Idle && status.queued == 0 {
            return ArbiterLiveness::Idle;
        }
        if received.stored && now.saturating_duration_since(received.arrived) <= RECONNECT_GRACE {
            return ArbiterLiveness::Unknown(Blind::Attached);
        }
        let silent = self.silent(received.heard, now);
        if silent >= LOST_AFTER {
            ArbiterLiveness::Lost { silent }
        } else {
            ArbiterLiveness::Thinking {
                queued: status.queued,
            }
        }
    }

    /// The active Orchestrator's liveness; `None` when none is active.
    pub fn liveness(&self, now: Instant) -> Option<Liveness> {
        let (id, since) = self.active_since.as_ref()?;
        let received = self.orchestrators.get(id);
        // What its worker said last is a fact, not a liveness claim.
        if received.is_some_and(|r| r.value.state == OrchestratorState::Stopped) {
            return Some(Liveness::Stopped);
        }
        if let Some(blind) = self.blind(received.map(|r| r.arrived), now) {
            return Some(Liveness::Unknown(blind));
        }
        let Some(received) = received else {
            let silent = self.silent(*since, now);
            return Some(if silent >= LOST_AFTER {
                Liveness::Lost { silent }
            } else {
                Liveness::Starting
            });
        };
        let silent = self.silent(received.arrived, now);
        Some(match received.value.state {
            OrchestratorState::Stopped => Liveness::Stopped,
            _ if silent >= LOST_AFTER => Liveness::Lost { silent },
            OrchestratorState::Waiting | OrchestratorState::WaitingApproval => Liveness::Waiting,
            OrchestratorState::Working if silent > STALLED_AFTER => Liveness::Stalled { silent },
            OrchestratorState::Working => Liveness::Working,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::ActiveOrchestrator;
    use chrono::{Duration as Span, Utc};
    use pretty_assertions::assert_eq;

    #[test]
    fn an_arbiter_handoff_in_the_log_moves_the_generation_on() {
        let entry = |seq, body| arbiter_protocol::LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at: Utc::now(),
            body,
        };
        let packet: arbiter_protocol::ArbiterPacket = serde_json::from_value(serde_json::json!({
            "goal": "g", "preferences": [], "decisions": [], "orchestrators": [],
            "open": [], "active": null}))
        .unwrap();
        let handoff = |generation| {
            arbiter_protocol::LogBody::ArbiterHandoff(arbiter_protocol::ArbiterHandoffEntry {
                generation,
                packet: Box::new(packet.clone()),
                built_by_coordinator: None,
                kept_exchanges: 2,
                context_tokens_before: 6000,
                context_tokens_after: 2000,
            })
        };
        let mut vitals = Vitals::new("s");
        assert_eq!(vitals.arbiter_generation(), 1);
        vitals.log(&entry(
            1,
            arbiter_protocol::LogBody::Arbiter(arbiter_protocol::ArbiterEntry {
                text: "hi".into(),
            }),
        ));
        assert_eq!(vitals.arbiter_generation(), 1);
        vitals.log(&entry(2, handoff(2)));
        assert_eq!(vitals.arbiter_generation(), 2);
        // An entry seen again (a replay) never moves it back.
        vitals.log(&entry(3, handoff(3)));
        vitals.log(&entry(2, handoff(2)));
        assert_eq!(vitals.arbiter_generation(), 3);
    }

    fn session(state: SessionState, active: Option<(&str, u32)>) -> SessionStatus {
        SessionStatus {
            team: Vec::new(),
            spend: Default::default(),
            archived_at: None,
            budget: Default::default(),
            approvals: Vec::new(),
            attention: None,
            v: 1,
            session_id: "s".into(),
            state,
            queued: 0,
            arbiter_context_pct: 18.0,
            arbiter_context_tokens: 36_000,
            active: active.map(|(id, n)| ActiveOrchestrator {
                member: None,
                reported: false,
                orch_id: id.into(),
                number: n,
            }),
            summoned: 1,
            last_seq: 0,
            created_at: Utc::now(),
            at: Utc::now(),
        }
    }

    fn orch(id: &str, state: OrchestratorState) -> OrchestratorStatus {
        OrchestratorStatus {
            spend: Default::default(),
            v: 1,
            session_id: "s".into(),
            orch_id: id.into(),
            number: 1,
            worker_id: "w".into(),
            state,
            context_pct: 74.0,
            context_tokens: 148_000,
            context_budget: 200_000,
            current_tool: Some("Edit".into()),
            tool_count: 12,
            parked: false,
            mcp_failures: Vec::new(),
            branch: None,
            at: Utc::now(),
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_liveness_rule() {
        let t0 = Instant::now();
        let mut v = Vitals::new("s");
        assert_eq!(v.liveness(t0), None, "no Orchestrator active");
        v.session(session(SessionState::Idle, Some(("o1", 1))), t0);
        assert_eq!(v.liveness(t0 + secs(14)), Some(Liveness::Starting));
        assert_eq!(
            v.liveness(t0 + secs(15)),
            Some(Liveness::Lost { silent: secs(15) })
        );

        v.orchestrator(orch("o1", OrchestratorState::Working), t0 + secs(1));
        assert_eq!(v.liveness(t0 + secs(7)), Some(Liveness::Working));
        assert_eq!(
            v.liveness(t0 + secs(8)),
            Some(Liveness::Stalled { silent: secs(7) })
        );
        assert_eq!(
            v.liveness(t0 + secs(16)),
            Some(Liveness::Lost { silent: secs(15) })
        );

        // A heartbeat (same `at`) revives it.
        let mut beat = v.active_status().unwrap().clone();
        beat.state = OrchestratorState::Waiting;
        v.orchestrator(beat, t0 + secs(16));
        assert_eq!(v.liveness(t0 + secs(26)), Some(Liveness::Waiting));
        assert_eq!(
            v.liveness(t0 + secs(31)),
            Some(Liveness::Lost { silent: secs(15) })
        );
    }

    #[test]
    fn nothing_is_claimed_while_the_console_cannot_hear() {
        let t0 = Instant::now();
        let mut v = Vitals::new("s");
        v.session(session(SessionState::Thinking, Some(("o1", 1))), t0);
        v.orchestrator(orch("o1", OrchestratorState::Working), t0);
        v.connection(false, t0 + secs(1));
        for t in [2, 8, 20, 60] {
            assert_eq!(
                v.liveness(t0 + secs(t)),
                Some(Liveness::Unknown(Blind::Offline)),
                "{t} s"
            );
            assert_eq!(
                v.arbiter(t0 + secs(t)),
                ArbiterLiveness::Unknown(Blind::Offline),
                "{t} s"
            );
        }

        // Back at 60 s: unknown until a status arrives, or for the grace ...
        v.connection(true, t0 + secs(60));
        assert_eq!(
            v.liveness(t0 + secs(66)),
            Some(Liveness::Unknown(Blind::Reconnected))
        );
        assert_eq!(
            v.arbiter(t0 + secs(66)),
            ArbiterLiveness::Unknown(Blind::Reconnected)
        );
        // ... then silence counts from the reconnection, not from the last status.
        assert_eq!(
            v.liveness(t0 + secs(67)),
            Some(Liveness::Stalled { silent: secs(7) })
        );
        assert_eq!(
            v.arbiter(t0 + secs(67)),
            ArbiterLiveness::Thinking { queued: 0 }
        );
        assert_eq!(
            v.liveness(t0 + secs(75)),
            Some(Liveness::Lost { silent: secs(15) })
        );

        // A status after a reconnection ends the blindness at once, for its sender only.
        v.connection(false, t0 + secs(80));
        v.connection(true, t0 + secs(81));
        v.orchestrator(orch("o1", OrchestratorState::Waiting), t0 + secs(82));
        assert_eq!(v.liveness(t0 + secs(82)), Some(Liveness::Waiting));
        assert_eq!(
            v.arbiter(t0 + secs(82)),
            ArbiterLiveness::Unknown(Blind::Reconnected)
        );

        // A worker that said it stopped has stopped, heard or not.
        v.orchestrator(orch("o1", OrchestratorState::Stopped), t0 + secs(83));
        v.connection(false, t0 + secs(84));
        assert_eq!(v.liveness(t0 + secs(90)), Some(Liveness::Stopped));
    }

    #[test]
    fn before_any_connection_nothing_is_known() {
        let t0 = Instant::now();
        let mut v = Vitals::new("s");
        assert_eq!(v.arbiter_pct(), None);
        v.connection(false, t0);
        assert_eq!(v.arbiter(t0), ArbiterLiveness::Unknown(Blind::Offline));
        assert_eq!(v.liveness(t0), None, "no Orchestrator known to be active");
    }

    #[test]
    fn older_copies_do_not_replace_newer_ones() {
        let t0 = Instant::now();
        let mut v = Vitals::new("s");
        let newer = orch("o1", OrchestratorState::Working);
        let mut older = newer.clone();
        older.at = newer.at - Span::seconds(1);
        older.tool_count = 3;
        assert!(v.orchestrator(newer, t0));
        assert!(!v.orchestrator(older, t0));
        let mut other = orch("o9", OrchestratorState::Working);
        other.session_id = "another".into();
        assert!(!v.orchestrator(other, t0), "another session's Orchestrator");

        v.session(session(SessionState::Idle, Some(("o1", 1))), t0);
        assert_eq!(v.active_status().unwrap().tool_count, 12);
        let mut stale = session(SessionState::Thinking, None);
        stale.at -= Span::seconds(5);
        assert!(!v.session(stale, t0));
        assert_eq!(v.active_number(), Some(1));
    }

    #[test]
    fn stopped_orchestrators_are_forgotten_once_inactive() {
        let t0 = Instant::now();
        let mut v = Vitals::new("s");
        v.session(session(SessionState::Idle, Some(("o1", 1))), t0);
        v.orchestrator(orch("o1", OrchestratorState::Stopped), t0);
        assert_eq!(v.liveness(t0 + secs(60)), Some(Liveness::Stopped));
        v.session(session(SessionState::Idle, None), t0);
        assert_eq!(v.liveness(t0), None);
        assert!(v.orchestrators.is_empty());
    }

    #[test]
    fn a_stored_status_claims_nothing_until_a_heartbeat() {
        let t0 = Instant::now();
        // The bucket says thinking, as of a minute ago (its last change).
        let mut v = Vitals::new("s");
        let mut stored = session(SessionState::Thinking, None);
        stored.at -= Span::seconds(60);
        assert!(v.stored_session(stored.clone(), secs(60), t0));
        for t in [0, 2, 6] {
            assert_eq!(
                v.arbiter(t0 + secs(t)),
                ArbiterLiveness::Unknown(Blind::Attached),
                "{t} s"
            );
        }
        // No heartbeat in three: its silence counts from its `at`.
        assert_eq!(
            v.arbiter(t0 + secs(7)),
            ArbiterLiveness::Lost { silent: secs(67) }
        );

        // A heartbeat (a newer `at`) ends the doubt at once.
        let mut v = Vitals::new("s");
        v.stored_session(stored.clone(), secs(60), t0);
        assert!(v.session(session(SessionState::Thinking, None), t0 + secs(1)));
        assert_eq!(
            v.arbiter(t0 + secs(1)),
            ArbiterLiveness::Thinking { queued: 0 }
        );
        assert_eq!(
            v.arbiter(t0 + secs(16)),
            ArbiterLiveness::Lost { silent: secs(15) }
        );

        // A fresh stored status whose coordinator died: thinking after the
        // grace only while it is younger than the lost threshold.
        let mut v = Vitals::new("s");
        v.stored_session(session(SessionState::Thinking, None), secs(1), t0);
        assert_eq!(
            v.arbiter(t0 + secs(7)),
            ArbiterLiveness::Thinking { queued: 0 }
        );
        assert_eq!(
            v.arbiter(t0 + secs(14)),
            ArbiterLiveness::Lost { silent: secs(15) }
        );

        // An idle stored status claims nothing either way.
        let mut v = Vitals::new("s");
        let mut idle = session(SessionState::Idle, None);
        idle.at -= Span::seconds(600);
        v.stored_session(idle, secs(600), t0);
        assert_eq!(v.arbiter(t0), ArbiterLiveness::Idle);
        assert_eq!(v.arbiter(t0 + secs(60)), ArbiterLiveness::Idle);
    }

    #[test]
    fn the_arbiter_is_idle_thinking_or_lost() {
        let t0 = Instant::now();
        let mut v = Vitals::new("s");
        assert_eq!(v.arbiter(t0), ArbiterLiveness::Idle);
        let mut thinking = session(SessionState::Thinking, None);
        thinking.queued = 2;
        v.session(thinking, t0);
        assert_eq!(
            v.arbiter(t0 + secs(14)),
            ArbiterLiveness::Thinking { queued: 2 }
        );
        assert_eq!(
            v.arbiter(t0 + secs(20)),
            ArbiterLiveness::Lost { silent: secs(20) }
        );
        v.session(session(SessionState::Idle, None), t0 + secs(20));
        assert_eq!(v.arbiter(t0 + secs(60)), ArbiterLiveness::Idle);
        assert_eq!(v.next_number(), 2);
        assert_eq!(v.arbiter_pct(), Some(18.0));
    }
}
