//! Child processes of the benchmark (the coordinator and workers) and what
//! `/proc` says about any process: resident memory and CPU time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::process::{Child, ChildStdin, Command};

/// Resident set size of a process, in bytes (`VmRSS`).
pub fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// User plus system CPU time a process has used so far.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name may hold spaces; the fields we want follow its `)`.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After `)`: state is field 3, utime 14 and stime 15 (1-based over the whole line).
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .context("malformed /proc/<pid>/stat")
    };
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_secs_f64(total as f64 / clock_ticks() as f64))
}

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ; 100 on Linux).
fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// Busy CPU time of the whole machine, all cores (`/proc/stat`).
fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …: all but idle and iowait.
    let busy: u64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Some(Duration::from_secs_f64(busy as f64 / clock_ticks() as f64))
}

/// CPU time of named processes (and of the whole machine) at one moment.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    at: Instant,
    used: BTreeMap<String, Duration>,
    machine: Option<Duration>,
}

impl CpuSnapshot {
    pub fn take(pids: &[(String, u32)]) -> Self {
        let used = pids
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), cpu_time(*pid).ok()?)))
            .collect();
        Self {
            at: Instant::now(),
            used,
            machine: machine_busy(),
        }
    }

    /// Share of one core each process used between `earlier` and this
    /// snapshot, then `others`: everything else the machine ran meanwhile.
    pub fn since(&self, earlier: &CpuSnapshot) -> Vec<(String, f64)> {
        let wall = self.at.duration_since(earlier.at).as_secs_f64().max(1e-9);
        let mut shares: Vec<(String, f64)> = self
            .used
            .iter()
            .filter_map(|(name, now)| {
                let before = earlier.used.get(name)?;
                Some((
                    name.clone(),
                    now.saturating_sub(*before).as_secs_f64() / wall,
                ))
            })
            .collect();
        if let (Some(now), Some(before)) = (self.machine, earlier.machine) {
            let ours: f64 = shares.iter().map(|(_, s)| s).sum();
            let all = now.saturating_sub(before).as_secs_f64() / wall;
            shares.push(("others".to_owned(), (all - ours).max(0.0)));
        }
        shares
    }
}

/// `coordinator 62%, worker 31%, nats-server 70%, bench 40%`.
pub fn cpu_line(shares: &[(String, f64)]) -> String {
    shares
        .iter()
        .map(|(name, share)| format!("{name} {:.0}%", share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A child process: this binary running as a coordinator or worker. Its
/// stderr goes to a log file; closing its stdin asks it to stop.
pub struct Proc {
    pub name: String,
    pub pid: u32,
    pub started: Instant,
    child: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl Proc {
    /// `otlp`: the OTLP endpoint it exports traces and metrics to; `None`:
    /// export off, whatever the benchmark's own environment says.
    pub fn spawn(
        name: &str,
        args: &[String],
        log_dir: &Path,
        otlp: Option<&str>,
    ) -> anyhow::Result<Proc> {
        let exe = std::env::current_exe().context("finding the benchmark's own binary")?;
        let log = log_dir.join(format!("{name}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let started = Instant::now();
        let mut command = Command::new(exe);
        command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        if let Some(endpoint) = otlp {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
        }
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {name}"))?;
        let pid = child
            .id()
            .with_context(|| format!("the {name} exited at once"))?;
        let stdin = child.stdin.take();
        Ok(Proc {
            name: name.to_owned(),
            pid,
            started,
            child,
            stdin,
            log,
        })
    }

    pub fn rss(&self) -> anyhow::Result<u64> {
        rss(self.pid)
    }

    /// Fails, with the end of its log, if the process has exited.
    pub fn check(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the {} exited ({status}); the end of its log:\n{}",
                self.name,
                self.log_tail()
            );
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills the process with SIGKILL and waits for it; when it was dead.
    pub async fn kill(&mut self) -> Instant {
        let _ = self.child.kill().await;
        Instant::now()
    }

    /// Asks the process to stop (stdin closed), then kills it after 5 s.
    pub async fn stop(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
