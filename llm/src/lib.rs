//! Model clients for Arbiter behind one small streaming [`Model`] trait: the
//! Anthropic Messages API and OpenAI-compatible Chat Completions, with usage
//! accounting, retries, schema normalisation per provider, structured output
//! with validation and repair, and per-role model configuration.

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod anthropic;
pub mod budget;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
mod http;
pub mod meter;
mod model_config;
mod openai;
pub mod output;
pub mod price;
mod repetition;
mod retry;
pub mod schema;
#[cfg(test)]
mod stream_props;
pub mod structured;
pub mod telemetry;
mod types;
pub mod window;

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

pub use anthropic::{AnthropicClient, DEFAULT_ANTHROPIC_URL, DEFAULT_ANTHROPIC_VERSION};
pub use config::{ConfigFile, ProviderOverrides, RoleConfig, RoleOverrides};
pub use error::{LlmError, Result};
pub use http::Timeouts;
pub use model_config::{ModelConfig, Profile, Provider, parse_model_spec};
pub use openai::{DEFAULT_OPENAI_URL, OpenAiClient};
pub use output::{Mode as OutputMode, RESPOND_TOOL, Server, StructuredOutput};
pub use retry::RetryPolicy;
pub use types::{
    ApiKey, Block, Message, MessageRole, ModelLimits, Request, Response, StopReason, StreamEvent,
    ToolSpec, Usage,
};

/// A model endpoint. Implementations provide one streaming call; everything
/// else is built on it.
pub trait Model: Send + Sync {
    /// Starts one model call and streams its events: text deltas as they
    /// come, each tool call once whole, and last [`StreamEvent::Completed`]
    /// or an error. Failures before the first event are retried by the
    /// client's policy; dropping the stream cancels the call.
    fn stream(
        &self,
        request: Request,
    ) -> BoxFuture<'_, Result<BoxStream<'static, Result<StreamEvent>>>>;

    /// The model name, for logs.
    fn name(&self) -> &str;

    /// One complete call. The clients override it to retry a stream that
    /// fails part-way from the start, so a reply is never half of one.
    fn complete(&self, request: Request) -> BoxFuture<'_, Result<Response>> {
        Box::pin(async move { collect(self.stream(request).await?).await })
    }

    /// The model's context window and output maximum, where known.
    fn limits(&self) -> BoxFuture<'_, ModelLimits> {
        Box::pin(std::future::ready(ModelLimits::default()))
    }

    /// The output cap a request that sets none gets, where known.
    fn output_cap(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(std::future::ready(None))
    }
}

/// The cap to ask again with after a reply was cut off at its cap: twice
/// the one it had, bounded by the model's maximum and by what the window
/// leaves beside the prompt (`prompt`: the cut-off call's input tokens, as
/// its usage reported them; see [`window`]). `None` when no larger cap is
/// possible or the current one is not known; then the reply is repaired
/// (told to be shorter) instead, never sent again as it was.
pub async fn larger_output_cap(
    model: &dyn Model,
    request: &Request,
    prompt: Option<u64>,
) -> Option<u64> {
    let current = match request.max_output_tokens {
        Some(cap) => cap,
        None => model.output_cap().await?,
    };
    let doubled = current.saturating_mul(2);
    let limits = model.limits().await;
    let mut next = match limits.max_output_tokens {
        Some(limit) => doubled.min(limit),
        None => doubled,
    };
    if let (Some(window), Some(prompt)) = (limits.context_window, prompt) {
        next = next.min(window.saturating_sub(prompt));
    }
    (next > current).then_some(next)
}

/// Drives a stream of events to its final response.
pub async fn collect(mut events: BoxStream<'static, Result<StreamEvent>>) -> Result<Response> {
    while let Some(event) = events.next().await {
        if let StreamEvent::Completed(response) = event? {
            return Ok(response);
        }
    }
    Err(LlmError::Stream(
        "the stream ended before the message was complete".into(),
    ))
}

/// Builds the client a model configuration names, with a span around
/// every request and its metrics (see [`telemetry`]).
pub fn client_for(config: &ModelConfig) -> Result<Arc<dyn Model>> {
    client_for_role(config, None)
}

/// [`client_for`], for `role`: its metrics carry the role.
pub fn client_for_role(
    config: &ModelConfig,
    role: Option<arbiter_protocol::Role>,
) -> Result<Arc<dyn Model>> {
    let client: Arc<dyn Model> = match config.provider {
        Provider::Anthropic => Arc::new(AnthropicClient::new(config.clone())?),
        Provider::OpenAi => Arc::new(OpenAiClient::new(config.clone())?),
    };
    Ok(Arc::new(telemetry::Traced::new(client, config, role)))
}

/// The context budget a role can really use: the configured budget, lowered
/// to the model's window less its output cap when the window is known and
/// that is smaller, so that a prompt within the budget always leaves room
/// for a whole reply (see [`window`]).
pub async fn context_budget(model: &dyn Model, budget: u64) -> u64 {
    let cap = model.output_cap().await.unwrap_or(0);
    budget_within(model, budget, cap).await
}

/// [`context_budget`] for a runtime that sizes its own requests (the Claude
/// Code and Codex CLIs, whose output caps are their own): the configured
/// budget, lowered to the model's window when that is smaller.
pub async fn context_budget_of_window(model: &dyn Model, budget: u64) -> u64 {
    budget_within(model, budget, 0).await
}

async fn budget_within(model: &dyn Model, budget: u64, cap: u64) -> u64 {
    let Some(window) = model.limits().await.context_window else {
        return budget;
    };
    // A cap as large as the window leaves it whole: the config is odd, and
    // each request's cap is lowered to fit ([`window::room`]) anyway.
    let usable = match window.checked_sub(cap) {
        Some(usable) if usable > 0 => usable,
        _ => window,
    };
    if usable < budget {
        tracing::warn!(
            model = model.name(),
            budget,
            window,
            output_cap = cap,
            usable,
            "the context budget is larger than the model's window less its output cap; \
             using what the window leaves"
        );
        return usable;
    }
    budget
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model with known limits and cap; it is never called.
    struct Limited {
        limits: ModelLimits,
        cap: u64,
    }

    impl Model for Limited {
        fn stream(
            &self,
            _: Request,
        ) -> BoxFuture<'_, Result<BoxStream<'static, Result<StreamEvent>>>> {
            unreachable!("the limits are read, the model is never called")
        }
        fn name(&self) -> &str {
            "limited"
        }
        fn limits(&self) -> BoxFuture<'_, ModelLimits> {
            Box::pin(std::future::ready(self.limits))
        }
        fn output_cap(&self) -> BoxFuture<'_, Option<u64>> {
            Box::pin(std::future::ready(Some(self.cap)))
        }
    }

    fn limited(window: Option<u64>, max_output: Option<u64>, cap: u64) -> Limited {
        Limited {
            limits: ModelLimits {
                context_window: window,
                max_output_tokens: max_output,
            },
            cap,
        }
    }

    /// After a cut-off the cap doubles, but never past the model's maximum
    /// nor past what the window leaves beside the prompt that was cut off.
    #[tokio::test]
    async fn a_larger_cap_stays_within_the_window() {
        type Case = (Option<u64>, Option<u64>, u64, Option<u64>, Option<u64>);
        let cases: &[Case] = &[
            // (window, max output, cap, prompt) → larger cap
            (None, None, 2_048, Some(14_000), Some(4_096)),
            (None, Some(3_000), 2_048, None, Some(3_000)),
            (Some(16_384), None, 2_048, Some(8_000), Some(4_096)),
            // The issue's: 14,254 prompt tokens in 16,384 leave 2,130.
            (Some(16_384), None, 2_048, Some(14_254), Some(2_130)),
            (Some(16_384), None, 2_048, Some(14_336), None),
            (Some(16_384), None, 2_048, Some(16_000), None),
            // Usage not reported: the window alone cannot say; the maximum holds.
            (Some(16_384), Some(4_096), 2_048, None, Some(4_096)),
        ];
        for &(window, max_output, cap, prompt, want) in cases {
            let model = limited(window, max_output, cap);
            let got = larger_output_cap(&model, &Request::default(), prompt).await;
            assert_eq!(
                got, want,
                "window {window:?}, max {max_output:?}, cap {cap}, prompt {prompt:?}"
            );
            if let (Some(window), Some(prompt), Some(next)) = (window, prompt, got) {
                assert!(prompt + next <= window);
            }
        }
    }

    /// A role's budget leaves the output cap free in the window.
    #[tokio::test]
    async fn the_context_budget_leaves_room_for_the_output_cap() {
        let cases: &[(Option<u64>, u64, u64, u64)] = &[
            // (window, cap, configured budget) → budget
            (None, 4_096, 200_000, 200_000),
            (Some(1_000_000), 32_000, 200_000, 200_000),
            (Some(200_000), 32_000, 200_000, 168_000),
            (Some(16_384), 2_048, 200_000, 14_336),
            (Some(16_384), 2_048, 10_000, 10_000),
            // A cap as large as the window: the window, each request's cap lowered.
            (Some(4_096), 4_096, 200_000, 4_096),
        ];
        for &(window, cap, budget, want) in cases {
            let model = limited(window, None, cap);
            assert_eq!(
                context_budget(&model, budget).await,
                want,
                "window {window:?}, cap {cap}, budget {budget}"
            );
        }
    }
}
