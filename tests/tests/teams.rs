//! Teams of Orchestrators (#21): a parallel summons starts several
//! Orchestrators of one session at once, numbered II.1, II.2… on any
//! workers, each in a workspace of its own; their first reports reach the
//! Arbiter together in one input, and every summons decision is in the log
//! as a strategy entry. A coordinator killed while a team works comes back
//! knowing which members have reported. Refused teams, chains and each
//! member's held output are decisions of the coordinator, in its table
//! tests. Consensus teams are in `consensus.rs`, a member's dead worker in
//! `team_faults.rs`.

use crate::common;

use std::time::{Duration, SystemTime};

use arbiter_protocol::LogBody;
use arbiter_tests::{Gate, MockReply, eventually};
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brief_split_three_ways_runs_on_three_workers_at_once_and_reports_as_one_input() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    // Three worker processes of one slot each: three members at once must
    // run on three workers.
    let _workers: Vec<_> = (1..=3)
        .map(|i| sys.worker_process(&format!("team-worker-{i}"), 1))
        .collect();
    for i in 1..=3 {
        sys.worker_up(&format!("team-worker-{i}")).await;
    }
    let s = "s-parallel";
    let log = sys.watch_log(s).await;
    let human = "Build the lexer, the parser and the printer, in parallel";
    let arb = arbiter_lane(human);
    let parts = [
        "Write lexer.txt.",
        "Write parser.txt.",
        "Write printer.txt.",
    ];
    sys.mock.push(
        &arb,
        summons(
            "Build the three parts of the toy compiler.",
            json!({
                "strategy": "parallel",
                "briefs": parts,
                "directive": {"words": human, "parsed": "parallel, 3 members", "confidence": 90}
            }),
        ),
    );
    sys.mock
        .push(&arb, arbiter("address_human", "They are at work."));
    sys.mock.push(
        &arb,
        MockReply::json(&json!({
            "intent": "address_orchestrator",
            "message": "Add a test for the parser.",
            "members": [2]
        })),
    );
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "All three parts are built."),
    );
    sys.send(s, human).await;

    let members = summoned(&log, 3).await;
    let files = ["lexer.txt", "parser.txt", "printer.txt"];
    // Every member's first model call is held until all three have come in:
    // they can only all come in if they run at once.
    let hold = Gate::new();
    for (i, member) in members.iter().enumerate() {
        assert_eq!(member.member, Some(i as u32 + 1));
        assert!(member.brief.contains(parts[i]), "{}", member.brief);
        let lane = orch_lane(&member.brief);
        sys.mock.push(
            &lane,
            MockReply::tool_use(
                "write",
                json!({"path": files[i], "content": format!("part {}\n", i + 1)}),
            )
            .gated(hold.clone()),
        );
        sys.mock
            .push(&lane, orch(true, &format!("{} is written.", files[i])));
    }
    sys.mock.push(
        &orch_lane(&members[1].brief),
        orch(true, "Parser test added."),
    );
    let mut first_calls = Vec::new();
    for member in &members {
        let lane = orch_lane(&member.brief);
        sys.mock.wait_for_requests(&lane, 1, WAIT).await;
        first_calls.push(sys.mock.requests_for(&lane)[0].received_at);
    }
    // All three calls are in flight together, none answered yet.
    assert!(!hold.is_open());
    for member in &members {
        assert_eq!(sys.mock.requests_for(&orch_lane(&member.brief)).len(), 1);
    }
    let (first, last) = (
        *first_calls.iter().min().unwrap(),
        *first_calls.iter().max().unwrap(),
    );
    // From the summons as the coordinator logged it to the last first call.
    let summons_at: SystemTime = log
        .entries()
        .iter()
        .find(|e| matches!(e.body, LogBody::Strategy(_)))
        .expect("a strategy entry")
        .at
        .into();
    eprintln!(
        "figure: the members' first model calls came within {:?} of each other; the last \
         {:?} after the summons",
        last.duration_since(first).unwrap_or_default(),
        last.duration_since(summons_at).unwrap_or_default()
    );

    // A human line while the team works reaches the Arbiter, tagged.
    sys.send(s, "How is it going?").await;
    log.wait_for(
        "the Arbiter's answer to the human",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "They are at work."),
    )
    .await;
    assert_eq!(
        sys.mock.requests_for(&arb)[1].last_user_text(),
        "Human: How is it going?"
    );
    hold.open();

    // The three reports come to the Arbiter in one input, each tagged.
    sys.mock.wait_for_requests(&arb, 3, WAIT).await;
    let team_input = sys.mock.requests_for(&arb)[2].last_user_text();
    assert!(
        team_input.starts_with("The team Orchestrator I (3 members, parallel): 3 of 3 reported."),
        "{team_input}"
    );
    for (i, file) in files.iter().enumerate() {
        assert!(
            team_input.contains(&format!("Orchestrator I.{}: {file} is written.", i + 1)),
            "{team_input}"
        );
    }
    // The Arbiter speaks to member 2 alone; its answer comes on its own.
    log.wait_for(
        "member 2's second report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Parser test added." && o.member == Some(2)),
    )
    .await;
    sys.mock.wait_for_requests(&arb, 4, WAIT).await;
    assert!(
        sys.mock.requests_for(&arb)[3]
            .last_user_text()
            .starts_with("Orchestrator I.2: Parser test added."),
    );
    assert_eq!(
        sys.mock.requests_for(&orch_lane(&members[0].brief)).len(),
        2,
        "member 1 was not addressed"
    );
    log.wait_for(
        "the whole team released",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "All three parts are built."),
    )
    .await;
    let bodies = log.bodies();
    let released: Vec<Option<u32>> = bodies
        .iter()
        .filter_map(|b| match b {
            LogBody::Released(e) => Some(e.member),
            _ => None,
        })
        .collect();
    assert_eq!(released, vec![Some(1), Some(2), Some(3)]);
    // Members 1 and 3 were not addressed after the team's input: that is
    // no question left waiting, and nobody is told so.
    assert!(
        !bodies
            .iter()
            .any(|b| matches!(b, LogBody::System(e) if e.text.contains("waiting for an answer"))),
        "{bodies:?}"
    );
    // The audit trail: the strategy, the directive verbatim.
    let strategy = bodies
        .iter()
        .find_map(|b| match b {
            LogBody::Strategy(e) => Some(e.clone()),
            _ => None,
        })
        .expect("a strategy entry");
    assert_eq!(strategy.number, Some(1));
    assert_eq!(strategy.members, 3);
    assert_eq!(strategy.directive.unwrap().words, human);
    assert_eq!(strategy.rejected, None);

    // Each member's workspace holds its own file and no other.
    for (i, file) in files.iter().enumerate() {
        let dir = sys.workspace(&format!("{s}.m{}", i + 1));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec![file.to_string()], "{}", dir.display());
    }
}

// Decisions tested as table cases in coordinator/src/rules/tests/team.rs.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_while_a_team_works_knows_who_reported_after_restart() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-team-kill";
    let log = sys.watch_log(s).await;
    let human = "Three reviews at once";
    let arb = arbiter_lane(human);
    sys.mock.push(
        &arb,
        summons(
            "Review the code.",
            json!({"strategy": "parallel", "briefs": ["Review a.", "Review b.", "Review c."]}),
        ),
    );
    sys.mock.push(&arb, arbiter("address_human", "Reviewed."));
    let mut coordinator = sys.coordinator_process();
    sys.send(s, human).await;
    let members = summoned(&log, 3).await;
    let later = Gate::new();
    sys.mock
        .push(&orch_lane(&members[0].brief), orch(true, "a is fine."));
    sys.mock.push(
        &orch_lane(&members[1].brief),
        orch(true, "b is fine.").gated(later.clone()),
    );
    sys.mock.push(
        &orch_lane(&members[2].brief),
        orch(true, "c is fine.").gated(later.clone()),
    );
    log.wait_for(
        "member 1's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.member == Some(1)),
    )
    .await;
    // Stored before it was logged: the coordinator dies with one of three in.
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let restarted = chrono::Utc::now();
    let _coordinator = sys.coordinator_process();
    let status = eventually(WAIT, "the restarted coordinator's status", || async {
        sys.status(s)
            .await
            .filter(|st| st.at > restarted && st.team.len() == 3)
    })
    .await;
    let reported: Vec<(Option<u32>, bool)> =
        status.team.iter().map(|m| (m.member, m.reported)).collect();
    assert_eq!(
        reported,
        vec![(Some(1), true), (Some(2), false), (Some(3), false)]
    );
    later.open();
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    let input = sys.mock.requests_for(&arb)[1].last_user_text();
    assert!(
        input.starts_with("The team Orchestrator I (3 members, parallel): 3 of 3 reported."),
        "{input}"
    );
    for text in [
        "Orchestrator I.1: a is fine.",
        "Orchestrator I.2: b is fine.",
        "Orchestrator I.3: c is fine.",
    ] {
        assert_eq!(input.matches(text).count(), 1, "{input}");
    }
    log.wait_for(
        "the Arbiter's answer",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Reviewed."),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The Arbiter was asked once about the team, not once per member.
    assert_eq!(sys.mock.requests_for(&arb).len(), 2);
    // The log, read afresh from the server after the restart: the strategy
    // entry and each member's summons once, no gap and no repeat.
    let replay = sys.watch_log(s).await;
    let entries = eventually(WAIT, "the whole log replayed", || async {
        let entries = replay.entries();
        (entries.len() == log.entries().len()).then_some(entries)
    })
    .await;
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=entries.len() as u64).collect::<Vec<_>>());
    let count = |f: fn(&LogBody) -> bool| entries.iter().filter(|e| f(&e.body)).count();
    assert_eq!(count(|b| matches!(b, LogBody::Strategy(_))), 1);
    assert_eq!(count(|b| matches!(b, LogBody::Summoned(_))), 3);
}
