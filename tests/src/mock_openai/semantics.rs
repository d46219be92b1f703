//! What the mock server does with a request's `tools`, `response_format`
//! and output cap before it answers, as the real servers do: OpenAI keeps
//! tool calls free beside a `response_format`; llama.cpp's server and Ollama
//! turn the schema into a grammar that holds from the first token, so with
//! both in one request no tool call can come out, only schema-shaped JSON
//! (measured on llama-server, ECOSYSTEM.md §3.4; ollama/ollama#8095).

use serde_json::{Value, json};

use super::reply::OpenAiReply;

/// Which server's behaviour the mock copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Semantics {
    /// `response_format` constrains only a text answer; tools stay free.
    #[default]
    OpenAi,
    /// `response_format` is a grammar over the whole reply (llama-server).
    LlamaCpp,
    /// The same as llama.cpp (`format` / `response_format` become a grammar).
    Ollama,
}

impl Semantics {
    /// True when this server would constrain `request`'s reply to its schema
    /// so that no tool call can be generated.
    pub fn forbids_tool_calls(self, request: &Value) -> bool {
        let has_tools = request["tools"].as_array().is_some_and(|t| !t.is_empty());
        let has_format = request["response_format"]["type"].is_string();
        self != Semantics::OpenAi && has_tools && has_format
    }
}

/// The request's output cap (`max_completion_tokens`, else `max_tokens`).
pub fn output_cap(request: &Value) -> Option<u64> {
    request["max_completion_tokens"]
        .as_u64()
        .or_else(|| request["max_tokens"].as_u64())
}

/// What a grammar-constrained server sends for `reply`: no tool calls; the
/// reply's text if it is JSON already, else the plainest instance of the schema.
pub(super) fn constrained(reply: &OpenAiReply, request: &Value) -> OpenAiReply {
    let schema = &request["response_format"]["json_schema"]["schema"];
    let text = reply
        .text_of()
        .filter(|t| serde_json::from_str::<Value>(t).is_ok_and(|v| v.is_object()))
        .unwrap_or_else(|| instance(schema).to_string());
    reply.with_kind_text(text)
}

/// The plainest value a grammar for `schema` lets through.
fn instance(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = schema["anyOf"].as_array().and_then(|e| e.first()) {
        return instance(first);
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds
            .iter()
            .find(|k| *k != "null")
            .and_then(Value::as_str)
            .unwrap_or("null"),
        Value::String(kind) => kind.as_str(),
        _ => "object",
    };
    match kind {
        "object" => {
            let mut out = serde_json::Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    out.insert(name.clone(), instance(property));
                }
            }
            Value::Object(out)
        }
        "string" => json!("ok"),
        "boolean" => json!(true),
        "integer" | "number" => json!(0),
        "array" => json!([]),
        _ => Value::Null,
    }
}
