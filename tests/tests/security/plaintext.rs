//! A plaintext, anonymous NATS server on another host: a worker in a network
//! namespace, pointed at one on the test network's address, refuses to
//! start and says why; told `--insecure`, it starts and says what that
//! costs. On this machine (every test that runs the binaries against a
//! plain server on 127.0.0.1) the same server is only warned about.

use std::process::Stdio;
use std::time::{Duration, Instant};

use arbiter_bus::{Bus, NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_tests::{MockAnthropic, NatsServer, NetNs, eventually};

use crate::common::*;

/// `arbiter-worker` run in `ns` against `url`, with nothing but a model
/// (on the link, where the namespace reaches it) and a workspace root.
fn worker_in(
    ns: &NetNs,
    url: &str,
    mock: &MockAnthropic,
    root: &std::path::Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("ip");
    command
        .args(["netns", "exec", &ns.name])
        .arg(arbiter_tests::bin("arbiter-worker"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NATS_URL", url)
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ORCHESTRATOR_MODEL", format!("anthropic:{ORCH_MODEL}"))
        .env("SUBAGENT_MODEL", format!("anthropic:{SUB_MODEL}"))
        .env("ARBITER_WORKER_ID", "w-plain")
        .env("ARBITER_WORKSPACE_ROOT", root)
        // What is under test is the connection, not the tools' sandbox.
        .env("ARBITER_SANDBOX", "none")
        .env("RUST_LOG", "info,async_nats=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

/// What the user sees: `arbiter-worker: the worker stopped: refusing to
/// connect to NATS at nats://10.200.…: without TLS and without a
/// credential: …` within a few seconds, and nothing else; with
/// `--insecure` the worker runs (its presence answers) and its log says
/// once that anyone on the network can read and forge every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_a_plaintext_anonymous_server_on_another_host_unless_insecure() {
    let host = NetNs::create("pt");
    let nats = NatsServer::start_plain_on(&host.host_ip.to_string()).await;
    let url = nats.url().to_owned();
    assert!(
        url.starts_with(&format!("nats://{}:", host.host_ip)),
        "{url}"
    );
    let mock = MockAnthropic::start_on(host.host_ip.into()).await;
    let root = tempfile::tempdir().unwrap();
    // The streams, as a coordinator makes them; this test's own connection
    // crosses the same link, so it says --insecure too.
    let insecure = NatsOptions {
        insecure: true,
        ..NatsOptions::url(url.clone())
    };
    let conn = arbiter_bus::connect_with(&insecure, "test", Reach::FailFast)
        .await
        .unwrap();
    let bus = Bus::open(conn, NatsRole::Admin, Reach::FailFast)
        .await
        .unwrap();
    // Without it, the library refuses too, before any byte is sent.
    let refused = arbiter_bus::connect_with(&NatsOptions::url(url.clone()), "test", Reach::Wait)
        .await
        .err()
        .expect("a plaintext anonymous connection to another host was made");
    assert!(matches!(refused, arbiter_bus::BusError::Insecure { .. }));

    // Refused: one line, a non-zero exit, at once (it does not wait for the server).
    let started = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        worker_in(&host, &url, &mock, root.path())
            .stderr(Stdio::piped())
            .output(),
    )
    .await
    .expect("the worker is still running 30 s later")
    .unwrap();
    let took = started.elapsed();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!(
            "arbiter-worker: the worker stopped: refusing to connect to NATS at {url} without \
             TLS and without a credential: it is not on this machine, so anyone on the network \
             could read and forge every message; connect with tls:// and a credential bundle \
             (`arbiter-admin init`), or give --insecure (ARBITER_INSECURE=1)"
        ),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "refused after {took:?}");
    assert!(
        bus.client
            .request(
                arbiter_worker::presence::presence_subject("w-plain"),
                "".into()
            )
            .await
            .is_err(),
        "a refused worker answers presence"
    );

    // With --insecure it starts (its presence answers) and warns, once.
    let log = root.path().join("worker.log");
    let mut command = worker_in(&host, &url, &mock, root.path());
    command
        .arg("--insecure")
        .stderr(std::fs::File::create(&log).unwrap());
    let mut worker = command.spawn().unwrap();
    eventually(WAIT, "the insecure worker's presence", || async {
        let reply = tokio::time::timeout(
            Duration::from_secs(1),
            bus.client.request(
                arbiter_worker::presence::presence_subject("w-plain"),
                "".into(),
            ),
        )
        .await
        .ok()?
        .ok()?;
        arbiter_worker::presence::decode_presence(&reply.payload).ok()
    })
    .await;
    worker.kill().await.unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("because --insecure (ARBITER_INSECURE) was given"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("WARN")
            && warnings[0].contains("without TLS and without a credential to another machine")
            && warnings[0].contains("anyone on the network can read and forge every message"),
        "{text}"
    );
    assert!(!text.contains("refusing to connect"), "{text}");
}

/// On this machine the same server is fine, with one warning: every test
/// that runs the binaries against a plain nats-server on 127.0.0.1 relies
/// on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_anonymous_server_on_this_machine_is_only_warned_about() {
    let nats = NatsServer::start().await;
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(arbiter_tests::bin("arbiter-console"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NATS_URL", nats.url())
            .env("RUST_LOG", "warn,async_nats=error")
            .arg("sessions")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("`arbiter-console sessions` is still running 30 s later")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("connecting to NATS without TLS and without a credential: fine on this machine (tests, the benchmark), never across a network"))
        .count();
    assert_eq!(warnings, 1, "{stderr}");
}
