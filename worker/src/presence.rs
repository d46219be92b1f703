//! Presence: every worker is a NATS micro service named [`SERVICE_NAME`], so
//! `nats micro ls`, `$SRV.PING|INFO|STATS.arbiter-worker` and the coordinator
//! see the fleet. PING and INFO carry the worker's id, pool, runtime, slot count
//! and MCP servers (`mcp`, by name, comma-separated; absent with none) in
//! their metadata; STATS carries the live [`WorkerPresence`] (slots used and
//! free, the Orchestrators running) as the data of the `presence` endpoint,
//! which also answers requests with it.

use std::collections::HashMap;
use std::sync::Arc;

use arbiter_protocol::subjects;
use async_nats::Client;
use async_nats::service::{Service, ServiceExt as _};
use futures::StreamExt as _;

use crate::slots::{Slots, WorkerPresence};
use crate::{Error, Result};

/// The service name all workers share, and the subject on which one worker
/// answers with its [`WorkerPresence`]: the protocol's, named here for
/// whoever drives a worker (the tests).
pub use subjects::{WORKER_SERVICE as SERVICE_NAME, worker_presence as presence_subject};

/// The running presence service; [`Presence::stop`] takes it off the fleet.
pub(crate) struct Presence {
    service: Service,
    responder: tokio::task::JoinHandle<()>,
}

/// Registers this worker as an instance of the service.
pub(crate) async fn start(
    client: &Client,
    slots: Arc<Slots>,
    runtime: crate::Runtime,
    serves_urgent: bool,
    mcp: &[crate::mcp::ServerConfig],
) -> Result<Presence> {
    let now = slots.presence();
    let mut metadata = HashMap::from([
        ("worker_id".to_owned(), now.worker_id.clone()),
        ("pool".to_owned(), now.pool.clone()),
        ("runtime".to_owned(), runtime.name().to_owned()),
        // Whether it takes emergencies from `summon.<pool>.urgent` before the queue.
        (
            "lanes".to_owned(),
            if serves_urgent {
                "queued,urgent"
            } else {
                "queued"
            }
            .to_owned(),
        ),
        ("slots_total".to_owned(), now.slots_total.to_string()),
        ("protocol".to_owned(), subjects::presence_protocol()),
    ]);
    // The MCP servers its Orchestrators get, by name: what a summons' `needs` names.
    if !mcp.is_empty() {
        let names: Vec<&str> = mcp.iter().map(|s| s.name.as_str()).collect();
        metadata.insert("mcp".to_owned(), names.join(","));
    }
    let stats_slots = slots.clone();
    let service = client
        .service_builder()
        .description("Arbiter worker: runs Orchestrators for one pool")
        .metadata(metadata)
        .stats_handler(move |_endpoint, _stats| {
            serde_json::to_value(stats_slots.presence()).unwrap_or_default()
        })
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| Error::Presence(e.to_string()))?;
    let mut endpoint = service
        .endpoint_builder()
        .name(subjects::WORKER_PRESENCE_ENDPOINT)
        .add(presence_subject(&now.worker_id))
        .await
        .map_err(|e| Error::Presence(e.to_string()))?;
    let responder = tokio::spawn(async move {
        while let Some(request) = endpoint.next().await {
            let answer = serde_json::to_vec(&slots.presence())
                .map(Into::into)
                .map_err(|e| async_nats::service::error::Error {
                    status: e.to_string(),
                    code: 500,
                });
            if let Err(e) = request.respond(answer).await {
                tracing::debug!(error = %e, "presence reply failed");
            }
        }
    });
    Ok(Presence { service, responder })
}

impl Presence {
    pub(crate) async fn stop(self) {
        self.responder.abort();
        if let Err(e) = self.service.stop().await {
            tracing::debug!(error = %e, "stopping the presence service failed");
        }
    }
}

/// Decodes a presence reply (for the coordinator and tests).
pub fn decode_presence(payload: &[u8]) -> serde_json::Result<WorkerPresence> {
    serde_json::from_slice(payload)
}
