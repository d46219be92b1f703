//! The zero-latency model. It decides every reply from the request alone and
//! times the hops as requests arrive at it:
//!
//! - Arbiter (`bench-arbiter`): a session's first message names it and its
//!   kind. `chat <id>`: always speaks to the human. `start <id>`: summons an
//!   Orchestrator (brief `brief <id>`), then relays `Human: tick k` to it as
//!   `relay k` and answers `Orchestrator I: done k` with `ok k`. `loop <id>`:
//!   after the summons, answers `ready`/`done k` with `relay k+1` while the
//!   loop runs (the saturation run).
//!   `chain <id>`: summons `chain-brief <id> 1`, and on each report that
//!   carries a handoff packet summons the next generation until
//!   [`Recorder::chain_generations`], then releases (the handoff phase).
//!   `team <id>`, `<id>` = `tm<N>-<i>`: summons a parallel team of N
//!   members (sub-briefs `team-brief <id> k`), and releases it once their
//!   reports come in, in one input, it relays `relay 1` to member 1 (the
//!   whole team live) and releases the team on `team done` (the teams
//!   phase). `tm1-<i>` is a solo Orchestrator, for comparison.
//!   `crew <id>`: summons a parallel team of three and, once their reports
//!   come in, counts the session ready and leaves the team waiting (a
//!   level's teams).
//! - Orchestrator (`bench-orch`): its brief → `ready`; `relay k` → `done k`;
//!   `work` → a reply held at a gate (an Orchestrator with a model call open);
//!   `chain-brief <id> g` → a final report with generation g's packet.
//!
//! Hop 1 is a tick's intended send time → the Arbiter request that carries
//! it; hop 2 is the `relay k` reply handed back → the Orchestrator request
//! that carries it; hop 3 is the `done k` reply handed back → the Arbiter
//! request that carries it. A request arrives when the mock has read its
//! body, before the mock parses it (that is the model's time).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use arbiter_tests::{Gate, MockReply, RecordedRequest};
use serde_json::json;

use crate::hist::Latency;

pub const ARBITER_MODEL: &str = "bench-arbiter";
pub const ORCH_MODEL: &str = "bench-orch";

/// When each session sends its ticks: session `i` sends tick `k` at
/// `t0 + (k * sessions + i) * period / sessions`, whether or not earlier
/// ones were answered (open loop).
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub t0: Instant,
    pub sessions: u32,
    pub period: Duration,
    /// Ticks one session takes before the next session of its slot takes
    /// over, so transcripts stay the length of a real conversation.
    pub ticks_per_session: u64,
    /// Ticks intended in `[record_from, record_until)` are measured.
    pub record_from: Instant,
    pub record_until: Instant,
}

impl Schedule {
    pub fn intended(&self, session: u32, tick: u64) -> Instant {
        let slot = u128::from(tick) * u128::from(self.sessions) + u128::from(session);
        let nanos = slot * self.period.as_nanos() / u128::from(self.sessions.max(1));
        self.t0 + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The session of `slot` that sends tick `tick`.
    pub fn session(&self, prefix: &str, slot: u32, tick: u64) -> String {
        session_id(prefix, tick / self.ticks_per_session.max(1), slot)
    }

    /// Sessions each slot needs to send every tick up to `record_until`.
    pub fn generations(&self) -> u64 {
        let span = self.record_until.saturating_duration_since(self.t0);
        let ticks = (span.as_nanos() / self.period.as_nanos().max(1)) as u64 + 1;
        ticks.div_ceil(self.ticks_per_session.max(1))
    }

    fn measured(&self, session: u32, tick: u64) -> bool {
        let at = self.intended(session, tick);
        session < self.sessions && at >= self.record_from && at < self.record_until
    }
}

/// The "hop" of a [`HopSample`] that is an Orchestrator's start.
pub const START: usize = 3;

/// One hop of one tick (or one start), kept for the anatomy.
#[derive(Debug, Clone, Copy)]
pub struct HopSample {
    pub hop: usize,
    pub from: Instant,
    pub to: Instant,
}

/// The hop and start-up latencies measured so far.
pub struct Measured {
    pub hops: [Latency; 3],
    /// Summons reply handed back → the Orchestrator's first request.
    pub start_from_reply: Latency,
    /// Summons seen on NATS → the Orchestrator's first request.
    pub start_from_publish: Latency,
    /// Arbiter requests that carried more than one tick (coalesced by design).
    pub coalesced: u64,
    pub samples: Vec<HopSample>,
    /// Handoff chains: the predecessor's report handed back → the
    /// successor's first request.
    pub handoff_gap: Latency,
    /// Each chain session's Arbiter requests: the size of their messages in
    /// bytes, in order.
    pub arbiter_sizes: HashMap<String, Vec<usize>>,
    /// Bytes of each packet handed on.
    pub packet_bytes: Vec<usize>,
    /// Teams: the parallel summons handed back → the last member's first
    /// request, by team size.
    pub team_start: std::collections::BTreeMap<u32, Latency>,
    /// Teams: the Arbiter's words to member 1 handed back → its request,
    /// with the whole team live, by team size (1: a solo Orchestrator).
    pub team_hop: std::collections::BTreeMap<u32, Latency>,
}

impl Measured {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            hops: [Latency::new()?, Latency::new()?, Latency::new()?],
            start_from_reply: Latency::new()?,
            start_from_publish: Latency::new()?,
            coalesced: 0,
            samples: Vec::new(),
            handoff_gap: Latency::new()?,
            arbiter_sizes: HashMap::new(),
            packet_bytes: Vec::new(),
            team_start: std::collections::BTreeMap::new(),
            team_hop: std::collections::BTreeMap::new(),
        })
    }
}

struct State {
    schedule: Option<Schedule>,
    keep_samples: bool,
    relayed: HashMap<(u32, u64), Instant>,
    done: HashMap<(u32, u64), Instant>,
    summon_replied: HashMap<String, Instant>,
    summon_seen: HashMap<String, Instant>,
    /// Chain session → when its last report (with a packet) was handed back.
    reported: HashMap<String, Instant>,
    /// Team session → when its parallel summons was handed back, and the
    /// members whose first request has come.
    teams: HashMap<String, (Instant, u32)>,
    /// Team session → when the Arbiter's words to member 1 were handed back.
    team_relayed: HashMap<String, Instant>,
    measured: Measured,
}

/// Shared by the mock's responder and the benchmark phases.
pub struct Recorder {
    state: Arc<Mutex<State>>,
    /// How long every model reply waits before it leaves (µs; 0: none),
    /// as a real model takes time; hops then start when the reply leaves.
    model_delay_us: AtomicU64,
    gate: Mutex<Gate>,
    pub arbiter_requests: AtomicU64,
    pub orch_requests: AtomicU64,
    /// Sessions whose Arbiter has heard its Orchestrator's `ready`.
    pub ready: AtomicU64,
    /// Orchestrator model calls held at the gate.
    pub held: AtomicU64,
    /// Whether `loop` sessions keep ping-ponging.
    pub looping: AtomicBool,
    /// Exchanges a `loop` session makes before it releases its Orchestrator and ends.
    pub exchanges: AtomicU64,
    /// `loop` and `chain` sessions that have ended.
    pub finished: AtomicU64,
    /// Orchestrator generations a `chain` session runs.
    pub chain_generations: AtomicU64,
}

impl Recorder {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            model_delay_us: AtomicU64::new(0),
            state: Arc::new(Mutex::new(State {
                schedule: None,
                keep_samples: false,
                relayed: HashMap::new(),
                done: HashMap::new(),
                summon_replied: HashMap::new(),
                summon_seen: HashMap::new(),
                reported: HashMap::new(),
                teams: HashMap::new(),
                team_relayed: HashMap::new(),
                measured: Measured::new()?,
            })),
            gate: Mutex::new(Gate::new()),
            arbiter_requests: AtomicU64::new(0),
            orch_requests: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            held: AtomicU64::new(0),
            looping: AtomicBool::new(false),
            exchanges: AtomicU64::new(u64::MAX),
            finished: AtomicU64::new(0),
            chain_generations: AtomicU64::new(10),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every model reply from now on waits `delay` before it leaves.
    pub fn set_model_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.model_delay_us.store(us, Ordering::SeqCst);
    }

    fn model_delay(&self) -> Option<Duration> {
        match self.model_delay_us.load(Ordering::SeqCst) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// `reply`, with `stamp` run on the recorder's state when it is handed
    /// back: now, or (with a model delay) when the mock lets it go after the
    /// delay, so that the next hop starts then and not before the delay.
    fn stamped(
        &self,
        reply: MockReply,
        stamp: impl Fn(&mut State, Instant) + Send + Sync + 'static,
    ) -> MockReply {
        if self.model_delay().is_none() {
            stamp(&mut self.lock(), Instant::now());
            return reply;
        }
        let state = self.state.clone();
        reply.on_release(move || {
            let now = Instant::now();
            stamp(
                &mut state.lock().unwrap_or_else(PoisonError::into_inner),
                now,
            );
        })
    }

    /// Forgets everything: a new phase begins. Held replies are let go.
    pub fn reset(&self) -> anyhow::Result<()> {
        let mut st = self.lock();
        st.schedule = None;
        st.keep_samples = false;
        st.relayed.clear();
        st.done.clear();
        st.summon_replied.clear();
        st.summon_seen.clear();
        st.reported.clear();
        st.teams.clear();
        st.team_relayed.clear();
        st.measured = Measured::new()?;
        drop(st);
        let mut gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        gate.open();
        *gate = Gate::new();
        self.ready.store(0, Ordering::SeqCst);
        self.held.store(0, Ordering::SeqCst);
        self.looping.store(false, Ordering::SeqCst);
        self.exchanges.store(u64::MAX, Ordering::SeqCst);
        self.finished.store(0, Ordering::SeqCst);
        Ok(())
    }

    pub fn set_schedule(&self, schedule: Schedule) {
        self.lock().schedule = Some(schedule);
    }

    /// Keeps every hop (and start) of every measured tick, for the anatomy.
    pub fn keep_samples(&self) {
        self.lock().keep_samples = true;
    }

    /// Takes what was measured, leaving empty histograms behind.
    pub fn take(&self) -> anyhow::Result<Measured> {
        let mut st = self.lock();
        Ok(std::mem::replace(&mut st.measured, Measured::new()?))
    }

    /// Lets every held Orchestrator reply go.
    pub fn open_gate(&self) {
        self.gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open();
    }

    pub fn requests(&self) -> u64 {
        self.arbiter_requests.load(Ordering::SeqCst) + self.orch_requests.load(Ordering::SeqCst)
    }

    /// A summons for `session_id` was seen on NATS.
    pub fn summon_seen(&self, session_id: String, at: Instant) {
        self.lock().summon_seen.insert(session_id, at);
    }

    /// The mock's responder. It runs once the mock has read and parsed a
    /// request; the request arrived when its body had been read in full,
    /// before the mock's own parsing, as a model server has it then.
    pub fn respond(&self, request: &RecordedRequest) -> Option<MockReply> {
        let arrived = request.arrived;
        let reply = match request.model() {
            ARBITER_MODEL => self.arbiter(request, arrived),
            ORCH_MODEL => self.orchestrator(request, arrived),
            _ => return None,
        };
        Some(match self.model_delay() {
            Some(delay) => reply.delay(delay),
            None => reply,
        })
    }

    fn arbiter(&self, request: &RecordedRequest, arrived: Instant) -> MockReply {
        self.arbiter_requests.fetch_add(1, Ordering::Relaxed);
        let first = request.first_user_text();
        let (kind, session) = first.split_once(' ').unwrap_or((first.as_str(), ""));
        if kind == "chat" {
            return arbiter("address_human", "noted");
        }
        if kind == "chain" {
            return self.chain_arbiter(session, request);
        }
        if kind == "team" {
            return self.team_arbiter(session, request);
        }
        if kind == "crew" {
            return self.crew_arbiter(session, request);
        }
        if request.messages().len() == 1 {
            let reply = arbiter("summon_orchestrator", &format!("brief {session}"));
            let session = session.to_owned();
            return self.stamped(reply, move |st, now| {
                st.summon_replied.insert(session.clone(), now);
            });
        }
        let index = session_index(session);
        let last = request.last_user_text();
        let ticks: Vec<u64> = numbers_after(&last, "Human: tick ").collect();
        let dones: Vec<u64> = numbers_after(&last, "done ").collect();
        {
            let mut st = self.lock();
            let st = &mut *st;
            for &k in &dones {
                if let Some(from) = st.done.remove(&(index, k)) {
                    record(&mut st.measured, st.keep_samples, 2, from, arrived);
                }
            }
            if let Some(schedule) = st.schedule {
                for &k in &ticks {
                    if schedule.measured(index, k) {
                        let from = schedule.intended(index, k);
                        record(&mut st.measured, st.keep_samples, 0, from, arrived);
                    }
                }
            }
            if ticks.len() > 1 {
                st.measured.coalesced += 1;
            }
        }
        if let Some(&k) = ticks.iter().max() {
            let reply = arbiter("address_orchestrator", &format!("relay {k}"));
            return self.stamped(reply, move |st, now| {
                if st.schedule.is_some_and(|s| s.measured(index, k)) {
                    st.relayed.insert((index, k), now);
                }
            });
        }
        if last.contains("Human: work") {
            return arbiter("address_orchestrator", "work");
        }
        let ready = last.contains("Orchestrator I: ready");
        if ready {
            self.ready.fetch_add(1, Ordering::SeqCst);
        }
        if kind == "loop" {
            let next = dones.iter().max().copied().unwrap_or(0) + 1;
            if !self.looping.load(Ordering::SeqCst) {
                return arbiter("address_human", "stopped");
            }
            if next > self.exchanges.load(Ordering::SeqCst) {
                self.finished.fetch_add(1, Ordering::SeqCst);
                return arbiter("release_orchestrators", "finished");
            }
            return arbiter("address_orchestrator", &format!("relay {next}"));
        }
        match dones.iter().max() {
            Some(k) => arbiter("address_human", &format!("ok {k}")),
            None if ready => arbiter("address_human", "ready"),
            None => arbiter("address_human", "ok"),
        }
    }

    fn orchestrator(&self, request: &RecordedRequest, arrived: Instant) -> MockReply {
        self.orch_requests.fetch_add(1, Ordering::Relaxed);
        // The Claude Code CLI ends a turn with its StructuredOutput tool.
        let cli = request.tool_names().iter().any(|t| t == "StructuredOutput");
        let first = request.first_user_text();
        if let Some(rest) = first.strip_prefix("chain-brief ") {
            return self.chain_orchestrator(rest, cli, arrived);
        }
        // A team member's brief is its sub-brief after the team's preamble.
        if let Some((_, rest)) = first.split_once("team-brief ") {
            return self.team_member(rest, cli, arrived);
        }
        let session = first.strip_prefix("brief ").unwrap_or(&first);
        if !request.messages().iter().any(|m| m["role"] == "assistant") {
            let mut st = self.lock();
            let st = &mut *st;
            if let Some(from) = st.summon_replied.remove(session) {
                st.measured
                    .start_from_reply
                    .record(arrived.saturating_duration_since(from));
                if st.keep_samples {
                    st.measured.samples.push(HopSample {
                        hop: START,
                        from,
                        to: arrived,
                    });
                }
            }
            if let Some(from) = st.summon_seen.remove(session) {
                st.measured
                    .start_from_publish
                    .record(arrived.saturating_duration_since(from));
            }
            return orchestrator(cli, "ready");
        }
        let index = session_index(session);
        let last = request.last_user_text();
        let relays: Vec<u64> = numbers_after(&last, "relay ").collect();
        if let Some(&k) = relays.iter().max() {
            let reply = orchestrator(cli, &format!("done {k}"));
            {
                let mut st = self.lock();
                let st = &mut *st;
                for &k in &relays {
                    if let Some(from) = st.relayed.remove(&(index, k)) {
                        record(&mut st.measured, st.keep_samples, 1, from, arrived);
                    }
                }
            }
            return self.stamped(reply, move |st, now| {
                if st.schedule.is_some_and(|s| s.measured(index, k)) {
                    st.done.insert((index, k), now);
                }
            });
        }
        if last.contains("work") {
            self.held.fetch_add(1, Ordering::SeqCst);
            let gate = self
                .gate
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            return orchestrator(cli, "worked").gated(gate);
        }
        orchestrator(cli, "ok")
    }
}

impl Recorder {
    /// A `chain` session's Arbiter: the first summons, then the next
    /// generation after each report with a packet, then the release.
    fn chain_arbiter(&self, session: &str, request: &RecordedRequest) -> MockReply {
        let size = serde_json::to_string(request.messages()).map_or(0, |t| t.len());
        self.lock()
            .measured
            .arbiter_sizes
            .entry(session.to_owned())
            .or_default()
            .push(size);
        if request.messages().len() == 1 {
            return arbiter("summon_orchestrator", &format!("chain-brief {session} 1"));
        }
        let last = request.last_user_text();
        let Some(generation) = numbers_after(&last, "chain report ").max() else {
            return arbiter("address_human", "waiting");
        };
        if generation >= self.chain_generations.load(Ordering::SeqCst) {
            self.finished.fetch_add(1, Ordering::SeqCst);
            return arbiter("release_orchestrators", "finished");
        }
        arbiter(
            "summon_orchestrator",
            &format!("chain-brief {session} {}", generation + 1),
        )
    }

    /// A `chain` Orchestrator (`<session> <generation>` after its brief's
    /// first word): its first request ends its work with a report and the
    /// packet of its generation.
    fn chain_orchestrator(&self, rest: &str, cli: bool, arrived: Instant) -> MockReply {
        let mut words = rest.split_whitespace();
        let session = words.next().unwrap_or_default().to_owned();
        let generation: u64 = words.next().and_then(|g| g.parse().ok()).unwrap_or(1);
        let total = self
            .chain_generations
            .load(Ordering::SeqCst)
            .max(generation);
        let packet = chain_packet(generation, total);
        let output = json!({
            "expects_response": true,
            "message": format!("chain report {generation}"),
            "handoff": packet,
        });
        let reply = if cli {
            MockReply::tool_use("StructuredOutput", output)
        } else {
            MockReply::json(&output)
        };
        let mut st = self.lock();
        let st = &mut *st;
        if generation > 1
            && let Some(from) = st.reported.remove(&session)
        {
            st.measured
                .handoff_gap
                .record(arrived.saturating_duration_since(from));
        }
        st.measured.packet_bytes.push(packet.to_string().len());
        st.reported.insert(session, Instant::now());
        reply
    }
}

impl Recorder {
    /// A `team` session's Arbiter: the parallel summons, then (the team's
    /// reports in one input) the release.
    fn team_arbiter(&self, session: &str, request: &RecordedRequest) -> MockReply {
        let size = team_size(session);
        if request.messages().len() == 1 {
            let reply = if size == 1 {
                arbiter("summon_orchestrator", &format!("team-brief {session} 1"))
            } else {
                let briefs: Vec<String> = (1..=size)
                    .map(|k| format!("team-brief {session} {k}"))
                    .collect();
                MockReply::json(&json!({
                    "intent": "summon_orchestrator",
                    "message": format!("team {session}"),
                    "strategy": "parallel",
                    "briefs": briefs,
                }))
            };
            self.lock()
                .teams
                .insert(session.to_owned(), (Instant::now(), 0));
            return reply;
        }
        let last = request.last_user_text();
        if last.contains("team done") {
            self.finished.fetch_add(1, Ordering::SeqCst);
            return arbiter("release_orchestrators", "finished");
        }
        if last.contains("team report") {
            let reply = if size == 1 {
                arbiter("address_orchestrator", "relay 1")
            } else {
                MockReply::json(&json!({
                    "intent": "address_orchestrator",
                    "message": "relay 1",
                    "members": [1],
                }))
            };
            self.lock()
                .team_relayed
                .insert(session.to_owned(), Instant::now());
            return reply;
        }
        arbiter("address_human", "waiting")
    }

    /// A `crew` session's Arbiter (a level's team): the parallel summons of
    /// three members; once their reports come in it speaks to the human and
    /// counts the session ready, leaving the team waiting (and so parking).
    fn crew_arbiter(&self, session: &str, request: &RecordedRequest) -> MockReply {
        if request.messages().len() == 1 {
            let briefs: Vec<String> = (1..=CREW)
                .map(|k| format!("team-brief {session} {k}"))
                .collect();
            return MockReply::json(&json!({
                "intent": "summon_orchestrator",
                "message": format!("crew {session}"),
                "strategy": "parallel",
                "briefs": briefs,
            }));
        }
        // The first input after the summons carries the reports.
        if request.messages().len() == 3 && request.last_user_text().contains("team report") {
            self.ready.fetch_add(1, Ordering::SeqCst);
        }
        arbiter("address_human", "crew live")
    }

    /// A team member (`<session> <k>` after `team-brief`): its first request
    /// is timed against the summons; it reports at once.
    fn team_member(&self, rest: &str, cli: bool, arrived: Instant) -> MockReply {
        let session = rest.split_whitespace().next().unwrap_or_default();
        let size = team_size(session);
        let relayed = self.lock().team_relayed.remove(session);
        if let Some(from) = relayed {
            // The Arbiter's words to member 1, with the team live.
            let mut st = self.lock();
            if let Ok(latency) = Latency::new() {
                st.measured
                    .team_hop
                    .entry(size)
                    .or_insert(latency)
                    .record(arrived.saturating_duration_since(from));
            }
            return orchestrator(cli, "team done");
        }
        {
            let mut st = self.lock();
            let st = &mut *st;
            if let Some((from, seen)) = st.teams.get_mut(session) {
                *seen += 1;
                if *seen == size {
                    let from = *from;
                    st.teams.remove(session);
                    if let Ok(latency) = Latency::new() {
                        st.measured
                            .team_start
                            .entry(size)
                            .or_insert(latency)
                            .record(arrived.saturating_duration_since(from));
                    }
                }
            }
        }
        orchestrator(cli, &format!("team report {rest}"))
    }
}

/// Members of a level's team (`crew <id>`).
pub const CREW: u32 = 3;

/// The size of team session `tm<N>-<i>`.
fn team_size(session: &str) -> u32 {
    session
        .strip_prefix("tm")
        .and_then(|rest| rest.split('-').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// Generation `g`'s packet out of `total`: items T1..Tg done, the rest open,
/// a decision per generation so far (a packet grows as the work goes on).
fn chain_packet(g: u64, total: u64) -> serde_json::Value {
    json!({
        "done": (1..=g).map(|i| json!({
            "id": format!("T{i}"),
            "what": format!("built part {i} of the task and its tests"),
            "files": [format!("src/part{i}.rs"), format!("tests/part{i}.rs")],
        })).collect::<Vec<_>>(),
        "open": (g + 1..=total).map(|i| json!({
            "id": format!("T{i}"),
            "what": format!("build part {i} of the task and its tests"),
        })).collect::<Vec<_>>(),
        "decisions": (1..=g).map(|i| json!({
            "decision": format!("part {i} keeps the layout of part 1"),
            "why": "one layout across the parts keeps the reviews short",
        })).collect::<Vec<_>>(),
        "questions": [],
        "next_step": format!("Start on T{}.", g + 1),
    })
}

fn record(measured: &mut Measured, keep: bool, hop: usize, from: Instant, to: Instant) {
    measured.hops[hop].record(to.saturating_duration_since(from));
    if keep {
        measured.samples.push(HopSample { hop, from, to });
    }
}

fn arbiter(intent: &str, message: &str) -> MockReply {
    MockReply::json(&json!({"intent": intent, "message": message}))
}

fn orchestrator(cli: bool, message: &str) -> MockReply {
    let output = json!({"expects_response": true, "message": message});
    if cli {
        MockReply::tool_use("StructuredOutput", output)
    } else {
        MockReply::json(&output)
    }
}

/// `<prefix>-g<generation>-<slot>`: the id of a session that sends ticks.
pub fn session_id(prefix: &str, generation: u64, slot: u32) -> String {
    format!("{prefix}-g{generation}-{slot}")
}

/// `l1000-g0-42` → 42.
pub fn session_index(session: &str) -> u32 {
    session
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Every number that directly follows `prefix` in `text`.
fn numbers_after<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = u64> + 'a {
    text.match_indices(prefix).filter_map(move |(at, _)| {
        let rest = &text[at + prefix.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_numbers() {
        let text = "Orchestrator I: done 3\n\nHuman: tick 4\n\nHuman: tick 15";
        assert_eq!(
            numbers_after(text, "Human: tick ").collect::<Vec<_>>(),
            [4, 15]
        );
        assert_eq!(numbers_after(text, "done ").collect::<Vec<_>>(), [3]);
        assert_eq!(session_index("l1000-42"), 42);
        assert_eq!(session_index(&session_id("l1", 3, 7)), 7);
    }

    #[test]
    fn schedule_spreads_sessions_over_the_period() {
        let t0 = Instant::now();
        let s = Schedule {
            t0,
            sessions: 4,
            period: Duration::from_millis(100),
            ticks_per_session: 4,
            record_from: t0,
            record_until: t0 + Duration::from_secs(1),
        };
        assert_eq!(s.intended(1, 0) - t0, Duration::from_millis(25));
        assert_eq!(s.intended(0, 2) - t0, Duration::from_millis(200));
        assert!(s.measured(3, 9));
        assert!(!s.measured(0, 10));
        assert_eq!(s.session("p", 3, 9), "p-g2-3");
        assert_eq!(s.generations(), 3);
    }
}
