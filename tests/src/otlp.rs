//! An OTLP/HTTP receiver for tests: it takes the protobuf exports of traces
//! and metrics on `/v1/traces` and `/v1/metrics`, as a collector does,
//! decodes them with the `opentelemetry-proto` types and keeps them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message as _;

/// A value of an attribute, as the receiver decoded it.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Other(String),
}

impl Attr {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Attr::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// One span as exported, with its service's name.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub name: String,
    /// Hex, 32 characters.
    pub trace_id: String,
    /// Hex, 16 characters.
    pub span_id: String,
    /// Hex; empty for a root span.
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, Attr>,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attributes.get(key)
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(Attr::as_str)
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(Attr::as_i64)
    }
}

/// One data point of a metric: its attributes and its value (a sum's or
/// gauge's value, a histogram's count).
#[derive(Debug, Clone)]
pub struct ReceivedPoint {
    pub service: String,
    pub metric: String,
    pub attributes: BTreeMap<String, Attr>,
    pub value: f64,
    /// A histogram's sum.
    pub sum: Option<f64>,
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    points: Vec<ReceivedPoint>,
    trace_exports: usize,
    metric_exports: usize,
}

type Shared = Arc<Mutex<Received>>;

/// A running receiver; stopped on drop.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let received = Shared::default();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            received,
            task,
        }
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.lock().spans.clone()
    }

    pub fn points(&self) -> Vec<ReceivedPoint> {
        self.lock().points.clone()
    }

    /// Export requests taken so far (traces, metrics).
    pub fn exports(&self) -> (usize, usize) {
        let r = self.lock();
        (r.trace_exports, r.metric_exports)
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn decode_value(value: Option<&AnyValue>) -> Attr {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Attr::Str(s.clone()),
        Some(any_value::Value::IntValue(i)) => Attr::Int(*i),
        Some(any_value::Value::DoubleValue(d)) => Attr::Double(*d),
        Some(any_value::Value::BoolValue(b)) => Attr::Bool(*b),
        other => Attr::Other(format!("{other:?}")),
    }
}

fn decode_attributes(attributes: &[KeyValue]) -> BTreeMap<String, Attr> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), decode_value(kv.value.as_ref())))
        .collect()
}

fn service_of(resource: Option<&opentelemetry_proto::tonic::resource::v1::Resource>) -> String {
    resource
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .and_then(|kv| decode_value(kv.value.as_ref()).as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn protobuf(body: Vec<u8>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        body,
    )
}

async fn traces(State(received): State<Shared>, body: Bytes) -> axum::response::Response {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, "not an ExportTraceServiceRequest").into_response();
    };
    let mut spans = Vec::new();
    for resource in &request.resource_spans {
        let service = service_of(resource.resource.as_ref());
        for scope in &resource.scope_spans {
            for span in &scope.spans {
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: decode_attributes(&span.attributes),
                });
            }
        }
    }
    let mut r = received.lock().unwrap_or_else(PoisonError::into_inner);
    r.trace_exports += 1;
    r.spans.extend(spans);
    protobuf(ExportTraceServiceResponse::default().encode_to_vec()).into_response()
}

async fn metrics(State(received): State<Shared>, body: Bytes) -> axum::response::Response {
    let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
        return (
            StatusCode::BAD_REQUEST,
            "not an ExportMetricsServiceRequest",
        )
            .into_response();
    };
    let mut points = Vec::new();
    for resource in &request.resource_metrics {
        let service = service_of(resource.resource.as_ref());
        for scope in &resource.scope_metrics {
            for metric in &scope.metrics {
                let mut push = |attributes: &[KeyValue], value: f64, sum: Option<f64>| {
                    points.push(ReceivedPoint {
                        service: service.clone(),
                        metric: metric.name.clone(),
                        attributes: decode_attributes(attributes),
                        value,
                        sum,
                    });
                };
                use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as N;
                let number = |v: &Option<N>| match v {
                    Some(N::AsDouble(d)) => *d,
                    Some(N::AsInt(i)) => *i as f64,
                    None => 0.0,
                };
                match &metric.data {
                    Some(Data::Sum(sum)) => {
                        for p in &sum.data_points {
                            push(&p.attributes, number(&p.value), None);
                        }
                    }
                    Some(Data::Gauge(gauge)) => {
                        for p in &gauge.data_points {
                            push(&p.attributes, number(&p.value), None);
                        }
                    }
                    Some(Data::Histogram(h)) => {
                        for p in &h.data_points {
                            push(&p.attributes, p.count as f64, p.sum);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let mut r = received.lock().unwrap_or_else(PoisonError::into_inner);
    r.metric_exports += 1;
    r.points.extend(points);
    protobuf(ExportMetricsServiceResponse::default().encode_to_vec()).into_response()
}
