//! The fenced writer against a real nats-server: a second claim fences the
//! first holder; a retried write whose first attempt was stored counts as
//! stored; a record too large for a message goes through the object store.

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
        v: VERSION,
        session_id: "s".into(),
        orch_id: orch_id.into(),
        number: 1,
        brief: "Do the thing.".into(),
        workspace: None,
        pool: "default".into(),
        summoned_at: Utc::now(),
        runtime: None,
        handoff: None,
        budget: None,
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
    assert_eq!(lost, Err(WriteError::Fenced));
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
