//! The metrics Arbiter's processes record, on the OpenTelemetry meter set
//! up by [`crate::telemetry`]. With export off the meter is the SDK's no-op:
//! recording costs a call that does nothing. Model metrics
//! (`gen_ai.client.*`) are recorded by `arbiter_llm::telemetry`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use async_nats::jetstream;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, UpDownCounter};

/// Set when a meter provider exports: work done only to measure (a
/// request to the server) is skipped otherwise.
static ON: AtomicBool = AtomicBool::new(false);

pub(crate) fn switch_on() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether metrics are exported.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

struct Instruments {
    sessions: UpDownCounter<i64>,
    orchestrators: UpDownCounter<i64>,
    hop: Histogram<f64>,
    tool_calls: Counter<u64>,
    summons_pending: Gauge<u64>,
    early_calls: Counter<u64>,
    webhook_deliveries: Counter<u64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("arbiter");
        Instruments {
            sessions: meter
                .i64_up_down_counter("arbiter.sessions.live")
                .with_description("Sessions whose actor runs in this coordinator")
                .with_unit("{session}")
                .build(),
            orchestrators: meter
                .i64_up_down_counter("arbiter.orchestrators.live")
                .with_description("Orchestrators running on this worker")
                .with_unit("{orchestrator}")
                .build(),
            hop: meter
                .f64_histogram("arbiter.routing.duration")
                .with_description(
                    "From a message's arrival at the NATS server to its taking by its reader, per hop",
                )
                .with_unit("s")
                .with_boundaries(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ])
                .build(),
            tool_calls: meter
                .u64_counter("arbiter.tool.calls")
                .with_description("Tool calls by tool and outcome")
                .with_unit("{call}")
                .build(),
            summons_pending: meter
                .u64_gauge("arbiter.summons.pending")
                .with_description("Summons of the pool waiting for a worker")
                .with_unit("{summons}")
                .build(),
            early_calls: meter
                .u64_counter("arbiter.model.early_calls")
                .with_description(
                    "Model calls started before what they rest on was read from the stream, by whether their turn took them",
                )
                .with_unit("{call}")
                .build(),
            webhook_deliveries: meter
                .u64_counter("arbiter.webhook.deliveries")
                .with_description(
                    "Webhook delivery attempts by hook and outcome (delivered, failed, given_up, skipped)",
                )
                .with_unit("{attempt}")
                .build(),
        }
    })
}

/// One webhook delivery attempt of hook `hook`: `delivered` (a 2xx),
/// `failed` (to be tried again), `given_up` (older than the stream keeps),
/// `skipped` (an event type the hook does not want, or unreadable).
pub fn webhook_delivery(hook: &str, outcome: &'static str) {
    instruments().webhook_deliveries.add(
        1,
        &[
            KeyValue::new("arbiter.hook", hook.to_owned()),
            KeyValue::new("arbiter.outcome", outcome),
        ],
    );
}

/// A session actor started (+1) or ended (-1).
pub fn session_live(delta: i64) {
    instruments().sessions.add(delta, &[]);
}

/// An Orchestrator started (+1) or stopped (-1) on this worker.
pub fn orchestrator_live(delta: i64) {
    instruments().orchestrators.add(delta, &[]);
}

/// One hop of the routing: from when the server stored `msg` to now, when
/// its reader takes it. `hop` names it (`console→coordinator`, …).
pub fn hop(msg: &jetstream::Message, hop: &'static str) {
    let Ok(info) = msg.info() else {
        return;
    };
    hop_since(info.published, hop);
}

/// The same, for a message read by direct get (`stored`: its stream time).
pub fn hop_since(stored: time::OffsetDateTime, hop: &'static str) {
    let now = time::OffsetDateTime::now_utc();
    let seconds = (now - stored).as_seconds_f64().max(0.0);
    instruments()
        .hop
        .record(seconds, &[KeyValue::new("arbiter.hop", hop)]);
}

/// One tool call and whether its result was an error.
pub fn tool_call(tool: &str, is_error: bool) {
    instruments().tool_calls.add(
        1,
        &[
            KeyValue::new("gen_ai.tool.name", tool.to_owned()),
            KeyValue::new("arbiter.outcome", if is_error { "error" } else { "ok" }),
        ],
    );
}

/// The summons of `pool` waiting for a worker.
pub fn summons_pending(pool: &str, pending: u64) {
    instruments()
        .summons_pending
        .record(pending, &[KeyValue::new("arbiter.pool", pool.to_owned())]);
}

/// A model call started early (on a message seen before the server's stored
/// copy was read) ended: taken by its turn (`adopted`), or dropped unread.
/// `agent` is `arbiter` or `orchestrator`.
pub fn early_call(agent: &'static str, adopted: bool) {
    instruments().early_calls.add(
        1,
        &[
            KeyValue::new("gen_ai.agent.name", agent),
            KeyValue::new(
                "arbiter.outcome",
                if adopted { "adopted" } else { "dropped" },
            ),
        ],
    );
}

/// Counts a model call started early once it is taken or dropped (see
/// [`early_call`]): dropping it counts it as dropped unless it was taken.
pub struct EarlyCall {
    agent: &'static str,
    adopted: bool,
}

impl EarlyCall {
    pub fn new(agent: &'static str) -> Self {
        Self {
            agent,
            adopted: false,
        }
    }

    /// Its turn took it.
    pub fn adopt(&mut self) {
        self.adopted = true;
    }
}

impl Drop for EarlyCall {
    fn drop(&mut self) {
        early_call(self.agent, self.adopted);
    }
}
