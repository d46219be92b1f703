//! The worker fleet as the presence service tells it: each worker answers
//! `$SRV.PING.arbiter-worker` with its pool, runtime and lanes (the
//! service's metadata) and `$SRV.STATS.arbiter-worker` with its slots (its
//! presence endpoint's data). Workers seen in the last ten minutes stay
//! listed, marked when they stop answering.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use arbiter_protocol::subjects;
use async_nats::Client;
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use serde_json::Value;

/// How long the answers to one look are gathered.
const WINDOW: Duration = Duration::from_millis(750);
/// How long a worker that stopped answering stays listed.
const FORGET_AFTER: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// One worker, as it last answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub worker_id: String,
    pub pool: String,
    pub runtime: String,
    pub lanes: String,
    pub slots_used: usize,
    pub slots_free: usize,
    pub orchestrators: usize,
    /// When it last answered.
    pub seen: DateTime<Utc>,
    /// It answered the latest look.
    pub answering: bool,
}

/// The workers seen so far.
#[derive(Default)]
pub struct Fleet {
    seen: Mutex<HashMap<String, Worker>>,
}

impl Fleet {
    /// Asks every worker, and returns the fleet: who answered and who
    /// answered in the last ten minutes, by pool then name.
    pub async fn look(&self, client: &Client) -> Result<Vec<Worker>, async_nats::Error> {
        let (pings, stats) = tokio::try_join!(
            gather(client, subjects::worker_service_ping()),
            gather(client, subjects::worker_service_stats()),
        )?;
        let now = Utc::now();
        let answered = merge(&pings, &stats, now);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for worker in seen.values_mut() {
            worker.answering = false;
        }
        for worker in answered {
            seen.insert(worker.worker_id.clone(), worker);
        }
        seen.retain(|_, w| now - w.seen < FORGET_AFTER);
        let mut workers: Vec<Worker> = seen.values().cloned().collect();
        workers.sort_by(|a, b| (&a.pool, &a.worker_id).cmp(&(&b.pool, &b.worker_id)));
        Ok(workers)
    }
}

/// The replies to one request made to every instance of the service.
async fn gather(client: &Client, subject: String) -> Result<Vec<Value>, async_nats::Error> {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await?;
    client.publish_with_reply(subject, inbox, "".into()).await?;
    let mut out = Vec::new();
    let window = tokio::time::sleep(WINDOW);
    tokio::pin!(window);
    loop {
        tokio::select! {
            _ = &mut window => return Ok(out),
            reply = replies.next() => match reply {
                Some(reply) => {
                    if let Ok(value) = serde_json::from_slice::<Value>(&reply.payload) {
                        out.push(value);
                    }
                }
                None => return Ok(out),
            },
        }
    }
}

/// Joins each worker's ping (metadata) and stats (slots) by instance id.
fn merge(pings: &[Value], stats: &[Value], now: DateTime<Utc>) -> Vec<Worker> {
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
    pings
        .iter()
        .filter_map(|ping| {
            let id = ping["id"].as_str()?;
            let meta = &ping["metadata"];
            let data = stats
                .iter()
                .find(|s| s["id"].as_str() == Some(id))
                .and_then(|s| s["endpoints"].as_array())
                .and_then(|e| {
                    e.iter()
                        .find_map(|e| e.get("data").filter(|d| d.is_object()))
                });
            let count = |key: &str| {
                data.and_then(|d| d[key].as_u64())
                    .and_then(|n| usize::try_from(n).ok())
                    .unwrap_or_default()
            };
            Some(Worker {
                worker_id: Some(text(meta, "worker_id"))
                    .filter(|w| !w.is_empty())
                    .unwrap_or_else(|| id.to_owned()),
                pool: text(meta, "pool"),
                runtime: Some(text(meta, "runtime"))
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| "native".to_owned()),
                lanes: text(meta, "lanes"),
                slots_used: count("slots_used"),
                slots_free: count("slots_free"),
                orchestrators: data
                    .and_then(|d| d["orchestrators"].as_array())
                    .map_or(0, Vec::len),
                seen: now,
                answering: true,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_worker_is_its_ping_metadata_and_its_stats_data() {
        let pings = [
            json!({"id": "A1", "metadata": {"worker_id": "w-1", "pool": "gpu", "runtime": "claude_code", "lanes": "queued,urgent"}}),
        ];
        let stats = [
            json!({"id": "A1", "endpoints": [{"name": "presence", "data": {"slots_used": 1, "slots_free": 3, "orchestrators": ["o-1"]}}]}),
        ];
        let now = Utc::now();
        let workers = merge(&pings, &stats, now);
        assert_eq!(
            workers,
            vec![Worker {
                worker_id: "w-1".into(),
                pool: "gpu".into(),
                runtime: "claude_code".into(),
                lanes: "queued,urgent".into(),
                slots_used: 1,
                slots_free: 3,
                orchestrators: 1,
                seen: now,
                answering: true,
            }]
        );
        // A ping without stats still lists the worker, slots unknown (0).
        let alone = merge(&pings, &[], now);
        assert_eq!(alone[0].slots_free, 0);
    }
}
