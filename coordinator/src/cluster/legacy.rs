//! The human lines an older version left on the session stream's consumer,
//! taken once and the consumer deleted.

use std::sync::Arc;
use std::time::Duration;

use arbiter_protocol::subjects;
use async_nats::jetstream::consumer::pull;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Shared;

/// Human lines pulled at once from an older version's consumer.
pub(super) const LEGACY_BATCH: usize = 256;

/// Takes the human lines an older version's `coordinator-human` on the
/// session stream had not taken when the human subjects moved to the intake
/// (`bus::setup::declare`, at this version's first start): each as any
/// other line, then the consumer is deleted. Nothing new reaches it once
/// its stream lost the subjects. Several coordinators may drain it at once;
/// the one that finds it empty deletes it, and the others then stop.
pub(super) async fn drain_legacy(
    shared: Arc<Shared>,
    to: mpsc::Sender<async_nats::jetstream::Message>,
    stop: CancellationToken,
) {
    let name = subjects::COORDINATOR_HUMAN_CONSUMER;
    let Ok(stream) = shared.bus.js.get_stream(subjects::SESSIONS_STREAM).await else {
        return;
    };
    let Ok(mut consumer) = stream.get_consumer::<pull::Config>(name).await else {
        return;
    };
    tracing::info!(
        stream = subjects::SESSIONS_STREAM,
        consumer = name,
        "taking the human lines an older version left on the session stream"
    );
    let mut taken = 0u64;
    while !stop.is_cancelled() {
        let batch = consumer
            .fetch()
            .max_messages(LEGACY_BATCH)
            .expires(Duration::from_secs(1))
            .messages()
            .await;
        let Ok(mut batch) = batch else {
            return;
        };
        let mut got = 0;
        while let Some(Ok(msg)) = batch.next().await {
            got += 1;
            if to.send(msg).await.is_err() {
                return;
            }
        }
        taken += got;
        if got > 0 {
            continue;
        }
        match consumer.info().await {
            Ok(info) if info.num_pending == 0 && info.num_ack_pending == 0 => {
                match stream.delete_consumer(name).await {
                    Ok(_) => tracing::info!(
                        stream = subjects::SESSIONS_STREAM,
                        consumer = name,
                        taken,
                        "the older version's human lines are all taken; its consumer is deleted"
                    ),
                    Err(e) => {
                        tracing::warn!(consumer = name, error = %e, "could not delete the older version's human consumer (empty now); delete it by hand")
                    }
                }
                return;
            }
            // Some are out for a session that has not stored them yet.
            Ok(_) => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
            // Deleted by another coordinator that drained it.
            Err(_) => return,
        }
    }
}
