//! Streams deleted under a running system (only the admin credential may
//! now): the coordinator and the worker stop with one line naming the
//! stream and what to run, instead of retrying a dead consumer for ever.

use std::time::Duration;

use crate::common::*;

async fn stderr_of(child: tokio::process::Child, who: &str) -> (bool, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the {who} still runs 60 s after its streams were deleted (it asks again for arbiter_bus::RIDE_OUT first)"))
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the user sees: each process's last line says that a stream was
/// deleted while it ran, and that restarting the coordinator (or
/// `arbiter-admin setup`) makes the streams again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_streams_end_the_processes_with_a_clear_line_not_a_spin() {
    let sys = System::start_with(Options {
        secure: true,
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut coordinator = tokio::process::Command::new(arbiter_tests::bin("arbiter-coordinator"));
    coordinator
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(sys.nats_env("coordinator"))
        .env("ANTHROPIC_BASE_URL", sys.mock.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let coordinator = coordinator.spawn().unwrap();
    let mut worker = sys.worker_command(None, "worker-d", 1, &[]);
    worker.stderr(std::process::Stdio::piped());
    let worker = worker.spawn().unwrap();
    crate::direct::worker_ready(&sys, "worker-d").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The admin deletes every stream.
    for stream in arbiter_protocol::roles::all_streams() {
        sys.bus.js.delete_stream(&stream).await.unwrap();
    }

    for (child, who) in [(coordinator, "coordinator"), (worker, "worker")] {
        let (success, stderr) = stderr_of(child, who).await;
        assert!(!success, "{who}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("arbiter-{who}: "))
                && last.contains("was deleted while this process ran")
                && last.contains("arbiter-admin setup"),
            "{who}: {stderr}"
        );
        // No spin: a handful of lines, not a retry every second.
        assert!(stderr.lines().count() < 20, "{who}: {stderr}");
    }
}
