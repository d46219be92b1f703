//! The codex runtime against the real Codex CLI (`CODEX_CLI_BIN`, from the
//! pinned `openai-codex-cli-bin` wheel) and the OpenAI mock's Responses API:
//! an Orchestrator moves to another worker with its Codex thread, Codex's
//! sandbox keeps writes in the workspace, context warnings ride in the next
//! turn's input, a turn the CLI fails ends in a `failed` event with its cause
//! and frees the slot, and a worker without a usable CLI (or with a model
//! Codex cannot talk to) refuses to start.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use arbiter_protocol::{LogBody, WireError};
use arbiter_tests::{Gate, OpenAiReply, ResponsesRequestExt, eventually};
use arbiter_worker::Runtime;
use arbiter_worker::context::{CRITICAL_MARK, NOTICE_MARK};
use common::*;
use serde_json::{Value, json};

fn output(expects_response: bool, message: &str) -> OpenAiReply {
    OpenAiReply::json(&json!({"expects_response": expects_response, "message": message}))
}

/// A command the model runs through Codex's `exec_command` tool.
fn command(cmd: &str) -> OpenAiReply {
    OpenAiReply::tool_call("exec_command", json!({"cmd": cmd}))
}

/// A system whose in-process worker runs Orchestrators on Codex, up and ready.
async fn codex_system(budget: u64) -> System {
    codex_cli_bin();
    let sys = System::start_with(Options {
        runtime: Runtime::Codex,
        slots: 1,
        orch_context_budget: budget,
        ..Default::default()
    })
    .await;
    sys.worker_up("worker-0").await;
    sys
}

/// The human's first words make the Arbiter summon an Orchestrator with `brief`.
async fn summon(sys: &System, session: &str, brief: &str) {
    let arb = arbiter_lane(&format!("start {session}"));
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.send(session, &format!("start {session}")).await;
}

/// The first `error` entry of the log.
async fn first_error(log: &LogWatch) -> WireError {
    let at = log
        .wait_for("an error entry", |b| matches!(b, LogBody::Error(_)))
        .await;
    match &log.bodies()[at] {
        LogBody::Error(e) => e.error.clone(),
        _ => unreachable!(),
    }
}

/// The worker's presence: its slots in use.
async fn slots_used(sys: &System, worker: &str) -> u64 {
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

/// The Codex processes running for the workspaces under `root`, by pid.
fn cli_pids(root: &Path) -> Vec<i32> {
    let homes = root.join(".codex").to_string_lossy().into_owned();
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

/// The outputs of the tool calls the model made, as Codex sent them back.
fn tool_outputs(request: &arbiter_tests::RecordedRequest) -> Vec<String> {
    request.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| item["output"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_orchestrator_moves_to_another_worker_with_its_thread() {
    let cli = codex_cli_bin();
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    // The Arbiter's answer is scripted only once worker A is gone.
    sys.mock.set_reply_wait(Duration::from_secs(60));
    let roots = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let base_url = sys.openai.base_url();
    let worker = |id: &str, root: &Path| {
        sys.worker_process_with(
            id,
            1,
            &[
                ("ARBITER_RUNTIME", "codex".as_ref()),
                ("CODEX_CLI_BIN", cli.as_os_str()),
                ("ARBITER_WORKSPACE_ROOT", root.as_os_str()),
                (
                    "ORCHESTRATOR_MODEL",
                    format!("openai:{ORCH_MODEL}").as_ref(),
                ),
                ("OPENAI_BASE_URL", base_url.as_ref()),
                ("OPENAI_API_KEY", API_KEY.as_ref()),
            ],
        )
    };
    let mut a = worker("worker-a", roots[0].path());
    sys.worker_up("worker-a").await;
    let s = "s-move";
    let brief = "Move with me.";
    let lane = orch_lane(brief);
    let arb = arbiter_lane(&format!("start {s}"));
    let ws_a = roots[0].path().join(s);
    let ws_b = roots[1].path().join(s);
    // Turn 1 on worker A: a file, then a question.
    sys.openai.push(&lane, command("echo 1 > one.txt"));
    sys.openai
        .push(&lane, output(true, "One is written. Go on to two?"));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the question of turn 1",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "One is written. Go on to two?"),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(ws_a.join("one.txt")).unwrap(),
        "1\n"
    );

    // Between turns, worker A's host dies: kill -9.
    let _ = std::process::Command::new("kill")
        .args(["-9", &a.id().unwrap().to_string()])
        .status();
    a.wait().await.unwrap();

    // The workspace is restored under another root; B resumes there.
    copy_dir(&ws_a, &ws_b);
    sys.openai.push(&lane, command("echo 2 > two.txt"));
    sys.openai.push(&lane, output(true, "Two is written."));
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Yes, go on."));
    let _b = worker("worker-b", roots[1].path());
    log.wait_for(
        "the report from the resumed thread",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Two is written."),
    )
    .await;

    let requests = sys.openai.requests_for(&lane);
    assert_eq!(requests.len(), 4, "{:?}", sys.openai.lane_counts());
    let resumed = &requests[2];
    // The same Codex thread (its id is the prompt cache key), from B's
    // workspace, with the earlier turn in it.
    assert_eq!(
        resumed.body["prompt_cache_key"], requests[0].body["prompt_cache_key"],
        "the same thread"
    );
    let said = resumed.input_texts("assistant").join("\n");
    assert!(said.contains("One is written. Go on to two?"), "{said}");
    let user = resumed.input_texts("user").join("\n");
    assert!(
        user.contains(brief) && user.contains("Yes, go on."),
        "{user}"
    );
    assert!(
        user.contains(&format!("<cwd>{}</cwd>", ws_b.display())),
        "{user}"
    );
    assert!(
        tool_outputs(resumed).len() == 1,
        "turn 1's command is in it"
    );
    assert_eq!(
        std::fs::read_to_string(ws_b.join("two.txt")).unwrap(),
        "2\n"
    );
    // One Orchestrator throughout: I, never II.
    let numbers: Vec<u32> = log
        .bodies()
        .iter()
        .filter_map(|b| match b {
            LogBody::Orchestrator(o) => Some(o.number),
            LogBody::Summoned(s) => Some(s.number),
            _ => None,
        })
        .collect();
    assert_eq!(numbers, vec![1, 1, 1]);

    // The records hold the thread and its rollout, and never the key.
    let orch_id = log
        .bodies()
        .iter()
        .find_map(|b| match b {
            LogBody::Summoned(s) => Some(s.orch_id.clone()),
            _ => None,
        })
        .unwrap();
    // Its records: on `.state`, and a step with outputs on `.out`.
    let subjects = [
        arbiter_protocol::subjects::orch_state(&orch_id),
        arbiter_protocol::subjects::orch_out(&orch_id),
    ];
    let mut stream = sys
        .bus
        .js
        .get_stream(arbiter_protocol::subjects::ORCH_STATE_STREAM)
        .await
        .unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    let mut rollout = String::new();
    let mut threads = Vec::new();
    for seq in 1..=last {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        if !subjects.iter().any(|s| message.subject.as_str() == s) {
            continue;
        }
        let text = String::from_utf8_lossy(&message.payload).into_owned();
        assert!(!text.contains(API_KEY), "the key is in a record");
        let record: Value = serde_json::from_str(&text).unwrap();
        if let Some(piece) = record["cli_transcript"]["append"].as_str() {
            rollout.push_str(piece);
        }
        if let Some(thread) = record["snapshot"]["codex"]["thread_id"].as_str() {
            threads.push(thread.to_owned());
        }
    }
    assert!(
        rollout.contains("\"session_meta\""),
        "the rollout is stored"
    );
    assert!(
        rollout.contains("Two is written."),
        "turn 2 on B is stored too"
    );
    threads.dedup();
    assert_eq!(threads.len(), 1, "one thread throughout: {threads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_short_by_a_dead_worker_runs_again_from_the_stored_thread() {
    let cli = codex_cli_bin();
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let base_url = sys.openai.base_url();
    // The worker restarts on the same host: the same workspace root, where
    // the dead run's CODEX_HOME (with turn 2 begun in it) is still on disk.
    let root = sys.workspaces.path().to_owned();
    let worker = |id: &str| {
        sys.worker_process_with(
            id,
            1,
            &[
                ("ARBITER_RUNTIME", "codex".as_ref()),
                ("CODEX_CLI_BIN", cli.as_os_str()),
                (
                    "ORCHESTRATOR_MODEL",
                    format!("openai:{ORCH_MODEL}").as_ref(),
                ),
                ("OPENAI_BASE_URL", base_url.as_ref()),
                ("OPENAI_API_KEY", API_KEY.as_ref()),
            ],
        )
    };
    let mut a = worker("worker-a");
    sys.worker_up("worker-a").await;
    let s = "s-cut";
    let brief = "Survive a cut.";
    let lane = orch_lane(brief);
    let arb = arbiter_lane(&format!("start {s}"));
    sys.openai.push(&lane, output(true, "Ready. Go?"));
    // Turn 2 starts on A and is held at the model until A is gone.
    let hold = Gate::new();
    sys.openai
        .push(&lane, output(true, "never sent").gated(hold.clone()));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Go now."));
    sys.openai.wait_for_requests(&lane, 2, WAIT).await;
    let cut = &sys.openai.requests_for(&lane)[1];
    assert!(
        cut.input_texts("user")
            .iter()
            .any(|t| t.starts_with("Go now."))
    );

    // A dies mid-turn, its CLI with it.
    let pids = cli_pids(&root);
    assert!(
        !pids.is_empty(),
        "the Codex process of the turn (and its helpers)"
    );
    for pid in pids
        .iter()
        .chain(std::iter::once(&(a.id().unwrap() as i32)))
    {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    a.wait().await.unwrap();
    hold.open();
    sys.openai.push(&lane, output(true, "Done after the cut."));
    let _b = worker("worker-b");
    log.wait_for(
        "the report of the turn run again",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done after the cut."),
    )
    .await;
    let requests = sys.openai.requests_for(&lane);
    let again = requests.last().unwrap();
    // The same thread, from the stored rollout: turn 1 once, the Arbiter's
    // words once (the cut turn's copy is not in it).
    assert_eq!(
        again.body["prompt_cache_key"],
        requests[0].body["prompt_cache_key"]
    );
    let user = again.input_texts("user");
    let sent = user.iter().filter(|t| t.starts_with("Go now.")).count();
    assert_eq!(sent, 1, "{user:#?}");
    let said = again.input_texts("assistant");
    assert_eq!(
        said.iter().filter(|t| t.contains("Ready. Go?")).count(),
        1,
        "{said:#?}"
    );
    assert!(!said.iter().any(|t| t.contains("never sent")));
}

/// Copies a directory tree (the workspace, restored on another host).
fn copy_dir(from: &Path, to: &Path) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_commands_write_in_the_workspace_and_nowhere_else() {
    let sys = codex_system(200_000).await;
    let s = "s-outside";
    let brief = "Write outside.";
    let lane = orch_lane(brief);
    let outside = tempfile::tempdir().unwrap();
    let in_tmp = outside.path().join("by-bash.txt");
    let elsewhere = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("codex-escaped-{}.txt", std::process::id()));
    let escalated = outside.path().join("escalated.txt");
    sys.openai.push(
        &lane,
        command(&format!(
            "echo inside > inside.txt; echo \"key=$ARBITER_CODEX_API_KEY\" > key.txt; \
             (cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {API_KEY}) > procs.txt; \
             echo escaped > {}; echo escaped > {}",
            in_tmp.display(),
            elsewhere.display()
        )),
    );
    sys.openai.push(
        &lane,
        OpenAiReply::tool_call(
            "exec_command",
            json!({"cmd": format!("echo escaped > {}", escalated.display()),
                   "sandbox_permissions": "require_escalated",
                   "justification": "write outside"}),
        ),
    );
    sys.openai.push(&lane, output(true, "Tried."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the Orchestrator's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Tried."),
    )
    .await;
    // In the workspace it wrote; outside (in /tmp or not) it did not, and
    // the command that asked to leave the sandbox was refused.
    let ws = sys.workspace(s);
    assert_eq!(
        std::fs::read_to_string(ws.join("inside.txt")).unwrap(),
        "inside\n"
    );
    assert!(
        !in_tmp.exists(),
        "a write to /tmp outside the workspace ran"
    );
    assert!(!elsewhere.exists(), "a write outside the workspace ran");
    assert!(!escalated.exists(), "an escalated command ran");
    // The key is not in the commands' environment.
    assert_eq!(
        std::fs::read_to_string(ws.join("key.txt")).unwrap(),
        "key=\n"
    );
    // Nor can they read it from the CLI's own environment in /proc.
    assert_eq!(
        std::fs::read_to_string(ws.join("procs.txt")).unwrap(),
        "0\n"
    );
    let requests = sys.openai.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    let outputs = tool_outputs(&requests[2]);
    assert!(outputs[0].contains("Read-only file system"), "{outputs:?}");
    assert!(
        outputs[1].contains("approval policy is Never"),
        "{outputs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_warning_rides_in_the_next_turns_input() {
    // A budget of 1000 tokens: turn 1's request fills 750 (75 %).
    let sys = codex_system(1000).await;
    let s = "s-warn";
    let brief = "Fill the context.";
    let lane = orch_lane(brief);
    let arb = arbiter_lane(&format!("start {s}"));
    sys.openai.push(
        &lane,
        output(true, "Big look done. Go on?").usage(750, 20, 0),
    );
    sys.openai
        .push(&lane, output(true, "Done.").usage(100, 20, 0));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Go on."));
    log.wait_for(
        "the last report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done."),
    )
    .await;
    let requests = sys.openai.requests_for(&lane);
    assert_eq!(requests.len(), 2);
    let first = requests[0].input_texts("user").join("\n");
    assert!(!first.contains(NOTICE_MARK), "{first}");
    let second = requests[1].input_texts("user");
    let last = second.last().unwrap();
    assert!(
        last.starts_with("Go on.") && last.contains(NOTICE_MARK) && last.contains("75%"),
        "{last}"
    );
}

/// Past 85 % a codex Orchestrator's report must carry its handoff packet,
/// as on the other runtimes: a report without one goes back to Codex, in
/// the next turn's input with the critical warning, and the repaired report
/// reaches the log with its packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_85_percent_a_codex_report_without_a_packet_is_sent_back_for_one() {
    let sys = codex_system(200_000).await;
    let s = "s-codex-packet";
    let brief = "Fill up and report.";
    let lane = orch_lane(brief);
    // 180k of the 200k budget: 90 %.
    sys.openai.push(
        &lane,
        output(true, "Done, no packet.").usage(180_000, 20, 0),
    );
    let packet = json!({
        "done": [{"id": "T1", "what": "looked around", "files": []}],
        "open": [{"id": "T2", "what": "write b.txt"}],
        "decisions": [],
        "questions": [],
        "next_step": "Write b.txt.",
    });
    sys.openai.push(
        &lane,
        OpenAiReply::json(
            &json!({"expects_response": true, "message": "Done, with a packet.", "handoff": packet}),
        )
        .usage(181_000, 20, 0),
    );
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    let at = log
        .wait_for(
            "the repaired report",
            |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done, with a packet."),
        )
        .await;
    assert!(
        !log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done, no packet."))
    );
    let LogBody::Orchestrator(report) = &log.bodies()[at] else {
        unreachable!()
    };
    let carried = report
        .handoff
        .as_ref()
        .expect("the packet rides on the report");
    assert_eq!(carried.open[0].id, "T2");
    // Codex's model was told why, and warned, in the next turn's input.
    let requests = sys.openai.requests_for(&lane);
    assert_eq!(requests.len(), 2);
    let input = requests[1].input_texts("user");
    let last = input.last().unwrap();
    assert!(
        last.contains("90% of your context is used, so this reply must carry your `handoff`")
            && last.contains(CRITICAL_MARK),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_codex_ends_its_turn_with_is_a_failed_event() {
    let sys = codex_system(200_000).await;
    let s = "s-400";
    let brief = "Hit an error.";
    let lane = orch_lane(brief);
    for _ in 0..4 {
        sys.openai.push(
            &lane,
            OpenAiReply::http_error(
                400,
                "invalid_request_error",
                "mock: this request is refused",
            ),
        );
    }
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    let error = first_error(&log).await;
    let text = error.to_string();
    assert!(
        text.contains("the Codex CLI ended the turn in an error")
            && text.contains("this request is refused"),
        "{text}"
    );
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
    assert!(cli_pids(sys.workspaces.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_killed_mid_turn_is_a_failed_event_and_frees_the_slot() {
    let sys = codex_system(200_000).await;
    let s = "s-crash";
    let brief = "Crash.";
    let lane = orch_lane(brief);
    let hold = Gate::new();
    sys.openai
        .push(&lane, output(true, "never sent").gated(hold.clone()));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.openai.wait_for_requests(&lane, 1, WAIT).await;
    let pids = cli_pids(sys.workspaces.path());
    assert!(!pids.is_empty());
    for pid in pids {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let text = first_error(&log).await.to_string();
    assert!(
        text.contains("the Codex CLI stopped before the turn completed")
            && text.contains("signal: 9"),
        "{text}"
    );
    hold.open();
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
}

/// A script standing in for the CLI.
fn fake_cli(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("codex");
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_that_prints_a_line_that_is_not_json_is_a_failed_event() {
    let real = codex_cli_bin();
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_cli(
        dir.path(),
        &format!(
            "if [ \"$1\" = --version ]; then exec '{}' --version; fi\n\
             echo 'Welcome to Codex!'\nexec sleep 30\n",
            real.display()
        ),
    );
    let mut sys = System::start_with(Options {
        runtime: Runtime::Codex,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-0", 1, 200_000);
    config.codex.bin = fake;
    sys.spawn_worker_with(config);
    sys.worker_up("worker-0").await;
    let s = "s-garbage";
    let log = sys.watch_log(s).await;
    summon(&sys, s, "Say something odd.").await;
    let text = first_error(&log).await.to_string();
    assert!(
        text.contains("the Codex CLI printed a line that is not JSON: Welcome to Codex!"),
        "{text}"
    );
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_worker_without_a_usable_codex_refuses_to_start_saying_what_to_install() {
    let real = codex_cli_bin();
    let dir = tempfile::tempdir().unwrap();
    let old = fake_cli(dir.path(), "echo 'codex-cli 0.100.0'\n");
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    let broken = fake_cli(&broken, "echo 'segfault' >&2; exit 139\n");
    let openai = format!("openai:{ORCH_MODEL}");
    let anthropic = format!("anthropic:{ORCH_MODEL}");
    let cases = [
        (dir.path().join("missing"), &openai, "was not found"),
        (old, &openai, "is version 0.100.0, older than 0.163.0"),
        (broken, &openai, "is not a working Codex CLI"),
        (real, &anthropic, "set ORCHESTRATOR_MODEL to openai:<model>"),
    ];
    for (bin, model, says) in cases {
        let out = tokio::process::Command::new(arbiter_tests::bin("arbiter-worker"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("OPENAI_API_KEY", API_KEY)
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("ORCHESTRATOR_MODEL", model)
            .env("ARBITER_WORKSPACE_ROOT", dir.path().join("ws"))
            // Nothing listens here: it must refuse before it connects.
            .env("NATS_URL", "nats://127.0.0.1:1")
            .args(["--runtime", "codex", "--sandbox", "none", "--codex-bin"])
            .arg(&bin)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("the worker refuses at once")
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.trim().lines().last().unwrap_or_default();
        let hint =
            says.starts_with("set") || last.contains("pip install openai-codex-cli-bin==0.163.0");
        assert!(
            last.starts_with("arbiter-worker: ") && last.contains(says) && hint,
            "{}: {stderr}",
            bin.display()
        );
    }
}
