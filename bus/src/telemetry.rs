//! OpenTelemetry for every Arbiter binary: traces and metrics exported over
//! OTLP/HTTP (protobuf) when the standard `OTEL_*` variables ask for it, and
//! nothing at all otherwise.
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the per-signal
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `…_METRICS_ENDPOINT`) is set and
//! `OTEL_SDK_DISABLED` is not `true`. The SDK itself reads the rest:
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`.
//! When it is off, no OpenTelemetry layer is installed and the propagator is
//! the SDK's no-op: spans cost what a `tracing` span costs.
//!
//! An endpoint that cannot be reached costs the work nothing: spans are
//! batched on the SDK's own thread and dropped when its queue is full, and
//! the failure is told once, in one warning line (and once more when export
//! works again), never per batch.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use tracing::Subscriber;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// The variable that turns on prompt and completion text in model spans
/// (the name the OpenTelemetry GenAI instrumentations use). Off by default.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// The crates whose own logs never become spans or span events: the
/// exporter's HTTP client and the SDK would otherwise trace their own export.
const NOT_TRACED: [&str; 8] = [
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
    "opentelemetry_http",
    "reqwest",
    "hyper",
    "hyper_util",
    "h2",
];

/// The providers of one process; [`Telemetry::shutdown`] flushes them.
#[derive(Default)]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
    /// What setting up found wrong, told once logging is up.
    warnings: Vec<String>,
}

/// Sets up a process's logging and telemetry: its log (`filter`, written
/// by `writer`) without the SDK's own chatter, plus the OpenTelemetry layer
/// when export is on. Keep the result and [`Telemetry::shutdown`] it at exit.
pub fn init<W>(
    service: &'static str,
    filter: tracing_subscriber::EnvFilter,
    writer: W,
    ansi: bool,
) -> Telemetry
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let telemetry = Telemetry::from_env(service);
    let filter = quiet_directives().fold(filter, |f, d| f.add_directive(d));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(ansi)
                .with_filter(filter),
        )
        .with(telemetry.layer())
        .init();
    for warning in &telemetry.warnings {
        tracing::warn!(target: "arbiter_telemetry", "{warning}");
    }
    telemetry
}

impl Telemetry {
    /// Reads the `OTEL_*` environment and starts the exporters it asks for.
    /// `service` is the service name unless `OTEL_SERVICE_NAME` gives one.
    /// Call it once, before the first span.
    pub fn from_env(service: &'static str) -> Self {
        Self::from_lookup(service, |name| std::env::var(name).ok())
    }

    fn from_lookup(service: &'static str, env: impl Fn(&str) -> Option<String>) -> Self {
        let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Self::default();
        }
        let any = set("OTEL_EXPORTER_OTLP_ENDPOINT");
        let traces_on = any || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let metrics_on = any || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
        if !traces_on && !metrics_on {
            return Self::default();
        }
        let mut warnings = Vec::new();
        if let Some(protocol) = env("OTEL_EXPORTER_OTLP_PROTOCOL")
            && protocol.trim() != "http/protobuf"
        {
            warnings.push(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not built in; exporting with \
                 http/protobuf"
            ));
        }
        let mut resource = Resource::builder();
        if !set("OTEL_SERVICE_NAME") {
            resource = resource.with_service_name(service);
        }
        let resource = resource.build();
        let endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
            .map(|url| crate::redact_url(url.trim()))
            .unwrap_or_default();
        let health = Health::new(endpoint);
        let traces = traces_on
            .then(|| {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .build()
                    .map_err(|e| warnings.push(health.refused("traces", &e)))
                    .ok()
            })
            .flatten()
            .map(|exporter| {
                SdkTracerProvider::builder()
                    .with_batch_exporter(Quiet {
                        inner: exporter,
                        health: health.clone(),
                    })
                    .with_resource(resource.clone())
                    .build()
            });
        let metrics = metrics_on
            .then(|| {
                opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .build()
                    .map_err(|e| warnings.push(health.refused("metrics", &e)))
                    .ok()
            })
            .flatten()
            .map(|exporter| {
                SdkMeterProvider::builder()
                    .with_periodic_exporter(Quiet {
                        inner: exporter,
                        health: health.clone(),
                    })
                    .with_resource(resource)
                    .build()
            });
        if traces.is_some() {
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        }
        if let Some(metrics) = &metrics {
            opentelemetry::global::set_meter_provider(metrics.clone());
        }
        Self {
            traces,
            metrics,
            warnings,
        }
    }

    /// Whether spans are exported.
    pub fn tracing(&self) -> bool {
        self.traces.is_some()
    }

    /// The layer that turns `tracing` spans into OpenTelemetry spans, with
    /// its own filter (info and up, the exporter's own crates left out);
    /// `None` when traces are off.
    pub fn layer<S>(&self) -> Option<impl tracing_subscriber::Layer<S> + use<S>>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        let tracer: SdkTracer = self.traces.as_ref()?.tracer("arbiter");
        let filter = NOT_TRACED
            .iter()
            .fold(Targets::new().with_default(LevelFilter::INFO), |t, name| {
                t.with_target(*name, LevelFilter::OFF)
            });
        Some(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_filter(filter),
        )
    }

    /// Exports what is buffered and stops the exporters. It blocks (up to
    /// a few seconds against an endpoint that does not answer): call it
    /// outside the async runtime or in `spawn_blocking`.
    pub fn shutdown(self) {
        if let Some(traces) = self.traces {
            let _ = traces.shutdown_with_timeout(Duration::from_secs(5));
        }
        if let Some(metrics) = self.metrics {
            let _ = metrics.shutdown_with_timeout(Duration::from_secs(5));
        }
    }
}

/// Directives that keep the SDK's and the exporter's own logs out of a
/// process's log: [`Health`] says what matters, once.
pub fn quiet_directives() -> impl Iterator<Item = tracing_subscriber::filter::Directive> {
    NOT_TRACED[..4]
        .iter()
        .filter_map(|name| format!("{name}=off").parse().ok())
}

/// Whether the endpoint was reachable at the last export; shared by the
/// trace and the metric exporter so that a dead endpoint is one line.
#[derive(Clone, Debug)]
struct Health {
    endpoint: Arc<str>,
    failing: Arc<AtomicBool>,
}

impl Health {
    fn new(endpoint: String) -> Self {
        Self {
            endpoint: endpoint.into(),
            failing: Arc::new(AtomicBool::new(false)),
        }
    }

    fn refused(&self, what: &str, error: &dyn std::fmt::Display) -> String {
        format!(
            "OpenTelemetry: cannot export {what} to {}: {}; the work goes on without them",
            self.endpoint,
            short(&error.to_string())
        )
    }

    fn report(&self, result: &OTelSdkResult) {
        match result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(target: "arbiter_telemetry", endpoint = %self.endpoint, "OpenTelemetry: exporting again");
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        target: "arbiter_telemetry",
                        endpoint = %self.endpoint,
                        "OpenTelemetry: cannot export to the OTLP endpoint ({}); the work \
                         goes on, its telemetry is dropped until the endpoint answers",
                        short(&e.to_string())
                    );
                }
            }
        }
    }
}

/// The first line of an error, without any URL credentials.
fn short(text: &str) -> Cow<'_, str> {
    let first = text.lines().next().unwrap_or_default();
    if first.contains('@') {
        Cow::Owned(
            first
                .split_whitespace()
                .map(crate::redact_url)
                .collect::<Vec<_>>()
                .join(" "),
        )
    } else {
        Cow::Borrowed(first)
    }
}

/// An exporter that tells its failures once through [`Health`].
#[derive(Debug)]
struct Quiet<E> {
    inner: E,
    health: Health,
}

impl<E: SpanExporter> SpanExporter for Quiet<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let export = self.inner.export(batch);
        async move {
            let result = export.await;
            self.health.report(&result);
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Quiet<E> {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let export = self.inner.export(metrics);
        async move {
            let result = export.await;
            self.health.report(&result);
            result
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_unless_an_endpoint_is_set() {
        let t = Telemetry::from_lookup("x", |_| None);
        assert!(!t.tracing());
        let t = Telemetry::from_lookup("x", |name| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| " ".to_owned())
        });
        assert!(!t.tracing());
        let t = Telemetry::from_lookup("x", |name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:9".to_owned()),
            "OTEL_SDK_DISABLED" => Some("true".to_owned()),
            _ => None,
        });
        assert!(!t.tracing());
    }

    #[test]
    fn errors_lose_their_credentials() {
        assert_eq!(
            short("error sending request for url (http://user:pw@host:4318/v1/traces)\nmore"),
            "error sending request for url (http://<credentials>@host:4318/v1/traces)"
        );
    }
}
