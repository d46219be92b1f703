//! The JSON body of a Messages request: alternating roles, prompt-cache
//! breakpoints on the stable prefix (tools, system) and on the growing
//! transcript, the output schema in `output_config.format`, and never a
//! sampling parameter.

use serde_json::{Value, json};

use crate::schema::{self, Dialect};
use crate::{Block, Message, MessageRole, Request};

/// Breakpoints the transcript gets: the newest user turn and the one before
/// it, so the next call finds the prefix this one wrote. With the tools and
/// system breakpoints that makes the API's maximum of four.
const TRANSCRIPT_BREAKPOINTS: usize = 2;

pub(crate) fn body(model: &str, max_tokens: u64, request: &Request) -> Value {
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": messages_json(&request.messages),
        "stream": true,
    });
    if !request.system.is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": request.system,
            "cache_control": ephemeral(),
        }]);
    }
    if !request.tools.is_empty() {
        let count = request.tools.len();
        let tools: Vec<Value> = request
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let input_schema = schema::normalised(&t.input_schema, Dialect::Anthropic);
                let mut tool = json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": input_schema,
                });
                if i + 1 == count {
                    tool["cache_control"] = ephemeral();
                }
                tool
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(output) = &request.output_schema {
        let output = schema::normalised(output, Dialect::Anthropic);
        body["output_config"] = json!({"format": {"type": "json_schema", "schema": output}});
    }
    body
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn messages_json(messages: &[Message]) -> Vec<Value> {
    // The API wants alternating roles: merge neighbours of the same role.
    let mut merged: Vec<(MessageRole, Vec<Value>)> = Vec::new();
    for message in messages {
        let blocks = message.content.iter().filter_map(block_json);
        match merged.last_mut() {
            Some((role, content)) if *role == message.role => content.extend(blocks),
            _ => merged.push((message.role, blocks.collect())),
        }
    }
    let user_turns = merged
        .iter_mut()
        .rev()
        .filter(|(role, _)| *role == MessageRole::User)
        .take(TRANSCRIPT_BREAKPOINTS);
    for (_, content) in user_turns {
        // Thinking blocks and empty text cannot carry a breakpoint.
        if let Some(block) = content.iter_mut().rev().find(|b| cacheable(b)) {
            block["cache_control"] = ephemeral();
        }
    }
    merged
        .into_iter()
        .filter(|(_, content)| !content.is_empty())
        .map(|(role, content)| {
            let role = match role {
                MessageRole::User => "user",
                MessageRole::Assistant => "assistant",
            };
            json!({"role": role, "content": content})
        })
        .collect()
}

fn cacheable(block: &Value) -> bool {
    match block["type"].as_str() {
        Some("text") => block["text"].as_str().is_some_and(|t| !t.is_empty()),
        Some("tool_result" | "tool_use" | "image" | "document") => true,
        _ => false,
    }
}

fn block_json(block: &Block) -> Option<Value> {
    Some(match block {
        // The API rejects empty text blocks.
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": is_error,
        }),
        Block::Thinking {
            thinking,
            signature,
        } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use pretty_assertions::assert_eq;

    #[test]
    fn roles_alternate_and_breakpoints_sit_on_the_prefix_and_transcript() {
        let body = body(
            "m",
            1000,
            &Request {
                system: "sys".into(),
                messages: vec![
                    Message::user("a"),
                    Message::user("b"),
                    Message::assistant("c"),
                    Message::user("d"),
                    Message {
                        role: MessageRole::Assistant,
                        content: vec![
                            Block::Thinking {
                                thinking: "hm".into(),
                                signature: "sig".into(),
                            },
                            Block::ToolUse {
                                id: "t1".into(),
                                name: "read".into(),
                                input: json!({"path": "x"}),
                            },
                        ],
                    },
                    Message {
                        role: MessageRole::User,
                        content: vec![Block::ToolResult {
                            tool_use_id: "t1".into(),
                            content: "file".into(),
                            is_error: false,
                        }],
                    },
                ],
                tools: vec![ToolSpec {
                    name: "read".into(),
                    description: "Read".into(),
                    input_schema: json!({"type":"object","properties":{"n":{"type":"integer","minimum":0}}}),
                }],
                output_schema: Some(json!({"type":"object"})),
                max_output_tokens: None,
            },
        );
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[0]["content"][1]["text"], "b");
        let breakpoints: Vec<(usize, usize)> = messages
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.get("cache_control").is_some())
                    .map(move |(j, _)| (i, j))
            })
            .collect();
        assert_eq!(breakpoints, vec![(2, 0), (4, 0)]);
        assert_eq!(messages[3]["content"][0]["type"], "thinking");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tools"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(
            body["tools"][0]["input_schema"],
            json!({"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false})
        );
        assert_eq!(body["output_config"]["format"]["type"], "json_schema");
        assert_eq!(body["max_tokens"], 1000);
        assert_eq!(body["stream"], true);
        for sampling in ["temperature", "top_p", "top_k"] {
            assert!(body.get(sampling).is_none());
        }
    }
}
