//! An Orchestrator's input consumer `orch-<orch_id>`: the Arbiter's messages
//! (`.in`) and control (`.ctl`), in stream order. It is shared by whichever
//! worker holds the Orchestrator's lease, and made afresh (deliver all) when
//! a worker claims it, so inputs and control taken but not stored by a
//! previous holder come again at once. Inputs are acknowledged by the agent
//! only once the record that took them is stored, and only in `seq` order:
//! duplicates are dropped against the stored state, and an input ahead of
//! its turn waits for the ones before it (see `arbiter_bus::seq`).

use std::sync::Arc;
use std::time::Duration;

use arbiter_protocol::{Control, OrchestratorInput, subjects};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::Shared;
use crate::stop::{Cause, Stopper};

/// A consumer left behind by a dead worker is removed after this long.
const CONSUMER_INACTIVE: Duration = Duration::from_secs(3600);
/// An input taken but neither stored nor handed back comes again after this long.
const INPUT_ACK_WAIT: Duration = Duration::from_secs(30);
// Inputs held for a gap must outlast one redelivery of what is missing.
const _: () = assert!(INPUT_ACK_WAIT.as_secs() < crate::DEFAULT_INPUT_GAP_WAIT.as_secs());
/// Attempts to (re)create the consumer before the claim is given up.
const OPEN_ATTEMPTS: u64 = 3;
/// Wait between attempts to open a consumer that went away.
const REOPEN_DELAY: Duration = Duration::from_millis(500);

/// One message from the Arbiter, not yet acknowledged.
pub(crate) struct Input {
    pub seq: u64,
    pub text: String,
    pub msg: Message,
}

pub(crate) type Messages = pull::Stream;

/// Deletes and re-creates the durable consumer of this Orchestrator's inputs
/// and control, so that it delivers everything not acknowledged yet from the
/// start, whoever held it before.
pub(crate) async fn open(shared: &Shared, orch_id: &str) -> Result<Messages, String> {
    let mut last_error = String::new();
    for attempt in 1..=OPEN_ATTEMPTS {
        match try_open(shared, orch_id).await {
            Ok(messages) => return Ok(messages),
            Err(e) => {
                tracing::warn!(attempt, error = %e, "could not open the input consumer");
                last_error = e;
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
        }
    }
    Err(last_error)
}

async fn try_open(shared: &Shared, orch_id: &str) -> Result<Messages, String> {
    let stream = shared
        .bus
        .js
        .get_stream(subjects::ORCH_STREAM)
        .await
        .map_err(|e| format!("opening the Orchestrator stream: {e}"))?;
    let name = subjects::orch_consumer(orch_id);
    // Missing is fine: a new Orchestrator has none yet.
    let _ = stream.delete_consumer(&name).await;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(name.clone()),
            filter_subjects: vec![subjects::orch_in(orch_id), subjects::orch_ctl(orch_id)],
            ack_policy: AckPolicy::Explicit,
            ack_wait: INPUT_ACK_WAIT,
            deliver_policy: DeliverPolicy::All,
            inactive_threshold: CONSUMER_INACTIVE,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("creating the input consumer: {e}"))?;
    arbiter_bus::follow(&consumer)
        .await
        .map_err(|e| format!("reading inputs: {e}"))
}

/// Removes the consumer once the Orchestrator has ended.
pub(crate) async fn delete(shared: &Shared, orch_id: &str) {
    if let Ok(stream) = shared.bus.js.get_stream(subjects::ORCH_STREAM).await {
        let _ = stream
            .delete_consumer(&subjects::orch_consumer(orch_id))
            .await;
    }
}

/// Opens the existing consumer again (never creates it: only a claim does).
async fn reopen(shared: &Shared, orch_id: &str) -> Result<Messages, String> {
    let stream = shared
        .bus
        .js
        .get_stream(subjects::ORCH_STREAM)
        .await
        .map_err(|e| e.to_string())?;
    let consumer = stream
        .get_consumer::<pull::Config>(&subjects::orch_consumer(orch_id))
        .await
        .map_err(|e| e.to_string())?;
    arbiter_bus::follow(&consumer)
        .await
        .map_err(|e| e.to_string())
}

/// Hands the agent its inputs in stream order and turns a release or cancel
/// into a stop. Malformed messages are rejected (terminated). If the consumer
/// goes away (another worker claimed the Orchestrator and made it afresh;
/// the lease check stops this one), it is opened again.
pub(crate) async fn read(
    shared: Arc<Shared>,
    orch_id: String,
    mut messages: Messages,
    inputs: mpsc::Sender<Input>,
    stopper: Stopper,
) {
    loop {
        if !read_from(&mut messages, &inputs, &stopper).await {
            return;
        }
        tracing::warn!("the input consumer went away; opening it again");
        loop {
            tokio::time::sleep(REOPEN_DELAY).await;
            match reopen(&shared, &orch_id).await {
                Ok(reopened) => {
                    messages = reopened;
                    break;
                }
                Err(e) => tracing::debug!(error = %e, "input consumer not back yet"),
            }
        }
    }
}

/// Reads until the stream ends (true) or the reading is over (false).
async fn read_from(
    messages: &mut Messages,
    inputs: &mpsc::Sender<Input>,
    stopper: &Stopper,
) -> bool {
    while let Some(next) = messages.next().await {
        let msg = match next {
            Ok(msg) => msg,
            Err(e) => {
                tracing::warn!(error = %e, "input consumer hiccup");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let subject = msg.subject.to_string();
        if subject.ends_with(".ctl") {
            match arbiter_bus::decode::<Control>(&subject, &msg.payload) {
                Ok(control) => {
                    tracing::info!(action = ?control.action, "control received");
                    stopper.stop(Cause::Control {
                        action: control.action,
                        msg: Box::new(msg),
                    });
                    return false;
                }
                Err(error) => {
                    tracing::error!(%subject, %error, "malformed control message rejected");
                    let _ = msg.ack_with(AckKind::Term).await;
                }
            }
            continue;
        }
        arbiter_bus::metrics::hop(&msg, "coordinator→orchestrator");
        match arbiter_bus::decode::<OrchestratorInput>(&subject, &msg.payload) {
            Ok(input) => {
                let input = Input {
                    seq: input.seq,
                    text: input.message,
                    msg,
                };
                if inputs.send(input).await.is_err() {
                    return false;
                }
            }
            Err(error) => {
                tracing::error!(%subject, %error, "malformed input rejected");
                let _ = msg.ack_with(AckKind::Term).await;
            }
        }
    }
    true
}
