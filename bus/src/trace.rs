//! Trace context carried in NATS headers by the OpenTelemetry propagator
//! (W3C `traceparent`/`tracestate`), so one human line is one trace through
//! the console, the coordinator and the worker. With export off the
//! propagator is the SDK's no-op: nothing is written or read.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The context of a span a message was sent from, to be sent with it or
/// to parent the spans of the work it causes.
#[derive(Debug, Clone, Default)]
pub struct TraceContext(opentelemetry::Context);

impl TraceContext {
    /// No context: a message that starts nothing traced (a test, a tool).
    pub fn none() -> Self {
        Self::default()
    }

    /// The context of `span` (empty when it is not exported).
    pub fn of(span: &tracing::Span) -> Self {
        Self(span.context())
    }

    /// The context of the span the caller is in.
    pub fn current() -> Self {
        Self::of(&tracing::Span::current())
    }

    /// Writes the context into `headers` through the global propagator.
    pub fn inject(&self, headers: &mut HeaderMap) {
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&self.0, &mut HeaderInjector(headers));
        });
    }

    /// The context a received message carries; empty when it has none or a bad one.
    pub fn from_headers(headers: Option<&HeaderMap>) -> Self {
        match headers {
            Some(headers) => Self(opentelemetry::global::get_text_map_propagator(|p| {
                p.extract(&HeaderExtractor(headers))
            })),
            None => Self::none(),
        }
    }

    /// Makes `span` a child of this context (a span in another process).
    /// Call it before the span is first entered.
    pub fn adopt(&self, span: &tracing::Span) {
        use opentelemetry::trace::TraceContextExt as _;
        if self.0.span().span_context().is_valid() {
            let _ = span.set_parent(self.0.clone());
        }
    }

    /// The trace id in hex, when there is one (for logs).
    pub fn trace_id(&self) -> Option<String> {
        use opentelemetry::trace::TraceContextExt as _;
        let context = self.0.span().span_context().clone();
        context.is_valid().then(|| context.trace_id().to_string())
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_ref()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId};
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    #[test]
    fn context_round_trips_through_nats_headers() {
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            Default::default(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(span.clone());
        let propagator = TraceContextPropagator::new();
        let mut headers = HeaderMap::new();
        propagator.inject_context(&cx, &mut HeaderInjector(&mut headers));
        assert_eq!(
            headers.get("traceparent").map(|v| v.as_str()),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        let back = propagator.extract(&HeaderExtractor(&headers));
        assert_eq!(back.span().span_context(), &span);
        // A bad header is no context, not an error.
        let mut bad = HeaderMap::new();
        bad.insert("traceparent", "garbage");
        let none = propagator.extract(&HeaderExtractor(&bad));
        assert!(!none.span().span_context().is_valid());
    }
}
