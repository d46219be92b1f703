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
    /// Speak to the active Orchestrator; the message becomes its next user message.
    AddressOrchestrator,
    /// Release the active Orchestrator (if any) and summon a new one; the message is its complete brief.
    SummonOrchestrator,
    /// Release every Orchestrator of the session; the message goes to the human.
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
}
