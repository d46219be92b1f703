//! A tool call of the native loop, before it runs and once its outcome is
//! in: a call made too many times in a row is not run (the work stops and
//! the Arbiter is told, `core/repeats.rs`); a result goes into the
//! transcript with what the counts warn of, and its spend into the
//! allowance.

use arbiter_llm::Block;

use super::repeats::{self, Verdict};
use super::{Call, Core};
use crate::tools::ToolOutcome;

/// A call cleared to go to the policy (`core/approval.rs`), then to run.
#[derive(Debug)]
pub(crate) struct Cleared {
    /// The call, normalised once (its arguments may be a whole file's content).
    pub key: String,
    /// What the repeat count says of it.
    pub repeated: Verdict,
}

/// What a call's outcome leads to.
#[derive(Debug, PartialEq)]
pub(crate) enum AfterCall {
    /// The result is in the transcript: the step is stored, then the next
    /// call runs.
    Store,
    /// The work stops on a circle: the Arbiter gets this report (an output
    /// it answers, `core/output.rs`); the reply's calls after it are not run.
    Circling(String),
}

impl Core {
    /// Before call `call` runs (`rest`: the reply's calls after it): cleared,
    /// or the report of the circle it closes, the call and the rest marked
    /// not run in the transcript.
    pub(crate) fn clear(&mut self, call: &Call, rest: &[Call]) -> Result<Cleared, String> {
        let (id, name, input) = call;
        let key = repeats::normalised(name, input);
        // A call that waits for approval from before a takeover was
        // counted in the snapshot stored when it asked.
        let resumed = self
            .snap
            .approval
            .as_ref()
            .is_some_and(|p| &p.call_id == id);
        let (warn, stop) = self.settings.repeat;
        let repeated = if resumed {
            Verdict::Run
        } else {
            self.snap.repeats.see(&key, warn, stop)
        };
        if let Verdict::Stop(report) = repeated {
            tracing::warn!(tool = %name, "the same tool call too many times in a row: work stopped");
            let ids = std::iter::once(call)
                .chain(rest)
                .map(|(id, _, _)| id.clone());
            self.transcript.push_user(not_run(ids));
            return Err(report);
        }
        Ok(Cleared { key, repeated })
    }

    /// Call `call`'s outcome: run (`ran`), or refused by the policy or the
    /// human (its outcome the error the model reads). `last`: the reply's
    /// last call, whose result carries the request's warnings.
    pub(crate) fn called(
        &mut self,
        call: &Call,
        cleared: Cleared,
        ran: bool,
        outcome: ToolOutcome,
        rest: &[Call],
    ) -> AfterCall {
        let (id, name, input) = call;
        let Cleared { key, repeated } = cleared;
        // Answered: nothing waits any more (stored with the result).
        self.snap.approval = None;
        let before = self.snap.spend;
        self.snap.spend = self.snap.spend.plus(&outcome.spend);
        self.note_budget(&before);
        if ran {
            // A call refused did not run: the evidence does not show it.
            self.snap.tally.record(name, input, &outcome);
        }
        let (warn, stop) = self.settings.stale;
        let stale = self.snap.repeats.ran(&key, &outcome.content, warn, stop);
        // A call refused by the policy is not the model's failure.
        let failing = if ran {
            self.snap.repeats.failed(&key, outcome.is_error)
        } else {
            Verdict::Run
        };
        // One stop is enough: the circle's, else the failures'.
        let (stale, failing) = match (stale, failing) {
            (stop @ Verdict::Stop(_), failing) => (stop, failing),
            (_, Verdict::Stop(report)) => (Verdict::Stop(report), Verdict::Run),
            pair => pair,
        };
        let mut blocks = vec![Block::ToolResult {
            tool_use_id: id.clone(),
            content: outcome.content,
            is_error: outcome.is_error,
        }];
        for verdict in [&repeated, &stale, &failing] {
            if let Verdict::Warn(warning) = verdict {
                blocks.push(Block::Text {
                    text: warning.clone(),
                });
            }
        }
        self.snap.tool_count += 1;
        if let Verdict::Stop(report) = stale {
            tracing::warn!(
                "tool calls that brought nothing new, or failed, too many in a row: work stopped"
            );
            blocks.extend(not_run(rest.iter().map(|(id, _, _)| id.clone())));
            self.transcript.push_user(blocks);
            return AfterCall::Circling(report);
        }
        if rest.is_empty() {
            blocks.extend(self.warning().map(|text| Block::Text { text }));
            blocks.extend(self.budget_warning.take().map(|text| Block::Text { text }));
        }
        self.transcript.push_user(blocks);
        AfterCall::Store
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
