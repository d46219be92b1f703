//! Scripted replies for the mock Anthropic server, and how each is rendered on the wire.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderValue;
use axum::response::Response;
use serde::Serialize;
use serde_json::{Value, json};

use crate::mock_server::wire::{self, split_chunks};
use crate::mock_server::{Gate, Scripted};

/// Token counts reported in `usage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MockUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Default for MockUsage {
    fn default() -> Self {
        MockUsage {
            input_tokens: 100,
            output_tokens: 20,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        }
    }
}

#[derive(Clone, Debug)]
enum Kind {
    Message {
        text: Option<String>,
        tools: Vec<(String, Value)>,
    },
    HttpError {
        status: u16,
        error_type: String,
        message: String,
    },
    StreamError {
        partial: String,
        error_type: String,
        message: String,
    },
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
}

/// One scripted answer to one `POST /v1/messages`, pushed onto a lane with
/// [`super::MockAnthropic::push`]. Built with the constructors below and refined with
/// the modifiers (`usage`, `delay`, `gated`, `header`, ...).
#[derive(Clone, Debug)]
pub struct MockReply {
    kind: Kind,
    usage: MockUsage,
    stop_reason: Option<String>,
    headers: Vec<(String, String)>,
    delay: Option<Duration>,
    gate: Option<Gate>,
    event_delay: Option<Duration>,
    released: Option<Released>,
}

impl Scripted for MockReply {
    const SERVER: &'static str = "mock LLM";
    type Extra = super::Model;

    fn delay(&self) -> Option<Duration> {
        self.delay
    }

    fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    fn released(&self) {
        if let Some(released) = &self.released {
            (released.0)();
        }
    }
}

/// Called when a reply leaves the mock, after its delay and gate.
#[derive(Clone)]
struct Released(std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Released {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Released(..)")
    }
}

impl MockReply {
    /// The same reply as the OpenAI mock's (for the Responses API): text and
    /// tool calls, usage (input with the cache reads, which OpenAI counts
    /// in), errors and raw bodies. Delays and gates are waited out before.
    pub(crate) fn to_openai(&self) -> crate::OpenAiReply {
        use crate::OpenAiReply;
        let u = self.usage;
        let reply = match &self.kind {
            Kind::Message { text, tools } => match tools.split_first() {
                Some(((name, input), rest)) => {
                    let mut reply = OpenAiReply::tool_call(name.clone(), input.clone());
                    for (name, input) in rest {
                        reply = reply.and_tool_call(name.clone(), input.clone());
                    }
                    match text {
                        Some(text) => reply.with_text(text.clone()),
                        None => reply,
                    }
                }
                None => OpenAiReply::text(text.clone().unwrap_or_default()),
            },
            Kind::HttpError {
                status,
                error_type,
                message,
            } => OpenAiReply::http_error(*status, error_type.clone(), message.clone()),
            Kind::StreamError {
                error_type,
                message,
                ..
            } => OpenAiReply::stream_error(error_type.clone(), message.clone()),
            Kind::Raw {
                status,
                content_type,
                body,
            } => OpenAiReply::raw(*status, content_type.clone(), body.clone()),
        };
        reply.usage(
            u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
            u.output_tokens,
            u.cache_read_input_tokens,
        )
    }

    fn new(kind: Kind) -> MockReply {
        MockReply {
            kind,
            usage: MockUsage::default(),
            stop_reason: None,
            headers: Vec::new(),
            delay: None,
            gate: None,
            event_delay: None,
            released: None,
        }
    }

    /// A final text answer (`stop_reason: end_turn`).
    pub fn text(text: impl Into<String>) -> MockReply {
        MockReply::new(Kind::Message {
            text: Some(text.into()),
            tools: Vec::new(),
        })
    }

    /// A final answer whose text is `value` serialised as JSON (structured output).
    pub fn json(value: &impl Serialize) -> MockReply {
        let text = serde_json::to_string(value)
            .unwrap_or_else(|e| panic!("MockReply::json: cannot serialise the value: {e}"));
        MockReply::text(text)
    }

    /// A tool call (`stop_reason: tool_use`); its id `toolu_mock_<n>` is given when sent.
    pub fn tool_use(name: impl Into<String>, input: Value) -> MockReply {
        MockReply::new(Kind::Message {
            text: None,
            tools: vec![(name.into(), input)],
        })
    }

    /// Adds another (parallel) tool call to a tool-use reply.
    pub fn and_tool_use(mut self, name: impl Into<String>, input: Value) -> MockReply {
        match &mut self.kind {
            Kind::Message { tools, .. } => tools.push((name.into(), input)),
            other => panic!("MockReply::and_tool_use on a non-message reply: {other:?}"),
        }
        self
    }

    /// Text before the tool calls of a message reply, or the partial text sent before
    /// the error of a [`MockReply::stream_error`].
    pub fn with_text(mut self, new_text: impl Into<String>) -> MockReply {
        match &mut self.kind {
            Kind::Message { text, .. } => *text = Some(new_text.into()),
            Kind::StreamError { partial, .. } => *partial = new_text.into(),
            other => panic!("MockReply::with_text on a reply without text: {other:?}"),
        }
        self
    }

    /// An HTTP error with the API's error body, e.g. `(529, "overloaded_error", "Overloaded")`.
    pub fn http_error(
        status: u16,
        error_type: impl Into<String>,
        message: impl Into<String>,
    ) -> MockReply {
        MockReply::new(Kind::HttpError {
            status,
            error_type: error_type.into(),
            message: message.into(),
        })
    }

    /// HTTP 200 and a started stream that breaks with an `error` event after some text.
    /// A non-streaming request gets the matching HTTP error instead.
    pub fn stream_error(error_type: impl Into<String>, message: impl Into<String>) -> MockReply {
        MockReply::new(Kind::StreamError {
            partial: "Partial answer ".to_owned(),
            error_type: error_type.into(),
            message: message.into(),
        })
    }

    /// Any status, content type and body, sent as is.
    pub fn raw(
        status: u16,
        content_type: impl Into<String>,
        body: impl Into<Vec<u8>>,
    ) -> MockReply {
        MockReply::new(Kind::Raw {
            status,
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// Sets `usage` (defaults: 100 in, 20 out, no cache).
    pub fn usage(
        mut self,
        input_tokens: u64,
        output_tokens: u64,
        cache_creation: u64,
        cache_read: u64,
    ) -> MockReply {
        self.usage = MockUsage {
            input_tokens,
            output_tokens,
            cache_creation_input_tokens: cache_creation,
            cache_read_input_tokens: cache_read,
        };
        self
    }

    /// Overrides `stop_reason` (e.g. `max_tokens`, `refusal`).
    pub fn stop_reason(mut self, stop_reason: impl Into<String>) -> MockReply {
        self.stop_reason = Some(stop_reason.into());
        self
    }

    /// Adds a response header (e.g. `retry-after`, `x-should-retry`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> MockReply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Waits this long before answering.
    pub fn delay(mut self, delay: Duration) -> MockReply {
        self.delay = Some(delay);
        self
    }

    /// Calls `f` when the answer leaves, after any `delay` and gate: the
    /// moment a model server would hand it back.
    pub fn on_release(mut self, f: impl Fn() + Send + Sync + 'static) -> MockReply {
        self.released = Some(Released(std::sync::Arc::new(f)));
        self
    }

    /// In a streamed answer, waits this long before each SSE event (slow streams).
    pub fn event_delay(mut self, delay: Duration) -> MockReply {
        self.event_delay = Some(delay);
        self
    }

    /// Holds the answer until `gate` is opened (after any `delay`).
    pub fn gated(mut self, gate: Gate) -> MockReply {
        self.gate = Some(gate);
        self
    }

    /// Renders the HTTP response for a request to `model`.
    pub(super) fn render(&self, ctx: &RenderCtx<'_>, stream: bool) -> Response {
        match &self.kind {
            Kind::Raw {
                status,
                content_type,
                body,
            } => self.respond(*status, content_type, ctx, Body::from(body.clone())),
            Kind::HttpError {
                status,
                error_type,
                message,
            } => self.error_response(*status, error_type, message, ctx),
            Kind::StreamError {
                error_type,
                message,
                ..
            } if !stream => self.error_response(status_for(error_type), error_type, message, ctx),
            Kind::Message { .. } if !stream => {
                let body = self.message_json(ctx).to_string();
                self.respond(200, "application/json", ctx, Body::from(body))
            }
            Kind::Message { .. } | Kind::StreamError { .. } => {
                let events = self
                    .sse_events(ctx)
                    .into_iter()
                    .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                    .collect();
                let body = wire::sse(events, self.event_delay);
                let mut resp = self.respond(200, "text/event-stream", ctx, body);
                resp.headers_mut()
                    .insert("cache-control", HeaderValue::from_static("no-cache"));
                resp
            }
        }
    }

    fn error_response(
        &self,
        status: u16,
        error_type: &str,
        message: &str,
        ctx: &RenderCtx<'_>,
    ) -> Response {
        let body = error_body(error_type, message, &ctx.request_id).to_string();
        self.respond(status, "application/json", ctx, Body::from(body))
    }

    fn respond(
        &self,
        status: u16,
        content_type: &str,
        ctx: &RenderCtx<'_>,
        body: Body,
    ) -> Response {
        let fixed = std::iter::once(("request-id", ctx.request_id.as_str()));
        let extra = self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        wire::respond(status, content_type, fixed.chain(extra), body)
    }

    fn default_stop_reason(&self) -> &str {
        match (&self.stop_reason, &self.kind) {
            (Some(reason), _) => reason,
            (None, Kind::Message { tools, .. }) if !tools.is_empty() => "tool_use",
            _ => "end_turn",
        }
    }

    /// The content blocks, with tool ids assigned now.
    fn blocks(&self, ctx: &RenderCtx<'_>) -> Vec<Value> {
        let mut blocks = Vec::new();
        match &self.kind {
            Kind::Message { text, tools } => {
                if let Some(text) = text {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for (name, input) in tools {
                    blocks.push(json!({
                        "type": "tool_use", "id": ctx.tool_id(), "name": name, "input": input,
                    }));
                }
            }
            Kind::StreamError { partial, .. } => {
                blocks.push(json!({"type": "text", "text": partial}));
            }
            Kind::HttpError { .. } | Kind::Raw { .. } => {}
        }
        blocks
    }

    fn message_json(&self, ctx: &RenderCtx<'_>) -> Value {
        let u = &self.usage;
        json!({
            "id": ctx.message_id,
            "type": "message",
            "role": "assistant",
            "model": ctx.model,
            "content": self.blocks(ctx),
            "stop_reason": self.default_stop_reason(),
            "stop_sequence": null,
            "usage": {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_creation_input_tokens": u.cache_creation_input_tokens,
                "cache_read_input_tokens": u.cache_read_input_tokens,
            },
        })
    }

    /// The named SSE events of a streamed answer, in wire order.
    fn sse_events(&self, ctx: &RenderCtx<'_>) -> Vec<(&'static str, Value)> {
        let u = &self.usage;
        let mut events = vec![
            (
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": ctx.message_id, "type": "message", "role": "assistant",
                    "model": ctx.model, "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {
                        "input_tokens": u.input_tokens,
                        "output_tokens": 1,
                        "cache_creation_input_tokens": u.cache_creation_input_tokens,
                        "cache_read_input_tokens": u.cache_read_input_tokens,
                    },
                }}),
            ),
            ("ping", json!({"type": "ping"})),
        ];
        for (index, block) in self.blocks(ctx).into_iter().enumerate() {
            let (start, deltas) = if block["type"] == "tool_use" {
                let input = block["input"].to_string();
                let mut fragments = vec![String::new()];
                fragments.extend(split_chunks(&input));
                let start = json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
                let deltas: Vec<Value> = fragments
                    .into_iter()
                    .map(|f| json!({"type": "input_json_delta", "partial_json": f}))
                    .collect();
                (start, deltas)
            } else {
                let text = block["text"].as_str().unwrap_or_default();
                let deltas = split_chunks(text)
                    .into_iter()
                    .map(|t| json!({"type": "text_delta", "text": t}))
                    .collect();
                (json!({"type": "text", "text": ""}), deltas)
            };
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            ));
            for delta in deltas {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": delta}),
                ));
            }
            if let Kind::StreamError {
                error_type,
                message,
                ..
            } = &self.kind
            {
                let error =
                    json!({"type": "error", "error": {"type": error_type, "message": message}});
                events.push(("error", error));
                return events;
            }
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        events.push((
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": self.default_stop_reason(), "stop_sequence": null},
                "usage": {"output_tokens": u.output_tokens},
            }),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        events
    }
}

/// Per-response values the server hands to [`MockReply::render`].
pub(super) struct RenderCtx<'a> {
    pub model: String,
    pub message_id: String,
    pub request_id: String,
    pub tool_counter: &'a AtomicU64,
}

impl RenderCtx<'_> {
    fn tool_id(&self) -> String {
        let n = self.tool_counter.fetch_add(1, Ordering::Relaxed) + 1;
        format!("toolu_mock_{n}")
    }
}

/// The API's error body.
pub(super) fn error_body(error_type: &str, message: &str, request_id: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    })
}

/// The HTTP status the API uses for an error type.
fn status_for(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "conflict_error" => 409,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}
