//! The summons decision, pure: where an Arbiter's `summon_orchestrator`
//! goes (pool, runtime, lane), how many Orchestrators it starts and with
//! which briefs (solo, a team, a chain, a consensus, escalated by risk), or
//! why it cannot go. The session asks the fleet first (`FleetView`); the
//! router (`route.rs`) carries the decision out.

use arbiter_protocol::{ArbiterIntent, ArbiterOutput, ConsensusChoice, Escalation, SummonStrategy};

use crate::fleet::Offer;

/// What the workers that are up offered, as the session saw them before it
/// routed a summons (the router itself does not wait on the bus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FleetView {
    /// Not asked: the summons named no pool, no runtime and no MCP server.
    NotAsked,
    /// The workers could not be asked; a directed summons goes ahead.
    Unknown,
    /// What the workers that answered offer.
    Seen(Vec<Offer>),
}

impl FleetView {
    /// Whether the session must ask the workers before routing `output`.
    pub(crate) fn wanted(output: &ArbiterOutput) -> bool {
        output.intent == ArbiterIntent::SummonOrchestrator
            && (output.pool.is_some()
                || output.runtime.is_some()
                || !needs(output).is_empty()
                || emergency(output))
    }
}

/// Where a summons goes, once it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub pool: String,
    pub runtime: Option<String>,
    /// The MCP servers it needs (a worker must offer every one).
    pub needs: Vec<String>,
    /// The Arbiter named the pool, the runtime or MCP servers.
    pub directed: bool,
    /// Which lane of the pool it goes on.
    pub lane: Lane,
    pub strategy: SummonStrategy,
    /// One brief per Orchestrator to start: one for solo, one per member of a team.
    pub briefs: Vec<String>,
    /// What the risk policy and the human's word made of the summons.
    pub escalation: Option<Escalation>,
}

/// A summons as the risk policy and the human's word leave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RiskDecision {
    pub strategy: Option<SummonStrategy>,
    pub count: Option<u32>,
    pub escalation: Option<Escalation>,
}

/// The risk decision, pure: a solo summons whose risk is at least
/// `threshold` (0: never) becomes a consensus of 3; the human's word
/// (`consensus`: skip or force) wins over the risk either way. A consensus
/// the human said to skip is refused, as is a risk or complexity off the
/// scale of 1 to 10.
pub(crate) fn risk_decision(output: &ArbiterOutput, threshold: u8) -> Result<RiskDecision, String> {
    for (name, value) in [("risk", output.risk), ("complexity", output.complexity)] {
        if let Some(v) = value.filter(|v| !(1..=10).contains(v)) {
            return Err(format!(
                "{name} {v} is not on the scale of 1 to 10, so nothing was summoned."
            ));
        }
    }
    let kept = RiskDecision {
        strategy: output.strategy,
        count: output.count,
        escalation: None,
    };
    let consensus = RiskDecision {
        strategy: Some(SummonStrategy::Consensus),
        count: None,
        escalation: Some(Escalation::Forced),
    };
    let solo = matches!(output.strategy, None | Some(SummonStrategy::Solo))
        && output.count.is_none_or(|c| c == 1)
        && output.briefs.is_none();
    Ok(match (output.consensus, output.strategy) {
        (Some(ConsensusChoice::Skip), Some(SummonStrategy::Consensus)) => {
            return Err(
                "the human said to skip consensus, and the summons asks for one (strategy \
                 consensus), so nothing was summoned. Summon one Orchestrator, or ask the \
                 human."
                    .to_owned(),
            );
        }
        (Some(ConsensusChoice::Skip), _) if solo => RiskDecision {
            escalation: Some(Escalation::KeptSolo),
            ..kept
        },
        (Some(ConsensusChoice::Force), Some(SummonStrategy::Consensus)) => RiskDecision {
            escalation: Some(Escalation::Forced),
            ..kept
        },
        (Some(ConsensusChoice::Force), _) if solo => consensus,
        (Some(ConsensusChoice::Force), other) => {
            return Err(format!(
                "the human asked for a consensus (consensus: force), and the summons asks \
                 for strategy {}, so nothing was summoned. Summon a consensus, or ask the \
                 human.",
                other.unwrap_or_default().as_str()
            ));
        }
        (None, _) if solo && threshold > 0 && output.risk.is_some_and(|r| r >= threshold) => {
            RiskDecision {
                escalation: Some(Escalation::Escalated { threshold }),
                ..consensus
            }
        }
        _ => kept,
    })
}

/// A pool's two lanes for summonses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// `summon.<pool>`, in turn with the queued work.
    Queued,
    /// An emergency: `summon.<pool>.urgent`, served before the queue.
    Urgent,
    /// An emergency no worker of the pool takes from the urgent lane (a
    /// worker of protocol v1 before it, the Python reference worker): it
    /// goes in turn rather than wait for ever, and the log says so.
    UrgentUnserved,
}

/// The MCP servers a summons needs, as named.
fn needs(output: &ArbiterOutput) -> &[String] {
    output.needs.as_deref().unwrap_or_default()
}

/// Whether the Arbiter declared the summons an emergency.
fn emergency(output: &ArbiterOutput) -> bool {
    output.emergency == Some(true)
}

/// The briefs a summons starts, pure: the message for solo; for parallel,
/// the sub-briefs or `count` copies of the message; for consensus, `count`
/// (3 when left out) copies of the question; at most `cap` of them.
fn team_briefs(output: &ArbiterOutput, cap: u32) -> Result<Vec<String>, String> {
    let strategy = output.strategy.unwrap_or_default();
    let briefs = match (strategy, output.count, &output.briefs) {
        (SummonStrategy::Solo, None | Some(1), None) => return Ok(vec![output.message.clone()]),
        (SummonStrategy::Solo, _, _) => {
            return Err(
                "count and briefs are for a team (strategy parallel); a solo summons \
                        has its brief in the message, so nothing was summoned."
                    .to_owned(),
            );
        }
        (SummonStrategy::Parallel, Some(0), _) => {
            return Err(
                "a team of 0 members was asked for (count 0), so nothing was \
                        summoned. Give a count of 2 or more, or briefs."
                    .to_owned(),
            );
        }
        (SummonStrategy::Parallel, _, Some(briefs)) if briefs.is_empty() => {
            return Err("the list of sub-briefs was empty, so nothing was summoned.".to_owned());
        }
        (SummonStrategy::Parallel, Some(n), Some(briefs)) if n as usize != briefs.len() => {
            return Err(format!(
                "count {n} and {} sub-briefs disagree, so nothing was summoned. Give one of them.",
                briefs.len()
            ));
        }
        (SummonStrategy::Parallel, _, Some(briefs)) => {
            if let Some(i) = briefs.iter().position(|b| b.trim().is_empty()) {
                return Err(format!(
                    "sub-brief {} of {} is empty, so nothing was summoned. Every member \
                     needs a complete brief.",
                    i + 1,
                    briefs.len()
                ));
            }
            briefs.clone()
        }
        (SummonStrategy::Parallel, Some(n), None) => vec![output.message.clone(); n as usize],
        (SummonStrategy::Parallel, None, None) => {
            return Err(
                "a parallel summons needs a count (members that each get the whole \
                        message) or briefs (one per member), so nothing was summoned."
                    .to_owned(),
            );
        }
        (SummonStrategy::Sequential, _, None) => {
            return Err(
                "a sequential summons needs briefs, one per link of the chain \
                        (e.g. planner, implementer, reviewer), so nothing was summoned."
                    .to_owned(),
            );
        }
        (SummonStrategy::Sequential, Some(n), Some(briefs)) if n as usize != briefs.len() => {
            return Err(format!(
                "count {n} and {} links disagree, so nothing was summoned. Give the briefs only.",
                briefs.len()
            ));
        }
        (SummonStrategy::Sequential, _, Some(briefs)) => {
            if briefs.is_empty() {
                return Err("the list of links was empty, so nothing was summoned.".to_owned());
            }
            if let Some(i) = briefs.iter().position(|b| b.trim().is_empty()) {
                return Err(format!(
                    "link {} of {} has an empty brief, so nothing was summoned. Every link \
                     needs a complete brief.",
                    i + 1,
                    briefs.len()
                ));
            }
            // One link runs at a time: the cap does not limit a chain's length.
            return Ok(briefs.clone());
        }
        (SummonStrategy::Consensus, _, Some(_)) => {
            return Err(
                "a consensus asks every member the same question, given in the message: \
                 leave briefs out (use strategy parallel for sub-briefs), so nothing was \
                 summoned."
                    .to_owned(),
            );
        }
        (SummonStrategy::Consensus, Some(n @ (0 | 1)), None) => {
            return Err(format!(
                "a consensus of {n} was asked for (count {n}), so nothing was summoned. \
                 Give a count of 2 or more, or leave it out for {}.",
                crate::rules::consensus::DEFAULT_MEMBERS
            ));
        }
        (SummonStrategy::Consensus, n, None) => {
            vec![
                output.message.clone();
                n.unwrap_or(crate::rules::consensus::DEFAULT_MEMBERS) as usize
            ]
        }
    };
    let n = u32::try_from(briefs.len()).unwrap_or(u32::MAX);
    if n > cap {
        return Err(format!(
            "a team of {n} is more than this session may run at once ({cap} Orchestrators), \
             so nothing was summoned. Summon {cap} or fewer, or split the work in turns."
        ));
    }
    Ok(briefs)
}

/// The summons decision, pure: where `output` goes given the coordinator's
/// own pool and runtime and what the fleet offers, or why it cannot go.
pub(crate) fn summons_target(
    output: &ArbiterOutput,
    own_pool: &str,
    own_runtime: Option<&str>,
    fleet: &FleetView,
    cap: u32,
    escalate_risk: u8,
) -> Result<Target, String> {
    if output.message.trim().is_empty() {
        return Err("a summons needs a brief, and the message was empty.".to_owned());
    }
    let risk = risk_decision(output, escalate_risk)?;
    let output = &ArbiterOutput {
        strategy: risk.strategy,
        count: risk.count,
        ..output.clone()
    };
    let briefs = team_briefs(output, cap)?;
    let pool = output.pool.clone().unwrap_or_else(|| own_pool.to_owned());
    if !arbiter_protocol::subjects::is_valid_token(&pool) {
        return Err(format!(
            "{pool:?} is not a pool name (letters, digits, - or _), so nothing was summoned."
        ));
    }
    let runtime = match output.runtime {
        Some(r) => Some(r.as_str().to_owned()),
        None => own_runtime.map(str::to_owned),
    };
    let mut needs = needs(output).to_vec();
    needs.sort();
    needs.dedup();
    if let Some(bad) = needs
        .iter()
        .find(|n| !arbiter_protocol::orchestrator::mcp_server_name_ok(n))
    {
        return Err(format!(
            "{bad:?} is not an MCP server's name (letters, digits, - or _; at most 32), so \
             nothing was summoned."
        ));
    }
    let directed = output.pool.is_some() || output.runtime.is_some() || !needs.is_empty();
    let lane = match (emergency(output), fleet) {
        (false, _) => Lane::Queued,
        // Asked and seen: only a worker that serves the urgent lane will do.
        (true, FleetView::Seen(offers)) => {
            if offers.iter().any(|o| o.pool == pool && o.urgent) {
                Lane::Urgent
            } else {
                Lane::UrgentUnserved
            }
        }
        // Not known: the urgent lane could be left unserved, so the queue.
        (true, _) => Lane::UrgentUnserved,
    };
    if let (true, FleetView::Seen(offers)) = (directed, fleet) {
        let in_pool: Vec<&Offer> = offers.iter().filter(|o| o.pool == pool).collect();
        if in_pool.is_empty() {
            let mut pools: Vec<&str> = offers.iter().map(|o| o.pool.as_str()).collect();
            pools.sort_unstable();
            pools.dedup();
            let served = if pools.is_empty() {
                "no worker answered at all".to_owned()
            } else {
                format!("pools served now: {}", pools.join(", "))
            };
            return Err(format!(
                "no worker serves the pool {pool:?} ({served}), so nothing was summoned. \
                 Leave the pool out for the usual one, or tell the human."
            ));
        }
        if let Some(wanted) = &runtime
            && !in_pool.iter().any(|o| &o.runtime == wanted)
        {
            let mut runtimes: Vec<&str> = in_pool.iter().map(|o| o.runtime.as_str()).collect();
            runtimes.sort_unstable();
            runtimes.dedup();
            return Err(format!(
                "no worker of the pool {pool:?} offers the runtime {wanted:?} (runtimes \
                 offered there: {}), so nothing was summoned. Leave the runtime out, or \
                 tell the human.",
                runtimes.join(", ")
            ));
        }
        let able: Vec<&Offer> = in_pool
            .into_iter()
            .filter(|o| runtime.as_ref().is_none_or(|r| &o.runtime == r))
            .collect();
        if !needs.is_empty() && !able.iter().any(|o| needs.iter().all(|n| o.mcp.contains(n))) {
            // Name what is missing: the servers no worker that could run it offers.
            let missing: Vec<&str> = needs
                .iter()
                .filter(|n| !able.iter().any(|o| o.mcp.contains(n)))
                .map(String::as_str)
                .collect();
            let mut offered: Vec<&str> = able
                .iter()
                .flat_map(|o| o.mcp.iter().map(String::as_str))
                .collect();
            offered.sort_unstable();
            offered.dedup();
            let offered = if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            };
            let what = if missing.is_empty() {
                format!(
                    "no single worker offers all of the MCP servers {} together",
                    needs.join(", ")
                )
            } else {
                let s = if missing.len() == 1 { "" } else { "s" };
                format!(
                    "no worker of the pool {pool:?} offers the MCP server{s} {}",
                    missing.join(", ")
                )
            };
            return Err(format!(
                "{what} (MCP servers offered there: {offered}), so nothing was summoned. \
                 Leave needs out, or tell the human which server to add to a worker."
            ));
        }
    }
    Ok(Target {
        pool,
        runtime,
        needs,
        directed,
        lane,
        strategy: output.strategy.unwrap_or_default(),
        briefs,
        escalation: risk.escalation,
    })
}

#[cfg(test)]
mod tests;
