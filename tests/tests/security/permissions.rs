//! The permission matrix: for each role, every operation of the protocol's
//! table is tried against the server. Each allowed one succeeds; each denied
//! one is refused by the server (a "Permissions Violation"), which is what a
//! forged summons, a forged human line or a stream deletion by anyone but
//! the admin now meets.

use std::time::Duration;

use arbiter_bus::{Connection, NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_tests::SecureNats;
use bytes::Bytes;
use futures::StreamExt as _;

/// How an operation reaches the server.
#[derive(Debug, Clone)]
enum Op {
    /// A JetStream publish, waiting for the PubAck.
    Js(String),
    /// A JetStream API request (or any request): allowed when answered.
    Request(String, &'static str),
    /// A core subscription.
    Subscribe(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Denied,
}

const A: NatsRole = NatsRole::Admin;
const C: NatsRole = NatsRole::Coordinator;
const W: NatsRole = NatsRole::Worker;
const K: NatsRole = NatsRole::Console;

/// Every operation, and the roles that may do it. Credential names: admin,
/// coordinator, console (as `init` makes them) and `w-default`, a worker of
/// pool `default` only.
fn matrix() -> Vec<(&'static str, Op, Vec<NatsRole>)> {
    let js = |s: &str| Op::Js(s.to_owned());
    let req = |s: &str, body: &'static str| Op::Request(s.to_owned(), body);
    let sub = |s: &str| Op::Subscribe(s.to_owned());
    vec![
        (
            "send a human line under its own name",
            js("arbiter.v1.session.s1.human.console"),
            vec![K],
        ),
        (
            "send a human line with no name (forged)",
            js("arbiter.v1.session.s1.human"),
            vec![],
        ),
        (
            "send a human line under another console's name",
            js("arbiter.v1.session.s1.human.mallory"),
            vec![],
        ),
        ("forge a summons", js("arbiter.v1.summon.default"), vec![C]),
        (
            "write Arbiter output (a log entry)",
            js("arbiter.v1.session.s1.log"),
            vec![C],
        ),
        (
            "write Orchestrator output",
            js("arbiter.v1.orch.o1.out"),
            vec![W],
        ),
        (
            "write an Orchestrator state record",
            js("arbiter.v1.orch.o1.state"),
            vec![W],
        ),
        (
            "speak to an Orchestrator (.in)",
            js("arbiter.v1.orch.o1.in"),
            vec![C],
        ),
        (
            "release or cancel an Orchestrator (.ctl)",
            js("arbiter.v1.orch.o1.ctl"),
            vec![C, A],
        ),
        (
            "write a session's status to the bucket",
            js("$KV.arbiter_sessions.s1"),
            vec![C, A],
        ),
        (
            "read a session's log (a consumer on it)",
            req(
                "$JS.API.CONSUMER.CREATE.ARBITER_SESSIONS.probe.arbiter.v1.session.s1.log",
                r#"{"stream_name":"ARBITER_SESSIONS","config":{"name":"probe","filter_subject":"arbiter.v1.session.s1.log","deliver_policy":"all","ack_policy":"none","inactive_threshold":5000000000}}"#,
            ),
            // The coordinator reads a log whole to archive its session; a
            // console reads it by direct get (it may make no consumer).
            vec![C, A],
        ),
        (
            "follow a session's log and its inputs (one consumer, two filters)",
            req(
                "$JS.API.CONSUMER.CREATE.ARBITER_SESSIONS.probe2",
                r#"{"stream_name":"ARBITER_SESSIONS","config":{"name":"probe2","filter_subjects":["arbiter.v1.session.s1.log","arbiter.v1.session.s1.in.>"],"deliver_policy":"all","ack_policy":"none","inactive_threshold":5000000000}}"#,
            ),
            vec![C, A],
        ),
        (
            "list the sessions bucket's keys (a consumer on it)",
            req(
                "$JS.API.CONSUMER.CREATE.KV_arbiter_sessions",
                r#"{"stream_name":"KV_arbiter_sessions","config":{"deliver_policy":"last_per_subject","ack_policy":"none","inactive_threshold":5000000000}}"#,
            ),
            vec![C, A],
        ),
        (
            "store an input to an Orchestrator (a log entry on its own subject)",
            js("arbiter.v1.session.s1.in.o1.1"),
            vec![C],
        ),
        (
            "read an input by direct get of its subject",
            req(
                "$JS.API.DIRECT.GET.ARBITER_SESSIONS.arbiter.v1.session.s1.in.o1.1",
                "",
            ),
            vec![W, A],
        ),
        (
            "read a session's log by direct get",
            req(
                "$JS.API.DIRECT.GET.ARBITER_SESSIONS.arbiter.v1.session.s1.log",
                "",
            ),
            vec![A],
        ),
        (
            "read any message of the sessions stream by direct get",
            req("$JS.API.DIRECT.GET.ARBITER_SESSIONS", r#"{"seq":1}"#),
            // How a console replays and follows a log.
            vec![K, A],
        ),
        (
            "read the coordinators' sealing key (their leases bucket)",
            req(
                "$JS.API.DIRECT.GET.KV_arbiter_coordinator_leases.$KV.arbiter_coordinator_leases.sealing-key",
                "",
            ),
            vec![C, A],
        ),
        (
            "check whose an Orchestrator's last record is (direct get over its subjects)",
            req(
                "$JS.API.DIRECT.GET.ARBITER_ORCH_STATE",
                r#"{"last_by_subj":"arbiter.v1.orch.o1.*"}"#,
            ),
            vec![W, A],
        ),
        (
            "wake on an Orchestrator's inputs (core subscription)",
            sub("arbiter.v1.session.s1.in.o1.*"),
            // A console following its log wakes on them too.
            vec![W, K],
        ),
        (
            "see Orchestrator output as it is published (core subscription)",
            sub("arbiter.v1.orch.o1.out"),
            vec![C],
        ),
        (
            "read any message of the sessions stream",
            req("$JS.API.STREAM.MSG.GET.ARBITER_SESSIONS", r#"{"seq":1}"#),
            vec![C, A],
        ),
        (
            "follow a session's log live (core subscription)",
            sub("arbiter.v1.session.s1.log"),
            vec![K],
        ),
        (
            "read another role's replies (its inbox)",
            sub("_INBOX_console.>"),
            vec![K],
        ),
        (
            "delete a stream",
            req("$JS.API.STREAM.DELETE.SCRATCH", ""),
            vec![A],
        ),
        (
            "purge the sessions stream",
            req(
                "$JS.API.STREAM.PURGE.ARBITER_SESSIONS",
                r#"{"keep":1000000}"#,
            ),
            // Archiving purges a session's live subjects (protocol.md, Retention).
            vec![C, A],
        ),
        (
            "create a stream of its own",
            req(
                "$JS.API.STREAM.CREATE.EVIL",
                r#"{"name":"EVIL","subjects":["evil.>"],"storage":"memory"}"#,
            ),
            vec![A],
        ),
        (
            "take summonses of its pool",
            req(
                "$JS.API.CONSUMER.MSG.NEXT.ARBITER_SUMMONS.pool-default",
                r#"{"batch":1,"expires":200000000}"#,
            ),
            vec![W, A],
        ),
        (
            "take summonses of another pool",
            req(
                "$JS.API.CONSUMER.MSG.NEXT.ARBITER_SUMMONS.pool-gpu",
                r#"{"batch":1,"expires":200000000}"#,
            ),
            vec![A],
        ),
        (
            "pull the coordinator's Orchestrator output",
            req(
                "$JS.API.CONSUMER.MSG.NEXT.ARBITER_ORCH_STATE.coordinator-orch-out",
                r#"{"batch":1,"expires":200000000}"#,
            ),
            vec![C, A],
        ),
    ]
}

/// Tries `op` on `conn`: allowed if the server does it, denied if it says
/// "Permissions Violation". Anything else is a broken test.
async fn attempt(conn: &Connection, op: &Op) -> Outcome {
    let seen = conn.alarms.denial_count();
    let denied = conn.alarms.denied_after(seen);
    let client = conn.client.clone();
    let run = async {
        match op {
            Op::Js(subject) => {
                let js = async_nats::jetstream::new(client);
                js.publish(subject.clone(), Bytes::from_static(b"{}"))
                    .await
                    .unwrap()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Op::Request(subject, body) => {
                // A reply of any kind on its own inbox: a pull answers with
                // the stream's message (its subject is the message's own, so
                // a plain request would not match it) or a status.
                let inbox = client.new_inbox();
                let mut replies = client.subscribe(inbox.clone()).await.unwrap();
                client
                    .publish_with_reply(subject.clone(), inbox, Bytes::from_static(body.as_bytes()))
                    .await
                    .unwrap();
                match tokio::time::timeout(Duration::from_secs(3), replies.next()).await {
                    Ok(Some(_)) => Ok(()),
                    _ => Err("no reply".to_owned()),
                }
            }
            Op::Subscribe(subject) => {
                let sub = client.subscribe(subject.clone()).await.unwrap();
                client.flush().await.unwrap();
                // A denied subscription "succeeds" locally; the server's
                // -ERR comes within a round trip or two.
                tokio::time::sleep(Duration::from_millis(300)).await;
                drop(sub);
                Ok(())
            }
        }
    };
    tokio::select! {
        text = denied => {
            assert!(text.to_lowercase().contains("permissions violation"), "{text}");
            Outcome::Denied
        }
        result = run => match result {
            Ok(()) => Outcome::Allowed,
            Err(e) => {
                // The denial may be on its way while the call failed.
                match tokio::time::timeout(Duration::from_secs(1), conn.alarms.denied_after(seen)).await {
                    Ok(_) => Outcome::Denied,
                    Err(_) => panic!("{:?} {op:?} failed without a denial: {e}", conn.user),
                }
            }
        },
    }
}

async fn connect(nats: &SecureNats, name: &str) -> Connection {
    arbiter_bus::connect_with(&nats.options(name), name, Reach::FailFast)
        .await
        .unwrap_or_else(|e| panic!("{name} cannot connect: {e}"))
}

/// What the user sees: nothing, as long as every process uses its own
/// credential. What an attacker holding a worker or console credential
/// sees: "Permissions Violation" for everything outside the role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_may_do_what_the_protocol_gives_it_and_nothing_else() {
    arbiter_tests::init_tracing();
    let nats = SecureNats::start().await;
    nats.issue(NatsRole::Worker, "w-default", &["default"]);
    // The admin step: streams, buckets, pool consumers, a scratch stream.
    let admin = connect(&nats, "admin").await;
    let bus = arbiter_bus::Bus::open(admin.clone(), NatsRole::Admin, Reach::FailFast)
        .await
        .unwrap();
    for pool in ["default", "gpu"] {
        arbiter_bus::setup::ensure_pool_consumer(&bus.js, pool)
            .await
            .unwrap();
    }
    let orch_stream = bus.js.get_stream("ARBITER_ORCH_STATE").await.unwrap();
    orch_stream
        .get_or_create_consumer(
            "coordinator-orch-out",
            async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("coordinator-orch-out".into()),
                filter_subject: "arbiter.v1.orch.*.out".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let mut failures = Vec::new();
    for (role, name) in [
        (A, "admin"),
        (C, "coordinator"),
        (W, "w-default"),
        (K, "console"),
    ] {
        let conn = connect(&nats, name).await;
        for (what, op, allowed) in matrix() {
            if matches!(&op, Op::Request(subject, _) if subject.ends_with("STREAM.DELETE.SCRATCH"))
            {
                bus.js
                    .get_or_create_stream(async_nats::jetstream::stream::Config {
                        name: "SCRATCH".into(),
                        subjects: vec!["scratch.>".into()],
                        ..Default::default()
                    })
                    .await
                    .unwrap();
            }
            let expected = if allowed.contains(&role) {
                Outcome::Allowed
            } else {
                Outcome::Denied
            };
            let got = attempt(&conn, &op).await;
            if got != expected {
                failures.push(format!("{role} {what}: expected {expected:?}, got {got:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What an anonymous client sees: "authorization violation", at once; and
/// a client that speaks plain NATS to the TLS port gets a TLS error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_connects_anonymously() {
    let nats = SecureNats::start().await;
    let bundle = nats.bundle("console");
    // TLS right, no credential.
    let anonymous = NatsOptions {
        tls_ca: Some(bundle.join("ca.pem")),
        tls_cert: Some(bundle.join("cert.pem")),
        tls_key: Some(bundle.join("key.pem")),
        ..NatsOptions::url(nats.url())
    };
    let started = std::time::Instant::now();
    let error = arbiter_bus::connect_with(&anonymous, "anonymous", Reach::Wait)
        .await
        .err()
        .expect("an anonymous client was let in");
    assert!(started.elapsed() < Duration::from_secs(5));
    let text = error.to_string();
    assert!(text.contains("refused an anonymous connection"), "{text}");
    assert!(
        text.to_lowercase().contains("authorization violation"),
        "{text}"
    );
}
