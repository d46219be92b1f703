//! A worker on another host: in its own network namespace (a veth pair with
//! addresses the test owns), it joins over TLS with a freshly issued
//! credential and a copy of its bundle, as docs/deployment.md tells a user
//! to do, claims a summons and completes an Orchestrator. Then its credential is
//! revoked mid-task: its connection is closed, every new one is refused, it
//! exits saying so, and the other worker finishes the work.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use arbiter_protocol::LogBody;
use arbiter_protocol::roles::NatsRole;
use arbiter_tests::{Gate, MockReply, NetNs, eventually};
use serde_json::json;

use crate::common::*;
use crate::direct::*;

/// Copies a credential bundle, as a user copies it to the worker's host.
fn copy_bundle(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for file in ["nats.creds", "ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(from.join(file), to.join(file)).unwrap();
    }
}

async fn summoned(log: &LogWatch, n: usize) -> String {
    eventually(WAIT, "the summons", || async {
        let ids: Vec<String> = log
            .bodies()
            .into_iter()
            .filter_map(|b| match b {
                LogBody::Summoned(e) => Some(e.orch_id),
                _ => None,
            })
            .collect();
        ids.get(n).cloned()
    })
    .await
}

/// What the user sees: the remote worker does the first Orchestrator's work;
/// revoking its credential stops it with a one-line reason; the local worker
/// takes the second Orchestrator over and the conversation ends as scripted,
/// with nothing lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_worker_joins_over_tls_works_and_is_shut_out_when_revoked() {
    let host = NetNs::create("rw");
    let mut sys = System::start_with(Options {
        secure: true,
        bind: Some(host.host_ip.into()),
        workers: 0,
        ..Default::default()
    })
    .await;
    let admin = sys.admin.as_ref().unwrap().path().to_owned();
    arbiter_admin::issue(
        &admin,
        NatsRole::Worker,
        "w-remote",
        arbiter_admin::Scope {
            pools: &["default".into()],
            sessions: &[],
        },
        30,
    )
    .unwrap();
    let remote_home = tempfile::tempdir().unwrap();
    let bundle = remote_home.path().join("arbiter");
    copy_bundle(&admin.join("creds/w-remote"), &bundle);
    let env: Vec<(&str, std::ffi::OsString)> = vec![
        ("NATS_CREDS", bundle.join("nats.creds").into()),
        ("NATS_CA", bundle.join("ca.pem").into()),
        ("NATS_CERT", bundle.join("cert.pem").into()),
        ("NATS_KEY", bundle.join("key.pem").into()),
    ];
    let env_refs: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let mut command = sys.worker_command(Some(&host.name), "w-remote", 1, &env_refs);
    command.stderr(std::process::Stdio::piped());
    let remote = command.spawn().unwrap();
    worker_ready(&sys, "w-remote").await;

    let s = "s-remote";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build two things");
    let (one, two) = ("Write one.txt.", "Write two.txt.");
    sys.mock.push(&arb, arbiter("summon_orchestrator", one));
    sys.mock.push(&arb, arbiter("summon_orchestrator", two));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Both are done."));
    sys.mock.push(
        &orch_lane(one),
        MockReply::tool_use("write", json!({"path": "one.txt", "content": "1\n"})),
    );
    sys.mock
        .push(&orch_lane(one), orch(true, "one.txt is written."));
    // II: a tool call, then a model call the remote worker is still waiting
    // on when its credential is revoked.
    sys.mock.push(
        &orch_lane(two),
        MockReply::tool_use("write", json!({"path": "two.txt", "content": "2\n"})),
    );
    let stuck = Gate::new();
    sys.mock.push(
        &orch_lane(two),
        orch(true, "never delivered").gated(stuck.clone()),
    );
    sys.mock
        .push(&orch_lane(two), orch(true, "two.txt is written."));
    sys.send(s, "Build two things").await;

    // Orchestrator I ran on the remote worker, end to end.
    let first = summoned(&log, 0).await;
    log.wait_for(
        "I's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "one.txt is written."),
    )
    .await;
    assert!(
        state_writers(&sys, &first)
            .await
            .iter()
            .all(|(_, w)| w == "w-remote"),
        "{:?}",
        state_writers(&sys, &first).await
    );
    assert_eq!(
        std::fs::read_to_string(sys.workspace(s).join("one.txt")).unwrap(),
        "1\n"
    );

    // II is claimed by the remote worker and waits on its model.
    let second = summoned(&log, 1).await;
    sys.mock.wait_for_requests(&orch_lane(two), 2, WAIT).await;
    let writers = state_writers(&sys, &second).await;
    assert_eq!(writers.first().map(|(_, w)| w.as_str()), Some("w-remote"));

    // Revoke: the server closes the remote's connection and refuses it.
    sys.admin.as_ref().unwrap();
    let pushed = arbiter_admin::revoke(&admin, "w-remote", Some(sys.nats.url()))
        .await
        .unwrap();
    assert_eq!(pushed, arbiter_admin::Pushed::Live);
    let refused = arbiter_bus::connect_with(
        &arbiter_bus::NatsOptions {
            creds: Some(bundle.join("nats.creds")),
            tls_ca: Some(bundle.join("ca.pem")),
            tls_cert: Some(bundle.join("cert.pem")),
            tls_key: Some(bundle.join("key.pem")),
            ..arbiter_bus::NatsOptions::url(sys.nats.url())
        },
        "revoked",
        arbiter_bus::Reach::FailFast,
    )
    .await
    .err()
    .expect("a revoked credential was let in");
    assert!(
        refused.to_string().contains("authorization violation"),
        "{refused}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(15), remote.wait_with_output())
        .await
        .expect("the revoked worker is still running 15 s later")
        .unwrap();
    assert!(!ended.status.success());
    let stderr = String::from_utf8_lossy(&ended.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("arbiter-worker: ")
            && last.contains("NATS revoked this process's credentials"),
        "{stderr}"
    );
    stuck.open();

    // The other worker takes II over and finishes it.
    sys.spawn_worker("worker-local", 1, 200_000);
    log.wait_for(
        "the Arbiter's last word",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Both are done."),
    )
    .await;
    // Ended, II's records are rolled up into one snapshot by the worker
    // that stored the end.
    let writers = eventually(WAIT, "II's records rolled up", || async {
        let writers = state_writers(&sys, &second).await;
        (writers.len() == 1).then_some(writers)
    })
    .await;
    assert_eq!(writers[0].1, "worker-local");
    assert_eq!(
        std::fs::read_to_string(sys.workspace(s).join("two.txt")).unwrap(),
        "2\n"
    );
    // One continuous conversation: every seq once, II reported once.
    let entries = log.entries();
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=entries.len() as u64).collect::<Vec<_>>());
    let reports: Vec<String> = log
        .bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::Orchestrator(o) => Some(o.text),
            _ => None,
        })
        .collect();
    assert_eq!(reports, ["one.txt is written.", "two.txt is written."]);
}
