//! The Python reference worker (`examples/python-worker`) on a worker
//! credential of the secure deployment: everything protocol.md asks a worker
//! in another language to do (bind the pool, claim, fence, read inputs by
//! direct get of their own subjects, renew, release) is allowed by the
//! `worker` role, over TLS with a client certificate, with the inbox prefix
//! the credential names.

use std::time::Duration;

use arbiter_protocol::LogBody;
use arbiter_tests::eventually;

use crate::common::*;
use crate::conformance::{PYTHON_WORKER, python};

/// What the user sees: the Orchestrator the Python worker runs asks, is
/// answered (an input it can only have read as a log entry: its outputs say
/// `session_inputs`), reports, and is released; the worker says no denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_reference_worker_runs_an_orchestrator_on_a_worker_credential() {
    let sys = System::start_with(Options {
        secure: true,
        workers: 0,
        ..Default::default()
    })
    .await;
    let logs = tempfile::tempdir().unwrap();
    let stderr_path = logs.path().join("python-worker.log");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let _worker = tokio::process::Command::new(python())
        .arg("-u")
        .arg(PYTHON_WORKER)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(sys.nats_env("worker"))
        .env("ANTHROPIC_BASE_URL", sys.mock.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ORCHESTRATOR_MODEL", format!("anthropic:{ORCH_MODEL}"))
        .env("ARBITER_WORKER_ID", "py-1")
        .env("ARBITER_WORKSPACE_ROOT", sys.workspaces.path())
        .env("ARBITER_LEASE_SECS", "2")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let said = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let started = std::time::Instant::now();
    while !said().contains("ready, pool default") {
        assert!(
            started.elapsed() < WAIT,
            "the Python worker did not get ready; it said:\n{}",
            said()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let s = "s-python";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Count the files");
    let brief = "Count the files in the workspace.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock
        .push(&orch_lane(brief), orch(true, "Hidden files too?"));
    sys.mock.push(
        &arb,
        arbiter("address_orchestrator", "Yes, hidden ones too."),
    );
    sys.mock
        .push(&orch_lane(brief), orch(true, "Counted: 0 files."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "There are none."));
    sys.send(s, "Count the files").await;

    log.wait_for(
        "the Orchestrator's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Counted: 0 files."),
    )
    .await;
    log.wait_for("the release", |b| matches!(b, LogBody::Released(_)))
        .await;
    // The answer reached its model: read from `session.<id>.in.<orch>.1`.
    let asked = sys.mock.requests_for(&orch_lane(brief));
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[1].all_text().contains("Yes, hidden ones too."),
        "the second request lacks the answer: {:?}",
        asked[1].all_text()
    );
    // The release is taken: the summons (its lease) is acknowledged.
    eventually(WAIT, "the summons acknowledged", || async {
        (crate::direct::summons_queued(&sys).await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let said = said();
    assert!(
        !said.to_lowercase().contains("permissions violation"),
        "the worker role denied the Python worker something:\n{said}"
    );
    assert!(!said.contains("orchestrator error"), "{said}");
}
