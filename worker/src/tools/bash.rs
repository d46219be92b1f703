//! The `bash` tool: runs a command in the workspace, in a process group of
//! its own, with a timeout and an output cap. When the command ends, times
//! out or is cancelled (release, cancel, or the Orchestrator's future being
//! dropped), the whole process group is killed: nothing it started outlives
//! it. Secrets are removed from the environment the command sees.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use arbiter_llm::ToolSpec;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt as _;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{ToolContext, ToolOutcome};

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
             non-interactive flags.",
            DEFAULT_TIMEOUT.as_secs(),
            MAX_TIMEOUT.as_secs()
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": format!("Timeout in milliseconds. Default {}, at most {}.", DEFAULT_TIMEOUT.as_millis(), MAX_TIMEOUT.as_millis())}
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BashInput {
    command: String,
    timeout_ms: Option<u64>,
}

/// Whether an environment variable is kept from commands: API keys, tokens,
/// passwords, and the worker's own settings.
pub fn is_secret_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const WORDS: [&str; 7] = [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ];
    const PREFIXES: [&str; 4] = ["NATS_", "ARBITER_", "ANTHROPIC_", "OPENAI_"];
    WORDS.iter().any(|w| upper.contains(w)) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// A command's process group, killed (SIGKILL) when this is dropped or
/// [`ProcessGroup::kill`] is called, whichever comes first.
struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (the group is already gone) is the only expected error.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
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

fn command(ctx: &ToolContext, shell: &str, line: &str) -> Command {
    let mut cmd = Command::new(shell);
    cmd.arg("-c")
        .arg(line)
        .current_dir(ctx.workspace.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if is_secret_env(&name.to_string_lossy()) {
            cmd.env_remove(name);
        }
    }
    cmd.env("TERM", "dumb")
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat");
    cmd
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
    let spawned = match command(ctx, "bash", &input.command).spawn() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            command(ctx, "sh", &input.command).spawn()
        }
        other => other,
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return ToolOutcome::error(format!("bash: cannot start the command: {e}")),
    };
    // The child leads its own group (process_group(0)), so its pid is the group id.
    let mut group = ProcessGroup(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
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
        _ => ToolOutcome::ok(text),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::{Capture, MAX_OUTPUT_BYTES, is_secret_env};
    use crate::tools::run;
    use crate::tools::tests::context;

    /// Whether a process is still running (a zombie waiting for its reaper is not).
    pub(crate) fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    async fn gone(pid: i32) -> bool {
        for _ in 0..100 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    fn pid_in(root: &std::path::Path, file: &str) -> i32 {
        std::fs::read_to_string(root.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
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
    async fn a_timeout_kills_the_whole_process_group() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        let started = std::time::Instant::now();
        let out = run(
            &ctx,
            "bash",
            &json!({
                "command": "echo $$ > shell.pid; (echo $BASHPID > sub.pid; sleep 60) & sleep 60",
                "timeout_ms": 300
            }),
        )
        .await;
        let took = started.elapsed();
        assert!(out.is_error, "{out:?}");
        assert!(out.content.starts_with("timed out after 0.3 s"), "{out:?}");
        assert!(took < Duration::from_secs(2), "took {took:?}");
        for file in ["shell.pid", "sub.pid"] {
            let pid = pid_in(&root, file);
            assert!(gone(pid).await, "{file}: process {pid} is still running");
        }
    }

    #[tokio::test]
    async fn background_processes_do_not_outlive_the_command() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        let out = run(
            &ctx,
            "bash",
            &json!({"command": "(echo $BASHPID > bg.pid; exec sleep 60) & sleep 0.2; echo started"}),
        )
        .await;
        assert_eq!(out.content, "exit code: 0\nstarted\n");
        let pid = pid_in(&root, "bg.pid");
        assert!(
            gone(pid).await,
            "the background process {pid} outlived the command"
        );
    }

    #[tokio::test]
    async fn cancelling_kills_the_process_group_at_once() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        let cancel = ctx.cancel.clone();
        let call = tokio::spawn(async move {
            run(
                &ctx,
                "bash",
                &json!({"command": "echo $$ > shell.pid; sleep 60"}),
            )
            .await
        });
        let pid_file = root.join("shell.pid");
        for _ in 0..500 {
            if std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pid = pid_in(&root, "shell.pid");
        let started = std::time::Instant::now();
        cancel.cancel();
        let out = tokio::time::timeout(Duration::from_secs(1), call)
            .await
            .unwrap()
            .unwrap();
        assert!(out.is_error && out.content.contains("cancelled"));
        assert!(gone(pid).await, "process {pid} survived the cancel");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_process_group() {
        let (_base, ctx) = context();
        let root = ctx.workspace.root().to_owned();
        let input = json!({"command": "echo $$ > shell.pid; sleep 60"});
        let call = run(&ctx, "bash", &input);
        // The call is dropped when the timeout fires, as when the agent moves on.
        let _ = tokio::time::timeout(Duration::from_millis(300), call).await;
        let pid = pid_in(&root, "shell.pid");
        assert!(gone(pid).await, "process {pid} survived the drop");
    }

    #[tokio::test]
    async fn secrets_are_kept_from_commands() {
        assert!(is_secret_env("ANTHROPIC_API_KEY"));
        assert!(is_secret_env("GITHUB_TOKEN"));
        assert!(is_secret_env("NATS_URL"));
        assert!(is_secret_env("db_password"));
        assert!(!is_secret_env("PATH"));
        assert!(!is_secret_env("HOME"));
        let (_base, ctx) = context();
        let out = run(&ctx, "bash", &json!({"command": "echo \"$TERM $PAGER\""})).await;
        assert_eq!(out.content, "exit code: 0\ndumb cat\n");
    }
}
