//! The JSON body of a Messages request: alternating roles, prompt-cache
//! breakpoints on the stable prefix (tools, system) and on the growing
//! transcript, the output schema in `output_config.format`, and never a
//! sampling parameter.
//!
//! The body borrows the request and is serialised straight to bytes, once
//! per call (retries send the same bytes). Building it as a `serde_json::Value`
//! first copied the whole transcript into a tree on every model request and
//! dropped it again: about a third of the coordinator's CPU under load.
//! Objects are written with their keys in alphabetical order, as a `Value`
//! wrote them.
//!
//! The parts that are the same call after call (the system block, the
//! tools, the output format) are written to JSON text once per process and
//! kept ([`Memo`]): escaping the system prompt and walking the schemas on
//! every call was a tenth of the coordinator's CPU.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::schema::{self, Dialect};
use crate::{Block, Message, MessageRole, Request, ToolSpec};

/// Breakpoints the transcript gets: the newest user turn and the one before
/// it, so the next call finds the prefix this one wrote. With the tools and
/// system breakpoints that makes the API's maximum of four.
const TRANSCRIPT_BREAKPOINTS: usize = 2;

/// The request body; serialise it with `serde_json`.
pub(crate) struct Body<'a> {
    model: &'a str,
    max_tokens: u64,
    messages: Vec<Turn<'a>>,
    /// `[{"cache_control":…,"text":…,"type":"text"}]`; `None` for no system prompt.
    system: Option<Arc<RawValue>>,
    /// The tools with their normalised input schemas; `None` for none.
    tools: Option<Arc<RawValue>>,
    /// `{"format":{"schema":…,"type":"json_schema"}}`
    output: Option<Arc<RawValue>>,
}

/// One message of the body: neighbours of the same role merged.
struct Turn<'a> {
    role: MessageRole,
    content: Vec<Out<'a>>,
}

/// A content block as sent, with or without a cache breakpoint.
struct Out<'a> {
    block: &'a Block,
    cache: bool,
}

pub(crate) fn body<'a>(
    model: &'a str,
    max_tokens: u64,
    request: &'a Request,
) -> serde_json::Result<Body<'a>> {
    static SYSTEMS: Memo<String> = Memo::new();
    static TOOLS: Memo<Arc<[ToolSpec]>> = Memo::new();
    static OUTPUTS: Memo<Arc<Value>> = Memo::new();
    let system = match request.system.as_str() {
        "" => None,
        text => Some(SYSTEMS.get(
            |kept| kept == text,
            || text.to_owned(),
            || {
                serde_json::value::to_raw_value(&[SystemBlock {
                    cache_control: EPHEMERAL,
                    text,
                    kind: "text",
                }])
            },
        )?),
    };
    let tools = if request.tools.is_empty() {
        None
    } else {
        let tools = &request.tools;
        Some(TOOLS.get(
            |kept| Arc::ptr_eq(kept, tools) || kept == tools,
            || tools.clone(),
            || tools_json(tools),
        )?)
    };
    let output = match &request.output_schema {
        None => None,
        Some(schema) => Some(OUTPUTS.get(
            |kept| Arc::ptr_eq(kept, schema) || kept == schema,
            || schema.clone(),
            || {
                let schema = schema::normalised(schema, Dialect::Anthropic);
                let format = Format {
                    schema: &schema,
                    kind: "json_schema",
                };
                serde_json::value::to_raw_value(&OutputConfig { format })
            },
        )?),
    };
    Ok(Body {
        model,
        max_tokens,
        messages: turns(&request.messages),
        system,
        tools,
        output,
    })
}

/// The `tools` array: each tool with its normalised input schema, the last
/// one carrying the prefix's second breakpoint.
fn tools_json(tools: &[ToolSpec]) -> serde_json::Result<Box<RawValue>> {
    let schemas: Vec<Arc<Value>> = tools
        .iter()
        .map(|t| schema::normalised(&t.input_schema, Dialect::Anthropic))
        .collect();
    let count = tools.len();
    let tools: Vec<Tool<'_>> = tools
        .iter()
        .zip(&schemas)
        .enumerate()
        .map(|(i, (spec, schema))| Tool {
            cache_control: (i + 1 == count).then_some(EPHEMERAL),
            description: &spec.description,
            input_schema: schema,
            name: &spec.name,
        })
        .collect();
    serde_json::value::to_raw_value(&tools)
}

/// Most recent parts of request bodies as JSON text, per process, found by
/// their key (at most [`MEMO_ENTRIES`]; past that a part is written each
/// time). A key shared as an `Arc` is found by pointer before it is compared.
struct Memo<K>(Mutex<Vec<(K, Arc<RawValue>)>>);

/// Distinct system prompts, tool sets or output schemas kept, each.
const MEMO_ENTRIES: usize = 16;

impl<K> Memo<K> {
    const fn new() -> Self {
        Self(Mutex::new(Vec::new()))
    }

    fn get(
        &self,
        same: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        make: impl FnOnce() -> serde_json::Result<Box<RawValue>>,
    ) -> serde_json::Result<Arc<RawValue>> {
        let found = |kept: &[(K, Arc<RawValue>)]| {
            kept.iter()
                .find(|(k, _)| same(k))
                .map(|(_, json)| json.clone())
        };
        if let Some(json) = found(&self.0.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(json);
        }
        let json: Arc<RawValue> = make()?.into();
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < MEMO_ENTRIES && found(&kept).is_none() {
            kept.push((key(), json.clone()));
        }
        Ok(json)
    }
}

fn turns(messages: &[Message]) -> Vec<Turn<'_>> {
    // The API wants alternating roles: merge neighbours of the same role.
    let mut merged: Vec<Turn<'_>> = Vec::new();
    for message in messages {
        let blocks = message
            .content
            .iter()
            .filter(|b| sendable(b))
            .map(|block| Out {
                block,
                cache: false,
            });
        match merged.last_mut() {
            Some(turn) if turn.role == message.role => turn.content.extend(blocks),
            _ => merged.push(Turn {
                role: message.role,
                content: blocks.collect(),
            }),
        }
    }
    let user_turns = merged
        .iter_mut()
        .rev()
        .filter(|turn| turn.role == MessageRole::User)
        .take(TRANSCRIPT_BREAKPOINTS);
    for turn in user_turns {
        // Thinking blocks and empty text cannot carry a breakpoint.
        if let Some(out) = turn.content.iter_mut().rev().find(|o| cacheable(o.block)) {
            out.cache = true;
        }
    }
    merged.retain(|turn| !turn.content.is_empty());
    merged
}

/// The API rejects empty text blocks.
fn sendable(block: &Block) -> bool {
    !matches!(block, Block::Text { text } if text.is_empty())
}

fn cacheable(block: &Block) -> bool {
    match block {
        Block::Text { text } => !text.is_empty(),
        Block::ToolUse { .. } | Block::ToolResult { .. } => true,
        Block::Thinking { .. } | Block::RedactedThinking { .. } => false,
    }
}

/// `{"type": "ephemeral"}`. Fixed shapes are derived; their fields are
/// declared in alphabetical order, the order a `Value` wrote its keys in.
#[derive(Serialize)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

/// The system prompt's one block, carrying the prefix's first breakpoint.
#[derive(Serialize)]
struct SystemBlock<'a> {
    cache_control: Ephemeral,
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A tool; the last one carries the prefix's second breakpoint.
#[derive(Serialize)]
struct Tool<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
    description: &'a str,
    input_schema: &'a Value,
    name: &'a str,
}

/// `{"format": {"schema": …, "type": "json_schema"}}`
#[derive(Serialize)]
struct OutputConfig<'a> {
    format: Format<'a>,
}

#[derive(Serialize)]
struct Format<'a> {
    schema: &'a Value,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("max_tokens", &self.max_tokens)?;
        map.serialize_entry("messages", &self.messages)?;
        map.serialize_entry("model", self.model)?;
        if let Some(output) = &self.output {
            map.serialize_entry("output_config", &**output)?;
        }
        map.serialize_entry("stream", &true)?;
        if let Some(system) = &self.system {
            map.serialize_entry("system", &**system)?;
        }
        if let Some(tools) = &self.tools {
            map.serialize_entry("tools", &**tools)?;
        }
        map.end()
    }
}

impl Serialize for Turn<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let role = match self.role {
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
        };
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("content", &self.content)?;
        map.serialize_entry("role", role)?;
        map.end()
    }
}

impl Serialize for Out<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if self.cache {
            map.serialize_entry("cache_control", &EPHEMERAL)?;
        }
        match self.block {
            Block::Text { text } => {
                map.serialize_entry("text", text)?;
                map.serialize_entry("type", "text")?;
            }
            Block::ToolUse { id, name, input } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("input", input)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("type", "tool_use")?;
            }
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                map.serialize_entry("content", content)?;
                map.serialize_entry("is_error", is_error)?;
                map.serialize_entry("tool_use_id", tool_use_id)?;
                map.serialize_entry("type", "tool_result")?;
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                map.serialize_entry("signature", signature)?;
                map.serialize_entry("thinking", thinking)?;
                map.serialize_entry("type", "thinking")?;
            }
            Block::RedactedThinking { data } => {
                map.serialize_entry("data", data)?;
                map.serialize_entry("type", "redacted_thinking")?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn roles_alternate_and_breakpoints_sit_on_the_prefix_and_transcript() {
        let request = Request {
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
            ].into(),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read".into(),
                input_schema: json!({"type":"object","properties":{"n":{"type":"integer","minimum":0}}}),
            }].into(),
            output_schema: Some(std::sync::Arc::new(json!({"type":"object"}))),
            max_output_tokens: None,
        };
        let typed = serde_json::to_string(&body("m", 1000, &request).unwrap()).unwrap();
        let body: Value = serde_json::from_str(&typed).unwrap();
        // Byte for byte what a `Value` (keys sorted) would have written, so
        // the prompt cache sees the same prefix as before.
        assert_eq!(typed, serde_json::to_string(&body).unwrap());
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

    /// The kept parts are found by what they were made from: requests that
    /// differ in system prompt, tools or schema, alternated, each get their
    /// own, and an equal schema in another `Arc` gets the same text.
    #[test]
    fn kept_parts_belong_to_their_request() {
        let request = |n: u32| Request {
            system: format!("system {n}"),
            messages: vec![Message::user("go")].into(),
            tools: vec![ToolSpec {
                name: format!("tool{n}"),
                description: "T".into(),
                input_schema: json!({"type": "object"}),
            }]
            .into(),
            output_schema: Some(Arc::new(
                json!({"type": "object", "title": format!("out{n}")}),
            )),
            max_output_tokens: None,
        };
        let seen = |request: &Request| -> Value {
            serde_json::from_slice(&serde_json::to_vec(&body("m", 10, request).unwrap()).unwrap())
                .unwrap()
        };
        let (one, two) = (request(1), request(2));
        for _ in 0..2 {
            for (n, request) in [(1, &one), (2, &two)] {
                let body = seen(request);
                assert_eq!(body["system"][0]["text"], format!("system {n}"));
                assert_eq!(body["tools"][0]["name"], format!("tool{n}"));
                assert_eq!(body["output_config"]["format"]["type"], "json_schema");
            }
        }
        // Another Arc holding an equal schema: the same text, found by value.
        let mut again = request(1);
        again.output_schema = Some(Arc::new(json!({"type": "object", "title": "out1"})));
        assert_eq!(seen(&again), seen(&one));
        let mut other = request(1);
        other.output_schema = Some(Arc::new(json!({"type": "string"})));
        assert_eq!(
            seen(&other)["output_config"]["format"]["schema"]["type"],
            "string"
        );
    }
}
