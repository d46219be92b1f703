//! A session's budget: caps on what its model requests may spend, in tokens
//! or money, for the whole session and for each Orchestrator. The defaults
//! come from the config file (`[budget.*]`); a console's `/budget` changes a
//! session's own, stored with its records. At 80 % of a cap the Arbiter is
//! told, once per cap, with its next turn. At the session cap the session
//! holds: no Arbiter turn starts (what would start one waits with the hold)
//! until the cap is raised. Each Orchestrator gets an allowance in its
//! summons and in every input (its own cap, within what the session has
//! left), which its worker enforces before each model request.

use arbiter_protocol::{
    Budget, BudgetChange, BudgetScope, Cap, LogBody, NotificationKind, Spend, Summon, SystemEntry,
    member_name,
};
use serde::{Deserialize, Serialize};

use crate::rules::{Core, Task};
use crate::state::Effect;

/// What a session stores of its budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct BudgetState {
    /// The session's cap as a console set it; absent: the config file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Cap>,
    /// Each Orchestrator's cap as a console set it; absent: the config file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestrator: Option<Cap>,
    /// The caps the Arbiter was told it has used 80 % of (`session:cost:<cap>`,
    /// `<orch_id>:tokens:<cap>`): told once per cap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noted: Vec<String>,
    /// What the Arbiter is told with its next turn (these start none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// A summons decided while the session held at its cap: sent, with a
    /// fresh allowance, once the cap is raised (an allowance of nothing
    /// would only have its worker stop it at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Summon>,
    /// The other members of a team summoned while the session held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred_team: Vec<Summon>,
}

impl Core {
    /// The caps in force, and whether the session holds at its cap.
    pub(crate) fn budget(&self) -> Budget {
        let defaults = &self.config.budget;
        Budget {
            session: self.state.budget.session.unwrap_or(defaults.session),
            orchestrator: self
                .state
                .budget
                .orchestrator
                .unwrap_or(defaults.orchestrator),
            held: self.state.hold.as_ref().is_some_and(|h| h.budget),
        }
    }

    /// What Orchestrator `orch_id` may spend, counted from its summons: its
    /// own cap, within what the session has left. `None` while this session
    /// has never had a cap, so that summonses and inputs stay as they were.
    pub(crate) fn allowance(&self, orch_id: &str) -> Option<Cap> {
        let budget = self.budget();
        let set_here =
            self.state.budget.session.is_some() || self.state.budget.orchestrator.is_some();
        if budget.session.is_none() && budget.orchestrator.is_none() && !set_here {
            return None;
        }
        let spent = self
            .state
            .spend
            .orchestrator(orch_id)
            .copied()
            .unwrap_or_default();
        let session_left = budget.session.left(&self.state.spend.total).after(&spent);
        Some(budget.orchestrator.min(&session_left))
    }

    /// After spend changed: the 80 % notes, then the hold at the session cap.
    pub(crate) fn check_budget(&mut self) {
        let budget = self.budget();
        let total = self.state.spend.total;
        for (unit, limit) in budget
            .session
            .past(&total, arbiter_protocol::budget::NOTE_AT_PERCENT)
        {
            let key = format!("session:{}:{limit}", unit.key());
            if self.first_note(key) {
                let text = format!(
                    "This session has used {} % of its budget ({} of {}). Wrap up: have the \
                     work finished and reported, and tell the human where things stand; at the \
                     cap no new model request starts until the human raises it.",
                    share(unit.used(&total), limit),
                    unit.amount(unit.used(&total)),
                    unit.amount(limit)
                );
                self.budget_note(text);
            }
        }
        for active in self.state.team.clone() {
            let spent = self
                .state
                .spend
                .orchestrator(&active.orch_id)
                .copied()
                .unwrap_or_default();
            for (unit, limit) in budget
                .orchestrator
                .past(&spent, arbiter_protocol::budget::NOTE_AT_PERCENT)
            {
                let key = format!("{}:{}:{limit}", active.orch_id, unit.key());
                if self.first_note(key) {
                    let name = member_name(active.number, active.member);
                    let text = format!(
                        "{name} has used {} % of its budget ({} of {}); at the cap its worker \
                         stops it. Have it wrap up and report, with its handoff packet.",
                        share(unit.used(&spent), limit),
                        unit.amount(unit.used(&spent)),
                        unit.amount(limit)
                    );
                    self.budget_note(text);
                }
            }
        }
        self.hold_at_cap();
    }

    /// At the session cap, the session holds (once: one entry says why and
    /// how to raise it). True when it holds for its budget.
    pub(crate) fn hold_at_cap(&mut self) -> bool {
        if self.budget().held {
            return true;
        }
        let cap = self.budget().session;
        let total = self.state.spend.total;
        let Some((unit, limit)) = cap.reached(&total) else {
            return false;
        };
        let raise = match unit {
            arbiter_protocol::budget::Unit::Money => {
                arbiter_protocol::spend::format_usd(limit.max(1_000_000_000).saturating_mul(2))
            }
            arbiter_protocol::budget::Unit::Tokens => format!(
                "{} tokens",
                arbiter_protocol::budget::thousands(limit.max(1000).saturating_mul(2))
            ),
        };
        self.hold(format!(
            "Held: this session has spent {}; its budget is {}, so no new model request \
             starts. Nothing is lost: the work so far is kept, and what waits for the Arbiter \
             goes on once the cap is raised. Raise it with /budget session {raise} (or \
             /budget session off), or change [budget.session] in the coordinator's config file.",
            unit.amount(unit.used(&total)),
            unit.amount(limit),
        ));
        if let Some(hold) = self.state.hold.as_mut() {
            hold.budget = true;
        }
        self.notify(
            NotificationKind::Budget,
            format!(
                "Held at the budget cap: this session has spent {} of {}; raise it with /budget \
                 session to go on.",
                unit.amount(unit.used(&total)),
                unit.amount(limit)
            ),
        );
        true
    }

    /// A console's `/budget`: the cap is stored with the session, the log
    /// says what it is now, and a session held at its cap goes on when the
    /// new one allows.
    pub(crate) fn change_budget(&mut self, change: BudgetChange, console: &str) {
        let budget = self.budget();
        let total = self.state.spend.total;
        let text = match change.scope {
            BudgetScope::Session => {
                let cap = budget.session.with(change.limit);
                self.state.budget.session = Some(cap);
                // A new cap is told at its own 80 %.
                self.state
                    .budget
                    .noted
                    .retain(|k| !k.starts_with("session:"));
                format!(
                    "Budget set by console {console}: the session's cap is now {} ({}; spent {}).",
                    cap.text(),
                    cap.left_text(&total),
                    spent_text(&total)
                )
            }
            BudgetScope::Orchestrator => {
                let cap = budget.orchestrator.with(change.limit);
                self.state.budget.orchestrator = Some(cap);
                let live: Vec<String> = self.state.team.iter().map(|a| a.orch_id.clone()).collect();
                self.state
                    .budget
                    .noted
                    .retain(|k| !live.iter().any(|id| k.starts_with(id.as_str())));
                format!(
                    "Budget set by console {console}: each Orchestrator's cap is now {}, counted \
                     from its summons (the active one gets it with the Arbiter's next message).",
                    cap.text()
                )
            }
        };
        self.log(LogBody::System(SystemEntry { text }));
        let held = self.budget().held;
        if held && self.budget().session.reached(&total).is_none() {
            // The hold ends: what waited goes on.
            if let Some(hold) = self.state.hold.take() {
                let mut queue = hold.waiting;
                queue.append(&mut self.state.queue);
                self.state.queue = queue;
            }
            self.log(LogBody::System(SystemEntry {
                text: "The session goes on under its new budget.".to_owned(),
            }));
            if let Some(summon) = self.state.budget.deferred.take() {
                // Asked now that it goes out (see `route.rs`, `summon`).
                let check = Task::CheckPool {
                    orch_id: summon.orch_id.clone(),
                    pool: summon.pool.clone(),
                };
                self.send_summons(summon);
                self.step.tasks.push(check);
            }
            for summon in std::mem::take(&mut self.state.budget.deferred_team) {
                self.send_summons(summon);
            }
        }
        self.check_budget();
    }

    /// Publishes a summons with the Orchestrator's allowance as it stands;
    /// while the session holds at its cap it waits for the cap to be raised,
    /// and only while its Orchestrator is still the active one.
    pub(crate) fn send_summons(&mut self, mut summon: Summon) {
        if self.budget().held {
            if self.state.budget.deferred.is_none() {
                self.state.budget.deferred = Some(summon);
            } else {
                // The other members of a team.
                self.state.budget.deferred_team.push(summon);
            }
            self.step.changed = true;
            return;
        }
        if self.state.member(&summon.orch_id).is_none() {
            return;
        }
        summon.budget = self.allowance(&summon.orch_id);
        self.effect(Effect::Summon(summon));
    }

    /// The notes for the Arbiter's next turn, as it reads them.
    pub(crate) fn budget_notes(&self) -> Vec<String> {
        self.state
            .budget
            .notes
            .iter()
            .map(|text| format!("System: {text}"))
            .collect()
    }

    /// The same, taken.
    pub(crate) fn take_budget_notes(&mut self) -> Vec<String> {
        let notes = self.budget_notes();
        self.state.budget.notes.clear();
        notes
    }

    /// False when the cap under `key` was told already.
    fn first_note(&mut self, key: String) -> bool {
        if self.state.budget.noted.contains(&key) {
            return false;
        }
        self.state.budget.noted.push(key);
        true
    }

    /// Told to the human now (a `system` entry) and to the Arbiter with its
    /// next turn.
    fn budget_note(&mut self, text: String) {
        self.log(LogBody::System(SystemEntry { text: text.clone() }));
        self.notify(NotificationKind::Budget, text.clone());
        self.state.budget.notes.push(text);
        self.step.changed = true;
    }
}

/// The share of a cap spent, in whole percent, as a note says it.
fn share(used: u64, limit: u64) -> u64 {
    if limit == 0 {
        return 100;
    }
    arbiter_protocol::percent(used, limit).floor() as u64
}

fn spent_text(spend: &Spend) -> String {
    format!(
        "{} tokens, {}",
        arbiter_protocol::budget::thousands(spend.tokens()),
        spend.cost_text()
    )
}

impl Core {
    /// Whether a team of `members` started at once fits the session's
    /// budget (see [`team_fits`]).
    pub(crate) fn team_budget(&self, members: usize) -> Result<(), String> {
        let budget = self.budget();
        let left = budget.session.left(&self.state.spend.total);
        team_fits(
            u64::try_from(members).unwrap_or(u64::MAX),
            &budget.orchestrator,
            &budget.session,
            &left,
        )
    }
}

/// Whether `n` Orchestrators at once, each capped at `each`, fit in what is
/// `left` of the session's cap `session`: a limit both caps set must hold
/// `n` times `each`. Without a cap on each Orchestrator nothing can be said
/// before the work (each gets what the session has left, and the session
/// holds at its cap). The reason, for the Arbiter, when they do not fit.
pub(crate) fn team_fits(n: u64, each: &Cap, session: &Cap, left: &Cap) -> Result<(), String> {
    if n < 2 {
        return Ok(());
    }
    let limits = [
        (
            arbiter_protocol::budget::Unit::Money,
            each.cost_nanos,
            left.cost_nanos,
            session.cost_nanos,
        ),
        (
            arbiter_protocol::budget::Unit::Tokens,
            each.tokens,
            left.tokens,
            session.tokens,
        ),
    ];
    for (unit, each, left, of) in limits {
        let (Some(each), Some(left), Some(of)) = (each, left, of) else {
            continue;
        };
        let all = each.saturating_mul(n);
        if all > left {
            return Err(format!(
                "a team of {n} at up to {} each could spend {} in all, more than the session has \
                 left ({} of {}), so nothing was summoned. Summon fewer members, or ask the \
                 human to raise the session's budget.",
                unit.amount(each),
                unit.amount(all),
                unit.amount(left),
                unit.amount(of)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod team_tests {
    use super::*;

    fn usd(dollars: u64) -> Option<u64> {
        Some(dollars * 1_000_000_000)
    }

    #[test]
    fn a_team_fits_only_when_every_member_at_its_cap_fits_what_is_left() {
        let each = Cap {
            cost_nanos: usd(5),
            tokens: None,
        };
        let session = Cap {
            cost_nanos: usd(20),
            tokens: None,
        };
        let left = |dollars| Cap {
            cost_nanos: usd(dollars),
            tokens: None,
        };
        let tokens = |n| Cap {
            tokens: Some(n),
            cost_nanos: None,
        };
        type Case = (&'static str, u64, Cap, Cap, Cap, Result<(), &'static str>);
        let cases: [Case; 7] = [
            ("3 × $5 in $20 left", 3, each, session, left(20), Ok(())),
            (
                "4 × $5 in $20 left: exactly",
                4,
                each,
                session,
                left(20),
                Ok(()),
            ),
            (
                "3 × $5 in $12 left",
                3,
                each,
                session,
                left(12),
                Err(
                    "a team of 3 at up to $5.00 each could spend $15.00 in all, more than the session has left ($12.00 of $20.00)",
                ),
            ),
            ("solo, whatever is left", 1, each, session, left(1), Ok(())),
            (
                "no cap on each Orchestrator",
                3,
                Cap::NONE,
                session,
                left(1),
                Ok(()),
            ),
            (
                "no cap on the session",
                3,
                each,
                Cap::NONE,
                Cap::NONE,
                Ok(()),
            ),
            (
                "tokens",
                2,
                tokens(600_000),
                tokens(1_000_000),
                tokens(1_000_000),
                Err("a team of 2 at up to 600,000 tokens each could spend 1,200,000 tokens in all"),
            ),
        ];
        for (name, n, each, session, left, want) in cases {
            let got = team_fits(n, &each, &session, &left);
            match (want, got) {
                (Ok(()), Ok(())) => {}
                (Err(want), Err(got)) => assert!(got.starts_with(want), "{name}: {got}"),
                (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
    }
}
