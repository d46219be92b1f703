//! How a turn's typed output is asked of the model when the request carries
//! tools: as a decoding constraint (`response_format`, `output_config`), as a
//! final-answer tool (`respond`), or as a schema in the system prompt. Servers
//! that turn `response_format` into a grammar (llama.cpp, vLLM, Ollama) apply
//! it from the first token, so with tools in the same request the model can
//! never call one; those get the final-answer tool. The request is reshaped
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
}

impl StructuredOutput {
    pub const ALLOWED: &'static str = "\"auto\", \"response_format\", \"tool\" or \"prompt\"";

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
            Self::Tool => Mode::ResponseFormat,
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
}

/// The request as it goes on the wire in `mode`. Everything added is a pure
/// function of the request's schema, so the tools and system prompt stay
/// byte-identical from call to call (the prompt cache keys on them).
/// A request the mode leaves as it is (no schema, or a schema the API takes
/// natively) is borrowed: cloning it copied the whole transcript per call.
pub(crate) fn shape(request: &Request, mode: Mode) -> Cow<'_, Request> {
    let Some(schema) = &request.output_schema else {
        return Cow::Borrowed(request);
    };
    if mode == Mode::ResponseFormat {
        return Cow::Borrowed(request);
    }
    let mut wire = request.clone();
    match mode {
        Mode::ResponseFormat => {}
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
    if mode == Mode::ResponseFormat || request.output_schema.is_none() {
        return response;
    }
    if !response.content.iter().any(is_tool_use) {
        let Some((name, arguments)) = written_call(&response.text()) else {
            return response;
        };
        let known = request.tools.iter().any(|t| t.name == name);
        if name == RESPOND_TOOL && mode == Mode::Tool {
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
    if mode == Mode::ResponseFormat || request.output_schema.is_none() {
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
    response.content.push(Block::Text {
        text: arguments.to_string(),
    });
    if response.stop_reason != StopReason::MaxTokens {
        response.stop_reason = StopReason::EndTurn;
    }
    response
}

/// A tool call written as text: one JSON object with a string `name` and an
/// object `arguments` (or `parameters`), nothing else around it but a fence.
fn written_call(text: &str) -> Option<(String, Value)> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let Value::Object(mut object) = serde_json::from_str(unfenced).ok()? else {
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
