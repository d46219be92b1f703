//! The sessions being watched: one [`Hub`] per session, shared by every
//! browser tab on it. A hub runs the console's own feed (the log replayed
//! then live, the statuses, the Arbiter's words as they are written) into
//! the console's own state, and publishes a [`View`] of it on a `watch`
//! channel: a slow tab skips to the newest view and never holds a queue.
//! The last tab gone, the hub lingers a little (a reload, the page then its
//! stream) and is dropped, with its feed's connection and subscriptions:
//! nothing of it is left on the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arbiter_bus::NatsOptions;
use arbiter_console::app::{Action, App};
use arbiter_console::feed::Feed;
use arbiter_protocol::roles::NatsRole;
use tokio::sync::{mpsc, watch};

use crate::view::View;

/// How often a hub redraws its view without news (the liveness in the
/// status lines depends on the time).
const TICK: Duration = Duration::from_secs(1);
/// Lines typed into pages that wait for the hub.
const LINES: usize = 64;

/// Every hub alive, by session id.
pub struct Hubs {
    nats: NatsOptions,
    identity: String,
    linger: Duration,
    live: Mutex<HashMap<String, Weak<Hub>>>,
}

/// One watched session.
pub struct Hub {
    pub session_id: String,
    pub view: watch::Receiver<Arc<View>>,
    lines: mpsc::Sender<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hub {
    /// Sends a line typed into a page, as the console's input would: words,
    /// `/stop`, `/allow 3`… `false`: the hub is gone.
    pub async fn line(&self, text: String) -> bool {
        self.lines.send(text).await.is_ok()
    }

    /// The view once it is caught up with the log, or after `wait` as it is.
    pub async fn settled_view(&self, wait: Duration) -> Arc<View> {
        let mut view = self.view.clone();
        let _ = tokio::time::timeout(wait, view.wait_for(|v| v.caught_up)).await;
        view.borrow().clone()
    }
}

impl Hubs {
    pub fn new(nats: NatsOptions, identity: String, linger: Duration) -> Self {
        Self {
            nats,
            identity,
            linger,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The hub of `session_id`, started if none is alive.
    pub fn watch(&self, session_id: &str) -> Arc<Hub> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hub) = live.get(session_id).and_then(Weak::upgrade) {
            return hub;
        }
        live.retain(|_, hub| hub.strong_count() > 0);
        let feed = Feed::start_as(&self.nats, session_id, &self.identity, NatsRole::Web);
        let (view_tx, view) = watch::channel(Arc::new(View::default()));
        let (lines_tx, lines) = mpsc::channel(LINES);
        let task = tokio::spawn(run(feed, session_id.to_owned(), view_tx, lines));
        let hub = Arc::new(Hub {
            session_id: session_id.to_owned(),
            view,
            lines: lines_tx,
            task,
        });
        live.insert(session_id.to_owned(), Arc::downgrade(&hub));
        hub
    }

    /// Done with `hub`: it stays alive for the linger, then goes if no one
    /// else holds it.
    pub fn release(&self, hub: Arc<Hub>) {
        let linger = self.linger;
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            drop(hub);
        });
    }

    /// How many sessions are watched right now.
    pub fn watched(&self) -> usize {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.values().filter(|hub| hub.strong_count() > 0).count()
    }
}

/// Feeds the session into the console's state and publishes its view.
async fn run(
    mut feed: Feed,
    session_id: String,
    view: watch::Sender<Arc<View>>,
    mut lines: mpsc::Receiver<String>,
) {
    let mut app = App::new(&session_id, "");
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            event = feed.events.recv() => {
                let Some(event) = event else { return };
                let now = Instant::now();
                app.apply(event, now);
                // A replay brings many at once: one view for the batch.
                while let Ok(event) = feed.events.try_recv() {
                    app.apply(event, now);
                }
                // The bell is the terminal's; a page shows the approval.
                let _ = app.after_feed();
            }
            line = lines.recv() => {
                let Some(text) = line else { return };
                if let Some(Action::Send { message_id, text }) = app.send(text) {
                    feed.send(message_id, text);
                }
            }
            _ = tick.tick() => {}
        }
        let next = View::of(&app, Instant::now(), &view.borrow());
        view.send_if_modified(|shown| {
            let changed = **shown != next;
            if changed {
                *shown = Arc::new(next);
            }
            changed
        });
    }
}
