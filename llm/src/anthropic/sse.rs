//! Assembles an Anthropic Messages SSE stream into text deltas, whole tool
//! calls and one final response. A stream that stops early is an error, never
//! a half block. Unknown event and delta types are ignored.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::error_from_body;
use crate::http::Assemble;
use crate::{Block, LlmError, Response, Result, StopReason, StreamEvent, Usage};

enum Partial {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    Ignored,
}

/// Folds SSE events, in order, into [`StreamEvent`]s.
#[derive(Default)]
pub(crate) struct Assembler {
    open: BTreeMap<u64, Partial>,
    done: BTreeMap<u64, Block>,
    usage: Option<Usage>,
    stop_reason: Option<StopReason>,
    finished: bool,
}

fn u64_at(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

impl Assemble for Assembler {
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<StreamEvent>> {
        Ok(self.take(event, data)?.into_iter().collect())
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn end(&mut self) -> Result<Vec<StreamEvent>> {
        Err(LlmError::Stream(
            "the connection closed before message_stop".into(),
        ))
    }
}

impl Assembler {
    /// Takes one SSE event; returns what to yield, if anything.
    fn take(&mut self, event: &str, data: &str) -> Result<Option<StreamEvent>> {
        if event == "ping" || data.trim().is_empty() {
            return Ok(None);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Stream(format!("malformed SSE data for {event:?}: {e}")))?;
        let kind = if event.is_empty() || event == "message" {
            v.get("type").and_then(Value::as_str).unwrap_or_default()
        } else {
            event
        };
        match kind {
            "message_start" => {
                if let Some(u) = v.get("message").and_then(|m| m.get("usage")) {
                    self.merge_usage(u);
                }
            }
            "content_block_start" => {
                let index = u64_at(&v, "index").unwrap_or(0);
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                let str_of = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
                let partial = match str_of("type") {
                    "text" => Partial::Text(str_of("text").to_owned()),
                    "tool_use" => Partial::ToolUse {
                        id: str_of("id").to_owned(),
                        name: str_of("name").to_owned(),
                        json: String::new(),
                    },
                    "thinking" => Partial::Thinking {
                        thinking: str_of("thinking").to_owned(),
                        signature: str_of("signature").to_owned(),
                    },
                    "redacted_thinking" => Partial::Redacted(str_of("data").to_owned()),
                    _ => Partial::Ignored,
                };
                // An index names one block of the reply: a second start
                // would replace a block (or a tool call already yielded)
                // in the reply while what was yielded kept it.
                if self.open.contains_key(&index) || self.done.contains_key(&index) {
                    return Err(LlmError::Stream(format!(
                        "content block {index} started twice"
                    )));
                }
                self.open.insert(index, partial);
            }
            "content_block_delta" => {
                let index = u64_at(&v, "index").unwrap_or(0);
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let str_of = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
                match (self.open.get_mut(&index), str_of("type")) {
                    (Some(Partial::Text(text)), "text_delta") => {
                        let piece = str_of("text");
                        text.push_str(piece);
                        if !piece.is_empty() {
                            return Ok(Some(StreamEvent::TextDelta(piece.to_owned())));
                        }
                    }
                    (Some(Partial::ToolUse { json, .. }), "input_json_delta") => {
                        json.push_str(str_of("partial_json"))
                    }
                    (Some(Partial::Thinking { thinking, .. }), "thinking_delta") => {
                        thinking.push_str(str_of("thinking"))
                    }
                    (Some(Partial::Thinking { signature, .. }), "signature_delta") => {
                        signature.push_str(str_of("signature"))
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = u64_at(&v, "index").unwrap_or(0);
                let block = match self.open.remove(&index) {
                    Some(Partial::Text(text)) => Some(Block::Text { text }),
                    Some(Partial::ToolUse { id, name, json }) => {
                        let input = if json.trim().is_empty() {
                            Value::Object(Default::default())
                        } else {
                            serde_json::from_str(&json).map_err(|e| {
                                LlmError::Stream(format!(
                                    "tool call {name} has malformed input: {e}"
                                ))
                            })?
                        };
                        Some(Block::ToolUse { id, name, input })
                    }
                    Some(Partial::Thinking {
                        thinking,
                        signature,
                    }) => Some(Block::Thinking {
                        thinking,
                        signature,
                    }),
                    Some(Partial::Redacted(data)) => Some(Block::RedactedThinking { data }),
                    Some(Partial::Ignored) | None => None,
                };
                if let Some(block) = block {
                    let event = match &block {
                        Block::ToolUse { id, name, input } => Some(StreamEvent::ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            input: input.clone(),
                        }),
                        _ => None,
                    };
                    self.done.insert(index, block);
                    return Ok(event);
                }
            }
            "message_delta" => {
                if let Some(reason) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(StopReason::parse(reason));
                }
                if let Some(u) = v.get("usage") {
                    self.merge_usage(u);
                }
            }
            "message_stop" => {
                if !self.open.is_empty() {
                    return Err(LlmError::Stream(
                        "message_stop arrived while a content block was still open".into(),
                    ));
                }
                self.finished = true;
                let response = Response {
                    content: std::mem::take(&mut self.done).into_values().collect(),
                    stop_reason: self.stop_reason.take().unwrap_or(StopReason::EndTurn),
                    usage: self.usage,
                };
                return Ok(Some(StreamEvent::Completed(response)));
            }
            "error" => return Err(error_from_body(None, &v, None)),
            // `ping` and event types added after this was written.
            _ => {}
        }
        Ok(None)
    }

    /// `message_delta` usage is cumulative; fields it omits keep their value.
    fn merge_usage(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        let usage = self.usage.get_or_insert_with(Usage::default);
        if let Some(n) = u64_at(u, "input_tokens") {
            usage.input_tokens = n;
        }
        if let Some(n) = u64_at(u, "output_tokens") {
            usage.output_tokens = n;
        }
        if let Some(n) = u64_at(u, "cache_creation_input_tokens") {
            usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = u64_at(u, "cache_read_input_tokens") {
            usage.cache_read_input_tokens = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(events: &[(&str, &str)]) -> Result<Vec<StreamEvent>> {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        for (e, d) in events {
            out.extend(a.push(e, d)?);
        }
        Ok(out)
    }

    /// A recorded stream: text, a ping, a tool call split across deltas, an
    /// unknown event, the stop.
    const RECORDED: &[(&str, &str)] = &[
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
        ),
        ("ping", r#"{"type":"ping"}"#),
        (
            "content_block_delta",
            r#"{"index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
        ),
        ("content_block_stop", r#"{"index":0}"#),
        (
            "content_block_start",
            r#"{"index":1,"content_block":{"type":"tool_use","id":"t1","name":"read","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
        ),
        ("content_block_stop", r#"{"index":1}"#),
        ("some_future_event", r#"{"x":1}"#),
        (
            "message_delta",
            r#"{"delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
        ),
        ("message_stop", r#"{}"#),
    ];

    #[test]
    fn assembles_text_and_a_tool_call_split_across_deltas() {
        let out = feed(RECORDED).unwrap();
        assert_eq!(out[0], StreamEvent::TextDelta("Hel".into()));
        assert_eq!(out[1], StreamEvent::TextDelta("lo".into()));
        assert_eq!(
            out[2],
            StreamEvent::ToolCall {
                id: "t1".into(),
                name: "read".into(),
                input: serde_json::json!({"a": 1})
            }
        );
        let StreamEvent::Completed(r) = &out[3] else {
            panic!("{out:?}")
        };
        assert_eq!(r.text(), "Hello");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            r.content[1],
            Block::ToolUse {
                id: "t1".into(),
                name: "read".into(),
                input: serde_json::json!({"a":1})
            }
        );
        let usage = r.usage.unwrap();
        assert_eq!(usage.total_input(), 100);
        assert_eq!(usage.output_tokens, 7);
    }

    #[test]
    fn an_error_event_mid_stream_is_a_typed_error() {
        let err = feed(&[
            (
                "message_start",
                r#"{"message":{"usage":{"input_tokens":1}}}"#,
            ),
            (
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
        ])
        .unwrap_err();
        assert!(matches!(err, LlmError::Overloaded { .. }), "{err:?}");
        assert!(err.is_retryable());
    }

    /// Found by the `anthropic_sse` fuzz target: a stream that started
    /// and stopped block 2 twice yielded two tool calls, and the reply
    /// kept one. Its input, shortened: the second start is refused.
    #[test]
    fn a_block_started_twice_is_a_stream_error() {
        let start = r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}"#;
        let stop = r#"{"type":"content_block_stop","index":2}"#;
        let events = [
            (
                "message_start",
                r#"{"message":{"usage":{"input_tokens":1}}}"#,
            ),
            ("content_block_start", start),
            ("message", stop),
            ("content_block_start", start),
            ("message", stop),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        let err = feed(&events).unwrap_err();
        assert!(
            matches!(&err, LlmError::Stream(m) if m == "content block 2 started twice"),
            "{err:?}"
        );
        // While the first is still open, too.
        let err = feed(
            &events[..2]
                .iter()
                .chain(&events[3..4])
                .copied()
                .collect::<Vec<_>>(),
        )
        .unwrap_err();
        assert!(matches!(err, LlmError::Stream(_)), "{err:?}");
    }

    #[test]
    fn malformed_data_is_a_stream_error() {
        let err = feed(&[("message_start", "{not json")]).unwrap_err();
        assert!(matches!(err, LlmError::Stream(_)), "{err:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: crate::stream_props::cases(),
            failure_persistence: None,
            ..Default::default()
        })]

        /// The recorded stream, changed at random: an error or a reply that
        /// holds together, never a panic (`stream_props.rs`).
        #[test]
        fn a_changed_stream_fails_or_holds_together(
            changes in proptest::collection::vec(crate::stream_props::change(), 0..4),
        ) {
            let recorded = RECORDED.iter().map(|(e, d)| ((*e).to_owned(), (*d).to_owned()));
            crate::stream_props::holds(Assembler::default(), recorded.collect(), &changes)?;
        }
    }
}
