//! The request budget of an Orchestrator's calls (`arbiter_llm::window`):
//! before each model call the prompt is estimated (the last call's input
//! tokens, as its usage reported them, plus what the transcript grew by
//! since, counted high) and the call's output cap lowered to what the
//! window leaves. When not even `MIN_OUTPUT_CAP` is left, or the server
//! refuses the request as larger than its context anyway, the Orchestrator
//! hands off at the edge instead of failing: it reports to the Arbiter,
//! expecting an answer, with its last handoff packet (or, when it wrote
//! none, one built from the workspace's changes). An Orchestrator that
//! reaches the edge again after that fails with the context error: it can
//! say nothing more.

use arbiter_llm::window;
use arbiter_llm::{Block, Message, MessageRole, RESPOND_TOOL, structured};
use arbiter_protocol::{
    DoneItem, FileChanges, Handoff, ModelErrorKind, OpenItem, OrchestratorOutput, Role, WireError,
};
use serde_json::Value;

use super::Core;

/// Why an Orchestrator hands off at the edge of its window.
#[derive(Debug)]
pub(crate) enum Edge {
    /// The next request would not leave room for a reply.
    Full { prompt: u64, window: u64 },
    /// The server refused the request as larger than its context.
    Refused(String),
}

/// What the edge of the window leads to.
#[derive(Debug)]
pub(crate) enum AtEdge {
    /// The handoff, with the last packet the Orchestrator wrote.
    HandOff(OrchestratorOutput),
    /// It wrote none: the handoff's packet is made from the workspace's
    /// changes ([`Core::hand_off_with`]).
    NeedsFiles,
    /// At the edge a second time: it fails, as it can say nothing more.
    Fail(WireError),
}

impl Edge {
    /// How full, in the report's words, and the detail of an error.
    fn said(&self) -> (String, String) {
        match self {
            Edge::Full { prompt, window } => (
                format!("about {prompt} of its {window} tokens"),
                format!(
                    "the next request (about {prompt} tokens) leaves less than {} of the \
                     {window}-token context window for a reply",
                    window::MIN_OUTPUT_CAP
                ),
            ),
            Edge::Refused(message) => (
                "more than the server takes".to_owned(),
                format!("the server refused the request as larger than its context: {message}"),
            ),
        }
    }
}

impl Core {
    /// The window is full: the Orchestrator reports to the Arbiter, with
    /// the packet, and waits for its answer; or, at the edge a second
    /// time, fails.
    pub(crate) fn at_edge(&mut self, edge: &Edge) -> AtEdge {
        let (said, detail) = edge.said();
        if self.at_edge {
            return AtEdge::Fail(WireError::Model {
                role: Role::Orchestrator,
                class: ModelErrorKind::ContextExceeded,
                message: format!("{detail}, after it had handed off at the edge already"),
            });
        }
        self.at_edge = true;
        tracing::warn!(%detail, "at the edge of the context window: handing off");
        match last_packet(self.transcript.messages()) {
            Some(packet) => AtEdge::HandOff(edge_output(
                &said,
                "the packet is the last one I wrote",
                packet,
            )),
            None => AtEdge::NeedsFiles,
        }
    }

    /// The handoff at the edge of an Orchestrator that wrote no packet:
    /// one from the workspace's changes, `files`.
    pub(crate) fn hand_off_with(edge: &Edge, files: &FileChanges) -> OrchestratorOutput {
        let (said, _) = edge.said();
        edge_output(
            &said,
            "I wrote no packet, so this one lists what the workspace shows changed",
            packet_from(files),
        )
    }
}

/// The report of a handoff at the edge.
fn edge_output(said: &str, whose: &str, packet: Handoff) -> OrchestratorOutput {
    OrchestratorOutput {
        expects_response: true,
        message: format!(
            "[system] My context window is full ({said}), so I stop here and hand off; \
             {whose}. Summon a successor to carry on."
        ),
        handoff: Some(Box::new(packet)),
        verdict: None,
    }
}

/// The packet of the Orchestrator's last output that carried one: a reply
/// of JSON text (a union step's `parameters` too) or a `respond` call.
fn last_packet(messages: &[Message]) -> Option<Handoff> {
    let outputs = messages
        .iter()
        .rev()
        .filter(|m| m.role == MessageRole::Assistant)
        .flat_map(|m| m.content.iter().rev())
        .filter_map(|block| match block {
            Block::Text { text } => serde_json::from_str::<Value>(structured::json_in(text)).ok(),
            Block::ToolUse { name, input, .. } if name == RESPOND_TOOL => Some(input.clone()),
            _ => None,
        });
    for value in outputs {
        for candidate in [&value, &value["parameters"], &value["arguments"]] {
            if let Ok(output) = serde_json::from_value::<OrchestratorOutput>(candidate.clone())
                && let Some(packet) = output.handoff
            {
                return Some(*packet);
            }
        }
    }
    None
}

/// A packet from the workspace's changes, for an Orchestrator that wrote
/// none: what it made is listed as done, the rest of its brief as open.
fn packet_from(files: &FileChanges) -> Handoff {
    let touched: Vec<String> = files
        .created
        .iter()
        .chain(&files.changed)
        .cloned()
        .collect();
    let done = if touched.is_empty() {
        Vec::new()
    } else {
        vec![DoneItem {
            id: "so-far".to_owned(),
            what: "Files created or changed before the context filled (from the workspace, \
                   not checked against the brief)"
                .to_owned(),
            files: touched,
        }]
    };
    Handoff {
        done,
        open: vec![OpenItem {
            id: "rest".to_owned(),
            what: "Whatever of the brief these files do not do yet".to_owned(),
        }],
        decisions: Vec::new(),
        questions: Vec::new(),
        next_step: "Compare the workspace with the brief, then finish what is missing.".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assistant(block: Block) -> Message {
        Message {
            role: MessageRole::Assistant,
            content: vec![block],
        }
    }

    fn packet(next: &str) -> Value {
        json!({"done": [], "open": [{"id": "T1", "what": "x"}], "decisions": [],
               "questions": [], "next_step": next})
    }

    #[test]
    fn the_last_packet_is_found_in_any_shape_of_output() {
        let text = |v: Value| Block::Text {
            text: format!("Here it is:\n{v}"),
        };
        let messages = vec![
            assistant(text(json!({"expects_response": false, "message": "a",
                                  "handoff": packet("first")}))),
            Message::user("go on"),
            assistant(Block::ToolUse {
                id: "c1".into(),
                name: RESPOND_TOOL.into(),
                input: json!({"expects_response": false, "message": "b",
                              "handoff": packet("second")}),
            }),
            Message::user("go on"),
            assistant(text(json!({"name": "respond", "parameters": {
                "expects_response": false, "message": "c", "handoff": packet("third")}}))),
            Message::user("go on"),
            // Later outputs without a packet leave the last one standing.
            assistant(text(json!({"expects_response": false, "message": "d"}))),
            assistant(Block::ToolUse {
                id: "c2".into(),
                name: "bash".into(),
                input: json!({"command": "ls"}),
            }),
        ];
        assert_eq!(last_packet(&messages).unwrap().next_step, "third");
        assert_eq!(last_packet(&messages[..4]).unwrap().next_step, "second");
        assert_eq!(last_packet(&messages[..2]).unwrap().next_step, "first");
        assert!(last_packet(&messages[6..]).is_none());
    }

    #[test]
    fn a_packet_from_the_workspace_lists_what_changed_and_passes_its_check() {
        let files = FileChanges {
            created: vec!["hello.py".into()],
            changed: vec!["README.md".into()],
            ..FileChanges::default()
        };
        let made = packet_from(&files);
        made.check().unwrap();
        assert_eq!(made.done[0].files, ["hello.py", "README.md"]);
        let empty = packet_from(&FileChanges::default());
        empty.check().unwrap();
        assert!(empty.done.is_empty());
        assert_eq!(empty.open.len(), 1);
    }
}
