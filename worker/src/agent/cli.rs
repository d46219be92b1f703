//! A turn on the Claude Code runtime: the pending user message goes to the
//! Orchestrator's CLI process as one user line, and its `result` ends the
//! turn. The rest is the native loop's: the input is stored before the
//! turn, the output is validated with the same repair-then-fail rules, then
//! stored and published with the worker's evidence (the CLI's tool calls as
//! the stream showed them, and the workspace's files).

use arbiter_protocol::{ModelErrorKind, Role, WireError};

use super::{Agent, Stop};
use crate::runtime::claude::{self, ClaudeProcess, Launch, Progress, TurnError};
use crate::state::CliTranscript;
use crate::tools;

/// Tool results after which a running CLI turn's transcript is stored.
const CHECKPOINT_RESULTS: usize = 5;

impl Agent {
    /// One turn on the CLI.
    pub(super) async fn work_cli(&mut self) -> Result<(), Stop> {
        self.take_inputs().await?;
        self.working().await;
        let text = self.core.cli_input();
        // Stored before the turn, so whoever goes on sends the same line.
        if self.core.unstored() {
            self.step(Vec::new()).await?;
        }
        // Checked per CLI turn: the CLI's own requests within a turn are its own.
        if let Some(error) = self.core.over_budget() {
            return self.fail(error).await;
        }
        let mut process = match self.cli.process.take() {
            Some(process) => process,
            None => match self.start_cli().await {
                Ok(process) => process,
                Err(message) => {
                    let number = self.core.settings.number;
                    return self
                        .fail(WireError::OrchestratorFailed { number, message })
                        .await;
                }
            },
        };
        let status = self.status.clone();
        let budget = self.shared.config.context_budget;
        let (checkpoint_tx, mut checkpoint_rx) = tokio::sync::mpsc::unbounded_channel();
        let turn = async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let updates = async {
                let mut results = 0;
                while let Some(progress) = rx.recv().await {
                    match progress {
                        Progress::Results(n) => {
                            results += n;
                            if results >= CHECKPOINT_RESULTS {
                                results = 0;
                                let _ = checkpoint_tx.send(());
                            }
                        }
                        Progress::Tool(name) => {
                            status
                                .update(|s| {
                                    s.current_tool = Some(tools::display_name(&name));
                                    s.tool_count += 1;
                                })
                                .await;
                        }
                        Progress::Context(tokens) => {
                            status
                                .update(|s| {
                                    s.context_tokens = tokens;
                                    s.context_pct = crate::context::percent(tokens, budget);
                                })
                                .await;
                        }
                    }
                }
            };
            let run = async {
                let done = process
                    .turn(&text, |progress| {
                        let _ = tx.send(progress);
                    })
                    .await;
                drop(tx);
                done
            };
            let (done, ()) = tokio::join!(run, updates);
            (process, done)
        };
        // Every few tool results the CLI's transcript is stored, so that a
        // takeover mid-turn resumes with the calls made so far.
        tokio::pin!(turn);
        let (process, done) = loop {
            let next = self
                .during(async {
                    tokio::select! {
                        out = &mut turn => Some(out),
                        Some(()) = checkpoint_rx.recv() => None,
                    }
                })
                .await?;
            match next {
                Some(out) => break out,
                None => {
                    if self.keep_cli_transcript().await {
                        self.step(Vec::new()).await?;
                    }
                }
            }
        };
        let done = match done {
            Ok(done) => done,
            Err(error) => {
                process.close().await;
                return self.fail(turn_error(error)).await;
            }
        };
        self.cli.process = Some(process);
        self.keep_cli_transcript().await;
        let parsed = self.core.claude_turn(&done);
        let spend = self.core.snap.spend;
        self.status.update(|s| s.spend = spend).await;
        self.take_output(parsed).await
    }

    /// The CLI's transcript file of this Orchestrator, on this worker.
    fn cli_transcript_path(&self) -> std::path::PathBuf {
        claude::transcript_path(
            &self.cli_home(),
            self.ctx.workspace.root(),
            &self.core.settings.orch_id,
        )
    }

    /// Keeps what the CLI's transcript grew by since it was last kept, for
    /// the next record: a worker that takes the Orchestrator over resumes
    /// from it. Only whole lines: the CLI may be writing the last one.
    /// `false`: nothing new to keep.
    async fn keep_cli_transcript(&mut self) -> bool {
        let path = self.cli_transcript_path();
        self.keep_cli_file(&path).await
    }

    /// Keeps what the agent CLI's session file at `path` (claude-code: its
    /// transcript; codex: its rollout) grew by since it was last kept, for
    /// the next record; whole lines only. `false`: nothing new to keep.
    pub(super) async fn keep_cli_file(&mut self, path: &std::path::Path) -> bool {
        let mut file = match tokio::fs::read(path).await {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "the CLI's transcript is unreadable; not stored this turn");
                return false;
            }
        };
        file.truncate(
            file.iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |end| end + 1),
        );
        let piece = match file.get(self.cli.stored..) {
            Some([]) => return false,
            Some(added) => CliTranscript {
                append: String::from_utf8_lossy(added).into_owned(),
                reset: false,
            },
            // Shorter than what was stored: the whole of it, afresh.
            None => CliTranscript {
                append: String::from_utf8_lossy(&file).into_owned(),
                reset: true,
            },
        };
        self.cli.stored = file.len();
        self.store.keep_cli_transcript(piece);
        true
    }

    /// Starts this Orchestrator's CLI process in its workspace: a new
    /// session, or the stored one resumed (its transcript written back
    /// where the CLI looks for it, under this workspace's path).
    async fn start_cli(&mut self) -> Result<ClaudeProcess, String> {
        let summon_id = self.core.settings.orch_id.clone();
        let home = self.cli_home();
        let path = self.cli_transcript_path();
        if let Some(stored) = self.cli.restored.take() {
            let written = async {
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir).await?;
                }
                tokio::fs::write(&path, stored.as_bytes()).await
            };
            written.await.map_err(|e| {
                format!(
                    "cannot restore the CLI's session transcript to {}: {e}",
                    path.display()
                )
            })?;
            self.cli.stored = stored.len();
            tracing::info!(
                bytes = stored.len(),
                "the CLI's session restored from the records"
            );
        }
        let resume = tokio::fs::try_exists(&path).await.unwrap_or(false);
        // Checked at its start: a policy the CLI cannot hold it to never gets here.
        let layers = self.core.snap.layers.clone().unwrap_or_default();
        let mapped = crate::runtime::policy::map(self.shared.config.runtime, &layers)?;
        let launch = Launch {
            config: &self.shared.config.claude_code,
            workspace: self.ctx.workspace.root(),
            home: &home,
            session_id: &summon_id,
            resume,
            model: &self.shared.config.model,
            system_prompt: &self.core.settings.system,
            output_schema: &self.shared.output_schema,
            context_budget: self.shared.config.context_budget,
            disallowed: &mapped.disallowed,
            mcp: self.ctx.mcp.cli(),
        };
        tracing::info!(cli = %self.shared.config.claude_code.bin.display(), resume, disallowed = ?mapped.disallowed, "starting the Claude Code CLI");
        ClaudeProcess::start(&launch)
    }

    /// The Orchestrator's own `HOME` for the CLI: beside the sessions'
    /// workspaces (outside the one its tools may write), named by its id.
    pub(super) fn cli_home(&self) -> std::path::PathBuf {
        self.shared
            .config
            .workspace_root
            .join(crate::runtime::claude::HOMES_DIR)
            .join(&self.core.settings.orch_id)
    }
}

/// A failed turn as the Arbiter and the human see it.
fn turn_error(error: TurnError) -> WireError {
    match error {
        TurnError::Stopped(message) | TurnError::Protocol(message) => WireError::Model {
            role: Role::Orchestrator,
            class: ModelErrorKind::Other,
            message,
        },
        TurnError::Result { status, message } => WireError::Model {
            role: Role::Orchestrator,
            class: match status {
                Some(400) => ModelErrorKind::InvalidRequest,
                Some(401) => ModelErrorKind::Authentication,
                Some(403) => ModelErrorKind::PermissionDenied,
                Some(429) => ModelErrorKind::RateLimited,
                Some(529) => ModelErrorKind::Overloaded,
                Some(_) => ModelErrorKind::Api,
                None => ModelErrorKind::Other,
            },
            message,
        },
    }
}
