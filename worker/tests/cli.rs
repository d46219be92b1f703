//! The `arbiter-worker` command line: every flag has an env var, and bad
//! settings fail at once with a message that names the problem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn worker() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_arbiter-worker"));
    command.env_clear();
    command
}

#[test]
fn help_names_every_env_var() {
    let out = worker().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for var in [
        "NATS_URL",
        "ARBITER_POOL",
        "ORCHESTRATOR_MODEL",
        "ARBITER_MAX_ORCHESTRATORS",
        "ARBITER_WORKSPACE_ROOT",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ORCHESTRATOR_CONTEXT_TOKENS",
        "ARBITER_LEASE_SECS",
    ] {
        assert!(help.contains(var), "--help does not mention {var}");
    }
}

#[test]
fn a_bad_pool_or_model_fails_before_connecting() {
    let out = worker().args(["--pool", "a.b"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pool name \"a.b\""), "{err}");

    let out = worker().args(["--model", "gemini:x"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("provider \"gemini\" is not supported"),
        "{err}"
    );
}

#[test]
fn the_api_key_is_not_echoed_by_help() {
    let out = worker()
        .env("ANTHROPIC_API_KEY", "sk-ant-do-not-show")
        .arg("--help")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sk-ant-do-not-show"));
}

#[test]
fn zero_slots_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = worker()
        .args(["--max-orchestrators", "0", "--workspace-root"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--max-orchestrators must be at least 1"),
        "{err}"
    );
}
