//! An Orchestrator's transcript as stored: messages where one with the role
//! of the message before it continues that message (tool results stored one
//! by one, inputs added to a pending user message). It tracks what is stored
//! so each record carries only what is new, and finds the tool calls of the
//! last model reply that have no stored result yet.

use std::sync::Arc;

use arbiter_llm::{Block, Message, MessageRole};
use serde_json::Value;

/// Adds `message` to `messages`, merging it into the last one if the roles match.
pub(crate) fn push(messages: &mut Vec<Message>, message: Message) {
    match messages.last_mut() {
        Some(last) if last.role == message.role => last.content.extend(message.content),
        _ => messages.push(message),
    }
}

/// A transcript and how much of it is stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Transcript {
    /// Shared with the model call in flight, which reads it; a change after
    /// the call copies it only while that call still holds it.
    messages: Arc<Vec<Message>>,
    /// Messages stored, and blocks stored of the last of them.
    stored: (usize, usize),
}

impl Transcript {
    /// A transcript that is stored entirely.
    pub(crate) fn stored(messages: Vec<Message>) -> Self {
        let mut transcript = Self {
            messages: Arc::new(messages),
            stored: (0, 0),
        };
        transcript.mark_stored();
        transcript
    }

    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages for a model request, without copying them.
    pub(crate) fn shared(&self) -> Arc<Vec<Message>> {
        self.messages.clone()
    }

    pub(crate) fn push(&mut self, message: Message) {
        push(Arc::make_mut(&mut self.messages), message);
    }

    /// Adds blocks to the pending user message (a new one if the last is the model's).
    pub(crate) fn push_user(&mut self, blocks: Vec<Block>) {
        self.push(Message {
            role: MessageRole::User,
            content: blocks,
        });
    }

    /// What was added since the last [`Transcript::mark_stored`], as messages
    /// that [`push`] puts back together.
    pub(crate) fn unstored(&self) -> Vec<Message> {
        let (n, blocks) = self.stored;
        let mut out = Vec::new();
        if let Some(last) = n.checked_sub(1).and_then(|i| self.messages.get(i))
            && last.content.len() > blocks
        {
            out.push(Message {
                role: last.role,
                content: last.content[blocks..].to_vec(),
            });
        }
        out.extend(self.messages[n.min(self.messages.len())..].iter().cloned());
        out
    }

    pub(crate) fn mark_stored(&mut self) {
        self.stored = (
            self.messages.len(),
            self.messages.last().map_or(0, |m| m.content.len()),
        );
    }

    /// The tool calls of the last model reply still waiting for a result, in order.
    pub(crate) fn unanswered(&self) -> Vec<(String, String, Value)> {
        let Some(i) = self
            .messages
            .iter()
            .rposition(|m| m.role == MessageRole::Assistant)
        else {
            return Vec::new();
        };
        let answered: Vec<&str> = self.messages[i + 1..]
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                Block::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        self.messages[i]
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, name, input } if !answered.contains(&id.as_str()) => {
                    Some((id.clone(), name.clone(), input.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(id: &str) -> Block {
        Block::ToolResult {
            tool_use_id: id.into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn uses(ids: &[&str]) -> Message {
        Message {
            role: MessageRole::Assistant,
            content: ids
                .iter()
                .map(|id| Block::ToolUse {
                    id: (*id).into(),
                    name: "bash".into(),
                    input: json!({}),
                })
                .collect(),
        }
    }

    #[test]
    fn the_unstored_part_rebuilds_the_transcript() {
        let mut t = Transcript::stored(vec![Message::user("brief")]);
        t.push(uses(&["a", "b"]));
        let first = t.unstored();
        t.mark_stored();
        t.push_user(vec![result("a")]);
        let second = t.unstored();
        t.mark_stored();
        t.push_user(vec![result("b"), Block::Text { text: "in".into() }]);
        let third = t.unstored();
        t.mark_stored();
        assert!(t.unstored().is_empty());

        let mut rebuilt = vec![Message::user("brief")];
        for m in first.into_iter().chain(second).chain(third) {
            push(&mut rebuilt, m);
        }
        assert_eq!(rebuilt, t.messages());
        assert_eq!(rebuilt.len(), 3);
        assert_eq!(rebuilt[2].content.len(), 3);
    }

    /// The messages handed to a model call stay as they were when the
    /// transcript grows meanwhile (an input merged into the pending message).
    #[test]
    fn a_call_in_flight_keeps_what_it_was_given() {
        let mut t = Transcript::stored(vec![Message::user("brief")]);
        let in_flight = t.shared();
        t.push_user(vec![Block::Text {
            text: "an input".into(),
        }]);
        assert_eq!(*in_flight, vec![Message::user("brief")]);
        assert_eq!(t.messages()[0].content.len(), 2);
        drop(in_flight);
        // Held by nobody else: grown in place.
        let before = Arc::as_ptr(&t.shared());
        t.push(Message::assistant("ok"));
        assert_eq!(Arc::as_ptr(&t.shared()), before);
    }

    #[test]
    fn unanswered_tool_calls_are_the_last_replys_without_results() {
        let mut t = Transcript::stored(vec![Message::user("brief")]);
        assert!(t.unanswered().is_empty());
        t.push(uses(&["a", "b", "c"]));
        assert_eq!(t.unanswered().len(), 3);
        t.push_user(vec![result("a")]);
        let left: Vec<String> = t.unanswered().into_iter().map(|u| u.0).collect();
        assert_eq!(left, ["b", "c"]);
        t.push_user(vec![result("b"), result("c")]);
        assert!(t.unanswered().is_empty());
        t.push(Message::assistant("{}"));
        assert!(t.unanswered().is_empty());
    }
}
