//! Assembles a Chat Completions stream (`data:` chunks ending in `[DONE]`)
//! into text deltas, whole tool calls (their fragments joined by index) and
//! one final response. Usage comes from the last chunk when the server sends
//! it; when it never does, usage is unknown.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::error_from_body;
use crate::http::Assemble;
use crate::{Block, LlmError, Response, Result, StopReason, StreamEvent, Usage};

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
pub(crate) struct Assembler {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    finished: bool,
}

impl Assemble for Assembler {
    fn push(&mut self, _event: &str, data: &str) -> Result<Vec<StreamEvent>> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            return self.finish();
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Stream(format!("malformed SSE data: {e}")))?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(error_from_body(None, &chunk, None));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage_of(usage));
        }
        let mut out = Vec::new();
        let choice = chunk.get("choices").and_then(|c| c.get(0));
        let Some(choice) = choice else {
            return Ok(out);
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(piece) = delta.get("content").and_then(Value::as_str)
            && !piece.is_empty()
        {
            self.text.push_str(piece);
            out.push(StreamEvent::TextDelta(piece.to_owned()));
        }
        if let Some(refusal) = delta.get("refusal").and_then(Value::as_str) {
            self.text.push_str(refusal);
            self.finish_reason = Some("content_filter".into());
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let partial = self.calls.entry(index).or_default();
            let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
            let id = text(call.get("id"));
            if !id.is_empty() {
                partial.id = id;
            }
            let function = call.get("function").unwrap_or(&Value::Null);
            let name = text(function.get("name"));
            if !name.is_empty() && partial.name.is_empty() {
                partial.name = name;
            }
            partial.arguments.push_str(&text(function.get("arguments")));
        }
        Ok(out)
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn end(&mut self) -> Result<Vec<StreamEvent>> {
        // Some servers close without `[DONE]`; the reply is whole only if a
        // finish reason arrived.
        if self.finish_reason.is_some() {
            self.finish()
        } else {
            Err(LlmError::Stream(
                "the connection closed before the reply was finished".into(),
            ))
        }
    }
}

impl Assembler {
    /// The end of the reply: tool calls are parsed only now, so a stream
    /// that dies before this never yields a half call.
    fn finish(&mut self) -> Result<Vec<StreamEvent>> {
        let mut content = Vec::new();
        let mut out = Vec::new();
        if !self.text.is_empty() {
            content.push(Block::Text {
                text: std::mem::take(&mut self.text),
            });
        }
        for (index, call) in std::mem::take(&mut self.calls) {
            if call.name.is_empty() {
                return Err(LlmError::Stream(format!("tool call {index} has no name")));
            }
            let input = parse_arguments(&call.name, &call.arguments)?;
            let id = if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            };
            out.push(StreamEvent::ToolCall {
                id: id.clone(),
                name: call.name.clone(),
                input: input.clone(),
            });
            content.push(Block::ToolUse {
                id,
                name: call.name,
                input,
            });
        }
        let has_calls = content.iter().any(|b| matches!(b, Block::ToolUse { .. }));
        let stop_reason = stop_reason(self.finish_reason.as_deref(), has_calls);
        self.finished = true;
        out.push(StreamEvent::Completed(Response {
            content,
            stop_reason,
            usage: self.usage,
        }));
        Ok(out)
    }
}

fn parse_arguments(name: &str, arguments: &str) -> Result<Value> {
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(arguments)
        .map_err(|e| LlmError::Stream(format!("tool call {name} has malformed arguments: {e}")))
}

fn stop_reason(finish_reason: Option<&str>, has_calls: bool) -> StopReason {
    match finish_reason {
        // Some servers say "stop" after tool calls.
        _ if has_calls => StopReason::ToolUse,
        Some("stop") | None => StopReason::EndTurn,
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// OpenAI's `prompt_tokens` includes the cached tokens; ours does not.
fn usage_of(u: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let prompt = n(&u["prompt_tokens"]);
    let cached = n(&u["prompt_tokens_details"]["cached_tokens"]).min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: n(&u["completion_tokens"]),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: cached,
    }
}

/// A whole (non-streamed) `chat.completion`, for servers that ignore `stream`.
pub(crate) fn completion(body: &Value) -> Result<Response> {
    let message = &body["choices"][0]["message"];
    if message.is_null() {
        return Err(LlmError::Stream(format!(
            "a completion with no message: {body}"
        )));
    }
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(Block::Text { text: text.into() });
    }
    for (index, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = call["function"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let arguments = match &call["function"]["arguments"] {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let id = call["id"]
            .as_str()
            .map_or_else(|| format!("call_{index}"), str::to_owned);
        let input = parse_arguments(&name, &arguments)?;
        content.push(Block::ToolUse { id, name, input });
    }
    let has_calls = content.iter().any(|b| matches!(b, Block::ToolUse { .. }));
    Ok(Response {
        content,
        stop_reason: stop_reason(body["choices"][0]["finish_reason"].as_str(), has_calls),
        usage: body.get("usage").filter(|u| u.is_object()).map(usage_of),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn feed(chunks: &[&str]) -> Result<Vec<StreamEvent>> {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(a.push("message", c)?);
        }
        if !a.finished() {
            out.extend(a.end()?);
        }
        Ok(out)
    }

    /// A recorded stream: text, two tool calls interleaved by index, the
    /// finish, the usage, `[DONE]`.
    const RECORDED: &[&str] = &[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "}}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"see."}}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"q\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":30,"total_tokens":1030,"prompt_tokens_details":{"cached_tokens":800}}}"#,
        "[DONE]",
    ];

    #[test]
    fn tool_calls_are_joined_by_index_and_usage_splits_cached_tokens() {
        let out = feed(RECORDED).unwrap();
        assert_eq!(out[0], StreamEvent::TextDelta("Let me ".into()));
        assert_eq!(
            out[2],
            StreamEvent::ToolCall {
                id: "call_a".into(),
                name: "read".into(),
                input: json!({"path": "a"})
            }
        );
        let StreamEvent::Completed(r) = out.last().unwrap() else {
            panic!("{out:?}")
        };
        assert_eq!(r.text(), "Let me see.");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        let calls: Vec<_> = r.tool_uses().map(|(id, name, _)| (id, name)).collect();
        assert_eq!(calls, vec![("call_a", "read"), ("call_b", "grep")]);
        let usage = r.usage.unwrap();
        assert_eq!(usage.input_tokens, 200);
        assert_eq!(usage.cache_read_input_tokens, 800);
        assert_eq!(usage.total_input(), 1000);
    }

    #[test]
    fn no_usage_chunk_means_unknown_usage() {
        let out = feed(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        let StreamEvent::Completed(r) = out.last().unwrap() else {
            panic!("{out:?}")
        };
        assert_eq!(r.usage, None);
        assert_eq!(r.stop_reason, StopReason::EndTurn);
    }

    #[test]
    fn a_stream_cut_mid_call_never_yields_the_call() {
        let err = feed(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"write","arguments":"{\"path\":"}}]}}]}"#,
        ])
        .unwrap_err();
        assert!(matches!(err, LlmError::Stream(_)), "{err:?}");
        let err = feed(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"write","arguments":"{\"path\":"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("malformed arguments"), "{err}");
    }

    #[test]
    fn errors_in_the_stream_are_typed() {
        let err = feed(&[r#"{"error":{"message":"server overloaded","type":"overloaded_error"}}"#])
            .unwrap_err();
        assert!(matches!(err, LlmError::Overloaded { .. }), "{err:?}");
        let err = feed(&["{oops"]).unwrap_err();
        assert!(matches!(err, LlmError::Stream(_)), "{err:?}");
    }

    #[test]
    fn a_whole_completion_parses() {
        let r = completion(&json!({
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        }))
        .unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage.unwrap().total_input(), 10);
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
            let recorded = RECORDED.iter().map(|d| ("message".to_owned(), (*d).to_owned()));
            crate::stream_props::holds(Assembler::default(), recorded.collect(), &changes)?;
        }
    }
}
