//! Provider-neutral request, response and stream types.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An API key. Never printed: `Debug` shows a placeholder and there is no
/// `Display`; the clients send it as a header marked sensitive.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
    /// The key itself, for the one who sends it on: a client's header, or
    /// the environment of an agent CLI the worker starts. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// For clap: a flag or environment variable read as a key.
impl std::str::FromStr for ApiKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(s))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    User,
    Assistant,
}

/// Serializable so a transcript can be stored and resumed (the worker's
/// Orchestrator state); the shape is Arbiter's own, not a provider's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Message {
    pub role: MessageRole,
    pub content: Vec<Block>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: MessageRole::User,
            content: vec![Block::Text { text: text.into() }],
        }
    }
    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: MessageRole::Assistant,
            content: vec![Block::Text { text: text.into() }],
        }
    }
}

/// One content block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
    /// Kept and sent back unchanged within a tool loop, as the API requires.
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// One model call. The model name and limits live in the client.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    pub system: String,
    /// Shared: a caller keeps its transcript in the `Arc` and hands it to
    /// each call without copying it.
    pub messages: Arc<Vec<Message>>,
    /// Shared: a caller builds its tools once and hands them to every call.
    pub tools: Arc<[ToolSpec]>,
    /// When set, the final text must be JSON matching this (provider-normalised)
    /// schema. Shared like the tools.
    pub output_schema: Option<Arc<Value>>,
    /// The output cap of this call; `None`: the client's configured one.
    /// Either way it is lowered to the model's own maximum when known.
    pub max_output_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    Refusal,
    PauseTurn,
    ContextWindowExceeded,
    /// Stopped by the client: the text began repeating itself over and over.
    Repetition,
    Other(String),
}

impl StopReason {
    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" => Self::Refusal,
            "pause_turn" => Self::PauseTurn,
            "model_context_window_exceeded" => Self::ContextWindowExceeded,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// Token usage of one call, as the provider reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens not read from or written to the cache (Anthropic's
    /// `input_tokens`; OpenAI's `prompt_tokens` less its cached tokens).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens written to the cache by this call.
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the cache (OpenAI's `cached_tokens`).
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Everything the model read: what the context window holds.
    pub fn total_input(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub content: Vec<Block>,
    pub stop_reason: StopReason,
    /// `None` when the server reported no usage (some OpenAI-compatible
    /// servers never do): unknown, which is not zero.
    pub usage: Option<Usage>,
}

impl Response {
    /// The context this call filled (all input tokens), when known.
    pub fn context_tokens(&self) -> Option<u64> {
        self.usage.map(|u| u.total_input())
    }

    /// All text blocks, joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }

    /// The tool calls of this response, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// What a streaming call yields.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text as it is generated.
    TextDelta(String),
    /// A tool call, only ever whole: its input has been fully received and parsed.
    ToolCall {
        id: String,
        name: String,
        input: Value,
    },
    /// The complete response; always the last event.
    Completed(Response),
}

/// What a model can take and give, in tokens; `None` where unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelLimits {
    /// The context window: the most input tokens one call may carry.
    pub context_window: Option<u64>,
    /// The most output tokens one reply may have.
    pub max_output_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_json() {
        let message = Message {
            role: MessageRole::Assistant,
            content: vec![
                Block::Text { text: "hm".into() },
                Block::ToolUse {
                    id: "t1".into(),
                    name: "bash".into(),
                    input: serde_json::json!({"command": "ls"}),
                },
                Block::Thinking {
                    thinking: "…".into(),
                    signature: "sig".into(),
                },
            ],
        };
        let json = serde_json::to_value(&message).unwrap();
        assert_eq!(json["role"], "assistant");
        assert_eq!(json["content"][1]["type"], "tool_use");
        assert_eq!(serde_json::from_value::<Message>(json).unwrap(), message);
        let result: Block =
            serde_json::from_str(r#"{"type":"tool_result","tool_use_id":"t1","content":"ok"}"#)
                .unwrap();
        assert!(matches!(
            result,
            Block::ToolResult {
                is_error: false,
                ..
            }
        ));
    }
}
