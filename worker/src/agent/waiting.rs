//! The Orchestrator between turns: waiting for the Arbiter, and taking its
//! input in `seq` order (see `arbiter_bus::seq`): the next one is taken, a
//! duplicate dropped, one ahead of its turn held until the gap fills or
//! times out. An Orchestrator that waits long enough parks (see
//! `slots.rs`): its slot goes back to the worker until input comes.

use arbiter_bus::seq::{self, Hold, Order};
use arbiter_protocol::{ApprovalAnsweredEntry, OrchestratorState};
use tokio::time::Instant;

use super::{Agent, Stop};
use crate::inputs::Input;
use crate::state::Phase;

impl Agent {
    /// Waits for the Arbiter's next message (unless some came while it
    /// worked). After the park time it parks: gives its slot back, and takes
    /// one again once input has come (stored meanwhile). A release or cancel ends it without a slot: storing
    /// the end runs no model and no tool.
    pub(super) async fn wait(&mut self) -> Result<(), Stop> {
        self.status
            .update(|s| {
                s.state = OrchestratorState::Waiting;
                s.current_tool = None;
            })
            .await;
        let stop = self.stopper.token().clone();
        let park_after = self.shared.config.park_after;
        let mut park_at = park_after.map(|after| Instant::now() + after);
        while self.core.snap.inbox.is_empty() {
            let gap = self.ahead.deadline();
            let input = tokio::select! {
                () = stop.cancelled() => return Err(Stop::Interrupted),
                input = self.inputs.recv() => input.ok_or(Stop::Interrupted)?,
                () = until(gap), if gap.is_some() => {
                    self.expire_ahead().await;
                    continue;
                }
                () = until(park_at), if park_at.is_some() => {
                    // As many as allowed are parked: it stays seated and tries again later.
                    park_at = if self.park().await {
                        None
                    } else {
                        park_after.map(|after| Instant::now() + after)
                    };
                    continue;
                }
            };
            if input.hint {
                self.foresee(input);
                continue;
            }
            // A parked Orchestrator stores what comes before it has a slot.
            let now = !self.seat.is_parked();
            if self.receive(input, now).await? {
                break;
            }
        }
        if self.seat.is_parked() {
            self.unpark().await?;
        }
        self.take_inputs().await?;
        // Stored with the turn's first record (before its model call, or with
        // its reply): until then the stream holds what was taken.
        self.core.snap.phase = Phase::Working;
        Ok(())
    }

    /// Gives the slot back, if fewer than the most allowed are parked.
    async fn park(&mut self) -> bool {
        if !self.seat.park() {
            tracing::info!(
                "waited long enough to park, but as many as allowed are parked; keeping the slot"
            );
            return false;
        }
        tracing::info!("waiting for the Arbiter: parked, the slot is free for other work");
        // Said before the slot goes, so status never shows more at work than slots.
        self.status.update(|s| s.parked = true).await;
        self.seat.give_back();
        // A CLI runtime's process goes too (its session is on disk and in the
        // records); the next turn resumes it.
        self.close_runtime().await;
        true
    }

    /// Takes a slot again (waiting for one if none is free), storing the
    /// input that comes meanwhile.
    async fn unpark(&mut self) -> Result<(), Stop> {
        tracing::info!("input came: taking a slot again");
        let stop = self.stopper.token().clone();
        let take = self.seat.take_back();
        tokio::pin!(take);
        let permit = loop {
            let gap = self.ahead.deadline();
            tokio::select! {
                () = stop.cancelled() => return Err(Stop::Interrupted),
                permit = &mut take => break permit.ok_or(Stop::Interrupted)?,
                input = self.inputs.recv() => {
                    self.receive(input.ok_or(Stop::Interrupted)?, false).await?;
                }
                () = until(gap), if gap.is_some() => self.expire_ahead().await,
            }
        };
        self.seat.sit(permit);
        tracing::info!("seated again");
        self.status.update(|s| s.parked = false).await;
        Ok(())
    }

    /// Takes one input, and any held ones that follow it in order: into the
    /// pending user message (`now`) or the stored inbox. False when nothing
    /// was taken: a duplicate, or an input
    /// ahead of its turn, held until the one before it comes; also when all
    /// it took was approvals' answers, which are no words for the model
    /// (see `agent/core/approval.rs`).
    pub(super) async fn receive(&mut self, input: Input, now: bool) -> Result<bool, Stop> {
        // Only what is read from the stream is taken (a hint may start a
        // model call while waiting, nothing more).
        if input.hint {
            return Ok(false);
        }
        if input.seq <= self.core.stored.in_seq {
            tracing::info!(seq = input.seq, "duplicate input dropped");
            return Ok(false);
        }
        match seq::order(self.core.snap.in_seq, input.seq) {
            // Delivered again while this worker holds it, not yet stored.
            Order::Duplicate => return Ok(false),
            Order::Ahead => {
                self.hold_ahead(input).await;
                return Ok(false);
            }
            Order::Next => {}
        }
        let mut next = Some(input);
        let mut taken = false;
        while let Some(input) = next {
            taken |= self.take(input, now).await?;
            next = self
                .ahead
                .next_after(self.core.snap.in_seq, Instant::now())
                .map(|(_, input)| input);
        }
        Ok(taken)
    }

    /// An input that came ahead of its turn waits for the one before it.
    async fn hold_ahead(&mut self, input: Input) {
        let seq = input.seq;
        let orch_id = &self.core.settings.orch_id;
        match self.ahead.hold(seq, input, Instant::now()) {
            Hold::Held => {
                tracing::warn!(orch.id = %orch_id, seq, expected = self.core.snap.in_seq.saturating_add(1), "input ahead of its turn; held until the input before it arrives");
            }
            Hold::AlreadyHeld(again) => {
                let same = self
                    .ahead
                    .get(seq)
                    .is_some_and(|first| first.stream_seq == again.stream_seq);
                if !same {
                    tracing::warn!(orch.id = %orch_id, seq, "a second input with a seq already held; passed over");
                }
            }
            Hold::Full(turned_away) => {
                tracing::error!(orch.id = %orch_id, seq = turned_away.seq, "too many inputs held ahead of their turn; passed over");
            }
        }
    }

    /// Inputs held for a gap that never filled: logged and dropped.
    pub(super) async fn expire_ahead(&mut self) {
        let Some(expired) = self.ahead.expire(Instant::now()) else {
            return;
        };
        let dropped: Vec<u64> = expired.dropped.iter().map(|(seq, _)| *seq).collect();
        tracing::error!(
            orch.id = %self.core.settings.orch_id,
            missing = self.core.snap.in_seq.saturating_add(1),
            ?dropped,
            turned_away = expired.turned_away,
            wait = ?self.ahead.wait(),
            "input seq never arrived; the inputs held after it are dropped"
        );
    }

    /// Takes the next input in order: true when it was words for the model.
    async fn take(&mut self, input: Input, now: bool) -> Result<bool, Stop> {
        self.forget_foreseen_unless(&input);
        if let Some(answer) = input.approval {
            self.take_answer(input.seq, answer).await?;
            return Ok(false);
        }
        self.begin_turn(&input.trace);
        if self.core.take_words(input, now) {
            self.step(Vec::new()).await?;
        }
        Ok(true)
    }

    /// An approval's answer, stored before anything acts on it
    /// (`core/approval.rs`).
    async fn take_answer(&mut self, seq: u64, answer: ApprovalAnsweredEntry) -> Result<(), Stop> {
        if self.core.take_answer(seq, answer) {
            self.step(Vec::new()).await?;
        }
        Ok(())
    }

    /// Moves the stored inbox and whatever else the Arbiter sent meanwhile
    /// into the pending user message.
    pub(super) async fn take_inputs(&mut self) -> Result<(), Stop> {
        self.core.take_inbox();
        while let Ok(input) = self.inputs.try_recv() {
            self.receive(input, true).await?;
        }
        Ok(())
    }

    /// Waits, in its slot, until the answer to the stored approval is
    /// taken (and stored) from the inputs (`core/approval.rs`): `None` runs
    /// the call, `Some` is the error the model reads instead. While it
    /// waits the Orchestrator keeps its slot and its lease and is not
    /// parked; the Arbiter's words meanwhile go to the stored inbox.
    pub(super) async fn await_answer(
        &mut self,
        name: &str,
    ) -> Result<Option<crate::tools::ToolOutcome>, Stop> {
        let tool = crate::tools::display_name(name);
        self.status
            .update(|s| {
                s.state = OrchestratorState::WaitingApproval;
                s.current_tool = Some(tool);
            })
            .await;
        let stop = self.stopper.token().clone();
        loop {
            if let Some(outcome) = self.core.answered(name) {
                return Ok(outcome);
            }
            let gap = self.ahead.deadline();
            tokio::select! {
                () = stop.cancelled() => return Err(Stop::Interrupted),
                input = self.inputs.recv() => {
                    // Words go to the stored inbox; the answer is taken by `take_answer`.
                    self.receive(input.ok_or(Stop::Interrupted)?, false).await?;
                }
                () = until(gap), if gap.is_some() => self.expire_ahead().await,
            }
        }
    }
}

/// Resolves at `deadline` (never without one).
pub(super) async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
