//! One hook's delivery: a task that reads the events' stream through the
//! hook's durable (`hook-<name>`, shared by every coordinator, so an event
//! is POSTed by one of them) and POSTs each event the hook wants, signed.
//! A 2xx is delivered (acked); any other answer, a timeout or a connection
//! error is tried again later (a nak with a delay that doubles from 1 s to
//! 5 min, by the count of deliveries the server keeps), for as long as the
//! stream keeps the event. It runs apart from the sessions: a slow or hung
//! receiver holds up nothing but its own events. A failed attempt is a log
//! line (hook, event id, type, status or error, attempt; never the body,
//! the secret or the URL's path and query) and a metric.

use std::sync::Arc;
use std::time::Duration;

use arbiter_bus::Bus;
use arbiter_protocol::{Notification, subjects};
use async_nats::jetstream::consumer::pull::{self, Stream};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::config::{Format, Hook};
use super::sign;

/// The first wait before an event is tried again; it doubles each time.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
pub(crate) const MAX_RETRY: Duration = Duration::from_secs(5 * 60);
/// POSTs of one hook in flight at once (by this coordinator).
const IN_FLIGHT: usize = 16;
/// The ack wait beyond the hook's timeout: an event being POSTed is not
/// given to another coordinator meanwhile.
const ACK_MARGIN: Duration = Duration::from_secs(30);
/// How long to wait before making the consumer again after a failure.
const REOPEN_WAIT: Duration = Duration::from_secs(2);

/// The wait before the next try of an event delivered `attempt` times.
pub(crate) fn backoff(attempt: u64) -> Duration {
    let doublings = u32::try_from(attempt.saturating_sub(1).min(20)).unwrap_or(20);
    FIRST_RETRY.saturating_mul(1u32 << doublings).min(MAX_RETRY)
}

/// The durable's settings.
pub(crate) fn consumer_config(hook: &Hook) -> pull::Config {
    pull::Config {
        durable_name: Some(subjects::hook_consumer(&hook.name)),
        description: Some(format!("webhook {}", hook.name)),
        ack_policy: AckPolicy::Explicit,
        // A hook gets the events from when it was first configured on.
        deliver_policy: DeliverPolicy::New,
        ack_wait: hook.timeout + ACK_MARGIN,
        max_deliver: -1,
        max_ack_pending: 1_000,
        ..Default::default()
    }
}

/// Makes (or binds to) the hook's durable: done at start, before any
/// session can store an event, so that a new hook misses none.
pub(crate) async fn open(bus: &Bus, hook: &Hook) -> Result<PullConsumer, String> {
    let stream = bus
        .js
        .get_stream(subjects::NOTIFY_STREAM)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .get_or_create_consumer(&subjects::hook_consumer(&hook.name), consumer_config(hook))
        .await
        .map_err(|e| e.to_string())
}

/// Delivers the hook's events until `stop`.
pub(crate) async fn run(bus: Bus, hook: Hook, consumer: PullConsumer, stop: CancellationToken) {
    let hook = Arc::new(hook);
    let client = match reqwest::Client::builder()
        .timeout(hook.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("arbiter-coordinator/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(hook = %hook.name, error = %e, "could not make the webhook's HTTP client; its events wait in the stream");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut consumer = Some(consumer);
    loop {
        let messages = match consumer.take() {
            Some(c) => follow(&c).await,
            None => match open(&bus, &hook).await {
                Ok(c) => follow(&c).await,
                Err(e) => Err(e),
            },
        };
        let mut messages = match messages {
            Ok(messages) => messages,
            Err(e) => {
                tracing::warn!(hook = %hook.name, error = %e, "cannot read the webhook events; trying again");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(REOPEN_WAIT) => continue,
                }
            }
        };
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(msg)) => {
                    let Ok(permit) = slots.clone().acquire_owned().await else {
                        return;
                    };
                    let (client, hook) = (client.clone(), hook.clone());
                    tokio::spawn(async move {
                        deliver(&client, &hook, msg).await;
                        drop(permit);
                    });
                }
                Some(Err(e)) => {
                    tracing::debug!(hook = %hook.name, error = %e, "webhook consumer hiccup");
                }
                None => break,
            }
        }
    }
}

async fn follow(consumer: &PullConsumer) -> Result<Stream, String> {
    arbiter_bus::follow(consumer)
        .await
        .map_err(|e| e.to_string())
}

/// What one POST came to.
enum Outcome {
    Delivered,
    Failed(String),
}

/// Tries one event once, then acks it, or naks it with the next wait.
async fn deliver(client: &reqwest::Client, hook: &Hook, msg: Message) {
    let (attempt, age) = match msg.info() {
        Ok(info) => (
            info.delivered.max(1).unsigned_abs(),
            time::OffsetDateTime::now_utc() - info.published,
        ),
        Err(_) => (1, time::Duration::ZERO),
    };
    let event: Notification = match serde_json::from_slice(&msg.payload) {
        Ok(event) => event,
        Err(e) => {
            tracing::error!(hook = %hook.name, subject = %msg.subject, error = %e, "an unreadable webhook event; dropped");
            arbiter_bus::metrics::webhook_delivery(&hook.name, "skipped");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    if !hook.wants(event.kind) {
        arbiter_bus::metrics::webhook_delivery(&hook.name, "skipped");
        let _ = msg.ack().await;
        return;
    }
    if age > arbiter_bus::setup::NOTIFY_MAX_AGE {
        tracing::error!(hook = %hook.name, event.id = %event.id, event.r#type = event.kind.as_str(), attempt, "a webhook event was never delivered within the week it is kept; given up");
        arbiter_bus::metrics::webhook_delivery(&hook.name, "given_up");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    }
    match post(client, hook, &event, &msg.payload).await {
        Outcome::Delivered => {
            arbiter_bus::metrics::webhook_delivery(&hook.name, "delivered");
            tracing::debug!(hook = %hook.name, event.id = %event.id, attempt, "webhook event delivered");
            if let Err(e) = msg.double_ack().await {
                tracing::warn!(hook = %hook.name, event.id = %event.id, error = %e, "a delivered webhook event could not be acknowledged; it may be POSTed again (same webhook-id)");
            }
        }
        Outcome::Failed(why) => {
            let wait = backoff(attempt);
            arbiter_bus::metrics::webhook_delivery(&hook.name, "failed");
            tracing::warn!(
                hook = %hook.name,
                event.id = %event.id,
                event.r#type = event.kind.as_str(),
                attempt,
                error = %why,
                retry_in_secs = wait.as_secs(),
                "webhook delivery failed; tried again later"
            );
            let _ = msg.ack_with(AckKind::Nak(Some(wait))).await;
        }
    }
}

/// The POST: the body the hook's format asks for, signed.
async fn post(
    client: &reqwest::Client,
    hook: &Hook,
    event: &Notification,
    stored: &[u8],
) -> Outcome {
    let body = match hook.format {
        Format::Standard => stored.to_vec(),
        Format::Slack => {
            serde_json::to_vec(&serde_json::json!({ "text": slack_text(&event.summary) }))
                .unwrap_or_default()
        }
    };
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign::signature(&hook.secret, &event.id, timestamp, &body);
    let sent = client
        .post(hook.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(sign::ID_HEADER, &event.id)
        .header(sign::TIMESTAMP_HEADER, timestamp.to_string())
        .header(sign::SIGNATURE_HEADER, signature)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => Outcome::Delivered,
        Ok(response) => Outcome::Failed(format!("HTTP {}", response.status().as_u16())),
        Err(e) if e.is_timeout() => {
            Outcome::Failed(format!("no answer within {} s", hook.timeout.as_secs_f64()))
        }
        // Without the URL, which may hold a token.
        Err(e) => Outcome::Failed(arbiter_bus::error_chain(&e.without_url())),
    }
}

/// `summary` as Slack shows text, not markup: a summary quotes what a model
/// wrote, and Slack reads `<!channel>`, `<@U…>` and `<https://…|…>` in a
/// message's text as mentions and links. Its own escaping (`&`, `<`, `>`)
/// keeps them as the characters they are.
fn slack_text(summary: &str) -> String {
    summary
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slack_message_shows_what_a_model_wrote_as_text() {
        assert_eq!(
            slack_text("Orchestrator I asks to run bash: echo <!channel> && curl <https://x|y>"),
            "Orchestrator I asks to run bash: echo &lt;!channel&gt; &amp;&amp; curl \
             &lt;https://x|y&gt;"
        );
    }

    #[test]
    fn the_wait_doubles_from_a_second_to_five_minutes() {
        let waits: Vec<u64> = [1, 2, 3, 4, 9, 10, 50]
            .map(|n| backoff(n).as_secs())
            .to_vec();
        assert_eq!(waits, [1, 2, 4, 8, 256, 300, 300]);
    }
}
