//! The Orchestrator runtime's tools end to end, over a real nats-server and
//! the scripted mock model: real files created and edited in the workspace,
//! a real command, a subagent whose traffic never reaches the Orchestrator,
//! path escapes refused, the workspace shared across a session, and a summons
//! that names another session's workspace kept to its own. The bash tool's
//! sandbox has its own module.

use crate::common;
use crate::direct;

use arbiter_protocol::OrchestratorState;
use arbiter_tests::MockReply;
use common::*;
use direct::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const BRIEF: &str = "Write src/greet.sh, then have a subagent add src/bye.sh.";
const SUB_PROMPT: &str = "Add src/bye.sh, a script that prints a farewell, next to src/greet.sh. \
                          Run it and report.";
const REPORT: &str = "REPORT: src/bye.sh written and run; it prints its farewell.";
/// Appears only in the subagent's own traffic.
const SUB_ONLY: &str = "SUBAGENT-ONLY-farewell";

fn no_coordinator() -> Options {
    Options {
        coordinator: false,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_edits_files_runs_commands_and_delegates_to_a_subagent() {
    let sys = System::start_with(no_coordinator()).await;
    let watch = Watch::start(&sys).await;
    let lane = orch_lane(BRIEF);
    let sub = sub_lane(SUB_PROMPT);
    let script = [
        MockReply::tool_use(
            "write",
            json!({"path": "src/greet.sh", "content": "echo hello\n"}),
        ),
        MockReply::tool_use(
            "edit",
            json!({"path": "src/greet.sh", "old_string": "hello", "new_string": "hello, world"}),
        ),
        MockReply::tool_use("bash", json!({"command": "sh src/greet.sh && ls src"})),
        MockReply::tool_use(
            "task",
            json!({"description": "Add a farewell script", "prompt": SUB_PROMPT}),
        ),
        MockReply::tool_use("glob", json!({"pattern": "**/*.sh"})),
        orch(true, "Done: src/greet.sh and src/bye.sh."),
    ];
    for reply in script {
        sys.mock.push(&lane, reply);
    }
    let sub_script = [
        MockReply::tool_use("read", json!({"path": "src/greet.sh"})),
        MockReply::tool_use(
            "write",
            json!({"path": "src/bye.sh", "content": format!("echo {SUB_ONLY}\n")}),
        ),
        MockReply::tool_use("bash", json!({"command": "sh src/bye.sh"})),
        MockReply::text(REPORT),
    ];
    for reply in sub_script {
        sys.mock.push(&sub, reply);
    }
    summon(&sys, "default", "s-tools", "o-tools", BRIEF).await;
    let output = watch.wait_output("o-tools", 1).await;
    assert!(output.expects_response);
    assert_eq!(output.message, "Done: src/greet.sh and src/bye.sh.");

    // The work is really on disk.
    let ws = sys.workspace("s-tools");
    assert_eq!(
        std::fs::read_to_string(ws.join("src/greet.sh")).unwrap(),
        "echo hello, world\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/bye.sh")).unwrap(),
        format!("echo {SUB_ONLY}\n")
    );

    // What the Orchestrator saw after each call: the tools' real results and,
    // for the task, the subagent's report and nothing else.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 6);
    let results: Vec<Vec<(String, bool)>> = requests[1..].iter().map(tool_results).collect();
    assert_eq!(
        results,
        vec![
            vec![("wrote 11 bytes to src/greet.sh".to_owned(), false)],
            vec![(
                "edited src/greet.sh: replaced 1 occurrence at line 1".to_owned(),
                false
            )],
            vec![("exit code: 0\nhello, world\ngreet.sh\n".to_owned(), false)],
            vec![(REPORT.to_owned(), false)],
            vec![("src/bye.sh\nsrc/greet.sh\n".to_owned(), false)],
        ]
    );
    for request in &requests {
        assert_eq!(
            request.tool_names(),
            ["read", "write", "edit", "glob", "grep", "bash", "task"]
        );
        assert!(
            !request.all_text().contains(SUB_ONLY),
            "subagent traffic leaked into the Orchestrator's context"
        );
    }
    // Its transcript holds its own five calls and their five results, no more.
    assert_eq!(count_blocks(&requests[5], "tool_use"), 5);
    assert_eq!(count_blocks(&requests[5], "tool_result"), 5);

    // The subagent: a fresh context (its prompt alone), the tools minus task,
    // its own model, plain text (no schema).
    let sub_requests = sys.mock.requests_for(&sub);
    assert_eq!(sub_requests.len(), 4);
    assert_eq!(sub_requests[0].messages().len(), 1);
    assert_eq!(sub_requests[0].last_user_text(), SUB_PROMPT);
    assert!(!sub_requests[0].all_text().contains(BRIEF));
    for request in &sub_requests {
        assert_eq!(request.model(), SUB_MODEL);
        assert_eq!(
            request.tool_names(),
            ["read", "write", "edit", "glob", "grep", "bash"]
        );
        assert!(request.body.get("output_config").is_none());
        assert!(request.system_text().contains("You are a subagent"));
    }
    assert_eq!(
        tool_results(&sub_requests[3]),
        vec![(format!("exit code: 0\n{SUB_ONLY}\n"), false)]
    );

    // Status after every step: each tool by its display name, the subagent's
    // inner tools under Task, the count of the Orchestrator's own calls.
    watch
        .wait_status("o-tools", "the waiting status", |s| {
            s.state == OrchestratorState::Waiting
        })
        .await;
    let statuses = watch.statuses_of("o-tools");
    let mut tools_seen: Vec<String> = Vec::new();
    for tool in statuses.iter().filter_map(|s| s.current_tool.clone()) {
        if tools_seen.last() != Some(&tool) {
            tools_seen.push(tool);
        }
    }
    assert_eq!(
        tools_seen,
        [
            "Write",
            "Edit",
            "Bash",
            "Task",
            "Task › Read",
            "Task",
            "Task › Write",
            "Task",
            "Task › Bash",
            "Task",
            "Glob"
        ]
    );
    let last = statuses.last().unwrap();
    assert_eq!(last.tool_count, 5);
    assert_eq!(last.current_tool, None);
    assert_eq!(last.context_tokens, 100);
    assert_eq!(last.worker_id, "worker-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_escapes_are_refused_with_a_clear_tool_error() {
    let sys = System::start_with(no_coordinator()).await;
    let watch = Watch::start(&sys).await;
    let brief = "Try to leave the workspace.";
    let lane = orch_lane(brief);
    // Something outside the workspace, and a symlink inside that points to it.
    let ws = sys.workspace("s-escape");
    std::fs::create_dir_all(&ws).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("door")).unwrap();
    std::fs::write(sys.workspaces.path().join("neighbour.txt"), "theirs\n").unwrap();

    sys.mock.push(
        &lane,
        MockReply::tool_use("read", json!({"path": "../neighbour.txt"}))
            .and_tool_use("read", json!({"path": "door/secret.txt"}))
            .and_tool_use("write", json!({"path": "door/planted.txt", "content": "x"}))
            .and_tool_use(
                "edit",
                json!({"path": "/etc/hostname", "old_string": "a", "new_string": "b"}),
            )
            .and_tool_use("grep", json!({"pattern": "secret", "path": "door/"}))
            .and_tool_use("glob", json!({"path": "../.."})),
    );
    sys.mock.push(&lane, orch(true, "Every way out is shut."));
    summon(&sys, "default", "s-escape", "o-escape", brief).await;
    watch.wait_output("o-escape", 1).await;

    let requests = sys.mock.requests_for(&lane);
    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 6);
    let expected = [
        "../neighbour.txt",
        "door/secret.txt",
        "door/planted.txt",
        "/etc/hostname",
        "door/",
        "../..",
    ]
    .map(|path| {
        (
            format!("{path}: refused, the path leads outside the workspace"),
            true,
        )
    });
    assert_eq!(results, expected);
    assert!(!outside.path().join("planted.txt").exists());
    assert!(!requests[1].all_text().contains("secret\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_carries_over_between_orchestrators_of_a_session() {
    let sys = System::start_with(no_coordinator()).await;
    let watch = Watch::start(&sys).await;
    let (first, second) = (
        "Orchestrator one: leave notes.",
        "Orchestrator two: read the notes.",
    );
    sys.mock.push(
        &orch_lane(first),
        MockReply::tool_use(
            "write",
            json!({"path": "NOTES.md", "content": "- parser: done\n"}),
        ),
    );
    sys.mock.push(&orch_lane(first), orch(true, "Notes left."));
    sys.mock.push(
        &orch_lane(second),
        MockReply::tool_use("read", json!({"path": "NOTES.md"})),
    );
    sys.mock.push(&orch_lane(second), orch(true, "Notes read."));

    summon(&sys, "default", "s-chain", "o-one", first).await;
    watch.wait_output("o-one", 1).await;
    control(&sys, "o-one", arbiter_protocol::ControlAction::Release).await;
    summon(&sys, "default", "s-chain", "o-two", second).await;
    watch.wait_output("o-two", 1).await;

    let read = tool_results(&sys.mock.requests_for(&orch_lane(second))[1]);
    assert_eq!(read, vec![("     1\t- parser: done\n".to_owned(), false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_naming_another_sessions_workspace_works_in_its_own() {
    let sys = System::start_with(no_coordinator()).await;
    let watch = Watch::start(&sys).await;
    // Session B's files, which a summons for session A tries to reach.
    let theirs = sys.workspace("s-victim");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("secret.txt"), "B's secret\n").unwrap();
    let brief = "Orchestrator of A: look around.";
    sys.mock.push(
        &orch_lane(brief),
        MockReply::tool_use("read", json!({"path": "secret.txt"}))
            .and_tool_use("glob", json!({}))
            .and_tool_use("write", json!({"path": "mine.txt", "content": "A\n"})),
    );
    sys.mock.push(&orch_lane(brief), orch(true, "Looked."));

    summon_into(
        &sys,
        "default",
        "s-attacker",
        "o-attacker",
        brief,
        Some("s-victim"),
    )
    .await;
    watch.wait_output("o-attacker", 1).await;

    let results = tool_results(&sys.mock.requests_for(&orch_lane(brief))[1]);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].1, "B's file was read: {results:?}");
    assert!(!results[0].0.contains("B's secret"), "{results:?}");
    assert_eq!(results[1], (". is empty".to_owned(), false));
    assert!(!results[2].1, "{results:?}");
    assert!(sys.workspace("s-attacker").join("mine.txt").is_file());
    assert!(!theirs.join("mine.txt").exists());
    assert_eq!(
        std::fs::read_to_string(theirs.join("secret.txt")).unwrap(),
        "B's secret\n"
    );
}
