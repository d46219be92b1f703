//! Messages between the coordinator and the workers that run Orchestrators.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Evidence, Handoff, OrchestratorOutput, PriorHandoff, WireError};

/// `summon.<pool>`: start a new Orchestrator. Taken by exactly one worker of the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summon {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    pub orch_id: String,
    /// I, II, III… within the session.
    pub number: u32,
    /// Its member number (1, 2, 3…) when it is one of a parallel team
    /// (all of them share `number`: II.1, II.2…). Such a member works in a
    /// workspace of its own, prepared from the session's (see
    /// docs/protocol.md). Absent for a solo Orchestrator and a chain's links,
    /// which work in the session's workspace (and from older coordinators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    /// The Arbiter's complete brief: the Orchestrator's first user message.
    pub brief: String,
    /// Deprecated and ignored: the worker opens the workspace of `session_id`
    /// and nothing else, so a summons cannot reach another session's files.
    /// Kept so that older senders still decode; send `null`.
    #[serde(default)]
    pub workspace: Option<String>,
    pub pool: String,
    pub summoned_at: DateTime<Utc>,
    /// The runtime the Orchestrator must run on (`native`, `claude-code`,
    /// `codex`); absent: any. A worker that runs another one does not claim
    /// it. Text rather than an enum, so that a runtime an older worker does
    /// not know still decodes (and is left to a worker that runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The MCP servers the Orchestrator needs, by name (the Arbiter's
    /// `needs`): a worker that does not offer every one of them does not
    /// claim it. Empty (and absent from older coordinators): none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// The predecessor's handoff packet, carried as it was written: the
    /// worker puts it beside the brief in the first user message. Absent
    /// when there is none (and from older coordinators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<PriorHandoff>,
    /// The most this Orchestrator's model requests (its subagents'
    /// included) may spend, counted from its summons as its `spend` is:
    /// its worker starts no model request once either limit is reached.
    /// Absent: no cap (and from older coordinators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Cap>,
    /// An emergency the human declared: published on
    /// `summon.<pool>.urgent`, which the pool's workers serve before the
    /// queued work of `summon.<pool>`. Absent: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub emergency: bool,
    /// The session's policy (set by the human), to be checked with the
    /// worker's own: it may only tighten it, and a worker refuses a summons
    /// whose policy would loosen its own. Absent: the worker's alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::Policy>,
    /// The Arbiter's policy for this summons (its output's `policy`),
    /// checked as a layer of its own beside the session's, under the same
    /// rule: it may only tighten the worker's. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arbiter_policy: Option<crate::Policy>,
    /// The checkpoint (a commit id) the human rewound the session's
    /// workspace to since the last summons: the worker restores the
    /// workspace to it before the Orchestrator's first step, and its first
    /// request says so (docs/checkpoints.md). Absent: as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_from: Option<String>,
    /// The link of a sequential chain this Orchestrator is (2 for the
    /// second), which works in the session's workspace, so `member` is
    /// absent: its checkpoints and branch are named by it. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<u32>,
}

/// Most characters of an MCP server's name.
pub const MAX_MCP_SERVER_NAME: usize = 32;

/// Whether `name` can name an MCP server (a worker's `[mcp_servers.<name>]`,
/// a summons' `needs`): 1 to [`MAX_MCP_SERVER_NAME`] ASCII letters, digits,
/// `-` or `_`, and no `__` (which separates it from the tool's name in
/// `mcp__<server>__<tool>`).
pub fn mcp_server_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MCP_SERVER_NAME
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Summon {
    /// The policies the summons asks the worker to hold its calls to beside
    /// its own: the session's, then the Arbiter's.
    pub fn layers(&self) -> Vec<crate::Policy> {
        self.policy
            .iter()
            .chain(&self.arbiter_policy)
            .cloned()
            .collect()
    }
}

/// `orch.<orch_id>.in`: the Arbiter speaks to its Orchestrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OrchestratorInput {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    pub orch_id: String,
    /// 1, 2, 3… per Orchestrator, so duplicates can be recognised.
    pub seq: u64,
    pub message: String,
    pub sent_at: DateTime<Utc>,
    /// The Orchestrator's allowance from now on, as in the summons: it
    /// replaces the one the worker had once the input is taken. Absent:
    /// the allowance stays as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Cap>,
}

/// What the coordinator asks of a running Orchestrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    /// The Arbiter is done with it: stop work, free the slot.
    Release,
    /// Abort at once (operator request).
    Cancel,
}

/// `orch.<orch_id>.ctl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Control {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub orch_id: String,
    pub action: ControlAction,
    pub sent_at: DateTime<Utc>,
}

/// `orch.<orch_id>.out`: one event from an Orchestrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OrchestratorMessage {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    pub orch_id: String,
    /// 1, 2, 3… per Orchestrator.
    pub seq: u64,
    pub event: OrchestratorEvent,
    /// What the worker saw the Orchestrator do since its summons, up to this
    /// output: written by the worker, never by the model. Absent from older
    /// workers and on `failed` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// The Orchestrator's handoff packet, when its output carried one. The
    /// worker moves it here out of the `output` event, whose keys are fixed,
    /// so that older readers ignore it. Boxed: it is large next to the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Box<Handoff>>,
    /// What the Orchestrator's model requests (its subagents' included)
    /// cost since its summons, up to this message. Absent from older workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::Spend>,
    /// The worker reads this Orchestrator's inputs where protocol v3 stores
    /// them, on `session.<id>.in.<orch_id>.<n>`: the coordinator then stops
    /// sending them on `orch.<orch_id>.in` too. Absent (false): a worker
    /// that reads `orch.<orch_id>.in`, which keeps getting them there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_inputs: bool,
    pub sent_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OrchestratorEvent {
    /// The Orchestrator ended a turn with its structured output.
    Output(OrchestratorOutput),
    /// The Orchestrator could not go on (model failure, schema budget spent…).
    Failed(OrchestratorFailed),
    /// A tool call waits for the human's approval: the Orchestrator does
    /// nothing else until its answer comes as an input.
    ApprovalNeeded(crate::ApprovalRequest),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OrchestratorFailed {
    pub error: WireError,
}

/// What an Orchestrator is doing right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrchestratorState {
    /// Calling the model or running a tool.
    Working,
    /// Waiting for the Arbiter's answer.
    Waiting,
    /// Waiting for the human to approve a tool call.
    WaitingApproval,
    /// Released or failed; no longer running.
    Stopped,
}

/// `orch.<orch_id>.status`: published after every step, and as a heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OrchestratorStatus {
    #[serde(default = "crate::version")]
    pub v: u32,
    pub session_id: String,
    pub orch_id: String,
    pub number: u32,
    pub worker_id: String,
    pub state: OrchestratorState,
    /// The branch its work was handed over on, in the `stopped` status of
    /// an Orchestrator that ended with its workspace a git repository
    /// (docs/checkpoints.md). Absent otherwise, and from older workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<crate::Branch>,
    /// Context used, 0–100, of the role's context budget.
    #[serde(deserialize_with = "crate::finite_f32")]
    pub context_pct: f32,
    /// Input tokens of the last model call (cache included).
    pub context_tokens: u64,
    pub context_budget: u64,
    /// The tool running now, if any (`Edit`, `Bash`…).
    #[serde(default)]
    pub current_tool: Option<String>,
    /// Tool calls made so far.
    pub tool_count: u32,
    /// Waiting for the Arbiter without a slot: its worker gave the slot
    /// back after waiting a while, and takes one again when input comes.
    /// Only ever true with `state` `waiting`.
    #[serde(default)]
    pub parked: bool,
    /// What its model requests (its subagents' included) cost so far.
    #[serde(default)]
    pub spend: crate::Spend,
    /// Its worker's MCP servers that could not be used, each as `<server>:
    /// <why>` (it started without their tools). Absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_failures: Vec<String>,
    pub at: DateTime<Utc>,
}
