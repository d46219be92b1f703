//! `arbiter-console`: talk to an Arbiter session from a terminal, full-screen
//! or one line at a time; `arbiter-console sessions` lists the sessions,
//! `arbiter-console approvals` the tool calls waiting for the human's word,
//! `arbiter-console memory` shows and removes what a workspace remembers.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use arbiter_bus::cli::NatsArgs;
use arbiter_console::{Config, OutputMode};
use clap::builder::BoolishValueParser;
use clap::{Parser, Subcommand};
use tracing_appender::non_blocking::WorkerGuard;

/// Talk to the Arbiter. On a terminal the console is a full-screen view of the
/// session; with --plain or --json (or when stdin or stdout is not a terminal)
/// each stdin line is sent and the log is printed on stdout, one entry per line.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Line mode: print the log as plain text.
    #[arg(long, env = "ARBITER_CONSOLE_PLAIN", conflicts_with = "json", value_parser = BoolishValueParser::new())]
    plain: bool,
    /// Line mode: print each log entry as one JSON object per line (musings included).
    #[arg(long, env = "ARBITER_CONSOLE_JSON", value_parser = BoolishValueParser::new())]
    json: bool,
    /// Attach to this session instead of starting a new one.
    #[arg(long, env = "ARBITER_SESSION")]
    session: Option<String>,
    /// The workspace (project) the session works on: it starts with what
    /// the workspace remembers, and what it learns is kept there (default:
    /// the name of the current directory).
    #[arg(long, env = "ARBITER_WORKSPACE", global = true)]
    workspace: Option<String>,
    /// The session's tool-call policy, set as the console starts (as
    /// `/policy` does): `'mode ask; deny bash(curl *)'`. It can only
    /// tighten each worker's own (docs/approvals.md).
    #[arg(long, env = "ARBITER_POLICY")]
    policy: Option<String>,
    #[command(flatten)]
    nats: NatsArgs,
    /// Show the Arbiter's musings (the full-screen view toggles them with Ctrl-T).
    #[arg(long, env = "ARBITER_SHOW_MUSINGS", value_parser = BoolishValueParser::new())]
    show_musings: bool,
    /// Line mode: keep following the log after stdin ends, until Ctrl-C.
    #[arg(long, env = "ARBITER_FOLLOW", value_parser = BoolishValueParser::new())]
    follow: bool,
    /// Write logs to this file. The full-screen view always logs to a file
    /// (by default under ~/.local/state/arbiter/); the line modes log to stderr
    /// unless this is given.
    #[arg(long, env = "ARBITER_CONSOLE_LOG", global = true)]
    log_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the sessions with their state and last activity, newest first.
    Sessions {
        /// One JSON session status per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The tool calls waiting for the human's word, across every session:
    /// the session, the approval's number (what /allow, /always and /deny
    /// name), the Orchestrator, the tool and what it would run, how long it
    /// has waited and how long is left before it is denied.
    Approvals {
        /// One JSON object per approval (`session_id` and the status's
        /// waiting approval) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// What a workspace remembers across sessions: list the entries, show
    /// one, or forget one.
    Memory {
        #[command(subcommand)]
        action: MemoryCommand,
        /// One JSON object per line instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Stop a session's work, as /stop does: abandon the Arbiter's turn, cancel
    /// its Orchestrator, and hold until the human writes again.
    Stop {
        /// The session to stop.
        #[arg(long)]
        session: String,
    },
    /// The checkpoints a session's log names, oldest first: the commit, the
    /// diffstat, whose output it came with (docs/checkpoints.md).
    Checkpoints {
        /// The session.
        #[arg(long)]
        session: String,
        /// One JSON object per checkpoint instead of a line.
        #[arg(long)]
        json: bool,
    },
    /// Rewind a session's workspace to one of its checkpoints, as /rewind
    /// does: the next Orchestrator summoned starts from it. Asks first.
    Rewind {
        /// The session.
        #[arg(long)]
        session: String,
        /// The checkpoint: its id, or a prefix only it has.
        checkpoint: String,
        /// Stop the session's work first (as /stop), when Orchestrators are at work.
        #[arg(long)]
        stop: bool,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// One checkpoint's change, as `git show --stat --patch` prints it, from
    /// the session's workspace.
    Diff {
        /// The session.
        #[arg(long)]
        session: String,
        /// The checkpoint: its id, or a prefix only it has.
        checkpoint: String,
        /// The session's workspace, a git repository (default: the current directory).
        #[arg(long, default_value = ".")]
        repo: std::path::PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// The workspace's entries, newest first.
    List,
    /// One entry in full.
    Show {
        /// The entry's id (from `memory list`).
        id: String,
    },
    /// Remove an entry: no session starts with it again.
    Forget {
        /// The entry's id (from `memory list`).
        id: String,
    },
}

impl From<MemoryCommand> for arbiter_console::memory::Action {
    fn from(command: MemoryCommand) -> Self {
        match command {
            MemoryCommand::List => Self::List,
            MemoryCommand::Show { id } => Self::Show { id },
            MemoryCommand::Forget { id } => Self::Forget { id },
        }
    }
}

/// The workspace of this run: `--workspace`, else the current directory's name.
fn workspace_of(given: Option<&str>) -> anyhow::Result<String> {
    let cwd = std::env::current_dir().ok();
    Ok(arbiter_console::memory::workspace(given, cwd.as_deref())?)
}

impl Cli {
    /// The full-screen view runs when no line mode is asked for and the
    /// console has a terminal to own; pipes keep the plain line mode.
    fn screen(&self) -> bool {
        !self.plain
            && !self.json
            && std::io::stdout().is_terminal()
            && std::io::stdin().is_terminal()
    }

    fn into_config(self, screen: bool) -> anyhow::Result<Config> {
        let nats = self.nats.options();
        let identity = identity_of(&nats);
        let workspace = workspace_of(self.workspace.as_deref())?;
        if let Some(policy) = &self.policy {
            arbiter_console::check_policy(policy)
                .map_err(|why| anyhow::anyhow!("--policy: {why}"))?;
        }
        Ok(Config {
            workspace: Some(workspace),
            policy: self.policy,
            nats,
            identity,
            session: self.session,
            output: if self.json {
                OutputMode::Json
            } else {
                OutputMode::Plain
            },
            show_musings: self.show_musings,
            follow: self.follow,
            screen,
        })
    }
}

/// The console speaks under its credential's name: the server lets it
/// publish the human's lines only under that name.
fn identity_of(nats: &arbiter_bus::NatsOptions) -> String {
    nats.credential_name()
        .unwrap_or_else(|| arbiter_console::DEFAULT_IDENTITY.to_owned())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An error can quote what a server sent.
            let message = arbiter_console::inert::block(
                "arbiter-console: ",
                &arbiter_bus::error_chain(e.as_ref()),
            );
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn try_main(cli: Cli) -> anyhow::Result<()> {
    let screen = cli.command.is_none() && cli.screen();
    let log_file = match (&cli.log_file, screen) {
        (Some(path), _) => Some(path.clone()),
        (None, true) => Some(arbiter_console::default_log_file()),
        (None, false) => None,
    };
    let (telemetry, _guard) = init_tracing(log_file.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = match cli.command {
        Some(Command::Sessions { json }) => runtime.block_on(arbiter_console::sessions::print(
            &cli.nats.options(),
            json || cli.json,
            tokio::io::stdout(),
        )),
        Some(Command::Approvals { json }) => runtime.block_on(arbiter_console::approvals::print(
            &cli.nats.options(),
            json || cli.json,
            tokio::io::stdout(),
        )),
        Some(Command::Memory { action, json }) => {
            let workspace = workspace_of(cli.workspace.as_deref())?;
            runtime.block_on(arbiter_console::memory::run(
                &cli.nats.options(),
                &workspace,
                action.into(),
                json || cli.json,
                tokio::io::stdout(),
            ))
        }
        Some(Command::Checkpoints { session, json }) => {
            runtime.block_on(arbiter_console::rewind::list(
                &cli.nats.options(),
                &session,
                json || cli.json,
                tokio::io::stdout(),
            ))
        }
        Some(Command::Rewind {
            session,
            checkpoint,
            stop,
            yes,
        }) => {
            let identity = identity_of(&cli.nats.options());
            runtime.block_on(arbiter_console::rewind::rewind(
                &cli.nats.options(),
                &identity,
                &session,
                (&checkpoint, stop, yes),
                tokio::io::BufReader::new(tokio::io::stdin()),
                tokio::io::stdout(),
            ))
        }
        Some(Command::Diff {
            session,
            checkpoint,
            repo,
        }) => runtime.block_on(arbiter_console::rewind::diff(
            &cli.nats.options(),
            &session,
            &checkpoint,
            &repo,
            tokio::io::stdout(),
        )),
        Some(Command::Stop { session }) => {
            let identity = identity_of(&cli.nats.options());
            runtime.block_on(arbiter_console::stop::run(
                &cli.nats.options(),
                &identity,
                &session,
                tokio::io::stdout(),
            ))
        }
        None => {
            let config = cli.into_config(screen)?;
            runtime.block_on(arbiter_console::run(config, shutdown_signal()))
        }
    };
    // Tokio reads stdin on a blocking thread that cannot be interrupted; waiting
    // for it would hang after Ctrl-C until the next Enter.
    runtime.shutdown_background();
    // The spans of the lines sent go out before the process ends.
    telemetry.shutdown();
    Ok(result?)
}

/// Logs to `file` (appending) when given, else to stderr, and exports spans
/// when the `OTEL_*` variables ask for it. The guard flushes the file on drop.
fn init_tracing(
    file: Option<&Path>,
) -> anyhow::Result<(arbiter_bus::telemetry::Telemetry, Option<WorkerGuard>)> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| match file {
            Some(_) => "info,async_nats=warn".into(),
            None => "warn".into(),
        });
    let Some(path) = file else {
        let telemetry = arbiter_bus::telemetry::init(
            "arbiter-console",
            filter,
            std::io::stderr,
            std::io::stderr().is_terminal(),
        );
        return Ok((telemetry, None));
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the log directory {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open the log file {}", path.display()))?;
    let (writer, guard) = tracing_appender::non_blocking(file);
    let telemetry = arbiter_bus::telemetry::init("arbiter-console", filter, writer, false);
    Ok((telemetry, Some(guard)))
}

/// Completes on Ctrl-C, SIGTERM or SIGHUP (the terminal went away). In the
/// full-screen view Ctrl-C is a key, not a signal.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut hangup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = hangup.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
