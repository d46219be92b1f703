//! Presence and pools end to end: a worker is a NATS micro service
//! (`$SRV.PING|INFO|STATS.arbiter-worker`) that reports its pool and slots,
//! and it takes only its own pool's summons.

use crate::common;
use crate::direct;

use arbiter_tests::{Gate, eventually};
use arbiter_worker::WorkerPresence;
use arbiter_worker::presence::{SERVICE_NAME, presence_subject};
use common::*;
use direct::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_answers_ping_info_and_stats_with_its_pool_and_slots() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-gpu-1", 3, 200_000);
    config.pool = "gpu".into();
    sys.spawn_worker_with(config);
    let version = env!("CARGO_PKG_VERSION");

    let ping = srv(&sys, "PING").await;
    assert_eq!(ping["type"], "io.nats.micro.v1.ping_response");
    assert_eq!(ping["name"], SERVICE_NAME);
    assert_eq!(ping["version"], version);
    assert_eq!(ping["metadata"]["pool"], "gpu");
    assert_eq!(ping["metadata"]["worker_id"], "worker-gpu-1");
    assert_eq!(ping["metadata"]["slots_total"], "3");
    assert_eq!(ping["metadata"]["runtime"], "native");

    let info = srv(&sys, "INFO").await;
    assert_eq!(info["type"], "io.nats.micro.v1.info_response");
    assert_eq!(info["id"], ping["id"]);
    assert_eq!(info["metadata"], ping["metadata"]);
    assert_eq!(info["endpoints"][0]["name"], "presence");
    assert_eq!(
        info["endpoints"][0]["subject"],
        presence_subject("worker-gpu-1")
    );

    let stats = srv(&sys, "STATS").await;
    assert_eq!(stats["type"], "io.nats.micro.v1.stats_response");
    assert_eq!(stats["version"], version);
    let idle = WorkerPresence {
        worker_id: "worker-gpu-1".into(),
        pool: "gpu".into(),
        slots_total: 3,
        slots_used: 0,
        slots_free: 3,
        orchestrators: vec![],
        parked: vec![],
    };
    assert_eq!(presence(&sys).await, idle);

    // A summons to another pool stays queued; one to `gpu` takes a slot.
    let hold = Gate::new();
    sys.mock.push(
        &orch_lane("GPU work."),
        orch(true, "On it.").gated(hold.clone()),
    );
    summon(
        &sys,
        "default",
        "s-elsewhere",
        "o-elsewhere",
        "Default work.",
    )
    .await;
    summon(&sys, "gpu", "s-gpu", "o-gpu", "GPU work.").await;
    let busy = eventually(WAIT, "the gpu summons to take a slot", || async {
        Some(presence(&sys).await).filter(|p| p.slots_used == 1)
    })
    .await;
    assert_eq!(
        busy,
        WorkerPresence {
            slots_used: 1,
            slots_free: 2,
            orchestrators: vec!["o-gpu".into()],
            ..idle.clone()
        }
    );
    // The endpoint answers the same, addressed to this worker alone.
    let direct = sys
        .bus
        .client
        .request(presence_subject("worker-gpu-1"), "".into())
        .await
        .unwrap();
    let answered: WorkerPresence = serde_json::from_slice(&direct.payload).unwrap();
    assert_eq!(answered, busy);
    let stream = sys
        .bus
        .js
        .get_stream(arbiter_protocol::subjects::SUMMONS_STREAM)
        .await
        .unwrap();
    let waiting = stream
        .get_last_raw_message_by_subject(&arbiter_protocol::subjects::summon("default"))
        .await;
    assert!(
        waiting.is_ok(),
        "the default pool's summons must still be queued"
    );
    assert!(
        sys.mock
            .requests_for(&orch_lane("Default work."))
            .is_empty()
    );
    hold.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_no_worker_can_take_is_told_and_runs_once_a_worker_starts() {
    let mut sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let s = "s-no-worker";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build it");
    let brief = "Build it.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&lane, orch(true, "Built."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    // A worker of another pool does not count.
    let mut gpu = sys.worker_config("w-gpu", 1, 200_000);
    gpu.pool = "gpu".into();
    sys.spawn_worker_with(gpu);
    worker_ready(&sys, "w-gpu").await;

    sys.send(s, "Build it").await;
    // What the user sees while nobody can take the summons.
    log.wait_len(3).await;
    sys.spawn_worker_with(sys.worker_config("w1", 1, 200_000));
    sys.settled(s, 6).await;
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Build it"),
            pair("Summoned Orchestrator I", brief),
            pair(
                "System",
                "No worker of pool default answered: Orchestrator I waits in the queue until \
                 one is up (arbiter-worker --pool default)."
            ),
            pair("Orchestrator I", "Built."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );
    // The notice is for the human: the Arbiter was not told.
    let requests = sys.mock.requests_for(&arb);
    assert!(requests.iter().all(|r| !r.all_text().contains("No worker")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_notice_when_a_worker_of_the_pool_is_up() {
    let sys = System::start().await;
    let s = "s-worker-up";
    let log = sys.watch_log(s).await;
    worker_ready(&sys, "worker-0").await;
    let arb = arbiter_lane("Build it");
    let brief = "Build it.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    // The Orchestrator's model call hangs: it is running, nothing else happens.
    let hold = Gate::new();
    sys.mock
        .push(&orch_lane(brief), orch(true, "Built.").gated(hold.clone()));
    sys.send(s, "Build it").await;
    sys.mock.wait_for_requests(&orch_lane(brief), 1, WAIT).await;
    // Longer than the ping's window.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Build it"),
            pair("Summoned Orchestrator I", brief)
        ]
    );
    hold.open();
}
