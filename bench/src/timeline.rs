//! The anatomy of a hop: a core subscription to every subject (`>`) sees
//! each publish, each JetStream ack and each delivery as it crosses the
//! server, so the steps between "input arrives" and "model request leaves"
//! can be listed with their times.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt as _;

use crate::hist::micros;
use crate::model::{HopSample, START};

/// One message seen crossing the server, with what it was.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    pub label: String,
}

/// A subscription to everything, gathering events until stopped.
pub struct Tap {
    events: Arc<Mutex<Vec<Event>>>,
    stop: Arc<tokio::sync::Notify>,
    thread: std::thread::JoinHandle<()>,
}

impl Tap {
    /// Subscribes from a thread and runtime of its own, so that the times
    /// are taken as messages arrive, not when the mock's runtime gets to them.
    pub async fn start(url: &str) -> anyhow::Result<Tap> {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let url = url.to_owned();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::from(e)));
                    return;
                }
            };
            runtime.block_on(async move {
                let subscribed = async {
                    let client = async_nats::connect(&url).await?;
                    let sub = client.subscribe(">").await?;
                    client.flush().await?;
                    anyhow::Ok((client, sub))
                }
                .await;
                let (_client, mut sub) = match subscribed {
                    Ok(pair) => {
                        let _ = ready_tx.send(Ok(()));
                        pair
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                loop {
                    let msg = tokio::select! {
                        () = stopped.notified() => return,
                        msg = sub.next() => match msg {
                            Some(msg) => msg,
                            None => return,
                        },
                    };
                    let at = Instant::now();
                    let reply = msg.reply.as_ref().map(|r| r.as_str());
                    if let Some(label) = label(msg.subject.as_str(), reply, &msg.payload) {
                        sink.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(Event { at, label });
                    }
                }
            });
        });
        ready_rx.await??;
        Ok(Tap {
            events,
            stop,
            thread,
        })
    }

    pub fn stop(self) -> Vec<Event> {
        self.stop.notify_one();
        let _ = self.thread.join();
        std::mem::take(&mut *self.events.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Which read a direct get is: input `n` (protocol v3, named in the
/// subject), control or a v2 input (`last_by_subj` / `next_by_subj` on
/// `.ctl` / `.in`), or an Orchestrator's last record (`orch.<id>.*`).
fn direct_get_of(subject: &str, body: &str) -> String {
    if subject.contains(".in.") {
        let n = subject.rsplit('.').next().unwrap_or("?");
        format!(" (input {n})")
    } else if body.contains(".ctl\"") {
        " (control)".to_owned()
    } else if body.contains(".in\"") {
        " (an input, v2)".to_owned()
    } else if body.contains("arbiter.v1.orch.") {
        " (the last record)".to_owned()
    } else {
        String::new()
    }
}

/// What a message is, with ids replaced by `*`; `None` for the benchmark's
/// own probe traffic and for bare status messages (heartbeats).
fn label(subject: &str, reply: Option<&str>, payload: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&payload[..payload.len().min(120)]).into_owned();
    if subject.starts_with("bench.") {
        return None;
    }
    // A JetStream delivery keeps the stored subject; its reply names the consumer.
    if let Some(rest) = reply.and_then(|r| r.strip_prefix("$JS.ACK.")) {
        return Some(format!("deliver to {}", consumer(rest.split('.').nth(1))));
    }
    if let Some(rest) = subject.strip_prefix("arbiter.v1.") {
        let mut parts: Vec<&str> = rest.split('.').collect();
        if parts.len() >= 3 {
            parts[1] = "*";
        }
        return Some(format!("publish {}", parts.join(".")));
    }
    if subject.starts_with("$KV.") {
        return Some("publish KV session status".into());
    }
    if let Some(rest) = subject.strip_prefix("$JS.API.CONSUMER.MSG.NEXT.") {
        return Some(format!("pull request {}", consumer(rest.split('.').nth(1))));
    }
    if let Some(rest) = subject.strip_prefix("$JS.API.") {
        let mut parts = rest.split('.');
        // A direct get names its stream (the third token), and says which
        // read it is: of an input, of control, or of a record.
        let what: Vec<&str> = parts.by_ref().take(3).collect();
        let of = if what.starts_with(&["DIRECT", "GET"]) {
            direct_get_of(subject, &text)
        } else {
            String::new()
        };
        return Some(format!("JS API {}{of}", what.join(".")));
    }
    if let Some(rest) = subject.strip_prefix("$JS.ACK.") {
        return Some(format!("ack by {}", consumer(rest.split('.').nth(1))));
    }
    if subject.starts_with("$JS.FC.") {
        return Some("flow control".into());
    }
    if let Some(rest) = subject.strip_prefix("$JS.EVENT.ADVISORY.") {
        let what: Vec<&str> = rest.split('.').take(2).collect();
        return Some(format!("advisory {}", what.join(".")));
    }
    if let Some(rest) = text.strip_prefix("{\"stream\":\"") {
        let stream = rest.split('"').next().unwrap_or("?");
        if stream == "BENCH_PROBE" {
            return None;
        }
        return Some(format!("ack of the publish to {stream}"));
    }
    if let Some(rest) = text.strip_prefix("{\"type\":\"io.nats.jetstream.api.v1.") {
        return Some(format!(
            "JS API reply {}",
            rest.split('"').next().unwrap_or("?")
        ));
    }
    if payload.is_empty() || payload.iter().all(|&b| b == b'x') {
        return None;
    }
    Some(format!(
        "other {}",
        subject.split('.').next().unwrap_or("?")
    ))
}

/// A consumer name with any Orchestrator id hidden.
fn consumer(name: Option<&str>) -> String {
    match name {
        Some(n) if n.starts_with("orch-") => "orch-*".into(),
        Some(n) => n.to_owned(),
        None => "?".into(),
    }
}

const HOP_NAMES: [(&str, &str, &str); 4] = [
    (
        "hop 1, human → Arbiter request",
        "the human message is due (intended send)",
        "the Arbiter's model request arrives",
    ),
    (
        "hop 2, Arbiter output → Orchestrator request",
        "the Arbiter's reply is handed back",
        "the Orchestrator's model request arrives",
    ),
    (
        "hop 3, Orchestrator output → Arbiter request",
        "the Orchestrator's reply is handed back",
        "the Arbiter's model request arrives",
    ),
    (
        "Orchestrator start, summons reply → first model request",
        "the Arbiter's summons reply is handed back",
        "the Orchestrator's first model request arrives",
    ),
];

/// For each hop, the steps of one sample, one line each: the one at
/// `quantile` of the hop's latencies (0.5: the median).
pub fn explain(samples: &[HopSample], events: &[Event], quantile: f64) -> Vec<String> {
    let quantile = quantile.clamp(0.0, 1.0);
    let which = if (quantile - 0.5).abs() < f64::EPSILON {
        "the median".to_owned()
    } else {
        format!("the p{}", quantile * 100.0)
    };
    let mut lines = Vec::new();
    for (hop, (name, first, last)) in HOP_NAMES.iter().enumerate() {
        let mut mine: Vec<&HopSample> = samples.iter().filter(|s| s.hop == hop).collect();
        if mine.is_empty() {
            continue;
        }
        mine.sort_by_key(|s| s.to.saturating_duration_since(s.from));
        // As a percentile is taken: the sample at ⌈q·n⌉ in latency order.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let rank = ((quantile * mine.len() as f64).ceil() as usize).clamp(1, mine.len());
        let picked = mine[if (quantile - 0.5).abs() < f64::EPSILON {
            mine.len() / 2
        } else {
            rank - 1
        }];
        let total = picked.to.saturating_duration_since(picked.from);
        let what = if hop == START { "start" } else { "tick" };
        lines.push(format!(
            "{name}: {which} {what} of {} ({})",
            mine.len(),
            micros(total)
        ));
        let mut previous = picked.from;
        let mut steps = vec![(picked.from, (*first).to_owned())];
        steps.extend(
            events
                .iter()
                .filter(|e| e.at >= picked.from && e.at <= picked.to)
                .map(|e| (e.at, e.label.clone())),
        );
        steps.push((picked.to, (*last).to_owned()));
        let acks = steps
            .iter()
            .filter(|(_, l)| l.starts_with("ack of the publish") || l.starts_with("JS API reply"))
            .count();
        for (at, label) in steps {
            lines.push(format!(
                "  {:>9}  (+{:>8})  {label}",
                micros(at.saturating_duration_since(picked.from)),
                micros(at.saturating_duration_since(previous)),
            ));
            previous = at;
        }
        lines.push(format!(
            "  {acks} JetStream round trips (publish acks and API replies) inside this hop"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn labels() {
        assert_eq!(
            label("arbiter.v1.session.l1-0.state", None, b"{}").as_deref(),
            Some("publish session.*.state")
        );
        assert_eq!(
            label("_INBOX.a.b", None, br#"{"stream":"ARBITER_STATE","seq":3}"#).as_deref(),
            Some("ack of the publish to ARBITER_STATE")
        );
        assert_eq!(
            label(
                "_INBOX.a.b",
                Some("$JS.ACK.ARBITER_ORCH.orch-0197.1.2.3.4.5"),
                b"{}"
            )
            .as_deref(),
            Some("deliver to orch-*")
        );
        assert_eq!(label("bench.echo", None, b"xxx"), None);
        let sessions = "$JS.API.DIRECT.GET.ARBITER_SESSIONS";
        assert_eq!(
            label(
                &format!("{sessions}.arbiter.v1.session.l1-0.in.o-1.7"),
                None,
                b""
            )
            .as_deref(),
            Some("JS API DIRECT.GET.ARBITER_SESSIONS (input 7)")
        );
        let orch = "$JS.API.DIRECT.GET.ARBITER_ORCH";
        let ctl = br#"{"last_by_subj":"arbiter.v1.orch.o-1.ctl"}"#;
        assert_eq!(
            label(orch, None, ctl).as_deref(),
            Some("JS API DIRECT.GET.ARBITER_ORCH (control)")
        );
        let v2 = br#"{"seq":4,"next_by_subj":"arbiter.v1.orch.o-1.in"}"#;
        assert_eq!(
            label(orch, None, v2).as_deref(),
            Some("JS API DIRECT.GET.ARBITER_ORCH (an input, v2)")
        );
        let last = br#"{"last_by_subj":"arbiter.v1.orch.o-1.*"}"#;
        assert_eq!(
            label("$JS.API.DIRECT.GET.ARBITER_ORCH_STATE", None, last).as_deref(),
            Some("JS API DIRECT.GET.ARBITER_ORCH_STATE (the last record)")
        );
    }
}
