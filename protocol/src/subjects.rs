//! Every NATS subject, stream, bucket and consumer name of the protocol.
//! Code outside `arbiter-protocol` takes them from here rather than spell
//! one (`scripts/check-architecture` lists the few places that still do).

/// Prefix of every subject; the `v1` moves only on a breaking change.
pub const PREFIX: &str = "arbiter.v1";
/// The pool a summons goes to, and a worker serves, when none is named.
pub const DEFAULT_POOL: &str = "default";

/// JetStream stream of conversation logs (limits retention). Streams made
/// before [`HUMAN_STREAM`] held the human lines too.
pub const SESSIONS_STREAM: &str = "ARBITER_SESSIONS";
/// JetStream work-queue stream of human lines on their way to a coordinator:
/// an inbox, stored under each console's name ([`human_intake`]) with a cap
/// per console, so that no console can fill a stream other sessions need.
pub const HUMAN_STREAM: &str = "ARBITER_HUMAN";
/// JetStream work-queue stream of summons; one durable pull consumer per pool.
pub const SUMMONS_STREAM: &str = "ARBITER_SUMMONS";
/// JetStream stream of Orchestrator inputs and control messages.
pub const ORCH_STREAM: &str = "ARBITER_ORCH";
/// JetStream stream of coordinator session state records (limits retention).
pub const STATE_STREAM: &str = "ARBITER_STATE";
/// JetStream stream of Orchestrator state records and outputs, written by the
/// worker that holds each Orchestrator's lease (limits retention, file
/// storage). A step that outputs something is stored once, on `.out`: the
/// record is the output (see [`orch_records`]).
pub const ORCH_STATE_STREAM: &str = "ARBITER_ORCH_STATE";
/// Object store bucket for Orchestrator state records too large for one message.
pub const ORCH_BLOBS_BUCKET: &str = "arbiter_orch_blobs";
/// KV bucket: the latest [`crate::SessionStatus`] of every session, by session id.
pub const SESSIONS_BUCKET: &str = "arbiter_sessions";
/// Object store bucket of archived sessions: one compressed object per
/// session (its log, its step records, its Orchestrators' last records).
pub const ARCHIVE_BUCKET: &str = "arbiter_archive";
/// The name, in [`ARCHIVE_BUCKET`], of one session's archive.
pub fn session_archive(session_id: &str) -> String {
    format!("{session_id}.jsonl.gz")
}
/// KV bucket (per-key TTL, delete markers kept 1 s): which coordinators are
/// up (`coordinator.<id>`, value: how many sessions it runs, with a TTL), and
/// which coordinator owns which session (`session.<session_id>`, value: the
/// coordinator's id, no TTL, written only when the owner changes).
pub const COORDINATOR_LEASES_BUCKET: &str = "arbiter_coordinator_leases";
/// KV bucket: each workspace's memory, one [`crate::MemoryEntry`] per key
/// `<workspace>.<entry id>` (see [`memory_key`]).
pub const MEMORY_BUCKET: &str = "arbiter_memory";

/// The key of one memory entry in [`MEMORY_BUCKET`].
pub fn memory_key(workspace: &str, entry_id: &str) -> String {
    format!("{workspace}.{entry_id}")
}
/// The subject a put of memory entry `key` is published on (a KV put is a
/// JetStream publish on it).
pub fn memory_put(key: &str) -> String {
    kv_subject(MEMORY_BUCKET, key)
}
/// The subject under which KV bucket `bucket` stores `key`: where a put is
/// published when it needs headers the KV API does not take (a fence on the
/// key's last revision, a TTL).
pub fn kv_subject(bucket: &str, key: &str) -> String {
    format!("$KV.{bucket}.{key}")
}

/// Where a direct get of `stream` is asked for with the request in its
/// payload (a batch, `next_by_subj`, a wildcard): any message of the stream.
pub fn direct_get(stream: &str) -> String {
    format!("$JS.API.DIRECT.GET.{stream}")
}
/// The stream that holds object store `bucket`.
pub fn object_stream(bucket: &str) -> String {
    format!("OBJ_{bucket}")
}
/// The chunks of one version (`nuid`) of an object of store `bucket`.
pub fn object_chunks(bucket: &str, nuid: &str) -> String {
    format!("$O.{bucket}.C.{nuid}")
}

/// The key of a session's owner in [`COORDINATOR_LEASES_BUCKET`].
pub fn session_lease_key(session_id: &str) -> String {
    format!("session.{session_id}")
}
/// The key of a coordinator's presence in [`COORDINATOR_LEASES_BUCKET`].
pub fn coordinator_presence_key(coordinator_id: &str) -> String {
    format!("coordinator.{coordinator_id}")
}
/// Every key of [`COORDINATOR_LEASES_BUCKET`], for the coordinators' watch of it.
pub const ALL_COORDINATOR_LEASE_KEYS: &str = ">";
/// Core NATS request subject on which a coordinator takes messages of the
/// sessions it owns that another coordinator pulled.
pub fn coordinator_forward(coordinator_id: &str) -> String {
    format!("{PREFIX}.coordinator.{coordinator_id}.forward")
}
pub const ALL_COORDINATOR_FORWARD: &str = "arbiter.v1.coordinator.*.forward";

/// The NATS micro service every worker registers as (presence).
pub const WORKER_SERVICE: &str = "arbiter-worker";
/// The request every worker's presence service answers, with its pool,
/// runtime and lanes in the reply's metadata: who is up.
pub fn worker_service_ping() -> String {
    format!("$SRV.PING.{WORKER_SERVICE}")
}
/// Every worker's stats (its presence endpoint's data: slots, Orchestrators).
pub fn worker_service_stats() -> String {
    format!("$SRV.STATS.{WORKER_SERVICE}")
}
/// The name of the endpoint of [`WORKER_SERVICE`] on which a worker answers
/// with its live slots.
pub const WORKER_PRESENCE_ENDPOINT: &str = "presence";
/// The subject of one worker's [`WORKER_PRESENCE_ENDPOINT`]. The worker id is
/// reduced to one subject token: at most 64 characters, each one not
/// alphanumeric, `-` or `_` (`.`, `*`, `>`, a space) becoming `_`.
pub fn worker_presence(worker_id: &str) -> String {
    let token: String = worker_id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let token = if token.is_empty() { "_" } else { &token };
    format!("{PREFIX}.worker.{token}.{WORKER_PRESENCE_ENDPOINT}")
}
/// What a worker's presence says it speaks (its `protocol` metadata): the
/// subjects' version and the payloads' [`crate::VERSION`].
pub fn presence_protocol() -> String {
    format!("{PREFIX} v{}", crate::VERSION)
}

/// Durable consumer through which the coordinator reads human messages.
pub const COORDINATOR_HUMAN_CONSUMER: &str = "coordinator-human";
/// Durable consumer through which the coordinator reads Orchestrator output.
pub const COORDINATOR_ORCH_CONSUMER: &str = "coordinator-orch-out";

pub fn summon(pool: &str) -> String {
    format!("{PREFIX}.summon.{pool}")
}
/// Where an emergency summons of `pool` goes: a lane of its own that the
/// pool's workers serve before `summon.<pool>`.
pub fn summon_urgent(pool: &str) -> String {
    format!("{PREFIX}.summon.{pool}.urgent")
}
pub const ALL_SUMMONS: &str = "arbiter.v1.summon.>";

/// The durable consumer that all workers of a pool share.
pub fn pool_consumer(pool: &str) -> String {
    format!("pool-{pool}")
}
/// The durable consumer of `pool`'s emergency lane (`summon.<pool>.urgent`).
/// Its prefix is not `pool-`, so no pool's name can make it.
pub fn urgent_consumer(pool: &str) -> String {
    format!("urgent-{pool}")
}

pub fn orch_in(orch_id: &str) -> String {
    format!("{PREFIX}.orch.{orch_id}.in")
}
pub fn orch_out(orch_id: &str) -> String {
    format!("{PREFIX}.orch.{orch_id}.out")
}
pub fn orch_status(orch_id: &str) -> String {
    format!("{PREFIX}.orch.{orch_id}.status")
}
pub fn orch_ctl(orch_id: &str) -> String {
    format!("{PREFIX}.orch.{orch_id}.ctl")
}
/// The durable consumer through which a worker reads one Orchestrator's input and control.
pub fn orch_consumer(orch_id: &str) -> String {
    format!("orch-{orch_id}")
}
/// An Orchestrator's state records: one per step, fenced by the previous one's sequence.
pub fn orch_state(orch_id: &str) -> String {
    format!("{PREFIX}.orch.{orch_id}.state")
}
/// The `Nats-Msg-Id` of an output `arbiter-worker` publishes bare (beside a
/// pointer record): the writer's lease ends it, as it ends its records' ids.
pub fn orch_out_msg_id(orch_id: &str, seq: u64, lease: &str) -> String {
    format!("{orch_id}:out:{seq}:{lease}")
}
/// The `Nats-Msg-Id` of a step record with `rev`, of the writer `id`
/// holding `lease` (a session's or an Orchestrator's step log).
pub fn step_msg_id(id: &str, rev: u64, lease: &str) -> String {
    format!("{id}:state:{rev}:{lease}")
}
/// The `Nats-Msg-Id` of a session's log entry `seq`: publishing it again is
/// a no-op on the server.
pub fn log_entry_msg_id(session_id: &str, seq: u64) -> String {
    format!("{session_id}:log:{seq}")
}
/// The `Nats-Msg-Id` of input `seq` to an Orchestrator on `orch.<id>.in`.
pub fn orch_in_msg_id(orch_id: &str, seq: u64) -> String {
    format!("{orch_id}:in:{seq}")
}
/// The `Nats-Msg-Id` of a control (`release`, `cancel`) to an Orchestrator.
pub fn orch_ctl_msg_id(orch_id: &str, action: &str) -> String {
    format!("{orch_id}:ctl:{action}")
}
/// The `Nats-Msg-Id` of a memory put a session decided (`key`: [`memory_key`]).
pub fn memory_msg_id(session_id: &str, key: &str) -> String {
    format!("{session_id}:memory:{key}")
}
/// JetStream stream of webhook events (limits retention, a week): every
/// event a session decided, stored before any delivery, each hook's
/// delivery reading it through a durable of its own.
pub const NOTIFY_STREAM: &str = "ARBITER_NOTIFY";
/// Where a session's webhook events are stored ([`NOTIFY_STREAM`]); the
/// message id is the event's id.
pub fn notification(session_id: &str) -> String {
    format!("{PREFIX}.notify.{session_id}")
}
/// Every session's webhook events.
pub const ALL_NOTIFICATIONS: &str = "arbiter.v1.notify.*";
/// The durable of one webhook's delivery on [`NOTIFY_STREAM`].
pub fn hook_consumer(hook: &str) -> String {
    format!("hook-{hook}")
}
/// Every record of one Orchestrator in [`ORCH_STATE_STREAM`] (its `.state`
/// and its `.out`): what a worker replays and fences its writes on.
pub fn orch_records(orch_id: &str) -> String {
    format!("{PREFIX}.orch.{orch_id}.*")
}
/// The name, in [`ORCH_BLOBS_BUCKET`], of the transcript part of one large state record.
pub fn orch_blob(orch_id: &str, rev: u64, lease: &str) -> String {
    format!("{orch_id}.{rev}.{lease}")
}
/// Session state records too large for one message.
pub const SESSION_BLOBS_BUCKET: &str = "arbiter_session_blobs";
/// The name, in [`SESSION_BLOBS_BUCKET`], of one large session state record
/// (`lease`: the writing coordinator's token, so two never write one name).
pub fn session_blob(session_id: &str, rev: u64, lease: &str) -> String {
    format!("{session_id}.{rev}.{lease}")
}
pub const ALL_ORCH_STATE: &str = "arbiter.v1.orch.*.state";
pub const ALL_ORCH_IN: &str = "arbiter.v1.orch.*.in";
pub const ALL_ORCH_OUT: &str = "arbiter.v1.orch.*.out";
pub const ALL_ORCH_CTL: &str = "arbiter.v1.orch.*.ctl";
pub const ALL_ORCH_STATUS: &str = "arbiter.v1.orch.*.status";

/// The bare form of the human's subject, without a console identity. Still
/// taken; its messages count as [`ANONYMOUS_CONSOLE`]'s. Consoles publish on
/// [`session_human_from`].
pub fn session_human(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.human")
}
/// The human's subject as console `console` publishes it: the last token is
/// the console's identity (the NATS user name of its credential), which the
/// server can hold it to with permissions, and which the coordinator's
/// per-console limits count against.
pub fn session_human_from(session_id: &str, console: &str) -> String {
    format!("{PREFIX}.session.{session_id}.human.{console}")
}
/// The identity the bare [`session_human`] form counts as.
pub const ANONYMOUS_CONSOLE: &str = "-";
/// The session id and console identity of a human message's subject, in
/// either form (the bare form gives [`ANONYMOUS_CONSOLE`]).
pub fn human_of(subject: &str) -> Option<(&str, &str)> {
    if let Some(session) = id_of(subject, "session", "human") {
        return Some((session, ANONYMOUS_CONSOLE));
    }
    let (rest, console) = subject.rsplit_once('.')?;
    let session = id_of(rest, "session", "human")?;
    is_valid_token(console).then_some((session, console))
}
/// Where [`HUMAN_STREAM`] stores the lines console `console` sends to any
/// session ([`session_human_from`]): under its name alone, so that the
/// stream's per-subject cap counts a console's lines whatever sessions they
/// name (the session is in the payload). The stream's subject transform
/// ([`HUMAN_INTAKE_DEST`]) moves them here.
pub fn human_intake(console: &str) -> String {
    format!("{PREFIX}.human.{console}")
}
/// Every console's stored lines ([`human_intake`]).
pub const ALL_HUMAN_INTAKE: &str = "arbiter.v1.human.*";
/// The destination of [`HUMAN_STREAM`]'s subject transform, whose source
/// is [`ALL_SESSION_HUMAN_FROM`]: a line published on
/// `session.<id>.human.<console>` is stored on `human.<console>`.
pub const HUMAN_INTAKE_DEST: &str = "arbiter.v1.human.{{wildcard(2)}}";
/// Who sent a human line, and to which session when its subject says so:
/// a line stored under its console ([`human_intake`]) names its session in
/// its payload only; the older forms ([`session_human_from`], and the bare
/// [`session_human`] as [`ANONYMOUS_CONSOLE`]) name it in the subject too.
pub fn human_sender(subject: &str) -> Option<(Option<&str>, &str)> {
    if let Some((session, console)) = human_of(subject) {
        return Some((Some(session), console));
    }
    let console = subject.strip_prefix(PREFIX)?.strip_prefix(".human.")?;
    is_valid_token(console).then_some((None, console))
}
pub fn session_log(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.log")
}
/// Input `n` (1, 2, 3…) of Orchestrator `orch_id` (protocol v3): a log entry
/// of the session (an `arbiter_to_orchestrator` entry that carries the
/// input) on a subject of its own, so that the worker reads exactly it by
/// direct get and nothing else of the session.
pub fn session_input(session_id: &str, orch_id: &str, n: u64) -> String {
    format!("{PREFIX}.session.{session_id}.in.{orch_id}.{n}")
}
/// Every input of one Orchestrator: what its worker subscribes to, to wake.
pub fn session_inputs_of(session_id: &str, orch_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.in.{orch_id}.*")
}
/// Every input of a session.
pub fn session_inputs(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.in.>")
}
/// What a session's log is, read in full: its entries on `.log` and the
/// ones that carry inputs on `.in.<orch_id>.<n>` (one ordered read of both).
pub fn session_log_filters(session_id: &str) -> Vec<String> {
    vec![session_log(session_id), session_inputs(session_id)]
}
/// The wildcard a coordinator fences its writes to a session's log on (its
/// `.log` and its inputs; the human's lines a session stream made before
/// [`HUMAN_STREAM`] holds fall under it too and are stepped over, see
/// `steplog::Writer::fenced_over`).
pub fn session_fence(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.>")
}
/// The Orchestrator and input number of an input subject ([`session_input`]).
pub fn input_of(subject: &str) -> Option<(&str, &str, u64)> {
    let rest = subject.strip_prefix(PREFIX)?.strip_prefix(".session.")?;
    let mut tokens = rest.split('.');
    let (session, kind, orch, n) = (
        tokens.next()?,
        tokens.next()?,
        tokens.next()?,
        tokens.next()?,
    );
    if kind != "in" || tokens.next().is_some() || !is_valid_token(session) || !is_valid_token(orch)
    {
        return None;
    }
    Some((session, orch, n.parse().ok()?))
}
pub fn session_status(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.status")
}
/// Every session's status (`arbiter-web` follows them all for its charts).
pub const ALL_SESSION_STATUS: &str = "arbiter.v1.session.*.status";
/// The coordinator's own durable record of a session (not read by anyone else).
pub fn session_state(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.state")
}
pub const ALL_SESSION_STATE: &str = "arbiter.v1.session.*.state";
pub fn session_delta(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.delta")
}
/// Core NATS request: is a console following the session? Each console
/// that follows it answers (an empty body); no answer: nobody watches.
pub fn session_watchers(session_id: &str) -> String {
    format!("{PREFIX}.session.{session_id}.watchers")
}
pub const ALL_SESSION_HUMAN: &str = "arbiter.v1.session.*.human";
pub const ALL_SESSION_LOG: &str = "arbiter.v1.session.*.log";
/// Every session's inputs ([`session_input`]).
pub const ALL_SESSION_IN: &str = "arbiter.v1.session.*.in.*.*";
/// Human lines sent under a console's name ([`session_human_from`]).
pub const ALL_SESSION_HUMAN_FROM: &str = "arbiter.v1.session.*.human.*";

/// Ids and pool names become subject tokens, so they must be one token:
/// ASCII letters, digits, `-` and `_`, 1 to 64 characters.
pub fn is_valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The id token of a `arbiter.v1.<kind>.<id>.<leaf>` subject, if it has that shape.
pub fn id_of<'a>(subject: &'a str, kind: &str, leaf: &str) -> Option<&'a str> {
    let rest = subject.strip_prefix(PREFIX)?.strip_prefix('.')?;
    let rest = rest.strip_prefix(kind)?.strip_prefix('.')?;
    let id = rest.strip_suffix(leaf)?.strip_suffix('.')?;
    is_valid_token(id).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_round_trip() {
        assert_eq!(session_human("s1"), "arbiter.v1.session.s1.human");
        assert_eq!(id_of(&session_human("s1"), "session", "human"), Some("s1"));
        assert_eq!(id_of(&orch_out("o-9"), "orch", "out"), Some("o-9"));
        assert_eq!(id_of("arbiter.v1.orch.a.b.out", "orch", "out"), None);
        assert_eq!(id_of(&orch_out("o-9"), "orch", "in"), None);
        assert_eq!(summon("gpu"), "arbiter.v1.summon.gpu");
        assert_eq!(orch_state("o-9"), "arbiter.v1.orch.o-9.state");
        assert_eq!(orch_records("o-9"), "arbiter.v1.orch.o-9.*");
        assert_eq!(id_of(&orch_state("o-9"), "orch", "state"), Some("o-9"));
    }

    #[test]
    fn human_subjects_carry_the_console() {
        assert_eq!(
            session_human_from("s1", "alice"),
            "arbiter.v1.session.s1.human.alice"
        );
        assert_eq!(
            human_of(&session_human_from("s1", "alice")),
            Some(("s1", "alice"))
        );
        assert_eq!(human_of(&session_human("s1")), Some(("s1", "-")));
        assert_eq!(human_of("arbiter.v1.session.s1.human.a.b"), None);
        assert_eq!(human_of("arbiter.v1.session.s1.log"), None);
        assert_eq!(human_of("arbiter.v1.session.s1.human."), None);
        assert_eq!(human_intake("alice"), "arbiter.v1.human.alice");
        assert_eq!(human_sender(&human_intake("alice")), Some((None, "alice")));
        assert_eq!(
            human_sender(&session_human_from("s1", "alice")),
            Some((Some("s1"), "alice"))
        );
        assert_eq!(
            human_sender(&session_human("s1")),
            Some((Some("s1"), ANONYMOUS_CONSOLE))
        );
        assert_eq!(human_sender("arbiter.v1.human.a.b"), None);
        assert_eq!(human_sender("arbiter.v1.human."), None);
        assert_eq!(human_sender("arbiter.v1.session.s1.log"), None);
    }

    #[test]
    fn tokens() {
        assert!(is_valid_token("0193a-b_C"));
        for bad in ["", "a.b", "a*", ">", "a b", &"x".repeat(65)] {
            assert!(!is_valid_token(bad), "{bad:?}");
        }
    }

    #[test]
    fn presence_is_one_token_per_worker() {
        assert_eq!(worker_presence("w-1"), "arbiter.v1.worker.w-1.presence");
        assert_eq!(
            worker_presence("host.example.com:2"),
            "arbiter.v1.worker.host_example_com_2.presence"
        );
        assert_eq!(worker_presence(""), "arbiter.v1.worker._.presence");
        assert_eq!(worker_service_ping(), "$SRV.PING.arbiter-worker");
        assert_eq!(
            presence_protocol(),
            format!("arbiter.v1 v{}", crate::VERSION)
        );
        assert_eq!(kv_subject("b", "k.1"), "$KV.b.k.1");
        assert_eq!(memory_put("w.e1"), "$KV.arbiter_memory.w.e1");
    }
}
