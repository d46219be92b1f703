//! An Orchestrator's outputs: a report or a note, stored with its step
//! and published with the worker's evidence; what the model is told after a
//! note (from what the worker sees: `core/repeats.rs` counts the notes with
//! no tool call between them); and the report of a stop on a circle.

use arbiter_llm::Block;
use arbiter_protocol::{
    Evidence, OrchestratorEvent, OrchestratorFailed, OrchestratorMessage, OrchestratorOutput,
    WireError,
};
use chrono::{DateTime, Utc};

use super::Core;
use super::repeats::{self, Verdict};
use crate::runtime::Runtime;
use crate::state::{EndReason, Phase};

/// Characters of its last report an Orchestrator's records keep, for the
/// message of the branch its work is handed over on. Every later record
/// carries it (a record holds the whole snapshot): enough for a commit
/// message's body, little beside a step.
const REPORT_KEPT: usize = 2_000;

/// An output as decided before its evidence is made: numbered, a note
/// perhaps turned into a message (`waits`).
#[derive(Debug)]
pub(crate) struct Shaped {
    pub output: OrchestratorOutput,
    /// What the count of notes with no tool call between them says.
    idle: Verdict,
}

impl Shaped {
    /// It waits for the Arbiter's answer (a message), or goes on (a note).
    pub(crate) fn waits(&self) -> bool {
        self.output.expects_response
    }
}

impl Core {
    /// The work stops on a circle (`core/repeats.rs`): the Arbiter gets
    /// `report` as an ordinary message it answers.
    pub(crate) fn circling(report: String) -> OrchestratorOutput {
        OrchestratorOutput {
            expects_response: true,
            message: report,
            handoff: None,
            verdict: None,
        }
    }

    /// A valid output, numbered: a note past the limits goes to the
    /// Arbiter as a message. Its evidence comes next (the workspace's
    /// files and checkpoint: I/O), then [`Core::publish`].
    pub(crate) fn shape(&mut self, mut output: OrchestratorOutput) -> Shaped {
        self.snap.repairs = 0;
        // Notes with no tool call between them (core/repeats.rs); only the
        // native loop counts every tool call itself.
        let idle = if matches!(self.settings.runtime, Runtime::Native) {
            let note = !output.expects_response;
            self.snap.repeats.output(self.snap.tool_count, note)
        } else {
            Verdict::Run
        };
        if let Verdict::Stop(report) = &idle {
            tracing::warn!("notes without a tool call, too many in a row: work stopped");
            output.message = format!("{report} {}", output.message);
            output.expects_response = true;
        }
        if !output.expects_response {
            self.snap.notes_in_a_row += 1;
            if self.snap.notes_in_a_row > self.settings.max_consecutive_notes {
                // It was told to ask and did not: the Arbiter hears it anyway.
                tracing::warn!("note limit passed; forwarding the note as a message");
                output.expects_response = true;
            }
        }
        self.snap.out_seq += 1;
        Shaped { output, idle }
    }

    /// The output with its evidence, as stored and published at `now`. A
    /// message ends the turn (it waits for the Arbiter); after a note the
    /// model is told what the worker saw and to go on.
    pub(crate) fn publish(
        &mut self,
        shaped: Shaped,
        evidence: Evidence,
        now: DateTime<Utc>,
    ) -> OrchestratorMessage {
        let Shaped { mut output, idle } = shaped;
        let waits = output.expects_response;
        // What the next request says after a note (below), from the evidence.
        let unbacked = evidence.flag(1, None, &output.message).is_some();
        let work_shown = (evidence.files.count() > 0).then(|| evidence.summary());
        // The packet rides on the message, beside the event (whose keys are fixed).
        let handoff = output.handoff.take();
        if waits {
            self.snap.report = Some(output.message.chars().take(REPORT_KEPT).collect());
        }
        if handoff.is_some() {
            self.snap.handoff.clone_from(&handoff);
        }
        let mut message = self.message(
            self.snap.out_seq,
            OrchestratorEvent::Output(output),
            Some(evidence),
            now,
        );
        message.handoff = handoff;
        message.spend = Some(self.snap.spend);
        if waits {
            self.snap.notes_in_a_row = 0;
            self.snap.phase = Phase::Waiting;
            return message;
        }
        let notes = self.snap.notes_in_a_row;
        let text = if notes >= self.settings.max_consecutive_notes {
            format!(
                "[system] Your note was shown. You have sent {notes} notes in a row: your \
                 next reply must speak to the Arbiter with expects_response true."
            )
        } else if let repeats::Verdict::Warn(told) = &idle {
            format!(
                "[system] Your note was shown. {}",
                told.trim_start_matches("[system] ")
            )
        } else if unbacked {
            "[system] Your note was shown, but it says work is done while the worker saw \
             no tool call and no file changed: none of it exists yet. Call the tool that \
             does it now."
                .to_owned()
        } else if let Some(shown) = work_shown {
            // A small model told only to go on invents work; one whose
            // files exist is asked whether they are what was asked.
            format!(
                "[system] Your note was shown to the human and will reach the Arbiter with \
                 your next message. The worker sees this work so far: {shown}. If it is \
                 what your brief asks for, check it and report to the Arbiter now, with \
                 expects_response true; if not, go on with the next part."
            )
        } else {
            "[system] Your note was shown to the human and will reach the Arbiter with \
             your next message. Continue your work."
                .to_owned()
        };
        let mut content = vec![Block::Text { text }];
        content.extend(self.warning().map(|text| Block::Text { text }));
        content.extend(self.budget_warning.take().map(|text| Block::Text { text }));
        self.transcript.push_user(content);
        message
    }

    /// Ends the Orchestrator with `error`: its `failed` event, stored then
    /// published.
    pub(crate) fn fail(&mut self, error: WireError, now: DateTime<Utc>) -> OrchestratorMessage {
        tracing::error!(%error, "Orchestrator failed");
        self.snap.out_seq += 1;
        self.snap.phase = Phase::Ended {
            reason: EndReason::Failed,
        };
        let mut message = self.message(
            self.snap.out_seq,
            OrchestratorEvent::Failed(OrchestratorFailed { error }),
            None,
            now,
        );
        message.spend = Some(self.snap.spend);
        message
    }

    /// Why the workspace has no checkpoints, with the first output only.
    pub(crate) fn say_no_checkpoint(&mut self) -> bool {
        !std::mem::replace(&mut self.no_checkpoint_said, true)
    }
}
