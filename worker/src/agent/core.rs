//! The Orchestrator's core: its state and every decision over it, with no
//! I/O (issue #40, item 7). A [`Core`] holds what an Orchestrator is (its
//! settings, transcript and [`Snapshot`], the snapshot last stored) and
//! decides each step: what the native loop does next ([`Next`]), what a
//! model reply leads to ([`Replied`]), what a tool call's result leads to
//! ([`AfterCall`]), what an output says and stores. Its methods take what
//! the I/O brought (a reply, a tool's outcome, the workspace's files, the
//! time) as arguments; none awaits, spawns, reads the clock or touches the
//! bus, the model, the file system or a process.
//!
//! The shell (`agent.rs` and the runtime drivers beside it) runs the I/O
//! the decisions ask for, in the order that keeps a takeover safe: it
//! stores a step (the transcript's new messages, the snapshot and the
//! step's outputs) before it runs a tool, calls the model on what is stored
//! or on inputs the stream holds, and publishes nothing the records do not
//! hold.
//!
//! Each file in `core/` is one rule: `reply` (a model reply: cut off, tool
//! calls or the final output), `tools` (a tool call before and after it
//! runs: repeats, spend, warnings), `output` (an output: notes, reports,
//! what the model is told after a note, a failure), `window` (the edge of
//! the context window), `budget` (the allowance), `approval` (the policy's
//! word and the human's answer), `inputs` (the Arbiter's words into the
//! transcript), `runtime` (what a CLI runtime's turn leaves) and `repeats`
//! (the counts of circles).

use std::sync::Arc;

use arbiter_llm::{Message, MessageRole, Request, ToolSpec};
use arbiter_protocol::{FileChanges, OrchestratorEvent, OrchestratorMessage, VERSION};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::runtime::Runtime;
use crate::state::Snapshot;
use crate::transcript::Transcript;

pub(crate) mod approval;
pub(crate) mod budget;
pub(crate) mod inputs;
pub(crate) mod output;
pub(crate) mod repeats;
pub(crate) mod reply;
pub(crate) mod runtime;
pub(crate) mod tools;
pub(crate) mod window;

#[cfg(test)]
mod tests;

/// What the core decides with: the Orchestrator's identity and the
/// worker's settings that rule its steps.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub session_id: String,
    pub orch_id: String,
    /// Its number in the session (I, II, …).
    pub number: u32,
    pub runtime: Runtime,
    /// The system prompt of its model calls.
    pub system: String,
    /// The tools its model calls offer (native runtime).
    pub tools: Arc<[ToolSpec]>,
    pub output_schema: Arc<Value>,
    /// The model its calls are priced as, and the prices.
    pub model: String,
    pub prices: arbiter_llm::price::PriceTable,
    /// Tokens of its context window its use is measured against.
    pub context_budget: u64,
    /// Invalid outputs asked again before it fails.
    pub schema_repairs: u32,
    /// Notes in a row before a note goes to the Arbiter as a message.
    pub max_consecutive_notes: u32,
    /// `agent/core/repeats.rs`: the same call in a row (warn, stop), and
    /// calls that brought nothing new (warn, stop).
    pub repeat: (u32, u32),
    pub stale: (u32, u32),
}

/// A tool call of the last model reply: its id, tool and arguments.
pub(crate) type Call = (String, String, Value);

/// What the native loop does next.
#[derive(Debug, PartialEq)]
pub(crate) enum Next {
    /// Run the last reply's tool calls that have no stored result.
    RunTools(Vec<Call>),
    /// Take the inputs waiting, store what is new, then call the model.
    CallModel,
}

pub(crate) struct Core {
    pub(crate) settings: Settings,
    pub(crate) transcript: Transcript,
    pub(crate) snap: Snapshot,
    /// The snapshot of the last stored record.
    pub(crate) stored: Snapshot,
    /// Text blocks put into the transcript from inputs since the last record.
    pub(crate) input_blocks: usize,
    /// The output cap of the next call, when a cut-off reply raised it or
    /// the window lowered it.
    pub(crate) cap: Option<u64>,
    /// A reply of this turn was cut off and the cap raised already.
    grown: bool,
    /// The last model call measured: the transcript's length when it was
    /// sent, and its input tokens as the usage reported them (see
    /// `core/window.rs`).
    pub(crate) measured: Option<(usize, u64)>,
    /// It handed off at the edge of its context window already.
    at_edge: bool,
    /// The model is to be told, with its next request, that it used 80 %
    /// of its allowance (see `core/budget.rs`).
    budget_warning: Option<String>,
    /// The files of the last output's evidence, and the tool calls made by
    /// then: an output with no tool call since (native runtime) shows them
    /// again instead of walking the workspace (see [`Core::files_known`]).
    files_seen: Option<(u32, FileChanges)>,
    /// Why the workspace has no checkpoints was said (with the first output).
    pub(crate) no_checkpoint_said: bool,
}

impl Core {
    pub(crate) fn new(settings: Settings, transcript: Vec<Message>, snapshot: Snapshot) -> Self {
        Self {
            settings,
            transcript: Transcript::stored(transcript),
            stored: snapshot.clone(),
            snap: snapshot,
            input_blocks: 0,
            cap: None,
            grown: false,
            measured: None,
            at_edge: false,
            budget_warning: None,
            files_seen: None,
            no_checkpoint_said: false,
        }
    }

    /// What the native loop does next: answer the last reply's tool
    /// calls, else call the model.
    pub(crate) fn next(&self) -> Next {
        let pending = self.transcript.unanswered();
        if pending.is_empty() {
            Next::CallModel
        } else {
            Next::RunTools(pending)
        }
    }

    /// Something is not stored yet: the snapshot or the transcript changed.
    pub(crate) fn unstored(&self) -> bool {
        self.snap != self.stored || !self.transcript.unstored().is_empty()
    }

    /// Before a model call: whether the step is stored first, so that
    /// whoever goes on makes the same call. Not when all that is new is
    /// inputs taken, which whoever goes on reads again from the stream
    /// (past the stored `in_seq`).
    pub(crate) fn store_before_call(&self) -> bool {
        self.unstored() && !self.only_inputs_unstored()
    }

    /// The step is stored: what it held is the stored state now.
    pub(crate) fn stored_now(&mut self) {
        self.transcript.mark_stored();
        self.input_blocks = 0;
        self.stored = self.snap.clone();
    }

    /// Its context use, in percent of its budget.
    pub(crate) fn context_pct(&self) -> f32 {
        crate::context::percent(self.snap.context_tokens, self.settings.context_budget)
    }

    /// The warning for the model's next request, if context use calls for one.
    pub(crate) fn warning(&self) -> Option<String> {
        crate::context::orchestrator_warning(self.context_pct())
    }

    /// The request of a model call on `messages`.
    pub(crate) fn request_on(&self, messages: Arc<Vec<Message>>) -> Request {
        Request {
            system: self.settings.system.clone(),
            messages,
            tools: self.settings.tools.clone(),
            output_schema: Some(self.settings.output_schema.clone()),
            max_output_tokens: self.cap,
        }
    }

    /// The request of the model call the transcript makes now.
    pub(crate) fn request(&self) -> Request {
        self.request_on(self.transcript.shared())
    }

    /// An event of this Orchestrator, numbered `seq`, as sent at `now`.
    pub(crate) fn message(
        &self,
        seq: u64,
        event: OrchestratorEvent,
        evidence: Option<arbiter_protocol::Evidence>,
        now: DateTime<Utc>,
    ) -> OrchestratorMessage {
        OrchestratorMessage {
            v: VERSION,
            session_id: self.settings.session_id.clone(),
            orch_id: self.settings.orch_id.clone(),
            seq,
            event,
            evidence,
            handoff: None,
            spend: None,
            // It reads its inputs from the session's log (`inputs.rs`).
            session_inputs: true,
            sent_at: now,
        }
    }

    /// The files an output shows without walking the workspace: those of
    /// the last output, when no tool call was made since. Only the native
    /// runtime counts every tool call itself (the CLIs run some of theirs
    /// unseen), so the others always walk.
    pub(crate) fn files_known(&self) -> Option<FileChanges> {
        let native = matches!(self.settings.runtime, Runtime::Native);
        match &self.files_seen {
            Some((seen_at, files)) if native && *seen_at == self.snap.tool_count => {
                Some(files.clone())
            }
            _ => None,
        }
    }

    /// The files a walk of the workspace found, as of the tool calls made.
    pub(crate) fn files_walked(&mut self, files: &FileChanges) {
        self.files_seen = Some((self.snap.tool_count, files.clone()));
    }

    /// The CLI runtimes' input for a turn: the pending user message's
    /// text, or (with nothing new to say, which should not happen) a line
    /// that tells it to carry on.
    pub(crate) fn cli_input(&mut self) -> String {
        match self.transcript.messages().last() {
            Some(last) if last.role == MessageRole::User => user_text(last),
            _ => {
                self.transcript
                    .push(Message::user("[system] Continue your work."));
                "[system] Continue your work.".to_owned()
            }
        }
    }
}

/// A user message's text blocks, one after another.
pub(crate) fn user_text(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            arbiter_llm::Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}
