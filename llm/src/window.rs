//! The request budget: a request's prompt and its output cap together stay
//! within the model's context window, where the window is known (a
//! `context_window` in the role's config, or what Anthropic's models API
//! reports). A server asked for more refuses the request (llama-server's
//! `exceed_context_size_error`), or cuts the reply off where the window
//! ends; either way the work is lost. So a role's context budget is at most
//! the window less its output cap ([`crate::context_budget`]), a larger cap
//! after a cut-off reply is at most what the prompt leaves
//! ([`crate::larger_output_cap`]), and a caller that is about to send a
//! prompt too large for even [`MIN_OUTPUT_CAP`] beside it is told so
//! ([`room`]): that is where an Orchestrator hands off.

/// The smallest output cap worth a call: below it a reply that must carry a
/// handoff packet cannot be written, so the caller stops instead.
pub const MIN_OUTPUT_CAP: u64 = 512;

/// Characters per token, counted low: the estimate of text not yet measured
/// by a provider's usage is then high, never short. Code, JSON and
/// non-English text run at 2.5–3.5 characters per token on the tokenizers
/// of the models Arbiter runs on (English prose at about 4).
const CHARS_PER_TOKEN: u64 = 3;

use crate::{Block, Message, Model, Request};

/// What a request of `prompt` tokens may ask for, in a window of `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// The cap to send: the one asked for, or lowered to what is left.
    Fits(u64),
    /// Not even [`MIN_OUTPUT_CAP`] (or the cap, when smaller) is left
    /// beside the prompt.
    Full { prompt: u64, window: u64 },
}

/// The cap a request of `prompt` tokens may send in `window` when it would
/// send `cap`: `cap` when both fit, else what the window leaves when that is
/// at least [`MIN_OUTPUT_CAP`] (or `cap`, when smaller), else
/// [`Room::Full`]. With no window known, `cap` as it is.
pub fn room(window: Option<u64>, prompt: u64, cap: u64) -> Room {
    let Some(window) = window else {
        return Room::Fits(cap);
    };
    let left = window.saturating_sub(prompt);
    if left >= cap {
        Room::Fits(cap)
    } else if left >= MIN_OUTPUT_CAP.min(cap).max(1) {
        Room::Fits(left)
    } else {
        Room::Full { prompt, window }
    }
}

/// Tokens `chars` characters of text not yet measured may take, counted
/// high (see [`CHARS_PER_TOKEN`]).
pub fn estimate(chars: usize) -> u64 {
    (chars as u64).div_ceil(CHARS_PER_TOKEN)
}

/// The characters of `messages`' content.
pub fn chars_of(messages: &[Message]) -> usize {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .map(|block| match block {
            Block::Text { text } => text.len(),
            Block::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
            Block::ToolResult { content, .. } => content.len(),
            Block::Thinking { thinking, .. } => thinking.len(),
            Block::RedactedThinking { data } => data.len(),
        })
        .sum()
}

/// The prompt of `request` in tokens: `measured` (the message count a
/// call of it sent, and that call's input tokens) plus an estimate of the
/// messages added since; without a measure, the whole request estimated.
pub fn prompt_of(request: &Request, measured: Option<(usize, u64)>) -> u64 {
    match measured {
        Some((sent, tokens)) if sent <= request.messages.len() => {
            tokens + estimate(chars_of(&request.messages[sent..]))
        }
        _ => {
            let tools: usize = request
                .tools
                .iter()
                .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
                .sum();
            let schema = request
                .output_schema
                .as_ref()
                .map_or(0, |s| s.to_string().len());
            estimate(request.system.len() + tools + schema + chars_of(&request.messages))
        }
    }
}

/// Lowers `request`'s output cap to what the model's window leaves beside
/// its prompt ([`prompt_of`]), where the window is known; the request is
/// left as it is when no window is known or [`Room::Full`] (which is
/// returned, for the caller to act on).
pub async fn fit(model: &dyn Model, request: &mut Request, measured: Option<(usize, u64)>) -> Room {
    let window = model.limits().await.context_window;
    let cap = match request.max_output_tokens {
        Some(cap) => Some(cap),
        None => model.output_cap().await,
    };
    let (Some(window), Some(cap)) = (window, cap) else {
        return Room::Fits(cap.unwrap_or(0));
    };
    let prompt = prompt_of(request, measured);
    let room = room(Some(window), prompt, cap);
    if let Room::Fits(sent) = room
        && sent < cap
    {
        tracing::info!(
            model = model.name(),
            prompt,
            window,
            cap,
            sent,
            "the output cap lowered to what the context window leaves"
        );
        request.max_output_tokens = Some(sent);
    }
    room
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole rule in one table: whatever is sent, prompt + cap never
    /// passes the window; a cap is lowered before a request is given up.
    #[test]
    fn prompt_and_cap_never_pass_the_window() {
        let cases: &[(Option<u64>, u64, u64, Room)] = &[
            // (window, prompt, cap) → room
            (None, 1_000_000, 4_096, Room::Fits(4_096)),
            (Some(16_384), 8_000, 4_096, Room::Fits(4_096)),
            (Some(16_384), 12_288, 4_096, Room::Fits(4_096)),
            // The request: 87 % of the window, the cap raised to 4,096.
            (Some(16_384), 14_254, 4_096, Room::Fits(2_130)),
            (Some(16_384), 15_872, 4_096, Room::Fits(512)),
            (
                Some(16_384),
                15_873,
                4_096,
                Room::Full {
                    prompt: 15_873,
                    window: 16_384,
                },
            ),
            // A cap smaller than the floor is kept when it fits.
            (Some(1_000), 700, 256, Room::Fits(256)),
            (Some(1_000), 744, 256, Room::Fits(256)),
            (
                Some(1_000),
                745,
                256,
                Room::Full {
                    prompt: 745,
                    window: 1_000,
                },
            ),
            (
                Some(1_000),
                5_000,
                256,
                Room::Full {
                    prompt: 5_000,
                    window: 1_000,
                },
            ),
        ];
        for &(window, prompt, cap, want) in cases {
            let got = room(window, prompt, cap);
            assert_eq!(got, want, "window {window:?}, prompt {prompt}, cap {cap}");
            if let (Some(window), Room::Fits(sent)) = (window, got) {
                assert!(prompt + sent <= window, "{prompt} + {sent} > {window}");
                assert!(sent <= cap);
            }
        }
    }

    #[test]
    fn estimates_count_high() {
        assert_eq!(estimate(0), 0);
        assert_eq!(estimate(1), 1);
        assert_eq!(estimate(3), 1);
        assert_eq!(estimate(4), 2);
        // 4 characters a token is what English prose takes: the estimate is above it.
        assert!(estimate(4_000) > 1_000);
    }
}
