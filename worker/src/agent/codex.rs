//! A turn on the Codex runtime: the pending user message goes to one
//! `codex exec` process on the Orchestrator's thread (started by its first
//! turn, resumed after). The rest is the native loop's: the input is stored
//! before the turn, the output (the final `agent_message`, JSON) is taken
//! with the same repair-then-fail rules, then stored and published with the
//! worker's evidence (the commands the JSONL events showed, and the
//! workspace's files).
//!
//! The thread's rollout file goes into the records like the Claude Code
//! CLI's transcript; the snapshot names the thread and where its rollout
//! lies under `CODEX_HOME`, so a worker that takes the Orchestrator over
//! writes it back under a fresh home and resumes the same thread.

use arbiter_protocol::{ModelErrorKind, Role, WireError};

use super::{Agent, Stop};
use crate::runtime::codex::{self, CodexConfig, Launch, Progress, TurnDone, TurnError};

impl Agent {
    /// One turn on the Codex CLI.
    pub(super) async fn work_codex(&mut self) -> Result<(), Stop> {
        self.take_inputs().await?;
        self.working().await;
        let mut text = self.core.cli_input();
        // Stored before the turn, so whoever goes on sends the same input.
        if self.core.unstored() {
            self.step(Vec::new()).await?;
        }
        if let Some(error) = self.core.over_budget() {
            return self.fail(error).await;
        }
        // Codex has no hook to hand the 70 %/85 % warnings in mid-turn:
        // they ride with the next turn's input.
        if let Some(warning) = self.core.warning() {
            text = format!("{text}\n\n{warning}");
        }
        let home = self.codex_home();
        if let Err(message) = self.prepare_codex_home(&home).await {
            let number = self.core.settings.number;
            return self
                .fail(WireError::OrchestratorFailed { number, message })
                .await;
        }
        let config: CodexConfig = self.shared.config.codex.clone();
        let model = self.shared.config.model.clone();
        let workspace = self.ctx.workspace.root().to_owned();
        let thread_id = self.core.snap.codex.as_ref().map(|t| t.thread_id.clone());
        // Checked at its start: a policy the CLI cannot hold it to never gets here.
        let layers = self.core.snap.layers.clone().unwrap_or_default();
        let read_only = match crate::runtime::policy::map(self.shared.config.runtime, &layers) {
            Ok(mapped) => mapped.read_only,
            Err(message) => {
                let number = self.core.settings.number;
                return self
                    .fail(WireError::OrchestratorFailed { number, message })
                    .await;
            }
        };
        tracing::info!(cli = %config.bin.display(), resume = thread_id.is_some(), "running a turn on the Codex CLI");
        let status = self.status.clone();
        let turn_home = home.clone();
        let turn = async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let updates = async {
                while let Some(Progress::Tool(name)) = rx.recv().await {
                    status
                        .update(|s| {
                            s.current_tool = Some(name);
                            s.tool_count += 1;
                        })
                        .await;
                }
            };
            let run = async {
                let launch = Launch {
                    config: &config,
                    workspace: &workspace,
                    home: &turn_home,
                    thread_id: thread_id.as_deref(),
                    model: &model,
                    read_only,
                };
                let done = codex::turn(&launch, &text, |progress| {
                    let _ = tx.send(progress);
                })
                .await;
                drop(tx);
                done
            };
            let (done, ()) = tokio::join!(run, updates);
            done
        };
        let done = match self.during(turn).await? {
            Ok(done) => done,
            Err(error) => return self.fail(turn_error(error)).await,
        };
        self.after_codex_turn(&home, done).await
    }

    /// The Orchestrator's own `CODEX_HOME`: beside the sessions'
    /// workspaces (outside the one its commands may write), named by its id.
    pub(super) fn codex_home(&self) -> std::path::PathBuf {
        self.shared
            .config
            .workspace_root
            .join(codex::HOMES_DIR)
            .join(&self.core.settings.orch_id)
    }

    /// Writes the home's config, and the thread's rollout from the records
    /// when this worker took the Orchestrator over.
    async fn prepare_codex_home(&mut self, home: &std::path::Path) -> Result<(), String> {
        let restored = self.cli.restored.take();
        if restored.is_some() {
            // Taken over (or restarted): the records are the truth. Codex
            // resumes a thread from its rollout alone (measured: a fresh home
            // with only the rollout), so whatever an earlier run left here
            // (its sqlite state, a rollout longer by a cut turn) goes.
            let _ = tokio::fs::remove_dir_all(home).await;
        }
        codex::write_home(
            home,
            &self.shared.config.codex.bin,
            &self.shared.config.model,
            &self.core.settings.system,
            &self.shared.output_schema,
            &crate::mcp::codex_config(self.ctx.mcp.cli(), &self.shared.config.mcp_servers),
        )?;
        let Some(stored) = restored else {
            return Ok(());
        };
        let Some(thread) = &self.core.snap.codex else {
            return Ok(());
        };
        let path = home.join(&thread.rollout);
        let written = async {
            if let Some(dir) = path.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            tokio::fs::write(&path, stored.as_bytes()).await
        };
        written.await.map_err(|e| {
            format!(
                "cannot restore the Codex thread's rollout to {}: {e}",
                path.display()
            )
        })?;
        self.cli.stored = stored.len();
        tracing::info!(
            bytes = stored.len(),
            thread = %thread.thread_id,
            "the Codex thread restored from the records"
        );
        Ok(())
    }

    /// What a finished turn leaves: the thread's rollout kept for the
    /// records and read for the context it ends with, then the turn taken
    /// by the core (`core/runtime.rs`) as the native loop takes a reply.
    async fn after_codex_turn(
        &mut self,
        home: &std::path::Path,
        done: TurnDone,
    ) -> Result<(), Stop> {
        let known = self
            .core
            .snap
            .codex
            .as_ref()
            .map(|thread| (thread.thread_id.clone(), thread.rollout.clone()));
        let rollout = match &known {
            Some((thread_id, rollout)) if *thread_id == done.thread_id => Some(rollout.clone()),
            _ => {
                codex::find_rollout(home, &done.thread_id).map(|p| p.to_string_lossy().into_owned())
            }
        };
        let Some(rollout) = rollout else {
            let number = self.core.settings.number;
            let message = format!(
                "the Codex CLI left no rollout file for thread {} under {}",
                done.thread_id,
                home.display()
            );
            return self
                .fail(WireError::OrchestratorFailed { number, message })
                .await;
        };
        if known.is_some_and(|(thread_id, _)| thread_id != done.thread_id) {
            // Another thread (it should not happen): its file afresh.
            self.cli.stored = 0;
        }
        let path = home.join(&rollout);
        self.keep_cli_file(&path).await;
        let context = tokio::fs::read(&path)
            .await
            .ok()
            .and_then(|f| codex::last_context(&String::from_utf8_lossy(&f)));
        let parsed = self.core.codex_turn(done, rollout, context);
        let (spend, tokens) = (self.core.snap.spend, self.core.snap.context_tokens);
        let budget = self.shared.config.context_budget;
        self.status
            .update(|s| {
                s.spend = spend;
                if context.is_some() {
                    s.context_tokens = tokens;
                    s.context_pct = crate::context::percent(tokens, budget);
                }
            })
            .await;
        self.take_output(parsed).await
    }
}

/// A failed turn as the Arbiter and the human see it.
fn turn_error(error: TurnError) -> WireError {
    let (TurnError::Stopped(message) | TurnError::Protocol(message) | TurnError::Failed(message)) =
        error;
    WireError::Model {
        role: Role::Orchestrator,
        class: ModelErrorKind::Other,
        message,
    }
}
