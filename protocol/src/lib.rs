//! The Arbiter wire protocol: NATS subjects, the messages carried on them, and
//! the structured outputs the models must produce. Pure data: no I/O, no async.
//!
//! Every payload carries `v` (see [`VERSION`]); new fields are added with
//! `#[serde(default)]` so that older peers keep decoding newer messages.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod approval;
pub mod arbiter_handoff;
pub mod budget;
pub mod error;
pub mod evidence;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
pub mod handoff;
pub mod memory;
pub mod notify;
pub mod orchestrator;
pub mod outputs;
pub mod roles;
pub mod schema;
pub mod session;
pub mod spend;
pub mod subjects;

pub use approval::{
    Answerer, ApprovalAnsweredEntry, ApprovalAskedEntry, ApprovalDecision, ApprovalReply,
    ApprovalRequest, Layers, Policy, WaitingApproval,
};
pub use arbiter_handoff::{ActiveLine, ArbiterPacket, GenerationLine};
pub use budget::{Budget, BudgetChange, BudgetLimit, BudgetScope, Cap};
pub use error::{ModelErrorKind, Role, WireError};
pub use evidence::{Branch, Checkpoint, CommandRun, Evidence, FileChanges, Skipped, ToolCalls};
pub use handoff::{Decision, DoneItem, Handoff, OpenItem, PriorHandoff};
pub use memory::{MemoryEntry, MemoryKind};
pub use notify::{Notification, NotificationKind};
pub use orchestrator::{
    Control, ControlAction, OrchestratorEvent, OrchestratorFailed, OrchestratorInput,
    OrchestratorMessage, OrchestratorState, OrchestratorStatus, Summon,
};
pub use outputs::{
    ArbiterIntent, ArbiterOutput, ConsensusChoice, Directive, OrchestratorOutput,
    OrchestratorRuntime, SummonStrategy, Verdict,
};
pub use session::{
    ActiveOrchestrator, ArbiterDelta, ArbiterEntry, ArbiterHandoffEntry,
    ArbiterToOrchestratorEntry, Attention, ConsensusEntry, ConsensusOutcome, DecisionVotes,
    ErrorEntry, Escalation, HumanCommand, HumanEntry, HumanMessage, LogBody, LogEntry,
    MemberVerdict, MissingVerdict, MusingEntry, OrchestratorEntry, ReleasedEntry, Rewind,
    RewoundEntry, SessionState, SessionStatus, StepEntry, StrategyEntry, SummonedEntry,
    SystemEntry,
};
pub use spend::{OrchestratorSpend, SessionSpend, Spend};

/// Version of the payloads this build writes: the revision of
/// `docs/protocol.md` they follow (2: session records ride on the log,
/// Orchestrator records are their outputs; 3: an Orchestrator's input is
/// stored once, as the log entry that shows it). Readers accept any version and
/// ignore fields they do not know; a change a third-party worker would have
/// to follow moves the subjects to `arbiter.v2`.
pub const VERSION: u32 = 3;

/// Serde default for the `v` field, so payloads without it still decode
/// (as the first revision, which is what a writer that omits it followed).
pub fn version() -> u32 {
    1
}

/// Orchestrators are numbered I, II, III… within a session.
pub fn roman(mut n: u32) -> String {
    if n == 0 {
        return "0".to_owned();
    }
    const TABLE: [(u32, &str); 13] = [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut out = String::new();
    for (value, digits) in TABLE {
        while n >= value {
            out.push_str(digits);
            n -= value;
        }
    }
    out
}

/// `part` as a percentage of `whole`, for showing (0 when `whole` is 0):
/// context used of a budget, spend of a cap.
pub fn percent(part: u64, whole: u64) -> f32 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 / whole as f64 * 100.0) as f32
}

/// The name a session shows for its Orchestrator number `n`: `Orchestrator II`.
pub fn orchestrator_name(n: u32) -> String {
    format!("Orchestrator {}", roman(n))
}

/// The name of one member of a team: `Orchestrator II.3` (generation II,
/// member 3); a solo Orchestrator (no member number) is `Orchestrator II`.
pub fn member_name(n: u32, member: Option<u32>) -> String {
    match member {
        Some(m) => format!("Orchestrator {}.{m}", roman(n)),
        None => orchestrator_name(n),
    }
}

/// An `f32` that JSON can carry back: a number out of `f32`'s range would
/// decode as an infinity, which encodes as `null` and so does not decode
/// again. Refused here, so a reader never passes on what it cannot read.
pub(crate) fn finite_f32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    let wide = <f64 as serde::Deserialize>::deserialize(d)?;
    #[allow(clippy::cast_possible_truncation)]
    let narrow = wide as f32;
    if narrow.is_finite() {
        Ok(narrow)
    } else {
        Err(serde::de::Error::custom(format!(
            "{wide} is out of range for a percentage"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roman_numerals() {
        let got: Vec<String> = [1, 2, 3, 4, 9, 14, 40, 1994].map(roman).to_vec();
        assert_eq!(got, ["I", "II", "III", "IV", "IX", "XIV", "XL", "MCMXCIV"]);
        assert_eq!(orchestrator_name(2), "Orchestrator II");
        assert_eq!(member_name(2, Some(3)), "Orchestrator II.3");
        assert_eq!(member_name(2, None), "Orchestrator II");
    }
}
