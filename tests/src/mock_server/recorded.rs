//! A request a mock model server received, with helpers for asserting on it.

use serde_json::Value;

/// One request as the mock saw it (`POST /v1/messages`, `/v1/chat/completions` or
/// `/v1/responses`).
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    /// The lane it was assigned to (by default its `model`).
    pub lane: String,
    /// The JSON request body.
    pub body: Value,
    /// Every request header, names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// When the mock received it (wall clock, to compare with log entries' `at`).
    pub received_at: std::time::SystemTime,
    /// When its body had been read in full, before the mock parsed it: the
    /// moment a model server has the request (monotonic, for timing).
    pub arrived: std::time::Instant,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `model` field, or `""`.
    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or_default()
    }

    /// Whether the request asked for a stream (`"stream": true`).
    pub fn is_stream(&self) -> bool {
        self.body["stream"].as_bool().unwrap_or(false)
    }

    /// The `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The names of the offered `tools`.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `system` prompt, whether a string or a list of text blocks (joined by "\n").
    pub fn system_text(&self) -> String {
        let mut out = Vec::new();
        content_texts(&self.body["system"], false, &mut out);
        out.join("\n")
    }

    /// The words the first `user` message starts with (see [`first_words`]).
    pub fn first_user_text(&self) -> String {
        self.messages()
            .iter()
            .find(|m| m["role"] == "user")
            .map_or_else(String::new, |m| first_words(&m["content"]))
    }

    /// All text of the last `user` message: string content, `text` blocks and the text
    /// of `tool_result` blocks, joined by "\n".
    pub fn last_user_text(&self) -> String {
        let mut out = Vec::new();
        if let Some(msg) = self.messages().iter().rev().find(|m| m["role"] == "user") {
            content_texts(&msg["content"], false, &mut out);
        }
        out.join("\n")
    }

    /// Every text in `messages` (text blocks, tool results, and tool-use inputs as
    /// JSON), joined by "\n": for `contains` asserts.
    pub fn all_text(&self) -> String {
        let mut out = Vec::new();
        for msg in self.messages() {
            content_texts(&msg["content"], true, &mut out);
        }
        out.join("\n")
    }
}

/// The words a message's `content` starts with: the string itself, or its
/// first text block that is not a `<system-reminder>` (the Claude Code CLI
/// puts its environment in those, before the words it was given). Only the
/// first block: later turns may be merged into the same message.
pub fn first_words(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .find(|t| !t.starts_with("<system-reminder>"))
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// Collects the texts of a content value (a string or a list of blocks) into `out`.
fn content_texts(content: &Value, with_tool_inputs: bool, out: &mut Vec<String>) {
    match content {
        Value::String(s) => out.push(s.clone()),
        Value::Array(blocks) => {
            for block in blocks {
                match block["type"].as_str() {
                    Some("text") => {
                        if let Some(t) = block["text"].as_str() {
                            out.push(t.to_owned());
                        }
                    }
                    Some("tool_result") => content_texts(&block["content"], with_tool_inputs, out),
                    Some("tool_use") if with_tool_inputs => out.push(block["input"].to_string()),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::RecordedRequest;
    use serde_json::json;

    fn req(body: serde_json::Value) -> RecordedRequest {
        RecordedRequest {
            lane: "m".into(),
            body,
            headers: vec![("x-api-key".into(), "k".into())],
            received_at: std::time::SystemTime::UNIX_EPOCH,
            arrived: std::time::Instant::now(),
        }
    }

    #[test]
    fn extracts_texts() {
        let r = req(json!({
            "model": "m",
            "system": [{"type": "text", "text": "sys one"}, {"type": "text", "text": "sys two"}],
            "messages": [
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "needle"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "found it"},
                    {"type": "tool_result", "tool_use_id": "t2",
                     "content": [{"type": "text", "text": "block result"}]},
                    {"type": "text", "text": "go on"},
                ]},
            ],
        }));
        assert_eq!(r.header("X-API-KEY"), Some("k"));
        assert_eq!(r.model(), "m");
        assert_eq!(r.system_text(), "sys one\nsys two");
        assert_eq!(r.last_user_text(), "found it\nblock result\ngo on");
        let all = r.all_text();
        assert!(
            all.contains("first question") && all.contains("needle"),
            "{all}"
        );
        assert_eq!(req(json!({"system": "plain"})).system_text(), "plain");
    }
}
