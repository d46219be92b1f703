//! The Arbiter's turn as I/O: its model call, running as a task of its own
//! while the step that asks it is stored, its words streamed to consoles;
//! and the workers asked what they offer before a directed summons is
//! routed. What a turn is asked and what its reply does are the core's
//! (`rules/turn.rs`).

use super::*;

pub(super) type TurnFuture = BoxFuture<'static, Result<Structured<ArbiterOutput>, LlmError>>;

/// A turn running as its own task, so the model call starts while its step
/// is stored; aborted when dropped (the step was not stored, or the session
/// stopped first).
pub(super) struct RunningTurn(
    tokio_util::task::AbortOnDropHandle<Result<Structured<ArbiterOutput>, LlmError>>,
);

impl RunningTurn {
    pub(super) fn start(turn: TurnFuture) -> Self {
        Self(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(turn)))
    }

    pub(super) async fn finish(&mut self) -> Result<Structured<ArbiterOutput>, LlmError> {
        match (&mut self.0).await {
            Ok(result) => result,
            Err(e) => Err(LlmError::Stream(format!("the turn's task stopped: {e}"))),
        }
    }
}

/// Turn `turn`'s model call on `request`, counted on `meter`, and its span
/// (the child of `parent`). Its streamed words go out once `go` fires (at
/// once without one): a call started early (see `foresee.rs`) shows
/// nothing until its turn is taken.
pub(super) fn turn_call(
    shared: &Arc<Shared>,
    meter: &arbiter_llm::meter::Meter,
    session_id: &str,
    request: Request,
    turn: u64,
    parent: &TraceContext,
    go: Option<tokio::sync::oneshot::Receiver<()>>,
) -> (TurnFuture, tracing::Span) {
    let shared = shared.clone();
    let session_id = session_id.to_owned();
    // Every request of the turn is counted, repairs included.
    let model = arbiter_llm::meter::Metered::new(shared.model.clone(), meter.clone());
    // A turn is a span of its own, the child of what started it (in
    // another process), not of the session's long-lived span.
    let span = tracing::info_span!(
        parent: None,
        "invoke_agent",
        otel.name = "invoke_agent arbiter",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "arbiter",
        session.id = %session_id,
        arbiter.turn = i64::try_from(turn).unwrap_or(i64::MAX),
    );
    parent.adopt(&span);
    let future = Box::pin(
        async move {
            // The words go out as they are written; a forwarder publishes them
            // so the model stream is never held up by NATS.
            let (tx, mut rx) = mpsc::unbounded_channel::<ArbiterDelta>();
            let subject = subjects::session_delta(&session_id);
            let forward = async {
                if let Some(go) = go
                    && go.await.is_err()
                {
                    // Never taken: what it wrote is shown to nobody.
                    return;
                }
                while let Some(delta) = rx.recv().await {
                    if let Err(e) = shared.bus.publish_core(subject.clone(), &delta).await {
                        tracing::debug!(error = %e, "delta not published");
                    }
                }
            };
            let mut extractor = MessageExtractor::default();
            let mut attempt = 0;
            let call = structured::complete_with::<ArbiterOutput, _>(
                &model,
                request,
                shared.config.schema_repairs,
                // Moved in: the sender drops when the call ends, which ends the forwarder.
                move |progress| match progress {
                    Progress::Attempt(n) => {
                        attempt = n;
                        extractor = MessageExtractor::default();
                    }
                    Progress::Text(piece) => {
                        if let Some(text) = extractor.push(piece) {
                            let _ = tx.send(ArbiterDelta {
                                v: VERSION,
                                session_id: session_id.clone(),
                                turn,
                                attempt,
                                intent: extractor.intent(),
                                text,
                                at: Utc::now(),
                            });
                        }
                    }
                },
            );
            let (result, ()) = tokio::join!(call, forward);
            result
        }
        .instrument(span.clone()),
    );
    (future, span)
}

/// What the workers offer, asked only for a directed summons.
pub(super) async fn fleet_view(
    shared: &Shared,
    result: &Result<Structured<ArbiterOutput>, LlmError>,
) -> crate::rules::summons::FleetView {
    use crate::rules::summons::FleetView;
    let Ok(reply) = result else {
        return FleetView::NotAsked;
    };
    let output = &reply.value;
    if !FleetView::wanted(output) {
        return FleetView::NotAsked;
    }
    let pool = output.pool.as_deref().unwrap_or(&shared.config.pool);
    let runtime = output
        .runtime
        .map(|r| r.as_str())
        .or(shared.config.orchestrator_runtime.as_deref());
    match shared
        .fleet
        .offers(
            &shared.bus.client,
            pool,
            runtime,
            output.needs.as_deref().unwrap_or_default(),
            output.emergency == Some(true),
        )
        .await
    {
        Some(offers) => FleetView::Seen(offers),
        None => FleetView::Unknown,
    }
}
