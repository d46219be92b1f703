//! `arbiter-mcp`, Arbiter as an MCP server, driven by a real MCP client
//! (the `mcp` PyPI SDK, `tests/mcp/drive_arbiter_mcp.py`) over stdio and
//! over streamable HTTP, against a secure system (TLS, a credential per
//! role; the server on the console's), the real coordinator and worker and
//! the mock model. What an MCP client's user sees in the tools' results is
//! what these tests read.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use arbiter_tests::{Gate, MockReply, bin, eventually};
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The longest one tool call may take before the test calls it a hang.
const CALL: Duration = Duration::from_secs(90);
/// How long a flow of the mock model takes at most.
const FLOW: Duration = Duration::from_secs(40);

/// The SDK's Python (`$ARBITER_MCP_DIR/bin/python`); panics with what to
/// run when it is not set.
fn python() -> PathBuf {
    match std::env::var_os("ARBITER_MCP_DIR") {
        Some(dir) => PathBuf::from(dir).join("bin").join("python"),
        None => panic!(
            "ARBITER_MCP_DIR is not set: run `export ARBITER_MCP_DIR=$(scripts/install-mcp-servers)` \
             (scripts/test does this)"
        ),
    }
}

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/drive_arbiter_mcp.py")
}

/// `arbiter-mcp`'s NATS flags for the console credential, as a user gives them.
fn nats_flags(sys: &System) -> Vec<String> {
    let o = sys.nats_options("console");
    let mut flags = vec!["--nats-url".to_owned(), o.url.clone()];
    for (flag, path) in [
        ("--creds", o.creds),
        ("--tlsca", o.tls_ca),
        ("--tlscert", o.tls_cert),
        ("--tlskey", o.tls_key),
    ] {
        if let Some(path) = path {
            flags.push(flag.to_owned());
            flags.push(path.display().to_string());
        }
    }
    flags
}

async fn secure_system() -> System {
    System::start_with(Options {
        secure: true,
        ..Default::default()
    })
    .await
}

/// The Python MCP client, connected, taking one tool call at a time.
struct McpClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// What it said on connecting: the server's name, the protocol, the tools.
    connected: Value,
}

impl McpClient {
    /// Launches `arbiter-mcp` with `args` over stdio; its stderr goes to `stderr`.
    async fn stdio(args: &[String], stderr: &Path) -> Self {
        let mut command = Command::new(python());
        command
            .arg(driver())
            .arg("stdio")
            .arg(bin("arbiter-mcp"))
            .args(args)
            .env("ARBITER_MCP_STDERR", stderr);
        Self::start(command).await.unwrap_or_else(|e| {
            panic!(
                "the MCP client could not connect to arbiter-mcp over stdio: {e}\n\
                 arbiter-mcp's stderr:\n{}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            )
        })
    }

    /// Connects over streamable HTTP to `url`, with `token` as the bearer.
    async fn http(url: &str, token: Option<&str>) -> Result<Self, String> {
        let mut command = Command::new(python());
        command.arg(driver()).arg("http").arg(url).args(token);
        Self::start(command).await
    }

    async fn start(mut command: Command) -> Result<Self, String> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(process_log("mcp-client"))
            .kill_on_drop(true);
        let mut child = command.spawn().expect("the SDK's python starts");
        let stdin = child.stdin.take().expect("its stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        let first = next_json(&mut lines, "the client's first line").await;
        if let Some(error) = first.get("error") {
            return Err(error.to_string());
        }
        Ok(Self {
            child,
            stdin,
            lines,
            connected: first["connected"].clone(),
        })
    }

    /// Calls `tool`: `{is_error, structured, text}`, or `{error}` when the call itself failed.
    async fn call(&mut self, tool: &str, args: Value) -> Value {
        let request = json!({"tool": tool, "args": args});
        self.stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        let answer = next_json(&mut self.lines, &format!("the answer to {request}")).await;
        assert!(
            answer.get("error").is_none(),
            "the MCP call {request} failed as a call (not as a tool error): {answer}"
        );
        answer
    }

    /// Calls `tool` and returns its structured result; fails the test, with
    /// the tool's words, when it is a tool error.
    async fn ok(&mut self, tool: &str, args: Value) -> Value {
        let answer = self.call(tool, args.clone()).await;
        assert_eq!(
            answer["is_error"], false,
            "{tool}({args}) was a tool error: {}",
            answer["text"]
        );
        answer["structured"].clone()
    }

    /// Calls `tool`, which must fail as a tool error; returns its words.
    async fn refused(&mut self, tool: &str, args: Value) -> String {
        let answer = self.call(tool, args.clone()).await;
        assert_eq!(
            answer["is_error"], true,
            "{tool}({args}) should have been a tool error: {answer}"
        );
        answer["text"].as_str().unwrap_or_default().to_owned()
    }

    async fn close(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

async fn next_json(lines: &mut Lines<BufReader<ChildStdout>>, what: &str) -> Value {
    let line = tokio::time::timeout(CALL, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("no answer within {CALL:?} for {what}: a hang"))
        .expect("the client's stdout")
        .unwrap_or_else(|| panic!("the MCP client exited before {what} (its log: mcp-client)"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what} is not JSON ({e}): {line}"))
}

/// A session's conversation as an MCP client reads it, page by page.
#[derive(Default)]
struct Conversation {
    lines: Vec<String>,
    since: u64,
}

impl Conversation {
    /// Reads on from where the last page ended; returns the new lines.
    async fn read_on(&mut self, mcp: &mut McpClient, session: &str) -> Vec<String> {
        let page = mcp
            .ok("read", json!({"session": session, "since_seq": self.since}))
            .await;
        let new: Vec<String> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| line_of(e["speaker"].as_str().unwrap(), e["text"].as_str().unwrap()))
            .collect();
        self.since = page["next_since_seq"].as_u64().unwrap();
        self.lines.extend(new.iter().cloned());
        new
    }
}

/// An entry as the console shows it: `You: …`, `· Orchestrator I summoned.`
fn line_of(speaker: &str, text: &str) -> String {
    if speaker.ends_with(char::is_alphanumeric) {
        format!("{speaker}: {text}")
    } else {
        format!("{speaker} {text}")
    }
}

/// Whether `wanted` appear in `lines` in this order (others may come between).
fn in_order(lines: &[String], wanted: &[&str]) -> bool {
    let mut it = lines.iter();
    wanted.iter().all(|w| it.by_ref().any(|line| line == w))
}

/// Polls `status` until `done` holds for it; returns it.
async fn status_until(
    mcp: &mut McpClient,
    session: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + FLOW;
    loop {
        let status = mcp.ok("status", json!({"session": session})).await;
        if done(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session's status never showed {what}; the last: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn orchestrators(status: &Value) -> Vec<String> {
    status["orchestrators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_owned())
        .collect()
}

const BRIEF_A: &str = "Write a greeting in hello.txt.";
const ORCH_BRIEF_A: &str = "Brief: write hello.txt saying hello.";
const ANSWER_A: &str = "It is done: hello.txt says hello.";
const FACT_A: &str = "Greetings live in hello.txt.";
const BRIEF_B: &str = "Count to a billion.";
const ORCH_BRIEF_B: &str = "Brief: count to a billion, slowly.";
const STOPPED_B: &str = "Stopped by console console: Orchestrator I was cancelled. Write to go on.";

/// What an MCP client's user sees: `start_session` returns a session id at
/// once; following it with `status` and `read`, Orchestrator I is seen at
/// work, then the whole conversation arrives in order under the console's
/// speakers, ending with the Arbiter's answer, after which nothing waits for
/// the human (as the console's sessions list says); the workspace named at the
/// start keeps what the session learned. `stop` on a second session stops
/// its Orchestrator and says so, and its status shows it idle. Lines the
/// console refuses, malformed or unknown sessions and a NATS server gone
/// are tool errors with a sentence, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_starts_follows_and_stops_sessions_over_stdio() {
    let mut sys = secure_system().await;
    let logs = tempfile::tempdir().unwrap();
    let stderr = logs.path().join("arbiter-mcp.stderr");

    // Session A: the seed's flow, its report held until the test has seen
    // Orchestrator I at work.
    let arb_a = arbiter_lane(BRIEF_A);
    sys.mock.push(
        &arb_a,
        MockReply::json(&json!({
            "intent": "summon_orchestrator", "message": ORCH_BRIEF_A, "memory": [FACT_A],
        })),
    );
    sys.mock.push(
        &orch_lane(ORCH_BRIEF_A),
        MockReply::tool_use("write", json!({"path": "hello.txt", "content": "hello\n"})),
    );
    let hold = Gate::new();
    sys.mock.push(
        &orch_lane(ORCH_BRIEF_A),
        orch(true, "Wrote hello.txt.").gated(hold.clone()),
    );
    sys.mock
        .push(&arb_a, arbiter("release_orchestrators", ANSWER_A));
    // Session B: an Orchestrator whose model never answers, until stopped.
    sys.mock.push(
        &arbiter_lane(BRIEF_B),
        arbiter("summon_orchestrator", ORCH_BRIEF_B),
    );
    let never = Gate::new();
    sys.mock.push(
        &orch_lane(ORCH_BRIEF_B),
        orch(true, "Counted.").gated(never.clone()),
    );

    let mut mcp = McpClient::stdio(&nats_flags(&sys), &stderr).await;
    assert_eq!(mcp.connected["server"], "arbiter-mcp", "{}", mcp.connected);
    let mut tools: Vec<&str> = mcp.connected["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    tools.sort();
    assert_eq!(
        tools,
        [
            "list_sessions",
            "read",
            "send",
            "start_session",
            "status",
            "stop"
        ],
        "the six tools"
    );

    // A: started, followed, answered.
    let started = mcp
        .ok(
            "start_session",
            json!({"brief": BRIEF_A, "workspace": "mcp-demo"}),
        )
        .await;
    let a = started["session"].as_str().unwrap().to_owned();
    assert_eq!(
        uuid::Uuid::parse_str(&a).unwrap().get_version_num(),
        7,
        "a time-ordered id: {started}"
    );
    assert_eq!(
        started["seq"], 1,
        "the brief is the log's first entry: {started}"
    );
    let at_work = status_until(&mut mcp, &a, "Orchestrator I at work", |s| {
        orchestrators(s) == ["Orchestrator I"] && s["state"] == "working"
    })
    .await;
    assert_eq!(at_work["summoned"], 1, "{at_work:#}");
    let mut conversation = Conversation::default();
    conversation.read_on(&mut mcp, &a).await;
    hold.open();
    let deadline = tokio::time::Instant::now() + FLOW;
    while !conversation
        .lines
        .iter()
        .any(|l| l == &format!("Arbiter: {ANSWER_A}"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Arbiter's answer never came; the conversation read: {:#?}",
            conversation.lines
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        conversation.read_on(&mut mcp, &a).await;
    }
    assert!(
        in_order(
            &conversation.lines,
            &[
                &format!("You: {BRIEF_A}"),
                "· Orchestrator I summoned.",
                &format!("Arbiter → I: {ORCH_BRIEF_A}"),
                "Orchestrator I: Wrote hello.txt.",
                "· Evidence: 1 tool call (write 1), 1 file changed (created: hello.txt)",
                "· Orchestrator I released.",
                &format!("Arbiter: {ANSWER_A}"),
            ]
        ),
        "the conversation, in order: {:#?}",
        conversation.lines
    );
    let idle = status_until(&mut mcp, &a, "the session idle again", |s| {
        s["state"] == "idle" && orchestrators(s).is_empty()
    })
    .await;
    // Settled after its release: nothing waits for the human, and the
    // console's sessions list, on the same stored status, marks nothing either.
    let stored = sys.bus.sessions_kv.get(&a).await.unwrap().unwrap();
    let stored: arbiter_protocol::SessionStatus = serde_json::from_slice(&stored).unwrap();
    assert_eq!(
        (
            idle.get("needs_you"),
            arbiter_console::sessions::attention(&stored)
        ),
        (None, None),
        "{idle:#}\nthe stored attention: {:?}",
        stored.attention
    );
    // Read to the end (what was logged while it settled), then nothing
    // more, and where it ended stays; each line came once.
    conversation.read_on(&mut mcp, &a).await;
    let page = mcp
        .ok(
            "read",
            json!({"session": a, "since_seq": conversation.since}),
        )
        .await;
    assert_eq!(page["entries"], json!([]), "{page:#}");
    assert_eq!(page["more"], 0, "{page:#}");
    assert_eq!(page["next_since_seq"], conversation.since, "{page:#}");
    let you = conversation
        .lines
        .iter()
        .filter(|l| l.starts_with("You: "))
        .count();
    assert_eq!(you, 1, "each entry read once: {:#?}", conversation.lines);
    // The workspace given at the start keeps what the session learned.
    let memory = arbiter_bus::memory::open(&sys.bus.js).await.unwrap();
    eventually(FLOW, "the fact kept on workspace mcp-demo", || async {
        let kept = arbiter_bus::memory::entries(&memory, "mcp-demo")
            .await
            .unwrap();
        kept.iter().any(|e| e.text == FACT_A).then_some(())
    })
    .await;

    // The console's own words for a line it cannot read; nothing is sent.
    let wrong = mcp
        .refused("send", json!({"session": a, "text": "/allow three"}))
        .await;
    assert_eq!(
        wrong,
        "/allow: \"three\" is not an approval's number (write /allow <number>)"
    );
    let shown = mcp
        .ok("send", json!({"session": a, "text": "/budget"}))
        .await;
    assert!(
        shown["outcome"]
            .as_str()
            .unwrap()
            .starts_with("Budget: session "),
        "{shown}"
    );

    // B: stopped while its Orchestrator works.
    let b = mcp.ok("start_session", json!({"brief": BRIEF_B})).await["session"]
        .as_str()
        .unwrap()
        .to_owned();
    status_until(&mut mcp, &b, "Orchestrator I at work in B", |s| {
        orchestrators(s) == ["Orchestrator I"]
    })
    .await;
    sys.mock
        .wait_for_requests(&orch_lane(ORCH_BRIEF_B), 1, FLOW)
        .await;
    let stopped = mcp.ok("stop", json!({"session": b})).await;
    assert_eq!(stopped["outcome"], STOPPED_B, "{stopped}");
    let after = status_until(&mut mcp, &b, "B stopped, idle", |s| {
        s["state"] == "idle" && orchestrators(s).is_empty()
    })
    .await;
    assert_eq!(after["summoned"], 1, "{after:#}");
    let mut log_b = Conversation::default();
    log_b.read_on(&mut mcp, &b).await;
    assert!(
        log_b.lines.contains(&format!("· {STOPPED_B}")),
        "B's log says it was stopped: {:#?}",
        log_b.lines
    );

    // Both sessions in the list, as `arbiter-console sessions` has them.
    let listed = mcp.ok("list_sessions", json!({})).await;
    let rows: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session"].as_str().unwrap())
        .collect();
    assert!(
        rows.contains(&a.as_str()) && rows.contains(&b.as_str()),
        "{listed:#}"
    );

    // Malformed and unknown sessions: tool errors that say so.
    let malformed = mcp.refused("status", json!({"session": "a.b"})).await;
    assert!(malformed.contains("is not a session id"), "{malformed}");
    let unknown = mcp
        .refused("read", json!({"session": "no-such-session"}))
        .await;
    assert!(
        unknown.starts_with("no session no-such-session"),
        "{unknown}"
    );
    let unknown = mcp
        .refused(
            "send",
            json!({"session": "no-such-session", "text": "hello"}),
        )
        .await;
    assert!(
        unknown.starts_with("no session no-such-session"),
        "{unknown}"
    );

    // NATS gone: a tool error within seconds, not a hang.
    sys.nats.kill();
    let started = std::time::Instant::now();
    let down = mcp.refused("status", json!({"session": a})).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the error took {:?}",
        started.elapsed()
    );
    assert!(down.contains("NATS"), "{down}");
    mcp.close().await;
    never.open();
}

/// The token for the HTTP tests: long and unguessable, so that finding it
/// in a log means it was written there.
fn token() -> String {
    format!("mcp-test-token-{}", uuid::Uuid::new_v4().simple())
}

/// `arbiter-mcp --http` on a free port: the process and its MCP URL (the
/// line it prints on stdout).
async fn http_server(sys: &System, args: &[&str], stderr: &Path) -> (Child, String) {
    let mut child = Command::new(bin("arbiter-mcp"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "debug")
        .args(["--http", "127.0.0.1:0"])
        .args(args)
        .args(nats_flags(sys))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("arbiter-mcp prints its address within 20 s")
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "arbiter-mcp exited without serving: {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            )
        });
    let url = line
        .strip_prefix("arbiter-mcp: serving MCP on ")
        .unwrap_or_else(|| panic!("the first line is the address: {line:?}"))
        .to_owned();
    (child, url)
}

/// What an HTTP client sees: without the token, or with a wrong one, every
/// request is 401 and the SDK's client cannot connect; with it, the tools
/// work. The token is in no line of the server's log (at debug level), and
/// a refusal is logged without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_only_the_bearer_token_gets_in_and_it_is_never_logged() {
    let sys = secure_system().await;
    let dir = tempfile::tempdir().unwrap();
    let token = token();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let stderr = dir.path().join("arbiter-mcp.stderr");
    let (mut server, url) = http_server(
        &sys,
        &["--token-file", token_file.to_str().unwrap()],
        &stderr,
    )
    .await;
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );

    let http = reqwest::Client::new();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "curl", "version": "1"}}
    });
    for (what, bearer) in [
        ("no token", None),
        ("a wrong token", Some(format!("{token}x"))),
        ("an empty token", Some(String::new())),
    ] {
        let mut request = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(bearer) = &bearer {
            request = request.bearer_auth(bearer);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "a POST with {what}");
        assert_eq!(
            response.headers().get("www-authenticate").unwrap(),
            "Bearer",
            "a POST with {what}"
        );
    }
    let get = http.get(&url).send().await.unwrap();
    assert_eq!(get.status(), 401, "a GET without the token");
    let other = http
        .get(url.replace("/mcp", "/elsewhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 401, "another path without the token");

    let wrong = McpClient::http(&url, Some("not-the-token-0123456789"))
        .await
        .err()
        .expect("the SDK's client cannot connect with a wrong token");
    assert!(wrong.contains("401"), "the client says why: {wrong}");

    let mut mcp = McpClient::http(&url, Some(&token))
        .await
        .unwrap_or_else(|e| panic!("the SDK's client connects with the token: {e}"));
    assert_eq!(mcp.connected["server"], "arbiter-mcp");
    let listed = mcp.ok("list_sessions", json!({})).await;
    assert_eq!(listed["sessions"], json!([]), "no sessions yet: {listed}");
    let unknown = mcp
        .refused("status", json!({"session": "no-such-session"}))
        .await;
    assert!(
        unknown.starts_with("no session no-such-session"),
        "{unknown}"
    );
    mcp.close().await;

    server.kill().await.unwrap();
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        log.contains("refused a request without the right bearer token"),
        "a refusal is logged: {log}"
    );
    assert!(
        !log.contains(&token),
        "the token is in arbiter-mcp's stderr"
    );
    assert!(
        !log.contains(token.trim_start_matches("mcp-test-token-")),
        "part of the token is in arbiter-mcp's stderr"
    );
}

/// What a user sees starting it wrongly: HTTP without a token, and plain
/// HTTP beyond loopback, are refused with a sentence that says what to do,
/// and nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_without_a_token_or_beyond_loopback_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token()).unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["--http", "127.0.0.1:0"], "--http needs an access token"),
        (
            &[
                "--http",
                "0.0.0.0:0",
                "--token-file",
                token_file.to_str().unwrap(),
            ],
            "refusing to serve plain HTTP on 0.0.0.0:0",
        ),
        (
            &[
                "--http",
                "127.0.0.1:0",
                "--token-file",
                "/nonexistent/token",
            ],
            "cannot read the token file /nonexistent/token",
        ),
    ];
    for (args, says) in cases {
        let out = tokio::time::timeout(
            Duration::from_secs(20),
            Command::new(bin("arbiter-mcp"))
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .args(args)
                .args(["--nats-url", "nats://127.0.0.1:1"])
                .stdin(Stdio::null())
                .output(),
        )
        .await
        .expect("it exits at once")
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was refused");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed no address");
    }
}
