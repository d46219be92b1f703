//! The Arbiter's turn: what it is asked (the queue, with a digest of the
//! notes), the model call as a task of its own, and what its reply does
//! (routed, charged, or a question left unanswered told to the human).

use super::*;

/// Notes carried in one digest; older ones are counted, not quoted.
const DIGEST_NOTES: usize = 10;
/// Characters of one note quoted in a digest.
const DIGEST_NOTE_CHARS: usize = 300;

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

impl crate::arbiter_handoff::RunningHandoff {
    /// Starts the packet's request that the handoff rule decided, as a task
    /// of its own.
    pub(crate) fn start(decided: crate::arbiter_handoff::HandoffCall) -> Self {
        Self {
            task: tokio::spawn(decided.call),
            meter: decided.meter,
        }
    }
}

impl Session {
    /// Everything queued, in arrival order, as one user message; the notes
    /// gathered since the last delivery go first, as a digest.
    pub(super) fn take_queue(&mut self) -> String {
        let notes = std::mem::take(&mut self.state.notes);
        let budget = self.take_budget_notes();
        let queue: Vec<Pending> = self.state.queue.drain(..).collect();
        queue_text(&notes, budget, &queue)
    }

    /// The request of the Arbiter's turn: its transcript, and `next` (a
    /// user message not in it yet) when given.
    pub(super) fn turn_request(&self, next: Option<String>) -> Request {
        let mut messages: Vec<Message> = self
            .transcript
            .iter()
            .map(|turn| match turn.role {
                TurnRole::User => Message::user(turn.text.clone()),
                TurnRole::Assistant => Message::assistant(turn.text.clone()),
            })
            .collect();
        messages.extend(next.map(Message::user));
        Request {
            system: crate::prompt::ARBITER_SYSTEM_PROMPT.to_owned(),
            messages: Arc::new(messages),
            tools: Arc::default(),
            output_schema: Some(self.shared.output_schema.clone()),
            max_output_tokens: None,
        }
    }

    /// Starts the turn in flight: its model call runs as a task of its own.
    pub(super) fn start_turn(&mut self) -> RunningTurn {
        let request = self.turn_request(None);
        if let Some(running) = self.adopt_foreseen(&request) {
            return running;
        }
        let (turn, span) = self.turn_call(request, self.state.turns, &self.trace, None);
        self.turn_span = span;
        RunningTurn::start(turn)
    }

    /// Turn `turn`'s model call on `request`, and its span (the child of
    /// `parent`). Its streamed words go out once `go` fires (at once
    /// without one): a call started early (see `foresee.rs`) shows nothing
    /// until its turn is taken.
    pub(super) fn turn_call(
        &self,
        request: Request,
        turn: u64,
        parent: &TraceContext,
        go: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> (TurnFuture, tracing::Span) {
        let shared = self.shared.clone();
        let session_id = self.id.clone();
        // Every request of the turn is counted, repairs included.
        let model = arbiter_llm::meter::Metered::new(shared.model.clone(), self.meter.clone());
        // A turn is a span of its own, the child of what started it (in
        // another process), not of the session's long-lived span.
        let span = tracing::info_span!(
            parent: None,
            "invoke_agent",
            otel.name = "invoke_agent arbiter",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "arbiter",
            session.id = %self.id,
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
        &self,
        result: &Result<Structured<ArbiterOutput>, LlmError>,
    ) -> crate::summons::FleetView {
        use crate::summons::FleetView;
        let Ok(reply) = result else {
            return FleetView::NotAsked;
        };
        let output = &reply.value;
        if !FleetView::wanted(output) {
            return FleetView::NotAsked;
        }
        let pool = output.pool.as_deref().unwrap_or(&self.shared.config.pool);
        let runtime = output.runtime.map(|r| r.as_str()).or(self
            .shared
            .config
            .orchestrator_runtime
            .as_deref());
        match self
            .shared
            .fleet
            .offers(
                &self.shared.bus.client,
                pool,
                runtime,
                output.emergency == Some(true),
            )
            .await
        {
            Some(offers) => FleetView::Seen(offers),
            None => FleetView::Unknown,
        }
    }

    pub(super) fn finish_turn(
        &mut self,
        result: Result<Structured<ArbiterOutput>, LlmError>,
        fleet: &crate::summons::FleetView,
    ) {
        // The turn's span ends with this step.
        let turn_span = std::mem::replace(&mut self.turn_span, tracing::Span::none());
        self.charge_turn();
        self.check_budget();
        match result {
            Ok(reply) => {
                // Unknown usage (some OpenAI-compatible servers) keeps the last figure.
                if let Some(tokens) = reply.response.context_tokens() {
                    self.state.context_tokens = tokens;
                }
                self.transcript.push(Turn {
                    role: TurnRole::Assistant,
                    text: reply.raw,
                });
                let intent = reply.value.intent;
                let span = tracing::info_span!(
                    parent: &turn_span,
                    "route",
                    otel.name = "arbiter route",
                    session.id = %self.id,
                    arbiter.intent = reply.value.intent.as_str(),
                );
                // What the decision publishes continues the trace from here.
                self.trace = TraceContext::of(&span);
                let _in_route = span.enter();
                self.route(reply.value, fleet);
                match intent {
                    // The human was spoken to: their answer goes on.
                    ArbiterIntent::AddressHuman => {}
                    ArbiterIntent::Musings => self.question_left(Ending::Musings),
                    _ => self.question_left(Ending::Rejected),
                }
            }
            Err(e) => {
                // The user turn stays: it reaches the Arbiter with the next message.
                tracing::error!(error = %e, "Arbiter turn failed");
                self.log(LogBody::Error(ErrorEntry {
                    error: e.to_wire(Role::Arbiter),
                }));
                self.question_left(Ending::Failed);
            }
        }
    }

    /// After a turn: an Orchestrator that asked a question must not wait
    /// for an answer that no turn is coming to give. When nothing is queued
    /// for the Arbiter and its turn did not answer, a turn that only mused is
    /// reminded once (a new turn); otherwise the human is told, once.
    fn question_left(&mut self, ending: Ending) {
        if !self.state.queue.is_empty() || self.state.hold.is_some() {
            return;
        }
        // The first member still waiting on an answer (one note at a time).
        let Some(active) = self.state.team.iter_mut().find(|a| a.asked) else {
            return;
        };
        let name = member_name(active.number, active.member);
        if ending == Ending::Musings && !active.reminded {
            active.reminded = true;
            let text = format!(
                "{name} asked you a question and is waiting for your answer; musings reach \
                 nobody. Answer it (address_orchestrator), or ask the human (address_human)."
            );
            self.log(LogBody::System(SystemEntry { text: text.clone() }));
            self.enqueue(Pending::System { text });
            return;
        }
        active.asked = false;
        let why = match ending {
            Ending::Musings => "ended in musings again",
            Ending::Rejected => "could not be carried out",
            Ending::Failed => "failed",
        };
        self.log(LogBody::System(SystemEntry {
            text: format!(
                "{name} asked a question and is waiting for an answer, but the Arbiter's \
                 turn {why}. Write to go on, or /stop."
            ),
        }));
    }

    /// Adds the model requests the turn made (those of an abandoned turn
    /// too, once they are known) to the Arbiter's spend, stored with the step.
    fn charge_turn(&mut self) {
        let model = &self.shared.config.model.model;
        for usage in self.meter.take() {
            self.shared
                .config
                .prices
                .charge(&mut self.state.spend.arbiter, model, usage.as_ref());
        }
        self.state.spend.sum();
    }
}

/// How an Arbiter turn that did not answer an Orchestrator's question ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Musings,
    Rejected,
    Failed,
}

impl Pending {
    /// What the Arbiter reads of it in its turn's user message.
    pub(crate) fn words(&self) -> String {
        match self {
            Pending::Human { text, tagged: true } => format!("Human: {text}"),
            Pending::Human {
                text,
                tagged: false,
            } => text.clone(),
            Pending::Orchestrator {
                number,
                member,
                text,
                evidence,
                handoff,
            } => crate::outputs::report(
                *number,
                *member,
                text,
                evidence.as_ref(),
                handoff.as_deref(),
            ),
            Pending::System { text } => format!("System: {text}"),
            Pending::Team {
                number,
                members,
                reports,
                waited_secs,
                sequential,
                consensus,
            } => crate::team::team_input(
                *number,
                *members,
                reports,
                *waited_secs,
                *sequential,
                consensus.as_deref(),
            ),
        }
    }
}

/// The user message of a turn: the notes' digest, the budget notes, then
/// what is queued, in arrival order.
pub(super) fn queue_text(
    notes: &[(u32, String)],
    budget: Vec<String>,
    queue: &[Pending],
) -> String {
    let mut parts = Vec::new();
    if !notes.is_empty() {
        parts.push(digest(notes));
    }
    parts.extend(budget);
    parts.extend(queue.iter().map(Pending::words));
    parts.join("\n\n")
}

fn digest(notes: &[(u32, String)]) -> String {
    let skipped = notes.len().saturating_sub(DIGEST_NOTES);
    let mut lines = vec!["Notes sent while working:".to_owned()];
    if skipped > 0 {
        lines.push(format!("- ({skipped} earlier notes not shown)"));
    }
    for (number, text) in &notes[skipped..] {
        let quoted: String = text.chars().take(DIGEST_NOTE_CHARS).collect();
        let cut = if text.chars().count() > DIGEST_NOTE_CHARS {
            "…"
        } else {
            ""
        };
        lines.push(format!("- {}: {quoted}{cut}", orchestrator_name(*number)));
    }
    lines.join("\n")
}
