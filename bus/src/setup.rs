//! The streams, buckets and object stores, declared in one place. The admin
//! step (`arbiter-admin setup`) and the coordinator create what is missing;
//! workers and consoles only bind to what exists and, when something is
//! missing, say what to run. Every JetStream call made at start is raced
//! against the server's permission errors, so a credential that lacks a
//! permission is one clear line within a round trip, not a 5 s timeout.

use std::future::Future;
use std::time::{Duration, Instant};

use arbiter_protocol::roles::{self, NatsRole};
use arbiter_protocol::subjects;
use async_nats::jetstream::{self, kv, object_store, stream};

use crate::connect::{Connection, Reach};
use crate::{Alarms, Bus, BusError, DUPLICATE_WINDOW, RIDE_OUT, Result};

/// How long a service waits for a missing stream to be created (by the
/// coordinator or `arbiter-admin setup`) before it gives up.
const MISSING_WAIT: Duration = Duration::from_secs(60);
/// How long the server keeps the delete marker of a session lease that ran
/// out (a takeover is fenced on the marker's revision).
const LEASE_MARKER_TTL: Duration = Duration::from_secs(1);
/// How long the first check of a stream may take before it is called a timeout.
const CHECK_TIMEOUT: Duration = Duration::from_secs(4);

/// The configuration of every stream, as `docs/protocol.md` gives it.
pub fn stream_configs() -> Vec<stream::Config> {
    let stream = |name: &str, subjects: &[&str]| stream::Config {
        name: name.into(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        storage: stream::StorageType::File,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    };
    vec![
        // Workers read an Orchestrator's inputs (log entries on
        // `session.*.in.*.*`, protocol v3) by direct get of their subject.
        stream::Config {
            allow_direct: true,
            ..stream(
                subjects::SESSIONS_STREAM,
                &[subjects::ALL_SESSION_LOG, subjects::ALL_SESSION_IN],
            )
        },
        // After the session stream, which gives its human subjects up first
        // when an older version made it with them (see `declare_with`).
        human_stream_config(),
        // Workers read an Orchestrator's inputs and control by direct get.
        stream::Config {
            allow_direct: true,
            ..stream(
                subjects::ORCH_STREAM,
                &[subjects::ALL_ORCH_IN, subjects::ALL_ORCH_CTL],
            )
        },
        stream::Config {
            retention: stream::RetentionPolicy::WorkQueue,
            ..stream(subjects::SUMMONS_STREAM, &[subjects::ALL_SUMMONS])
        },
        stream(subjects::STATE_STREAM, &[subjects::ALL_SESSION_STATE]),
        // An Orchestrator's outputs beside its state records: a step that
        // outputs something is one message on `.out`, fenced over both. A
        // worker checks whose its last record is by direct get, between
        // lease renewals.
        stream::Config {
            allow_direct: true,
            ..stream(
                subjects::ORCH_STATE_STREAM,
                &[subjects::ALL_ORCH_STATE, subjects::ALL_ORCH_OUT],
            )
        },
    ]
}

/// How long a webhook event is kept, and so tried: a week.
pub const NOTIFY_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The webhook events' stream ([`subjects::NOTIFY_STREAM`]): limits
/// retention, a week of age (events are small and few: no byte limit, so
/// that no server's storage limit can refuse it).
/// Not in [`stream_configs`]: only a coordinator with hooks declares it
/// ([`declare_notify`]), so a deployment without hooks has none.
pub fn notify_stream_config() -> stream::Config {
    stream::Config {
        name: subjects::NOTIFY_STREAM.into(),
        subjects: vec![subjects::ALL_NOTIFICATIONS.to_owned()],
        storage: stream::StorageType::File,
        duplicate_window: DUPLICATE_WINDOW,
        max_age: NOTIFY_MAX_AGE,
        discard: stream::DiscardPolicy::Old,
        ..Default::default()
    }
}

/// Creates the webhook events' stream when it is missing (with `replicas`
/// copies, 1 when `None`), or gives an existing one this version's
/// subjects and age (its replicas too, when given).
pub async fn declare_notify(js: &jetstream::Context, replicas: Option<usize>) -> Result<()> {
    let want = notify_stream_config();
    let name = want.name.clone();
    match js.get_stream(&name).await {
        Ok(mut existing) => {
            let have = existing
                .info()
                .await
                .map_err(|e| crate::js_error(format!("reading stream {name}"), e))?
                .config
                .clone();
            let updated = stream::Config {
                subjects: want.subjects,
                max_age: want.max_age,
                num_replicas: replicas.unwrap_or(have.num_replicas),
                ..have.clone()
            };
            if updated != have {
                js.update_stream(updated)
                    .await
                    .map_err(|e| crate::js_error(format!("updating stream {name}"), e))?;
                tracing::info!(stream = %name, "stream given the settings this version uses");
            }
        }
        Err(e) if !is_not_found(&e) => {
            return Err(crate::js_error(format!("reading stream {name}"), e));
        }
        Err(_) => {
            js.create_stream(stream::Config {
                num_replicas: replicas.unwrap_or(1),
                ..want
            })
            .await
            .map_err(|e| crate::js_error(format!("creating stream {name}"), e))?;
            tracing::info!(stream = %name, "stream created");
        }
    }
    Ok(())
}

/// Lines one console may have in [`subjects::HUMAN_STREAM`] at once (sent,
/// not yet taken by a coordinator): past it, the server refuses its next
/// line ("maximum messages per subject exceeded", 10077) and keeps every
/// other console's. A coordinator takes a line within milliseconds, so only
/// a console sending faster than coordinators take, or while none runs,
/// meets it.
pub const HUMAN_PENDING_PER_CONSOLE: i64 = 64;
/// The largest human line [`subjects::HUMAN_STREAM`] stores, in bytes of
/// JSON: twice the longest text a coordinator takes (256 KiB), room for its
/// escapes. A larger one is refused by the server ("message size exceeds
/// maximum allowed", 10054). With [`HUMAN_PENDING_PER_CONSOLE`], one console
/// holds at most 32 MiB of the stream.
pub const HUMAN_MAX_MESSAGE_BYTES: i32 = 512 * 1024;

/// The human intake: a work-queue stream (a line leaves it once a
/// coordinator has stored the step that took it; the session's log keeps
/// the `human` entry), storing each console's lines under its name alone
/// (`human.<console>`, by a subject transform) and at most
/// [`HUMAN_PENDING_PER_CONSOLE`] of them (discard new per subject), each at
/// most [`HUMAN_MAX_MESSAGE_BYTES`]. The bare `session.<id>.human` of
/// consoles without a name is stored as it comes, so it is held per session.
pub fn human_stream_config() -> stream::Config {
    stream::Config {
        name: subjects::HUMAN_STREAM.into(),
        subjects: vec![
            subjects::ALL_SESSION_HUMAN.to_owned(),
            subjects::ALL_SESSION_HUMAN_FROM.to_owned(),
        ],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: DUPLICATE_WINDOW,
        subject_transform: Some(stream::SubjectTransform {
            source: subjects::ALL_SESSION_HUMAN_FROM.to_owned(),
            destination: subjects::HUMAN_INTAKE_DEST.to_owned(),
        }),
        max_messages_per_subject: HUMAN_PENDING_PER_CONSOLE,
        discard: stream::DiscardPolicy::New,
        discard_new_per_subject: true,
        max_message_size: HUMAN_MAX_MESSAGE_BYTES,
        ..Default::default()
    }
}

/// Creates every stream, the sessions and memory buckets and the object stores that are
/// missing, with one replica; existing ones keep theirs (see [`declare_with`]).
pub async fn declare(js: &jetstream::Context) -> Result<()> {
    declare_with(js, None).await
}

/// Creates every stream, the sessions bucket and the object stores that are
/// missing, with `replicas` copies (1 when `None`). An existing stream keeps
/// its settings, except that subjects this version needs are added to it,
/// subjects this version keeps in another stream are taken from it (an older
/// `ARBITER_ORCH` lists `orch.*.out`; the server refuses a subject in two
/// streams, so it leaves the old one first), and, when `replicas` is given,
/// its replicas are changed to that number.
pub async fn declare_with(js: &jetstream::Context, replicas: Option<usize>) -> Result<()> {
    let copies = replicas.unwrap_or(1);
    let configs = stream_configs();
    let owner_of = |subject: &str| {
        configs
            .iter()
            .find(|c| c.subjects.iter().any(|s| s == subject))
            .map(|c| c.name.clone())
    };
    for config in configs.clone() {
        let config = stream::Config {
            num_replicas: copies,
            ..config
        };
        let name = config.name.clone();
        match js.get_stream(&name).await {
            Ok(mut existing) => {
                let have = existing
                    .info()
                    .await
                    .map_err(|e| crate::js_error(format!("reading stream {name}"), e))?
                    .config
                    .clone();
                let missing: Vec<String> = config
                    .subjects
                    .iter()
                    .filter(|s| !have.subjects.contains(s))
                    .cloned()
                    .collect();
                let moved: Vec<String> = have
                    .subjects
                    .iter()
                    .filter(|s| owner_of(s).is_some_and(|owner| owner != name))
                    .cloned()
                    .collect();
                let direct = config.allow_direct && !have.allow_direct;
                if !missing.is_empty() || !moved.is_empty() || direct {
                    let mut updated = have.clone();
                    updated.subjects.retain(|s| !moved.contains(s));
                    updated.subjects.extend(missing.iter().cloned());
                    updated.allow_direct |= config.allow_direct;
                    js.update_stream(updated)
                        .await
                        .map_err(|e| crate::js_error(format!("updating stream {name}"), e))?;
                    tracing::info!(stream = %name, subjects = ?missing, ?moved, direct, "stream given the subjects and settings this version uses");
                }
            }
            Err(e) if !is_not_found(&e) => {
                return Err(crate::js_error(format!("reading stream {name}"), e));
            }
            Err(_) => {
                js.create_stream(config)
                    .await
                    .map_err(|e| crate::js_error(format!("creating stream {name}"), e))?;
                tracing::info!(stream = %name, "stream created");
            }
        }
    }
    if js.get_key_value(subjects::SESSIONS_BUCKET).await.is_err() {
        js.create_key_value(kv::Config {
            bucket: subjects::SESSIONS_BUCKET.into(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: copies,
            ..Default::default()
        })
        .await
        .map_err(|e| crate::js_error("creating the sessions bucket", e))?;
    }
    if js
        .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
        .await
        .is_err()
    {
        js.create_key_value(kv::Config {
            bucket: subjects::COORDINATOR_LEASES_BUCKET.into(),
            history: 1,
            storage: stream::StorageType::File,
            // Per-key TTLs (`Nats-TTL`) and a delete marker when one runs out,
            // which the coordinators watch for.
            limit_markers: Some(LEASE_MARKER_TTL),
            // On a cluster a lease bucket on one node would end every
            // coordinator's liveness with that node.
            num_replicas: copies,
            ..Default::default()
        })
        .await
        .map_err(|e| crate::js_error("creating the coordinator leases bucket", e))?;
    }
    if js.get_key_value(subjects::MEMORY_BUCKET).await.is_err() {
        js.create_key_value(kv::Config {
            bucket: subjects::MEMORY_BUCKET.into(),
            // One revision per key: an entry forgotten is gone.
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: copies,
            ..Default::default()
        })
        .await
        .map_err(|e| crate::js_error("creating the memory bucket", e))?;
    }
    for bucket in [
        subjects::SESSION_BLOBS_BUCKET,
        subjects::ORCH_BLOBS_BUCKET,
        subjects::ARCHIVE_BUCKET,
    ] {
        if js.get_object_store(bucket).await.is_err() {
            js.create_object_store(object_store::Config {
                bucket: bucket.into(),
                storage: stream::StorageType::File,
                num_replicas: copies,
                ..Default::default()
            })
            .await
            .map_err(|e| crate::js_error(format!("creating the object store {bucket}"), e))?;
        }
    }
    if let Some(replicas) = replicas {
        for name in store_streams() {
            set_replicas(js, &name, replicas).await?;
        }
    }
    Ok(())
}

/// The name of every JetStream stream Arbiter keeps: its streams and those
/// under the sessions bucket and the object stores.
pub fn store_streams() -> Vec<String> {
    let mut names: Vec<String> = stream_configs().into_iter().map(|c| c.name).collect();
    for bucket in [
        subjects::SESSIONS_BUCKET,
        subjects::COORDINATOR_LEASES_BUCKET,
        subjects::MEMORY_BUCKET,
    ] {
        names.push(format!("KV_{bucket}"));
    }
    for bucket in [
        subjects::SESSION_BLOBS_BUCKET,
        subjects::ORCH_BLOBS_BUCKET,
        subjects::ARCHIVE_BUCKET,
    ] {
        names.push(format!("OBJ_{bucket}"));
    }
    names
}

/// Changes the replicas of stream `name` to `replicas` if it has others
/// (NATS copies or drops the data in the background; the stream stays
/// usable meanwhile).
async fn set_replicas(js: &jetstream::Context, name: &str, replicas: usize) -> Result<()> {
    let mut stream = js
        .get_stream(name)
        .await
        .map_err(|e| crate::js_error(format!("reading stream {name}"), e))?;
    let have = stream
        .info()
        .await
        .map_err(|e| crate::js_error(format!("reading stream {name}"), e))?
        .config
        .clone();
    if have.num_replicas == replicas {
        return Ok(());
    }
    let from = have.num_replicas;
    js.update_stream(stream::Config {
        num_replicas: replicas,
        ..have
    })
    .await
    .map_err(|e| crate::js_error(format!("changing the replicas of stream {name}"), e))?;
    tracing::info!(stream = %name, from, to = replicas, "stream replicas changed");
    Ok(())
}

/// Runs `op`, unless the server denies this connection something first:
/// then the denial is the error.
pub async fn guarded<T, E: From<BusError>>(
    alarms: &Alarms,
    role: NatsRole,
    op: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, E> {
    let seen = alarms.denial_count();
    tokio::select! {
        result = op => result,
        denied = alarms.denied_after(seen) => Err(BusError::Denied { role, denied }.into()),
    }
}

impl Bus {
    /// Opens the bus for a process of `role`: the admin and the coordinator
    /// declare what is missing; the others check that what they use exists
    /// and, under [`Reach::Wait`], wait for it a while, saying so.
    pub async fn open(conn: Connection, role: NatsRole, reach: Reach) -> Result<Self> {
        let js = jetstream::new(conn.client.clone());
        let alarms = conn.alarms.clone();
        if matches!(role, NatsRole::Admin | NatsRole::Coordinator) {
            riding_out("declaring the streams", || {
                guarded(&alarms, role, declare_with(&js, conn.replicas))
            })
            .await?;
        } else {
            let started = Instant::now();
            let mut told = false;
            loop {
                let missing =
                    riding_out("checking the streams", || first_missing(&js, &alarms, role))
                        .await?;
                match missing {
                    None => break,
                    Some(stream) if reach == Reach::Wait && started.elapsed() < MISSING_WAIT => {
                        if !told {
                            tracing::warn!(%stream, "stream missing: waiting for the coordinator (which creates it) or `arbiter-admin setup`");
                            told = true;
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Some(stream) => return Err(BusError::Missing { stream }),
                }
            }
        }
        let sessions_kv = riding_out("opening the sessions bucket", || {
            guarded(&alarms, role, async {
                js.get_key_value(subjects::SESSIONS_BUCKET)
                    .await
                    .map_err(|e| crate::js_error("opening the sessions bucket", e))
            })
        })
        .await?;
        Ok(Self {
            client: conn.client,
            js,
            sessions_kv,
            alarms,
            user: conn.user,
        })
    }
}

/// The first stream `role` uses that does not exist now: after errors, to
/// tell a passing failure from streams deleted under a running process.
/// During a NATS cluster's leader election no single answer is taken as
/// final: a stream counts as missing only once the answers have said so,
/// with none saying it exists, for [`RIDE_OUT`] (across calls: the caller
/// is never held up). Callers ask
/// after each failure, so a deleted stream is reported within about
/// `RIDE_OUT` of the failures starting.
pub async fn missing_stream(bus: &Bus, role: NatsRole) -> Result<Option<String>> {
    let Some(stream) = first_missing(&bus.js, &bus.alarms, role).await? else {
        bus.alarms.missing_since(None);
        return Ok(None);
    };
    let since = bus
        .alarms
        .missing_since(Some(&stream))
        .unwrap_or_else(Instant::now);
    if since.elapsed() >= RIDE_OUT {
        return Ok(Some(stream));
    }
    if since.elapsed() < Duration::from_millis(10) {
        tracing::warn!(%stream, within = ?RIDE_OUT, "the server says a stream is missing; it counts as deleted only if that holds");
    }
    Ok(None)
}

/// [`missing_stream`] for a caller that cannot ask again later (its
/// consumer has ended): asks until an answer says every stream exists, or
/// one has been reported missing for [`RIDE_OUT`].
pub async fn missing_stream_settled(bus: &Bus, role: NatsRole) -> Result<Option<String>> {
    let started = Instant::now();
    loop {
        match first_missing(&bus.js, &bus.alarms, role).await {
            Ok(None) => return Ok(None),
            Ok(Some(stream)) if started.elapsed() >= RIDE_OUT => return Ok(Some(stream)),
            Err(e) if started.elapsed() >= RIDE_OUT => return Err(e),
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Runs `op` again while it fails with a JetStream error (no answer, no
/// leader: the loss of a server of a cluster), for up to [`RIDE_OUT`]; a
/// refusal (a denied permission, a missing file) is returned at once.
pub async fn riding_out<T, F, Fut>(what: &str, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let started = Instant::now();
    let mut told = false;
    loop {
        match op().await {
            Err(e @ BusError::JetStream { .. })
                if started.elapsed() < RIDE_OUT && !says_not_found(&e.to_string()) =>
            {
                if !told {
                    tracing::warn!(error = %e, within = ?RIDE_OUT, "{what}: JetStream does not answer yet (a NATS leader election, a server lost?); trying again");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

/// The first stream `role` uses that does not exist. The streams are asked
/// about at once: while a cluster elects leaders each answer can take
/// seconds, and callers (the coordinator's intake) wait for this.
async fn first_missing(
    js: &jetstream::Context,
    alarms: &Alarms,
    role: NatsRole,
) -> Result<Option<String>> {
    let names = roles::streams_used(role);
    let checks = names.iter().map(|name| {
        let check = async move {
            match tokio::time::timeout(CHECK_TIMEOUT, js.get_stream(name)).await {
                Ok(Ok(_)) => Ok(false),
                Ok(Err(e)) if is_not_found(&e) => Ok(true),
                Ok(Err(e)) => Err(crate::js_error(format!("checking stream {name}"), e)),
                Err(_) => Err(crate::js_error(
                    format!("checking stream {name}"),
                    "no answer from JetStream (is it enabled on the server, for this account?)",
                )),
            }
        };
        guarded(alarms, role, check)
    });
    let answers = futures::future::join_all(checks).await;
    for (name, answer) in names.iter().zip(answers) {
        if answer? {
            return Ok(Some(name.clone()));
        }
    }
    Ok(None)
}

fn is_not_found(e: &jetstream::context::GetStreamError) -> bool {
    says_not_found(&e.to_string())
}

/// Whether an error's text is the server's "stream not found" (10059), which
/// only the meta leader says: an answer, not a passing failure. ("No
/// responders", which async-nats words "requested JetStream resource does not
/// exist", is the passing one.)
fn says_not_found(text: &str) -> bool {
    let text = text.to_lowercase();
    text.contains("not found") || text.contains("10059")
}

/// How long a lease lasts without renewal, by default: the pool consumer's
/// `ack_wait` (see docs/protocol.md, Orchestrator state and leases).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(6);
/// Summonses a pool may have out at once (each running Orchestrator holds one).
pub const POOL_MAX_ACK_PENDING: i64 = 100_000;

/// The shared summons consumer of `pool`, with `ack_wait` = the lease.
pub fn pool_consumer_config(pool: &str, lease: Duration) -> jetstream::consumer::pull::Config {
    jetstream::consumer::pull::Config {
        durable_name: Some(subjects::pool_consumer(pool)),
        filter_subject: subjects::summon(pool),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: lease,
        max_ack_pending: POOL_MAX_ACK_PENDING,
        ..Default::default()
    }
}

/// The emergency consumer of `pool` (`urgent-<pool>` on
/// `summon.<pool>.urgent`): as the pool's, on the other lane.
pub fn urgent_consumer_config(pool: &str, lease: Duration) -> jetstream::consumer::pull::Config {
    jetstream::consumer::pull::Config {
        durable_name: Some(subjects::urgent_consumer(pool)),
        filter_subject: subjects::summon_urgent(pool),
        ..pool_consumer_config(pool, lease)
    }
}

/// Makes `pool-<pool>` if it is missing (so that the queue's lag can be read,
/// for example by an autoscaler, before any worker of the pool has run).
pub async fn ensure_pool_consumer(js: &jetstream::Context, pool: &str) -> Result<()> {
    ensure_summons_consumer(js, pool_consumer_config(pool, DEFAULT_LEASE)).await
}

/// Makes `urgent-<pool>` if it is missing (`arbiter-admin setup` does, with
/// `pool-<pool>`): a worker's create of its own summons consumers is then an
/// update of its lease, which the server never lets turn a pull consumer
/// into a push one (docs/security.md, "No consumer that writes where its
/// role may not").
pub async fn ensure_urgent_consumer(js: &jetstream::Context, pool: &str) -> Result<()> {
    ensure_summons_consumer(js, urgent_consumer_config(pool, DEFAULT_LEASE)).await
}

async fn ensure_summons_consumer(
    js: &jetstream::Context,
    config: jetstream::consumer::pull::Config,
) -> Result<()> {
    let stream = js
        .get_stream(subjects::SUMMONS_STREAM)
        .await
        .map_err(|e| crate::js_error("opening the summons stream", e))?;
    let name = config.durable_name.clone().unwrap_or_default();
    if stream
        .get_consumer::<jetstream::consumer::pull::Config>(&name)
        .await
        .is_err()
    {
        stream
            .get_or_create_consumer(&name, config)
            .await
            .map_err(|e| crate::js_error(format!("creating the consumer {name}"), e))?;
    }
    Ok(())
}
