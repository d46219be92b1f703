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
mod http;
pub mod meter;
mod model_config;
mod openai;
pub mod output;
pub mod price;
mod repetition;
mod retry;
pub mod schema;
pub mod structured;
pub mod telemetry;
mod types;

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
/// the one it had, bounded by the model's maximum. `None` when no larger cap
/// is possible or the current one is not known; then the reply is repaired
/// (told to be shorter) instead, never sent again as it was.
pub async fn larger_output_cap(model: &dyn Model, request: &Request) -> Option<u64> {
    let current = match request.max_output_tokens {
        Some(cap) => cap,
        None => model.output_cap().await?,
    };
    let doubled = current.saturating_mul(2);
    let next = match model.limits().await.max_output_tokens {
        Some(limit) => doubled.min(limit),
        None => doubled,
    };
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
/// to the model's window when the window is known and smaller.
pub async fn context_budget(model: &dyn Model, budget: u64) -> u64 {
    match model.limits().await.context_window {
        Some(window) if window < budget => {
            tracing::warn!(
                model = model.name(),
                budget,
                window,
                "the context budget is larger than the model's window; using the window"
            );
            window
        }
        _ => budget,
    }
}
