//! The Orchestrator's agent loop: model call, tool calls, results, … until
//! the model ends its turn with an `OrchestratorOutput`; then wait for the
//! Arbiter (`expects_response: true`) or keep working (a note, up to the
//! configured number in a row). Context use is measured after every model
//! call; past 70 % and 85 % the next request carries a warning. Status is
//! published after every step.
//!
//! Every step is stored (see `state.rs`) before its effects: a model reply
//! before its tool calls run, each tool result before the next model call,
//! an output before it is published. Inputs are read from the stream past
//! the stored `in_seq`, so one taken but not stored is read again.
//! So a worker that takes the Orchestrator over goes on from the last stored
//! step: a tool whose result was stored never runs again, a model call whose
//! reply was not stored may.

use std::sync::Arc;

use arbiter_bus::seq::Gaps;
use arbiter_llm::structured;
use arbiter_llm::{Block, Message, MessageRole, Request, Response, StopReason};
use arbiter_protocol::{
    FileChanges, OrchestratorEvent, OrchestratorFailed, OrchestratorMessage, OrchestratorOutput,
    OrchestratorState, Role, WireError,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Shared;
use crate::context;
use crate::evidence::Baseline;
use crate::inputs::Input;
use crate::outbox::Outbox;
use crate::runtime::Runtime;
use crate::runtime::claude::ClaudeProcess;
use crate::slots::Seat;
use crate::state::{EndReason, Phase, Snapshot, StateStore};
use crate::status::StatusHandle;
use crate::stop::Stopper;
use crate::subagent;
use crate::tools::task::{self, TaskInput};
use crate::tools::{self, ToolContext, ToolOutcome};
use crate::transcript::Transcript;
use arbiter_bus::steplog::AppendError;

mod approval;
mod budget;
mod cli;
mod codex;
mod output;
mod repeats;
mod waiting;
mod window;

pub(crate) use repeats::Repeats;
pub use repeats::{
    DEFAULT_REPEAT_STOP, DEFAULT_REPEAT_WARN, DEFAULT_STALE_STOP, DEFAULT_STALE_WARN,
};

use waiting::until;

/// Inputs held ahead of their turn, at most; more are terminated at once.
const MAX_INPUTS_AHEAD: usize = 64;
/// How long the end-of-life rollup of an Orchestrator's records may take.
const ROLLUP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why an agent loop ended.
pub(crate) enum Stop {
    /// Its stop token fired: see the [`Stopper`]'s cause.
    Interrupted,
    /// A record could not be stored: another worker holds the lease now.
    Fenced,
    /// It failed; the failure is stored and its `failed` event published.
    Failed,
}

/// Where an agent starts from: a fresh brief or restored records.
pub(crate) struct Start {
    pub transcript: Vec<arbiter_llm::Message>,
    pub snapshot: Snapshot,
    pub store: StateStore,
    /// The slot it starts in.
    pub seat: Seat,
    /// The workspace walk its outputs' evidence compares against.
    pub baseline: Baseline,
    /// The CLI's session transcript as stored (claude-code runtime).
    pub cli_transcript: Option<String>,
    /// The workspace's checkpoints, or why there are none (`checkpoint.rs`).
    pub checkpoints: Result<crate::checkpoint::Checkpoints, String>,
}

pub(crate) struct Agent {
    shared: Arc<Shared>,
    ctx: ToolContext,
    stopper: Stopper,
    system: String,
    /// The workspace's checkpoints, or why there are none; whether that
    /// was said yet (on the first output).
    checkpoints: Result<crate::checkpoint::Checkpoints, String>,
    no_checkpoint_said: bool,
    /// The tools every model call offers (native runtime).
    tools: Arc<[arbiter_llm::ToolSpec]>,
    transcript: Transcript,
    snap: Snapshot,
    /// The snapshot of the last stored record.
    stored: Snapshot,
    store: StateStore,
    inputs: mpsc::Receiver<Input>,
    /// Text blocks put into the transcript from inputs since the last record.
    input_blocks: usize,
    /// Inputs that came ahead of their turn (a `seq` past the next one),
    /// held until the input before them arrives or the wait runs out.
    ahead: Gaps<Input>,
    /// Its slot, given back while it is parked.
    seat: Seat,
    status: StatusHandle,
    outbox: Outbox,
    baseline: Baseline,
    /// The output cap of the next call, when a cut-off reply raised it.
    cap: Option<u64>,
    /// A reply of this turn was cut off and the cap raised already.
    grown: bool,
    /// The last model call measured: the transcript's length when it was
    /// sent, and its input tokens as the usage reported them (see
    /// `agent/window.rs`).
    measured: Option<(usize, u64)>,
    /// It handed off at the edge of its context window already.
    at_edge: bool,
    /// The Claude Code runtime's CLI process, once started.
    cli: Option<ClaudeProcess>,
    /// The CLI's session transcript as restored from the records, until the
    /// CLI is started from it.
    cli_restored: Option<String>,
    /// Bytes of the CLI's transcript file stored in the records so far.
    cli_stored: usize,
    /// The span of the turn in flight, from the input that started it to
    /// the output that ends it (none while it waits).
    turn: tracing::Span,
    /// The model is to be told, with its next request, that it used 80 %
    /// of its allowance (see `agent/budget.rs`).
    budget_warning: Option<String>,
    /// The model call started on an input's wake-up, before the input was
    /// read from the stream (see `agent/waiting.rs`).
    foreseen: Option<Foreseen>,
    /// The files of the last output's evidence, and the tool calls made by
    /// then: an output with no tool call since (native runtime) shows them
    /// again instead of walking the workspace (see [`Agent::files_changed`]).
    files_seen: Option<(u32, FileChanges)>,
}

/// A model call started on an input seen only on its wake-up (a hint, see
/// `inputs.rs`), so that the stream read is not on the way from the
/// Arbiter's words to the model. The turn takes its reply only when the
/// request it makes itself, from what it read from the stream, is this
/// one; otherwise the call is aborted unanswered. So what the Orchestrator
/// stores and does never rests on a message the server did not store.
struct Foreseen {
    /// The input it was started on: its number and text.
    seq: u64,
    text: String,
    /// It began the turn's span (parented on the wake-up's trace context).
    began_turn: bool,
    request: Request,
    /// Aborted when dropped.
    call: tokio_util::task::AbortOnDropHandle<Result<Response, arbiter_llm::LlmError>>,
    /// Counted as taken or dropped (`arbiter.model.early_calls`).
    counted: arbiter_bus::metrics::EarlyCall,
}

impl Foreseen {
    async fn finish(mut self) -> Result<Response, arbiter_llm::LlmError> {
        self.counted.adopt();
        match self.call.await {
            Ok(result) => result,
            Err(e) => Err(arbiter_llm::LlmError::Stream(format!(
                "the model call's task stopped: {e}"
            ))),
        }
    }
}

impl Agent {
    pub(crate) fn new(
        shared: Arc<Shared>,
        ctx: ToolContext,
        stopper: Stopper,
        start: Start,
        inputs: mpsc::Receiver<Input>,
        status: StatusHandle,
        outbox: Outbox,
    ) -> Self {
        // The native runtime's tools, then its MCP servers'.
        let tools: Arc<[arbiter_llm::ToolSpec]> = if ctx.mcp.specs().is_empty() {
            shared.tools.clone()
        } else {
            shared
                .tools
                .iter()
                .chain(ctx.mcp.specs())
                .cloned()
                .collect()
        };
        let names: Vec<&str> = match shared.config.runtime {
            Runtime::Native => tools.iter().map(|t| t.name.as_str()).collect(),
            Runtime::ClaudeCode => crate::runtime::claude::TOOLS.to_vec(),
            Runtime::Codex => crate::runtime::codex::TOOLS.to_vec(),
        };
        let system = match shared.config.model.profile {
            arbiter_llm::Profile::Small if shared.config.runtime == Runtime::Native => {
                crate::prompt::orchestrator_small_prompt(&names)
            }
            _ => crate::prompt::orchestrator_system_prompt(&names),
        };
        let system = crate::prompt::with_mcp_failures(system, ctx.mcp.failures());
        let ahead = Gaps::new(shared.config.input_gap_wait, MAX_INPUTS_AHEAD);
        Self {
            shared,
            ctx,
            stopper,
            system,
            checkpoints: start.checkpoints,
            no_checkpoint_said: false,
            tools,
            transcript: Transcript::stored(start.transcript),
            stored: start.snapshot.clone(),
            snap: start.snapshot,
            store: start.store,
            inputs,
            input_blocks: 0,
            ahead,
            seat: start.seat,
            status,
            outbox,
            baseline: start.baseline,
            cap: None,
            grown: false,
            measured: None,
            at_edge: false,
            cli_stored: start.cli_transcript.as_ref().map_or(0, String::len),
            cli_restored: start.cli_transcript,
            cli: None,
            turn: tracing::Span::none(),
            budget_warning: None,
            foreseen: None,
            files_seen: None,
        }
    }

    /// Starts the span of a turn, the child of the message that started it
    /// (the summons, or the Arbiter's input), unless one is in flight.
    pub(crate) fn begin_turn(&mut self, parent: &arbiter_bus::TraceContext) {
        if !self.turn.is_none() || matches!(self.snap.phase, Phase::Ended { .. }) {
            return;
        }
        let status = self.status.get();
        let span = tracing::info_span!(
            parent: None,
            "invoke_agent",
            otel.name = "invoke_agent orchestrator",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "orchestrator",
            gen_ai.agent.id = %status.orch_id,
            session.id = %status.session_id,
        );
        parent.adopt(&span);
        self.turn = span;
    }

    /// Ends the span of the turn in flight.
    fn end_turn(&mut self) {
        self.turn = tracing::Span::none();
    }

    /// The warning for the model's next request, if context use calls for one.
    fn warning(&self) -> Option<String> {
        context::orchestrator_warning(self.status.get().context_pct)
    }

    /// Runs steps until stopped, fenced or failed.
    pub(crate) async fn run(&mut self) -> Stop {
        loop {
            let step = match self.snap.phase {
                Phase::Waiting => self.wait().await,
                Phase::Working => self.work().await,
                Phase::Ended { .. } => return Stop::Failed,
            };
            if let Err(stop) = step {
                return stop;
            }
        }
    }

    /// Stores the end (released or cancelled). `Err` when it could not be:
    /// fenced, or `until` fired.
    pub(crate) async fn end(
        &mut self,
        reason: EndReason,
        until: &CancellationToken,
    ) -> Result<(), AppendError> {
        self.snap.phase = Phase::Ended { reason };
        self.commit(Vec::new(), until).await
    }

    /// Once its end is stored: its work handed over as a branch, when its
    /// workspace has checkpoints (docs/checkpoints.md), and the branch put
    /// in its status, whose `stopped` the human reads it in. What goes
    /// wrong is logged; the end stands either way.
    pub(crate) async fn hand_over(&mut self) {
        let Ok(checkpoints) = &self.checkpoints else {
            return;
        };
        let generation = crate::checkpoint::Generation {
            report: self.snap.report.as_deref(),
            handoff: self.snap.handoff.as_deref(),
        };
        match checkpoints
            .hand_over(generation, &self.shared.config.hand_over)
            .await
        {
            Ok(Some(branch)) => {
                match &branch.problem {
                    Some(problem) => {
                        tracing::warn!(branch = %branch.name, commit = %branch.commit, %problem, "work handed over as a branch, with a problem")
                    }
                    None => {
                        tracing::info!(branch = %branch.name, commit = %branch.commit, files = branch.files, pushed_to = ?branch.pushed_to, pull_request = ?branch.pull_request, "work handed over as a branch")
                    }
                }
                self.status.note(|s| s.branch = Some(branch));
            }
            Ok(None) => tracing::info!("the Orchestrator changed nothing: no branch"),
            Err(e) => tracing::warn!(error = %e, "the work could not be handed over as a branch"),
        }
    }

    /// Once its end is stored: its records rolled up into one snapshot
    /// (docs/protocol.md, Orchestrator state and leases). Bounded in time;
    /// a rollup not stored leaves the records as they were.
    pub(crate) async fn roll_up(&mut self) {
        let until = CancellationToken::new();
        let transcript = self.transcript.messages().to_vec();
        let rolled = tokio::time::timeout(
            ROLLUP_WAIT,
            self.store.roll_up(transcript, &self.snap, &until),
        )
        .await;
        until.cancel();
        match rolled {
            Ok(Ok(true)) => tracing::debug!("ended Orchestrator's records rolled up"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(?e, "ended Orchestrator's records not rolled up"),
            Err(_) => tracing::warn!("ended Orchestrator's records not rolled up in time"),
        }
    }

    /// Frees its slot (or its place among the parked): it runs no more here.
    pub(crate) fn leave_seat(&mut self) {
        self.seat.leave();
    }

    /// One step of work, on this worker's runtime.
    async fn work(&mut self) -> Result<(), Stop> {
        match self.shared.config.runtime {
            Runtime::Native => self.work_native().await,
            Runtime::ClaudeCode => self.work_cli().await,
            Runtime::Codex => self.work_codex().await,
        }
    }

    /// Ends the runtime's process, if it has one.
    pub(crate) async fn close_runtime(&mut self) {
        if let Some(process) = self.cli.take() {
            process.close().await;
        }
        // Its MCP servers' connections (a stdio server's process ends).
        if let Ok(servers) = Arc::try_unwrap(std::mem::take(&mut self.ctx.mcp)) {
            servers.close().await;
        }
    }

    /// One step of the native loop: answer the last reply's tool calls, else call the model.
    async fn work_native(&mut self) -> Result<(), Stop> {
        let pending = self.transcript.unanswered();
        if !pending.is_empty() {
            return self.run_tools(pending).await;
        }
        self.take_inputs().await?;
        self.status
            .update(|s| {
                s.state = OrchestratorState::Working;
                s.current_tool = None;
            })
            .await;
        // Stored before the call, so whoever goes on makes the same call;
        // unless all that is new is inputs taken, which whoever goes on
        // reads again from the stream (past the stored `in_seq`).
        if (self.snap != self.stored || !self.transcript.unstored().is_empty())
            && !self.only_inputs_unstored()
        {
            self.step(Vec::new()).await?;
        }
        if let Some(error) = self.over_budget() {
            return self.fail(error).await;
        }
        if !self.fit_window().await? {
            return Ok(());
        }
        let response = match self.call_model().await? {
            Ok(response) => response,
            Err(WireError::Model {
                class: arbiter_protocol::ModelErrorKind::ContextExceeded,
                message,
                ..
            }) => return self.hand_off_at_edge(window::Edge::Refused(message)).await,
            Err(error) => return self.fail(error).await,
        };
        let has_tools = response.tool_uses().next().is_some();
        if response.stop_reason == StopReason::MaxTokens && !has_tools && !self.grown {
            // Cut off at its cap: the same call with a larger cap, once.
            self.grown = true;
            let asked = Request {
                max_output_tokens: self.cap,
                ..Request::default()
            };
            let prompt = response.context_tokens();
            if let Some(cap) =
                arbiter_llm::larger_output_cap(self.shared.model.as_ref(), &asked, prompt).await
            {
                tracing::warn!(
                    cap,
                    "reply cut off at its output cap; asking again with a larger one"
                );
                self.cap = Some(cap);
                return Ok(());
            }
        } else if response.stop_reason != StopReason::MaxTokens {
            self.grown = false;
            self.cap = None;
        }
        self.transcript.push(Message {
            role: MessageRole::Assistant,
            content: response.content.clone(),
        });
        // The reply is measured too: its output tokens, not an estimate of
        // its text (agent/window.rs).
        if let (Some((_, input)), Some(usage)) = (self.measured, response.usage) {
            self.measured = Some((
                self.transcript.messages().len(),
                input + usage.output_tokens,
            ));
        }
        if has_tools {
            // Stored before any tool runs: a worker that lost its lease runs none.
            return self.step(Vec::new()).await;
        }
        let parsed = match structured::cut_short(&response.stop_reason) {
            Some(detail) => Err(detail.to_owned()),
            None => structured::parse_with::<OrchestratorOutput>(
                &response.text(),
                &self.shared.output_schema,
            )
            .and_then(|output| self.check_handoff(output)),
        };
        self.take_output(parsed).await
    }

    /// A turn's output, whichever runtime produced it: a valid one goes
    /// out; an invalid one is asked again while repairs remain, and then
    /// the Orchestrator fails with `schema_violation`.
    pub(super) async fn take_output(
        &mut self,
        parsed: Result<OrchestratorOutput, String>,
    ) -> Result<(), Stop> {
        match parsed {
            Ok(output) => self.output(output).await,
            Err(detail) if self.snap.repairs < self.shared.config.schema_repairs => {
                tracing::warn!(%detail, "Orchestrator reply rejected; asking again");
                self.snap.repairs += 1;
                self.transcript
                    .push(Message::user(structured::repair_message(&detail)));
                self.step(Vec::new()).await
            }
            Err(detail) => {
                let error = WireError::SchemaViolation {
                    role: Role::Orchestrator,
                    attempts: self.snap.repairs + 1,
                    detail,
                };
                self.fail(error).await
            }
        }
    }

    /// What the schema cannot say of a valid output: past the critical
    /// threshold every output carries a handoff packet, and a packet's ids
    /// and next step make sense. The error goes back for repair.
    pub(super) fn check_handoff(
        &self,
        output: OrchestratorOutput,
    ) -> Result<OrchestratorOutput, String> {
        let pct = self.status.get().context_pct;
        match &output.handoff {
            Some(packet) => packet.check().map(|()| output),
            None if pct >= context::CRITICAL_PCT => Err(format!(
                "{pct:.0}% of your context is used, so this reply must carry your `handoff` \
                 packet (done, open, decisions, questions, next_step) for the next Orchestrator"
            )),
            None => Ok(output),
        }
    }

    /// Runs the tool calls that have no stored result, storing each result
    /// as it comes. A call made too many times in a row is not run: the
    /// work stops there and the Arbiter is told (`agent/repeats.rs`).
    async fn run_tools(&mut self, calls: Vec<(String, String, Value)>) -> Result<(), Stop> {
        let last = calls.len() - 1;
        let mut calls = calls.into_iter().enumerate();
        while let Some((i, (id, name, input))) = calls.next() {
            let limits = (
                self.shared.config.repeat_warn,
                self.shared.config.repeat_stop,
            );
            // Normalised once: the arguments may be a whole file's content.
            let call_key = repeats::normalised(&name, &input);
            // A call that waits for approval from before a takeover was
            // counted in the snapshot stored when it asked.
            let resumed = self.snap.approval.as_ref().is_some_and(|p| p.call_id == id);
            let repeated = if resumed {
                repeats::Verdict::Run
            } else {
                self.snap.repeats.see(&call_key, limits.0, limits.1)
            };
            if let repeats::Verdict::Stop(report) = repeated {
                tracing::warn!(tool = %name, "the same tool call too many times in a row: work stopped");
                // Neither it nor the reply's calls after it run.
                let ids = std::iter::once(id).chain(calls.by_ref().map(|(_, (id, _, _))| id));
                self.transcript.push_user(not_run(ids));
                return self.report_circling(report).await;
            }
            // The policy's word (`agent/approval.rs`): it may wait for the human's.
            let refused = self.gate(&id, &name, &input).await?;
            let ran = refused.is_none();
            let current_tool = ran.then(|| tools::display_name(&name));
            self.status
                .update(|s| {
                    s.state = OrchestratorState::Working;
                    s.current_tool = current_tool;
                    s.tool_count += 1;
                })
                .await;
            let outcome = match refused {
                Some(refusal) => refusal,
                None => {
                    let span = tools::span(&self.turn, &name, &id);
                    let call = self
                        .tool(name.clone(), input.clone())
                        .instrument(span.clone());
                    let outcome = self.during(call).await?;
                    tools::record(&span, &outcome);
                    arbiter_bus::metrics::tool_call(&name, outcome.is_error);
                    outcome
                }
            };
            // Answered: nothing waits any more (stored with the result).
            self.snap.approval = None;
            let before = self.snap.spend;
            self.snap.spend = self.snap.spend.plus(&outcome.spend);
            self.note_budget(&before);
            let spend = self.snap.spend;
            self.status.update(|s| s.spend = spend).await;
            if ran {
                // A call refused did not run: the evidence does not show it.
                self.snap.tally.record(&name, &input, &outcome);
            }
            let limits = (self.shared.config.stale_warn, self.shared.config.stale_stop);
            let stale = self
                .snap
                .repeats
                .ran(&call_key, &outcome.content, limits.0, limits.1);
            // A call refused by the policy is not the model's failure.
            let failing = if ran {
                self.snap.repeats.failed(&call_key, outcome.is_error)
            } else {
                repeats::Verdict::Run
            };
            // One stop is enough: the circle's, else the failures'.
            let (stale, failing) = match (stale, failing) {
                (stop @ repeats::Verdict::Stop(_), failing) => (stop, failing),
                (_, repeats::Verdict::Stop(report)) => {
                    (repeats::Verdict::Stop(report), repeats::Verdict::Run)
                }
                pair => pair,
            };
            let mut blocks = vec![Block::ToolResult {
                tool_use_id: id,
                content: outcome.content,
                is_error: outcome.is_error,
            }];
            for verdict in [&repeated, &stale, &failing] {
                if let repeats::Verdict::Warn(warning) = verdict {
                    blocks.push(Block::Text {
                        text: warning.clone(),
                    });
                }
            }
            if let repeats::Verdict::Stop(report) = stale {
                tracing::warn!(
                    "tool calls that brought nothing new, or failed, too many in a row: work stopped"
                );
                blocks.extend(not_run(calls.by_ref().map(|(_, (id, _, _))| id)));
                self.transcript.push_user(blocks);
                self.snap.tool_count += 1;
                return self.report_circling(report).await;
            }
            if i == last
                && let Some(warning) = self.warning()
            {
                blocks.push(Block::Text { text: warning });
            }
            if i == last
                && let Some(warning) = self.budget_warning.take()
            {
                blocks.push(Block::Text { text: warning });
            }
            self.transcript.push_user(blocks);
            self.snap.tool_count += 1;
            self.step(Vec::new()).await?;
        }
        Ok(())
    }

    /// Ends the Orchestrator with `error`: stored, then published.
    async fn fail(&mut self, error: WireError) -> Result<(), Stop> {
        tracing::error!(%error, "Orchestrator failed");
        self.snap.out_seq += 1;
        self.snap.phase = Phase::Ended {
            reason: EndReason::Failed,
        };
        let mut message = self.outbox.message(
            self.snap.out_seq,
            OrchestratorEvent::Failed(OrchestratorFailed { error }),
            None,
        );
        message.spend = Some(self.snap.spend);
        self.step(vec![message]).await?;
        self.end_turn();
        Err(Stop::Failed)
    }

    /// Whether everything not stored yet is inputs taken: the stored state
    /// with a later `in_seq` (its inbox and phase aside), and a transcript
    /// that grew by the inputs' text only.
    fn only_inputs_unstored(&self) -> bool {
        let mut probe = self.snap.clone();
        probe.in_seq = self.stored.in_seq;
        probe.phase = self.stored.phase;
        probe.inbox.clone_from(&self.stored.inbox);
        if probe != self.stored || self.input_blocks == 0 {
            return false;
        }
        let unstored = self.transcript.unstored();
        let all_text = unstored.iter().all(|m| {
            m.role == MessageRole::User && m.content.iter().all(|b| matches!(b, Block::Text { .. }))
        });
        let blocks: usize = unstored.iter().map(|m| m.content.len()).sum();
        all_text && blocks == self.input_blocks
    }

    /// Stores a step while running (given up on if the Orchestrator stops).
    async fn step(&mut self, outbox: Vec<OrchestratorMessage>) -> Result<(), Stop> {
        let until = self.stopper.token().clone();
        self.commit(outbox, &until).await.map_err(|e| match e {
            AppendError::Fenced => Stop::Fenced,
            AppendError::Stopped => Stop::Interrupted,
        })
    }

    /// Stores what changed: with outputs, the stored record is them (see
    /// `state.rs`).
    async fn commit(
        &mut self,
        outbox: Vec<OrchestratorMessage>,
        until: &CancellationToken,
    ) -> Result<(), AppendError> {
        let append = self.transcript.unstored();
        // Outputs go with the turn's context; the record is them.
        let trace = arbiter_bus::TraceContext::of(&self.turn);
        self.store.trace_with(trace);
        self.store.write(append, &self.snap, outbox, until).await?;
        self.transcript.mark_stored();
        self.input_blocks = 0;
        self.stored = self.snap.clone();
        Ok(())
    }

    /// Runs `work` while taking the inputs that arrive meanwhile (into the
    /// stored inbox).
    async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, Stop> {
        tokio::pin!(work);
        let stop = self.stopper.token().clone();
        let mut open = true;
        loop {
            let gap = self.ahead.deadline();
            tokio::select! {
                () = stop.cancelled() => return Err(Stop::Interrupted),
                out = &mut work => return Ok(out),
                input = self.inputs.recv(), if open => match input {
                    Some(input) => {
                        self.receive(input, false).await?;
                    }
                    None => open = false,
                },
                () = until(gap), if gap.is_some() => self.expire_ahead().await,
            }
        }
    }

    /// One tool call, as a future that borrows nothing of the agent: `task`
    /// starts a subagent, the rest are basic tools.
    fn tool(&self, name: String, input: Value) -> impl Future<Output = ToolOutcome> + use<> {
        let shared = self.shared.clone();
        let ctx = self.ctx.clone();
        let status = self.status.clone();
        let allowance = self.subagent_allowance();
        // A subagent's calls are held to the same policy.
        let layers = self.snap.layers.clone();
        async move {
            if name != task::NAME {
                return tools::run(&ctx, &name, &input).await;
            }
            match tools::parse::<TaskInput>(&name, &input) {
                Ok(task) => {
                    let span = tracing::info_span!(
                        "invoke_agent",
                        otel.name = "invoke_agent subagent",
                        gen_ai.operation.name = "invoke_agent",
                        gen_ai.agent.name = "subagent",
                    );
                    subagent::run(
                        &shared.subagent,
                        &ctx,
                        task,
                        &status,
                        subagent::Limits {
                            allowance,
                            layers: layers.as_ref(),
                        },
                    )
                    .instrument(span)
                    .await
                }
                Err(error) => error,
            }
        }
    }

    /// Drops a call started on a wake-up that showed another input than
    /// `input` (read from the stream), and the turn span it began, so that
    /// the turn is traced under the input it takes.
    pub(super) fn forget_foreseen_unless(&mut self, input: &Input) {
        let Some(foreseen) = &self.foreseen else {
            return;
        };
        if foreseen.seq == input.seq && foreseen.text == input.text {
            return;
        }
        tracing::debug!(
            seq = input.seq,
            "a model call started on a wake-up showed another input: aborted unanswered"
        );
        if foreseen.began_turn {
            self.end_turn();
        }
        self.foreseen = None;
    }

    /// The request of a model call on `messages`.
    fn request(&self, messages: Arc<Vec<Message>>) -> Request {
        Request {
            system: self.system.clone(),
            messages,
            tools: self.tools.clone(),
            output_schema: Some(self.shared.output_schema.clone()),
            max_output_tokens: self.cap,
        }
    }

    /// Starts the model call that taking `hint` (the next input, seen on
    /// its wake-up) would make at once, when nothing else would come first:
    /// the native runtime, seated, nothing in the inbox, and within its
    /// allowance (the input's, when it carries one). See [`Foreseen`].
    fn foresee(&mut self, hint: Input) {
        let next = hint.seq == self.snap.in_seq.saturating_add(1);
        if !next
            || !matches!(self.shared.config.runtime, Runtime::Native)
            || self.seat.is_parked()
            || !self.snap.inbox.is_empty()
            || hint
                .budget
                .or(self.snap.budget)
                .is_some_and(|cap| cap.reached(&self.snap.spend).is_some())
            || !self.transcript.unanswered().is_empty()
        {
            return;
        }
        let mut transcript = self.transcript.clone();
        transcript.push_user(vec![Block::Text {
            text: hint.text.clone(),
        }]);
        let request = self.request(transcript.shared());
        let began_turn = self.turn.is_none();
        self.begin_turn(&hint.trace);
        let model = self.shared.model.clone();
        let call = {
            let request = request.clone();
            async move { model.complete(request).await }.instrument(self.turn.clone())
        };
        self.foreseen = Some(Foreseen {
            seq: hint.seq,
            text: hint.text,
            began_turn,
            request,
            call: tokio_util::task::AbortOnDropHandle::new(tokio::spawn(call)),
            counted: arbiter_bus::metrics::EarlyCall::new("orchestrator"),
        });
    }

    /// One model call: `Err` when stopped, `Ok(Err(_))` when it failed for good.
    async fn call_model(&mut self) -> Result<Result<Response, WireError>, Stop> {
        let request = self.request(self.transcript.shared());
        let sent = request.messages.len();
        let foreseen = match self.foreseen.take() {
            Some(foreseen) if foreseen.request == request => Some(foreseen),
            Some(_) => {
                tracing::debug!(
                    "a model call started on a wake-up was not this turn's: aborted unanswered"
                );
                None
            }
            None => None,
        };
        let model = self.shared.model.clone();
        let call = async move {
            match foreseen {
                Some(foreseen) => foreseen.finish().await,
                None => model.complete(request).await,
            }
        }
        .instrument(self.turn.clone());
        let response = self.during(call).await?;
        let response = match response {
            Ok(response) => response,
            Err(e) => return Ok(Err(e.to_wire(Role::Orchestrator))),
        };
        let model = &self.shared.config.model.model;
        let before = self.snap.spend;
        self.shared
            .config
            .prices
            .charge(&mut self.snap.spend, model, response.usage.as_ref());
        self.note_budget(&before);
        let spend = self.snap.spend;
        let tokens = context::tokens_of(&response);
        if let Some(tokens) = tokens {
            self.snap.context_tokens = tokens;
            self.measured = Some((sent, tokens));
        }
        let budget = self.shared.config.context_budget;
        // Not published on its own: what the reply leads to (a tool, an
        // output and the wait, a repair) changes the state at once and
        // publishes it with these, one message fewer on the way to the
        // output.
        self.status.note(|s| {
            s.spend = spend;
            if let Some(tokens) = tokens {
                s.context_tokens = tokens;
                s.context_pct = context::percent(tokens, budget);
            }
        });
        Ok(Ok(response))
    }
}

/// The results of tool calls not run because the work stopped on a circle.
fn not_run(ids: impl Iterator<Item = String>) -> Vec<Block> {
    ids.map(|id| Block::ToolResult {
        tool_use_id: id,
        content: "Not run: your work is stopped, as it went round in circles, and the \
                  Arbiter is told."
            .to_owned(),
        is_error: true,
    })
    .collect()
}
