//! The line that names the machine and the software a run measured: cores,
//! CPU, memory, kernel, nats-server, crate, rustc, git commit, load.

use std::process::Command;

use anyhow::bail;

/// Output of a command's first line, if it runs.
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines().next().map(|l| l.trim().to_owned())
}

/// The nats-server binary the harness will start.
fn nats_bin() -> String {
    std::env::var("NATS_SERVER_BIN")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "nats-server".into())
}

/// Fails early, with the fix, when no nats-server can be run.
pub fn check_nats() -> anyhow::Result<String> {
    match first_line(&nats_bin(), &["--version"]) {
        Some(version) => Ok(version),
        None => bail!(
            "cannot run `{} --version`; set NATS_SERVER_BIN to a nats-server >= 2.12.3 \
             (scripts/install-nats-server prints the path of one)",
            nats_bin()
        ),
    }
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn memory_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0)
}

/// The 1-minute load average.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The commit of the source this binary was built from (and whether the
/// tree had changes), when that checkout is still there.
fn git() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let Some(commit) = first_line("git", &["-C", dir, "rev-parse", "--short", "HEAD"]) else {
        return "no git".into();
    };
    let dirty = Command::new("git")
        .args(["-C", dir, "status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    if dirty {
        format!("git {commit}+changes")
    } else {
        format!("git {commit}")
    }
}

/// `2 cores (Intel Xeon …), 23.5 GiB, Linux 6.1; nats-server v2.12.8; arbiter-bench 0.1.0 (git …, release); rustc 1.95.0`.
pub fn describe(nats_version: &str) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let rustc = first_line("rustc", &["--version"]).unwrap_or_else(|| "rustc ?".into());
    let profile = if cfg!(debug_assertions) {
        "DEBUG build: numbers are not representative"
    } else {
        "release"
    };
    format!(
        "{} cores ({}), {:.1} GiB, Linux {kernel}; {nats_version}; arbiter-bench {} ({}, {profile}); {rustc}",
        cores(),
        cpu_model(),
        memory_gib(),
        env!("CARGO_PKG_VERSION"),
        git(),
    )
}
