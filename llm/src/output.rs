//! How a turn's typed output is asked of the model when the request carries
//! tools: as a decoding constraint (`response_format`, `output_config`), as a
//! final-answer tool (`respond`), or as a schema in the system prompt. Servers
//! that turn `response_format` into a grammar (llama.cpp, vLLM, Ollama) apply
//! it from the first token, so with tools in the same request the model can
//! never call one; those get the final-answer tool. Small models that never
//! write their template's call markup get the union mode: no `tools` in the
//! request, and a `response_format` that is one member per tool
//! (`{name, arguments}`) plus the final answer, so every reply is one step
//! the grammar keeps valid (`../shared/ECOSYSTEM.md` §3.4). The request is reshaped
//! before it is sent and the reply shaped back, so callers always see the
//! answer as the reply's text and never see the `respond` call.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::{
    Block, LlmError, Provider, Request, Response, Result, StopReason, StreamEvent, ToolSpec,
};

/// The name of the final-answer tool in [`Mode::Tool`].
pub const RESPOND_TOOL: &str = "respond";

/// The `structured_output` setting: how the typed output of a turn is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StructuredOutput {
    /// Chosen per server (see [`StructuredOutput::resolve`]).
    #[default]
    Auto,
    /// A strict `response_format` (Anthropic: `output_config.format`) on every call.
    ResponseFormat,
    /// A final-answer tool on calls with tools; `response_format` on calls without.
    Tool,
    /// The schema in the system prompt, no decoding constraint, JSON read from the text.
    Prompt,
    /// On calls with tools, no `tools` field: each reply is one tool call or
    /// the final answer, written as JSON under a `response_format` union.
    Union,
}

impl StructuredOutput {
    pub const ALLOWED: &'static str =
        "\"auto\", \"response_format\", \"tool\", \"prompt\" or \"union\"";

    /// The mode of one call on `server`; `has_tools` says whether it offers tools.
    ///
    /// `auto`: with tools, `response_format` on servers that keep tool calls
    /// free beside it (OpenAI, Anthropic), the final-answer tool everywhere
    /// else (llama.cpp, vLLM, Ollama, LM Studio and any server not known);
    /// without tools, `response_format` on every server.
    pub fn resolve(self, server: Server, has_tools: bool) -> Mode {
        match self {
            Self::ResponseFormat => Mode::ResponseFormat,
            Self::Prompt => Mode::Prompt,
            Self::Tool if has_tools => Mode::Tool,
            Self::Union if has_tools => Mode::Union,
            Self::Tool | Self::Union => Mode::ResponseFormat,
            Self::Auto if !has_tools => Mode::ResponseFormat,
            Self::Auto => match server {
                Server::OpenAi | Server::Anthropic => Mode::ResponseFormat,
                Server::LlamaCpp | Server::Vllm | Server::Ollama | Server::LmStudio => Mode::Tool,
                Server::Other => Mode::Tool,
            },
        }
    }
}

impl FromStr for StructuredOutput {
    type Err = LlmError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Self::Auto,
            "response_format" => Self::ResponseFormat,
            "tool" => Self::Tool,
            "prompt" => Self::Prompt,
            "union" => Self::Union,
            other => {
                return Err(LlmError::Config(format!(
                    "structured_output must be {}, not {other:?}",
                    Self::ALLOWED
                )));
            }
        })
    }
}

/// The kind of server behind a model's base URL: it decides what `auto` means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Server {
    OpenAi,
    Anthropic,
    LlamaCpp,
    Vllm,
    Ollama,
    LmStudio,
    /// An OpenAI-compatible server not known here.
    #[default]
    Other,
}

impl Server {
    pub const ALLOWED: &'static str =
        "\"openai\", \"anthropic\", \"llama.cpp\", \"vllm\", \"ollama\", \"lmstudio\" or \"other\"";

    /// The server a provider and base URL point at, when the config names
    /// none: Anthropic's provider, and OpenAI's own host, are known; every
    /// other OpenAI-compatible server is [`Server::Other`] (ports are not
    /// guessed from: `auto` treats every local server alike anyway).
    pub fn detect(provider: Provider, base_url: &str) -> Self {
        match provider {
            Provider::Anthropic => Self::Anthropic,
            Provider::OpenAi => {
                let host = base_url
                    .split_once("://")
                    .map_or(base_url, |(_, rest)| rest)
                    .split(['/', ':'])
                    .next()
                    .unwrap_or_default();
                if host.eq_ignore_ascii_case("api.openai.com") {
                    Self::OpenAi
                } else {
                    Self::Other
                }
            }
        }
    }
}

impl FromStr for Server {
    type Err = LlmError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "openai" => Self::OpenAi,
            "anthropic" => Self::Anthropic,
            "llama.cpp" | "llamacpp" | "llama-server" => Self::LlamaCpp,
            "vllm" => Self::Vllm,
            "ollama" => Self::Ollama,
            "lmstudio" | "lm-studio" => Self::LmStudio,
            "other" => Self::Other,
            other => {
                return Err(LlmError::Config(format!(
                    "server must be {}, not {other:?}",
                    Self::ALLOWED
                )));
            }
        })
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::LlamaCpp => "llama.cpp",
            Self::Vllm => "vllm",
            Self::Ollama => "ollama",
            Self::LmStudio => "lmstudio",
            Self::Other => "other",
        })
    }
}

/// How one call asks for its typed output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ResponseFormat,
    Tool,
    Prompt,
    Union,
}

/// Replies without a native tool call, none ever with one, after which a
/// [`Habit`] asks in [`Mode::Union`].
pub const WRITTEN_LIMIT: u32 = 2;

/// Whether a model writes native tool calls, learnt from its replies. Under
/// `structured_output = "auto"`, the full profile and a local server, calls
/// with tools go in [`Mode::Tool`]; a model that answered [`WRITTEN_LIMIT`]
/// of them without a native call (its calls written out as text, or none),
/// and never with one, is asked in [`Mode::Union`] from then on: it is one
/// whose calls come out only under the union's grammar (a small model; the
/// ecosystem notes, §3.4). One per client, so every Orchestrator of a
/// worker, which share its model, learns from the first ones' replies.
#[derive(Debug, Default)]
pub(crate) struct Habit {
    native: std::sync::atomic::AtomicBool,
    without: std::sync::atomic::AtomicU32,
}

impl Habit {
    /// The mode of a call the config would send in `base`; `adaptive`
    /// when the config lets the mode follow the model
    /// ([`crate::ModelConfig::adaptive_mode`]).
    pub(crate) fn mode(&self, base: Mode, adaptive: bool) -> Mode {
        use std::sync::atomic::Ordering::Relaxed;
        if adaptive
            && base == Mode::Tool
            && !self.native.load(Relaxed)
            && self.without.load(Relaxed) >= WRITTEN_LIMIT
        {
            Mode::Union
        } else {
            base
        }
    }

    /// Learns from `raw`, a reply (before it is unshaped) to a call sent in `mode`.
    pub(crate) fn learn(&self, mode: Mode, adaptive: bool, raw: &Response, model: &str) {
        use std::sync::atomic::Ordering::Relaxed;
        if !adaptive || mode != Mode::Tool {
            return;
        }
        if raw.content.iter().any(is_tool_use) {
            self.native.store(true, Relaxed);
        } else if self.without.fetch_add(1, Relaxed) + 1 == WRITTEN_LIMIT
            && !self.native.load(Relaxed)
        {
            tracing::warn!(
                model,
                "the model answered {WRITTEN_LIMIT} calls with tools without a native tool \
                 call: from now on its calls are asked for as union steps \
                 (structured_output = \"union\"; set structured_output to keep another mode)"
            );
        }
    }
}

/// The final answer's arguments in [`Mode::Union`] when the request has no
/// output schema (a subagent's report): `{"text": …}`.
fn text_answer_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {"text": {"type": "string", "description": "Your report, in full."}},
        "required": ["text"],
        "additionalProperties": false,
    })
}

/// Whether `mode` leaves `request` and its reply as they are.
fn untouched(request: &Request, mode: Mode) -> bool {
    match mode {
        Mode::ResponseFormat => true,
        Mode::Union => request.tools.is_empty(),
        Mode::Tool | Mode::Prompt => request.output_schema.is_none() && request.tools.is_empty(),
    }
}

/// The request as it goes on the wire in `mode`. Everything added is a pure
/// function of the request's schema, so the tools and system prompt stay
/// byte-identical from call to call (the prompt cache keys on them).
/// A request the mode leaves as it is (no schema, or a schema the API takes
/// natively) is borrowed: cloning it copied the whole transcript per call.
pub(crate) fn shape(request: &Request, mode: Mode) -> Cow<'_, Request> {
    if mode == Mode::Union && !request.tools.is_empty() {
        return Cow::Owned(union(request));
    }
    let Some(schema) = &request.output_schema else {
        return Cow::Borrowed(request);
    };
    if mode == Mode::ResponseFormat {
        return Cow::Borrowed(request);
    }
    let mut wire = request.clone();
    match mode {
        Mode::ResponseFormat | Mode::Union => {}
        Mode::Tool => {
            wire.output_schema = None;
            let mut tools = wire.tools.to_vec();
            tools.push(ToolSpec {
                name: RESPOND_TOOL.to_owned(),
                description: "End your turn with your final answer: its arguments are the \
                              answer. Call it alone, once the results of your other tool calls \
                              are in."
                    .to_owned(),
                input_schema: Value::clone(schema),
            });
            wire.tools = tools.into();
            append(
                &mut wire.system,
                &format!(
                    "# Ending a turn\n\nYour final answer is a call to the `{RESPOND_TOOL}` tool, \
                     its arguments being the JSON object described above. Do not write that \
                     object as text."
                ),
            );
        }
        Mode::Prompt => {
            wire.output_schema = None;
            append(
                &mut wire.system,
                &format!(
                    "# Reply format\n\nWhen you call no tool, your reply must be exactly one \
                     JSON object, and nothing else, valid against this JSON Schema:\n\n{schema}"
                ),
            );
        }
    }
    Cow::Owned(wire)
}

/// The request in [`Mode::Union`]: no tools; the output schema one member
/// per tool plus the final answer; the tools listed in the system prompt;
/// the transcript's calls and results as the text they were written as and
/// as user messages (no `tool_calls` the server would render as markup the
/// model never writes).
fn union(request: &Request) -> Request {
    let mut wire = request.clone();
    let answer = request
        .output_schema
        .as_deref()
        .cloned()
        .unwrap_or_else(text_answer_schema);
    let member = |name: &str, arguments: Value| {
        serde_json::json!({
            "type": "object",
            // `parameters`, not `arguments`: a grammar writes the required
            // properties in name order, and the tool must be named first.
            "properties": {"name": {"type": "string", "enum": [name]}, "parameters": arguments},
            "required": ["name", "parameters"],
            "additionalProperties": false,
        })
    };
    let mut members: Vec<Value> = request
        .tools
        .iter()
        .map(|t| member(&t.name, t.input_schema.clone()))
        .collect();
    members.push(member(RESPOND_TOOL, answer));
    wire.output_schema = Some(std::sync::Arc::new(serde_json::json!({ "anyOf": members })));
    wire.tools = Default::default();
    let mut listed = String::new();
    for tool in request.tools.iter() {
        let description = tool.description.lines().next().unwrap_or_default();
        listed.push_str(&format!("- `{}`: {description}\n", tool.name));
    }
    let ending = if request.output_schema.is_some() {
        "its parameters being the JSON object described above"
    } else {
        "its parameters being `{\"text\": \"<your report>\"}`"
    };
    append(
        &mut wire.system,
        &format!(
            "# Steps\n\nEvery reply of yours is exactly one JSON object, `{{\"name\": …, \
             \"parameters\": {{…}}}}`: one step. To use a tool, name it and give its arguments; \
             it runs, and its result is the next message you get. Work in steps like this until \
             the task is done, then end with `{RESPOND_TOOL}`, {ending}. The tools:\n{listed}- \
             `{RESPOND_TOOL}`: end your turn with your answer.\n\nDo what the task asks with \
             the tools, and check it, before you answer: an answer that says something was \
             done must rest on tool results you saw."
        ),
    );
    let mut names = std::collections::HashMap::new();
    let messages: Vec<crate::Message> = request
        .messages
        .iter()
        .map(|message| {
            let mut texts = Vec::new();
            for block in &message.content {
                match block {
                    Block::Text { text } => texts.push(text.clone()),
                    Block::ToolUse { id, name, input } => {
                        names.insert(id.clone(), name.clone());
                        texts.push(
                            serde_json::json!({"name": name, "parameters": input}).to_string(),
                        );
                    }
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => {
                        let name = names.get(tool_use_id).map_or("the tool", String::as_str);
                        let what = if *is_error { "error from" } else { "result of" };
                        texts.push(format!("[{what} {name}]\n{content}"));
                    }
                    Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
                }
            }
            crate::Message {
                role: message.role,
                content: vec![Block::Text {
                    text: texts.join("\n\n"),
                }],
            }
        })
        .collect();
    wire.messages = std::sync::Arc::new(messages);
    wire
}

fn append(system: &mut String, section: &str) {
    if !system.is_empty() {
        system.push_str("\n\n");
    }
    system.push_str(section);
}

/// The reply as the caller expects it: in [`Mode::Tool`] a `respond` call
/// becomes the reply's only text (dropped, with a warning, when other tool
/// calls came with it: they run first and the model answers again). In the
/// modes without a constraint, a text reply that is one tool call written
/// out (`{"name": …, "arguments": {…}}`, fenced or not, as small models do)
/// is taken as that call.
pub(crate) fn unshape(mut response: Response, mode: Mode, request: &Request) -> Response {
    if untouched(request, mode) {
        return response;
    }
    if !response.content.iter().any(is_tool_use) {
        let Some((name, arguments)) = written_call(&response.text()) else {
            return response;
        };
        let known = request.tools.iter().any(|t| t.name == name);
        if name == RESPOND_TOOL && matches!(mode, Mode::Tool | Mode::Union) {
            if request.output_schema.is_none() {
                let text = arguments
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or_else(|| arguments.to_string(), str::to_owned);
                return answer(response, &Value::String(text));
            }
            return answer(response, &arguments);
        }
        if known {
            tracing::debug!(tool = %name, "a tool call written as text; taking it as a call");
            response
                .content
                .retain(|b| !matches!(b, Block::Text { .. }));
            response.content.push(Block::ToolUse {
                id: format!("call_text_{:016x}", fastrand::u64(..)),
                name,
                input: arguments,
            });
            response.stop_reason = StopReason::ToolUse;
        }
        return response;
    }
    if mode != Mode::Tool {
        return response;
    }
    let respond = response.content.iter().find_map(|b| match b {
        Block::ToolUse { name, input, .. } if name == RESPOND_TOOL => Some(input.clone()),
        _ => None,
    });
    let Some(arguments) = respond else {
        return response;
    };
    let others = response.content.iter().filter(|b| is_tool_use(b)).count() - 1;
    if others > 0 {
        tracing::warn!(
            others,
            "`{RESPOND_TOOL}` came with other tool calls; it is dropped until they have run"
        );
        response
            .content
            .retain(|b| !matches!(b, Block::ToolUse { name, .. } if name == RESPOND_TOOL));
        return response;
    }
    answer(response, &arguments)
}

/// [`unshape`] on a stream: the `respond` call is not reported as a call,
/// a call written as text is reported once the reply is whole, and the
/// final response is the shaped-back one.
pub(crate) fn unshape_events(
    events: crate::retry::Events,
    mode: Mode,
    request: Request,
) -> crate::retry::Events {
    use futures::StreamExt as _;
    if untouched(&request, mode) {
        return events;
    }
    events
        .flat_map(move |event| {
            let out: Vec<Result<StreamEvent>> = match event {
                Ok(StreamEvent::ToolCall { name, .. }) if name == RESPOND_TOOL => Vec::new(),
                Ok(StreamEvent::Completed(response)) => {
                    let before: Vec<String> = response
                        .tool_uses()
                        .map(|(id, _, _)| id.to_owned())
                        .collect();
                    let response = unshape(response, mode, &request);
                    let mut out: Vec<Result<StreamEvent>> = response
                        .tool_uses()
                        .filter(|(id, _, _)| !before.iter().any(|b| b == id))
                        .map(|(id, name, input)| {
                            Ok(StreamEvent::ToolCall {
                                id: id.to_owned(),
                                name: name.to_owned(),
                                input: input.clone(),
                            })
                        })
                        .collect();
                    out.push(Ok(StreamEvent::Completed(response)));
                    out
                }
                other => vec![other],
            };
            futures::stream::iter(out)
        })
        .boxed()
}

fn is_tool_use(block: &Block) -> bool {
    matches!(block, Block::ToolUse { .. })
}

/// `response` with `arguments` as its only text: the turn's answer.
fn answer(mut response: Response, arguments: &Value) -> Response {
    response
        .content
        .retain(|b| !matches!(b, Block::Text { .. } | Block::ToolUse { .. }));
    let text = match arguments {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    response.content.push(Block::Text { text });
    if response.stop_reason != StopReason::MaxTokens {
        response.stop_reason = StopReason::EndTurn;
    }
    response
}

/// A tool call written as text: one JSON object with a string `name` and an
/// object `arguments` (or `parameters`), alone, fenced, or after a lead-in
/// line (see [`crate::structured::json_in`]).
fn written_call(text: &str) -> Option<(String, Value)> {
    let Value::Object(mut object) = serde_json::from_str(crate::structured::json_in(text)).ok()?
    else {
        return None;
    };
    let arguments = object
        .remove("arguments")
        .or_else(|| object.remove("parameters"))?;
    let Some(Value::String(name)) = object.remove("name") else {
        return None;
    };
    if !object.is_empty() || !arguments.is_object() {
        return None;
    }
    Some((name, arguments))
}

#[cfg(test)]
mod tests;
