//! The Orchestrator's allowance: the most its model requests (its
//! subagents' included) may spend, from its summons or the latest input
//! that carried one. Checked before every model request; at the allowance
//! the Orchestrator stops with a `failed` event of kind
//! `orchestrator_failed` whose message starts `budget: ` (a new error kind
//! would break older coordinators, see protocol.md, Versioning).

use arbiter_protocol::{Cap, WireError};

use super::Core;

/// Starts the message of the `failed` event an Orchestrator stops with at its allowance.
pub(crate) const BUDGET_PREFIX: &str = "budget: ";

impl Core {
    /// The failure to stop with, when the allowance is spent.
    pub(crate) fn over_budget(&self) -> Option<WireError> {
        let cap = self.snap.budget?;
        let (unit, limit) = cap.reached(&self.snap.spend)?;
        let number = self.settings.number;
        tracing::warn!(
            limit,
            used = unit.used(&self.snap.spend),
            unit = unit.key(),
            "the Orchestrator's allowance is spent; stopping it"
        );
        Some(WireError::OrchestratorFailed {
            number,
            message: format!(
                "{BUDGET_PREFIX}it has spent {} of the {} it may spend, so no new model request \
                 starts. Its work so far is kept: its files are in the workspace, and its last \
                 handoff packet goes to the successor you summon. Summon a successor to go on, \
                 or ask the human to raise the cap (/budget orchestrator …, or /budget session …).",
                unit.amount(unit.used(&self.snap.spend)),
                unit.amount(limit),
            ),
        })
    }

    /// What a subagent started now may spend: what is left of the allowance.
    pub(crate) fn subagent_allowance(&self) -> Option<Cap> {
        self.snap.budget.map(|cap| cap.left(&self.snap.spend))
    }

    /// After spend grew from `before`: when it crossed 80 % of a limit of
    /// the allowance, the model is told with its next request (once), so
    /// that it reports before it is stopped.
    pub(crate) fn note_budget(&mut self, before: &arbiter_protocol::Spend) {
        let Some(cap) = self.snap.budget else {
            return;
        };
        let at = arbiter_protocol::budget::NOTE_AT_PERCENT;
        let was = cap.past(before, at);
        let Some((unit, limit)) = cap
            .past(&self.snap.spend, at)
            .into_iter()
            .find(|l| !was.contains(l))
        else {
            return;
        };
        let used = unit.used(&self.snap.spend);
        let pct = u128::from(used) * 100 / u128::from(limit.max(1));
        self.budget_warning = Some(format!(
            "[system] You have used {pct} % of your budget ({} of {}). At the cap you are \
             stopped before your next model request. Finish the step you are on, then report \
             to the Arbiter with expects_response true and your handoff packet.",
            unit.amount(used),
            unit.amount(limit),
        ));
    }
}
