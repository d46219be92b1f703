//! The server's own latencies, as the baseline routing is compared with:
//! core request-reply round trips and JetStream publish → ack, measured on
//! the same nats-server (idle, back to back; and as a light probe while a
//! level runs).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use arbiter_bus::{DUPLICATE_WINDOW, MSG_ID_HEADER};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{self, stream};
use futures::StreamExt as _;

use crate::hist::Latency;

const ECHO_SUBJECT: &str = "bench.echo";
const JS_SUBJECT: &str = "bench.js.probe";
/// About the size of a log entry or a state record.
const PAYLOAD: usize = 300;

/// Core request-reply RTT and JetStream publish-ack latency.
pub struct Baseline {
    pub rtt: Latency,
    pub js_ack: Latency,
    /// Publish → delivery to a durable pull consumer with one filter subject,
    /// and with two (as each Orchestrator's input consumer has).
    pub delivery: Option<[Latency; 2]>,
    /// The server's CPU time per JetStream publish (idle baseline only).
    pub server_cpu_per_js: Option<Duration>,
}

/// A responder on its own connection, and a file stream configured as the
/// system's are (file storage, a duplicate window, a message id per publish).
pub struct Probe {
    requester: async_nats::Client,
    js: jetstream::Context,
    responder: tokio::task::JoinHandle<()>,
    payload: Vec<u8>,
}

impl Probe {
    pub async fn new(url: &str) -> anyhow::Result<Probe> {
        let responder_client = async_nats::connect(url).await?;
        let mut sub = responder_client.subscribe(ECHO_SUBJECT).await?;
        responder_client.flush().await?;
        let responder = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                if let Some(reply) = msg.reply {
                    let _ = responder_client.publish(reply, msg.payload).await;
                }
            }
        });
        let requester = async_nats::connect(url).await?;
        let js = jetstream::new(requester.clone());
        js.get_or_create_stream(stream::Config {
            name: "BENCH_PROBE".into(),
            subjects: vec!["bench.js.>".into()],
            storage: stream::StorageType::File,
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
        .context("creating the probe stream")?;
        Ok(Probe {
            requester,
            js,
            responder,
            payload: vec![b'x'; PAYLOAD],
        })
    }

    pub async fn rtt(&self) -> anyhow::Result<Duration> {
        let began = Instant::now();
        self.requester
            .request(ECHO_SUBJECT, self.payload.clone().into())
            .await?;
        Ok(began.elapsed())
    }

    pub async fn js_ack(&self) -> anyhow::Result<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(MSG_ID_HEADER, uuid::Uuid::now_v7().to_string().as_str());
        let began = Instant::now();
        let ack = self
            .js
            .publish_with_headers(JS_SUBJECT, headers, self.payload.clone().into())
            .await?;
        ack.await?;
        Ok(began.elapsed())
    }

    /// Back to back on an idle server: `n` of each after a warm-up. With the
    /// server's pid, its CPU time per JetStream publish is noted too.
    pub async fn idle(&self, n: u32, server: Option<u32>) -> anyhow::Result<Baseline> {
        for _ in 0..n / 10 {
            self.rtt().await?;
            self.js_ack().await?;
        }
        let mut rtt = Latency::new()?;
        let mut js_ack = Latency::new()?;
        for _ in 0..n {
            rtt.record(self.rtt().await?);
        }
        let cpu_before = server.and_then(|pid| crate::procs::cpu_time(pid).ok());
        for _ in 0..n {
            js_ack.record(self.js_ack().await?);
        }
        let cpu_after = server.and_then(|pid| crate::procs::cpu_time(pid).ok());
        let server_cpu_per_js = match (cpu_before, cpu_after) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before) / n.max(1)),
            _ => None,
        };
        let delivery = Some([
            self.delivery(n / 5, 1).await?,
            self.delivery(n / 5, 2).await?,
        ]);
        Ok(Baseline {
            rtt,
            js_ack,
            delivery,
            server_cpu_per_js,
        })
    }

    /// One of each every `every` until `until`, from intended start times,
    /// while the system is under load.
    pub async fn under_load(&self, every: Duration, until: Instant) -> anyhow::Result<Baseline> {
        let mut rtt = Latency::new()?;
        let mut js_ack = Latency::new()?;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        while Instant::now() < until {
            tick.tick().await;
            rtt.record(self.rtt().await?);
            js_ack.record(self.js_ack().await?);
        }
        Ok(Baseline {
            rtt,
            js_ack,
            delivery: None,
            server_cpu_per_js: None,
        })
    }
}

impl Probe {
    /// Publish → the message arriving through a durable pull consumer's
    /// `messages()` stream, one at a time, each acked. `filters` is 1 or 2.
    async fn delivery(&self, n: u32, filters: usize) -> anyhow::Result<Latency> {
        let name = format!("deliver-{filters}");
        let base = format!("bench.js.deliver{filters}");
        let subjects: Vec<String> = ["in", "ctl"]
            .iter()
            .take(filters.max(1))
            .map(|leaf| format!("{base}.{leaf}"))
            .collect();
        let stream = self.js.get_stream("BENCH_PROBE").await?;
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(name),
                filter_subjects: subjects.clone(),
                ack_policy: AckPolicy::Explicit,
                deliver_policy: DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .context("creating a delivery probe consumer")?;
        let mut messages = consumer.messages().await?;
        let mut latency = Latency::new()?;
        for i in 0..n + n / 10 {
            let began = Instant::now();
            self.js
                .publish(subjects[0].clone(), self.payload.clone().into())
                .await?;
            let msg = messages
                .next()
                .await
                .context("the delivery probe consumer ended")?
                .map_err(|e| anyhow::anyhow!("delivery probe: {e}"))?;
            let took = began.elapsed();
            msg.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            if i >= n / 10 {
                latency.record(took);
            }
        }
        Ok(latency)
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.responder.abort();
    }
}
