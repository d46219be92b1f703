//! What a session costs, added up from the usage each model request reported
//! and the price table: per request, per Orchestrator (its subagent's
//! requests included), per Arbiter, per session. Stored with the session's
//! records, so a coordinator restart keeps the figures, and shown by
//! `arbiter-console sessions`.

use crate::common;

use arbiter_protocol::{SessionSpend, Spend};
use arbiter_tests::MockReply;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const BRIEF: &str = "Brief: write hello.txt saying hello, and have a subagent check it.";
const SUB_PROMPT: &str = "Read hello.txt and say what it holds.";
const HUMAN: &str = "Build me a greeting";

/// Dollars per million tokens (input, output, cache write, cache read) the
/// test's config file gives the mock models.
const PRICES: [(&str, [&str; 4]); 3] = [
    (ARBITER_MODEL, ["1", "5", "1.25", "0.1"]),
    (ORCH_MODEL, ["3", "15", "3.75", "0.3"]),
    (SUB_MODEL, ["0.25", "1.25", "0.3", "0.025"]),
];

fn config_file() -> String {
    PRICES
        .iter()
        .map(|(model, [i, o, w, r])| {
            format!(
                "[prices.\"{model}\"]\ninput = {i}\noutput = {o}\ncache_write = {w}\ncache_read = {r}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cost of one request by hand: tokens × dollars per million, in nano-dollars.
fn cost(model: &str, [i, o, w, r]: [u64; 4]) -> u64 {
    let (_, usd) = PRICES.iter().find(|(m, _)| *m == model).unwrap();
    let nanos_per_token = |usd: &str| (usd.parse::<f64>().unwrap() * 1000.0).round() as u64;
    i * nanos_per_token(usd[0])
        + o * nanos_per_token(usd[1])
        + w * nanos_per_token(usd[2])
        + r * nanos_per_token(usd[3])
}

fn spend_of(requests: &[(&str, [u64; 4])]) -> Spend {
    let mut spend = Spend::default();
    for (model, usage) in requests {
        spend.record(Some(*usage), Some(cost(model, *usage)));
    }
    spend
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_add_up_per_request_orchestrator_arbiter_and_session_and_survive_a_restart() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("arbiter.toml");
    std::fs::write(&file, config_file()).unwrap();
    // The worker reads the same table (in-process here: from the same file).
    let mut worker = sys.worker_config("worker-0", 2, 200_000);
    worker.prices = arbiter_llm::ConfigFile::load(&file).unwrap().price_table();
    sys.spawn_worker_with(worker);
    let env = [("ARBITER_CONFIG", file.as_os_str())];
    let mut coordinator = sys.coordinator_process_with(&env);

    let s = "s-cost";
    let arb = arbiter_lane(HUMAN);
    let orch_l = orch_lane(BRIEF);
    let sub = sub_lane(SUB_PROMPT);
    let a1 = [1100, 51, 200, 0];
    let o1 = [2100, 61, 300, 0];
    let o2 = [2200, 62, 0, 300];
    let s1 = [3100, 71, 7, 13];
    let o3 = [2300, 63, 0, 300];
    let a2 = [1200, 52, 0, 40];
    let with = |reply: MockReply, [i, o, w, r]: [u64; 4]| reply.usage(i, o, w, r);
    sys.mock
        .push(&arb, with(arbiter("summon_orchestrator", BRIEF), a1));
    sys.mock.push(
        &orch_l,
        with(
            MockReply::tool_use("write", json!({"path": "hello.txt", "content": "hello\n"})),
            o1,
        ),
    );
    sys.mock.push(
        &orch_l,
        with(
            MockReply::tool_use(
                "task",
                json!({"description": "check", "prompt": SUB_PROMPT}),
            ),
            o2,
        ),
    );
    sys.mock
        .push(&sub, with(MockReply::text("It says hello."), s1));
    sys.mock
        .push(&orch_l, with(orch(true, "Wrote hello.txt."), o3));
    sys.mock.push(
        &arb,
        with(arbiter("release_orchestrators", "It is done."), a2),
    );
    sys.send(s, HUMAN).await;
    let status = sys.settled(s, 5).await;

    let orchestrator = spend_of(&[
        (ORCH_MODEL, o1),
        (ORCH_MODEL, o2),
        (SUB_MODEL, s1),
        (ORCH_MODEL, o3),
    ]);
    let arbiter_spend = spend_of(&[(ARBITER_MODEL, a1), (ARBITER_MODEL, a2)]);
    let orch_id = status.spend.orchestrators[0].orch_id.clone();
    let want = SessionSpend {
        total: arbiter_spend.plus(&orchestrator),
        arbiter: arbiter_spend,
        orchestrators: vec![arbiter_protocol::OrchestratorSpend {
            orch_id: orch_id.clone(),
            number: 1,
            spend: orchestrator,
        }],
    };
    assert_eq!(status.spend, want);
    // The figures by hand, once: 4 Orchestrator requests (one its
    // subagent's), 2 Arbiter requests.
    assert_eq!(want.total.requests, 6);
    assert_eq!(
        want.total.cost_nanos,
        [
            cost(ARBITER_MODEL, a1),
            cost(ARBITER_MODEL, a2),
            cost(ORCH_MODEL, o1),
            cost(ORCH_MODEL, o2),
            cost(ORCH_MODEL, o3),
            cost(SUB_MODEL, s1),
        ]
        .iter()
        .sum::<u64>()
    );
    assert!(want.total.cost_known());

    // `arbiter-console sessions` shows the same, in the table and as JSON.
    let listed = console_sessions(&sys, true).await;
    let line = listed.lines().find(|l| l.contains(s)).unwrap();
    let json: arbiter_protocol::SessionStatus = serde_json::from_str(line).unwrap();
    assert_eq!(json.spend, want);
    let table = console_sessions(&sys, false).await;
    let row = table.lines().find(|l| l.starts_with(s)).unwrap();
    assert!(row.contains(&want.total.cost_text()), "{table}");
    assert!(table.starts_with("SESSION"), "{table}");
    assert!(table.lines().next().unwrap().contains("COST"), "{table}");

    // A restart keeps the figures: they come back from the session's
    // records, and the next request adds to them.
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let _coordinator = sys.coordinator_process_with(&env);
    let a3 = [900, 20, 0, 1000];
    sys.mock
        .push(&arb, with(arbiter("address_human", "Still here."), a3));
    sys.send(s, "Are you there?").await;
    let status = sys.settled(s, 7).await;
    let arbiter_spend = spend_of(&[
        (ARBITER_MODEL, a1),
        (ARBITER_MODEL, a2),
        (ARBITER_MODEL, a3),
    ]);
    assert_eq!(status.spend.arbiter, arbiter_spend);
    assert_eq!(status.spend.orchestrators, want.orchestrators);
    assert_eq!(status.spend.total, arbiter_spend.plus(&orchestrator));
}

/// A model with no price: its tokens are counted, its cost is unknown,
/// never a made-up number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_a_price_shows_tokens_and_an_unknown_cost() {
    let sys = System::start().await;
    let s = "s-cost-unknown";
    sys.mock.push(
        &arbiter_lane("Hello"),
        arbiter("address_human", "Hi.").usage(100, 20, 0, 0),
    );
    sys.send(s, "Hello").await;
    let status = sys.settled(s, 2).await;
    let arbiter_spend = status.spend.arbiter;
    assert_eq!(arbiter_spend.requests, 1);
    assert_eq!(arbiter_spend.tokens(), 120);
    assert_eq!(arbiter_spend.unpriced, 1);
    assert_eq!(arbiter_spend.cost_nanos, 0);
    assert_eq!(status.spend.total.cost_text(), "cost unknown");
    let table = console_sessions(&sys, false).await;
    let row = table.lines().find(|l| l.starts_with(s)).unwrap();
    assert!(row.contains("120") && row.contains("cost unknown"), "{row}");
}

async fn console_sessions(sys: &System, json: bool) -> String {
    let mut command = tokio::process::Command::new(arbiter_tests::bin("arbiter-console"));
    command
        .env_clear()
        .envs(sys.nats_env("console"))
        .arg("sessions");
    if json {
        command.arg("--json");
    }
    let output = command.output().await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
