//! The Arbiter's own handoff. When the Arbiter's context passes its
//! threshold (a share of its budget, [`crate::Config::arbiter_handoff_pct`]),
//! the coordinator asks it, between turns, for an [`ArbiterPacket`]; it
//! validates the packet (sent back for repair like every structured
//! output) and starts the next Arbiter generation from the system prompt,
//! the packet and the last [`KEEP_EXCHANGES`] exchanges verbatim. An
//! Arbiter that never gives a valid packet is cut over with a packet the
//! coordinator builds from the session's records, and the log says so.
//!
//! The handoff is a stored step: the request is recorded (`pending`) before
//! the model is called, and the new transcript replaces the old one in the
//! same record that logs the handoff, so a coordinator killed in between
//! asks again after a restart, and one killed after it has nothing to redo.
//! Meanwhile the active Orchestrator works on, and what arrives (human
//! lines, Orchestrator output) waits in the session's queue.

use std::sync::Arc;

use arbiter_llm::{LlmError, Message, Request};
use arbiter_protocol::handoff::{Decision, Handoff, OpenItem};
use arbiter_protocol::{
    ActiveLine, ArbiterHandoffEntry, ArbiterPacket, ErrorEntry, GenerationLine, LogBody, Role,
    SystemEntry, orchestrator_name,
};
use serde::{Deserialize, Serialize};

use crate::rules::{Core, Now};
use crate::state::{Turn, TurnRole};
use arbiter_llm::Usage;
use arbiter_protocol::percent;

/// The share of its context budget, in percent, past which the Arbiter
/// hands off (0: never).
pub const DEFAULT_HANDOFF_PCT: u8 = 60;
/// Exchanges (a user message and the Arbiter's reply) the next generation
/// gets verbatim, after the packet.
pub const KEEP_EXCHANGES: usize = 2;
/// Decisions of Orchestrator packets kept for a packet the coordinator builds.
const KEPT_DECISIONS: usize = 20;
/// Characters of the human's first words kept as the goal of a packet the
/// coordinator builds.
const GOAL_CHARS: usize = 2000;

/// The Arbiter's generations, stored with the session's snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Generations {
    /// Handoffs done: the Arbiter at work is generation `handoffs + 1`.
    #[serde(default)]
    pub handoffs: u32,
    /// A handoff asked for and not finished yet: no Arbiter turn starts
    /// until it is (input waits in the queue).
    #[serde(default)]
    pub pending: Option<PendingHandoff>,
    /// Arbiter turns started when the last handoff was done: the next one
    /// waits until the generation has had more turns than it kept, so a
    /// context that stays past the threshold is not handed off every turn.
    #[serde(default)]
    pub since_turn: u64,
    /// The packet the Arbiter at work started from.
    #[serde(default)]
    pub packet: Option<ArbiterPacket>,
    /// One line per Orchestrator that left a packet, from the packets.
    #[serde(default)]
    pub history: Vec<GenerationLine>,
    /// The open items of the latest Orchestrator packet.
    #[serde(default)]
    pub open: Option<Vec<OpenItem>>,
    /// The latest decisions of Orchestrator packets.
    #[serde(default)]
    pub decisions: Vec<Decision>,
}

/// A handoff in progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct PendingHandoff {
    /// The Arbiter's context when it was asked, in tokens.
    pub context_tokens: u64,
}

impl Generations {
    /// The Arbiter generation at work (1 for the first).
    pub(crate) fn generation(&self) -> u32 {
        self.handoffs + 1
    }

    /// Takes what an Orchestrator's packet tells of the work, for a packet
    /// the coordinator may have to build.
    pub(crate) fn note_packet(&mut self, number: u32, packet: &Handoff) {
        let line = format!("{}; next: {}", packet.counts(), one_line(&packet.next_step));
        self.history.retain(|g| g.number != number);
        self.history.push(GenerationLine { number, line });
        self.history.sort_by_key(|g| g.number);
        self.open = Some(packet.open.clone());
        for decision in &packet.decisions {
            if !self.decisions.contains(decision) {
                self.decisions.push(decision.clone());
            }
        }
        let extra = self.decisions.len().saturating_sub(KEPT_DECISIONS);
        self.decisions.drain(..extra);
    }
}

/// What asking the Arbiter for its packet came to.
pub(crate) type Asked = Result<ArbiterPacket, LlmError>;

/// The request for the packet, as the handoff rule decides it: the shell
/// makes it (`session/handoff.rs`), sending back a reply that fails the
/// schema or [`ArbiterPacket::check`] with the reason, at most `repairs`
/// times.
pub(crate) struct HandoffAsk {
    pub(crate) request: Request,
    pub(crate) schema: Arc<serde_json::Value>,
    pub(crate) repairs: u32,
}

impl Core {
    /// The Arbiter's context threshold, in tokens (`None`: never hand off).
    fn handoff_threshold(&self) -> Option<u64> {
        let pct = u64::from(self.config.arbiter_handoff_pct.min(100));
        (pct > 0).then(|| self.config.context_budget * pct / 100)
    }

    /// After a turn: past the threshold, a handoff is asked for (stored
    /// with this step; it runs before the next turn). Not when the last
    /// exchanges the next generation keeps are all there is.
    pub(crate) fn maybe_hand_off(&mut self) {
        let Some(threshold) = self.handoff_threshold() else {
            return;
        };
        if self.state.arbiter.pending.is_some()
            || self.state.context_tokens < threshold
            || self.state.turns <= self.state.arbiter.since_turn + KEEP_EXCHANGES as u64
            || self.transcript.len() <= KEEP_EXCHANGES * 2
            || self.transcript.last().map(|t| t.role) != Some(TurnRole::Assistant)
        {
            return;
        }
        let tokens = self.state.context_tokens;
        self.state.arbiter.pending = Some(PendingHandoff {
            context_tokens: tokens,
        });
        let generation = self.state.arbiter.generation();
        let text = format!(
            "Arbiter, generation {generation}: its context is {:.0} % full (it hands off past \
             {} %). It is asked for its packet, and Arbiter, generation {} takes over from it. \
             What comes meanwhile waits; the Orchestrator at work goes on.",
            percent(tokens, self.config.context_budget),
            self.config.arbiter_handoff_pct,
            generation + 1,
        );
        self.log(LogBody::System(SystemEntry { text }));
    }

    /// Whether a handoff is to run now (none running, no turn in flight,
    /// no hold).
    pub(crate) fn handoff_due(&self) -> bool {
        self.state.arbiter.pending.is_some()
            && !self.state.turn_in_flight
            && self.state.hold.is_none()
    }

    /// Asks the Arbiter for its packet: its transcript, then the request.
    pub(crate) fn handoff_ask(&self) -> HandoffAsk {
        let mut messages: Vec<Message> = Vec::new();
        let ask = self.handoff_request();
        let last = self.transcript.len().saturating_sub(1);
        for (i, turn) in self.transcript.iter().enumerate() {
            messages.push(match turn.role {
                TurnRole::Assistant => Message::assistant(turn.text.clone()),
                // A user turn left unanswered (a failed turn) takes the request with it.
                TurnRole::User if i == last => Message::user(format!("{}\n\n{ask}", turn.text)),
                TurnRole::User => Message::user(turn.text.clone()),
            });
        }
        if self.transcript.last().map(|t| t.role) != Some(TurnRole::User) {
            messages.push(Message::user(ask));
        }
        let schema = Arc::new(arbiter_llm::schema::for_model::<ArbiterPacket>());
        let request = Request {
            system: crate::prompt::arbiter_system_prompt(self.config.model.profile).to_owned(),
            messages: messages.into(),
            tools: Arc::default(),
            output_schema: Some(schema.clone()),
            max_output_tokens: None,
        };
        HandoffAsk {
            request,
            schema,
            repairs: self.config.schema_repairs,
        }
    }

    fn handoff_request(&self) -> String {
        let generation = self.state.arbiter.generation();
        format!(
            "[System: your context is {:.0} % full. Before anything else, write your Arbiter \
             packet. Arbiter, generation {} takes over from it: it gets the system prompt, this \
             packet and your last {KEEP_EXCHANGES} exchanges verbatim, nothing else of this \
             conversation. This reply is one JSON object, not your usual intent and message: \
             `goal` (what the human wants), `preferences` (the human's stated preferences and \
             constraints, as they said them), `decisions` (each with `why`), `orchestrators` \
             (one line per Orchestrator so far: `number`, `line`), `open` (the work that \
             remains, keeping item ids), `active` (the Orchestrator at work: `number`, \
             `doing`; null if none). It goes to no one but your successor.]",
            percent(self.state.context_tokens, self.config.context_budget),
            generation + 1
        )
    }

    /// Takes the packet (or builds one when the Arbiter gave none that is
    /// valid) and starts the next generation; all in the step that stores it.
    /// `usage`: the model requests it made, charged to the Arbiter.
    pub(crate) fn handoff_ended(&mut self, usage: Vec<Option<Usage>>, asked: Asked, now: Now) {
        self.now = now;
        self.charge_arbiter(usage);
        let Some(pending) = self.state.arbiter.pending.take() else {
            return;
        };
        let (packet, built_by_coordinator) = match asked {
            Ok(packet) => (packet, None),
            Err(e) => {
                tracing::warn!(session.id = %self.id, error = %e, "the Arbiter gave no valid packet; the coordinator builds one from the records");
                let error = e.to_wire(Role::Arbiter);
                let why = format!("the Arbiter gave no valid packet: {error}");
                self.log(LogBody::Error(ErrorEntry { error }));
                (self.built_packet(), Some(why))
            }
        };
        let generation = self.state.arbiter.generation() + 1;
        // Its decisions go to the workspace's memory, as an Orchestrator's do.
        self.remember_decisions_of(
            format!("Arbiter, generation {}", generation - 1),
            &packet.decisions,
        );
        let (transcript, kept) = successor_transcript(&self.transcript, &packet, generation);
        self.transcript = transcript;
        self.step.replace_transcript = true;
        let after = self.estimate_context();
        self.state.context_tokens = after;
        self.state.arbiter.handoffs += 1;
        self.state.arbiter.since_turn = self.state.turns;
        self.state.arbiter.packet = Some(packet.clone());
        tracing::info!(session.id = %self.id, generation, before = pending.context_tokens, after, built = built_by_coordinator.is_some(), "Arbiter handed off");
        self.log(LogBody::ArbiterHandoff(ArbiterHandoffEntry {
            generation,
            packet: Box::new(packet),
            built_by_coordinator,
            kept_exchanges: u32::try_from(kept).unwrap_or(u32::MAX),
            context_tokens_before: pending.context_tokens,
            context_tokens_after: after,
        }));
    }

    /// The new generation's context until its first turn reports the
    /// model's figure: its system prompt, output schema (in the flat form
    /// the strict APIs are sent; the union repeats the shared fields per
    /// member) and transcript, at four bytes a token.
    fn estimate_context(&self) -> u64 {
        let mut schema = serde_json::Value::clone(&self.output_schema);
        arbiter_llm::schema::flatten_root_union(&mut schema);
        let bytes = crate::prompt::arbiter_system_prompt(self.config.model.profile).len()
            + schema.to_string().len()
            + self.transcript.iter().map(|t| t.text.len()).sum::<usize>();
        (bytes as u64).div_ceil(4)
    }

    /// A packet from the session's records, for an Arbiter that gave no
    /// valid one: the last packet's goal, preferences and decisions (the
    /// human's first words as the goal in the first generation), the
    /// lines and open items of the Orchestrators' packets, and the
    /// Orchestrator at work.
    pub(crate) fn built_packet(&self) -> ArbiterPacket {
        let prior = self.state.arbiter.packet.clone();
        let goal = match &prior {
            Some(p) => p.goal.clone(),
            None => self
                .transcript
                .iter()
                .find(|t| t.role == TurnRole::User)
                .map(|t| t.text.chars().take(GOAL_CHARS).collect())
                .unwrap_or_default(),
        };
        let goal = if goal.trim().is_empty() {
            "(not recorded)".to_owned()
        } else {
            goal
        };
        let mut preferences = prior
            .as_ref()
            .map(|p| p.preferences.clone())
            .unwrap_or_default();
        // The human's words tagged in the transcript (said while an Orchestrator was at work).
        for turn in self.transcript.iter().filter(|t| t.role == TurnRole::User) {
            for part in turn.text.split("\n\n") {
                if let Some(said) = part.strip_prefix("Human: ") {
                    let said = format!("The human said: {said}");
                    if !preferences.contains(&said) {
                        preferences.push(said);
                    }
                }
            }
        }
        let mut decisions = prior
            .as_ref()
            .map(|p| p.decisions.clone())
            .unwrap_or_default();
        for decision in &self.state.arbiter.decisions {
            if !decisions.contains(decision) {
                decisions.push(decision.clone());
            }
        }
        let mut orchestrators: Vec<GenerationLine> = prior
            .as_ref()
            .map(|p| p.orchestrators.clone())
            .unwrap_or_default();
        for line in &self.state.arbiter.history {
            orchestrators.retain(|g| g.number != line.number);
            orchestrators.push(line.clone());
        }
        for number in 1..=self.state.summoned {
            if !orchestrators.iter().any(|g| g.number == number) {
                let line = if self.state.team.iter().any(|a| a.number == number) {
                    "at work; no handoff packet yet".to_owned()
                } else {
                    "ended without a handoff packet".to_owned()
                };
                orchestrators.push(GenerationLine { number, line });
            }
        }
        orchestrators.sort_by_key(|g| g.number);
        let open = match &self.state.arbiter.open {
            Some(open) => open.clone(),
            None => prior.as_ref().map(|p| p.open.clone()).unwrap_or_default(),
        };
        let active = self.state.team.first().map(|a| ActiveLine {
            number: a.number,
            doing: format!(
                "{} is at work on the last brief (the coordinator built this packet, so \
                 what it does is not written here)",
                orchestrator_name(a.number)
            ),
        });
        ArbiterPacket {
            goal,
            preferences,
            decisions,
            orchestrators,
            open,
            active,
        }
    }
}

/// The next generation's transcript: the packet, then the last
/// [`KEEP_EXCHANGES`] exchanges verbatim (the packet goes first in the
/// first kept user message, so user and assistant turns still alternate).
/// Also returns how many exchanges were kept.
fn successor_transcript(
    transcript: &[Turn],
    packet: &ArbiterPacket,
    generation: u32,
) -> (Vec<Turn>, usize) {
    let header = packet.for_successor(generation);
    // The kept turns start at a user turn.
    let mut start = transcript.len().saturating_sub(KEEP_EXCHANGES * 2);
    while start < transcript.len() && transcript[start].role != TurnRole::User {
        start += 1;
    }
    let kept = &transcript[start..];
    let exchanges = kept
        .iter()
        .filter(|t| t.role == TurnRole::Assistant)
        .count();
    let mut next = Vec::with_capacity(kept.len().max(1));
    match kept.split_first() {
        Some((first, rest)) => {
            next.push(Turn {
                role: TurnRole::User,
                text: format!(
                    "{header}\n\n[Its last {exchanges} exchange(s) follow, verbatim.]\n\n{}",
                    first.text
                ),
            });
            next.extend(rest.iter().cloned());
        }
        None => next.push(Turn {
            role: TurnRole::User,
            text: header,
        }),
    }
    (next, exchanges)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: TurnRole, text: &str) -> Turn {
        Turn {
            role,
            text: text.into(),
        }
    }

    fn packet() -> ArbiterPacket {
        ArbiterPacket {
            goal: "g".into(),
            preferences: vec![],
            decisions: vec![],
            orchestrators: vec![],
            open: vec![],
            active: None,
        }
    }

    #[test]
    fn the_successor_gets_the_packet_then_the_last_exchanges_verbatim() {
        let transcript: Vec<Turn> = (1..=5)
            .flat_map(|i| {
                [
                    turn(TurnRole::User, &format!("u{i}")),
                    turn(TurnRole::Assistant, &format!("a{i}")),
                ]
            })
            .collect();
        let (next, kept) = successor_transcript(&transcript, &packet(), 2);
        assert_eq!(kept, KEEP_EXCHANGES);
        assert_eq!(next.len(), KEEP_EXCHANGES * 2);
        assert!(next[0].text.starts_with("[You are Arbiter generation 2."));
        assert!(next[0].text.ends_with("\n\nu4"), "{}", next[0].text);
        assert_eq!(next[1..], transcript[7..]);
    }

    #[test]
    fn an_orchestrator_packet_gives_one_line_and_the_open_items() {
        let mut g = Generations::default();
        let packet: Handoff = serde_json::from_value(serde_json::json!({
            "done": [{"id": "T1", "what": "x", "files": []}],
            "open": [{"id": "T2", "what": "y"}],
            "decisions": [{"decision": "d", "why": "w"}],
            "questions": [], "next_step": "Do\nT2."}))
        .unwrap();
        g.note_packet(1, &packet);
        g.note_packet(1, &packet);
        assert_eq!(g.history.len(), 1);
        assert!(
            g.history[0].line.ends_with("next: Do T2."),
            "{}",
            g.history[0].line
        );
        assert_eq!(g.open.as_ref().unwrap()[0].id, "T2");
        assert_eq!(g.decisions.len(), 1);
    }
}
