//! Command-line flags: the benchmark run's knobs, and the two internal
//! subcommands the benchmark uses to run the coordinator and a worker as
//! child processes of itself.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Benchmarks what Arbiter adds around the model: routing overhead per hop,
/// routed messages per second, Orchestrator start, memory per session.
/// Starts its own nats-server (NATS_SERVER_BIN, or nats-server on PATH),
/// a zero-latency mock model, the coordinator and workers.
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunOptions,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Internal: run a coordinator (the benchmark starts it).
    #[command(hide = true)]
    Coordinator(RoleArgs),
    /// Internal: run a worker (the benchmark starts it).
    #[command(hide = true)]
    Worker(RoleArgs),
    /// Run the benchmark (the default).
    Run(RunOptions),
    /// Time checking one model reply against its schema (jsonschema against
    /// the hand-written validator it replaced); no server needed.
    Validate,
}

/// What a child process needs to join the system under test.
#[derive(Debug, Clone, Args)]
pub struct RoleArgs {
    #[arg(long)]
    pub nats_url: String,
    /// The mock model's base URL.
    #[arg(long)]
    pub llm_url: String,
    #[arg(long, default_value_t = 4)]
    pub max_orchestrators: usize,
    #[arg(long, default_value = "workspaces")]
    pub workspace_root: PathBuf,
    #[arg(long, default_value = "bench-worker")]
    pub worker_id: String,
    /// The worker's runtime: native, claude-code or codex.
    #[arg(long, default_value = "native")]
    pub runtime: arbiter_worker::Runtime,
    /// The Claude Code CLI (claude-code runtime).
    #[arg(long)]
    pub claude_bin: Option<PathBuf>,
    /// The Codex CLI (codex runtime).
    #[arg(long)]
    pub codex_bin: Option<PathBuf>,
    /// A webhook the coordinator POSTs every event type to (the hooks part).
    #[arg(long)]
    pub hook_url: Option<String>,
    /// The coordinator's id (the levels' takeover names the one it starts);
    /// a fresh one when not given.
    #[arg(long)]
    pub coordinator_id: Option<String>,
    /// Milliseconds an Orchestrator waits for the Arbiter before it parks
    /// (the worker's `--park-after`); the worker's default when not given.
    #[arg(long)]
    pub park_after_ms: Option<u64>,
}

/// Which parts to run and how hard. The defaults take about three minutes.
#[derive(Debug, Clone, Args)]
pub struct RunOptions {
    /// Parts to run, comma separated: baseline, saturation, levels, start,
    /// memory, anatomy, otel, hooks, handoff, teams, web, runtimes (each runtime side by side; not by default).
    #[arg(
        long,
        env = "ARBITER_BENCH_PHASES",
        value_delimiter = ',',
        default_value = "baseline,saturation,levels,start,memory,anatomy,otel,hooks,handoff,teams,web,checkpoints"
    )]
    pub phases: Vec<Phase>,
    /// Session counts of the routing-overhead levels.
    #[arg(
        long,
        env = "ARBITER_BENCH_LEVELS",
        value_delimiter = ',',
        default_value = "1,100,1000"
    )]
    pub levels: Vec<u32>,
    /// Seconds an Orchestrator of a level waits for the Arbiter before it
    /// parks (the worker's `--park-after`, 120 s in a deployment): short,
    /// so that a level's idle Orchestrators are parked when its idle cost
    /// and memory are read, as a deployment's are after two minutes.
    #[arg(long, env = "ARBITER_BENCH_LEVEL_PARK_AFTER", default_value_t = 10)]
    pub level_park_after: u64,
    /// Sessions of a level that the load is spread over, at most; a larger
    /// level's other sessions are set up the same way and then stay idle
    /// (their Orchestrators park), so its messages meet the same per-session
    /// pace as this level's and what grows is the idle population.
    #[arg(long, env = "ARBITER_BENCH_LEVEL_ACTIVE", default_value_t = 1000)]
    pub level_active: u32,
    /// A level of N sessions also holds N / this many team sessions, each
    /// a parallel team of three Orchestrators that reported and waits (0:
    /// none).
    #[arg(long, env = "ARBITER_BENCH_LEVEL_TEAM_EVERY", default_value_t = 100)]
    pub level_team_every: u32,
    /// Seconds measured per level (after the warm-up).
    #[arg(long, env = "ARBITER_BENCH_DURATION", default_value_t = 20)]
    pub duration: u64,
    /// Seconds of load before measuring starts.
    #[arg(long, env = "ARBITER_BENCH_WARMUP", default_value_t = 3)]
    pub warmup: u64,
    /// Which tick the anatomy takes apart, as a quantile of each hop's
    /// latency: 0.5 is the median tick, 0.99 one at the p99 (what the tail
    /// is made of).
    #[arg(long, env = "ARBITER_BENCH_ANATOMY_QUANTILE", default_value_t = 0.5)]
    pub anatomy_quantile: f64,
    /// Seconds the anatomy's one session is measured (longer gives more
    /// ticks to pick a tail one from).
    #[arg(long, env = "ARBITER_BENCH_ANATOMY_DURATION", default_value_t = 5)]
    pub anatomy_duration: u64,
    /// Milliseconds every model reply waits before it leaves, in the levels,
    /// anatomy and otel parts; 0 (the default) is the zero-latency model the
    /// targets are stated for. A hop starts when a reply leaves, so with a
    /// delay the step that asked for the reply is stored before the next
    /// hop begins, as with any real model; with none, the rest of that store
    /// falls inside the next hop.
    #[arg(long, env = "ARBITER_BENCH_MODEL_DELAY_MS", default_value_t = 0.0)]
    pub model_delay_ms: f64,
    /// Human messages per second offered at one session (each takes three
    /// turns in turn, so one session saturates far below the system).
    #[arg(long, env = "ARBITER_BENCH_SINGLE_RATE", default_value_t = 20.0)]
    pub single_rate: f64,
    /// Human messages per second offered in total at the larger levels
    /// (each is routed three times: to the Orchestrator, back, to the human).
    #[arg(long, env = "ARBITER_BENCH_RATE", default_value_t = 200.0)]
    pub rate: f64,
    /// Human messages one session sends before a fresh session of its slot
    /// takes over (so transcripts stay conversation-sized: 4 Arbiter and 2
    /// Orchestrator messages per tick).
    #[arg(long, env = "ARBITER_BENCH_TICKS_PER_SESSION", default_value_t = 50)]
    pub ticks_per_session: u64,
    /// Exchanges a saturation session makes before it releases its
    /// Orchestrator and a fresh session takes its place.
    #[arg(long, env = "ARBITER_BENCH_EXCHANGES", default_value_t = 50)]
    pub exchanges: u64,
    /// Sessions started per second while a level is being set up.
    #[arg(long, env = "ARBITER_BENCH_SETUP_RATE", default_value_t = 200.0)]
    pub setup_rate: f64,
    /// Sessions that ping-pong as fast as they can in the saturation run.
    #[arg(long, env = "ARBITER_BENCH_SATURATION_SESSIONS", default_value_t = 200)]
    pub saturation_sessions: u32,
    /// Seconds the saturation run is measured.
    #[arg(long, env = "ARBITER_BENCH_SATURATION_DURATION", default_value_t = 20)]
    pub saturation_duration: u64,
    /// Orchestrators started in the session-start run.
    #[arg(long, env = "ARBITER_BENCH_START_SESSIONS", default_value_t = 400)]
    pub start_sessions: u32,
    /// Orchestrator starts per second in the session-start run.
    #[arg(long, env = "ARBITER_BENCH_START_RATE", default_value_t = 40.0)]
    pub start_rate: f64,
    /// Arbiter sessions per memory step (two steps are measured).
    #[arg(long, env = "ARBITER_BENCH_MEMORY_ARBITERS", default_value_t = 1000)]
    pub memory_arbiters: u32,
    /// Orchestrators per memory step (two steps are measured).
    #[arg(
        long,
        env = "ARBITER_BENCH_MEMORY_ORCHESTRATORS",
        default_value_t = 500
    )]
    pub memory_orchestrators: u32,
    /// Worker processes (the pool shares them).
    #[arg(long, env = "ARBITER_BENCH_WORKERS", default_value_t = 1)]
    pub workers: usize,
    /// A nats-server config file for every server the benchmark starts, e.g.
    /// `deploy/nats-server.conf` (the durable profile: an fsync per
    /// JetStream write). Without it the server runs with its defaults, as in
    /// the tests.
    #[arg(long, env = "ARBITER_BENCH_NATS_CONFIG")]
    pub nats_config: Option<PathBuf>,
    /// Sessions in the handoff part, each a chain of Orchestrator generations.
    #[arg(long, env = "ARBITER_BENCH_HANDOFF_SESSIONS", default_value_t = 4)]
    pub handoff_sessions: u32,
    /// Orchestrator generations per session in the handoff part.
    #[arg(long, env = "ARBITER_BENCH_HANDOFF_GENERATIONS", default_value_t = 10)]
    pub handoff_generations: u64,
    /// Teams started per team size (3 and 10 members) in the `teams` part.
    #[arg(long, env = "ARBITER_BENCH_TEAM_SESSIONS", default_value_t = 20)]
    pub team_sessions: u32,
    /// Watched sessions of each level of the `web` part (one open event
    /// stream each, on the real arbiter-web built next to this binary).
    #[arg(
        long,
        env = "ARBITER_BENCH_WEB_LEVELS",
        value_delimiter = ',',
        default_value = "1,100"
    )]
    pub web_levels: Vec<u32>,
    /// Seconds each `web` level writes log entries.
    #[arg(long, env = "ARBITER_BENCH_WEB_DURATION", default_value_t = 10)]
    pub web_duration: u64,
    /// Log entries per second written in all at each `web` level,
    /// round-robin over its sessions.
    #[arg(long, env = "ARBITER_BENCH_WEB_RATE", default_value_t = 100.0)]
    pub web_rate: f64,
    /// Runtimes compared side by side in the `runtimes` part, comma separated.
    #[arg(
        long,
        env = "ARBITER_BENCH_RUNTIMES",
        value_delimiter = ',',
        default_value = "native,claude-code,codex"
    )]
    pub runtimes: Vec<arbiter_worker::Runtime>,
    /// Orchestrators started per runtime in the `runtimes` part (each
    /// claude-code one is a CLI process of about 200 MB).
    #[arg(long, env = "ARBITER_BENCH_RUNTIME_SESSIONS", default_value_t = 6)]
    pub runtime_sessions: u32,
    /// The Claude Code CLI for the claude-code runtime (`scripts/install-claude-cli`).
    #[arg(long, env = "CLAUDE_CLI_BIN")]
    pub claude_bin: Option<PathBuf>,
    /// The Codex CLI for the codex runtime (`scripts/install-codex-cli`).
    #[arg(long, env = "CODEX_CLI_BIN")]
    pub codex_bin: Option<PathBuf>,
    /// Count the messages published per subject during the saturation run
    /// (a subscription of the benchmark's own: it costs the server a copy of
    /// each, so compare CPU figures only between runs without it).
    #[arg(long, env = "ARBITER_BENCH_SUBJECTS")]
    pub subjects: bool,
    /// Keep the children's logs and the server's store here instead of a temp dir.
    #[arg(long, env = "ARBITER_BENCH_KEEP")]
    pub keep: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    Baseline,
    Saturation,
    Levels,
    Start,
    Memory,
    Anatomy,
    /// Routing overhead at 100 sessions with OpenTelemetry export on, to a
    /// local OTLP receiver, against the same level with export off.
    Otel,
    /// Routing overhead at 100 sessions with a webhook configured whose
    /// receiver accepts the connection and never answers, against the same
    /// level with no webhook: a hung receiver must delay no session.
    Hooks,
    Runtimes,
    /// Chains of Orchestrator generations handing packets on: the Arbiter's
    /// growth per generation, the handoff gap, the tokens per packet.
    Handoff,
    /// Parallel teams of 3 and 10 Orchestrators: the summons → every
    /// member's first model request.
    Teams,
    /// The web console (the real arbiter-web): a log entry stored → its
    /// event on a browser tab's stream, at 1 and 100 watched sessions, and
    /// the process's memory with every stream open.
    Web,
    /// The git checkpoint's cost per turn on a repository of 10,000 files
    /// (no system: the worker's own checkpoint code, in its sandbox).
    Checkpoints,
}

impl RunOptions {
    pub fn has(&self, phase: Phase) -> bool {
        self.phases.contains(&phase)
    }
}
