//! The three real binaries together, as a user runs them: coordinator and
//! worker as processes, a console fed from stdin. Their logs must show every
//! malformed message they rejected, and never the API key.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use arbiter_protocol::subjects;
use arbiter_tests::{MockAnthropic, MockReply, NatsServer, bin};
use common::{API_KEY, arbiter, lane_of, orch};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

fn spawn(name: &str, nats: &NatsServer, mock: &MockAnthropic, extra: &[(&str, &str)]) -> Child {
    let mut command = Command::new(bin(name));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NATS_URL", nats.url())
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("RUST_LOG", "debug,async_nats=info,hyper=info,reqwest=info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in extra {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// Stops a service with `signal` (`INT` is what Ctrl-C sends; `TERM` what
/// `docker stop`, systemd and Kubernetes send) and returns its stderr.
async fn interrupt(child: Child, signal: &str) -> (std::process::ExitStatus, String) {
    let pid = child.id().unwrap().to_string();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .await
        .unwrap();
    assert!(sent.success());
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the service stops within 10 s of the signal")
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_worker_and_console_binaries_hold_a_conversation() {
    arbiter_tests::init_tracing();
    let nats = NatsServer::start().await;
    let mock = MockAnthropic::start().await;
    mock.set_lane_fn(lane_of);
    let workspaces = tempfile::tempdir().unwrap();
    let root = workspaces.path().to_str().unwrap().to_owned();
    let coordinator = spawn(
        "arbiter-coordinator",
        &nats,
        &mock,
        &[("ARBITER_MODEL", "anthropic:mock-arbiter")],
    );
    let worker = spawn(
        "arbiter-worker",
        &nats,
        &mock,
        &[
            ("ORCHESTRATOR_MODEL", "anthropic:mock-orch"),
            ("ARBITER_WORKSPACE_ROOT", &root),
            ("ARBITER_MAX_ORCHESTRATORS", "2"),
        ],
    );

    // Garbage on the subjects each service consumes, before any real traffic.
    let js = nats.jetstream().await;
    let garbage = [
        (subjects::session_human("s-bin-junk"), "{{{"),
        (subjects::summon("default"), "not a summons"),
        (subjects::orch_out("ghost"), "{\"event\":7}"),
    ];
    // The streams exist once the services are up: all of them, since the
    // garbage goes to three (the coordinator creates them one by one).
    arbiter_tests::eventually(Duration::from_secs(20), "the streams", || async {
        for config in arbiter_bus::setup::stream_configs() {
            js.get_stream(&config.name).await.ok()?;
        }
        Some(())
    })
    .await;
    for (subject, payload) in garbage {
        js.publish(subject, payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    let s = "s-binaries";
    let brief = "Brief: write hello.txt saying hello.";
    let arb = "mock-arbiter:Build me a greeting".to_owned();
    let orch_lane = format!("mock-orch:{brief}");
    mock.push(&arb, arbiter("summon_orchestrator", brief));
    mock.push(
        &orch_lane,
        MockReply::tool_use("write", json!({"path": "hello.txt", "content": "hello\n"})),
    );
    mock.push(&orch_lane, orch(true, "Wrote hello.txt."));
    mock.push(&arb, arbiter("release_orchestrators", "It is done."));

    let mut console = Command::new(bin("arbiter-console"))
        .args(["--plain", "--session", s, "--nats-url", nats.url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = console.stdin.take().unwrap();
    stdin.write_all(b"Build me a greeting\n").await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), console.wait_with_output())
        .await
        .expect("the console exits once the session settles")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "console failed: {stderr}");
    assert_eq!(
        stdout,
        format!(
            "You: Build me a greeting\n\
             · Orchestrator I summoned: {brief}\n\
             Orchestrator I: Wrote hello.txt.\n\
             · Evidence: 1 tool call (write 1), 1 file changed (created: hello.txt)\n\
             · Orchestrator I released.\n\
             Arbiter: It is done.\n"
        )
    );
    assert!(
        stderr.contains(&format!("resume: arbiter-console --session {s}")),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(workspaces.path().join(s).join("hello.txt")).unwrap(),
        "hello\n"
    );

    // Both services stop cleanly on Ctrl-C and on SIGTERM, and their logs
    // tell what they rejected.
    let (status, coordinator_log) = interrupt(coordinator, "INT").await;
    assert!(status.success(), "coordinator: {coordinator_log}");
    let (status, worker_log) = interrupt(worker, "TERM").await;
    assert!(status.success(), "worker: {worker_log}");
    assert!(
        coordinator_log.contains("malformed human message rejected"),
        "{coordinator_log}"
    );
    assert!(
        coordinator_log.contains("malformed Orchestrator message rejected"),
        "{coordinator_log}"
    );
    assert!(
        worker_log.contains("malformed summons rejected"),
        "{worker_log}"
    );
    assert!(coordinator_log.contains("coordinator shutting down"));
    assert!(worker_log.contains("worker shutting down"));
    for log in [&coordinator_log, &worker_log, &stderr.to_string()] {
        assert!(!log.contains(API_KEY), "the API key reached a log");
    }
    // The key did reach the model API, where it belongs.
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.header("x-api-key") == Some(API_KEY))
    );
}
