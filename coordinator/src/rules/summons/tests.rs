//! The summons decision's tables: where a summons goes and why one cannot.
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
