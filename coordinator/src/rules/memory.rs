//! Memory across sessions, on the coordinator's side: a session on a
//! workspace starts with the workspace's memory in its Arbiter's first
//! prompt (the newest entries that fit `--memory-tokens`), and keeps what
//! its Arbiter asks to keep (the `memory` field of its reply) and the
//! decisions of its Orchestrators' handoff packets. An entry is an effect
//! of the step that decided it (a put in the bucket, published once the
//! step is stored); one that looks like a secret is refused and never
//! stored, and the log says why.

use std::time::Duration;

use arbiter_protocol::memory::{self, prompt_block};
use arbiter_protocol::{Decision, LogBody, MemoryEntry, MemoryKind, SystemEntry, VERSION};
use sha2::Digest as _;

use crate::rules::Core;
use crate::state::{Effect, Pending};

/// How long reading a workspace's memory may take before a new session
/// starts without it (the log says so).
pub(crate) const RECALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The id of an entry: `m` and 12 hex digits of a hash of the workspace and
/// the words (spaces and case aside), so the same fact kept twice, by one
/// session or two, is one entry.
pub(crate) fn entry_id(workspace: &str, text: &str) -> String {
    let words = text
        .split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ");
    let hash = sha2::Sha256::digest(format!("{workspace}\n{words}").as_bytes());
    let hex: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("m{hex}")
}

impl Core {
    /// Takes the workspace a human message names, if the session has none
    /// yet: a session's workspace is fixed by the first message that names one.
    pub(crate) fn take_workspace(&mut self, workspace: Option<String>) {
        let Some(workspace) = workspace else {
            return;
        };
        if self.state.workspace.is_some() {
            return;
        }
        if memory::is_valid_workspace(&workspace) {
            self.state.workspace = Some(workspace);
            self.step.changed = true;
        } else {
            let shown: String = workspace.chars().take(80).collect();
            self.log(LogBody::System(SystemEntry {
                text: format!(
                    "The workspace name {shown:?} was refused (letters, digits, - or _, at most \
                     {} bytes): this session has no memory.",
                    memory::MAX_WORKSPACE
                ),
            }));
        }
    }

    /// The workspace whose memory opens this Arbiter generation's first
    /// prompt, when there is one and room for it: the shell reads its
    /// entries (at most [`RECALL_TIMEOUT`]) and hands them to
    /// [`Core::recalled`].
    pub(crate) fn recall_wanted(&self) -> Option<String> {
        if self.config.memory_tokens == 0 {
            return None;
        }
        self.state.workspace.clone()
    }

    /// The memory block of the first prompt, from what reading the
    /// workspace's entries gave (`Err`: why they could not be read); the
    /// log says what it holds. `None`: nothing kept, or unreadable.
    pub(crate) fn recalled(
        &mut self,
        workspace: &str,
        read: Result<Vec<MemoryEntry>, String>,
    ) -> Option<String> {
        let budget = self.config.memory_tokens;
        let entries = match read {
            Ok(entries) => entries,
            Err(why) => return self.recall_failed(workspace, &why),
        };
        let block = prompt_block(workspace, &entries, budget)?;
        let ids: Vec<&str> = entries
            .iter()
            .map(|e| e.id.as_str())
            .filter(|id| block.contains(&format!("[{id}]")))
            .collect();
        self.log(LogBody::System(SystemEntry {
            text: format!(
                "Memory of workspace {workspace}: {} of {} entries put in the Arbiter's first \
                 prompt ({} tokens at most). See them with `arbiter-console memory list \
                 --workspace {workspace}`.",
                ids.len(),
                entries.len(),
                budget
            ),
        }));
        Some(block)
    }

    fn recall_failed(&mut self, workspace: &str, why: &str) -> Option<String> {
        tracing::warn!(session.id = %self.id, %workspace, error = %why, "could not read the workspace's memory");
        self.log(LogBody::System(SystemEntry {
            text: format!(
                "The memory of workspace {workspace} could not be read ({why}): the session \
                 starts without it."
            ),
        }));
        None
    }

    /// The Arbiter's `memory` field: each fact kept, or refused with a
    /// reason that the human (in the log) and the Arbiter (a system note
    /// with its next input) both read.
    pub(crate) fn remember_facts(&mut self, facts: Vec<String>) {
        let mut refused = Vec::new();
        for fact in facts {
            if let Err(why) = self.keep(MemoryKind::Fact, &fact, "Arbiter".to_owned()) {
                refused.push(why);
            }
        }
        if !refused.is_empty() {
            let text = format!("Memory not kept: {}", refused.join("; "));
            self.log(LogBody::System(SystemEntry { text: text.clone() }));
            self.enqueue(Pending::System { text });
        }
    }

    /// The decisions of Orchestrator `number`'s handoff packet, kept as
    /// `decision (why)`; one refused is said in the log.
    pub(crate) fn remember_decisions(&mut self, number: u32, decisions: &[Decision]) {
        self.remember_decisions_of(arbiter_protocol::orchestrator_name(number), decisions);
    }

    /// The decisions of a packet written by `by` (an Orchestrator, or an
    /// Arbiter generation handing off), kept as `decision (why)`; one
    /// refused is said in the log. Ids come from the text, so a decision
    /// every packet repeats is kept once.
    pub(crate) fn remember_decisions_of(&mut self, by: String, decisions: &[Decision]) {
        let mut refused = Vec::new();
        for d in decisions {
            let text = format!("{} (why: {})", d.decision.trim(), d.why.trim());
            if let Err(why) = self.keep(MemoryKind::Decision, &text, by.clone()) {
                refused.push(why);
            }
        }
        if !refused.is_empty() {
            self.log(LogBody::System(SystemEntry {
                text: format!(
                    "Memory not kept from the handoff of {by}: {}",
                    refused.join("; ")
                ),
            }));
        }
    }

    /// Checks one entry and makes it an effect of this step. Without a
    /// workspace nothing is kept (and that is no error to report). The
    /// error quotes the start of the entry, never a secret it holds.
    fn keep(&mut self, kind: MemoryKind, text: &str, by: String) -> Result<(), String> {
        let Some(workspace) = self.state.workspace.clone() else {
            return Ok(());
        };
        if let Err(why) = memory::check_text(text) {
            let quoted = if memory::secret_in(text).is_some() {
                String::new()
            } else {
                let start: String = text
                    .split_whitespace()
                    .take(6)
                    .collect::<Vec<_>>()
                    .join(" ");
                format!(" {start:?}")
            };
            return Err(format!("the entry{quoted} was refused: {why}"));
        }
        let entry = MemoryEntry {
            v: VERSION,
            id: entry_id(&workspace, text),
            workspace,
            kind,
            text: text.trim().to_owned(),
            session_id: self.id.clone(),
            by,
            at: self.now.wall,
        };
        self.effect(Effect::Memory(entry));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ignore_spaces_and_case_but_not_the_workspace() {
        let a = entry_id("w", "Use TOML for config.");
        assert_eq!(a.len(), 13);
        assert!(a.starts_with('m'));
        assert_eq!(a, entry_id("w", "  use toml   for CONFIG. "));
        assert_ne!(a, entry_id("other", "Use TOML for config."));
        assert_ne!(a, entry_id("w", "Use YAML for config."));
    }
}
