//! A team survives the loss of a member's worker (#21, faults): kill -9
//! the worker process running member II… of a parallel team in the middle
//! of its model call; another worker of the pool takes the member over, the
//! team completes, and the Arbiter gets every member's report once, in one
//! input; the log holds each member's report exactly once.

use crate::common;

use arbiter_protocol::LogBody;
use arbiter_tests::{Gate, MockReply, eventually};
use common::*;
use serde_json::{Value, json};

/// The Orchestrators a worker runs now (its presence endpoint).
async fn running_on(sys: &System, worker: &str) -> Vec<String> {
    let Ok(reply) = sys
        .bus
        .client
        .request(
            arbiter_worker::presence::presence_subject(worker),
            "".into(),
        )
        .await
    else {
        return Vec::new();
    };
    let presence: Value = serde_json::from_slice(&reply.payload).unwrap();
    serde_json::from_value(presence["orchestrators"].clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_worker_is_killed_resumes_elsewhere_and_the_team_reports_once() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    // Four workers of one slot: three members at once, one worker spare
    // for the takeover.
    let mut workers: Vec<(String, tokio::process::Child)> = (1..=4)
        .map(|i| {
            let id = format!("fault-worker-{i}");
            let child = sys.worker_process(&id, 1);
            (id, child)
        })
        .collect();
    for (id, _) in &workers {
        sys.worker_up(id).await;
    }
    let s = "s-team-fault";
    let log = sys.watch_log(s).await;
    let human = "Write the three parts at once";
    let arb = arbiter_lane(human);
    let parts = ["Write a.txt.", "Write b.txt.", "Write c.txt."];
    sys.mock.push(
        &arb,
        MockReply::json(&json!({
            "intent": "summon_orchestrator",
            "message": "Write the three parts.",
            "strategy": "parallel",
            "briefs": parts,
        })),
    );
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "All three are written."),
    );
    sys.send(s, human).await;

    let members = summoned(&log, 3).await;
    let files = ["a.txt", "b.txt", "c.txt"];
    // Every member's first call is held: the victim dies with its call open.
    let hold = Gate::new();
    for (i, member) in members.iter().enumerate() {
        let lane = orch_lane(&member.brief);
        let write = || {
            MockReply::tool_use(
                "write",
                json!({"path": files[i], "content": format!("part {}\n", i + 1)}),
            )
        };
        sys.mock.push(&lane, write().gated(hold.clone()));
        if i == 1 {
            // The takeover makes member 2's first call again.
            sys.mock.push(&lane, write());
        }
        sys.mock
            .push(&lane, orch(true, &format!("{} is written.", files[i])));
    }
    for member in &members {
        sys.mock
            .wait_for_requests(&orch_lane(&member.brief), 1, WAIT)
            .await;
    }

    // kill -9 the worker that runs member 2.
    let victim = &members[1];
    let at = eventually(WAIT, "the worker running member 2", || async {
        for (i, (id, _)) in workers.iter().enumerate() {
            if running_on(&sys, id).await.contains(&victim.orch_id) {
                return Some(i);
            }
        }
        None
    })
    .await;
    let (victim_worker, mut child) = workers.remove(at);
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    hold.open();

    // Another worker takes member 2 over and makes its call again.
    let lane = orch_lane(&victim.brief);
    sys.mock.wait_for_requests(&lane, 3, WAIT * 2).await;
    let taken_by = eventually(WAIT, "member 2 running on another worker", || async {
        for (id, _) in &workers {
            if running_on(&sys, id).await.contains(&victim.orch_id) {
                return Some(id.clone());
            }
        }
        None
    })
    .await;
    assert_ne!(taken_by, victim_worker);

    // The team's one input: every report once, each tagged with its member.
    let requests = sys.mock.wait_for_requests(&arb, 2, WAIT * 2).await;
    let team_input = requests[1].body.to_string();
    for (i, file) in files.iter().enumerate() {
        let report = format!("{file} is written.");
        assert_eq!(
            team_input.matches(&report).count(),
            1,
            "member {}'s report once in the team input: {team_input}",
            i + 1
        );
        assert!(team_input.contains(&format!("Orchestrator I.{}", i + 1)));
    }
    // The log: each member's report exactly once, none lost.
    eventually(WAIT, "the team released", || async {
        log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Released(_)))
            .then_some(())
    })
    .await;
    let bodies = log.bodies();
    for m in 1..=3u32 {
        let reports = bodies
            .iter()
            .filter(|b| matches!(b, LogBody::Orchestrator(o) if o.member == Some(m) && o.expects_response))
            .count();
        assert_eq!(reports, 1, "member {m}'s report in the log: {bodies:#?}");
    }
    // Member 2's file is in its own workspace, written by the takeover.
    let written = sys.workspaces.path().join(format!("{s}.m2")).join("b.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "part 2\n");
}
