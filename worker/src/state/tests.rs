//! The fenced writer against a real nats-server: a second claim fences the
//! first holder; a retried write whose first attempt was stored counts as
//! stored; a record too large for a message goes through the object store; an
//! ended Orchestrator is rolled up into one snapshot under its fence; a step
//! with outputs is one message on `.out`, fenced with the `.state` records.

use arbiter_llm::{Message, MessageRole};
use arbiter_protocol::{Summon, VERSION};
use arbiter_tests::NatsServer;
use tokio_util::sync::CancellationToken;

use super::*;

async fn backend(nats: &NatsServer) -> StateBackend {
    let client = arbiter_bus::connect(nats.url(), "state-test", false)
        .await
        .unwrap();
    let bus = Bus::setup(client).await.unwrap();
    StateBackend::setup(&bus).await.unwrap()
}

fn summon(orch_id: &str) -> Summon {
    Summon {
        member: None,
        v: VERSION,
        session_id: "s".into(),
        orch_id: orch_id.into(),
        number: 1,
        brief: "Do the thing.".into(),
        workspace: None,
        pool: "default".into(),
        summoned_at: Utc::now(),
        runtime: None,
        needs: Vec::new(),
        handoff: None,
        budget: None,
        emergency: false,
        policy: None,
        arbiter_policy: None,
        start_from: None,
        link: None,
    }
}

fn claimed(claim: Option<Claim>) -> (StateStore, Vec<Message>) {
    match claim {
        Some(Claim::Fresh(store, transcript)) => (store, transcript),
        Some(Claim::Resumed(store, restored)) => (store, restored.transcript),
        _ => panic!("not claimed"),
    }
}

#[tokio::test]
async fn a_second_claim_fences_the_first_holder() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let s = summon("o-1");
    let (mut first, transcript) = claimed(claim(&backend, &s, 0, "w1", &never).await.unwrap());
    assert_eq!(transcript, vec![Message::user("Do the thing.")]);
    let mut snap = Snapshot::new();
    snap.tool_count = 1;
    first
        .write(
            vec![Message::assistant("step one")],
            &snap,
            Vec::new(),
            &never,
        )
        .await
        .unwrap();
    assert_eq!(first.fence().holds().await, Some(true));

    let (mut second, transcript) = claimed(claim(&backend, &s, 0, "w2", &never).await.unwrap());
    assert_eq!(transcript.len(), 2, "the brief and the step");
    assert_eq!(first.fence().holds().await, Some(false));
    let lost = first
        .write(vec![Message::assistant("stale")], &snap, Vec::new(), &never)
        .await;
    assert_eq!(lost, Err(AppendError::Fenced));
    second
        .write(Vec::new(), &snap, Vec::new(), &never)
        .await
        .unwrap();
    let restored = claim::load(&backend, "o-1").await.unwrap().unwrap();
    assert_eq!(restored.worker_id, "w2");
    assert!(
        restored
            .transcript
            .iter()
            .all(|m| m.content != Message::assistant("stale").content)
    );
}

#[tokio::test]
async fn a_retry_of_a_stored_write_counts_as_stored() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let (mut store, _) = claimed(
        claim(&backend, &summon("o-2"), 0, "w1", &never)
            .await
            .unwrap(),
    );
    let (rev, last_seq) = (store.rev, store.writer.last_seq());
    let snap = Snapshot::new();
    store
        .write(vec![Message::assistant("once")], &snap, Vec::new(), &never)
        .await
        .unwrap();
    // As if the ack of that write had been lost: the same write again.
    store.rev = rev;
    store.writer.fence_on(last_seq);
    store
        .write(vec![Message::assistant("once")], &snap, Vec::new(), &never)
        .await
        .unwrap();
    let restored = claim::load(&backend, "o-2").await.unwrap().unwrap();
    assert_eq!(restored.rev, rev + 1);
    assert_eq!(restored.transcript.len(), 2, "stored once");
    assert_eq!(store.fence().holds().await, Some(true));
}

#[tokio::test]
async fn a_record_over_the_message_cap_is_stored_behind_a_pointer() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let (mut store, _) = claimed(
        claim(&backend, &summon("o-3"), 0, "w1", &never)
            .await
            .unwrap(),
    );
    let big = Message {
        role: MessageRole::Assistant,
        content: vec![arbiter_llm::Block::Text {
            text: "x".repeat(1_500_000),
        }],
    };
    let mut snap = Snapshot::new();
    snap.inbox = vec!["y".repeat(600_000)];
    store
        .write(vec![big.clone()], &snap, Vec::new(), &never)
        .await
        .unwrap();
    let restored = claim::load(&backend, "o-3").await.unwrap().unwrap();
    assert_eq!(restored.transcript[1], big);
    assert_eq!(restored.snapshot, snap);
    assert_eq!(store.fence().holds().await, Some(true));
}

/// Messages on an Orchestrator's state subject now.
async fn records_on(backend: &StateBackend, orch_id: &str) -> usize {
    backend
        .bus
        .replay_subject(subjects::ORCH_STATE_STREAM, &subjects::orch_state(orch_id))
        .await
        .unwrap()
        .map_or(0, |(msgs, _)| msgs.len())
}

#[tokio::test]
async fn an_ended_orchestrator_is_rolled_up_into_one_snapshot_under_its_fence() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let (mut store, mut transcript) = claimed(
        claim(&backend, &summon("o-roll"), 0, "w1", &never)
            .await
            .unwrap(),
    );
    let mut snap = Snapshot::new();
    for step in ["one", "two"] {
        let reply = Message::assistant(step);
        transcript.push(reply.clone());
        store
            .write(vec![reply], &snap, Vec::new(), &never)
            .await
            .unwrap();
    }
    snap.phase = Phase::Ended {
        reason: EndReason::Released,
    };
    store
        .write(Vec::new(), &snap, Vec::new(), &never)
        .await
        .unwrap();
    assert_eq!(records_on(&backend, "o-roll").await, 4);
    let read_before = claim::load(&backend, "o-roll").await.unwrap().unwrap();

    // A holder fenced out meanwhile cannot roll up: nothing is dropped.
    let working = Snapshot::new();
    let (mut stale, _) = claimed(
        claim(&backend, &summon("o-stale"), 0, "w1", &never)
            .await
            .unwrap(),
    );
    stale
        .write(vec![Message::assistant("a")], &working, Vec::new(), &never)
        .await
        .unwrap();
    let (mut taker, _) = claimed(
        claim(&backend, &summon("o-stale"), 0, "w2", &never)
            .await
            .unwrap(),
    );
    taker
        .write(Vec::new(), &working, Vec::new(), &never)
        .await
        .unwrap();
    let before = records_on(&backend, "o-stale").await;
    assert_eq!(
        stale.roll_up(Vec::new(), &snap, &never).await,
        Err(AppendError::Fenced)
    );
    assert_eq!(records_on(&backend, "o-stale").await, before);

    // The holder's rollup leaves one record: the ended snapshot with the
    // whole transcript, which a reader (a claim) reads as before.
    assert_eq!(
        store.roll_up(transcript.clone(), &snap, &never).await,
        Ok(true)
    );
    assert_eq!(records_on(&backend, "o-roll").await, 1);
    let restored = claim::load(&backend, "o-roll").await.unwrap().unwrap();
    assert_eq!(restored.transcript, read_before.transcript);
    assert_eq!(restored.snapshot, read_before.snapshot);
    assert_eq!(restored.rev, 5);
}

#[tokio::test]
async fn a_stream_that_refuses_rollups_keeps_the_records() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    // A stream made before rollups were allowed.
    let mut config = backend
        .bus
        .js
        .get_stream(subjects::ORCH_STATE_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    config.allow_rollup = false;
    backend.bus.js.update_stream(config).await.unwrap();
    let never = CancellationToken::new();
    let (mut store, transcript) = claimed(
        claim(&backend, &summon("o-old"), 0, "w1", &never)
            .await
            .unwrap(),
    );
    let mut snap = Snapshot::new();
    snap.phase = Phase::Ended {
        reason: EndReason::Released,
    };
    store
        .write(Vec::new(), &snap, Vec::new(), &never)
        .await
        .unwrap();
    let before = records_on(&backend, "o-old").await;
    assert_eq!(store.roll_up(transcript, &snap, &never).await, Ok(false));
    assert_eq!(records_on(&backend, "o-old").await, before);
    // The next record still follows the last one stored.
    assert_eq!(store.fence().holds().await, Some(true));
}

/// An output of `orch_id` numbered `seq`.
fn output(orch_id: &str, seq: u64) -> OrchestratorMessage {
    use arbiter_protocol::{OrchestratorEvent, OrchestratorFailed, WireError};
    OrchestratorMessage {
        v: VERSION,
        session_id: "s".into(),
        orch_id: orch_id.into(),
        seq,
        event: OrchestratorEvent::Failed(OrchestratorFailed {
            error: WireError::OrchestratorFailed {
                number: 1,
                message: format!("output {seq}"),
            },
        }),
        evidence: None,
        handoff: None,
        spend: None,
        session_inputs: true,
        sent_at: Utc::now(),
    }
}

/// The state stream's last sequence now.
async fn last_seq(backend: &StateBackend) -> u64 {
    backend
        .bus
        .js
        .get_stream(subjects::ORCH_STATE_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .last_sequence
}

#[tokio::test]
async fn a_step_with_outputs_is_one_message_on_out_and_fences_the_state() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let s = summon("o-out");
    let (mut first, _) = claimed(claim(&backend, &s, 0, "w1", &never).await.unwrap());
    let before = last_seq(&backend).await;
    first
        .write(
            vec![Message::assistant("done")],
            &Snapshot::new(),
            vec![output("o-out", 1)],
            &never,
        )
        .await
        .unwrap();
    assert_eq!(last_seq(&backend).await, before + 1, "one stored message");
    // It is the output: on `.out`, its outbox the messages.
    let on_out = backend
        .log
        .last(&subjects::orch_out("o-out"))
        .await
        .unwrap()
        .unwrap();
    let record: Record = serde_json::from_slice(&on_out.payload).unwrap();
    assert_eq!(record.outbox.len(), 1);
    assert_eq!(record.outbox[0].seq, 1);
    assert_eq!(record.append, vec![Message::assistant("done")]);
    assert_eq!(first.fence().holds().await, Some(true));

    // A reader sees it as a record; a claim carries no output over.
    let (mut second, transcript) = claimed(claim(&backend, &s, 0, "w2", &never).await.unwrap());
    assert_eq!(transcript.len(), 2, "the brief and the step");
    let restored = claim::load(&backend, "o-out").await.unwrap().unwrap();
    assert!(restored.outbox.is_empty());
    assert_eq!(
        backend
            .log
            .last(&subjects::orch_out("o-out"))
            .await
            .unwrap()
            .unwrap()
            .seq,
        on_out.seq,
        "the claim published nothing again"
    );
    // The first holder is fenced on either subject.
    assert_eq!(first.fence().holds().await, Some(false));
    let lost = first
        .write(
            Vec::new(),
            &Snapshot::new(),
            vec![output("o-out", 2)],
            &never,
        )
        .await;
    assert_eq!(lost, Err(AppendError::Fenced));
    second
        .write(
            Vec::new(),
            &Snapshot::new(),
            vec![output("o-out", 2)],
            &never,
        )
        .await
        .unwrap();
    let lost = first
        .write(Vec::new(), &Snapshot::new(), Vec::new(), &never)
        .await;
    assert_eq!(lost, Err(AppendError::Fenced));
    assert_eq!(second.fence().holds().await, Some(true));
}

#[tokio::test]
async fn a_record_too_large_for_a_message_has_its_outputs_published_fenced() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let s = summon("o-big");
    let (mut store, _) = claimed(claim(&backend, &s, 0, "w1", &never).await.unwrap());
    let big = Message::assistant("x".repeat(1_500_000));
    store
        .write(
            vec![big],
            &Snapshot::new(),
            vec![output("o-big", 1)],
            &never,
        )
        .await
        .unwrap();
    // The pointer on `.state`, then the output bare on `.out`.
    let on_out = backend
        .log
        .last(&subjects::orch_out("o-big"))
        .await
        .unwrap()
        .unwrap();
    let bare: OrchestratorMessage = serde_json::from_slice(&on_out.payload).unwrap();
    assert_eq!(bare.seq, 1);
    // The holder goes on after its own bare output, and a reader skips it.
    store
        .write(
            vec![Message::assistant("more")],
            &Snapshot::new(),
            Vec::new(),
            &never,
        )
        .await
        .unwrap();
    assert_eq!(store.fence().holds().await, Some(true));
    let restored = claim::load(&backend, "o-big").await.unwrap().unwrap();
    assert_eq!(restored.transcript.len(), 2, "the brief and the replies");
    assert!(restored.outbox.is_empty());
}

#[tokio::test]
async fn a_claim_carries_over_outputs_a_pointer_record_left_unpublished() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let s = summon("o-lost");
    let (mut store, _) = claimed(claim(&backend, &s, 0, "w1", &never).await.unwrap());
    // A pointer record with an output, its holder dead before publishing it.
    let record = Record {
        v: VERSION,
        orch_id: "o-lost".into(),
        session_id: "s".into(),
        number: 1,
        rev: 2,
        worker_id: "w1".into(),
        summons_seq: 0,
        append: Vec::new(),
        snapshot: Snapshot::new(),
        outbox: vec![output("o-lost", 1)],
        rollup: false,
        baseline: None,
        cli_transcript: None,
        at: Utc::now(),
    };
    let pointer = |_: &str| encode(&record);
    let step = steplog::Step {
        rev: 2,
        record: encode(&record),
        pointer: &pointer,
        blob: "unused".into(),
        trace: None,
    };
    store.writer.append(step, &never).await.unwrap();
    // A worker that takes it over carries the output over (its claim record
    // on `.state`) and publishes it.
    let Some(Claim::Resumed(mut taker, restored)) =
        claim(&backend, &s, 0, "w2", &never).await.unwrap()
    else {
        panic!("not resumed");
    };
    assert!(restored.outbox.is_empty());
    let on_out = backend
        .log
        .last(&subjects::orch_out("o-lost"))
        .await
        .unwrap()
        .unwrap();
    let bare: OrchestratorMessage = serde_json::from_slice(&on_out.payload).unwrap();
    assert_eq!(bare.seq, 1);
    assert!(on_out.msg_id.ends_with(taker.writer.lease()));
    // Another publisher's bare output on `.out` is no claim: the holder goes on.
    backend
        .bus
        .publish_js(
            subjects::orch_out("o-lost"),
            "forged-1",
            &arbiter_bus::TraceContext::none(),
            &output("o-lost", 99),
        )
        .await
        .unwrap();
    assert_eq!(taker.fence().holds().await, Some(true));
    taker
        .write(
            Vec::new(),
            &Snapshot::new(),
            vec![output("o-lost", 2)],
            &never,
        )
        .await
        .unwrap();
    taker
        .write(Vec::new(), &Snapshot::new(), Vec::new(), &never)
        .await
        .unwrap();
    // The holder that lost it still is fenced out.
    assert_eq!(store.fence().holds().await, Some(false));
    assert_eq!(
        store
            .write(
                Vec::new(),
                &Snapshot::new(),
                vec![output("o-lost", 2)],
                &never
            )
            .await,
        Err(AppendError::Fenced)
    );
}

#[tokio::test]
async fn a_reader_starts_at_the_rollup_that_left_outputs_behind() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let (mut store, mut transcript) = claimed(
        claim(&backend, &summon("o-mix"), 0, "w1", &never)
            .await
            .unwrap(),
    );
    let mut snap = Snapshot::new();
    for (step, seq) in [("one", 1), ("two", 2)] {
        let reply = Message::assistant(step);
        transcript.push(reply.clone());
        snap.out_seq = seq;
        store
            .write(vec![reply], &snap, vec![output("o-mix", seq)], &never)
            .await
            .unwrap();
    }
    snap.phase = Phase::Ended {
        reason: EndReason::Released,
    };
    store
        .write(Vec::new(), &snap, Vec::new(), &never)
        .await
        .unwrap();
    let read_before = claim::load(&backend, "o-mix").await.unwrap().unwrap();
    assert_eq!(
        store.roll_up(transcript.clone(), &snap, &never).await,
        Ok(true)
    );
    // The outputs stay for the coordinator; the `.state` records are one.
    assert_eq!(records_on(&backend, "o-mix").await, 1);
    let restored = claim::load(&backend, "o-mix").await.unwrap().unwrap();
    assert_eq!(restored.transcript, read_before.transcript, "not doubled");
    assert_eq!(restored.transcript.len(), 2, "the brief and the replies");
    assert_eq!(restored.snapshot, read_before.snapshot);
}

/// A holder paused past its lease stores a step that outputs something (on
/// `.out`) after the next worker read the records and before its claim: the
/// claim is refused rather than stored on top of a step it has not read
/// (its model call and tools would run again), and `claim` reads again and
/// resumes with that step.
#[tokio::test]
async fn a_claim_never_lands_on_a_step_it_has_not_read() {
    let nats = NatsServer::start().await;
    let backend = backend(&nats).await;
    let never = CancellationToken::new();
    let s = summon("o-fork");
    let (mut first, _) = claimed(claim(&backend, &s, 0, "w1", &never).await.unwrap());
    // The second worker reads the records...
    let mut read = claim::load(&backend, "o-fork").await.unwrap().unwrap();
    // ...the first, not fenced yet, stores a step with an output...
    first
        .write(
            vec![Message::assistant("asked")],
            &Snapshot::new(),
            vec![output("o-fork", 1)],
            &never,
        )
        .await
        .unwrap();
    // ...and a claim built on that read is refused, as `claim` writes it.
    let mut second = StateStore::new(&backend, &s, "w2", 0, read.rev, read.last_seq);
    second.writer.strict();
    let outbox = std::mem::take(&mut read.outbox);
    let refused = second
        .write_as(Vec::new(), &read.snapshot, outbox, true, &never)
        .await;
    assert_eq!(refused, Err(AppendError::Fenced));
    assert_eq!(first.fence().holds().await, Some(true));
    // Claiming reads again: the step is in what the second worker resumes.
    let (_, transcript) = claimed(claim(&backend, &s, 0, "w2", &never).await.unwrap());
    assert_eq!(transcript.last(), Some(&Message::assistant("asked")));
    assert_eq!(first.fence().holds().await, Some(false));
}
