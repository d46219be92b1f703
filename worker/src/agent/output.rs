//! An Orchestrator's outputs: a report or a note, stored with its step
//! and published with the worker's evidence; what the model is told after a
//! note (from what the worker sees: `agent/repeats.rs` counts the notes with
//! no tool call between them); and the report of a stop on a circle.

use arbiter_llm::Block;
use arbiter_protocol::{FileChanges, OrchestratorEvent, OrchestratorOutput};

use super::{Agent, Stop, repeats};
use crate::evidence;
use crate::runtime::Runtime;
use crate::state::Phase;

/// Characters of its last report an Orchestrator's records keep, for the
/// message of the branch its work is handed over on. Every later record
/// carries it (a record holds the whole snapshot): enough for a commit
/// message's body, little beside a step.
const REPORT_KEPT: usize = 2_000;

impl Agent {
    /// The work stops on a circle (`agent/repeats.rs`): the Arbiter gets
    /// `report` as an ordinary message it answers.
    pub(super) async fn report_circling(&mut self, report: String) -> Result<(), Stop> {
        self.output(OrchestratorOutput {
            expects_response: true,
            message: report,
            handoff: None,
            verdict: None,
        })
        .await
    }

    /// A valid output: stored with the step, then published.
    pub(super) async fn output(&mut self, mut output: OrchestratorOutput) -> Result<(), Stop> {
        self.snap.repairs = 0;
        // Notes with no tool call between them (agent/repeats.rs); only the
        // native loop counts every tool call itself.
        let idle = if matches!(self.shared.config.runtime, Runtime::Native) {
            let note = !output.expects_response;
            self.snap.repeats.output(self.snap.tool_count, note)
        } else {
            repeats::Verdict::Run
        };
        if let repeats::Verdict::Stop(report) = &idle {
            tracing::warn!("notes without a tool call, too many in a row: work stopped");
            output.message = format!("{report} {}", output.message);
            output.expects_response = true;
        }
        if !output.expects_response {
            self.snap.notes_in_a_row += 1;
            if self.snap.notes_in_a_row > self.shared.config.max_consecutive_notes {
                // It was told to ask and did not: the Arbiter hears it anyway.
                tracing::warn!("note limit passed; forwarding the note as a message");
                output.expects_response = true;
            }
        }
        let waits = output.expects_response;
        self.snap.out_seq += 1;
        let files = self.files_changed().await;
        let mut evidence = self.snap.tally.evidence(files);
        self.checkpoint(&mut evidence, &output.message).await;
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
        let mut message = self.outbox.message(
            self.snap.out_seq,
            OrchestratorEvent::Output(output),
            Some(evidence),
        );
        message.handoff = handoff;
        message.spend = Some(self.snap.spend);
        if waits {
            self.snap.notes_in_a_row = 0;
            self.snap.phase = Phase::Waiting;
            // Published with the turn's context; the turn ends with it.
            let stored = self.step(vec![message]).await;
            self.end_turn();
            return stored;
        } else {
            let notes = self.snap.notes_in_a_row;
            let text = if notes >= self.shared.config.max_consecutive_notes {
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
            if let Some(warning) = self.warning() {
                content.push(Block::Text { text: warning });
            }
            if let Some(warning) = self.budget_warning.take() {
                content.push(Block::Text { text: warning });
            }
            self.transcript.push_user(content);
        }
        self.step(vec![message]).await
    }

    /// The workspace as it is with this output, as a checkpoint when it
    /// changed (made before the output is stored, so a takeover finds it),
    /// or why there is none.
    async fn checkpoint(&mut self, evidence: &mut arbiter_protocol::Evidence, message: &str) {
        let checkpoints = match &self.checkpoints {
            Ok(checkpoints) => checkpoints,
            Err(why) => {
                if !self.no_checkpoint_said {
                    self.no_checkpoint_said = true;
                    evidence.no_checkpoint = Some(why.clone());
                }
                return;
            }
        };
        let summary = evidence.summary();
        match checkpoints
            .make_output(self.snap.out_seq, message, &summary)
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
    /// so it is done only when something may have changed the files: an
    /// output with no tool call since the last one shows what that one
    /// showed. Only the native runtime counts every tool call itself (the
    /// CLIs run some of theirs unseen), so the others always walk.
    pub(super) async fn files_changed(&mut self) -> FileChanges {
        let calls = self.snap.tool_count;
        let native = matches!(self.shared.config.runtime, Runtime::Native);
        if native
            && let Some((seen_at, files)) = &self.files_seen
            && *seen_at == calls
        {
            return files.clone();
        }
        let now = evidence::walk_workspace(self.ctx.workspace.root()).await;
        let files = evidence::diff(&self.baseline, &now);
        self.files_seen = Some((calls, files.clone()));
        files
    }
}
