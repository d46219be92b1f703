//! The checkpoint's cost per turn (docs/checkpoints.md): a git repository of
//! [`FILES`] files, committed; then, as an Orchestrator's turns would, each
//! turn changes a few files and adds one, and the worker's own
//! `Checkpoints::make_output` commits the workspace, git run in the same
//! sandbox the worker would use. Also the first checkpoint, which has no
//! index of its own yet and reads the user's.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::hist::Latency;

/// Files in the repository.
pub const FILES: usize = 10_000;
/// Turns timed.
pub const TURNS: u64 = 60;
/// What one turn may cost at p99: well under a model turn (seconds).
pub const TARGET_P99: Duration = Duration::from_millis(500);

pub struct Checkpoints {
    pub files: usize,
    /// In the sandbox a worker here uses (bwrap when it is installed), and
    /// then unconfined (`--sandbox none`), to show what the sandbox adds.
    pub runs: Vec<Run>,
}

pub struct Run {
    pub sandboxed: bool,
    /// The first checkpoint: the index read from the user's.
    pub first: Duration,
    /// Each later turn's, three files changed or added.
    pub turn: Latency,
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .context("git did not start")?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

pub async fn run() -> anyhow::Result<Checkpoints> {
    let mut runs = Vec::new();
    if which_bwrap() {
        runs.push(run_in(arbiter_worker::sandbox::SandboxMode::Bwrap).await?);
    }
    runs.push(run_in(arbiter_worker::sandbox::SandboxMode::None).await?);
    Ok(Checkpoints { files: FILES, runs })
}

async fn run_in(mode: arbiter_worker::sandbox::SandboxMode) -> anyhow::Result<Run> {
    let root = tempfile::tempdir()?;
    let session = "bench-checkpoints";
    let ws = root.path().join(session);
    for i in 0..FILES {
        let dir = ws.join(format!("src/m{:03}", i / 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join(format!("f{i}.rs")),
            format!("// file {i}\nfn f{i}() {{}}\n"),
        )?;
    }
    git(&ws, &["init", "-q", "-b", "main"])?;
    git(&ws, &["add", "-A"])?;
    git(
        &ws,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-q",
            "-m",
            "the repository",
        ],
    )?;
    let config = arbiter_worker::sandbox::SandboxConfig {
        mode,
        ..Default::default()
    };
    let sandbox = Arc::new(arbiter_worker::sandbox::Sandbox::new(&config, root.path())?);
    let summon = arbiter_protocol::Summon {
        v: arbiter_protocol::VERSION,
        session_id: session.into(),
        orch_id: "bench-orch".into(),
        number: 1,
        member: None,
        brief: String::new(),
        workspace: None,
        pool: "bench".into(),
        summoned_at: chrono::Utc::now(),
        runtime: None,
        needs: Vec::new(),
        handoff: None,
        budget: None,
        emergency: false,
        policy: None,
        arbiter_policy: None,
        start_from: None,
        link: None,
    };
    let checkpoints = arbiter_worker::checkpoint::Checkpoints::open(sandbox, &ws, &summon)
        .map_err(|why| anyhow::anyhow!(why))?;
    let mut turn = Latency::new()?;
    let mut first = Duration::ZERO;
    for t in 0..=TURNS {
        // A turn's writes: two files changed, one added.
        for k in 0..2 {
            let i = (t as usize * 7 + k * 3001) % FILES;
            let path = ws.join(format!("src/m{:03}/f{i}.rs", i / 100));
            std::fs::write(&path, format!("// file {i}, turn {t}\nfn f{i}() {{}}\n"))?;
        }
        std::fs::write(ws.join(format!("src/new{t}.rs")), "fn new() {}\n")?;
        let started = Instant::now();
        let made = checkpoints
            .make_output(t + 1, "A turn of work.", "3 files changed")
            .await
            .map_err(|why| anyhow::anyhow!(why))?;
        let took = started.elapsed();
        anyhow::ensure!(
            made.is_some_and(|c| c.files == 3),
            "turn {t} made no checkpoint of 3 files"
        );
        if t == 0 {
            first = took;
        } else {
            turn.record(took);
        }
    }
    Ok(Run {
        sandboxed: mode == arbiter_worker::sandbox::SandboxMode::Bwrap,
        first,
        turn,
    })
}

fn which_bwrap() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("bwrap").is_file()))
}
