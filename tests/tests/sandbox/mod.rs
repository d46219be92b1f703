//! The bash tool's sandbox end to end (issue #13, "what an attack probe
//! found"): commands that try to read a worker process's API key and NATS
//! credentials, write outside their workspace, or leave processes behind;
//! and a worker that will not start without a working sandbox.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use arbiter_protocol::ControlAction;
use arbiter_tests::{MockReply, eventually};
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::common::*;
use crate::direct::*;

mod reach;

/// What the fake NATS credentials file holds.
const CREDS_SECRET: &str = "SUAKNATSSEEDTHATMUSTNEVERLEAK0123456789";

fn workers_only() -> Options {
    Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    }
}

/// A directory outside `/tmp`: commands get a private `/tmp`, which would
/// hide anything there whatever else the sandbox does.
fn outside_tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// What the user sees: nothing secret. A model that tries the ways the
/// attack probe found to read the worker's API key and NATS credentials
/// gets neither, in its tool results or in the Orchestrator's stored
/// records; `/proc` shows the command's own few processes, not the worker.
/// A variable named in `ARBITER_SANDBOX_ENV` is passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_read_the_workers_api_key_or_nats_credentials() {
    let sys = System::start_with(workers_only()).await;
    let watch = Watch::start(&sys).await;
    let secrets = outside_tmp();
    // The worker's config file, with a secret in it: its directory is hidden
    // like the NATS credentials' (this worker connects without any).
    let creds = secrets.path().join("arbiter.toml");
    std::fs::write(&creds, format!("# {CREDS_SECRET}\n")).unwrap();
    let _worker = sys.worker_process_with(
        "worker-probed",
        1,
        &[
            ("ARBITER_CONFIG", creds.as_os_str()),
            ("ARBITER_SANDBOX_ENV", OsStr::new("GREETING")),
            ("GREETING", OsStr::new("hello")),
        ],
    );
    worker_ready(&sys, "worker-probed").await;
    let brief = "Find the keys.";
    let lane = orch_lane(brief);
    let (c, d) = (creds.display(), secrets.path().display());
    let probe = format!(
        "cat /proc/$PPID/environ; cat /proc/1/environ; \
         for p in /proc/[0-9]*; do cat $p/environ; done; env; cat \"{c}\"; ls -A \"{d}\""
    );
    let listing = "ls /proc | grep -cE '^[0-9]+$'; \
                   for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | sort -u";
    sys.mock.push(
        &lane,
        MockReply::tool_use("bash", json!({ "command": probe }))
            .and_tool_use("bash", json!({ "command": listing }))
            .and_tool_use("bash", json!({ "command": "echo \"$GREETING\"" })),
    );
    sys.mock.push(&lane, orch(true, "Nothing found."));
    summon(&sys, "default", "s-probe", "o-probe", brief).await;
    watch.wait_output("o-probe", 1).await;

    let requests = sys.mock.requests_for(&lane);
    for request in &requests {
        let body = request.body.to_string();
        assert!(!body.contains(API_KEY), "the API key reached the model");
        assert!(
            !body.contains(CREDS_SECRET),
            "the credentials reached the model"
        );
    }
    let results = tool_results(&requests[1]);
    let (probed, _) = &results[0];
    assert!(
        probed.contains(&format!("cat: {c}: No such file or directory")),
        "{probed}"
    );
    // Only the sandbox's own processes: bwrap (the namespace's init), the
    // shell and the pipeline's commands.
    let (listed, _) = &results[1];
    let mut lines = listed.lines().skip(1);
    let count: usize = lines.next().unwrap().parse().unwrap();
    assert!(count <= 8, "{listed}");
    for name in lines {
        assert!(
            ["bwrap", "bash", "ls", "grep", "cat", "sort"].contains(&name),
            "{name} runs in the sandbox: {listed}"
        );
    }
    assert_eq!(results[2], ("exit code: 0\nhello\n".to_owned(), false));
    let records = serde_json::to_string(&state_records(&sys, "o-probe").await).unwrap();
    assert!(records.contains("cat /proc/$PPID/environ"), "{records}");
    assert!(!records.contains(API_KEY) && !records.contains(CREDS_SECRET));
}

/// What the user sees: a command that writes outside its workspace fails
/// as a shell reports it (`Read-only file system`), another session's
/// workspace is not there at all, and writing in its own workspace works
/// as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_write_only_in_their_own_workspace() {
    let mut sys = System::start_with(workers_only()).await;
    let watch = Watch::start(&sys).await;
    let root = outside_tmp();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::create_dir(root_path.join("s-other")).unwrap();
    std::fs::write(root_path.join("s-other/notes.md"), "theirs\n").unwrap();
    sys.spawn_worker_with(arbiter_worker::Config {
        workspace_root: root_path.clone(),
        ..sys.worker_config("worker-0", 1, 200_000)
    });
    let brief = "Write everywhere.";
    let lane = orch_lane(brief);
    let r = root_path.display();
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "bash",
            json!({ "command": format!(
                "touch /etc/arbiter-escape; touch {r}/s-other/planted; cat {r}/s-other/notes.md; \
                 touch {r}/planted; echo made > made.txt && cat made.txt"
            )}),
        ),
    );
    sys.mock.push(&lane, orch(true, "Only here."));
    summon(&sys, "default", "s-mine", "o-writes", brief).await;
    watch.wait_output("o-writes", 1).await;

    let results = tool_results(&sys.mock.requests_for(&lane)[1]);
    assert_eq!(
        results,
        vec![(
            format!(
                "exit code: 0\n\
                 touch: cannot touch '/etc/arbiter-escape': Read-only file system\n\
                 touch: cannot touch '{r}/s-other/planted': No such file or directory\n\
                 cat: {r}/s-other/notes.md: No such file or directory\n\
                 touch: cannot touch '{r}/planted': Read-only file system\n\
                 made\n"
            ),
            false
        )]
    );
    assert!(!Path::new("/etc/arbiter-escape").exists());
    assert!(!root_path.join("s-other/planted").exists());
    assert!(!root_path.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(root_path.join("s-mine/made.txt")).unwrap(),
        "made\n"
    );
}

/// A command that leaves a shell, a `setsid` double-fork and a `nohup`
/// process running, all named `<mark>-…`.
fn leaves_processes(mark: &str) -> String {
    format!(
        "(setsid bash -c 'exec -a {mark}-escapee sleep 300' &); \
         (nohup bash -c 'exec -a {mark}-nohup sleep 300' >/dev/null 2>&1 &); \
         exec -a {mark}-shell sleep 300"
    )
}

/// What the user sees: after a command timed out, or after the
/// Orchestrator was cancelled, nothing it started runs on the worker any
/// more, not even a process that double-forked into a session of its own
/// (`setsid`), which used to survive both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_or_a_cancel_leaves_no_process_behind_not_even_a_setsid_one() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let (timed, cancelled) = (marker("timed"), marker("cancelled"));
    let (brief_t, brief_c) = ("Hang until the timeout.", "Hang until cancelled.");
    sys.mock.push(
        &orch_lane(brief_t),
        MockReply::tool_use(
            "bash",
            json!({"command": leaves_processes(&timed), "timeout_ms": 3000}),
        ),
    );
    sys.mock
        .push(&orch_lane(brief_t), orch(true, "It hung; it was killed."));
    sys.mock.push(
        &orch_lane(brief_c),
        MockReply::tool_use("bash", json!({"command": leaves_processes(&cancelled)})),
    );

    summon(&sys, "default", "s-timed", "o-timed", brief_t).await;
    processes_started(&timed, 3).await;
    let requests = sys
        .mock
        .wait_for_requests(&orch_lane(brief_t), 2, WAIT)
        .await;
    let (text, is_error) = &tool_results(&requests[1])[0];
    assert!(
        *is_error && text.starts_with("timed out after 3.0 s"),
        "{text}"
    );
    eventually(
        Duration::from_secs(2),
        "every timed-out process to die",
        || async { processes(&timed).is_empty().then_some(()) },
    )
    .await;

    summon(&sys, "default", "s-cancelled", "o-cancelled", brief_c).await;
    processes_started(&cancelled, 3).await;
    control(&sys, "o-cancelled", ControlAction::Cancel).await;
    eventually(
        Duration::from_secs(2),
        "every cancelled process to die",
        || async { processes(&cancelled).is_empty().then_some(()) },
    )
    .await;
    watch.wait_stopped("o-cancelled").await;
}

/// Runs the worker binary with only `env` and returns its exit status and
/// stderr, failing if it runs for 5 s.
async fn worker_exit(env: &[(&str, &OsStr)]) -> (std::process::ExitStatus, String) {
    let workspaces = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(arbiter_tests::bin("arbiter-worker"))
        .env_clear()
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ARBITER_WORKSPACE_ROOT", workspaces.path())
        .env("NATS_URL", "nats://127.0.0.1:1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
        .await
        .expect("the worker exits within 5 s")
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What the user sees when bubblewrap is missing, or cannot make its
/// namespaces (as in a container without the privileges): the worker exits
/// at once with one line saying what to install or what is unavailable, and
/// that `--sandbox none` runs the tools unconfined.
#[tokio::test]
async fn a_worker_refuses_to_start_without_a_working_sandbox() {
    let bin = tempfile::tempdir().unwrap();
    let (status, stderr) = worker_exit(&[("PATH", bin.path().as_os_str())]).await;
    assert!(!status.success());
    assert_eq!(
        stderr,
        "arbiter-worker: --sandbox bwrap: bwrap (bubblewrap) is not on PATH; install it (the \
         `bubblewrap` package), or start with --sandbox none to run tools unconfined (not \
         recommended)\n"
    );

    // A bwrap that fails as it does where namespaces are not allowed.
    let fake = bin.path().join("bwrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (status, stderr) = worker_exit(&[("PATH", bin.path().as_os_str())]).await;
    assert!(!status.success());
    assert_eq!(
        stderr,
        "arbiter-worker: --sandbox bwrap: bubblewrap cannot set up a sandbox here (bwrap: Creating new \
         namespace failed: Operation not permitted): user namespaces, or the mounts it needs, \
         are not allowed (in Docker, run the worker with --security-opt seccomp=unconfined \
         --security-opt systempaths=unconfined; see \"Sandbox\" in docs/tools.md), or start \
         with --sandbox none to run tools unconfined (not recommended)\n"
    );
}

/// What the user sees with `--sandbox none`: the worker starts without
/// bubblewrap, and says at start that commands run unconfined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_a_sandbox_warns_at_start() {
    let sys = System::start_with(workers_only()).await;
    let workspaces = tempfile::tempdir().unwrap();
    let no_bwrap = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(arbiter_tests::bin("arbiter-worker"))
        .env_clear()
        .env("PATH", no_bwrap.path())
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("ANTHROPIC_BASE_URL", sys.mock.base_url())
        .env("NATS_URL", sys.nats.url())
        .env("ARBITER_WORKSPACE_ROOT", workspaces.path())
        .env("ARBITER_WORKER_ID", "worker-unconfined")
        .env("ARBITER_SANDBOX", "none")
        .env("RUST_LOG", "info,async_nats=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let ready = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line);
            if seen.last().is_some_and(|l| l.contains("worker ready")) {
                return;
            }
        }
    })
    .await;
    assert!(ready.is_ok(), "the worker did not start: {seen:#?}");
    let warning = seen
        .iter()
        .find(|l| l.contains("--sandbox none: tools' commands run unconfined"))
        .expect("a warning at start");
    assert!(warning.contains("WARN"), "{warning}");
    // Once, what holds a command's processes: a cgroup or a PID namespace,
    // or a warning that a setsid one would survive.
    let contained: Vec<&String> = seen
        .iter()
        .filter(|l| {
            l.contains("--sandbox none: tools' commands run in a")
                || l.contains("--sandbox none: no writable cgroup v2 and no PID namespace")
        })
        .collect();
    assert_eq!(contained.len(), 1, "{seen:#?}");
}
