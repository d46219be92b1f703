//! Scripted replies for the mock Chat Completions server and how each is
//! rendered: a `chat.completion` JSON body, or `data:` chunks with tool-call
//! fragments by index, the usage chunk (`choices: []`) and `[DONE]`. The
//! same replies answer the Responses API (`POST /v1/responses`, what the
//! Codex CLI speaks) as its SSE events: `response.created`,
//! `response.output_item.added`, `response.output_text.delta`,
//! `response.output_item.done` per item (a message, or a `function_call`),
//! and `response.completed` with `usage`.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use serde::Serialize;
use serde_json::{Value, json};

use crate::mock_server::wire::{self, split_chunks};
use crate::mock_server::{Gate, Scripted};

#[derive(Clone, Debug)]
enum Kind {
    Message {
        text: Option<String>,
        calls: Vec<(String, Value)>,
    },
    HttpError {
        status: u16,
        error_type: String,
        message: String,
    },
    /// 200, some content chunks, then an error chunk.
    StreamError { error_type: String, message: String },
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// The turn's final answer, given the way the request asks for it.
    Answer(Value),
}

/// One scripted answer, pushed onto a lane with [`super::MockOpenAi::push`].
#[derive(Clone, Debug)]
pub struct OpenAiReply {
    kind: Kind,
    /// `(prompt_tokens, completion_tokens, cached_tokens)`; `None`: no usage sent at all.
    usage: Option<(u64, u64, u64)>,
    finish_reason: Option<String>,
    headers: Vec<(String, String)>,
    /// Close the stream after this many chunks, without `[DONE]`.
    cut_after: Option<usize>,
    delay: Option<Duration>,
    gate: Option<Gate>,
    event_delay: Option<Duration>,
    /// The output tokens this reply takes: under a smaller cap it is cut off.
    pub(super) needs_tokens: Option<u64>,
}

impl Scripted for OpenAiReply {
    const SERVER: &'static str = "mock OpenAI";
    type Extra = super::Copied;

    fn delay(&self) -> Option<Duration> {
        self.delay
    }

    fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }
}

impl OpenAiReply {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            usage: Some((100, 20, 0)),
            finish_reason: None,
            headers: Vec::new(),
            cut_after: None,
            delay: None,
            gate: None,
            event_delay: None,
            needs_tokens: None,
        }
    }

    /// The turn's final answer, `value`, as a model that follows its
    /// instructions gives it: a call to the `respond` tool when the request
    /// offers one, else `value` as JSON text.
    pub fn answer(value: &impl Serialize) -> Self {
        let value = serde_json::to_value(value)
            .unwrap_or_else(|e| panic!("OpenAiReply::answer: cannot serialise the value: {e}"));
        Self::new(Kind::Answer(value))
    }

    /// This reply takes `tokens` output tokens: a request whose cap is
    /// smaller gets it cut off (`finish_reason: length`, half the text, no
    /// tool calls) and the reply stays first on its lane, as the same model
    /// would write it again.
    pub fn needs_tokens(mut self, tokens: u64) -> Self {
        self.needs_tokens = Some(tokens);
        self
    }

    /// The reply as it is sent for `request`: an answer in the form the
    /// request asks for; under a grammar (`semantics`) no tool call.
    pub(super) fn resolve(&self, request: &Value, semantics: super::Semantics) -> Self {
        let mut reply = self.clone();
        if let Kind::Answer(value) = &self.kind {
            let offers_respond = request["tools"]
                .as_array()
                .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "respond"));
            reply.kind = if offers_respond {
                Kind::Message {
                    text: None,
                    calls: vec![("respond".to_owned(), value.clone())],
                }
            } else {
                Kind::Message {
                    text: Some(value.to_string()),
                    calls: Vec::new(),
                }
            };
        }
        if semantics.forbids_tool_calls(request) && matches!(reply.kind, Kind::Message { .. }) {
            reply = super::semantics::constrained(&reply, request);
        }
        reply
    }

    /// The reply cut off at the output cap: half its text (or of its first
    /// call's arguments), no tool calls, `finish_reason: length`.
    pub(super) fn cut(&self) -> Self {
        let whole = match &self.kind {
            Kind::Message { text, calls } => text
                .clone()
                .filter(|t| !t.is_empty())
                .or_else(|| calls.first().map(|(_, input)| input.to_string()))
                .unwrap_or_default(),
            _ => String::new(),
        };
        let half: String = whole.chars().take(whole.chars().count() / 2).collect();
        let mut cut = self.with_kind_text(half);
        cut.finish_reason = Some("length".to_owned());
        cut
    }

    /// The text of a message reply.
    pub(super) fn text_of(&self) -> Option<String> {
        match &self.kind {
            Kind::Message { text, .. } => text.clone(),
            _ => None,
        }
    }

    /// This reply with only `text`, no tool calls.
    pub(super) fn with_kind_text(&self, text: String) -> Self {
        let mut reply = self.clone();
        reply.kind = Kind::Message {
            text: Some(text),
            calls: Vec::new(),
        };
        reply.finish_reason = None;
        reply
    }

    /// A final text answer (`finish_reason: stop`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Kind::Message {
            text: Some(text.into()),
            calls: Vec::new(),
        })
    }

    /// A final answer whose text is `value` as JSON (structured output).
    pub fn json(value: &impl Serialize) -> Self {
        let text = serde_json::to_string(value)
            .unwrap_or_else(|e| panic!("OpenAiReply::json: cannot serialise the value: {e}"));
        Self::text(text)
    }

    /// A tool call (`finish_reason: tool_calls`); its id `call_mock_<n>_<i>` is given when sent.
    pub fn tool_call(name: impl Into<String>, input: Value) -> Self {
        Self::new(Kind::Message {
            text: None,
            calls: vec![(name.into(), input)],
        })
    }

    /// Adds another (parallel) tool call.
    pub fn and_tool_call(mut self, name: impl Into<String>, input: Value) -> Self {
        match &mut self.kind {
            Kind::Message { calls, .. } => calls.push((name.into(), input)),
            other => panic!("OpenAiReply::and_tool_call on a non-message reply: {other:?}"),
        }
        self
    }

    /// Text before the tool calls.
    pub fn with_text(mut self, new_text: impl Into<String>) -> Self {
        match &mut self.kind {
            Kind::Message { text, .. } => *text = Some(new_text.into()),
            other => panic!("OpenAiReply::with_text on a reply without text: {other:?}"),
        }
        self
    }

    /// An HTTP error with OpenAI's error body.
    pub fn http_error(
        status: u16,
        error_type: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(Kind::HttpError {
            status,
            error_type: error_type.into(),
            message: message.into(),
        })
    }

    /// HTTP 200, a little text, then `data: {"error": …}` and the end of the stream.
    pub fn stream_error(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Kind::StreamError {
            error_type: error_type.into(),
            message: message.into(),
        })
    }

    /// Any status, content type and body, sent as is (recorded SSE fixtures).
    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Self::new(Kind::Raw {
            status,
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// Sets the usage (default 100 prompt, 20 completion, 0 cached).
    pub fn usage(mut self, prompt: u64, completion: u64, cached: u64) -> Self {
        self.usage = Some((prompt, completion, cached));
        self
    }

    /// The usage's prompt tokens set to `prompt` (when it sends usage).
    pub(super) fn with_prompt_tokens(mut self, prompt: u64) -> Self {
        if let Some((_, completion, cached)) = self.usage {
            self.usage = Some((prompt, completion, cached));
        }
        self
    }

    /// Sends no usage at all, as some local servers do.
    pub fn no_usage(mut self) -> Self {
        self.usage = None;
        self
    }

    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Adds a response header (e.g. `retry-after`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Ends the stream after `n` chunks, with no finish reason and no `[DONE]`.
    pub fn cut_after(mut self, n: usize) -> Self {
        self.cut_after = Some(n);
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    pub fn event_delay(mut self, delay: Duration) -> Self {
        self.event_delay = Some(delay);
        self
    }

    pub fn gated(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    pub(super) fn render(&self, request: &Value, n: u64) -> Response {
        let stream = request["stream"].as_bool().unwrap_or(false);
        let include_usage = request["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false);
        let model = request["model"].as_str().unwrap_or("mock");
        match &self.kind {
            Kind::Raw {
                status,
                content_type,
                body,
            } => respond(
                *status,
                content_type,
                &self.headers,
                Body::from(body.clone()),
            ),
            Kind::HttpError {
                status,
                error_type,
                message,
            } => error_response(*status, error_type, message, &self.headers),
            Kind::Answer(_) => {
                panic!("OpenAiReply::render: an answer is resolved before it is rendered")
            }
            Kind::StreamError {
                error_type,
                message,
            } if !stream => error_response(500, error_type, message, &self.headers),
            Kind::Message { .. } if !stream => {
                let body = self.completion_json(model, n).to_string();
                respond(200, "application/json", &self.headers, Body::from(body))
            }
            Kind::Message { .. } | Kind::StreamError { .. } => {
                let mut chunks = self.chunks(model, n, include_usage);
                if let Some(cut) = self.cut_after {
                    chunks.truncate(cut);
                }
                let events = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                respond(
                    200,
                    "text/event-stream",
                    &self.headers,
                    wire::sse(events, self.event_delay),
                )
            }
        }
    }

    /// The reply as a streamed Responses API answer (`POST /v1/responses`).
    pub(crate) fn render_responses(&self, n: u64) -> Response {
        match &self.kind {
            Kind::Raw {
                status,
                content_type,
                body,
            } => respond(
                *status,
                content_type,
                &self.headers,
                Body::from(body.clone()),
            ),
            Kind::HttpError {
                status,
                error_type,
                message,
            } => error_response(*status, error_type, message, &self.headers),
            Kind::Answer(_) => {
                panic!("OpenAiReply::render_responses: an answer is resolved before it is rendered")
            }
            Kind::Message { .. } | Kind::StreamError { .. } => {
                let mut events = self.response_events(n);
                if let Some(cut) = self.cut_after {
                    events.truncate(cut);
                }
                let events = events
                    .iter()
                    .map(|e| {
                        let kind = e["type"].as_str().unwrap_or_default();
                        format!("event: {kind}\ndata: {e}\n\n")
                    })
                    .collect();
                respond(
                    200,
                    "text/event-stream",
                    &self.headers,
                    wire::sse(events, self.event_delay),
                )
            }
        }
    }

    /// The Responses API events of a streamed answer, in wire order.
    fn response_events(&self, n: u64) -> Vec<Value> {
        let id = format!("resp_mock_{n}");
        let mut out = vec![json!({"type": "response.created", "response": {"id": id}})];
        let (text, calls) = match &self.kind {
            Kind::Message { text, calls } => (text.clone(), calls.clone()),
            Kind::StreamError { .. } => (Some("Partial answer ".to_owned()), Vec::new()),
            _ => (None, Vec::new()),
        };
        let mut index = 0;
        if let Some(text) = text.filter(|t| !t.is_empty() || calls.is_empty()) {
            let item_id = format!("msg_mock_{n}");
            out.push(
                json!({"type": "response.output_item.added", "output_index": index,
                "item": {"type": "message", "id": item_id, "role": "assistant", "content": []}}),
            );
            for piece in split_chunks(&text) {
                out.push(
                    json!({"type": "response.output_text.delta", "item_id": item_id,
                    "output_index": index, "content_index": 0, "delta": piece}),
                );
            }
            if let Kind::StreamError {
                error_type,
                message,
            } = &self.kind
            {
                out.push(json!({"type": "response.failed", "response": {"id": id,
                    "error": {"code": error_type, "message": message}}}));
                return out;
            }
            out.push(json!({"type": "response.output_item.done", "output_index": index,
                "item": {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}}));
            index += 1;
        }
        for (i, (name, input)) in calls.iter().enumerate() {
            let item = json!({"type": "function_call", "id": format!("fc_mock_{n}_{i}"),
                "call_id": format!("call_mock_{n}_{i}"), "name": name,
                "arguments": input.to_string(), "status": "completed"});
            out.push(
                json!({"type": "response.output_item.added", "output_index": index, "item": item}),
            );
            out.push(
                json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            );
            index += 1;
        }
        let mut response = json!({"id": id, "status": "completed"});
        if let Some((prompt, completion, cached)) = self.usage {
            response["usage"] = json!({
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            });
        }
        out.push(json!({"type": "response.completed", "response": response}));
        out
    }

    fn finish(&self) -> &str {
        match (&self.finish_reason, &self.kind) {
            (Some(reason), _) => reason,
            (None, Kind::Message { calls, .. }) if !calls.is_empty() => "tool_calls",
            _ => "stop",
        }
    }

    fn usage_json(&self) -> Value {
        match self.usage {
            Some((prompt, completion, cached)) => json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            }),
            None => Value::Null,
        }
    }

    fn completion_json(&self, model: &str, n: u64) -> Value {
        let Kind::Message { text, calls } = &self.kind else {
            return Value::Null;
        };
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, input))| {
                json!({
                    "id": format!("call_mock_{n}_{i}"), "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                })
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": text});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        let mut body = json!({
            "id": format!("chatcmpl-mock-{n}"), "object": "chat.completion", "created": 1_760_000_000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish()}],
        });
        if self.usage.is_some() {
            body["usage"] = self.usage_json();
        }
        body
    }

    /// The `data:` payloads of a streamed answer, in wire order.
    fn chunks(&self, model: &str, n: u64, include_usage: bool) -> Vec<String> {
        let chunk = |choices: Value| {
            let mut c = json!({
                "id": format!("chatcmpl-mock-{n}"), "object": "chat.completion.chunk",
                "created": 1_760_000_000, "model": model, "choices": choices,
            });
            if include_usage && self.usage.is_some() {
                c["usage"] = Value::Null;
            }
            c.to_string()
        };
        let delta = |d: Value| json!([{"index": 0, "delta": d, "finish_reason": null}]);
        let mut out = vec![chunk(delta(json!({"role": "assistant", "content": ""})))];
        let (text, calls) = match &self.kind {
            Kind::Message { text, calls } => (text.clone(), calls.clone()),
            Kind::StreamError { .. } => (Some("Partial answer ".to_owned()), Vec::new()),
            _ => (None, Vec::new()),
        };
        for piece in split_chunks(text.as_deref().unwrap_or_default()) {
            if !piece.is_empty() {
                out.push(chunk(delta(json!({"content": piece}))));
            }
        }
        if let Kind::StreamError {
            error_type,
            message,
        } = &self.kind
        {
            out.push(json!({"error": {"message": message, "type": error_type, "param": null, "code": null}}).to_string());
            return out;
        }
        for (i, (name, input)) in calls.iter().enumerate() {
            let id = format!("call_mock_{n}_{i}");
            out.push(chunk(delta(json!({"tool_calls": [{
                "index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""},
            }]}))));
            for fragment in split_chunks(&input.to_string()) {
                out.push(chunk(delta(json!({"tool_calls": [{
                    "index": i, "function": {"arguments": fragment},
                }]}))));
            }
        }
        out.push(chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": self.finish()}]),
        ));
        if include_usage && self.usage.is_some() {
            let mut last = json!({
                "id": format!("chatcmpl-mock-{n}"), "object": "chat.completion.chunk",
                "created": 1_760_000_000, "model": model, "choices": [],
            });
            last["usage"] = self.usage_json();
            out.push(last.to_string());
        }
        out.push("[DONE]".to_owned());
        out
    }
}

fn respond(status: u16, content_type: &str, extra: &[(String, String)], body: Body) -> Response {
    let extra = extra.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    wire::respond(status, content_type, extra, body)
}

/// OpenAI's error body, with the given status.
pub(super) fn error_response(
    status: u16,
    error_type: &str,
    message: &str,
    extra: &[(String, String)],
) -> Response {
    let body =
        json!({"error": {"message": message, "type": error_type, "param": null, "code": null}});
    respond(
        status,
        "application/json",
        extra,
        Body::from(body.to_string()),
    )
}

/// llama-server's refusal of a request larger than its slot's context
/// (`exceed_context_size_error`, with the counts recent builds add).
pub(super) fn exceeds_context(prompt: u64, window: u64) -> Response {
    let body = json!({"error": {
        "code": 400,
        "message": format!(
            "request ({prompt} tokens) exceeds the available context size ({window} tokens)"
        ),
        "type": "exceed_context_size_error",
        "n_prompt_tokens": prompt,
        "n_ctx": window,
    }});
    respond(400, "application/json", &[], Body::from(body.to_string()))
}

pub(super) fn shutting_down() -> Response {
    error_response(503, "server_error", "mock: shutting down", &[])
}
