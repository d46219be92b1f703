//! The JSON body of a Chat Completions request: the system prompt as the
//! first message, tool results as `tool` messages, tools as functions, the
//! output schema as a `response_format` (strict for OpenAI and servers not
//! known; non-strict, a union kept, for servers that compile it into a
//! grammar), usage asked for in the stream.

use serde_json::{Value, json};

use crate::schema::{self, Dialect};
use crate::{Block, Message, MessageRole, Request, Server};

/// The schema dialect of `response_format` on `server`: the servers that
/// compile it into a grammar are sent it non-strict, so that only what must
/// be there is required (their grammar writes it first, in order) and a
/// union at the root stays one; OpenAI, and servers not known (which may
/// pass it on to OpenAI), get the strict form.
pub(crate) fn dialect(server: Server) -> Dialect {
    match server {
        Server::LlamaCpp | Server::Vllm | Server::Ollama | Server::LmStudio => Dialect::Grammar,
        Server::OpenAi | Server::Anthropic | Server::Other => Dialect::OpenAiStrict,
    }
}

/// The `json_schema.name` of the structured output (`[a-zA-Z0-9_-]{1,64}`).
const OUTPUT_NAME: &str = "reply";

pub(crate) fn body(
    model: &str,
    max_tokens_field: &str,
    max_tokens: u64,
    request: &Request,
    dialect: Dialect,
) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in request.messages.iter() {
        push_message(&mut messages, message);
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    body[max_tokens_field] = json!(max_tokens);
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                let parameters = schema::normalised(&t.input_schema, Dialect::Anthropic);
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": *parameters,
                    },
                })
            })
            .collect();
        // No `tool_choice`: "auto" is the default, and vLLM refuses an
        // explicit one unless started with --enable-auto-tool-choice.
        body["tools"] = Value::Array(tools);
    }
    if let Some(output) = &request.output_schema {
        let output = schema::normalised(output, dialect);
        let strict = dialect == Dialect::OpenAiStrict;
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": OUTPUT_NAME, "schema": *output, "strict": strict},
        });
    }
    body
}

/// Appends one transcript message: an assistant turn becomes one message
/// with `tool_calls`; a user turn becomes one `tool` message per tool result
/// (they must follow the calls directly) and then its text, if any.
fn push_message(out: &mut Vec<Value>, message: &Message) {
    let mut texts = Vec::new();
    match message.role {
        MessageRole::Assistant => {
            let mut calls = Vec::new();
            for block in &message.content {
                match block {
                    Block::Text { text } => texts.push(text.as_str()),
                    Block::ToolUse { id, name, input } => calls.push(json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": input.to_string()},
                    })),
                    // Other providers' reasoning cannot be sent back here.
                    Block::Thinking { .. }
                    | Block::RedactedThinking { .. }
                    | Block::ToolResult { .. } => {}
                }
            }
            let content = if texts.is_empty() {
                Value::Null
            } else {
                Value::String(texts.concat())
            };
            let mut turn = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                turn["tool_calls"] = Value::Array(calls);
            }
            out.push(turn);
        }
        MessageRole::User => {
            for block in &message.content {
                match block {
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => {
                        let content = if *is_error {
                            format!("[error] {content}")
                        } else {
                            content.clone()
                        };
                        out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                    }
                    Block::Text { text } => texts.push(text.as_str()),
                    _ => {}
                }
            }
            if !texts.is_empty() {
                out.push(json!({"role": "user", "content": texts.join("\n\n")}));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use pretty_assertions::assert_eq;

    #[test]
    fn transcript_tools_and_schema_in_chat_completions_shape() {
        let request = Request {
            system: "sys".into(),
            messages: vec![
                Message::user("brief"),
                Message {
                    role: MessageRole::Assistant,
                    content: vec![
                        Block::Text {
                            text: "looking".into(),
                        },
                        Block::ToolUse {
                            id: "call_1".into(),
                            name: "read".into(),
                            input: json!({"path": "a"}),
                        },
                    ],
                },
                Message {
                    role: MessageRole::User,
                    content: vec![
                        Block::ToolResult {
                            tool_use_id: "call_1".into(),
                            content: "no such file".into(),
                            is_error: true,
                        },
                        Block::Text {
                            text: "[system] note".into(),
                        },
                    ],
                },
            ].into(),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read".into(),
                input_schema: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
            }].into(),
            output_schema: Some(std::sync::Arc::new(json!({
                "type":"object",
                "properties":{"a":{"type":"string"},"b":{"type":"integer"}},
                "required":["a"]
            }))),
            max_output_tokens: None,
        };
        let body = body(
            "qwen",
            "max_completion_tokens",
            500,
            &request,
            Dialect::OpenAiStrict,
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "brief"},
                {"role": "assistant", "content": "looking", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "[error] no such file"},
                {"role": "user", "content": "[system] note"},
            ])
        );
        assert_eq!(body["max_completion_tokens"], 500);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert!(body.get("tool_choice").is_none());
        assert_eq!(
            body["tools"][0]["function"]["parameters"]["additionalProperties"],
            false
        );
        let format = &body["response_format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["strict"], true);
        assert_eq!(format["json_schema"]["name"], "reply");
        assert_eq!(
            format["json_schema"]["schema"]["required"],
            json!(["a", "b"])
        );
        assert_eq!(
            format["json_schema"]["schema"]["properties"]["b"]["type"],
            json!(["integer", "null"])
        );
        assert!(body.get("temperature").is_none());
    }
}
