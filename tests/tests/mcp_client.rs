//! The worker's MCP client end to end (issue #43): real MCP servers from
//! PyPI (`mcp-server-git`, `mcp-server-time`) and one written in the test
//! with the `mcp` SDK (`tests/mcp/test_server.py`), run by the worker over
//! stdio inside its sandbox or reached over streamable HTTP with a bearer
//! token; over a real nats-server with the scripted mock model. The model
//! is offered the servers' tools as `mcp__<server>__<tool>`, its calls
//! reach the servers and their real results come back; a subagent calls
//! them too; broken servers are named in the Orchestrator's status while
//! the others work; a worker killed after a call's result is stored does
//! not call it again; a summons needing a server no worker offers is
//! refused back to the Arbiter; the claude-code runtime is given the
//! servers through `--mcp-config`.

use crate::common;
use crate::direct;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arbiter_protocol::{LogBody, ToolCalls};
use arbiter_tests::MockReply;
use arbiter_worker::mcp::{ServerConfig, Transport};
use common::*;
use direct::*;
use serde_json::json;

/// The environment `scripts/install-mcp-servers` made (`ARBITER_MCP_DIR`).
fn mcp_dir() -> PathBuf {
    match std::env::var_os("ARBITER_MCP_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "ARBITER_MCP_DIR is not set: run `export ARBITER_MCP_DIR=$(scripts/install-mcp-servers)` \
             (scripts/test does this)"
        ),
    }
}

fn python() -> String {
    mcp_dir().join("bin/python").to_string_lossy().into_owned()
}

fn test_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/test_server.py")
}

fn stdio(name: &str, command: &str, args: &[&str]) -> ServerConfig {
    ServerConfig {
        name: name.to_owned(),
        transport: Transport::Stdio {
            command: command.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
        },
        startup_timeout: Duration::from_secs(20),
        tool_timeout: Duration::from_secs(30),
    }
}

/// The reference git server, on the session's workspace.
fn git_server() -> ServerConfig {
    let bin = mcp_dir().join("bin/mcp-server-git");
    stdio(
        "git",
        &bin.to_string_lossy(),
        &["--repository", "{workspace}"],
    )
}

/// The test's own server over stdio, in mode `mode`.
fn test_stdio(name: &str, mode: &str) -> ServerConfig {
    let script = test_server().to_string_lossy().into_owned();
    stdio(name, &python(), &[&script, mode])
}

/// A worker config running `servers`, its sandbox showing the servers'
/// Python environment and scripts (outside the system and toolchain
/// directories it shows anyway).
fn with_servers(
    mut config: arbiter_worker::Config,
    servers: Vec<ServerConfig>,
) -> arbiter_worker::Config {
    config.mcp_servers = servers;
    config.sandbox.show = vec![mcp_dir(), test_server().parent().unwrap().to_owned()];
    config
}

fn no_worker(coordinator: bool) -> Options {
    Options {
        coordinator,
        workers: 0,
        ..Default::default()
    }
}

/// Makes `ws` a git repository with one commit and an untracked file.
fn git_repo(ws: &Path) {
    std::fs::create_dir_all(ws).unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README.md"), "# demo\n").unwrap();
    git(ws, &["add", "README.md"]);
    git(ws, &["commit", "-q", "-m", "the first commit, by the test"]);
    std::fs::write(ws.join("notes-untracked.txt"), "not yet added\n").unwrap();
}

fn tool_names(request: &arbiter_tests::RecordedRequest) -> Vec<String> {
    request.tool_names()
}

fn mcp_calls(watch: &Watch, orch_id: &str, server: &str) -> Option<ToolCalls> {
    watch
        .evidence(orch_id)?
        .tools
        .iter()
        .find(|t| t.tool == format!("mcp__{server}"))
        .cloned()
}

/// What the model sees: beside its own seven tools, the git server's as
/// `mcp__git__git_status` and the like, with the server's input schema;
/// its call of `git_status` on the workspace's repository comes back with
/// git's real answer (the untracked file named), a subagent's call of
/// `git_log` with the test's commit, and the evidence counts one call of
/// `mcp__git` (the subagent's inside its `task`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_mcp_server_is_offered_called_and_counted_and_a_subagent_calls_it_too() {
    let mut sys = System::start_with(no_worker(false)).await;
    let watch = Watch::start(&sys).await;
    let s = "s-mcp-git";
    let ws = sys.workspace(s);
    git_repo(&ws);
    let config = with_servers(
        sys.worker_config("worker-0", 2, 200_000),
        vec![git_server()],
    );
    sys.spawn_worker_with(config);
    worker_ready(&sys, "worker-0").await;

    let brief = "Say what git shows, and have a subagent read the log.";
    let sub_prompt = "Read the repository's last commit and report its message.";
    let lane = orch_lane(brief);
    let sub = sub_lane(sub_prompt);
    let repo = ws.to_string_lossy().into_owned();
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__git__git_status", json!({"repo_path": repo})),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "task",
            json!({"description": "Read the log", "prompt": sub_prompt}),
        ),
    );
    sys.mock.push(
        &lane,
        orch(true, "One untracked file; the log has one commit."),
    );
    sys.mock.push(
        &sub,
        MockReply::tool_use(
            "mcp__git__git_log",
            json!({"repo_path": repo, "max_count": 1}),
        ),
    );
    sys.mock.push(
        &sub,
        MockReply::text("The last commit: the first commit, by the test."),
    );
    summon(&sys, "default", s, "o-mcp-git", brief).await;
    let output = watch.wait_output("o-mcp-git", 1).await;
    assert_eq!(
        output.message,
        "One untracked file; the log has one commit."
    );

    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    let names = tool_names(&requests[0]);
    assert_eq!(
        names[..7],
        ["read", "write", "edit", "glob", "grep", "bash", "task"]
    );
    for tool in [
        "mcp__git__git_status",
        "mcp__git__git_log",
        "mcp__git__git_diff",
    ] {
        assert!(names.iter().any(|n| n == tool), "{tool} offered: {names:?}");
    }
    let status_tool = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__git__git_status")
        .unwrap()
        .clone();
    assert_eq!(
        status_tool["input_schema"]["required"],
        json!(["repo_path"]),
        "the server's own schema: {status_tool}"
    );
    assert!(
        status_tool["description"]
            .as_str()
            .unwrap()
            .starts_with("(MCP server git) "),
        "{status_tool}"
    );
    let results = tool_results(&requests[1]);
    let (status, is_error) = &results[0];
    assert!(!is_error, "{status}");
    assert!(
        status.contains("notes-untracked.txt") && status.contains("main"),
        "git's real answer: {status}"
    );

    // The subagent: the same MCP tools, its own call, the real log.
    let sub_requests = sys.mock.requests_for(&sub);
    assert_eq!(sub_requests.len(), 2);
    assert!(
        tool_names(&sub_requests[0])
            .iter()
            .any(|n| n == "mcp__git__git_log")
    );
    let (log, is_error) = &tool_results(&sub_requests[1])[0];
    assert!(!is_error, "{log}");
    assert!(log.contains("the first commit, by the test"), "{log}");
    assert_eq!(
        tool_results(&requests[2])[0].0,
        "The last commit: the first commit, by the test."
    );

    // The evidence: one MCP call of the Orchestrator's own, by server.
    assert_eq!(
        mcp_calls(&watch, "o-mcp-git", "git"),
        Some(ToolCalls {
            tool: "mcp__git".into(),
            calls: 1,
            failed: 0
        }),
        "{:?}",
        watch.evidence("o-mcp-git")
    );
    let statuses = watch.statuses_of("o-mcp-git");
    assert!(
        statuses
            .iter()
            .any(|st| st.current_tool.as_deref() == Some("mcp__git__git_status")),
        "the status shows the MCP tool at work"
    );
    assert!(statuses.iter().all(|st| st.mcp_failures.is_empty()));
    // Nothing of it was staged or committed behind the human's back.
    assert_eq!(
        git(&ws, &["status", "--porcelain"]),
        "?? notes-untracked.txt\n"
    );
}

/// What the human sees: of four servers, one exits at start ("exits: it
/// ended … its last words: test_server.py: cannot start: no database
/// here"), one never answers `initialize` ("mute: no answer to initialize
/// and tools/list within 2 s") and both are named in the Orchestrator's
/// status; the Orchestrator starts within the start-up timeout with the
/// working server's tools, its model reads the failures in its prompt, a
/// tool error comes back as an error result with the server's words, and a
/// call that never ends is given up after the tool timeout (2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_servers_are_named_and_the_others_still_work() {
    let mut sys = System::start_with(no_worker(false)).await;
    let watch = Watch::start(&sys).await;
    let quick = |mut server: ServerConfig, startup: u64| {
        server.startup_timeout = Duration::from_secs(startup);
        server.tool_timeout = Duration::from_secs(2);
        server
    };
    let servers = vec![
        quick(test_stdio("exits", "exit"), 10),
        quick(test_stdio("mute", "mute"), 2),
        quick(test_stdio("fx", "stdio"), 10),
        quick(stdio("missing", "/nonexistent/mcp-server", &[]), 10),
    ];
    let config = with_servers(sys.worker_config("worker-0", 2, 200_000), servers);
    sys.spawn_worker_with(config);
    worker_ready(&sys, "worker-0").await;

    let brief = "Use the tools that work.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__fx__fail", json!({"why": "no rows"})),
    );
    sys.mock
        .push(&lane, MockReply::tool_use("mcp__fx__hang", json!({})));
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__fx__echo", json!({"text": "still here"})),
    );
    sys.mock
        .push(&lane, orch(true, "Two tools failed; echo works."));
    let started = Instant::now();
    summon(&sys, "default", "s-mcp-broken", "o-mcp-broken", brief).await;
    let first = sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(12),
        "the Orchestrator started {waited:?} after its summons"
    );
    let output = watch.wait_output("o-mcp-broken", 1).await;
    assert_eq!(output.message, "Two tools failed; echo works.");

    let status = watch
        .wait_status("o-mcp-broken", "the failures named", |st| {
            !st.mcp_failures.is_empty()
        })
        .await;
    assert_eq!(status.mcp_failures.len(), 3, "{:#?}", status.mcp_failures);
    let failures = status.mcp_failures.join("\n");
    assert!(
        failures.contains("exits: it ended or broke off before it answered initialize")
            && failures.contains("its last words: test_server.py: cannot start: no database here"),
        "{failures}"
    );
    assert!(
        failures.contains("mute: no answer to initialize and tools/list within 2 s"),
        "{failures}"
    );
    // Started through bwrap, which says the program is not there.
    assert!(
        failures.contains("missing: ")
            && failures.contains("/nonexistent/mcp-server: No such file or directory"),
        "{failures}"
    );
    let names = tool_names(&first[0]);
    assert!(names.iter().any(|n| n == "mcp__fx__echo"), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("mcp__exits") || n.starts_with("mcp__mute")),
        "{names:?}"
    );
    let system = first[0].system_text();
    assert!(
        system.contains("exits") && system.contains("mute") && system.contains("missing"),
        "the model is told which servers are out: {system}"
    );

    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 4);
    let (failed, is_error) = &tool_results(&requests[1])[0];
    assert!(*is_error, "{failed}");
    assert!(
        failed.contains("the fail tool failed as asked: no rows"),
        "{failed}"
    );
    let (hung, is_error) = &tool_results(&requests[2])[0];
    assert!(*is_error);
    assert_eq!(
        hung,
        "mcp__fx__hang: the MCP server \"fx\" did not answer within 2 s; the call was given up"
    );
    assert_eq!(
        tool_results(&requests[3])[0],
        ("echo: still here".to_owned(), false)
    );
    assert_eq!(
        mcp_calls(&watch, "o-mcp-broken", "fx"),
        Some(ToolCalls {
            tool: "mcp__fx".into(),
            calls: 3,
            failed: 2
        })
    );
}

/// The config file a worker process reads, declaring `servers` (TOML).
fn config_file(dir: &Path, servers: &str) -> PathBuf {
    let path = dir.join("worker.toml");
    std::fs::write(&path, servers).unwrap();
    path
}

/// The worker binary's flags showing the servers' environment in its sandbox.
fn shown() -> std::ffi::OsString {
    format!(
        "{},{}",
        mcp_dir().display(),
        test_server().parent().unwrap().display()
    )
    .into()
}

/// What the human sees: the worker process running Orchestrator I is
/// killed (kill -9) once its MCP call's result is stored and while its
/// model is asked again; another worker takes it over and the model reads
/// the stored result: the server was called once (its marker file holds
/// one line) and the report follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_an_mcp_result_is_stored_does_not_call_it_again() {
    let sys = System::start_with(no_worker(false)).await;
    let watch = Watch::start(&sys).await;
    let dir = tempfile::tempdir().unwrap();
    let script = test_server();
    let config = config_file(
        dir.path(),
        &format!(
            "[mcp_servers.fx]\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
            python(),
            script.to_string_lossy()
        ),
    );
    // HOME too: the servers' Python is a pyenv one under it, which the
    // sandbox shows as a toolchain of HOME.
    let home = std::env::var_os("HOME").unwrap_or_default();
    let env = [
        ("ARBITER_CONFIG", config.as_os_str()),
        ("ARBITER_SANDBOX_SHOW", &shown()),
        ("HOME", &home),
    ];
    let mut w1 = sys.worker_process_with("w1", 1, &env);
    worker_ready(&sys, "w1").await;

    let brief = "Mark it once.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__fx__mark", json!({"label": "once"})),
    );
    // w1 dies while this answer is on its way; the takeover gets the next.
    sys.mock.push(
        &lane,
        orch(true, "never delivered").delay(Duration::from_secs(60)),
    );
    sys.mock.push(&lane, orch(true, "Marked once."));
    let s = "s-mcp-crash";
    summon(&sys, "default", s, "o-mcp-crash", brief).await;
    let marks = sys.workspace(s).join("mcp-marks.txt");
    sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let stored = state_records(&sys, "o-mcp-crash").await;
    assert!(
        serde_json::to_string(&stored)
            .unwrap()
            .contains("mcp-marks.txt holds 1 line"),
        "the result is stored before the model is asked again"
    );
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();
    let _w2 = sys.worker_process_with("w2", 1, &env);
    let output = watch.wait_output("o-mcp-crash", 1).await;
    assert_eq!(output.message, "Marked once.");
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap(),
        "once\n",
        "the server was called once"
    );
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3, "w1's two requests, then w2's one");
    assert_eq!(
        tool_results(&requests[2]),
        vec![(
            "marked once; mcp-marks.txt holds 1 line(s)".to_owned(),
            false
        )]
    );
    let last = watch.statuses_of("o-mcp-crash");
    assert_eq!(last.last().unwrap().worker_id, "w2");
}

/// What the human sees: the test's server over streamable HTTP, behind a
/// bearer token the worker reads from a variable its config names. The
/// model calls its `echo` and reads the answer; a second declaration of
/// the same server with a wrong token is named in the status with the
/// server's 401. The call is traced as an MCP tool of its server. The token
/// appears in none of: the worker's log (at debug), its spans, the records,
/// the model's requests, the statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_gets_its_bearer_token_and_the_token_is_never_shown() {
    let sys = System::start_with(no_worker(false)).await;
    let watch = Watch::start(&sys).await;
    let token = format!("mcp-http-token-{}", uuid::Uuid::new_v4().simple());
    let mut server = tokio::process::Command::new(python())
        .arg(test_server())
        .args(["http", "TEST_MCP_TOKEN"])
        .env("TEST_MCP_TOKEN", &token)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = {
        use tokio::io::AsyncBufReadExt as _;
        let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("the HTTP server to listen")
            .unwrap()
            .unwrap();
        line.strip_prefix("listening ").unwrap().to_owned()
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        &format!(
            "[mcp_servers.remote]\nurl = {url:?}\nbearer_token_env = \"REMOTE_MCP_TOKEN\"\n\n\
             [mcp_servers.locked]\nurl = {url:?}\nbearer_token_env = \"WRONG_MCP_TOKEN\"\n\
             startup_timeout_secs = 5\n"
        ),
    );
    let log_path = dir.path().join("worker.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let otlp = arbiter_tests::otlp::OtlpReceiver::start().await;
    let endpoint = otlp.endpoint();
    let mut command = sys.worker_command(
        None,
        "w-http",
        1,
        &[
            ("ARBITER_CONFIG", config.as_os_str()),
            ("REMOTE_MCP_TOKEN", std::ffi::OsStr::new(&token)),
            ("WRONG_MCP_TOKEN", std::ffi::OsStr::new("not-the-token")),
            ("RUST_LOG", std::ffi::OsStr::new("debug,async_nats=info")),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                std::ffi::OsStr::new(&endpoint),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", std::ffi::OsStr::new("100")),
        ],
    );
    let _worker = command.stderr(log).spawn().unwrap();
    worker_ready(&sys, "w-http").await;

    let brief = "Echo over HTTP.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__remote__echo", json!({"text": "over http"})),
    );
    sys.mock.push(&lane, orch(true, "It echoed."));
    summon(&sys, "default", "s-mcp-http", "o-mcp-http", brief).await;
    let output = watch.wait_output("o-mcp-http", 1).await;
    assert_eq!(output.message, "It echoed.");
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(
        tool_results(&requests[1]),
        vec![("echo: over http".to_owned(), false)]
    );
    let names = tool_names(&requests[0]);
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__locked")),
        "{names:?}"
    );
    let status = watch
        .wait_status("o-mcp-http", "the locked server named", |st| {
            !st.mcp_failures.is_empty()
        })
        .await;
    assert_eq!(status.mcp_failures.len(), 1, "{:?}", status.mcp_failures);
    let failure = &status.mcp_failures[0];
    assert!(
        failure.starts_with("locked: ") && failure.contains("401"),
        "{failure}"
    );

    // The call's span: an MCP tool of the server "remote".
    let span = arbiter_tests::eventually(WAIT, "the MCP call's span", || async {
        otlp.spans()
            .into_iter()
            .find(|s| s.name == "execute_tool mcp__remote__echo")
    })
    .await;
    assert_eq!(span.str("arbiter.mcp.server"), Some("remote"), "{span:?}");
    assert_eq!(span.str("mcp.method.name"), Some("tools/call"));
    assert_eq!(span.str("gen_ai.tool.type"), Some("extension"));

    // The token, nowhere it could be read.
    for span in otlp.spans() {
        assert!(
            !format!("{span:?}").contains(&token),
            "the token in a span: {span:?}"
        );
    }
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged.contains("MCP servers started"),
        "the log is the worker's: {logged}"
    );
    assert!(!logged.contains(&token), "the token is in the worker's log");
    let records = serde_json::to_string(&state_records(&sys, "o-mcp-http").await).unwrap();
    assert!(!records.contains(&token));
    for request in sys.mock.requests() {
        assert!(!request.body.to_string().contains(&token));
    }
    for st in watch.statuses() {
        assert!(!serde_json::to_string(&st).unwrap().contains(&token));
    }
}

/// What the human sees: the Arbiter summons an Orchestrator that needs the
/// MCP server "jira", which no worker offers (the one worker offers "fx");
/// the summons is refused back to the Arbiter, naming the server and what
/// is offered, and nothing is summoned; its next summons, needing "fx",
/// goes to that worker and the log says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_needing_a_server_no_worker_offers_is_refused_naming_it() {
    let mut sys = System::start_with(no_worker(true)).await;
    let config = with_servers(
        sys.worker_config("worker-0", 2, 200_000),
        vec![test_stdio("fx", "stdio")],
    );
    sys.spawn_worker_with(config);
    worker_ready(&sys, "worker-0").await;
    let s = "s-mcp-needs";
    let log = sys.watch_log(s).await;
    let words = "File the bug in the tracker.";
    let arb = arbiter_lane(words);
    sys.mock
        .push(&arb, summons("File the bug.", json!({"needs": ["jira"]})));
    sys.mock.push(
        &arb,
        summons("Echo the bug instead.", json!({"needs": ["fx"]})),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Done."));
    let brief = "Echo the bug instead.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__fx__echo", json!({"text": "bug"})),
    );
    sys.mock.push(&lane, orch(true, "Echoed the bug."));
    sys.send(s, words).await;

    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Echoed the bug."),
    )
    .await;
    let requests = sys.mock.requests_for(&arb);
    assert!(requests.len() >= 2);
    let refusal = requests[1].last_user_text();
    assert!(
        refusal.contains(
            "no worker of the pool \"default\" offers the MCP server jira (MCP servers offered \
             there: fx), so nothing was summoned"
        ),
        "{refusal}"
    );
    let summoned = summoned(&log, 1).await;
    assert_eq!(summoned.len(), 1, "only the second summons went");
    assert_eq!(summoned[0].brief, brief);
    assert!(
        log.bodies().iter().any(|b| matches!(b, LogBody::System(e)
            if e.text == "Orchestrator I is summoned to the pool \"default\" on the runtime \"any\", needing the MCP servers fx.")),
        "{:#?}",
        log.bodies()
    );
    let results = tool_results(&sys.mock.requests_for(&lane)[1]);
    assert_eq!(results, vec![("echo: bug".to_owned(), false)]);

    // The log's evidence counts the MCP call by its server, and the
    // console's evidence line shows it.
    let evidence = log
        .bodies()
        .into_iter()
        .find_map(|b| match b {
            LogBody::Orchestrator(e) if e.text == "Echoed the bug." => e.evidence,
            _ => None,
        })
        .expect("the report's evidence");
    assert_eq!(
        evidence.tools,
        vec![ToolCalls {
            tool: "mcp__fx".into(),
            calls: 1,
            failed: 0
        }]
    );
    let lines = crate::evidence::console_lines(&sys, s).await;
    assert!(lines.contains("1 tool call (mcp__fx 1)"), "{lines}");
}

/// What the model behind the Claude Code CLI sees: the worker's stdio
/// server (the reference `mcp-server-time`, in the worker's sandbox) among
/// its tools as `mcp__time__get_current_time`, with no other MCP server
/// (`--strict-mcp-config`); its call is allowed and the server's real
/// answer comes back to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claude_code_runtime_is_given_the_servers_through_its_mcp_config() {
    claude_cli_bin();
    let mut sys = System::start_with(Options {
        runtime: arbiter_worker::Runtime::ClaudeCode,
        ..no_worker(false)
    })
    .await;
    let watch = Watch::start(&sys).await;
    let time = mcp_dir().join("bin/mcp-server-time");
    let config = with_servers(
        sys.worker_config("worker-0", 1, 200_000),
        vec![stdio(
            "time",
            &time.to_string_lossy(),
            &["--local-timezone", "UTC"],
        )],
    );
    sys.spawn_worker_with(config);
    worker_ready(&sys, "worker-0").await;
    let brief = "What time is it in Tokyo?";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "mcp__time__get_current_time",
            json!({"timezone": "Asia/Tokyo"}),
        ),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "StructuredOutput",
            json!({"expects_response": false, "message": "It is evening in Tokyo."}),
        ),
    );
    // The CLI's session id is the Orchestrator's: a UUID.
    let orch_id = uuid::Uuid::now_v7().to_string();
    summon(&sys, "default", "s-mcp-claude", &orch_id, brief).await;
    let output = watch.wait_output(&orch_id, 1).await;
    assert_eq!(output.message, "It is evening in Tokyo.");
    let requests = sys.mock.requests_for(&lane);
    let names = tool_names(&requests[0]);
    assert!(
        names.iter().any(|n| n == "mcp__time__get_current_time"),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .filter(|n| n.starts_with("mcp__"))
            .all(|n| n.starts_with("mcp__time__")),
        "{names:?}"
    );
    let text = requests[1].all_text();
    assert!(
        text.contains("Asia/Tokyo") && text.contains("datetime"),
        "the server's real answer: {text}"
    );
}

/// What the model sees: a long tool whose server answers with a task
/// handle (the tasks extension, SEP-2663; the server is rmcp's, in
/// `tests/src/bin/mcp-task-server.rs`) comes back with its final result
/// once the worker has polled the task to its end (1.5 s); one that would
/// take a minute is given up at the tool timeout (3 s) with an error
/// result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answered_with_a_task_handle_is_polled_to_its_result() {
    let mut sys = System::start_with(no_worker(false)).await;
    let watch = Watch::start(&sys).await;
    let bin = arbiter_tests::bin("mcp-task-server");
    let mut server = stdio("slow", &bin.to_string_lossy(), &[]);
    server.tool_timeout = Duration::from_secs(3);
    let mut config = with_servers(sys.worker_config("worker-0", 1, 200_000), vec![server]);
    config.sandbox.show.push(bin.parent().unwrap().to_owned());
    sys.spawn_worker_with(config);
    worker_ready(&sys, "worker-0").await;

    let brief = "Square twelve, slowly.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__slow__slow_square", json!({"n": 12, "ms": 1500})),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use("mcp__slow__slow_square", json!({"n": 13, "ms": 60000})),
    );
    sys.mock
        .push(&lane, orch(true, "144; the second took too long."));
    let started = Instant::now();
    summon(&sys, "default", "s-mcp-task", "o-mcp-task", brief).await;
    let output = watch.wait_output("o-mcp-task", 1).await;
    assert_eq!(output.message, "144; the second took too long.");
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    assert_eq!(
        tool_results(&requests[1]),
        vec![("12 squared is 144".to_owned(), false)]
    );
    assert_eq!(
        tool_results(&requests[2]),
        vec![(
            "mcp__slow__slow_square: the MCP server \"slow\" did not answer within 3 s; the call \
             was given up"
                .to_owned(),
            true
        )]
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "nothing waits past the timeout: {took:?}"
    );
}
