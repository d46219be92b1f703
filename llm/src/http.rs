//! The HTTP side shared by every provider: the client, timeouts, error
//! responses mapped to typed failures, and SSE bodies folded into stream
//! events by a provider's assembler under an idle timeout.

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::Value;

use crate::error::error_from_body;
use crate::retry::{self, Events, Failure};
use crate::{LlmError, Result, StreamEvent};

/// The time limits of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP and TLS connection set-up.
    pub connect: Duration,
    /// From sending the request to its response headers (and the whole body
    /// of a non-streamed answer, such as an error).
    pub request: Duration,
    /// The longest silence allowed inside a stream.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(30),
            request: Duration::from_secs(120),
            idle: Duration::from_secs(300),
        }
    }
}

pub(crate) fn client(timeouts: &Timeouts) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {}", describe(&e))))
}

/// A header value that `Debug` output of the request shows as `Sensitive`.
pub(crate) fn secret_header(value: &str) -> Result<reqwest::header::HeaderValue> {
    let mut value = reqwest::header::HeaderValue::from_str(value)
        .map_err(|_| LlmError::Config("the API key holds characters a header cannot".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// Sends a request and returns the response if its status is 2xx; anything
/// else becomes a typed failure carrying the server's retry hints.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    timeout: Duration,
) -> Result<reqwest::Response, Failure> {
    let response = tokio::time::timeout(timeout, request.send())
        .await
        .map_err(|_| LlmError::Timeout(format!("no response within {timeout:?}")))?
        .map_err(|e| network(&e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let text = tokio::time::timeout(timeout, response.text())
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| {
        let text: String = text.chars().take(500).collect();
        if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::json!({ "message": text.trim() })
        }
    });
    let retry_after = retry::retry_after(&headers, chrono::Utc::now());
    // reqwest shows 529 as "<unknown status code>": go by the number.
    Err(Failure {
        error: error_from_body(Some(status.as_u16()), &body, retry_after),
        should_retry: retry::should_retry(&headers),
        retry_after,
    })
}

pub(crate) fn network(e: &reqwest::Error) -> LlmError {
    if e.is_timeout() {
        LlmError::Timeout(describe(e))
    } else {
        LlmError::Network(describe(e))
    }
}

/// The error and its sources, one line. reqwest errors carry the URL (less
/// any user info) and never the headers, so no key can appear here.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Folds one provider's SSE events into stream events.
pub(crate) trait Assemble: Send + 'static {
    /// Takes one SSE event (`event` is `message` when unnamed).
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<StreamEvent>>;
    /// Whether the final event has been produced.
    fn finished(&self) -> bool;
    /// The body ended before `finished`: finish if the reply is whole, else fail.
    fn end(&mut self) -> Result<Vec<StreamEvent>>;
}

/// The SSE body of `response`, folded by `assembler`. Fails on a silence
/// longer than `idle`, a broken body, or malformed data; ends after the
/// final event or the first error.
pub(crate) fn sse(response: reqwest::Response, idle: Duration, assembler: impl Assemble) -> Events {
    let events = response
        .bytes_stream()
        .map_err(|e| describe(&e))
        .eventsource()
        .boxed();
    let state = (events, assembler, VecDeque::<StreamEvent>::new(), false);
    stream::unfold(
        state,
        move |(mut events, mut asm, mut queue, mut done)| async move {
            loop {
                if let Some(event) = queue.pop_front() {
                    return Some((Ok(event), (events, asm, queue, done)));
                }
                if done || asm.finished() {
                    return None;
                }
                let next = match tokio::time::timeout(idle, events.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let error = LlmError::Timeout(format!("the stream was idle for {idle:?}"));
                        return Some((Err(error), (events, asm, queue, true)));
                    }
                };
                let produced = match next {
                    Some(Ok(event)) => asm.push(&event.event, &event.data),
                    Some(Err(e)) => Err(LlmError::Stream(format!("the event stream broke: {e}"))),
                    None => {
                        done = true;
                        asm.end()
                    }
                };
                match produced {
                    Ok(out) => queue.extend(out),
                    Err(error) => return Some((Err(error), (events, asm, queue, true))),
                }
            }
        },
    )
    .boxed()
}
