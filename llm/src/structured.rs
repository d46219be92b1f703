//! Structured output: the final text of a turn must be JSON that matches the
//! same schema the model was given, and parse as the expected type. A reply
//! that does not is sent back with the validation error until the repair
//! budget is spent; then the call fails with a typed error.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::Checker;
use crate::{LlmError, Message, Model, Request, Response, Result, StopReason};

/// Parses a turn's final text as `T`: JSON (a Markdown code fence around it
/// is tolerated; some servers add one), valid against `T`'s model-facing
/// schema, then deserialised. `null` in an optional field counts as absent
/// (OpenAI strict mode sends it). The error explains what is wrong, for the model.
pub fn parse<T: DeserializeOwned + JsonSchema>(text: &str) -> std::result::Result<T, String> {
    parse_with(
        text,
        &crate::schema::try_for_model::<T>().map_err(|e| e.to_string())?,
    )
}

/// [`parse`] against a given schema.
pub fn parse_with<T: DeserializeOwned>(
    text: &str,
    schema: &Value,
) -> std::result::Result<T, String> {
    parse_checked(text, schema, &*Checker::cached(schema)?)
}

/// [`parse_with`], the schema compiled already (once for all the replies of a call).
fn parse_checked<T: DeserializeOwned>(
    text: &str,
    schema: &Value,
    checker: &Checker,
) -> std::result::Result<T, String> {
    let unfenced = json_in(text);
    if unfenced.is_empty() {
        return Err("the reply was empty; a JSON object was required".into());
    }
    let mut value: Value =
        serde_json::from_str(unfenced).map_err(|e| format!("the reply is not valid JSON: {e}"))?;
    let dropped = crate::schema::fit_to_variant(&mut value, schema);
    if !dropped.is_empty() {
        tracing::info!(
            fields = %dropped.join(", "),
            "reply fields that do not belong to the form it chose were dropped"
        );
    }
    crate::schema::strip_optional_nulls(&mut value, schema);
    if let Err(detail) = checker.check(&value) {
        return Err(union_detail(&value, schema).unwrap_or(detail));
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// What is wrong with `value`, in words a model can act on, when `schema`
/// is a union at the root: "no member matched" says nothing, so the value
/// is checked against the flat form of every member together (the field,
/// the value, the values there are). `None` when that finds nothing.
fn union_detail(value: &Value, schema: &Value) -> Option<String> {
    schema.get("anyOf")?;
    let mut flat = schema.clone();
    crate::schema::flatten_root_union(&mut flat);
    let checker = Checker::cached(&flat).ok()?;
    checker.check(value).err()
}

/// The JSON a reply holds: the whole text when it is JSON; else the first
/// fenced block (```` ```json ````) that is; else the first balanced
/// `{…}` that is (a reply with a lead-in line, as small models write); else
/// the text as it is (trimmed, without a fence), for the parser to explain.
pub fn json_in(text: &str) -> &str {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let is_json = |s: &str| serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok();
    if unfenced.is_empty() || is_json(unfenced) {
        return unfenced;
    }
    let mut rest = trimmed;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_at = after.find('\n').map_or(after.len(), |n| n + 1);
        let Some(end) = after[body_at..].find("```") else {
            break;
        };
        let block = after[body_at..body_at + end].trim();
        if is_json(block) {
            return block;
        }
        rest = &after[body_at + end + 3..];
    }
    let mut from = 0;
    while let Some(open) = trimmed[from..].find('{').map(|i| i + from) {
        if let Some(len) = balanced(&trimmed[open..])
            && is_json(&trimmed[open..open + len])
        {
            return &trimmed[open..open + len];
        }
        from = open + 1;
    }
    unfenced
}

/// The length of the balanced `{…}` that `text` starts with (strings and
/// their escapes skipped), if it closes.
fn balanced(text: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The request's `output_schema`, set to `T`'s when missing, and compiled;
/// a recursive `T`, or a schema that cannot be compiled, is an invalid request.
fn output_schema<T: JsonSchema>(request: &mut Request) -> Result<(Arc<Value>, Arc<Checker>)> {
    let schema = match &request.output_schema {
        Some(schema) => schema.clone(),
        None => Arc::new(crate::schema::try_for_model::<T>()?),
    };
    let checker =
        Checker::cached(&schema).map_err(|message| LlmError::InvalidRequest { message })?;
    request.output_schema = Some(schema.clone());
    Ok((schema, checker))
}

/// The user message that asks the model to repair its reply.
pub fn repair_message(detail: &str) -> String {
    format!(
        "Your last reply did not match the required JSON schema: {detail}. \
         Reply again with only one JSON object that matches the schema exactly."
    )
}

/// The outcome of a structured call.
#[derive(Debug)]
pub struct Structured<T> {
    pub value: T,
    /// The raw text of the accepted reply: it is what goes into the transcript.
    pub raw: String,
    /// The response of the accepted reply (its usage is the context in use).
    pub response: Response,
    /// Replies rejected before this one.
    pub repairs: u32,
}

/// Calls the model until its reply is valid, at most `1 + repairs` times.
/// The request's `output_schema` is set to `T`'s schema when missing (a recursive
/// `T` is an [`LlmError::InvalidRequest`], before anything is sent).
/// Rejected replies and repair requests are not kept: the caller's transcript
/// gets only the accepted reply.
pub async fn complete<T: DeserializeOwned + JsonSchema>(
    model: &dyn Model,
    mut request: Request,
    repairs: u32,
) -> Result<Structured<T>> {
    let (schema, checker) = output_schema::<T>(&mut request)?;
    let mut attempt = 0;
    let mut grown = false;
    let mut measured = None;
    loop {
        within_window(model, &mut request, measured).await?;
        let sent = request.messages.len();
        let response = model.complete(request.clone()).await?;
        measured = response.context_tokens().map(|t| (sent, t));
        if grow(model, &mut request, &response, &mut grown).await {
            continue;
        }
        if let Some(done) = judge(
            model,
            &mut request,
            (&schema, &checker),
            response,
            attempt,
            repairs,
        )? {
            return Ok(done);
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{ArbiterIntent, ArbiterOutput};

    #[test]
    fn parse_accepts_fenced_json_and_explains_failures() {
        let ok: ArbiterOutput =
            parse("```json\n{\"intent\":\"address_human\",\"message\":\"Speak.\"}\n```").unwrap();
        assert_eq!(ok.intent, ArbiterIntent::AddressHuman);
        let err = parse::<ArbiterOutput>(r#"{"intent":"yell","message":"x"}"#).unwrap_err();
        assert!(err.starts_with("$.intent: \"yell\" is not one of"), "{err}");
        let err = parse::<ArbiterOutput>(r#"{"intent":"musings"}"#).unwrap_err();
        assert_eq!(err, "$: missing required property \"message\"");
        let err = parse::<ArbiterOutput>("I think so").unwrap_err();
        assert!(err.starts_with("the reply is not valid JSON"), "{err}");
        assert!(parse::<ArbiterOutput>("  ").unwrap_err().contains("empty"));
    }
}

/// Checks one reply. `Some` when it is valid; `None` when it was sent back
/// for repair (the request now carries it and the validation error); an
/// error when the repair budget is spent.
fn judge<T: DeserializeOwned>(
    model: &dyn Model,
    request: &mut Request,
    (schema, checker): (&Value, &Checker),
    response: Response,
    attempt: u32,
    repairs: u32,
) -> Result<Option<Structured<T>>> {
    let raw = response.text();
    let checked = match cut_short(&response.stop_reason) {
        Some(detail) => Err(detail.to_owned()),
        None => parse_checked::<T>(&raw, schema, checker),
    };
    match checked {
        Ok(value) => Ok(Some(Structured {
            value,
            raw,
            response,
            repairs: attempt,
        })),
        Err(detail) if attempt < repairs => {
            tracing::warn!(model = model.name(), attempt, %detail, "structured reply rejected; asking again");
            let messages = Arc::make_mut(&mut request.messages);
            messages.push(Message::assistant(raw));
            messages.push(Message::user(repair_message(&detail)));
            Ok(None)
        }
        Err(detail) => Err(LlmError::SchemaViolation {
            attempts: attempt + 1,
            detail,
        }),
    }
}

/// Why a reply that stopped early cannot be taken, as the repair to ask
/// for: shorter when it was cut off at its cap, once when it was stopped
/// for repeating itself. `None` when it ended normally.
pub fn cut_short(stop_reason: &StopReason) -> Option<&'static str> {
    match stop_reason {
        StopReason::MaxTokens => {
            Some("the reply was cut off at the output token limit; keep it shorter")
        }
        StopReason::Repetition => Some(
            "the reply began repeating the same text over and over and was stopped; \
             say each thing once",
        ),
        _ => None,
    }
}

/// After a reply cut off at its cap, the first time in a call: the request
/// now asks for a larger cap ([`crate::larger_output_cap`]) and is to be
/// sent again, nothing added to it. `false` otherwise.
async fn grow(
    model: &dyn Model,
    request: &mut Request,
    response: &Response,
    grown: &mut bool,
) -> bool {
    if *grown || response.stop_reason != StopReason::MaxTokens {
        return false;
    }
    *grown = true;
    let Some(cap) = crate::larger_output_cap(model, request, response.context_tokens()).await
    else {
        return false;
    };
    tracing::warn!(
        model = model.name(),
        cap,
        "reply cut off at its output cap; asking again with a larger one"
    );
    request.max_output_tokens = Some(cap);
    true
}

/// What [`complete_with`] reports while a structured reply is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress<'a> {
    /// A new attempt begins: whatever earlier attempts produced is void.
    Attempt(u32),
    /// The next piece of the reply's text.
    Text(&'a str),
}

/// Like [`complete`], but streams each attempt and reports its text as it
/// is generated. A stream that fails part-way is finished by a whole call
/// (which retries); its text is then reported at once, as a new attempt.
pub async fn complete_with<T, F>(
    model: &dyn Model,
    mut request: Request,
    repairs: u32,
    mut progress: F,
) -> Result<Structured<T>>
where
    T: DeserializeOwned + JsonSchema,
    F: FnMut(Progress<'_>),
{
    let (schema, checker) = output_schema::<T>(&mut request)?;
    let mut attempt = 0;
    let mut reported = 0;
    let mut grown = false;
    let mut measured = None;
    loop {
        within_window(model, &mut request, measured).await?;
        let sent = request.messages.len();
        progress(Progress::Attempt(reported));
        reported += 1;
        let response = match streamed(model, &request, &mut progress).await {
            Ok(response) => response,
            Err(e) if e.is_retryable() => {
                tracing::warn!(model = model.name(), error = %e, "stream failed part-way; calling again");
                let response = model.complete(request.clone()).await?;
                progress(Progress::Attempt(reported));
                reported += 1;
                progress(Progress::Text(&response.text()));
                response
            }
            Err(e) => return Err(e),
        };
        measured = response.context_tokens().map(|t| (sent, t));
        if grow(model, &mut request, &response, &mut grown).await {
            continue;
        }
        if let Some(done) = judge(
            model,
            &mut request,
            (&schema, &checker),
            response,
            attempt,
            repairs,
        )? {
            return Ok(done);
        }
        attempt += 1;
    }
}

/// Before a call: its cap lowered to what the window leaves
/// ([`crate::window::fit`]). When the estimate leaves no room at all the
/// request still goes, with the smallest cap: the estimate counts high, so
/// the server, which counts exactly, judges; its refusal is the context
/// error the caller gets.
async fn within_window(
    model: &dyn Model,
    request: &mut Request,
    measured: Option<(usize, u64)>,
) -> Result<()> {
    if let crate::window::Room::Full { prompt, window } =
        crate::window::fit(model, request, measured).await
    {
        let cap = match request.max_output_tokens {
            Some(cap) => cap,
            None => model
                .output_cap()
                .await
                .unwrap_or(crate::window::MIN_OUTPUT_CAP),
        }
        .min(crate::window::MIN_OUTPUT_CAP);
        tracing::warn!(
            model = model.name(),
            prompt,
            window,
            cap,
            "the request may not fit the context window; sent with the smallest cap"
        );
        request.max_output_tokens = Some(cap);
    }
    Ok(())
}

/// One streamed call, its text reported piece by piece.
async fn streamed<F>(model: &dyn Model, request: &Request, progress: &mut F) -> Result<Response>
where
    F: FnMut(Progress<'_>),
{
    use futures::StreamExt as _;
    let mut events = model.stream(request.clone()).await?;
    while let Some(event) = events.next().await {
        match event? {
            crate::StreamEvent::TextDelta(text) => progress(Progress::Text(&text)),
            crate::StreamEvent::Completed(response) => return Ok(response),
            _ => {}
        }
    }
    Err(LlmError::Stream(
        "the stream ended before the message was complete".into(),
    ))
}

#[cfg(test)]
mod json_in_tests {
    use super::json_in;

    #[test]
    fn the_json_is_found_after_a_lead_in() {
        let cases = [
            (r#"{"a":1}"#, r#"{"a":1}"#),
            ("```json\n{\"a\":1}\n```", r#"{"a":1}"#),
            (
                "Here is my answer:\n```json\n{\"a\":1}\n```\nThanks.",
                r#"{"a":1}"#,
            ),
            ("Here it is: {\"a\": \"}{\"} and more", "{\"a\": \"}{\"}"),
            (
                "Sure.\n{\"a\": {\"b\": [1, 2]}}",
                "{\"a\": {\"b\": [1, 2]}}",
            ),
            ("no json { here", "no json { here"),
        ];
        for (text, json) in cases {
            assert_eq!(json_in(text), json, "{text}");
        }
    }
}
