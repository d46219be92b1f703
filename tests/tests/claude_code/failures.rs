//! A turn the CLI cannot finish ends in a `failed` event with its cause and
//! a freed slot; a worker without a usable CLI refuses to start.

use crate::common::*;
use arbiter_protocol::WireError;
use arbiter_tests::{Gate, MockReply, eventually};
use arbiter_worker::Runtime;
use std::time::Duration;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_the_cli_ends_its_turn_with_is_a_failed_event() {
    let sys = claude_system(1).await;
    let s = "s-400";
    let brief = "Hit an error.";
    let lane = orch_lane(brief);
    // The CLI sends a refused request again a few times (4 in 2.1.331)
    // before it ends the turn: every one is refused.
    for _ in 0..8 {
        sys.mock.push(
            &lane,
            MockReply::http_error(
                400,
                "invalid_request_error",
                "mock: this request is refused",
            ),
        );
    }
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    // The log says which Orchestrator failed and why, in the CLI's words.
    let error = first_error(&log).await;
    let WireError::OrchestratorFailed { number, message } = &error else {
        panic!("expected the Orchestrator's failure, got {error:?}");
    };
    assert_eq!(*number, 1);
    assert!(
        message.contains("the Claude Code CLI ended the turn in an error")
            && message.contains("this request is refused"),
        "{message}"
    );
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
    eventually(WAIT, "the CLI to end", || async {
        cli_pids(sys.workspaces.path()).is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_turn_is_a_failed_event_and_frees_the_slot() {
    let sys = claude_system(1).await;
    let s = "s-crash";
    let brief = "Crash.";
    let lane = orch_lane(brief);
    let hold = Gate::new();
    sys.mock
        .push(&lane, output(true, "never sent").gated(hold.clone()));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    let pids = cli_pids(sys.workspaces.path());
    assert!(!pids.is_empty());
    for pid in pids {
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    let error = first_error(&log).await;
    let text = error.to_string();
    assert!(
        text.contains("the Claude Code CLI stopped mid-turn") && text.contains("signal: 9"),
        "{text}"
    );
    hold.open();
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_prints_a_line_that_is_not_json_is_a_failed_event() {
    let real = claude_cli_bin();
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_cli(
        dir.path(),
        &format!(
            "if [ \"$1\" = --version ]; then exec '{}' --version; fi\n\
             read -r line\necho 'Welcome to Claude Code!'\nexec sleep 30\n",
            real.display()
        ),
    );
    let mut sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-0", 1, 200_000);
    config.claude_code.bin = fake;
    sys.spawn_worker_with(config);
    sys.worker_up("worker-0").await;
    let s = "s-garbage";
    let log = sys.watch_log(s).await;
    summon(&sys, s, "Say something odd.").await;
    let text = first_error(&log).await.to_string();
    assert!(
        text.contains("printed a line that is not JSON: Welcome to Claude Code!"),
        "{text}"
    );
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_worker_without_a_usable_cli_refuses_to_start_saying_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let old = fake_cli(dir.path(), "echo '2.0.1 (Claude Code)'\n");
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    let broken = fake_cli(&broken, "echo 'segfault' >&2; exit 139\n");
    let cases = [
        (dir.path().join("missing"), "was not found"),
        (old, "is version 2.0.1, older than 2.1.331"),
        (broken, "is not a working Claude Code CLI"),
    ];
    for (bin, says) in cases {
        let out = tokio::process::Command::new(arbiter_tests::bin("arbiter-worker"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("ARBITER_WORKSPACE_ROOT", dir.path().join("ws"))
            // Nothing listens here: it must refuse before it connects.
            .env("NATS_URL", "nats://127.0.0.1:1")
            .args([
                "--runtime",
                "claude-code",
                "--sandbox",
                "none",
                "--claude-bin",
            ])
            .arg(&bin)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("the worker refuses at once")
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.trim().lines().last().unwrap_or_default();
        assert!(
            last.starts_with("arbiter-worker: ")
                && last.contains(says)
                && last.contains("pip install claude-agent-sdk==0.2.188"),
            "{}: {stderr}",
            bin.display()
        );
    }
}
