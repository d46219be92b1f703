//! What the CLI may touch: nothing outside the workspace (writes, reads,
//! the key), only the commands `--claude-allow` names, and a subscription
//! login passed through without ever being logged.

use crate::common::*;
use arbiter_protocol::LogBody;
use arbiter_tests::MockReply;
use arbiter_worker::Runtime;
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_workspace_is_denied() {
    let sys = claude_system(1).await;
    let s = "s-outside";
    let brief = "Write outside.";
    let lane = orch_lane(brief);
    let outside = tempfile::tempdir().unwrap();
    let by_write = outside.path().join("by-write.txt");
    let by_bash = outside.path().join("by-bash.txt");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": by_write, "content": "escaped\n"}),
        ),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": format!("echo escaped > {}", by_bash.display())}),
        ),
    );
    sys.mock.push(&lane, output(true, "Tried."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the Orchestrator's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Tried."),
    )
    .await;
    // Nothing was written, and the model was told so: each call's result is an error.
    assert!(!by_write.exists(), "the Write outside the workspace ran");
    assert!(
        !by_bash.exists(),
        "the Bash redirect outside the workspace ran"
    );
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        let last = request
            .messages()
            .iter()
            .rev()
            .find(|m| {
                m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
            })
            .unwrap();
        let result = last["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_result")
            .unwrap();
        assert_eq!(result["is_error"], true, "{result}");
    }
    // The evidence counts them as failed calls, with no file changed.
    let LogBody::Orchestrator(report) = log
        .bodies()
        .into_iter()
        .find(|b| matches!(b, LogBody::Orchestrator(_)))
        .unwrap()
    else {
        unreachable!()
    };
    let evidence = report.evidence.unwrap();
    let failed: u64 = evidence.tools.iter().map(|t| t.failed).sum();
    assert_eq!(failed, 2, "{evidence:?}");
    assert_eq!(
        evidence.files.created.len() + evidence.files.changed.len(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_nothing_outside_the_workspace_and_not_its_key() {
    let sys = claude_system(1).await;
    let s = "s-read";
    let brief = "Look around.";
    let lane = orch_lane(brief);
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET\n").unwrap();
    let calls = [
        ("Read", json!({"file_path": secret})),
        (
            "Grep",
            json!({"pattern": "TOPSECRET", "path": outside.path()}),
        ),
        (
            "Bash",
            json!({"command": format!("cat {}", secret.display())}),
        ),
        ("Bash", json!({"command": "echo $ANTHROPIC_API_KEY"})),
        ("Bash", json!({"command": "cat /proc/self/environ"})),
    ];
    for (tool, input) in &calls {
        sys.mock
            .push(&lane, MockReply::tool_use(*tool, input.clone()));
    }
    sys.mock.push(&lane, output(true, "Looked."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Looked."),
    )
    .await;
    // What each call returned to the model: a refusal, never the file or the key.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), calls.len() + 1);
    for request in &requests[1..] {
        let returned = request.last_user_text();
        assert!(
            !returned.contains("TOPSECRET") && !returned.contains(API_KEY),
            "{returned}"
        );
    }
    let LogBody::Orchestrator(report) = log
        .bodies()
        .into_iter()
        .find(|b| matches!(b, LogBody::Orchestrator(_)))
        .unwrap()
    else {
        unreachable!()
    };
    let failed: u64 = report
        .evidence
        .unwrap()
        .tools
        .iter()
        .map(|t| t.failed)
        .sum();
    assert_eq!(failed, calls.len() as u64);
}

/// `--claude-allow` lets the CLI run the commands it names, and only those:
/// in `acceptEdits` an interpreter is refused, and with
/// `Bash(python3 -c:*)` allowed a python3 command runs while perl is still
/// refused. A bare `Bash` is refused at start: it would approve anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_commands_run_and_others_stay_refused() {
    let mut sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-allow", 1, 200_000);
    config.claude_code.allow = vec!["Bash(python3 -c:*)".to_owned()];
    sys.spawn_worker_with(config);
    sys.worker_up("worker-allow").await;
    let s = "s-allow";
    let brief = "Run the scripts.";
    let lane = orch_lane(brief);
    let by_python = sys.workspace(s).join("by-python.txt");
    let by_perl = sys.workspace(s).join("by-perl.txt");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": "python3 -c \"open('by-python.txt', 'w').write('ran')\""}),
        ),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": "perl -e 'open(my $f, \">\", \"by-perl.txt\"); print $f \"ran\"'"}),
        ),
    );
    sys.mock.push(&lane, output(true, "Ran them."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Ran them."),
    )
    .await;
    assert_eq!(std::fs::read_to_string(&by_python).unwrap(), "ran");
    assert!(!by_perl.exists(), "perl ran without a rule allowing it");
    // What the model got back for perl: a refusal.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    let result = requests[2]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .rfind(|b| b["type"] == "tool_result")
        .cloned()
        .unwrap();
    assert_eq!(result["is_error"], true, "{result}");

    // A rule that names nothing is refused at start, in one line.
    let mut config = sys.worker_config("worker-bare", 1, 200_000);
    config.claude_code.allow = vec!["Bash".to_owned()];
    let said = arbiter_worker::run(config, std::future::pending())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("would let the CLI run Bash on anything"),
        "{said}"
    );
}

/// Without a rule the same python3 command is refused: the rule above is
/// what let it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_rule_an_interpreter_is_refused() {
    let sys = claude_system(1).await;
    let s = "s-no-allow";
    let brief = "Run python.";
    let lane = orch_lane(brief);
    let by_python = sys.workspace(s).join("by-python.txt");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": "python3 -c \"open('by-python.txt', 'w').write('ran')\""}),
        ),
    );
    sys.mock.push(&lane, output(true, "Tried."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Tried."),
    )
    .await;
    assert!(!by_python.exists(), "python3 ran with no rule allowing it");
}

/// A subscription user: no API key, the user's own Claude login
/// (`CLAUDE_CODE_OAUTH_TOKEN`) passed through to the CLI, which sends it as
/// a bearer token; the worker neither needs a key nor logs the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_login_is_passed_to_the_cli_and_never_logged() {
    let cli = claude_cli_bin();
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    const TOKEN: &str = "sk-ant-oat01-test-subscription-login";
    let logs = tempfile::tempdir().unwrap();
    let stderr = std::fs::File::create(logs.path().join("worker.log")).unwrap();
    let mut command = sys.worker_command(
        None,
        "worker-oauth",
        1,
        &[
            ("ARBITER_RUNTIME", "claude-code".as_ref()),
            ("CLAUDE_CLI_BIN", cli.as_os_str()),
            ("CLAUDE_CODE_OAUTH_TOKEN", TOKEN.as_ref()),
            ("RUST_LOG", "debug,async_nats=warn".as_ref()),
        ],
    );
    command.env_remove("ANTHROPIC_API_KEY").stderr(stderr);
    let _worker = command.spawn().unwrap();
    sys.worker_up("worker-oauth").await;
    let s = "s-oauth";
    let brief = "Work on my subscription.";
    let lane = orch_lane(brief);
    sys.mock
        .push(&lane, output(true, "Done on the subscription."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done on the subscription."),
    )
    .await;
    let request = &sys.mock.requests_for(&lane)[0];
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(request.header("x-api-key"), None);
    let written = std::fs::read_to_string(logs.path().join("worker.log")).unwrap();
    assert!(!written.is_empty());
    assert!(!written.contains(TOKEN), "the token is in the worker's log");
}
