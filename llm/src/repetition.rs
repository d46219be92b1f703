//! Degenerate repetition, noticed while the reply streams: when the tail of
//! the text is one short unit repeated many times over (small models at low
//! temperature loop on a sentence until the cap), the stream is stopped at
//! once, which closes the connection and so ends the generation on the
//! server. The reply ends with [`StopReason::Repetition`] and its text up to
//! the first repeat, for the caller to repair with a targeted instruction.

use futures::StreamExt as _;

use crate::retry::Events;
use crate::{Block, Response, StopReason, StreamEvent};

/// The longest repeated unit looked for, in bytes.
const MAX_UNIT: usize = 300;
/// How many times in a row a unit must repeat to count as degenerate.
const MIN_REPEATS: usize = 10;
/// The least text the repeats must cover, in bytes: short runs (a rule of
/// dashes, an indented block) are normal.
const MIN_SPAN: usize = 500;
/// The tail is checked once this much new text has come.
const CHECK_EVERY: usize = 64;

/// Where the repetition in `text` starts, if its tail is degenerate: the
/// byte offset just after the first occurrence of the repeated unit.
pub(crate) fn degenerate(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    for unit in 1..=MAX_UNIT {
        let span = (unit * MIN_REPEATS).max(MIN_SPAN);
        if span > len {
            break;
        }
        let tail = &bytes[len - span..];
        if (0..span - unit).all(|i| tail[i] == tail[i + unit]) {
            // Back to where the run began, then keep one unit of it.
            let mut start = len - span;
            while start > 0 && bytes[start - 1] == bytes[start - 1 + unit] {
                start -= 1;
            }
            let mut keep = start + unit;
            while !text.is_char_boundary(keep) {
                keep += 1;
            }
            return Some(keep);
        }
    }
    None
}

/// `events`, stopped early (and ended with a [`StopReason::Repetition`]
/// response) when the text degenerates into repetition.
pub(crate) fn guard(events: Events) -> Events {
    struct State {
        events: Option<Events>,
        text: String,
        checked: usize,
    }
    let state = State {
        events: Some(events),
        text: String::new(),
        checked: 0,
    };
    futures::stream::unfold(state, |mut state| async move {
        let events = state.events.as_mut()?;
        let event = events.next().await?;
        if let Ok(StreamEvent::TextDelta(piece)) = &event {
            state.text.push_str(piece);
            if state.text.len() >= state.checked + CHECK_EVERY {
                state.checked = state.text.len();
                if let Some(keep) = degenerate(&state.text) {
                    tracing::warn!(
                        chars = state.text.len(),
                        "the reply is repeating itself; stopping it"
                    );
                    // Dropping the stream closes the connection: the server stops.
                    state.events = None;
                    state.text.truncate(keep);
                    let response = Response {
                        content: vec![Block::Text {
                            text: std::mem::take(&mut state.text),
                        }],
                        stop_reason: StopReason::Repetition,
                        usage: None,
                    };
                    return Some((Ok(StreamEvent::Completed(response)), state));
                }
            }
        }
        Some((event, state))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_repeating_one_unit_is_degenerate_and_normal_text_is_not() {
        let unit = "The brief is to write hello.py. ";
        let looping = format!("{{\"message\": \"Plan: {}", unit.repeat(20));
        let keep = degenerate(&looping).unwrap();
        assert_eq!(
            &looping[..keep],
            "{\"message\": \"Plan: The brief is to write hello.py."
        );

        let prose: String = (0..200).map(|i| format!("step {i}, ")).collect();
        assert_eq!(degenerate(&prose), None);
        // A short rule or a few repeats are normal.
        assert_eq!(degenerate(&format!("a\n{}\nb", "-".repeat(80))), None);
        assert_eq!(degenerate(&unit.repeat(5)), None);
        // Multi-byte text is cut on a character boundary.
        let wide = "é".repeat(400);
        let keep = degenerate(&wide).unwrap();
        assert!(wide.is_char_boundary(keep));
    }
}
