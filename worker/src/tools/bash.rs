//! The `bash` tool: runs a command in the workspace, inside the worker's
//! sandbox (`crate::sandbox`), in a process group of its own, with a timeout
//! and an output cap. When the command ends, times out or is cancelled
//! (release, cancel, or the Orchestrator's future being dropped), the group
//! is killed; in the sandbox that kills its PID namespace, and unsandboxed
//! its cgroup or PID namespace where the machine allows one (`crate::contain`),
//! so nothing the command started outlives it, not even a process that left
//! the group.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use arbiter_llm::ToolSpec;
use arbiter_llm::schema;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt as _;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{ToolContext, ToolOutcome};
use crate::contain::Scope;

/// How long a command may run when the call names no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest timeout a call may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of output (stdout and stderr together) returned at most: the first
/// and the last half, with a marker between them saying what was cut.
pub const MAX_OUTPUT_BYTES: usize = 30_000;
/// After the command ends, how long to wait for its output to drain.
const DRAIN: Duration = Duration::from_millis(500);
/// Output chunks buffered between the pipe readers and the tool.
const CHUNKS: usize = 64;

pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: "bash".into(),
        description: format!(
            "Run a shell command (bash -c) with the workspace as the working directory. Returns \
             the exit code, then stdout and stderr interleaved. Output beyond {MAX_OUTPUT_BYTES} \
             bytes is cut in the middle with a marker. The command is killed, with every \
             process it started, when it runs past its timeout (default {} s, at most {} s); \
             background processes do not outlive the command. There is no stdin: use \
             non-interactive flags. Commands may run in a sandbox: then only the workspace \
             is kept, the rest of the file system is read-only, and $HOME and /tmp are \
             private and emptied after every command.",
            DEFAULT_TIMEOUT.as_secs(),
            MAX_TIMEOUT.as_secs()
        ),
        input_schema: schema::for_model::<BashInput>(),
    }
}

/// The `bash` tool's input; its JSON Schema is the tool's input schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BashInput {
    /// The command line to run.
    command: String,
    #[schemars(extend("description" = format!("Timeout in milliseconds. Default {}, at most {}.", DEFAULT_TIMEOUT.as_millis(), MAX_TIMEOUT.as_millis())))]
    timeout_ms: Option<u64>,
}

/// A command's process group and its scope (its cgroup, if unsandboxed),
/// killed (SIGKILL) when this is dropped or [`ProcessGroup::kill`] is called,
/// whichever comes first.
struct ProcessGroup(Option<Pid>, Scope);

impl ProcessGroup {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (the group is already gone) is the only expected error.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        self.1.kill();
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Output kept within [`MAX_OUTPUT_BYTES`]: the head, and a rolling tail.
struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: usize,
    half: usize,
}

impl Capture {
    fn new(max: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            half: max / 2,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        let room = self.half.saturating_sub(self.head.len());
        let (into_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(into_head);
        bytes = rest;
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(self.half);
        self.tail.drain(..excess);
    }

    fn render(self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let kept = self.head.len() + self.tail.len();
        if self.total > kept {
            let _ = write!(
                out,
                "\n[… {} bytes of output cut here …]\n",
                self.total - kept
            );
        }
        let (a, b) = self.tail.as_slices();
        out.push_str(&String::from_utf8_lossy(&[a, b].concat()));
        out
    }
}

enum End {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended with an unknown status".to_owned(),
    }
}

fn command(ctx: &ToolContext, line: &str) -> std::io::Result<(Command, Scope)> {
    let (mut cmd, scope) = ctx.sandbox.contained(ctx.workspace.root(), line)?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    Ok((cmd, scope))
}

/// Copies one pipe into the chunk channel until it closes.
fn forward(
    pipe: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>,
    tx: mpsc::Sender<Vec<u8>>,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut pipe = pipe?;
    Some(tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf).await {
            if n == 0 || tx.send(buf[..n].to_vec()).await.is_err() {
                break;
            }
        }
    }))
}

pub(super) async fn run(ctx: &ToolContext, input: BashInput) -> ToolOutcome {
    if input.command.trim().is_empty() {
        return ToolOutcome::error("bash: the command is empty".into());
    }
    let timeout = input
        .timeout_ms
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
        .clamp(Duration::from_millis(1), MAX_TIMEOUT);
    let (mut cmd, scope) = match command(ctx, &input.command) {
        Ok(made) => made,
        Err(e) => {
            return ToolOutcome::error(format!("bash: cannot make the command's cgroup: {e}"));
        }
    };
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return ToolOutcome::error(format!("bash: cannot start the command: {e}")),
    };
    // The child leads its own group (process_group(0)), so its pid is the group id.
    let mut group = ProcessGroup(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
        scope,
    );
    let (tx, mut chunks) = mpsc::channel(CHUNKS);
    let readers = [
        forward(child.stdout.take(), tx.clone()),
        forward(child.stderr.take(), tx),
    ];
    let started = Instant::now();
    let deadline = started + timeout;
    let mut capture = Capture::new(MAX_OUTPUT_BYTES);
    // Set when the shell exits: its status, and how long to wait for the pipes.
    let mut exited: Option<(ExitStatus, Instant)> = None;
    let mut pipes_closed = false;
    let end = loop {
        if let (Some((status, _)), true) = (exited, pipes_closed) {
            break End::Exited(status);
        }
        let drain_until = exited.map_or(deadline, |(_, until)| until);
        tokio::select! {
            chunk = chunks.recv(), if !pipes_closed => match chunk {
                Some(bytes) => capture.push(&bytes),
                None => pipes_closed = true,
            },
            status = child.wait(), if exited.is_none() => {
                // Whatever the command left running in its group dies with it.
                group.kill();
                match status {
                    Ok(status) => exited = Some((status, Instant::now() + DRAIN)),
                    Err(e) => return ToolOutcome::error(format!("bash: waiting for the command failed: {e}")),
                }
            },
            () = tokio::time::sleep_until(drain_until), if exited.is_some() => {
                if let Some((status, _)) = exited {
                    break End::Exited(status);
                }
            },
            () = tokio::time::sleep_until(deadline), if exited.is_none() => break End::TimedOut,
            () = ctx.cancel.cancelled() => break End::Cancelled,
        }
    };
    group.kill();
    let ran = started.elapsed();
    let header = match end {
        End::Exited(status) => describe(status),
        End::Cancelled => {
            for reader in readers.into_iter().flatten() {
                reader.abort();
            }
            return ToolOutcome::error("bash: cancelled; the command was killed".into());
        }
        End::TimedOut => {
            // Reap the shell, and take what output is left in the pipes.
            let _ = tokio::time::timeout(DRAIN, child.wait()).await;
            let drain_deadline = Instant::now() + DRAIN;
            while let Ok(Some(bytes)) = tokio::time::timeout_at(drain_deadline, chunks.recv()).await
            {
                capture.push(&bytes);
            }
            format!(
                "timed out after {:.1} s; the command and every process it started were killed",
                ran.as_secs_f64()
            )
        }
    };
    for reader in readers.into_iter().flatten() {
        reader.abort();
    }
    let output = capture.render();
    let body = if output.is_empty() {
        "(no output)".to_owned()
    } else {
        output
    };
    let text = format!("{header}\n{body}");
    match end {
        End::TimedOut => ToolOutcome::error(text),
        End::Exited(status) => ToolOutcome {
            exit_code: status.code(),
            ..ToolOutcome::ok(text)
        },
        End::Cancelled => ToolOutcome::ok(text),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use serde_json::json;

    use super::{Capture, MAX_OUTPUT_BYTES};
    use crate::sandbox::{SandboxConfig, SandboxMode};
    use crate::tools::run;
    use crate::tools::tests::{context, context_with};

    /// A name no other process has: commands start `exec -a <marker> sleep`
    /// so that the test can find them from outside the sandbox, where their
    /// pids differ.
    fn marker(what: &str) -> String {
        format!("arbiter-test-{what}-{}", uuid::Uuid::new_v4().simple())
    }

    /// The live processes (zombies aside) whose argv[0] starts with `prefix`.
    fn running(prefix: &str) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let argv0 = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                argv0.starts_with(prefix.as_bytes()) && alive(*pid)
            })
            .collect()
    }

    fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    /// Waits until `n` processes named `prefix…` run.
    async fn started(prefix: &str, n: usize) {
        for _ in 0..500 {
            if running(prefix).len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} processes {prefix}… never started");
    }

    /// Whether every process named `prefix…` is gone within a second.
    async fn all_gone(prefix: &str) -> bool {
        for _ in 0..100 {
            if running(prefix).is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// A shell line that starts, in the background, a child and a
    /// double-forked session leader (out of the command's process group),
    /// then runs `rest`.
    fn with_escapees(mark: &str, rest: &str) -> String {
        format!(
            "(exec -a {mark}-child sleep 60) & (setsid bash -c 'exec -a {mark}-escapee sleep 60' &); {rest}"
        )
    }

    #[tokio::test]
    async fn runs_in_the_workspace_and_reports_the_exit_code() {
        let (_base, ctx) = context();
        let out = run(
            &ctx,
            "bash",
            &json!({"command": "pwd; echo oops >&2; exit 3"}),
        )
        .await;
        let root = ctx.workspace.root().display().to_string();
        assert_eq!(out.content, format!("exit code: 3\n{root}\noops\n"));
        assert_eq!(out.exit_code, Some(3), "the evidence gets the exit code");
        assert!(
            !out.is_error,
            "a failing command is a result, not a tool error"
        );
        let quiet = run(&ctx, "bash", &json!({"command": "true"})).await;
        assert_eq!(quiet.content, "exit code: 0\n(no output)");
        let empty = run(&ctx, "bash", &json!({"command": "  "})).await;
        assert!(empty.is_error);
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail_with_a_marker() {
        let (_base, ctx) = context();
        let out = run(
            &ctx,
            "bash",
            &json!({"command": "echo START; head -c 100000 /dev/zero | tr '\\0' x; echo; echo END"}),
        )
        .await;
        assert!(
            out.content.starts_with("exit code: 0\nSTART\n"),
            "{}",
            &out.content[..40]
        );
        assert!(out.content.ends_with("END\n"));
        assert!(out.content.contains("bytes of output cut here"));
        assert!(out.content.len() < MAX_OUTPUT_BYTES + 200);
    }

    #[test]
    fn capture_keeps_everything_under_the_cap() {
        let mut capture = Capture::new(10);
        capture.push(b"abc");
        capture.push(b"defg");
        assert_eq!(capture.render(), "abcdefg");
        let mut capture = Capture::new(10);
        capture.push(b"0123456789abcdef");
        assert_eq!(
            capture.render(),
            "01234\n[… 6 bytes of output cut here …]\nbcdef"
        );
    }

    #[tokio::test]
    async fn a_timeout_kills_everything_the_command_started() {
        let (_base, ctx) = context();
        let mark = marker("timeout");
        let line = with_escapees(&mark, &format!("exec -a {mark}-shell sleep 60"));
        let started_at = std::time::Instant::now();
        let call = tokio::spawn(async move {
            run(&ctx, "bash", &json!({"command": line, "timeout_ms": 1500})).await
        });
        started(&mark, 3).await;
        let out = call.await.unwrap();
        let took = started_at.elapsed();
        assert!(out.is_error, "{out:?}");
        assert!(out.content.starts_with("timed out after 1.5 s"), "{out:?}");
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert!(all_gone(&mark).await, "left running: {:?}", running(&mark));
    }

    #[tokio::test]
    async fn background_processes_do_not_outlive_the_command_even_double_forked() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        let mark = marker("background");
        // The command waits for the test to have seen its processes.
        let line = with_escapees(
            &mark,
            "while [ ! -e go ]; do sleep 0.05; done; echo started",
        );
        let call = tokio::spawn(async move { run(&ctx, "bash", &json!({"command": line})).await });
        started(&mark, 2).await;
        std::fs::write(root.join("go"), "").unwrap();
        let out = call.await.unwrap();
        assert_eq!(out.content, "exit code: 0\nstarted\n");
        assert!(
            all_gone(&mark).await,
            "outlived the command: {:?}",
            running(&mark)
        );
    }

    #[tokio::test]
    async fn cancelling_kills_everything_at_once() {
        let (_base, ctx) = context();
        let cancel = ctx.cancel.clone();
        let mark = marker("cancel");
        let line = with_escapees(&mark, &format!("exec -a {mark}-shell sleep 60"));
        let call = tokio::spawn(async move { run(&ctx, "bash", &json!({"command": line})).await });
        started(&mark, 3).await;
        let cancelled_at = std::time::Instant::now();
        cancel.cancel();
        let out = tokio::time::timeout(Duration::from_secs(1), call)
            .await
            .unwrap()
            .unwrap();
        assert!(out.is_error && out.content.contains("cancelled"));
        assert!(all_gone(&mark).await, "survived: {:?}", running(&mark));
        assert!(cancelled_at.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn dropping_the_call_kills_everything() {
        let (_base, ctx) = context();
        let mark = marker("drop");
        let input =
            json!({"command": with_escapees(&mark, &format!("exec -a {mark}-shell sleep 60"))});
        let mut call = Box::pin(run(&ctx, "bash", &input));
        // The call is dropped once its processes run, as when the agent moves on.
        tokio::select! {
            _ = &mut call => panic!("the command ended"),
            () = started(&mark, 3) => {}
        }
        drop(call);
        assert!(all_gone(&mark).await, "survived: {:?}", running(&mark));
    }

    #[tokio::test]
    async fn commands_see_neither_the_worker_nor_its_environment() {
        let (_base, ctx) = context();
        let me = std::process::id();
        // Cargo runs tests through rustup, which sets RUSTUP_HOME: passed on.
        let rustup = if std::env::var_os("RUSTUP_HOME").is_some() {
            "RUSTUP_HOME "
        } else {
            ""
        };
        let out = run(
            &ctx,
            "bash",
            &json!({"command": format!(
                "env | cut -d= -f1 | sort | tr '\\n' ' '; echo; \
                 cat /proc/1/environ | wc -c; \
                 ls /proc/{me} 2>&1 >/dev/null | wc -l; \
                 cat /proc/1/comm"
            )}),
        )
        .await;
        let lines: Vec<&str> = out.content.lines().collect();
        assert_eq!(
            lines,
            [
                "exit code: 0",
                // bash adds PWD, SHLVL and _.
                &format!("GIT_PAGER HOME LANG PAGER PATH PWD {rustup}SHLVL TERM _ "),
                // bwrap, the namespace's init, has no environment at all.
                "0",
                // This test's process is not there: `ls` fails.
                "1",
                "bwrap",
            ],
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn commands_cannot_make_namespaces_of_their_own() {
        // In a container whose seccomp allows namespaces (as the worker's
        // must, for bwrap), a command could otherwise nest a sandbox of its
        // own and be root in it.
        let (_base, ctx) = context();
        let out = run(
            &ctx,
            "bash",
            &json!({"command": "unshare -Ur true && echo nested || echo refused"}),
        )
        .await;
        assert!(out.content.ends_with("refused\n"), "{out:?}");
    }

    #[tokio::test]
    async fn only_the_workspace_and_private_scratch_space_can_be_written() {
        let (base, ctx) = context();
        let neighbour = base.path().join("other");
        std::fs::create_dir(&neighbour).unwrap();
        std::fs::write(neighbour.join("notes.md"), "theirs\n").unwrap();
        let n = neighbour.display();
        let out = run(
            &ctx,
            "bash",
            &json!({"command": format!(
                "touch /etc/arbiter-test 2>/dev/null || echo no /etc; \
                 touch {n}/x 2>/dev/null || echo no neighbour; \
                 cat {n}/notes.md 2>/dev/null || echo neighbour hidden; \
                 touch ../x 2>/dev/null || echo no root; \
                 touch ~/x /tmp/x && echo home and tmp; \
                 mkdir -p src && echo hi > src/a.txt && cat src/a.txt"
            )}),
        )
        .await;
        assert_eq!(
            out.content,
            "exit code: 0\nno /etc\nno neighbour\nneighbour hidden\nno root\nhome and tmp\nhi\n"
        );
        assert!(!Path::new("/etc/arbiter-test").exists());
        assert!(!neighbour.join("x").exists());
        assert!(!base.path().join("x").exists());
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.root().join("src/a.txt")).unwrap(),
            "hi\n"
        );
    }

    #[tokio::test]
    async fn unconfined_commands_lose_secrets_from_the_environment() {
        let (_base, ctx) = context_with(&SandboxConfig {
            mode: SandboxMode::None,
            ..Default::default()
        });
        let out = run(&ctx, "bash", &json!({"command": "echo \"$TERM $PAGER\""})).await;
        assert_eq!(out.content, "exit code: 0\ndumb cat\n");
    }

    /// Unsandboxed, a command that leaves its process group (`setsid`), or
    /// hides behind `nohup` and a double fork, is still killed on a timeout,
    /// a cancel and its own end, by its cgroup or PID namespace. Where the
    /// machine has neither, the `setsid` one survives, as the docs say.
    #[tokio::test]
    async fn unconfined_commands_leave_nothing_behind_not_even_a_setsid_one() {
        let config = SandboxConfig {
            mode: SandboxMode::None,
            ..Default::default()
        };
        let escapees = |mark: &str, rest: &str| {
            format!(
                "(setsid bash -c 'exec -a {mark}-setsid sleep 60' &); \
                 nohup bash -c 'exec -a {mark}-nohup sleep 60' >/dev/null 2>&1 & disown; \
                 ( ( exec -a {mark}-double sleep 60 & ) & ); {rest}"
            )
        };
        let (_base, ctx) = context_with(&config);
        let contained = ctx.sandbox.containment().cloned().unwrap();
        tracing::info!("contained by {contained}");

        // A timeout.
        let mark = marker("unconfined-timeout");
        let line = escapees(&mark, &format!("exec -a {mark}-shell sleep 60"));
        let timed = ctx.clone();
        let call = tokio::spawn(async move {
            run(
                &timed,
                "bash",
                &json!({"command": line, "timeout_ms": 1500}),
            )
            .await
        });
        started(&mark, 4).await;
        let out = call.await.unwrap();
        assert!(out.content.starts_with("timed out after"), "{out:?}");
        if contained == crate::contain::Containment::ProcessGroup {
            // Only the group is reached: the session leader is left.
            assert!(!all_gone(&format!("{mark}-setsid")).await);
            for pid in running(&mark) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            return;
        }
        assert!(all_gone(&mark).await, "left running: {:?}", running(&mark));

        // A cancel.
        let mark = marker("unconfined-cancel");
        let line = escapees(&mark, &format!("exec -a {mark}-shell sleep 60"));
        let cancelled = ctx.clone();
        let cancel = ctx.cancel.clone();
        let call =
            tokio::spawn(async move { run(&cancelled, "bash", &json!({"command": line})).await });
        started(&mark, 4).await;
        cancel.cancel();
        let out = call.await.unwrap();
        assert!(out.is_error && out.content.contains("cancelled"), "{out:?}");
        assert!(all_gone(&mark).await, "survived: {:?}", running(&mark));

        // Its own end: what it left in the background goes with it.
        let (_base, ctx) = context_with(&config);
        let root = ctx.workspace.root().to_owned();
        let mark = marker("unconfined-end");
        let line = escapees(&mark, "while [ ! -e go ]; do sleep 0.05; done; echo done");
        let call = tokio::spawn(async move { run(&ctx, "bash", &json!({"command": line})).await });
        started(&mark, 3).await;
        std::fs::write(root.join("go"), "").unwrap();
        let out = call.await.unwrap();
        assert_eq!(out.content, "exit code: 0\ndone\n");
        assert!(all_gone(&mark).await, "outlived it: {:?}", running(&mark));
    }
}
