//! The web console (`arbiter-web`, the real binary, a child process of the
//! benchmark): how long a log entry takes from being stored to its `entry`
//! event on a browser tab's stream, with 1 and with 100 watched sessions
//! (each with one open stream), and the process's resident memory idle and
//! with every stream open.
//!
//! No coordinator: the benchmark writes the log entries itself, as the
//! coordinator writes them (a JetStream publish on the session's log
//! subject with the entry's `Nats-Msg-Id`), round-robin over the watched
//! sessions at a fixed rate in all (open loop), and reads each stream as a
//! plain HTTP client parsing Server-Sent Events. An entry is timed from the
//! publish's ack (it is stored) to the moment its event is parsed off the
//! stream; an event that arrives before the ack is back counts as 0 and is
//! counted apart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{ArbiterEntry, LogBody, LogEntry, VERSION, subjects};
use arbiter_tests::WebConsole;
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use serde::Deserialize;

use crate::ctx::Ctx;
use crate::hist::Latency;
use crate::procs;

/// How long a level waits for its streams' first entries (the feeds
/// attaching and replaying), and for the last entries once the load ends.
const ATTACH_WAIT: Duration = Duration::from_secs(30);
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// What the web part measures, and how hard.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watched sessions per level (one open stream each).
    pub levels: Vec<u32>,
    /// Seconds each level's load runs.
    pub duration: Duration,
    /// Log entries per second written in all, round-robin over the sessions.
    pub rate: f64,
    pub nats_config: Option<PathBuf>,
}

/// One level: `sessions` watched, an entry written to one of them in turn.
pub struct Level {
    pub sessions: u32,
    pub rate: f64,
    /// The publish's ack (stored) → its `entry` event parsed off the stream.
    pub from_ack: Latency,
    /// The publish sent → its `entry` event.
    pub from_publish: Latency,
    /// The publish sent → its ack (the server, meanwhile).
    pub ack: Latency,
    /// Events parsed before their publish's ack was back (counted as 0).
    pub before_ack: u64,
    /// Entries written whose event never came.
    pub lost: u64,
    /// arbiter-web's RSS with this level's streams open, after its load.
    pub rss: u64,
    /// Its open file descriptors then (a socket per stream and per hub's
    /// NATS connection).
    pub fds: usize,
    /// arbiter-web's CPU during the load, share of one core.
    pub cpu: f64,
}

pub struct Web {
    /// arbiter-web's RSS once connected, no stream open.
    pub idle_rss: u64,
    /// Its RSS once every stream has closed and the hubs have lingered out.
    pub closed_rss: u64,
    /// Its open file descriptors idle and once everything closed: the same
    /// when nothing of a closed stream is left.
    pub idle_fds: usize,
    pub closed_fds: usize,
    pub levels: Vec<Level>,
}

impl Web {
    /// The level with `sessions` watched, if it ran.
    pub fn level(&self, sessions: u32) -> Option<&Level> {
        self.levels.iter().find(|l| l.sessions == sessions)
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Web> {
    let opts = Options {
        levels: ctx.opts.web_levels.clone(),
        duration: Duration::from_secs(ctx.opts.web_duration.max(1)),
        rate: ctx.opts.web_rate,
        nats_config: ctx.opts.nats_config.clone(),
    };
    measure(&opts, &binary()?, &ctx.dir("web")?).await
}

/// `arbiter-web` built next to this binary (`target/<profile>/`; a unit
/// test's binary sits one level down, in `deps/`).
pub fn binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the benchmark's own binary")?;
    let mut dir = exe
        .parent()
        .context("the benchmark's binary has no directory")?;
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir = dir.parent().unwrap_or(dir);
    }
    let path = dir.join("arbiter-web");
    if !path.exists() {
        bail!(
            "{} is not built: `cargo build --workspace --bins` (add --release for a release \
             benchmark) builds it next to arbiter-bench; or leave `web` out of --phases",
            path.display()
        );
    }
    Ok(path)
}

/// Under `cargo run`, builds `arbiter-web` with the benchmark's own
/// profile first (nothing to do when it is up to date), so that the web
/// figures are of the code checked out and not of an older build. Run
/// directly, the benchmark takes the binary beside it as it is.
pub fn build_under_cargo() -> anyhow::Result<()> {
    let (Some(cargo), Some(manifest)) = (
        std::env::var_os("CARGO"),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    ) else {
        return Ok(());
    };
    let exe = std::env::current_exe()?;
    let profile = match exe.parent().and_then(Path::file_name) {
        Some(name) if name == "debug" => "dev".to_owned(),
        Some(name) => name.to_string_lossy().into_owned(),
        None => return Ok(()),
    };
    tracing::info!(%profile, "web: building arbiter-web (started by cargo run)");
    let status = std::process::Command::new(cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(Path::new(&manifest).join("Cargo.toml"))
        .args([
            "-p",
            "arbiter-web",
            "--bin",
            "arbiter-web",
            "--profile",
            &profile,
        ])
        .status()
        .context("running cargo build -p arbiter-web")?;
    if !status.success() {
        bail!("cargo build -p arbiter-web failed ({status})");
    }
    Ok(())
}

/// The whole part, on a server of its own: arbiter-web started, its idle
/// RSS, then each level on fresh sessions, then its RSS once they closed.
pub async fn measure(opts: &Options, bin: &Path, dir: &Path) -> anyhow::Result<Web> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let nats = crate::system::start_nats(opts.nats_config.as_deref()).await;
    let client = arbiter_bus::connect(nats.url(), "arbiter-bench", false).await?;
    let bus = Bus::setup(client).await?;
    let log_path = dir.join("arbiter-web.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let web = WebConsole::start(
        bin,
        &[("NATS_URL", nats.url().into())],
        &[],
        std::process::Stdio::from(log),
    )
    .await;
    let pid = web.child.id().context("arbiter-web exited at once")?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    wait_connected(&http, &web).await?;
    // What a process that has served nothing yet settles at.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = procs::rss(pid)?;
    let idle_fds = fds(pid)?;
    tracing::info!(rss = idle_rss, "web: arbiter-web connected");

    let mut levels = Vec::new();
    for &sessions in &opts.levels {
        let level = level(&bus, &http, &web, pid, sessions.max(1), opts)
            .await
            .with_context(|| {
                format!(
                    "the web level of {sessions} sessions (arbiter-web's log: {})",
                    log_path.display()
                )
            })?;
        levels.push(level);
    }
    // Every stream closed: the hubs go after their linger (1 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let closed_rss = procs::rss(pid)?;
    let closed_fds = fds(pid)?;
    drop(web);
    let _ = bus.client.drain().await;
    drop(nats);
    Ok(Web {
        idle_rss,
        closed_rss,
        idle_fds,
        closed_fds,
        levels,
    })
}

/// How many file descriptors a process has open.
fn fds(pid: u32) -> anyhow::Result<usize> {
    let dir = format!("/proc/{pid}/fd");
    Ok(std::fs::read_dir(&dir)
        .with_context(|| format!("reading {dir}"))?
        .count())
}

/// Until the sessions page says NATS is reached.
async fn wait_connected(http: &reqwest::Client, web: &WebConsole) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = http
            .get(format!("{}/", web.base))
            .bearer_auth(&web.token)
            .send()
            .await;
        if let Ok(page) = page
            && page.status().is_success()
            && page
                .text()
                .await
                .is_ok_and(|body| !body.contains("is not reachable yet"))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("arbiter-web did not reach NATS within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// When each entry's event was parsed, by the entry's text.
type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

fn arrived(arrivals: &Arrivals) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
    arrivals
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One level: a stream opened on each of `sessions` fresh sessions, an
/// entry each to see every feed attached, then the load.
async fn level(
    bus: &Bus,
    http: &reqwest::Client,
    web: &WebConsole,
    pid: u32,
    sessions: u32,
    opts: &Options,
) -> anyhow::Result<Level> {
    tracing::info!(sessions, "web: opening a stream per session");
    let ids: Vec<String> = (0..sessions)
        .map(|i| format!("web{sessions}-{i}"))
        .collect();
    let arrivals: Arrivals = Arc::default();
    let streams: Vec<_> = ids
        .iter()
        .map(|id| {
            tokio::spawn(follow(
                http.clone(),
                format!("{}/s/{id}/events?from=0", web.base),
                web.token.clone(),
                arrivals.clone(),
            ))
        })
        .collect();
    let result = load(bus, pid, &ids, &arrivals, &streams, opts).await;
    for stream in &streams {
        stream.abort();
    }
    result
}

async fn load(
    bus: &Bus,
    pid: u32,
    ids: &[String],
    arrivals: &Arrivals,
    streams: &[tokio::task::JoinHandle<anyhow::Result<()>>],
    opts: &Options,
) -> anyhow::Result<Level> {
    let sessions = ids.len();
    let mut seqs = vec![0u64; sessions];
    // Entry 1 of each session: its feed has attached once that arrives.
    let mut first = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        seqs[i] += 1;
        first.push(write(bus, id, seqs[i]).await?.0);
    }
    wait_for(arrivals, &first, ATTACH_WAIT, streams)
        .await
        .context("the streams' first entries")?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    tracing::info!(sessions, rate = opts.rate, "web: writing entries");
    let total = ((opts.rate * opts.duration.as_secs_f64()).round() as u64).max(1);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / opts.rate.max(0.1)));
    let mut written = Vec::new();
    let cpu_before = procs::cpu_time(pid)?;
    let began = Instant::now();
    for n in 0..total {
        tick.tick().await;
        let i = (n % sessions as u64) as usize;
        seqs[i] += 1;
        written.push(write(bus, &ids[i], seqs[i]).await?);
    }
    let texts: Vec<String> = written.iter().map(|w| w.0.clone()).collect();
    let drained = wait_for(arrivals, &texts, DRAIN_WAIT, streams).await;
    let cpu = (procs::cpu_time(pid)?.saturating_sub(cpu_before)).as_secs_f64()
        / began.elapsed().as_secs_f64().max(1e-9);
    let rss = procs::rss(pid)?;
    let fds = fds(pid)?;
    if let Err(e) = &drained {
        tracing::warn!(error = %e, "web: entries missing at the end of the level");
    }

    let mut level = Level {
        sessions: sessions as u32,
        rate: opts.rate,
        from_ack: Latency::new()?,
        from_publish: Latency::new()?,
        ack: Latency::new()?,
        before_ack: 0,
        lost: 0,
        rss,
        fds,
        cpu,
    };
    let arrived = arrived(arrivals);
    for (text, sent, acked) in &written {
        level.ack.record(*acked - *sent);
        let Some(at) = arrived.get(text) else {
            level.lost += 1;
            continue;
        };
        if at < acked {
            level.before_ack += 1;
        }
        level.from_ack.record(at.saturating_duration_since(*acked));
        level
            .from_publish
            .record(at.saturating_duration_since(*sent));
    }
    Ok(level)
}

/// Writes entry `seq` of `session` as the coordinator would (the Arbiter's
/// words; its text names it): its text, when the publish went and when its
/// ack came back.
async fn write(bus: &Bus, session: &str, seq: u64) -> anyhow::Result<(String, Instant, Instant)> {
    let text = format!("{session} {seq}");
    let entry = LogEntry {
        v: VERSION,
        session_id: session.to_owned(),
        seq,
        at: chrono::Utc::now(),
        body: LogBody::Arbiter(ArbiterEntry { text: text.clone() }),
    };
    let sent = Instant::now();
    bus.publish_js(
        subjects::session_log(session),
        &subjects::log_entry_msg_id(session, seq),
        &TraceContext::none(),
        &entry,
    )
    .await?;
    Ok((text, sent, Instant::now()))
}

/// Until every one of `texts` has arrived, or `wait` has passed (an error
/// saying how many did), or a stream has ended.
async fn wait_for(
    arrivals: &Arrivals,
    texts: &[String],
    wait: Duration,
    streams: &[tokio::task::JoinHandle<anyhow::Result<()>>],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        let missing = {
            let arrived = arrived(arrivals);
            texts.iter().filter(|t| !arrived.contains_key(*t)).count()
        };
        if missing == 0 {
            return Ok(());
        }
        if let Some(i) = streams.iter().position(|s| s.is_finished()) {
            bail!(
                "stream {i} ended ({missing} of {} entries missing)",
                texts.len()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{missing} of {} entries did not arrive within {wait:?}",
                texts.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What an `entry` event says (`{"i": …, "line": {"text": …, …}}`).
#[derive(Deserialize)]
struct EntryEvent {
    line: EventLine,
}

#[derive(Deserialize)]
struct EventLine {
    text: String,
}

/// Reads one session's stream as a browser tab would, noting when each
/// entry's event is parsed.
async fn follow(
    http: reqwest::Client,
    url: String,
    token: String,
    arrivals: Arrivals,
) -> anyhow::Result<()> {
    let response = http
        .get(&url)
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .send()
        .await?
        .error_for_status()?;
    let mut events = response.bytes_stream().eventsource();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
        let at = Instant::now();
        if event.event != "entry" {
            continue;
        }
        let entry: EntryEvent = serde_json::from_str(&event.data)
            .with_context(|| format!("an entry event of {url}: {}", event.data))?;
        arrived(&arrivals).insert(entry.line.text, at);
    }
    bail!("{url}: the stream ended")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part at small counts against the real binary (`scripts/test`
    /// builds it and provides the nats-server), so that it does not rot:
    /// every entry arrives, and the figures are there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_entry_arrives_at_small_counts() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            levels: vec![1, 3],
            duration: Duration::from_secs(1),
            rate: 30.0,
            nats_config: None,
        };
        let web = measure(&opts, &binary().unwrap(), dir.path())
            .await
            .unwrap();
        assert!(web.idle_rss > 0);
        for (level, sessions) in web.levels.iter().zip([1, 3]) {
            assert_eq!(level.sessions, sessions);
            assert_eq!(level.lost, 0, "every entry arrived");
            assert_eq!(level.from_ack.len(), 30);
            assert!(level.rss > 0);
        }
    }
}
