//! What the server stores late or not at all: a message core subscribers
//! get before (or instead of) its store, as a fenced-out writer's or a
//! store that lands late.

use super::System;

/// Publishes `payload` on `subject` as a writer that another one fenced out
/// does: JetStream refuses to store it (it names a last sequence the subject
/// does not have), yet core subscribers get it all the same. Asserts the
/// refusal.
pub async fn publish_refused(sys: &System, subject: String, payload: &impl serde::Serialize) {
    let stored = sys
        .bus
        .js
        .send_publish(
            subject.clone(),
            async_nats::jetstream::message::PublishMessage::build()
                .payload(serde_json::to_vec(payload).unwrap().into())
                .expected_last_subject_sequence(1_000_000),
        )
        .await
        .unwrap()
        .await;
    assert!(
        stored.is_err(),
        "the server stored what a fenced-out writer sent on {subject}: {stored:?}"
    );
}

/// Makes stream `stream` also store what is published on `src` (one `*`),
/// under `dest` (with `{{wildcard(1)}}` for that token): a message stored
/// that way reaches no core subscriber of `dest`. A test uses it to store a
/// message a moment after the wake-up its reader got (see
/// [`publish_refused`]), as a store that lands late does.
pub async fn store_quietly(sys: &System, stream: &str, src: &str, dest: &str) {
    use async_nats::jetstream::stream::SubjectTransform;
    let mut stream = sys.bus.js.get_stream(stream).await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.subjects.push(src.to_owned());
    config.subject_transform = Some(SubjectTransform {
        source: src.to_owned(),
        destination: dest.to_owned(),
    });
    sys.bus.js.update_stream(&config).await.unwrap();
}
