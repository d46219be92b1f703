//! The hooks part: routing overhead with a webhook whose receiver hangs,
//! against the same level with none. The receiver accepts each connection
//! and never answers, so every POST waits out the hook's timeout: what the
//! sessions must not feel (their events are stored, and delivered apart).
//! A level's sessions decide no event (they neither end nor fail nor ask
//! the human), so while the hung level runs the benchmark stores
//! [`EVENTS_PER_SEC`] events of its own in the events' stream, as a
//! session's step would: the coordinator's delivery takes each and POSTs
//! it into the hung receiver, all of it beside the sessions measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::ctx::Ctx;
use crate::levels::{self, Level};

/// The level the figure is measured at.
pub const HOOK_SESSIONS: u32 = 100;
/// Events stored per second while the hung level runs.
pub const EVENTS_PER_SEC: u64 = 20;

/// Stores [`EVENTS_PER_SEC`] `needs_input` events until aborted; a publish
/// refused (the stream not declared yet) is passed over.
pub fn feed(bus: arbiter_bus::Bus) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(1000 / EVENTS_PER_SEC));
        let trace = arbiter_bus::TraceContext::none();
        for seq in 1u64.. {
            every.tick().await;
            let kind = arbiter_protocol::NotificationKind::NeedsInput;
            let event = arbiter_protocol::Notification {
                v: arbiter_protocol::VERSION,
                id: arbiter_protocol::Notification::id_of("bench-hooks", seq, kind),
                kind,
                session_id: "bench-hooks".to_owned(),
                seq,
                summary: format!("benchmark event {seq}"),
                approval: None,
                at: chrono::Utc::now(),
            };
            let subject = arbiter_protocol::subjects::notification(&event.session_id);
            let _ = bus.publish_js(subject, &event.id, &trace, &event).await;
        }
    })
}

/// What the part measured: the level without a hook, with the hung one,
/// and the connections the receiver took (POSTs left hanging).
pub struct Hooks {
    pub off: Level,
    pub hung: Level,
    pub connections: u64,
}

/// A receiver that takes connections and never answers, holding each open.
struct Hung {
    url: String,
    connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Hung {
    async fn start() -> anyhow::Result<Hung> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let connections = Arc::new(AtomicU64::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                held.push(socket);
            }
        });
        Ok(Hung {
            url,
            connections,
            task,
        })
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Hooks> {
    let measure = Duration::from_secs(ctx.opts.duration);
    let rate = ctx.opts.rate;
    tracing::info!("hooks: {HOOK_SESSIONS} sessions, no webhook then a hung one");
    let off = levels::run(ctx, HOOK_SESSIONS, rate, measure, false).await?;
    let receiver = Hung::start().await?;
    let set = |url: Option<String>| {
        *ctx.hook_url
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = url;
    };
    set(Some(receiver.url.clone()));
    let hung = levels::run(ctx, HOOK_SESSIONS, rate, measure, false).await;
    set(None);
    let hung = hung?;
    let connections = receiver.connections.load(Ordering::Relaxed);
    Ok(Hooks {
        off,
        hung,
        connections,
    })
}
