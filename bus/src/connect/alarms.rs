//! What the server tells a connection that its process must act on: the
//! permissions it was denied, and a refusal of its credentials after start.

use super::*;

/// What the server told this connection that a process must act on: the
/// permission it was denied, and a refusal of its credentials after start.
#[derive(Clone)]
pub struct Alarms {
    inner: Arc<AlarmsInner>,
}

struct AlarmsInner {
    fatal: watch::Sender<Option<String>>,
    denied: Mutex<Denied>,
    denied_tx: watch::Sender<u64>,
    /// Counts the connections made (the first and every reconnect), and
    /// the subscriptions that lost messages (see [`Alarms::reconnects`]).
    connects: watch::Sender<u64>,
    connected_once: std::sync::atomic::AtomicBool,
    /// The stream the server has said is missing, and since when, with no
    /// answer since saying it exists (see `setup::missing_stream`).
    missing: Mutex<Option<(String, Instant)>>,
}

/// Permission violations kept to be named (the count goes on past them): a
/// process denied something over and over (an older credential, say)
/// must not grow without bound.
pub const DENIALS_KEPT: usize = 64;

/// The permission violations seen: how many were let go, then the last ones.
#[derive(Default)]
struct Denied {
    dropped: usize,
    texts: std::collections::VecDeque<String>,
}

impl Denied {
    fn push(&mut self, text: String) {
        self.texts.push_back(text);
        if self.texts.len() > DENIALS_KEPT {
            self.texts.pop_front();
            self.dropped += 1;
        }
    }

    /// The denial numbered `since` (from 0), or the oldest kept if it was let go.
    fn after(&self, since: usize) -> Option<&String> {
        match since.checked_sub(self.dropped) {
            Some(i) => self.texts.get(i),
            None => self.texts.front(),
        }
    }
}

impl Default for Alarms {
    fn default() -> Self {
        Self {
            inner: Arc::new(AlarmsInner {
                fatal: watch::channel(None).0,
                denied: Mutex::new(Denied::default()),
                denied_tx: watch::channel(0).0,
                connects: watch::channel(0).0,
                connected_once: std::sync::atomic::AtomicBool::new(false),
                missing: Mutex::new(None),
            }),
        }
    }
}

impl Alarms {
    /// Changes each time the connection is made again, and each time one of
    /// its subscriptions could not keep up and lost messages (a slow
    /// consumer): whatever a core subscription missed is to be read from
    /// the streams.
    pub fn reconnects(&self) -> watch::Receiver<u64> {
        self.inner.connects.subscribe()
    }

    /// Completes with the reason once the connection can no longer be used
    /// (its credentials were refused on a reconnect); never otherwise.
    pub async fn fatal(&self) -> BusError {
        let mut rx = self.inner.fatal.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return BusError::Refused(reason);
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Completes with the first subject the server denied this connection
    /// after `since` denials were seen (see [`Alarms::denial_count`]).
    pub async fn denied_after(&self, since: usize) -> String {
        let mut rx = self.inner.denied_tx.subscribe();
        loop {
            if let Some(subject) = self.lock().after(since).cloned() {
                return subject;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// How many permission violations the server has reported so far.
    pub fn denial_count(&self) -> usize {
        let denied = self.lock();
        denied.dropped + denied.texts.len()
    }

    /// The last [`DENIALS_KEPT`] permission violations, as the server worded them.
    pub fn denials(&self) -> Vec<String> {
        self.lock().texts.iter().cloned().collect()
    }

    /// Since when `stream` has been reported missing without an answer
    /// saying it exists; `None` clears it (the streams are all there).
    pub(crate) fn missing_since(&self, stream: Option<&str>) -> Option<Instant> {
        let mut slot = self
            .inner
            .missing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match stream {
            None => {
                *slot = None;
                None
            }
            Some(name) => match slot.as_ref() {
                Some((seen, since)) if seen == name => Some(*since),
                _ => {
                    let now = Instant::now();
                    *slot = Some((name.to_owned(), now));
                    Some(now)
                }
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Denied> {
        self.inner
            .denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn on_event(&self, event: Event) {
        use std::sync::atomic::Ordering;
        match event {
            Event::Connected => {
                self.inner.connected_once.store(true, Ordering::SeqCst);
                self.inner.connects.send_modify(|n| *n += 1);
                tracing::info!("NATS connected");
            }
            // After a refusal the process is on its way out with the reason
            // said once; "reconnecting" would be a false last word.
            Event::Disconnected if self.inner.fatal.borrow().is_some() => {
                tracing::debug!("NATS connection lost after the refusal")
            }
            Event::Disconnected => tracing::warn!("NATS connection lost; reconnecting"),
            Event::SlowConsumer(sid) => {
                tracing::warn!(subscription = sid, "a NATS subscription could not keep up and lost messages; what it missed is read from the streams");
                self.inner.connects.send_modify(|n| *n += 1);
            }
            Event::ServerError(ServerError::AuthorizationViolation) => {
                self.refused("the server refused this process's credentials (authorization violation): they may have been revoked")
            }
            Event::ServerError(ServerError::Other(text)) => {
                let lower = text.to_lowercase();
                if lower.contains("permissions violation") {
                    // The first denial is what ends a process at start (and
                    // is named in its last line); the ones its other checks
                    // meet a moment later would come after that last word.
                    if self.denial_count() == 0 {
                        tracing::error!(denied = %text, "NATS denied an operation to this credential");
                    } else {
                        tracing::debug!(denied = %text, "NATS denied another operation to this credential");
                    }
                    self.lock().push(text);
                    self.inner.denied_tx.send_modify(|n| *n += 1);
                } else if lower.contains("authentication revoked") {
                    self.refused(&format!(
                        "NATS revoked this process's credentials and ended its connection ({text})"
                    ));
                } else if lower.contains("user authentication expired")
                    || lower.contains("authorization violation")
                {
                    self.refused(&format!("NATS ended this connection: {text}"));
                } else {
                    tracing::warn!(error = %text, "NATS server error");
                }
            }
            // While reconnecting, every failed attempt is reported here by kind only.
            Event::ClientError(ClientError::Other(kind))
                if self.inner.connected_once.load(Ordering::SeqCst)
                    && (kind == ConnectErrorKind::AuthorizationViolation.to_string()
                        || kind == ConnectErrorKind::Authentication.to_string()) =>
            {
                self.refused("the server refused this process's credentials on reconnect (revoked or expired?)")
            }
            other => tracing::debug!(%other, "NATS event"),
        }
    }

    fn refused(&self, reason: &str) {
        tracing::error!(reason, "NATS refused this process");
        self.inner.fatal.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(reason.to_owned());
                true
            } else {
                false
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_counted_past_the_ones_kept() {
        let alarms = Alarms::default();
        for n in 0..DENIALS_KEPT + 10 {
            alarms.lock().push(format!("denied {n}"));
        }
        assert_eq!(alarms.denial_count(), DENIALS_KEPT + 10);
        let kept = alarms.denials();
        assert_eq!(kept.len(), DENIALS_KEPT);
        assert_eq!(kept[0], "denied 10");
        // One asked for by number: itself when kept, the oldest kept when not.
        assert_eq!(alarms.lock().after(DENIALS_KEPT + 9).unwrap(), "denied 73");
        assert_eq!(alarms.lock().after(3).unwrap(), "denied 10");
        assert!(alarms.lock().after(DENIALS_KEPT + 10).is_none());
    }
}
