//! The Arbiter's words into the transcript: an input taken in `seq` order
//! goes into the pending user message (when the Orchestrator is about to
//! call its model) or into the stored inbox (while a tool runs, while it is
//! parked or waits for an approval), and the inbox into the pending message
//! when the next call is made. Inputs taken but not stored need no record
//! before the call: the stream holds them past the stored `in_seq`.

use arbiter_llm::{Block, MessageRole};

use super::Core;
use crate::inputs::Input;

impl Core {
    /// Takes the Arbiter's words of input `input`, the next in order: into
    /// the pending user message (`now`), or into the stored inbox, in which
    /// case the step is to be stored (`true`).
    pub(crate) fn take_words(&mut self, input: Input, now: bool) -> bool {
        self.snap.in_seq = input.seq;
        if let Some(budget) = input.budget {
            self.snap.budget = Some(budget);
        }
        if now {
            self.transcript
                .push_user(vec![Block::Text { text: input.text }]);
            self.input_blocks += 1;
            false
        } else {
            self.snap.inbox.push(input.text);
            true
        }
    }

    /// Moves the stored inbox into the pending user message.
    pub(crate) fn take_inbox(&mut self) {
        let inbox = std::mem::take(&mut self.snap.inbox);
        if !inbox.is_empty() {
            self.input_blocks += inbox.len();
            let blocks = inbox.into_iter().map(|text| Block::Text { text }).collect();
            self.transcript.push_user(blocks);
        }
    }

    /// Whether everything not stored yet is inputs taken: the stored state
    /// with a later `in_seq` (its inbox and phase aside), and a transcript
    /// that grew by the inputs' text only.
    pub(crate) fn only_inputs_unstored(&self) -> bool {
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
}
