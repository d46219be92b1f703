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

use arbiter_llm::{Block, Message, MessageRole, structured};
use arbiter_protocol::{ModelErrorKind, OrchestratorOutput, OrchestratorState, Role, WireError};
use serde_json::json;

use super::cli::user_text;
use super::{Agent, Stop};
use crate::runtime::codex::{self, CodexConfig, Launch, Progress, TurnDone, TurnError};
use crate::state::CodexThread;
use crate::tools::ToolOutcome;

impl Agent {
    /// One turn on the Codex CLI.
    pub(super) async fn work_codex(&mut self) -> Result<(), Stop> {
        self.take_inputs().await?;
        self.status
            .update(|s| {
                s.state = OrchestratorState::Working;
                s.current_tool = None;
            })
            .await;
        let mut text = match self.transcript.messages().last() {
            Some(last) if last.role == MessageRole::User => user_text(last),
            _ => {
                self.transcript
                    .push(Message::user("[system] Continue your work."));
                "[system] Continue your work.".to_owned()
            }
        };
        // Stored before the turn, so whoever goes on sends the same input.
        if self.snap != self.stored || !self.transcript.unstored().is_empty() {
            self.step(Vec::new()).await?;
        }
        if let Some(error) = self.over_budget() {
            return self.fail(error).await;
        }
        // Codex has no hook to hand the 70 %/85 % warnings in mid-turn:
        // they ride with the next turn's input.
        if let Some(warning) = self.warning() {
            text = format!("{text}\n\n{warning}");
        }
        let home = self.codex_home();
        if let Err(message) = self.prepare_codex_home(&home).await {
            let number = self.status.get().number;
            return self
                .fail(WireError::OrchestratorFailed { number, message })
                .await;
        }
        let config: CodexConfig = self.shared.config.codex.clone();
        let model = self.shared.config.model.clone();
        let workspace = self.ctx.workspace.root().to_owned();
        let thread_id = self.snap.codex.as_ref().map(|t| t.thread_id.clone());
        // Checked at its start: a policy the CLI cannot hold it to never gets here.
        let layers = self.snap.layers.clone().unwrap_or_default();
        let read_only = match crate::runtime::policy::map(self.shared.config.runtime, &layers) {
            Ok(mapped) => mapped.read_only,
            Err(message) => {
                let number = self.status.get().number;
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
            .join(self.status.get().orch_id)
    }

    /// Writes the home's config, and the thread's rollout from the records
    /// when this worker took the Orchestrator over.
    async fn prepare_codex_home(&mut self, home: &std::path::Path) -> Result<(), String> {
        let restored = self.cli_restored.take();
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
            &self.system,
            &self.shared.output_schema,
            &crate::mcp::codex_config(self.ctx.mcp.cli(), &self.shared.config.mcp_servers),
        )?;
        let Some(stored) = restored else {
            return Ok(());
        };
        let Some(thread) = &self.snap.codex else {
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
        self.cli_stored = stored.len();
        tracing::info!(
            bytes = stored.len(),
            thread = %thread.thread_id,
            "the Codex thread restored from the records"
        );
        Ok(())
    }

    /// What a finished turn leaves: the thread and its rollout kept, the
    /// tools counted, usage and context recorded, and its output taken as
    /// the native loop takes a reply.
    async fn after_codex_turn(
        &mut self,
        home: &std::path::Path,
        done: TurnDone,
    ) -> Result<(), Stop> {
        let before = match &self.snap.codex {
            Some(thread) if thread.thread_id == done.thread_id => thread.usage.clone(),
            _ => serde_json::Value::Null,
        };
        let rollout = match &self.snap.codex {
            Some(thread) if thread.thread_id == done.thread_id => Some(thread.rollout.clone()),
            _ => {
                codex::find_rollout(home, &done.thread_id).map(|p| p.to_string_lossy().into_owned())
            }
        };
        let Some(rollout) = rollout else {
            let number = self.status.get().number;
            let message = format!(
                "the Codex CLI left no rollout file for thread {} under {}",
                done.thread_id,
                home.display()
            );
            return self
                .fail(WireError::OrchestratorFailed { number, message })
                .await;
        };
        if self
            .snap
            .codex
            .as_ref()
            .is_some_and(|t| t.thread_id != done.thread_id)
        {
            // Another thread (it should not happen): its file afresh.
            self.cli_stored = 0;
        }
        let path = home.join(&rollout);
        self.keep_cli_file(&path).await;
        let file = tokio::fs::read(&path).await.ok();
        self.snap.codex = Some(CodexThread {
            thread_id: done.thread_id.clone(),
            rollout,
            usage: done.usage.clone(),
        });
        for call in &done.tools {
            let outcome = ToolOutcome {
                content: String::new(),
                is_error: call.is_error,
                exit_code: call.exit_code,
                spend: Default::default(),
            };
            self.snap.tally.record(&call.name, &call.input, &outcome);
            self.snap.tool_count += 1;
        }
        if let Some(tokens) = file
            .as_deref()
            .and_then(|f| codex::last_context(&String::from_utf8_lossy(f)))
        {
            self.snap.context_tokens = tokens;
            let budget = self.shared.config.context_budget;
            self.status
                .update(|s| {
                    s.context_tokens = tokens;
                    s.context_pct = crate::context::percent(tokens, budget);
                })
                .await;
        }
        // The turn's tokens (differences of the thread's cumulative usage)
        // and price, where a native Orchestrator's requests go; a turn
        // counts as one request.
        let usage = codex::turn_usage(&done.usage, &before);
        let model = &self.shared.config.model.model;
        let cost = self.shared.config.prices.cost(model, &usage);
        self.snap.spend.record(
            Some([
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_creation_input_tokens,
                usage.cache_read_input_tokens,
            ]),
            cost,
        );
        self.snap.cost.add_turn(
            &json!({
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
            }),
            &json!({ model.clone(): {"cumulative": done.usage} }),
            cost.map_or(0.0, |nanos| nanos as f64 / 1e9),
        );
        let spend = self.snap.spend;
        self.status.update(|s| s.spend = spend).await;
        let (text, parsed) = match done.text {
            Some(text) => {
                let parsed =
                    structured::parse_with::<OrchestratorOutput>(&text, &self.shared.output_schema)
                        .and_then(|output| self.check_handoff(output));
                (text, parsed)
            }
            None => (
                String::new(),
                Err("the turn ended without a final message".to_owned()),
            ),
        };
        self.transcript.push(Message {
            role: MessageRole::Assistant,
            content: vec![Block::Text { text }],
        });
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
