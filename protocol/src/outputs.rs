//! The structured outputs that end every model turn. The router is a `match`
//! on these; their JSON Schemas are what the models are constrained by.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the Arbiter's message goes. This field is the routing decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArbiterIntent {
    /// Speak to the human.
    AddressHuman,
    /// Speak to the active Orchestrator (or the team members named in `members`); the message becomes its next user message.
    AddressOrchestrator,
    /// Release the active Orchestrators (if any) and summon new ones; the message is the complete brief.
    SummonOrchestrator,
    /// Release every Orchestrator of the session (or the team members named in `members`); the message goes to the human.
    ReleaseOrchestrators,
    /// Private thoughts: recorded, never delivered to anyone.
    Musings,
}

impl ArbiterIntent {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AddressHuman => "address_human",
            Self::AddressOrchestrator => "address_orchestrator",
            Self::SummonOrchestrator => "summon_orchestrator",
            Self::ReleaseOrchestrators => "release_orchestrators",
            Self::Musings => "musings",
        }
    }
}

/// One Arbiter turn: what it says and to whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArbiterOutput {
    /// Where this message goes.
    pub intent: ArbiterIntent,
    /// The words themselves. For summon_orchestrator: the new Orchestrator's complete brief.
    pub message: String,
    /// Facts or decisions worth keeping for later sessions on this
    /// workspace (the human's preferences, choices made and why), one short
    /// sentence each. Never keys, tokens or passwords. Leave it out (or
    /// null) when there is nothing new to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Vec<String>>,
    /// summon_orchestrator only: the pool of workers that must run the
    /// Orchestrator. Leave it out (or null) for the coordinator's own pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// summon_orchestrator only: the runtime that must run the Orchestrator.
    /// Leave it out (or null) for the coordinator's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<OrchestratorRuntime>,
    /// summon_orchestrator only: the MCP servers (the human's own tools,
    /// by name, such as "github") the Orchestrator must have: only a worker
    /// that offers every one of them runs it. Leave it out (or null) when
    /// the work needs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Vec<String>>,
    /// summon_orchestrator only: how many Orchestrators work the brief and
    /// how: solo (one; leave it out or null), parallel (several at once,
    /// each in its own copy of the workspace; their reports come back to you
    /// together), sequential (a chain given as `briefs`, each link summoned
    /// with the report of the one before), consensus (`count` members, 3
    /// when left out, answer the question in the message independently, each
    /// with a verdict; you get their tally, verdicts and reports together
    /// and decide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<SummonStrategy>,
    /// summon_orchestrator with strategy parallel or consensus only: how
    /// many members each get the whole message as their brief (consensus: 3
    /// when left out). Leave it out (or null) when you give `briefs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// summon_orchestrator with strategy parallel or sequential only: one
    /// complete brief per member (member 1 gets the first), or per link of
    /// a chain, in order. The message then says what the team as a whole is
    /// for. Leave it out (or null) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub briefs: Option<Vec<String>>,
    /// address_orchestrator and release_orchestrators only, while a team
    /// works: the member numbers (1, 2, 3…) this goes to. Leave it out (or
    /// null) for the only live Orchestrator, or to release them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<u32>>,
    /// summon_orchestrator only: the human's words that led you to this
    /// pool, runtime or strategy. Leave it out (or null) when the human did
    /// not direct the choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directive: Option<Directive>,
    /// summon_orchestrator only: true when the human declared an emergency
    /// (say what they said in directive): the summons goes ahead of the
    /// work queued in its pool. Leave it out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency: Option<bool>,
    /// summon_orchestrator only: how complex the work is, 1 (trivial) to 10.
    /// Leave it out (or null) when you cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub complexity: Option<u8>,
    /// summon_orchestrator only: how much harm a wrong result would do, 1
    /// (none) to 10 (grave, hard to undo). A solo summons at or above the
    /// coordinator's threshold becomes a consensus of 3, unless the human
    /// said otherwise (`consensus`). Leave it out (or null) when you cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub risk: Option<u8>,
    /// summon_orchestrator only, and only on the human's word (put the words
    /// in `directive`): skip (no consensus, whatever the risk) or force (a
    /// consensus, e.g. "get a second opinion"). Leave it out (or null) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consensus: Option<ConsensusChoice>,
    /// summon_orchestrator only: a stricter tool-call policy for this
    /// summons than the session's, when the work calls for care (the
    /// human asked for it, or the risk is high): rules and a mode such as
    /// `mode ask; deny bash(git push*)`. It can only tighten what the
    /// workers allow. Leave it out (or null) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// The human's word on a consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConsensusChoice {
    /// No consensus, whatever the risk ("skip consensus").
    Skip,
    /// A consensus, whatever the risk ("get a second opinion").
    Force,
}

impl ConsensusChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Force => "force",
        }
    }
}

impl ArbiterOutput {
    /// An output with only an intent and a message (no memory, no direction).
    pub fn new(intent: ArbiterIntent, message: impl Into<String>) -> Self {
        Self {
            intent,
            message: message.into(),
            memory: None,
            pool: None,
            runtime: None,
            needs: None,
            strategy: None,
            count: None,
            briefs: None,
            members: None,
            directive: None,
            emergency: None,
            complexity: None,
            risk: None,
            consensus: None,
            policy: None,
        }
    }
}

/// What runs an Orchestrator's turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OrchestratorRuntime {
    /// The project's own agent loop.
    Native,
    /// The Claude Code CLI.
    ClaudeCode,
    /// The OpenAI Codex CLI.
    Codex,
}

impl OrchestratorRuntime {
    /// The name a worker's `--runtime` takes and `Summon::runtime` carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
        }
    }
}

/// How many Orchestrators work a summons, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SummonStrategy {
    /// One Orchestrator (the default).
    #[default]
    Solo,
    /// Several Orchestrators at once, on the whole brief or one sub-brief each.
    Parallel,
    /// Several Orchestrators answer the same question independently; their verdicts are tallied.
    Consensus,
    /// A chain, each link briefed with its predecessor's report.
    Sequential,
}

impl SummonStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Solo => "solo",
            Self::Parallel => "parallel",
            Self::Consensus => "consensus",
            Self::Sequential => "sequential",
        }
    }
}

/// The human's words behind a directed summons, kept verbatim for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Directive {
    /// The human's words, verbatim (e.g. "get Codex to review").
    pub words: String,
    /// What you took them to mean, in a few words (e.g. "runtime codex").
    /// Leave it out (or null) when the words say it plainly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parsed: Option<String>,
    /// How sure you are of that reading, in percent (0 to 100).
    /// Leave it out (or null) when you cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub confidence: Option<u8>,
}

/// One Orchestrator turn: its message to the Arbiter and whether it waits for an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OrchestratorOutput {
    /// true: a question, introduction, handoff or completion report that the Arbiter must answer;
    /// you then wait for its reply. false: a status note; you keep working.
    pub expects_response: bool,
    /// The message for the Arbiter. With a handoff, keep it to a sentence or two: the packet carries the detail.
    pub message: String,
    /// Your handoff packet: required in every reply once your context is critical (85 %),
    /// and in your final report. Leave it out (or null) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Box<crate::Handoff>>,
    /// Only when your brief makes you a member of a consensus: your verdict
    /// on its question, in your report. Leave it out (or null) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// A consensus member's answer to the question it was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// Your answer in a few words (e.g. "ship" or "hold"). The members'
    /// decisions are compared as written, ignoring case and surrounding spaces.
    pub decision: String,
    /// How sure you are, in percent (0 to 100).
    #[schemars(range(max = 100))]
    pub confidence: u8,
    /// Why, one short sentence each.
    pub reasons: Vec<String>,
}
