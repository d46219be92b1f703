//! Messages of a conversation: what the human sends, the log every console
//! replays, and the live session status.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ArbiterIntent, Evidence, WireError};

/// `session.<session_id>.human`: one message typed by the human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HumanMessage {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    /// Unique per message; also the `Nats-Msg-Id`, so a resend is not delivered twice.
    pub message_id: String,
    pub text: String,
    pub sent_at: DateTime<Utc>,
    /// A command instead of words for the Arbiter (`/stop`); absent for a
    /// plain message. Readers that do not know the field see the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<HumanCommand>,
    /// A change to one of the session's budget caps (`/budget session $5`)
    /// instead of words for the Arbiter; absent for a plain message. A
    /// coordinator that does not know the field takes `text` as words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::BudgetChange>,
    /// The workspace (project) the console works in: its memory is put in
    /// the session's first prompt, and what the session records is kept
    /// under it (see `memory.rs`). The first message that carries one fixes
    /// the session's; absent: the session has no memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The human's answer to a waiting approval (`/allow 3`, `/deny 3 use a
    /// branch`) instead of words for the Arbiter. Only a console can send
    /// it: the human subject is a console's alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::ApprovalReply>,
    /// The session's policy from now on (`/policy mode ask`), for the
    /// Orchestrators summoned after it: it may only tighten each worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::Policy>,
    /// Rewind the session's workspace to one of its checkpoints (`/rewind
    /// 1a2b3c4d5e6f`, docs/checkpoints.md): the next Orchestrator summoned
    /// starts from it. With `command: stop`, the work is stopped first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind: Option<Rewind>,
}

/// The human's `/rewind`: the checkpoint's full commit id (40 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Rewind {
    pub checkpoint: String,
}

impl Rewind {
    /// Whether `id` is a full commit id as a rewind names it: 40 lowercase
    /// hex digits.
    pub fn is_commit(id: &str) -> bool {
        id.len() == 40
            && id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

/// What a human can tell the session itself, rather than the Arbiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HumanCommand {
    /// Stop the session's work: abandon the Arbiter's turn, cancel the active
    /// Orchestrator, hold everything until the human writes again.
    Stop,
}

/// `session.<session_id>.log`: one entry of the conversation, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogEntry {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    /// 1, 2, 3… without gaps within the session.
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub body: LogBody,
}

impl LogEntry {
    /// The `seq` of a log message that does not decode as an entry, when
    /// its JSON still has one: a reader counts it as seen rather than wait
    /// for it.
    pub fn readable_seq(payload: &[u8]) -> Option<u64> {
        serde_json::from_slice::<serde_json::Value>(payload)
            .ok()?
            .get("seq")?
            .as_u64()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LogBody {
    /// The human spoke.
    Human(HumanEntry),
    /// The Arbiter spoke to the human.
    Arbiter(ArbiterEntry),
    /// The Arbiter spoke to its Orchestrator.
    ArbiterToOrchestrator(ArbiterToOrchestratorEntry),
    /// An Orchestrator spoke; `expects_response: false` is a note.
    Orchestrator(OrchestratorEntry),
    /// The Arbiter's private thoughts; consoles hide them by default.
    Musing(MusingEntry),
    /// A new Orchestrator was summoned with this brief.
    Summoned(SummonedEntry),
    /// Orchestrators were released.
    Released(ReleasedEntry),
    /// The system told the Arbiter something (e.g. that an intent could not be carried out).
    System(SystemEntry),
    /// Something failed; the session goes on.
    Error(ErrorEntry),
    /// The Arbiter's context passed its threshold: a new Arbiter generation
    /// took over from this packet (and the last few exchanges).
    ArbiterHandoff(ArbiterHandoffEntry),
    /// The audit trail of a summons: the strategy chosen, the human's
    /// directive (verbatim and as read), and whether it went ahead or why not.
    Strategy(StrategyEntry),
    /// A consensus team's verdicts, tallied: the decisions, how many members
    /// gave each, and every member's verdict. The Arbiter decides, not the tally.
    Consensus(ConsensusEntry),
    /// A step of the coordinator's that said nothing to show: the entry
    /// only carries the step's record (its `step` field). Its `seq` is the
    /// last shown entry's, not a new one. Consoles skip it.
    Step(StepEntry),
    /// A tool call waits for the human's approval (see docs/approvals.md).
    ApprovalAsked(crate::ApprovalAskedEntry),
    /// An approval was answered; stored as the Orchestrator's input.
    ApprovalAnswered(crate::ApprovalAnsweredEntry),
    /// The human rewound the workspace to a checkpoint: the next
    /// Orchestrator summoned starts from it (docs/checkpoints.md).
    Rewound(RewoundEntry),
}

/// The body of a [`LogBody::Rewound`] entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RewoundEntry {
    /// The checkpoint's commit id.
    pub checkpoint: String,
    /// The console that asked.
    pub console: String,
}

/// The body of a [`LogBody::Step`] entry: empty, the record is beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepEntry {}

/// The tally of a consensus team's verdicts (decisions grouped trimmed and
/// ignoring case). A member that failed, reported no verdict, or had not
/// reported when the team's reports went on counts as "no verdict".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConsensusEntry {
    /// The team's generation (II for II.1, II.2…).
    pub number: u32,
    /// Members summoned.
    pub members: u32,
    pub outcome: ConsensusOutcome,
    /// Each decision and the members that gave it, most votes first (then
    /// by the first member that gave it).
    pub decisions: Vec<DecisionVotes>,
    /// The members without a verdict, in member order.
    #[serde(default)]
    pub no_verdict: Vec<u32>,
    /// Every member's verdict, in member order.
    pub verdicts: Vec<MemberVerdict>,
}

/// How a consensus team's verdicts fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConsensusOutcome {
    /// Every member gave the same decision.
    Unanimous,
    /// One decision has the most votes, but not every member gave it.
    Split,
    /// Two or more decisions share the most votes.
    Tie,
    /// No member gave a verdict.
    NoVerdict,
}

/// One decision of a tally and the members that gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionVotes {
    /// As the first member to give it wrote it (trimmed).
    pub decision: String,
    pub members: Vec<u32>,
}

/// One member's verdict, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemberVerdict {
    pub member: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<crate::Verdict>,
    /// Why there is no verdict: `failed`, `no_verdict` (it reported without
    /// one) or `not_reported`; absent with a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<MissingVerdict>,
}

/// Why a consensus member has no verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissingVerdict {
    /// It stopped before it reported.
    Failed,
    /// It reported without a verdict.
    NoVerdict,
    /// It had not reported when the team's reports went on.
    NotReported,
}

impl ConsensusEntry {
    /// The tally in one line, as the console shows it and the Arbiter reads
    /// it: `split 2–1: "ship" (II.1, II.3) vs "hold" (II.2)`.
    pub fn summary(&self) -> String {
        let names = |members: &[u32]| {
            members
                .iter()
                .map(|m| format!("{}.{m}", crate::roman(self.number)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut groups: Vec<String> = self
            .decisions
            .iter()
            .map(|d| format!("\"{}\" ({})", d.decision, names(&d.members)))
            .collect();
        let mut counts: Vec<String> = self
            .decisions
            .iter()
            .map(|d| d.members.len().to_string())
            .collect();
        if !self.no_verdict.is_empty() {
            groups.push(format!("no verdict ({})", names(&self.no_verdict)));
            counts.push(self.no_verdict.len().to_string());
        }
        let outcome = match self.outcome {
            ConsensusOutcome::Unanimous => "unanimous".to_owned(),
            ConsensusOutcome::Split => format!("split {}", counts.join("–")),
            ConsensusOutcome::Tie => format!("tie {}", counts.join("–")),
            ConsensusOutcome::NoVerdict => "no verdict from any member".to_owned(),
        };
        format!("{outcome}: {}", groups.join(" vs "))
    }
}

/// One summons decision, for the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StrategyEntry {
    /// The generation the summons made (II for II.1, II.2…); absent when it was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    pub strategy: crate::SummonStrategy,
    /// Members summoned (1 for solo; 0 when rejected).
    pub members: u32,
    /// The pool it went to, or was asked for.
    pub pool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The human's words behind the choice, verbatim, and the Arbiter's reading of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directive: Option<crate::Directive>,
    /// Why the summons was refused; absent when it went ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// The risk and complexity the Arbiter gave the summons (1 to 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complexity: Option<u8>,
    /// What the risk policy and the human's word made of it; absent when
    /// neither changed or confirmed anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
}

/// A summons' risk decision, for the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Escalation {
    /// A solo summons at or above the risk threshold became a consensus of 3.
    Escalated {
        /// The threshold (`--escalate-risk`).
        threshold: u8,
    },
    /// The human said to skip consensus: it stayed solo, whatever the risk.
    KeptSolo,
    /// The human asked for a second opinion: a consensus, whatever the risk.
    Forced,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HumanEntry {
    pub message_id: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArbiterEntry {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArbiterToOrchestratorEntry {
    pub number: u32,
    /// Its member number within a team (II.1, II.2…); absent for a solo Orchestrator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub orch_id: String,
    pub text: String,
    /// The input's number (1, 2, 3… per Orchestrator) when this entry is the
    /// input itself, stored on `session.<id>.in.<orch_id>.<n>` (protocol v3);
    /// absent on `.log` (older coordinators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_seq: Option<u64>,
    /// The Orchestrator's allowance from this input on, as in the summons
    /// (protocol v3; see `OrchestratorInput::budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Cap>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OrchestratorEntry {
    pub number: u32,
    /// Its member number within a team (II.1, II.2…); absent for a solo Orchestrator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub orch_id: String,
    pub expects_response: bool,
    pub text: String,
    /// The worker's evidence that came with the output, as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// The handoff packet that came with the output, as it came (boxed: it
    /// is large next to the other entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Box<crate::Handoff>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MusingEntry {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SummonedEntry {
    pub number: u32,
    /// Its member number within a team (II.1, II.2…); absent for a solo Orchestrator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub orch_id: String,
    pub pool: String,
    pub brief: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReleasedEntry {
    pub numbers: Vec<u32>,
    /// The member released, when one member of a team was (`numbers` holds its generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SystemEntry {
    pub text: String,
}

/// A new Arbiter generation began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArbiterHandoffEntry {
    /// The generation that took over (2 for the first handoff).
    pub generation: u32,
    /// The packet it started from, as it was written (boxed: it is large
    /// next to the other entries).
    pub packet: Box<crate::ArbiterPacket>,
    /// Set when the coordinator built the packet from the session's records
    /// because the Arbiter gave no valid one: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_by_coordinator: Option<String>,
    /// Exchanges (a user message and the Arbiter's reply) carried over verbatim.
    pub kept_exchanges: u32,
    /// The Arbiter's context before the handoff, in tokens (the model's figure).
    pub context_tokens_before: u64,
    /// The new generation's context, in tokens, estimated from its text
    /// until its first turn reports the model's figure.
    pub context_tokens_after: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorEntry {
    pub error: WireError,
}

/// Whether the Arbiter is thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Nothing queued, no Arbiter turn in flight.
    Idle,
    /// An Arbiter turn is in flight or input is queued for one.
    Thinking,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActiveOrchestrator {
    pub orch_id: String,
    pub number: u32,
    /// Its member number within a team; absent for a solo Orchestrator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    /// It has reported (answered its brief) since it was summoned.
    #[serde(default)]
    pub reported: bool,
}

/// `session.<session_id>.status`: published on every change and as a heartbeat;
/// the latest one is also kept in the sessions bucket under the session id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionStatus {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    pub state: SessionState,
    /// Inputs waiting for the Arbiter.
    pub queued: u32,
    #[serde(deserialize_with = "crate::finite_f32")]
    pub arbiter_context_pct: f32,
    pub arbiter_context_tokens: u64,
    /// The first live Orchestrator (kept for older consoles; see `team`).
    #[serde(default)]
    pub active: Option<ActiveOrchestrator>,
    /// Every live Orchestrator of the session: one for a solo summons, each
    /// member of a team. Absent from older coordinators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub team: Vec<ActiveOrchestrator>,
    /// Orchestrators summoned so far in this session.
    pub summoned: u32,
    /// The seq of the newest log entry.
    pub last_seq: u64,
    pub created_at: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// What the session's model requests cost so far (stored with its records).
    #[serde(default)]
    pub spend: crate::SessionSpend,
    /// When the session was archived: its log and records moved into the
    /// archive bucket, read-only from then on (absent while it is live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<DateTime<Utc>>,
    /// The session's budget caps (none by default), and whether it holds
    /// at its cap.
    #[serde(default)]
    pub budget: crate::Budget,
    /// Tool calls waiting for the human's approval, oldest first: the
    /// session needs attention while any waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<crate::WaitingApproval>,
    /// Why the session waits for the human, besides approvals: the Arbiter
    /// wrote to them, or something failed or stalled. Set with the entry
    /// that causes it, gone when the human next writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
}

/// What [`SessionStatus::attention`] holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Attention {
    /// `needs_input`, `failed`, `stalled` or `budget`, as the webhooks name them.
    pub kind: crate::NotificationKind,
    /// One line for a person; it may quote a model: show it as text.
    pub summary: String,
    /// The log entry that caused it.
    pub seq: u64,
}

/// `session.<session_id>.delta`: the Arbiter's words as the model generates
/// them, so consoles can show them live. Core NATS, best effort: the log
/// entry that ends the turn is the record, and replaces what the deltas built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArbiterDelta {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    /// Counts the session's Arbiter turns; a new value starts a new reply.
    pub turn: u64,
    /// Attempts within the turn (a reply sent back for repair, a stream
    /// restarted): a new value replaces what the earlier attempt built.
    #[serde(default)]
    pub attempt: u32,
    /// The intent, once the model has written it (it comes before the message).
    #[serde(default)]
    pub intent: Option<ArbiterIntent>,
    /// The next piece of the message text.
    pub text: String,
    pub at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::LogEntry;

    #[test]
    fn seq_of_malformed_entries() {
        assert_eq!(LogEntry::readable_seq(br#"{"seq": 7, "body": 3}"#), Some(7));
        assert_eq!(LogEntry::readable_seq(b"{oops"), None);
        assert_eq!(LogEntry::readable_seq(br#"{"seq": "x"}"#), None);
    }
}
