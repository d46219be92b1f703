//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use crate::http::Assemble;
use crate::{Block, StreamEvent};

/// `anthropic_sse`: an HTTP body of the Messages API's SSE stream, through
/// the Anthropic assembler (see [`body`]).
pub fn anthropic_sse(data: &[u8]) {
    body(crate::anthropic::sse::Assembler::default(), data);
}

/// `openai_stream`: an HTTP body of the Chat Completions stream, through
/// the OpenAI assembler (see [`body`]).
pub fn openai_stream(data: &[u8]) {
    body(crate::openai::stream::Assembler::default(), data);
}

/// The first byte is the size of the body's chunks (1 to 64 bytes, as the
/// network cuts them), the rest the body. It is read as `http::sse` reads
/// it: `eventsource_stream` parses the events, each goes to the assembler
/// until it has finished, an error ends it, and a body that ends early is
/// ended with `end()`. What it yields must hold together ([`fold`]).
fn body(assembler: impl Assemble, data: &[u8]) {
    let Some((&size, body)) = data.split_first() else {
        return;
    };
    let size = usize::from(size % 64) + 1;
    let chunks: Vec<Result<Bytes, std::convert::Infallible>> = body
        .chunks(size)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let parsed = futures::executor::block_on(
        futures::stream::iter(chunks)
            .eventsource()
            .collect::<Vec<_>>(),
    );
    let mut events = Vec::new();
    let mut broke = false;
    for event in parsed {
        match event {
            Ok(event) => events.push((event.event, event.data)),
            // `http::sse`: the event stream broke, the call fails there.
            Err(_) => {
                broke = true;
                break;
            }
        }
    }
    if let Err(e) = fold(assembler, &events, broke) {
        panic!("{e}");
    }
}

/// Folds `stream` with `assembler` as the HTTP side does (ending it when
/// the body ends, unless it `broke`); checks what it yields holds
/// together: at most one `Completed`, and last; every tool call's input a
/// JSON object; a `Completed` reply's tool calls the ones yielded.
/// `Ok(true)`: it completed. The stream properties (`stream_props.rs`)
/// check the same.
pub(crate) fn fold(
    mut assembler: impl Assemble,
    stream: &[(String, String)],
    broke: bool,
) -> Result<bool, String> {
    let mut out = Vec::new();
    let mut failed = broke;
    for (event, data) in stream {
        match assembler.push(event, data) {
            Ok(events) => out.extend(events),
            Err(_) => {
                failed = true;
                break;
            }
        }
        if assembler.finished() {
            break;
        }
    }
    if !failed
        && !assembler.finished()
        && let Ok(events) = assembler.end()
    {
        out.extend(events);
    }
    let completed: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, StreamEvent::Completed(_)))
        .map(|(i, _)| i)
        .collect();
    if completed.len() > 1 {
        return Err(format!("more than one Completed: {out:?}"));
    }
    if let Some(&at) = completed.first()
        && at != out.len() - 1
    {
        return Err(format!("Completed is not last: {out:?}"));
    }
    let calls: Vec<&Value> = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall { input, .. } => Some(input),
            _ => None,
        })
        .collect();
    if let Some(input) = calls.iter().find(|input| !input.is_object()) {
        return Err(format!("a tool call's input is not an object: {input}"));
    }
    if let Some(StreamEvent::Completed(response)) = out.last() {
        let in_reply: Vec<&Value> = response
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { input, .. } => Some(input),
                _ => None,
            })
            .collect();
        if in_reply != calls {
            return Err(format!(
                "the reply's tool calls are not the ones yielded: {in_reply:?} against {calls:?}"
            ));
        }
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target);
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, std::fs::read(e.path()).ok()?))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        for target in ["anthropic_sse", "openai_stream"] {
            let seeds = seeds(target);
            assert!(seeds.len() >= 3, "{target}: {} seeds", seeds.len());
            for (name, data) in seeds {
                let replayed = std::panic::catch_unwind(|| {
                    anthropic_sse(&data);
                    openai_stream(&data);
                });
                assert!(replayed.is_ok(), "{target}/{name} panicked");
            }
        }
    }

    /// A recorded stream that is whole completes, however the body is cut.
    #[test]
    fn a_whole_recorded_stream_completes_in_any_chunks() {
        for (target, name) in [
            ("anthropic_sse", "tool-use.sse"),
            ("openai_stream", "tool-calls.sse"),
        ] {
            let seed = seeds(target)
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, data)| data)
                .unwrap_or_default();
            assert!(!seed.is_empty(), "{target}/{name}");
            for size in [0u8, 1, 7, 63] {
                let mut data = seed.clone();
                data[0] = size;
                let body = &data[1..];
                let chunks: Vec<Result<Bytes, std::convert::Infallible>> = body
                    .chunks(usize::from(size) + 1)
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect();
                let events: Vec<(String, String)> = futures::executor::block_on(
                    futures::stream::iter(chunks)
                        .eventsource()
                        .filter_map(|e| async move { e.ok().map(|e| (e.event, e.data)) })
                        .collect::<Vec<_>>(),
                );
                let completed = if target == "anthropic_sse" {
                    fold(crate::anthropic::sse::Assembler::default(), &events, false)
                } else {
                    fold(crate::openai::stream::Assembler::default(), &events, false)
                };
                assert_eq!(completed, Ok(true), "{target}/{name} in chunks of {size}");
            }
        }
    }
}
