//! Load generation: starting sessions at a steady pace, the open-loop tick
//! driver (a thread of its own, so the schedule never waits for an answer),
//! and waiting for the system to go quiet.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use arbiter_bus::Bus;

use crate::hist::Latency;
use crate::model::{Recorder, Schedule};
use crate::system::{System, human_message, send_human};

/// Sends each `(session, text)` as the human, `rate` per second (open loop:
/// the pace does not wait for acks), and waits for every ack.
pub async fn send_paced(
    bus: &Bus,
    messages: Vec<(String, String)>,
    rate: f64,
) -> anyhow::Result<()> {
    let gap = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let began = tokio::time::Instant::now();
    let mut sends = tokio::task::JoinSet::new();
    for (n, (session, text)) in messages.into_iter().enumerate() {
        tokio::time::sleep_until(began + gap.mul_f64(n as f64)).await;
        let bus = bus.clone();
        sends.spawn(async move { send_human(&bus, &session, &text).await });
    }
    while let Some(sent) = sends.join_next().await {
        sent??;
    }
    Ok(())
}

/// `"<kind> <prefix>-<i>"` to each session of `range`: the first message,
/// which names the session and what its Arbiter does.
pub fn openings(kind: &str, prefix: &str, range: std::ops::Range<u32>) -> Vec<(String, String)> {
    range
        .map(|i| (format!("{prefix}-{i}"), format!("{kind} {prefix}-{i}")))
        .collect()
}

/// The same text to each session of `range`.
pub fn to_each(prefix: &str, range: std::ops::Range<u32>, text: &str) -> Vec<(String, String)> {
    range
        .map(|i| (format!("{prefix}-{i}"), text.to_owned()))
        .collect()
}

/// Starts Orchestrator sessions (`start` or `loop`) at `rate` per second and
/// waits until each Arbiter has heard its Orchestrator's `ready`.
pub async fn start_sessions(
    system: &mut System,
    recorder: &Recorder,
    kind: &str,
    prefix: &str,
    range: std::ops::Range<u32>,
    rate: f64,
) -> anyhow::Result<()> {
    start_these(system, recorder, openings(kind, prefix, range), rate).await
}

/// Sends these first messages at `rate` per second and waits until each
/// session's Arbiter has heard its Orchestrator's `ready`.
pub async fn start_these(
    system: &mut System,
    recorder: &Recorder,
    openings: Vec<(String, String)>,
    rate: f64,
) -> anyhow::Result<()> {
    let target = recorder.ready.load(Ordering::SeqCst) + openings.len() as u64;
    // As long again as the sending took, and a minute: a system that falls
    // behind the pace catches up after it.
    let limit =
        Duration::from_secs(60) + Duration::from_secs_f64(openings.len() as f64 / rate.max(0.001));
    send_paced(&system.bus, openings, rate).await?;
    wait_for(system, "sessions ready", limit, || {
        recorder.ready.load(Ordering::SeqCst) >= target
    })
    .await
}

/// Polls `done` every 20 ms; fails if a child dies or `limit` passes.
pub async fn wait_for(
    system: &mut System,
    what: &str,
    limit: Duration,
    done: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !done() {
        system.check()?;
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Waits until the model has seen no request for `quiet` (at most `limit`).
pub async fn settle(recorder: &Recorder, quiet: Duration, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut last = recorder.requests();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = recorder.requests();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}

/// What the tick driver did.
pub struct Driven {
    pub sent: u64,
    /// Ticks sent whose intended time falls in the measured window.
    pub measured: u64,
    /// Intended send time → the message written to the server's socket.
    pub lag: Latency,
}

/// How long before a tick is due the driver stops sleeping and spins, so a
/// late wake-up of the thread does not count against the system.
const SPIN: Duration = Duration::from_micros(300);

/// Sends every session's ticks on `schedule` until `record_until`, from a
/// thread of its own writing straight to a socket of its own (a minimal
/// console: the NATS protocol over a blocking socket, no runtime between the
/// schedule and the wire). The intended time stays the start of the hop even
/// when a send is late, so queueing is counted (no coordinated omission).
/// Messages are published without a reply subject: the driver never waits.
pub fn drive(
    schedule: Schedule,
    prefix: String,
    url: String,
) -> std::thread::JoinHandle<anyhow::Result<Driven>> {
    std::thread::spawn(move || {
        let mut publisher = RawPublisher::connect(&url)?;
        let mut lag = Latency::new()?;
        let (mut sent, mut measured) = (0, 0);
        for slot in 0u64.. {
            let tick = slot / u64::from(schedule.sessions);
            let session = u32::try_from(slot % u64::from(schedule.sessions)).unwrap_or(0);
            let at = schedule.intended(session, tick);
            if at >= schedule.record_until {
                break;
            }
            let now = Instant::now();
            if at > now + SPIN {
                std::thread::sleep(at - now - SPIN);
            }
            while Instant::now() < at {
                std::hint::spin_loop();
            }
            let id = schedule.session(&prefix, session, tick);
            let (subject, headers, payload) = human_message(&id, &format!("tick {tick}"))?;
            publisher.publish(&subject, &headers, &payload)?;
            lag.record(Instant::now().saturating_duration_since(at));
            sent += 1;
            if at >= schedule.record_from {
                measured += 1;
            }
        }
        Ok(Driven {
            sent,
            measured,
            lag,
        })
    })
}

/// Just enough of the NATS client protocol to publish with headers from a
/// plain thread: CONNECT, HPUB, and PONG to the server's PINGs.
struct RawPublisher {
    socket: Arc<Mutex<TcpStream>>,
}

impl RawPublisher {
    fn connect(url: &str) -> anyhow::Result<RawPublisher> {
        let address = url.trim_start_matches("nats://");
        let socket =
            TcpStream::connect(address).with_context(|| format!("connecting to {address}"))?;
        socket.set_nodelay(true)?;
        let mut reader = BufReader::new(socket.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if !line.starts_with("INFO") {
            bail!("unexpected greeting from nats-server: {line:?}");
        }
        let socket = Arc::new(Mutex::new(socket));
        write_locked(
            &socket,
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"name\":\"arbiter-bench-driver\"}\r\nPING\r\n",
        )?;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                bail!("nats-server closed the connection");
            }
            if line.starts_with("PONG") {
                break;
            }
            if line.starts_with("-ERR") {
                bail!("nats-server refused the driver: {}", line.trim());
            }
        }
        let pong = socket.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.starts_with("PING") && write_locked(&pong, b"PONG\r\n").is_err() {
                    return;
                }
                if line.starts_with("-ERR") {
                    tracing::warn!(
                        error = line.trim(),
                        "nats-server error on the driver connection"
                    );
                }
                line.clear();
            }
        });
        Ok(RawPublisher { socket })
    }

    fn publish(
        &mut self,
        subject: &str,
        headers: &async_nats::HeaderMap,
        payload: &[u8],
    ) -> anyhow::Result<()> {
        let mut head = String::from("NATS/1.0\r\n");
        for (name, values) in headers.iter() {
            for value in values {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        head.push_str("\r\n");
        let total = head.len() + payload.len();
        let mut frame = format!("HPUB {subject} {} {total}\r\n{head}", head.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        write_locked(&self.socket, &frame)?;
        Ok(())
    }
}

fn write_locked(socket: &Mutex<TcpStream>, bytes: &[u8]) -> std::io::Result<()> {
    socket
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .write_all(bytes)
}
