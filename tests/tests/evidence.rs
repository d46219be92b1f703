//! Reports carry evidence the model did not write: an Orchestrator's output
//! comes with what its worker saw it do (tool calls by tool with failures,
//! files created, changed and deleted since the summons, commands with their
//! exit codes). The Arbiter reads it next to the report, a claim of work done
//! with nothing to show for it is flagged, and the console shows both.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use arbiter_protocol::{CommandRun, Evidence, FileChanges, LogBody, ToolCalls};
use arbiter_tests::MockReply;
use common::*;
use serde_json::json;

/// What the human sees, in line mode, of a session that has settled.
pub(crate) async fn console_lines(sys: &System, session: &str) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(arbiter_tests::bin("arbiter-console"))
            .args(["--plain", "--session", session])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(sys.nats_env("console"))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the console exits once the session settles")
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The seed's failure: an Orchestrator that made no tool call says hello.py
/// was created. The Arbiter's next request carries the worker's evidence and
/// the flag; the console shows the flag under the report; the workspace is
/// indeed empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_work_with_no_tool_call_is_flagged_to_the_arbiter_and_the_human() {
    let sys = System::start().await;
    let s = "s-evidence-none";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Make hello.py");
    let brief = "Create hello.py that prints hello.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock
        .push(&orch_lane(brief), orch(true, "hello.py is created."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Not yet verified."));
    sys.send(s, "Make hello.py").await;
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;

    let asked = sys.mock.requests_for(&arb)[1].last_user_text();
    assert_eq!(
        asked,
        "Orchestrator I: hello.py is created.\n\
         [Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files \
         changed]\n\
         [Check: Orchestrator I reports done: 0 tool calls, 0 files changed. Nothing of it \
         shows in the workspace.]"
    );
    log.wait_for("the release", |b| matches!(b, LogBody::Released(_)))
        .await;
    let report = log
        .bodies()
        .into_iter()
        .find_map(|b| match b {
            LogBody::Orchestrator(e) => Some(e),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        report.evidence,
        Some(Evidence {
            no_checkpoint: Some(NO_GIT.into()),
            ..Evidence::default()
        })
    );
    assert!(!sys.workspace(s).join("hello.py").exists());

    let lines = console_lines(&sys, s).await;
    assert!(
        lines.contains(
            "Orchestrator I: hello.py is created.\n\
             ! Check: Orchestrator I reports done: 0 tool calls, 0 files changed. Nothing of \
             it shows in the workspace.\n"
        ),
        "{lines}"
    );
}

/// An Orchestrator that wrote two files and ran two commands, one failing:
/// both files are listed, each command with its exit code, the failure
/// counted, in the Arbiter's request, the log and the console alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_written_and_the_commands_run_are_listed_with_exit_codes() {
    let sys = System::start().await;
    let s = "s-evidence-two";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Make two scripts");
    let brief = "Write a.sh and b.sh, then check them.";
    let lane = orch_lane(brief);
    // A file that was there before the summons and is left alone is not listed.
    std::fs::create_dir_all(sys.workspace(s)).unwrap();
    std::fs::write(sys.workspace(s).join("old.txt"), "old\n").unwrap();
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "a.sh", "content": "echo a\n"})),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "sub/b.sh", "content": "echo b\n"})),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use("bash", json!({"command": "sh a.sh"})),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use("bash", json!({"command": "sh sub/b.sh && exit 3"})),
    );
    sys.mock
        .push(&lane, orch(true, "Done: a.sh and sub/b.sh written."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Two scripts."));
    sys.send(s, "Make two scripts").await;
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;

    let summary = "4 tool calls (bash 2, 1 failed; write 2), 2 files changed (created: a.sh, \
                   sub/b.sh); commands: `sh a.sh` exit 0, `sh sub/b.sh && exit 3` exit 3";
    let asked = sys.mock.requests_for(&arb)[1].last_user_text();
    assert_eq!(
        asked,
        format!(
            "Orchestrator I: Done: a.sh and sub/b.sh written.\n\
             [Evidence from the worker, not written by Orchestrator I: {summary}]"
        )
    );
    log.wait_for("the release", |b| matches!(b, LogBody::Released(_)))
        .await;
    let report = log
        .bodies()
        .into_iter()
        .find_map(|b| match b {
            LogBody::Orchestrator(e) => Some(e),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        report.evidence,
        Some(Evidence {
            tools: vec![
                ToolCalls {
                    tool: "bash".into(),
                    calls: 2,
                    failed: 1,
                },
                ToolCalls {
                    tool: "write".into(),
                    calls: 2,
                    failed: 0,
                },
            ],
            files: FileChanges {
                created: vec!["a.sh".into(), "sub/b.sh".into()],
                ..FileChanges::default()
            },
            commands: vec![
                CommandRun {
                    command: "sh a.sh".into(),
                    exit_code: Some(0),
                },
                CommandRun {
                    command: "sh sub/b.sh && exit 3".into(),
                    exit_code: Some(3),
                },
            ],
            commands_more: 0,
            checkpoint: None,
            no_checkpoint: Some(NO_GIT.into()),
        })
    );

    let lines = console_lines(&sys, s).await;
    assert!(
        lines.contains(&format!(
            "Orchestrator I: Done: a.sh and sub/b.sh written.\n· Evidence: {summary}\n"
        )),
        "{lines}"
    );
}

// An output with no tool call since the last shows that one's files without a walk: a
// table case of the worker's core, `agent::core::tests::the_workspace_is_walked_again_only_…`.
