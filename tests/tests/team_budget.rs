//! The session's budget covers a whole team (#21, limits): with a cap on
//! each Orchestrator and one on the session, a parallel team whose members
//! could together spend more than the session has left is refused back to
//! the Arbiter with the figures, and nothing starts; a team that fits goes.

use crate::common;

use arbiter_protocol::{Cap, LogBody};
use arbiter_tests::MockReply;
use common::*;
use serde_json::json;

fn usd(dollars: u64) -> Option<u64> {
    Some(dollars * 1_000_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_that_could_pass_the_sessions_budget_is_refused_before_any_member_starts() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let mut config = sys.coordinator_config();
    // $5 for each Orchestrator, $12 for the session: two fit, three do not.
    config.budget.orchestrator = Cap {
        cost_nanos: usd(5),
        tokens: None,
    };
    config.budget.session = Cap {
        cost_nanos: usd(12),
        tokens: None,
    };
    sys.spawn_coordinator_with(config);
    let s = "s-team-budget";
    let log = sys.watch_log(s).await;
    let human = "Split the work three ways";
    let arb = arbiter_lane(human);
    let team = |n: usize| {
        MockReply::json(&json!({
            "intent": "summon_orchestrator",
            "message": "Write the parts.",
            "strategy": "parallel",
            "briefs": (1..=n).map(|k| format!("Write part {k}.")).collect::<Vec<_>>(),
        }))
    };
    sys.mock.push(&arb, team(3));
    // Told why, the Arbiter asks for two.
    sys.mock.push(&arb, team(2));
    sys.send(s, human).await;

    let requests = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    // What the Arbiter is told, with the figures.
    let told = requests[1].body.to_string();
    assert!(
        told.contains(
            "a team of 3 at up to $5.00 each could spend $15.00 in all, more than the session \
             has left ($12.00 of $12.00)"
        ),
        "{told}"
    );
    // The team of two goes; the team of three never started.
    eventually_members(&log, 2).await;
    let bodies = log.bodies();
    assert!(
        bodies.iter().any(|b| matches!(b, LogBody::Strategy(e)
            if e.rejected.as_deref().is_some_and(|r| r.contains("a team of 3 at up to $5.00")))),
        "the refusal is on the record: {bodies:#?}"
    );
}

async fn eventually_members(log: &LogWatch, n: usize) {
    arbiter_tests::eventually(WAIT, "the team's members summoned", || async {
        let members = log
            .bodies()
            .iter()
            .filter(|b| matches!(b, LogBody::Summoned(_)))
            .count();
        (members >= n).then_some(())
    })
    .await;
    let members = log
        .bodies()
        .iter()
        .filter(|b| matches!(b, LogBody::Summoned(_)))
        .count();
    assert_eq!(members, n, "only the team that fits started");
}
