//! `arbiter-console stop --session ID`: the human's `/stop` from the command
//! line. It sends the command, then waits for the session's log to say what
//! was stopped and by whom, and prints that line.

use std::time::Duration;

use arbiter_bus::{Bus, NatsOptions, Reach, TraceContext};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{HumanCommand, HumanMessage, LogBody, LogEntry, VERSION, subjects};
use async_nats::jetstream::consumer::DeliverPolicy;
use chrono::Utc;
use futures::StreamExt;
use tokio::io::AsyncWrite;

use crate::session::{CLIENT_NAME, open_log_from};
use crate::{ConsoleError, Result, inert, write_line};

/// How long the log has to say what became of a command (the work
/// stopped, a rewind done or refused).
pub(crate) const CONFIRM_WITHIN: Duration = Duration::from_secs(15);

/// Publishes `message` as console `identity`'s, then reads the session's
/// log for what became of it: the first entry after the message's own that
/// `answer` takes, within [`CONFIRM_WITHIN`]; `None` when none came.
pub(crate) async fn send_and_hear<T>(
    bus: &Bus,
    identity: &str,
    message: &HumanMessage,
    mut answer: impl FnMut(LogBody) -> Option<T>,
) -> Result<Option<T>> {
    let session_id = &message.session_id;
    // Follow the log from now on before anything is sent.
    let mut log = open_log_from(bus, session_id, DeliverPolicy::New).await?;
    bus.publish_js(
        subjects::session_human_from(session_id, identity),
        &message.message_id,
        &TraceContext::none(),
        message,
    )
    .await?;
    let heard = tokio::time::timeout(CONFIRM_WITHIN, async {
        let mut after_ours = false;
        while let Some(Ok(msg)) = log.next().await {
            let Ok(entry) = serde_json::from_slice::<LogEntry>(&msg.payload) else {
                continue;
            };
            match entry.body {
                LogBody::Human(h) if h.message_id == message.message_id => after_ours = true,
                body if after_ours => {
                    if let Some(found) = answer(body) {
                        return Some(found);
                    }
                }
                _ => {}
            }
        }
        None
    })
    .await;
    Ok(heard.ok().flatten())
}

/// Stops the session's work and prints the log's account of it.
pub async fn run<W: AsyncWrite + Unpin>(
    nats: &NatsOptions,
    identity: &str,
    session_id: &str,
    mut out: W,
) -> Result<()> {
    if !subjects::is_valid_token(session_id) {
        return Err(ConsoleError::InvalidSessionId {
            id: session_id.to_owned(),
        });
    }
    let conn = arbiter_bus::connect_with(nats, CLIENT_NAME, Reach::FailFast).await?;
    let bus = Bus::open(conn, NatsRole::Console, Reach::FailFast).await?;
    let message = HumanMessage {
        v: VERSION,
        session_id: session_id.to_owned(),
        message_id: uuid::Uuid::now_v7().to_string(),
        text: "/stop".to_owned(),
        sent_at: Utc::now(),
        command: Some(HumanCommand::Stop),
        budget: None,
        workspace: None,
        approval: None,
        policy: None,
        rewind: None,
    };
    let confirmed = send_and_hear(&bus, identity, &message, |body| match body {
        LogBody::System(s) => Some(s.text),
        _ => None,
    })
    .await?;
    match confirmed {
        Some(text) => write_line(&mut out, &inert::block("", &text)).await,
        None => Err(ConsoleError::Log {
            session_id: session_id.to_owned(),
            message: format!(
                "the stop was sent, but the log did not confirm it within {} s (is the \
                 coordinator running?)",
                CONFIRM_WITHIN.as_secs()
            ),
        }),
    }
}
