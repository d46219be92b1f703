//! A span per model request, named and filled as the OpenTelemetry GenAI
//! semantic conventions say (`chat <model>`, `gen_ai.*` attributes): the
//! provider, the requested model, the tokens the provider reported, the
//! finish reason, the error kind. The prompt and the completion are left out
//! unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; keys and
//! headers never reach a span.
//!
//! The spans are plain `tracing` spans: when a process exports nothing they
//! cost what any span costs.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::{LlmError, Model, ModelConfig, ModelLimits, Provider, Request, Response, StreamEvent};

/// The variable that lets prompt and completion text into spans.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// A model with a span around every request.
pub struct Traced {
    inner: Arc<dyn Model>,
    provider: &'static str,
    model: String,
    capture: bool,
}

impl Traced {
    pub fn new(inner: Arc<dyn Model>, config: &ModelConfig) -> Self {
        let capture =
            std::env::var(CAPTURE_CONTENT_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        Self {
            inner,
            provider: provider_name(config.provider),
            model: config.model.clone(),
            capture,
        }
    }

    fn span(&self, request: &Request) -> tracing::Span {
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", self.model),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = self.provider,
            gen_ai.request.model = %self.model,
            gen_ai.request.max_tokens = request.max_output_tokens.map(int),
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            gen_ai.system_instructions = Empty,
            error.type = Empty,
        );
        if self.capture && !span.is_disabled() {
            span.record("gen_ai.system_instructions", request.system.as_str());
            if let Ok(messages) = serde_json::to_string(&request.messages) {
                span.record("gen_ai.input.messages", messages.as_str());
            }
        }
        span
    }

    fn finish(&self, span: &tracing::Span, result: &Result<Response, LlmError>) {
        record(span, result.as_ref(), &self.model, self.capture);
    }
}

/// The provider as the conventions name it.
fn provider_name(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "anthropic",
        Provider::OpenAi => "openai",
    }
}

fn record(span: &tracing::Span, result: Result<&Response, &LlmError>, model: &str, capture: bool) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(response) => {
            span.record("gen_ai.response.model", model);
            span.record(
                "gen_ai.response.finish_reasons",
                finish_reason(&response.stop_reason).as_str(),
            );
            if let Some(usage) = response.usage {
                // The conventions count every input token, cached ones included.
                span.record("gen_ai.usage.input_tokens", int(usage.total_input()));
                span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
                span.record(
                    "gen_ai.usage.cache_read.input_tokens",
                    int(usage.cache_read_input_tokens),
                );
                span.record(
                    "gen_ai.usage.cache_creation.input_tokens",
                    int(usage.cache_creation_input_tokens),
                );
            }
            if capture && let Ok(content) = serde_json::to_string(&response.content) {
                span.record("gen_ai.output.messages", content.as_str());
            }
        }
        Err(e) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", error_type(e).as_str());
        }
    }
}

/// A count as the integer attribute OpenTelemetry has (`tracing`'s `u64`
/// would reach the exporter as text).
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The kind of a failed request, as a short snake_case word.
pub fn error_type(error: &LlmError) -> String {
    serde_json::to_value(error.kind())
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "other".to_owned())
}

fn finish_reason(reason: &crate::StopReason) -> String {
    use crate::StopReason::*;
    match reason {
        EndTurn => "end_turn".into(),
        ToolUse => "tool_use".into(),
        MaxTokens => "max_tokens".into(),
        StopSequence => "stop_sequence".into(),
        Refusal => "refusal".into(),
        PauseTurn => "pause_turn".into(),
        ContextWindowExceeded => "model_context_window_exceeded".into(),
        Repetition => "repetition".into(),
        Other(other) => other.clone(),
    }
}

impl Model for Traced {
    fn stream(
        &self,
        request: Request,
    ) -> BoxFuture<'_, crate::Result<BoxStream<'static, crate::Result<StreamEvent>>>> {
        let span = self.span(&request);
        let model = self.model.clone();
        let capture = self.capture;
        Box::pin(
            async move {
                let events = match self.inner.stream(request).await {
                    Ok(events) => events,
                    Err(e) => {
                        record(&tracing::Span::current(), Err(&e), &model, capture);
                        return Err(e);
                    }
                };
                let span = tracing::Span::current();
                // The span lasts as long as the stream; it ends when it is dropped.
                Ok(events
                    .map(move |event| {
                        match &event {
                            Ok(StreamEvent::Completed(response)) => {
                                record(&span, Ok(response), &model, capture);
                            }
                            Err(e) => record(&span, Err(e), &model, capture),
                            Ok(_) => {}
                        }
                        event
                    })
                    .boxed())
            }
            .instrument(span),
        )
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn complete(&self, request: Request) -> BoxFuture<'_, crate::Result<Response>> {
        let span = self.span(&request);
        Box::pin(
            async move {
                let result = self.inner.complete(request).await;
                self.finish(&tracing::Span::current(), &result);
                result
            }
            .instrument(span),
        )
    }

    fn limits(&self) -> BoxFuture<'_, ModelLimits> {
        self.inner.limits()
    }

    fn output_cap(&self) -> BoxFuture<'_, Option<u64>> {
        self.inner.output_cap()
    }
}
