//! Routing beyond the happy path, end to end: two sessions side by side
//! never see each other's messages or files. What the coordinator decides
//! from its inputs (re-summoning, late output, input mid-turn, refused
//! intents, musings, question-left reminders) is in its table tests.

use crate::common;

use arbiter_tests::MockReply;
use common::*;
use pretty_assertions::assert_eq;

// Decisions tested as table cases in coordinator/src/rules/tests/routing.rs.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_at_once_never_see_each_others_messages() {
    let sys = System::start().await;
    let names = ["alpha", "beta"];
    let mut logs = Vec::new();
    for name in names {
        let first = format!("{name}: build the {name} service");
        let brief = format!("Brief {name}: build the {name} service.");
        let arb = arbiter_lane(&first);
        sys.mock.push(&arb, arbiter("summon_orchestrator", &brief));
        sys.mock.push(
            &orch_lane(&brief),
            MockReply::tool_use(
                "write",
                serde_json::json!({"path": "owner.txt", "content": name}),
            ),
        );
        sys.mock
            .push(&orch_lane(&brief), orch(true, &format!("{name} done")));
        sys.mock.push(
            &arb,
            arbiter("release_orchestrators", &format!("{name} is finished.")),
        );
        logs.push(sys.watch_log(&format!("s-{name}")).await);
    }
    // Both sessions start at the same moment.
    let (a, b) = tokio::join!(
        sys.send("s-alpha", "alpha: build the alpha service"),
        sys.send("s-beta", "beta: build the beta service"),
    );
    assert_ne!(a, b);
    for name in names {
        sys.settled(&format!("s-{name}"), 5).await;
    }
    for (name, log) in names.iter().zip(&logs) {
        let other = if *name == "alpha" { "beta" } else { "alpha" };
        let bodies = briefs(&log.bodies());
        assert_eq!(bodies.len(), 5, "{bodies:?}");
        assert_eq!(
            bodies[3],
            pair("Released", "I"),
            "each session numbers its own Orchestrators"
        );
        for (_, text) in &bodies {
            assert!(!text.contains(other), "{name} saw {other}: {text}");
        }
        for request in sys.mock.requests() {
            if request.all_text().contains(&format!("{name}: build")) {
                assert!(
                    !request.all_text().contains(other),
                    "{name}'s model request leaked {other}"
                );
            }
        }
        let owner =
            std::fs::read_to_string(sys.workspace(&format!("s-{name}")).join("owner.txt")).unwrap();
        assert_eq!(owner, *name, "each session has its own workspace");
    }
}
