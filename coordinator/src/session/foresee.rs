//! An Arbiter turn started on an Orchestrator's output as it is published,
//! before the server's stored copy reaches the session.
//!
//! The session holds a core subscription on `orch.<orch_id>.out` of its solo
//! Orchestrator (members of a team gather their reports first, so none is
//! kept for them). A core subscriber gets a message as the server takes it
//! in, before the server has stored it and long before the stored copy comes
//! back through `coordinator-orch-out`. When that output is the next one and
//! would start a turn at once, the session starts the turn's model call then,
//! on the request taking it would make. The output is still taken only from
//! the stored copy: the turn that copy starts adopts the call only when the
//! request it makes itself is the same one; otherwise the call is aborted and
//! its reply never read. Its streamed words are shown only once it is
//! adopted. So what the session stores and does never rests on a message the
//! server did not store. The price of a wrong guess is one model request (an
//! output the server refused, or one that raced another input); it is
//! counted in the session's spend once known, like every request. At most
//! one is started per turn, so messages published there that are never
//! stored (a fenced-out or hostile worker's) cannot multiply requests.

use tokio_stream::{StreamExt as _, StreamMap};

use super::*;
use turn::{RunningTurn, turn_call};

/// The model call of a turn that is not stored yet (see the module).
struct Foreseen {
    /// The number the turn would have.
    turn: u64,
    request: Request,
    span: tracing::Span,
    /// Lets its streamed words out, once adopted.
    go: tokio::sync::oneshot::Sender<()>,
    /// Aborted when dropped.
    running: RunningTurn,
    /// Counted as taken or dropped (`arbiter.model.early_calls`).
    counted: arbiter_bus::metrics::EarlyCall,
}

/// The call started early, if any, and the turn it was last started for
/// (one per turn).
#[derive(Default)]
pub(super) struct Early {
    foreseen: Option<Foreseen>,
    turn: u64,
}

impl Early {
    /// The form the early call was sent with: the turn sends the same, so
    /// that a form the fleet changed since does not make it drop the call
    /// (the next turn takes the new one).
    pub(super) fn schema(&self) -> Option<std::sync::Arc<serde_json::Value>> {
        self.foreseen
            .as_ref()
            .and_then(|f| f.request.output_schema.clone())
    }

    /// What was foreseen was not what came: the call is dropped.
    pub(super) fn drop_call(&mut self) {
        self.foreseen = None;
    }

    /// An output seen as it was published: starts the turn taking it would
    /// start, when it would start one at once (see the module).
    pub(super) fn foresee(
        &mut self,
        core: &Core,
        shared: &Arc<Shared>,
        meter: &arbiter_llm::meter::Meter,
        message: &async_nats::Message,
    ) {
        let turn = core.state.turns + 1;
        // One early call per turn at most, whatever else is published
        // there (the same output again, or messages the server refused).
        // Checked before the message is read: it costs nothing.
        if self.turn == turn {
            return;
        }
        let Ok((session, outputs)) =
            crate::cluster::intake::outputs_of(&message.subject, &message.payload)
        else {
            return;
        };
        if session != core.id {
            return;
        }
        let Some(text) = core.foreseen_text(&outputs) else {
            return;
        };
        let request = core.turn_request(Some(text));
        self.turn = turn;
        let trace = TraceContext::from_headers(message.headers.as_ref());
        let (go, gate) = tokio::sync::oneshot::channel();
        let (call, span) = turn_call(
            shared,
            meter,
            &core.id,
            request.clone(),
            turn,
            &trace,
            Some(gate),
        );
        self.foreseen = Some(Foreseen {
            turn,
            request,
            span,
            go,
            running: RunningTurn::start(call),
            counted: arbiter_bus::metrics::EarlyCall::new("arbiter"),
        });
    }

    /// The call started early for `request`, if it is turn `turn`'s:
    /// adopted (its span becomes the turn's, its words go out). Any other
    /// is dropped.
    pub(super) fn adopt(
        &mut self,
        session_id: &str,
        turn: u64,
        request: &Request,
    ) -> Option<(RunningTurn, tracing::Span)> {
        let mut foreseen = self.foreseen.take()?;
        if foreseen.turn != turn || foreseen.request != *request {
            tracing::debug!(
                session.id = %session_id,
                "an Arbiter call started on an output as it was published was not this turn's: aborted unanswered"
            );
            return None;
        }
        foreseen.counted.adopt();
        let _ = foreseen.go.send(());
        Some((foreseen.running, foreseen.span))
    }
}

/// Core subscriptions on the outputs of the session's solo Orchestrator, by
/// orch_id (unsubscribed when dropped).
#[derive(Default)]
pub(super) struct OutputWatch {
    subs: StreamMap<String, async_nats::Subscriber>,
}

impl OutputWatch {
    /// The next output seen, once one is watched.
    pub(super) async fn next(&mut self) -> Option<async_nats::Message> {
        if self.subs.is_empty() {
            return std::future::pending().await;
        }
        self.subs.next().await.map(|(_, message)| message)
    }

    /// Watches the output of the session's solo Orchestrator, and no
    /// other. The summons is stored and published before this runs, so the
    /// watch is in place long before the Orchestrator's first output.
    pub(super) async fn follow(
        &mut self,
        client: &async_nats::Client,
        team: &[crate::state::Active],
    ) {
        // Run after every step: when nothing changed, it allocates nothing.
        let solo = || team.iter().filter(|a| a.member.is_none());
        if solo().count() == self.subs.len() && solo().all(|a| self.subs.contains_key(&a.orch_id)) {
            return;
        }
        let want: Vec<&str> = solo().map(|a| a.orch_id.as_str()).collect();
        let gone: Vec<String> = self
            .subs
            .keys()
            .filter(|id| !want.contains(&id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.subs.remove(&id);
        }
        for id in want {
            if self.subs.contains_key(id) {
                continue;
            }
            match client.subscribe(subjects::orch_out(id)).await {
                Ok(sub) => {
                    self.subs.insert(id.to_owned(), sub);
                }
                // Only the early start is lost: the output comes all the same.
                Err(e) => {
                    tracing::debug!(orch.id = %id, error = %e, "not watching the Orchestrator's output")
                }
            }
        }
    }
}
