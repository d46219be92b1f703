//! The human's `/rewind` (docs/checkpoints.md): the session's workspace goes
//! back to one of its checkpoints, and the next Orchestrator summoned starts
//! from it. The coordinator has no workspace: it records the rewind, holds
//! the session until the human writes, and puts the checkpoint in the next
//! summons (`start_from`), whose worker restores the files before the
//! Orchestrator's first step and tells it so.
//!
//! A rewind while Orchestrators are live is refused, unless it comes with
//! the human's `/stop` (the console asks first): their work would go on in
//! a workspace that changed under them.

use std::collections::VecDeque;

use arbiter_protocol::{LogBody, Rewind, RewoundEntry, SystemEntry, member_name};

use crate::rules::Core;
use crate::rules::guard::Hold;
use crate::state::Pending;

impl Core {
    /// The human asked to rewind to `rewind.checkpoint` (`stop`: with the
    /// work stopped first). Returns whether the Arbiter's running turn is
    /// to be abandoned (the stop's).
    pub(crate) fn rewind(&mut self, rewind: Rewind, stop: bool, console: &str) -> bool {
        let short: String = rewind.checkpoint.chars().take(12).collect();
        if !Rewind::is_commit(&rewind.checkpoint) {
            self.log(LogBody::System(SystemEntry {
                text: format!(
                    "The rewind was not done: {:?} is not a checkpoint's full commit id (40 hex \
                     digits; `arbiter-console checkpoints` lists them).",
                    rewind.checkpoint.chars().take(64).collect::<String>()
                ),
            }));
            return false;
        }
        let abandon = if stop {
            self.stop(console)
        } else {
            if !self.state.team.is_empty() {
                let names: Vec<String> = self
                    .state
                    .team
                    .iter()
                    .map(|a| member_name(a.number, a.member))
                    .collect();
                self.log(LogBody::System(SystemEntry {
                    text: format!(
                        "The rewind to {short} was not done: {} still at work in the workspace. \
                         Stop the work first (/stop), or rewind with /rewind --stop.",
                        match names.as_slice() {
                            [one] => format!("{one} is"),
                            _ => format!("{} are", names.join(", ")),
                        }
                    ),
                }));
                return false;
            }
            false
        };
        self.state.rewind = Some(rewind.checkpoint.clone());
        // The last packet speaks of work that is no longer there.
        let dropped = self.state.handoff.take().is_some();
        self.log(LogBody::Rewound(RewoundEntry {
            checkpoint: rewind.checkpoint,
            console: console.to_owned(),
        }));
        let mut note = format!(
            "The human rewound the workspace to checkpoint {short} (the evidence lines of the \
             reports name each checkpoint). What was done after it is no longer in the \
             workspace; the next Orchestrator you summon starts from there, and is told so."
        );
        if dropped {
            note.push_str(
                " The last Orchestrator's handoff packet is not passed on: it describes work \
                 that was rewound.",
            );
        }
        note.push_str(" Wait for the human's next message before acting.");
        let pending = Pending::System { text: note };
        // The session waits for the human, as after /stop; no new log line.
        match self.state.hold.as_mut() {
            Some(hold) => hold.waiting.push_back(pending),
            None => {
                let mut waiting: VecDeque<Pending> = std::mem::take(&mut self.state.queue);
                waiting.push_back(pending);
                self.state.hold = Some(Hold {
                    reason: format!("Rewound to {short} by console {console}: write to go on."),
                    waiting,
                    budget: false,
                });
            }
        }
        abandon
    }
}
