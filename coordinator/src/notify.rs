//! Webhooks (docs/notifications.md). A session's core decides an event
//! (`Core::notify`) with the step that causes it; the step's `Notify`
//! effect stores it in `ARBITER_NOTIFY` once the step is stored (so no
//! restart loses one); each hook's delivery (`deliver.rs`) reads it from
//! there, apart from every session. This file starts them: the stream is
//! declared and each hook's durable made at start, before any session
//! runs, and only when hooks are configured.

pub mod config;
mod deliver;
mod sign;

use std::sync::atomic::{AtomicBool, Ordering};

use arbiter_bus::{Bus, BusError};
use arbiter_protocol::roles::NatsRole;
use tokio_util::sync::CancellationToken;

pub use config::{DEFAULT_HOOK_TIMEOUT, Format, Hook, HookArgs, Secret, hooks};

/// Declares the events' stream and each hook's durable. `false` when this
/// coordinator's credential may not (one signed before the webhooks'
/// grant): said once, and the sessions then store no event.
pub(crate) async fn prepare(
    bus: &Bus,
    hooks: &[Hook],
    replicas: Option<usize>,
) -> Result<Vec<async_nats::jetstream::consumer::PullConsumer>, BusError> {
    for hook in hooks.iter().filter(|h| h.is_plaintext_remote()) {
        tracing::warn!(hook = %hook.name, url = %hook.origin(), "this webhook is plain http to another machine: its events cross the network unencrypted (use https)");
    }
    let declared = arbiter_bus::setup::riding_out("declaring the webhook events' stream", || {
        arbiter_bus::setup::guarded(
            &bus.alarms,
            NatsRole::Coordinator,
            arbiter_bus::setup::declare_notify(&bus.js, replicas),
        )
    })
    .await;
    declared?;
    let mut consumers = Vec::new();
    for hook in hooks {
        let opened = arbiter_bus::setup::guarded(&bus.alarms, NatsRole::Coordinator, async {
            deliver::open(bus, hook).await.map_err(|e| {
                arbiter_bus::js_error(format!("making the durable of hook {}", hook.name), e)
            })
        })
        .await?;
        consumers.push(opened);
    }
    Ok(consumers)
}

/// Starts each hook's delivery; they end with `stop`.
pub(crate) fn start(
    bus: &Bus,
    hooks: Vec<Hook>,
    consumers: Vec<async_nats::jetstream::consumer::PullConsumer>,
    stop: &CancellationToken,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for (hook, consumer) in hooks.into_iter().zip(consumers) {
        tracing::info!(hook = %hook.name, url = %hook.origin(), events = ?hook.events.iter().map(|k| k.as_str()).collect::<Vec<_>>(), "webhook ready");
        tasks.spawn(deliver::run(bus.clone(), hook, consumer, stop.clone()));
    }
    tasks
}

/// Said once per process: an event the server refused to store.
static DENIED: AtomicBool = AtomicBool::new(false);

/// An event the server refused to store (this credential lacks the
/// webhooks' grant): said once, as an error, and the event is dropped; the
/// session goes on.
pub(crate) fn refused(denied: &str) {
    if !DENIED.swap(true, Ordering::Relaxed) {
        tracing::error!(
            denied,
            "NATS denied this coordinator storing a webhook event: its credential lacks the webhooks' grant, so events are dropped and sessions go on (arbiter-admin revoke, then issue coordinator, gives it the current grants)"
        );
    } else {
        tracing::debug!(denied, "webhook event refused by the server; dropped");
    }
}
