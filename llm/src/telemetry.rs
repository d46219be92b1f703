//! A span per model request, named and filled as the OpenTelemetry GenAI
//! semantic conventions say (`chat <model>`, `gen_ai.*` attributes): the
//! provider, the requested model, the tokens the provider reported, the
//! finish reason, the error kind. The prompt and the completion are left out
//! unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; keys and
//! headers never reach a span.
//!
//! The spans are plain `tracing` spans: when a process exports nothing they
//! cost what any span costs. The same requests feed the conventions'
//! metrics, `gen_ai.client.token.usage` (by token type, model and role) and
//! `gen_ai.client.operation.duration`, and `arbiter.model.errors` by kind.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};

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
    /// The attributes of its metrics.
    labels: Arc<[KeyValue]>,
}

struct Instruments {
    tokens: Histogram<u64>,
    duration: Histogram<f64>,
    errors: Counter<u64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("arbiter");
        Instruments {
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_description("Tokens used per model request, by token type")
                .with_unit("{token}")
                .with_boundaries(vec![
                    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
                    1048576.0, 4194304.0,
                ])
                .build(),
            duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_description("Duration of model requests")
                .with_unit("s")
                .with_boundaries(vec![
                    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92,
                ])
                .build(),
            errors: meter
                .u64_counter("arbiter.model.errors")
                .with_description("Failed model requests, by kind")
                .with_unit("{request}")
                .build(),
        }
    })
}

impl Traced {
    pub fn new(
        inner: Arc<dyn Model>,
        config: &ModelConfig,
        role: Option<arbiter_protocol::Role>,
    ) -> Self {
        let capture =
            std::env::var(CAPTURE_CONTENT_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let provider = provider_name(config.provider);
        let mut labels = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider),
            KeyValue::new("gen_ai.request.model", config.model.clone()),
        ];
        if let Some(role) = role {
            labels.push(KeyValue::new("arbiter.role", role_name(role)));
        }
        Self {
            inner,
            provider,
            model: config.model.clone(),
            capture,
            labels: labels.into(),
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
            if let Ok(messages) = serde_json::to_string(&*request.messages) {
                span.record("gen_ai.input.messages", messages.as_str());
            }
        }
        span
    }

    fn finish(&self, span: &tracing::Span, result: &Result<Response, LlmError>, start: Instant) {
        record(span, result.as_ref(), &self.model, self.capture);
        measure(&self.labels, result.as_ref(), start);
    }
}

fn role_name(role: arbiter_protocol::Role) -> &'static str {
    match role {
        arbiter_protocol::Role::Arbiter => "arbiter",
        arbiter_protocol::Role::Orchestrator => "orchestrator",
        arbiter_protocol::Role::Subagent => "subagent",
    }
}

/// The metrics of one request.
fn measure(labels: &[KeyValue], result: Result<&Response, &LlmError>, start: Instant) {
    let m = instruments();
    let seconds = start.elapsed().as_secs_f64();
    match result {
        Ok(response) => {
            m.duration.record(seconds, labels);
            if let Some(usage) = response.usage {
                for (kind, tokens) in [
                    ("input", usage.total_input()),
                    ("output", usage.output_tokens),
                ] {
                    let mut with = labels.to_vec();
                    with.push(KeyValue::new("gen_ai.token.type", kind));
                    m.tokens.record(tokens, &with);
                }
            }
        }
        Err(e) => {
            let mut with = labels.to_vec();
            with.push(KeyValue::new("error.type", error_type(e)));
            m.duration.record(seconds, &with);
            m.errors.add(1, &with);
        }
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
        let labels = self.labels.clone();
        let start = Instant::now();
        Box::pin(
            async move {
                let events = match self.inner.stream(request).await {
                    Ok(events) => events,
                    Err(e) => {
                        record(&tracing::Span::current(), Err(&e), &model, capture);
                        measure(&labels, Err(&e), start);
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
                                measure(&labels, Ok(response), start);
                            }
                            Err(e) => {
                                record(&span, Err(e), &model, capture);
                                measure(&labels, Err(e), start);
                            }
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
        let start = Instant::now();
        Box::pin(
            async move {
                let result = self.inner.complete(request).await;
                self.finish(&tracing::Span::current(), &result, start);
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
