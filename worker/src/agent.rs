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
//!
//! This file and the runtime drivers beside it (`waiting`, `cli`, `codex`)
//! are the shell: they run the I/O (the model, tools, the records, status,
//! the workspace's files and checkpoints) that the decisions of
//! [`core::Core`] (`agent/core.rs` and `agent/core/`, no I/O) ask for,
//! and hand back what it brought. The one place a step is stored is
//! [`Agent::commit`].

use std::sync::Arc;

use arbiter_bus::seq::Gaps;
use arbiter_llm::{Request, Response};
use arbiter_protocol::{FileChanges, OrchestratorMessage, OrchestratorState, WireError};
use chrono::Utc;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Shared;
use crate::evidence::{self, Baseline};
use crate::inputs::Input;
use crate::runtime::Runtime;
use crate::runtime::claude::ClaudeProcess;
use crate::slots::Seat;
use crate::state::{EndReason, Phase, Snapshot, StateStore};
use crate::status::StatusHandle;
use crate::stop::Stopper;
use crate::subagent;
use crate::tools::task::{self, TaskInput};
use crate::tools::{self, ToolContext, ToolOutcome};
use arbiter_bus::steplog::AppendError;

mod cli;
mod codex;
pub(crate) mod core;
mod waiting;

use self::core::approval::Gate;
pub(crate) use self::core::repeats::Repeats;
pub use self::core::repeats::{
    DEFAULT_REPEAT_STOP, DEFAULT_REPEAT_WARN, DEFAULT_STALE_STOP, DEFAULT_STALE_WARN,
};
use self::core::reply::{CutOff, Replied, Taken};
use self::core::tools::AfterCall;
use self::core::window::{AtEdge, Edge};
use self::core::{Call, Core, Next, Settings};

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

/// The shell of an Orchestrator: its [`Core`] and the I/O its decisions
/// ask for.
pub(crate) struct Agent {
    core: Core,
    shared: Arc<Shared>,
    ctx: ToolContext,
    stopper: Stopper,
    /// The workspace's checkpoints, or why there are none.
    checkpoints: Result<crate::checkpoint::Checkpoints, String>,
    store: StateStore,
    inputs: mpsc::Receiver<Input>,
    /// Inputs that came ahead of their turn (a `seq` past the next one),
    /// held until the input before them arrives or the wait runs out.
    ahead: Gaps<Input>,
    /// Its slot, given back while it is parked.
    seat: Seat,
    status: StatusHandle,
    baseline: Baseline,
    /// A CLI runtime's process and session file (`agent/cli.rs`, `agent/codex.rs`).
    cli: CliState,
    /// The span of the turn in flight, from the input that started it to
    /// the output that ends it (none while it waits).
    turn: tracing::Span,
    /// The model call started on an input's wake-up, before the input was
    /// read from the stream (see `agent/waiting.rs`).
    foreseen: Option<Foreseen>,
}

/// A CLI runtime's side of an Orchestrator.
#[derive(Default)]
struct CliState {
    /// The Claude Code runtime's CLI process, once started.
    process: Option<ClaudeProcess>,
    /// The CLI's session transcript as restored from the records, until the
    /// CLI is started from it.
    restored: Option<String>,
    /// Bytes of the CLI's session file stored in the records so far.
    stored: usize,
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
        let config = &shared.config;
        let names: Vec<&str> = match config.runtime {
            Runtime::Native => tools.iter().map(|t| t.name.as_str()).collect(),
            Runtime::ClaudeCode => crate::runtime::claude::TOOLS.to_vec(),
            Runtime::Codex => crate::runtime::codex::TOOLS.to_vec(),
        };
        let system = match config.model.profile {
            arbiter_llm::Profile::Small if config.runtime == Runtime::Native => {
                crate::prompt::orchestrator_small_prompt(&names)
            }
            _ => crate::prompt::orchestrator_system_prompt(&names),
        };
        let system = crate::prompt::with_mcp_failures(system, ctx.mcp.failures());
        let known = status.get();
        let settings = Settings {
            session_id: known.session_id,
            orch_id: known.orch_id,
            number: known.number,
            runtime: config.runtime,
            system,
            tools,
            output_schema: shared.output_schema.clone(),
            model: config.model.model.clone(),
            prices: config.prices.clone(),
            context_budget: config.context_budget,
            schema_repairs: config.schema_repairs,
            max_consecutive_notes: config.max_consecutive_notes,
            repeat: (config.repeat_warn, config.repeat_stop),
            stale: (config.stale_warn, config.stale_stop),
        };
        let ahead = Gaps::new(config.input_gap_wait, MAX_INPUTS_AHEAD);
        let cli = CliState {
            process: None,
            stored: start.cli_transcript.as_ref().map_or(0, String::len),
            restored: start.cli_transcript,
        };
        Self {
            core: Core::new(settings, start.transcript, start.snapshot),
            shared,
            ctx,
            stopper,
            checkpoints: start.checkpoints,
            store: start.store,
            inputs,
            ahead,
            seat: start.seat,
            status,
            baseline: start.baseline,
            cli,
            turn: tracing::Span::none(),
            foreseen: None,
        }
    }

    /// Starts the span of a turn, the child of the message that started it
    /// (the summons, or the Arbiter's input), unless one is in flight.
    pub(crate) fn begin_turn(&mut self, parent: &arbiter_bus::TraceContext) {
        if !self.turn.is_none() || matches!(self.core.snap.phase, Phase::Ended { .. }) {
            return;
        }
        let span = tracing::info_span!(
            parent: None,
            "invoke_agent",
            otel.name = "invoke_agent orchestrator",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "orchestrator",
            gen_ai.agent.id = %self.core.settings.orch_id,
            session.id = %self.core.settings.session_id,
        );
        parent.adopt(&span);
        self.turn = span;
    }

    /// Ends the span of the turn in flight.
    fn end_turn(&mut self) {
        self.turn = tracing::Span::none();
    }

    /// Runs steps until stopped, fenced or failed.
    pub(crate) async fn run(&mut self) -> Stop {
        loop {
            let step = match self.core.snap.phase {
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
        self.core.snap.phase = Phase::Ended { reason };
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
            report: self.core.snap.report.as_deref(),
            handoff: self.core.snap.handoff.as_deref(),
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
        let transcript = self.core.transcript.messages().to_vec();
        let rolled = tokio::time::timeout(
            ROLLUP_WAIT,
            self.store.roll_up(transcript, &self.core.snap, &until),
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
        if let Some(process) = self.cli.process.take() {
            process.close().await;
        }
        // Its MCP servers' connections (a stdio server's process ends).
        if let Ok(servers) = Arc::try_unwrap(std::mem::take(&mut self.ctx.mcp)) {
            servers.close().await;
        }
    }

    /// Says in the status that it is at work, no tool running.
    async fn working(&self) {
        self.status
            .update(|s| {
                s.state = OrchestratorState::Working;
                s.current_tool = None;
            })
            .await;
    }

    /// One step of the native loop, as the core decides it: answer the
    /// last reply's tool calls, else call the model.
    async fn work_native(&mut self) -> Result<(), Stop> {
        if let Next::RunTools(calls) = self.core.next() {
            return self.run_tools(calls).await;
        }
        self.take_inputs().await?;
        self.working().await;
        if self.core.store_before_call() {
            self.step(Vec::new()).await?;
        }
        if let Some(error) = self.core.over_budget() {
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
            }) => return self.hand_off_at_edge(Edge::Refused(message)).await,
            Err(error) => return self.fail(error).await,
        };
        if let Some(CutOff { prompt }) = self.core.cut_off(&response) {
            // Cut off at its cap: the same call with a larger cap, once.
            let asked = Request {
                max_output_tokens: self.core.cap,
                ..Request::default()
            };
            if let Some(cap) =
                arbiter_llm::larger_output_cap(self.shared.model.as_ref(), &asked, prompt).await
            {
                tracing::warn!(
                    cap,
                    "reply cut off at its output cap; asking again with a larger one"
                );
                self.core.grow(cap);
                return Ok(());
            }
        }
        match self.core.take_reply(response) {
            Replied::Tools => self.step(Vec::new()).await,
            Replied::Output(parsed) => self.take_output(parsed).await,
        }
    }

    /// A turn's output, whichever runtime produced it, as the core takes it.
    async fn take_output(
        &mut self,
        parsed: Result<arbiter_protocol::OrchestratorOutput, String>,
    ) -> Result<(), Stop> {
        match self.core.take_output(parsed) {
            Taken::Output(output) => self.output(output).await,
            Taken::Repair => self.step(Vec::new()).await,
            Taken::Fail(error) => self.fail(error).await,
        }
    }

    /// A valid output: its evidence made (the workspace's files and a
    /// checkpoint), then stored with the step and published.
    async fn output(&mut self, output: arbiter_protocol::OrchestratorOutput) -> Result<(), Stop> {
        let shaped = self.core.shape(output);
        let files = self.files_changed().await;
        let mut evidence = self.core.snap.tally.evidence(files);
        self.checkpoint(&mut evidence, &shaped.output.message).await;
        let waits = shaped.waits();
        let message = self.core.publish(shaped, evidence, Utc::now());
        let stored = self.step(vec![message]).await;
        if waits {
            // Published with the turn's context; the turn ends with it.
            self.end_turn();
        }
        stored
    }

    /// The workspace as it is with an output, as a checkpoint when it
    /// changed (made before the output is stored, so a takeover finds it),
    /// or why there is none.
    async fn checkpoint(&mut self, evidence: &mut arbiter_protocol::Evidence, message: &str) {
        let checkpoints = match &self.checkpoints {
            Ok(checkpoints) => checkpoints,
            Err(why) => {
                if self.core.say_no_checkpoint() {
                    evidence.no_checkpoint = Some(why.clone());
                }
                return;
            }
        };
        let summary = evidence.summary();
        match checkpoints
            .make_output(self.core.snap.out_seq, message, &summary)
            .await
        {
            Ok(Some(made)) => {
                tracing::info!(commit = %made.commit, git_ref = %made.git_ref, files = made.files, skipped = made.skipped.len(), "checkpoint made");
                evidence.checkpoint = Some(made);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the checkpoint could not be made");
                evidence.no_checkpoint = Some(format!("the checkpoint could not be made: {e}"));
            }
        }
    }

    /// The workspace's files against the baseline, for an output's
    /// evidence. Walking the workspace (up to 20,000 entries, each a `stat`)
    /// is the only file-system work on the way from a reply to its output,
    /// so it is done only when the core does not know them already
    /// ([`Core::files_known`]).
    async fn files_changed(&mut self) -> FileChanges {
        if let Some(files) = self.core.files_known() {
            return files;
        }
        let now = evidence::walk_workspace(self.ctx.workspace.root()).await;
        let files = evidence::diff(&self.baseline, &now);
        self.core.files_walked(&files);
        files
    }

    /// Before a model call: `true` when it may go (its cap perhaps lowered
    /// to fit, `core/window.rs`), `false` when the Orchestrator handed off
    /// at the edge instead.
    async fn fit_window(&mut self) -> Result<bool, Stop> {
        use arbiter_llm::window::{self, Room};
        let model = self.shared.model.clone();
        let mut request = self.core.request();
        match window::fit(model.as_ref(), &mut request, self.core.measured).await {
            Room::Fits(_) => {
                self.core.cap = request.max_output_tokens;
                Ok(true)
            }
            Room::Full { prompt, window } => {
                self.hand_off_at_edge(Edge::Full { prompt, window }).await?;
                Ok(false)
            }
        }
    }

    /// At the edge of the window: the handoff the core decides, its packet
    /// from the workspace when the Orchestrator wrote none.
    async fn hand_off_at_edge(&mut self, edge: Edge) -> Result<(), Stop> {
        let output = match self.core.at_edge(&edge) {
            AtEdge::HandOff(output) => output,
            AtEdge::NeedsFiles => {
                let files = self.files_changed().await;
                Core::hand_off_with(&edge, &files)
            }
            AtEdge::Fail(error) => return self.fail(error).await,
        };
        self.output(output).await
    }

    /// Runs the tool calls that have no stored result, storing each result
    /// as it comes. A call made too many times in a row is not run: the
    /// work stops there and the Arbiter is told (`core/repeats.rs`).
    async fn run_tools(&mut self, calls: Vec<Call>) -> Result<(), Stop> {
        for (i, call) in calls.iter().enumerate() {
            let rest = &calls[i + 1..];
            let cleared = match self.core.clear(call, rest) {
                Ok(cleared) => cleared,
                Err(report) => return self.output(Core::circling(report)).await,
            };
            let (id, name, input) = call;
            // The policy's word (`core/approval.rs`): it may wait for the human's.
            let refused = self.gate(id, name, input).await?;
            let ran = refused.is_none();
            let current_tool = ran.then(|| tools::display_name(name));
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
                    let span = tools::span(&self.turn, name, id);
                    let run = self
                        .tool(name.clone(), input.clone())
                        .instrument(span.clone());
                    let outcome = self.during(run).await?;
                    tools::record(&span, &outcome);
                    arbiter_bus::metrics::tool_call(name, outcome.is_error);
                    outcome
                }
            };
            let after = self.core.called(call, cleared, ran, outcome, rest);
            let spend = self.core.snap.spend;
            self.status.update(|s| s.spend = spend).await;
            match after {
                AfterCall::Store => self.step(Vec::new()).await?,
                AfterCall::Circling(report) => return self.output(Core::circling(report)).await,
            }
        }
        Ok(())
    }

    /// The policy's word on call `id` (`core/approval.rs`): `None` runs it
    /// (allowed, or allowed by the human); `Some` is the error result the
    /// model reads instead. An `ask` is stored, then its answer awaited.
    async fn gate(
        &mut self,
        id: &str,
        name: &str,
        input: &Value,
    ) -> Result<Option<ToolOutcome>, Stop> {
        match self.core.gate(id, name, input, Utc::now()) {
            Gate::Run => return Ok(None),
            Gate::Refused(refusal) => return Ok(Some(refusal)),
            Gate::Ask(request) => self.step(vec![*request]).await?,
            Gate::Await => {}
        }
        self.await_answer(name).await
    }

    /// Ends the Orchestrator with `error`: stored, then published.
    async fn fail(&mut self, error: WireError) -> Result<(), Stop> {
        let message = self.core.fail(error, Utc::now());
        self.step(vec![message]).await?;
        self.end_turn();
        Err(Stop::Failed)
    }

    /// Stores a step while running (given up on if the Orchestrator stops).
    async fn step(&mut self, outbox: Vec<OrchestratorMessage>) -> Result<(), Stop> {
        let until = self.stopper.token().clone();
        self.commit(outbox, &until).await.map_err(|e| match e {
            AppendError::Fenced => Stop::Fenced,
            AppendError::Stopped => Stop::Interrupted,
        })
    }

    /// The one place a step is stored: what changed since the last record
    /// (the transcript's new messages, the snapshot) and the step's
    /// outputs, which are the record (see `state.rs`) and so published by
    /// being stored.
    async fn commit(
        &mut self,
        outbox: Vec<OrchestratorMessage>,
        until: &CancellationToken,
    ) -> Result<(), AppendError> {
        let append = self.core.transcript.unstored();
        // Outputs go with the turn's context; the record is them.
        let trace = arbiter_bus::TraceContext::of(&self.turn);
        self.store.trace_with(trace);
        self.store
            .write(append, &self.core.snap, outbox, until)
            .await?;
        self.core.stored_now();
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
        let allowance = self.core.subagent_allowance();
        // A subagent's calls are held to the same policy.
        let layers = self.core.snap.layers.clone();
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
    fn forget_foreseen_unless(&mut self, input: &Input) {
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

    /// Starts the model call that taking `hint` (the next input, seen on
    /// its wake-up) would make at once, when nothing else would come first:
    /// the native runtime, seated, nothing in the inbox, and within its
    /// allowance (the input's, when it carries one). See [`Foreseen`].
    fn foresee(&mut self, hint: Input) {
        let snap = &self.core.snap;
        let next = hint.seq == snap.in_seq.saturating_add(1);
        if !next
            || !matches!(self.shared.config.runtime, Runtime::Native)
            || self.seat.is_parked()
            || !snap.inbox.is_empty()
            || hint
                .budget
                .or(snap.budget)
                .is_some_and(|cap| cap.reached(&snap.spend).is_some())
            || !self.core.transcript.unanswered().is_empty()
        {
            return;
        }
        let mut transcript = self.core.transcript.clone();
        transcript.push_user(vec![arbiter_llm::Block::Text {
            text: hint.text.clone(),
        }]);
        let request = self.core.request_on(transcript.shared());
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
        let request = self.core.request();
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
        let response = match self.during(call).await? {
            Ok(response) => response,
            Err(e) => return Ok(Err(e.to_wire(arbiter_protocol::Role::Orchestrator))),
        };
        let charged = self.core.charge(sent, &response);
        let budget = self.shared.config.context_budget;
        // Not published on its own: what the reply leads to (a tool, an
        // output and the wait, a repair) changes the state at once and
        // publishes it with these, one message fewer on the way to the
        // output.
        self.status.note(|s| {
            s.spend = charged.spend;
            if let Some(tokens) = charged.tokens {
                s.context_tokens = tokens;
                s.context_pct = crate::context::percent(tokens, budget);
            }
        });
        Ok(Ok(response))
    }
}
