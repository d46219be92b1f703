//! The HTTP pieces both mock servers' replies are made of: a response with
//! its headers, a paced `text/event-stream` body, and text cut into deltas.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures::StreamExt as _;

/// A response with `status`, `content-type`, then `headers` in order (a
/// later one of the same name replaces an earlier one). Panics on a status
/// or header a test scripted wrong.
pub(crate) fn respond<'a>(
    status: u16,
    content_type: &'a str,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: Body,
) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status)
        .unwrap_or_else(|e| panic!("mock reply: bad HTTP status {status}: {e}"));
    let fixed = std::iter::once(("content-type", content_type));
    for (name, value) in fixed.chain(headers) {
        let name = HeaderName::from_bytes(name.as_bytes())
            .unwrap_or_else(|e| panic!("mock reply: bad header name {name:?}: {e}"));
        let value = HeaderValue::from_str(value)
            .unwrap_or_else(|e| panic!("mock reply: bad header value {value:?}: {e}"));
        resp.headers_mut().insert(name, value);
    }
    resp
}

/// A streamed body of server-sent `events` (each already framed), with
/// `pause` before each one.
pub(crate) fn sse(events: Vec<String>, pause: Option<Duration>) -> Body {
    let events = futures::stream::iter(events).then(move |event| async move {
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
        Ok::<_, std::convert::Infallible>(Bytes::from(event))
    });
    Body::from_stream(events)
}

/// At least two pieces for two or more chars, at most 24 chars each: the
/// deltas a streamed text arrives in.
pub(crate) fn split_chunks(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() < 2 {
        return vec![s.to_owned()];
    }
    let size = chars.len().div_ceil(2).min(24);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::split_chunks;

    #[test]
    fn splits_into_at_least_two_pieces() {
        assert_eq!(split_chunks("ab"), vec!["a", "b"]);
        assert_eq!(split_chunks("héllo"), vec!["hél", "lo"]);
        assert_eq!(split_chunks("x"), vec!["x"]);
        assert_eq!(split_chunks(""), vec![""]);
        let long = "a".repeat(100);
        let parts = split_chunks(&long);
        assert_eq!(parts.concat(), long);
        assert!(parts.iter().all(|p| p.len() <= 24));
    }
}
