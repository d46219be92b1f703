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
mod tests {
    use super::*;
    use arbiter_protocol::OrchestratorRuntime;

    fn offer(pool: &str, runtime: &str) -> Offer {
        Offer {
            pool: pool.into(),
            runtime: runtime.into(),
            urgent: true,
            mcp: Vec::new(),
        }
    }

    /// A worker of `pool` and `runtime` offering the MCP servers `mcp`.
    fn with_mcp(pool: &str, runtime: &str, mcp: &[&str]) -> Offer {
        Offer {
            mcp: mcp.iter().map(|s| (*s).to_owned()).collect(),
            ..offer(pool, runtime)
        }
    }

    fn summons(brief: &str) -> ArbiterOutput {
        ArbiterOutput::new(ArbiterIntent::SummonOrchestrator, brief)
    }

    #[test]
    fn the_summons_decision_table() {
        let fleet = FleetView::Seen(vec![
            with_mcp("default", "native", &["git"]),
            with_mcp("default", "claude-code", &["github"]),
            offer("review", "native"),
            offer("review", "codex"),
        ]);
        let nobody = FleetView::Seen(Vec::new());
        let with = |f: &dyn Fn(&mut ArbiterOutput)| {
            let mut o = summons("Review the parser.");
            f(&mut o);
            o
        };
        let ok = |pool: &str, runtime: Option<&str>, directed: bool| -> Result<Target, &str> {
            Ok(Target {
                pool: pool.into(),
                runtime: runtime.map(Into::into),
                needs: Vec::new(),
                directed,
                lane: Lane::Queued,
                strategy: SummonStrategy::Solo,
                briefs: vec!["Review the parser.".into()],
                escalation: None,
            })
        };
        let team = |briefs: &[&str]| -> Result<Target, &str> {
            Ok(Target {
                pool: "default".into(),
                runtime: None,
                needs: Vec::new(),
                directed: false,
                lane: Lane::Queued,
                strategy: SummonStrategy::Parallel,
                briefs: briefs.iter().map(|b| (*b).to_owned()).collect(),
                escalation: None,
            })
        };
        let chain = |briefs: &[&str]| -> Result<Target, &str> {
            Ok(Target {
                strategy: SummonStrategy::Sequential,
                ..team(briefs).unwrap()
            })
        };
        let vote = |n: usize| -> Result<Target, &str> {
            Ok(Target {
                strategy: SummonStrategy::Consensus,
                ..team(&vec!["Review the parser."; n]).unwrap()
            })
        };
        let needing = |pool: &str, runtime: Option<&str>, needs: &[&str]| -> Result<Target, &str> {
            Ok(Target {
                needs: needs.iter().map(|n| (*n).to_owned()).collect(),
                ..ok(pool, runtime, true).unwrap()
            })
        };
        let needs = |names: &[&str]| Some(names.iter().map(|n| (*n).to_owned()).collect());
        let cases: Vec<(&str, ArbiterOutput, &FleetView, Result<Target, &str>)> = vec![
            (
                "an MCP server a worker of the pool offers",
                with(&|o| o.needs = needs(&["git"])),
                &fleet,
                needing("default", None, &["git"]),
            ),
            (
                "MCP servers named twice, in any order, count once",
                with(&|o| o.needs = needs(&["github", "github"])),
                &fleet,
                needing("default", None, &["github"]),
            ),
            (
                "an MCP server no worker of the pool offers, named",
                with(&|o| o.needs = needs(&["jira"])),
                &fleet,
                Err(
                    "no worker of the pool \"default\" offers the MCP server jira (MCP servers \
                     offered there: git, github), so nothing was summoned.",
                ),
            ),
            (
                "an MCP server offered only on another runtime than the one named",
                with(&|o| {
                    o.needs = needs(&["github"]);
                    o.runtime = Some(OrchestratorRuntime::Native);
                }),
                &fleet,
                Err(
                    "no worker of the pool \"default\" offers the MCP server github (MCP \
                     servers offered there: git)",
                ),
            ),
            (
                "two servers each offered, but by no one worker",
                with(&|o| o.needs = needs(&["git", "github"])),
                &fleet,
                Err("no single worker offers all of the MCP servers git, github together"),
            ),
            (
                "MCP servers in another pool",
                with(&|o| {
                    o.needs = needs(&["git"]);
                    o.pool = Some("review".into());
                }),
                &fleet,
                Err(
                    "no worker of the pool \"review\" offers the MCP server git (MCP servers \
                     offered there: none)",
                ),
            ),
            (
                "needs when the workers could not be asked: it goes, a worker with them claims it",
                with(&|o| o.needs = needs(&["jira"])),
                &FleetView::Unknown,
                needing("default", None, &["jira"]),
            ),
            (
                "not an MCP server's name",
                with(&|o| o.needs = needs(&["git hub"])),
                &fleet,
                Err("\"git hub\" is not an MCP server's name"),
            ),
            (
                "an empty list of needs is none",
                with(&|o| o.needs = needs(&[])),
                &FleetView::NotAsked,
                ok("default", None, false),
            ),
            (
                "solo, undirected: the coordinator's own pool and runtime",
                summons("Review the parser."),
                &FleetView::NotAsked,
                ok("default", None, false),
            ),
            (
                "solo named explicitly",
                with(&|o| o.strategy = Some(SummonStrategy::Solo)),
                &FleetView::NotAsked,
                ok("default", None, false),
            ),
            (
                "a pool that is served",
                with(&|o| o.pool = Some("review".into())),
                &fleet,
                ok("review", None, true),
            ),
            (
                "a runtime offered in the pool",
                with(&|o| {
                    o.pool = Some("review".into());
                    o.runtime = Some(OrchestratorRuntime::Codex);
                }),
                &fleet,
                ok("review", Some("codex"), true),
            ),
            (
                "the fleet could not be asked: it goes ahead",
                with(&|o| o.pool = Some("elsewhere".into())),
                &FleetView::Unknown,
                ok("elsewhere", None, true),
            ),
            (
                "a pool name that cannot be a subject token",
                with(&|o| o.pool = Some("gpu boxes".into())),
                &fleet,
                Err("\"gpu boxes\" is not a pool name"),
            ),
            (
                "a pool nobody serves",
                with(&|o| o.pool = Some("gpu".into())),
                &fleet,
                Err("no worker serves the pool \"gpu\" (pools served now: default, review)"),
            ),
            (
                "no worker at all",
                with(&|o| o.pool = Some("gpu".into())),
                &nobody,
                Err("no worker serves the pool \"gpu\" (no worker answered at all)"),
            ),
            (
                "a runtime nobody offers in the (own) pool",
                with(&|o| o.runtime = Some(OrchestratorRuntime::Codex)),
                &fleet,
                Err(
                    "no worker of the pool \"default\" offers the runtime \"codex\" (runtimes offered there: claude-code, native)",
                ),
            ),
            (
                "parallel with a count: each member gets the whole message",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.count = Some(3);
                }),
                &FleetView::NotAsked,
                team(&["Review the parser."; 3]),
            ),
            (
                "parallel with sub-briefs: one member each",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.briefs = Some(vec!["Lexer.".into(), "Parser.".into()]);
                }),
                &FleetView::NotAsked,
                team(&["Lexer.", "Parser."]),
            ),
            (
                "parallel with a count that agrees with the sub-briefs",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.count = Some(2);
                    o.briefs = Some(vec!["Lexer.".into(), "Parser.".into()]);
                }),
                &FleetView::NotAsked,
                team(&["Lexer.", "Parser."]),
            ),
            (
                "parallel at the cap",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.count = Some(4);
                }),
                &FleetView::NotAsked,
                team(&["Review the parser."; 4]),
            ),
            (
                "parallel over the cap",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.count = Some(5);
                }),
                &fleet,
                Err("a team of 5 is more than this session may run at once (4 Orchestrators)"),
            ),
            (
                "parallel, a count of 0",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.count = Some(0);
                }),
                &fleet,
                Err("a team of 0 members was asked for (count 0)"),
            ),
            (
                "parallel, an empty list of sub-briefs",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.briefs = Some(Vec::new());
                }),
                &fleet,
                Err("the list of sub-briefs was empty"),
            ),
            (
                "parallel, an empty sub-brief",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.briefs = Some(vec!["Lexer.".into(), " ".into()]);
                }),
                &fleet,
                Err("sub-brief 2 of 2 is empty"),
            ),
            (
                "parallel, a count and sub-briefs that disagree",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Parallel);
                    o.count = Some(3);
                    o.briefs = Some(vec!["Lexer.".into(), "Parser.".into()]);
                }),
                &fleet,
                Err("count 3 and 2 sub-briefs disagree"),
            ),
            (
                "parallel with neither count nor sub-briefs",
                with(&|o| o.strategy = Some(SummonStrategy::Parallel)),
                &fleet,
                Err("a parallel summons needs a count"),
            ),
            (
                "solo with sub-briefs",
                with(&|o| o.briefs = Some(vec!["Lexer.".into()])),
                &fleet,
                Err("count and briefs are for a team"),
            ),
            (
                "solo with a count of 1 is solo",
                with(&|o| o.count = Some(1)),
                &FleetView::NotAsked,
                ok("default", None, false),
            ),
            (
                "consensus without a count: three members on the one question",
                with(&|o| o.strategy = Some(SummonStrategy::Consensus)),
                &FleetView::NotAsked,
                vote(3),
            ),
            (
                "consensus of 4",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Consensus);
                    o.count = Some(4);
                }),
                &FleetView::NotAsked,
                vote(4),
            ),
            (
                "consensus over the cap",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Consensus);
                    o.count = Some(5);
                }),
                &FleetView::NotAsked,
                Err("a team of 5 is more than this session may run at once (4 Orchestrators)"),
            ),
            (
                "consensus of 1",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Consensus);
                    o.count = Some(1);
                }),
                &FleetView::NotAsked,
                Err("a consensus of 1 was asked for (count 1), so nothing was summoned."),
            ),
            (
                "consensus with sub-briefs",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Consensus);
                    o.briefs = Some(vec!["Ship?".into(), "Hold?".into()]);
                }),
                &FleetView::NotAsked,
                Err("a consensus asks every member the same question"),
            ),
            (
                "sequential: one link per brief, longer than the cap",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Sequential);
                    o.briefs = Some(vec!["Plan.".into(); 5]);
                }),
                &FleetView::NotAsked,
                chain(&["Plan."; 5]),
            ),
            (
                "sequential without briefs",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Sequential);
                    o.count = Some(3);
                }),
                &fleet,
                Err("a sequential summons needs briefs"),
            ),
            (
                "sequential, an empty list of links",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Sequential);
                    o.briefs = Some(Vec::new());
                }),
                &fleet,
                Err("the list of links was empty"),
            ),
            (
                "sequential, an empty link",
                with(&|o| {
                    o.strategy = Some(SummonStrategy::Sequential);
                    o.briefs = Some(vec!["Plan.".into(), "".into(), "Review.".into()]);
                }),
                &fleet,
                Err("link 2 of 3 has an empty brief"),
            ),
            (
                "an empty brief, whatever else it says",
                {
                    let mut o = summons("  ");
                    o.pool = Some("review".into());
                    o
                },
                &fleet,
                Err("a summons needs a brief, and the message was empty."),
            ),
        ];
        for (name, output, fleet, want) in cases {
            let got = summons_target(&output, "default", None, fleet, 4, 0);
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "{name}"),
                (Err(want), Err(got)) => {
                    assert!(got.starts_with(want), "{name}: {got}");
                }
                (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn an_emergency_takes_the_urgent_lane_only_where_a_worker_serves_it() {
        let mut older = offer("default", "native");
        older.urgent = false;
        let serving = FleetView::Seen(vec![offer("default", "native")]);
        let not_serving = FleetView::Seen(vec![older]);
        let mut urgent = summons("Production is down: roll back the deploy.");
        urgent.emergency = Some(true);
        let cases = [
            ("a worker serves the lane", &urgent, &serving, Lane::Urgent),
            (
                "only workers that do not say they serve it",
                &urgent,
                &not_serving,
                Lane::UrgentUnserved,
            ),
            (
                "the fleet could not be asked",
                &urgent,
                &FleetView::Unknown,
                Lane::UrgentUnserved,
            ),
            (
                "no emergency",
                &summons("Tidy the docs."),
                &serving,
                Lane::Queued,
            ),
        ];
        for (name, output, fleet, want) in cases {
            let got = summons_target(output, "default", None, fleet, 4, 0).unwrap();
            assert_eq!(got.lane, want, "{name}");
            assert!(!got.directed, "{name}: an emergency alone directs nothing");
        }
        assert!(FleetView::wanted(&urgent), "an emergency asks the fleet");
    }

    #[test]
    fn the_coordinators_runtime_is_the_default_and_a_named_one_wins() {
        let fleet = FleetView::Seen(vec![
            offer("default", "claude-code"),
            offer("default", "native"),
        ]);
        let plain = summons("Go.");
        let got = summons_target(
            &plain,
            "default",
            Some("claude-code"),
            &FleetView::NotAsked,
            4,
            0,
        );
        assert_eq!(got.unwrap().runtime.as_deref(), Some("claude-code"));
        let mut named = summons("Go.");
        named.runtime = Some(OrchestratorRuntime::Native);
        let got = summons_target(&named, "default", Some("claude-code"), &fleet, 4, 0);
        assert_eq!(got.unwrap().runtime.as_deref(), Some("native"));
    }

    #[test]
    fn the_risk_decision_table() {
        use SummonStrategy::{Consensus, Parallel, Solo};
        let summons = |f: &dyn Fn(&mut ArbiterOutput)| {
            let mut o = summons("Migrate the billing database.");
            f(&mut o);
            o
        };
        let to = |strategy: Option<SummonStrategy>,
                  count: Option<u32>,
                  escalation: Option<Escalation>|
         -> Result<RiskDecision, &str> {
            Ok(RiskDecision {
                strategy,
                count,
                escalation,
            })
        };
        let escalated = Some(Escalation::Escalated { threshold: 8 });
        let skip = Some(ConsensusChoice::Skip);
        let force = Some(ConsensusChoice::Force);
        // Name, the summons, the threshold, what it becomes.
        let cases: Vec<(&str, ArbiterOutput, u8, Result<RiskDecision, &str>)> = vec![
            ("no risk given", summons(&|_| {}), 8, to(None, None, None)),
            (
                "risk below the threshold",
                summons(&|o| o.risk = Some(7)),
                8,
                to(None, None, None),
            ),
            (
                "risk at the threshold: a consensus of 3",
                summons(&|o| o.risk = Some(8)),
                8,
                to(Some(Consensus), None, escalated),
            ),
            (
                "risk 9, named solo: a consensus of 3",
                summons(&|o| {
                    o.risk = Some(9);
                    o.strategy = Some(Solo);
                }),
                8,
                to(Some(Consensus), None, escalated),
            ),
            (
                "risk 10 with the policy off",
                summons(&|o| o.risk = Some(10)),
                0,
                to(None, None, None),
            ),
            (
                "risk 9 on a parallel team: left as it is",
                summons(&|o| {
                    o.risk = Some(9);
                    o.strategy = Some(Parallel);
                    o.count = Some(2);
                }),
                8,
                to(Some(Parallel), Some(2), None),
            ),
            (
                "risk 9, the human said skip: solo",
                summons(&|o| {
                    o.risk = Some(9);
                    o.consensus = skip;
                }),
                8,
                to(None, None, Some(Escalation::KeptSolo)),
            ),
            (
                "risk 2, the human asked for a second opinion: a consensus of 3",
                summons(&|o| {
                    o.risk = Some(2);
                    o.consensus = force;
                }),
                8,
                to(Some(Consensus), None, Some(Escalation::Forced)),
            ),
            (
                "forced with the policy off",
                summons(&|o| o.consensus = force),
                0,
                to(Some(Consensus), None, Some(Escalation::Forced)),
            ),
            (
                "forced on a consensus of 5 keeps its count",
                summons(&|o| {
                    o.consensus = force;
                    o.strategy = Some(Consensus);
                    o.count = Some(5);
                }),
                8,
                to(Some(Consensus), Some(5), Some(Escalation::Forced)),
            ),
            (
                "a consensus the human said to skip",
                summons(&|o| {
                    o.consensus = skip;
                    o.strategy = Some(Consensus);
                }),
                8,
                Err("the human said to skip consensus, and the summons asks for one"),
            ),
            (
                "forced on a parallel team",
                summons(&|o| {
                    o.consensus = force;
                    o.strategy = Some(Parallel);
                    o.count = Some(2);
                }),
                8,
                Err(
                    "the human asked for a consensus (consensus: force), and the summons asks for strategy parallel",
                ),
            ),
            (
                "risk off the scale",
                summons(&|o| o.risk = Some(11)),
                8,
                Err("risk 11 is not on the scale of 1 to 10"),
            ),
            (
                "complexity off the scale",
                summons(&|o| o.complexity = Some(0)),
                8,
                Err("complexity 0 is not on the scale of 1 to 10"),
            ),
        ];
        for (name, output, threshold, want) in cases {
            match (want, risk_decision(&output, threshold)) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "{name}"),
                (Err(want), Err(got)) => assert!(got.starts_with(want), "{name}: {got}"),
                (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
        // Through the whole summons decision: risk 9 starts three members.
        let mut risky = summons(&|o| o.risk = Some(9));
        let target = summons_target(&risky, "default", None, &FleetView::NotAsked, 4, 8).unwrap();
        assert_eq!(target.strategy, Consensus);
        assert_eq!(target.briefs.len(), 3);
        risky.consensus = skip;
        let target = summons_target(&risky, "default", None, &FleetView::NotAsked, 4, 8).unwrap();
        assert_eq!((target.strategy, target.briefs.len()), (Solo, 1));
    }
}
