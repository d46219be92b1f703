//! What the claude-code tests share: a system whose worker runs the CLI,
//! the scripted replies and summonses, and looks at records and processes.

use crate::common::*;
use arbiter_protocol::{LogBody, WireError};
use arbiter_tests::MockReply;
use arbiter_worker::Runtime;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

pub fn output(expects_response: bool, message: &str) -> MockReply {
    MockReply::tool_use(
        "StructuredOutput",
        json!({"expects_response": expects_response, "message": message}),
    )
}

/// A system whose worker runs Orchestrators on the CLI, up and ready.
pub async fn claude_system(slots: usize) -> System {
    claude_cli_bin();
    let sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        slots,
        ..Default::default()
    })
    .await;
    sys.worker_up("worker-0").await;
    sys
}

/// The human's first words make the Arbiter summon an Orchestrator with `brief`.
pub async fn summon(sys: &System, session: &str, brief: &str) {
    let arb = arbiter_lane(&format!("start {session}"));
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.send(session, &format!("start {session}")).await;
}

/// The first `error` entry of the log.
pub async fn first_error(log: &LogWatch) -> WireError {
    let at = log
        .wait_for("an error entry", |b| matches!(b, LogBody::Error(_)))
        .await;
    match &log.bodies()[at] {
        LogBody::Error(e) => e.error.clone(),
        _ => unreachable!(),
    }
}

/// The worker's presence: its slots in use.
pub async fn slots_used(sys: &System, worker: &str) -> u64 {
    let reply = sys
        .bus
        .client
        .request(
            arbiter_worker::presence::presence_subject(worker),
            "".into(),
        )
        .await
        .unwrap();
    let presence: Value = serde_json::from_slice(&reply.payload).unwrap();
    presence["slots_used"].as_u64().unwrap()
}

/// The CLI processes running for the workspaces under `root`, by pid.
pub fn cli_pids(root: &Path) -> Vec<i32> {
    let homes = root.join(".claude-code").to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            String::from_utf8_lossy(&environ)
                .contains(&homes)
                .then_some(pid)
        })
        .collect()
}

/// The last state record an Orchestrator's worker stored, as JSON.
pub async fn last_state_record(sys: &System, orch_id: &str) -> Value {
    let stream = sys
        .bus
        .js
        .get_stream(arbiter_protocol::subjects::ORCH_STATE_STREAM)
        .await
        .unwrap();
    let msg = stream
        .get_last_raw_message_by_subject(&arbiter_protocol::subjects::orch_records(orch_id))
        .await
        .unwrap();
    serde_json::from_slice(&msg.payload).unwrap()
}

/// A script standing in for the CLI.
pub fn fake_cli(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("claude");
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Copies a directory tree (the workspace, restored on another host).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
