//! The roles a process connects to NATS as, and what each may publish and
//! subscribe to: least privilege, derived operation by operation from the
//! subject table of `docs/protocol.md`. `arbiter-admin` signs these lists
//! into each credential; the server enforces them. The table in
//! `docs/protocol.md` ("Roles and permissions") is rendered from [`grants`]
//! and checked by a test, so the two cannot drift.
//!
//! Wildcards are whole tokens (`*`, `>`), and a deny wins over an allow.
//! Replies come to the connection's own inbox prefix (`_INBOX_<name>`), so
//! no role can read another's request replies, pulled messages or acks.

use serde::{Deserialize, Serialize};

use crate::subjects::{self, PREFIX};

/// What a process is to the NATS server. Each has one credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NatsRole {
    /// Creates streams, consumers and buckets; issues and revokes nothing on
    /// the wire (that is `arbiter-admin` on files), may cancel Orchestrators.
    Admin,
    /// Runs Arbiter sessions and routes their intents.
    Coordinator,
    /// Runs Orchestrators of its pools.
    Worker,
    /// A human's terminal.
    Console,
    /// `arbiter-web`: reads what a console reads and writes what a console
    /// writes (human lines under its own name), and sees the worker fleet.
    Web,
}

impl NatsRole {
    pub const ALL: [NatsRole; 5] = [
        NatsRole::Admin,
        NatsRole::Coordinator,
        NatsRole::Worker,
        NatsRole::Console,
        NatsRole::Web,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NatsRole::Admin => "admin",
            NatsRole::Coordinator => "coordinator",
            NatsRole::Worker => "worker",
            NatsRole::Console => "console",
            NatsRole::Web => "web",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for NatsRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The inbox prefix of a connection named `name`: request replies, pulled
/// messages and PubAcks come there, and only that user may subscribe to it.
pub fn inbox_prefix(name: &str) -> String {
    format!("_INBOX_{name}")
}

/// Builder methods that append subjects to one list of a [`Grant`].
macro_rules! fs_builder {
    ($field:ident) => {
        fn $field<I, S>(mut self, subjects: I) -> Self
        where
            I: IntoIterator<Item = S>,
            S: Into<String>,
        {
            self.$field.extend(subjects.into_iter().map(Into::into));
            self
        }
    };
}

/// One operation of a role, with the subjects it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What the role does with these subjects, in the words of the protocol.
    pub operation: &'static str,
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// Subjects the allows above would match but the role must not touch
    /// (none since no role but the coordinator and the admin may make a
    /// consumer on a stream whose durables another role owns).
    pub deny_publish: Vec<String>,
}

impl Grant {
    fn new(operation: &'static str) -> Self {
        Self {
            operation,
            publish: Vec::new(),
            subscribe: Vec::new(),
            deny_publish: Vec::new(),
        }
    }
    fs_builder!(publish);
    fs_builder!(subscribe);
}

/// A role's whole permission set, as the server config or JWT carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    pub publish_allow: Vec<String>,
    pub publish_deny: Vec<String>,
    pub subscribe_allow: Vec<String>,
    pub subscribe_deny: Vec<String>,
    /// May answer requests made to it (the worker's presence service).
    pub allow_responses: bool,
}

/// Whose credential: the role, the user name (a subject token; it names the
/// inbox, and a console's name is its identity on human messages), and for a
/// worker the pools it serves.
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    pub role: NatsRole,
    pub name: &'a str,
    pub pools: &'a [String],
    /// A console's sessions: the only ones it may speak in (human lines,
    /// approval answers, `/stop`…); none: every session.
    pub sessions: &'a [String],
}

const API: &str = "$JS.API";

fn api(path: &str) -> String {
    format!("{API}.{path}")
}

/// `$JS.API.STREAM.INFO.<stream>` for each stream.
fn stream_info<'a>(streams: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    streams
        .into_iter()
        .map(|s| api(&format!("STREAM.INFO.{s}")))
        .collect()
}

/// `STREAM.MSG.GET` of a stream: reads any message of it by sequence or
/// last-by-subject (it cannot be narrowed to a subject).
fn msg_get(stream: &str) -> String {
    api(&format!("STREAM.MSG.GET.{stream}"))
}

/// A durable pull consumer the role owns: create (also the filtered form,
/// which the server checks against the config), info, pull, ack.
fn durable(stream: &str, name: &str, filter: Option<&str>) -> Vec<String> {
    let mut out = vec![
        api(&format!("CONSUMER.CREATE.{stream}.{name}")),
        api(&format!("CONSUMER.INFO.{stream}.{name}")),
        api(&format!("CONSUMER.MSG.NEXT.{stream}.{name}")),
        format!("$JS.ACK.{stream}.{name}.>"),
    ];
    if let Some(filter) = filter {
        out.push(api(&format!("CONSUMER.CREATE.{stream}.{name}.{filter}")));
    }
    out
}

/// A durable pull consumer the role binds to and may make, or update (its
/// ack wait), only on the create subject that names its filter, which the
/// server checks against the config: info, pull, ack. The only consumer
/// create the worker has (docs/security.md, "No consumer that writes where
/// its role may not").
fn bound_durable(stream: &str, name: &str, filter: &str) -> Vec<String> {
    vec![
        api(&format!("CONSUMER.CREATE.{stream}.{name}.{filter}")),
        api(&format!("CONSUMER.INFO.{stream}.{name}")),
        api(&format!("CONSUMER.MSG.NEXT.{stream}.{name}")),
        format!("$JS.ACK.{stream}.{name}.>"),
    ]
}

/// What an ordered consumer on `stream` needs: its first create is unnamed
/// (the filter only in the payload), a recreate deletes the old one and
/// creates `<name>_<n>` with the filter in the subject.
fn ordered(stream: &str) -> Vec<String> {
    vec![
        api(&format!("CONSUMER.CREATE.{stream}")),
        api(&format!("CONSUMER.CREATE.{stream}.>")),
        api(&format!("CONSUMER.DELETE.{stream}.*")),
        api(&format!("CONSUMER.INFO.{stream}.*")),
        api(&format!("CONSUMER.MSG.NEXT.{stream}.*")),
    ]
}

fn kv_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

fn obj_stream(bucket: &str) -> String {
    format!("OBJ_{bucket}")
}

/// Putting and getting objects of one object store: chunks and metadata on
/// `$O.<bucket>.>`, the metadata lookup by direct get, the read by direct
/// gets of its chunks or through an ordered push consumer with flow
/// control, and the purge of an overwritten object's old chunks.
fn object_store(bucket: &str) -> Vec<String> {
    let stream = obj_stream(bucket);
    let mut out = object_store_direct(bucket);
    out.extend([
        api(&format!("CONSUMER.CREATE.{stream}")),
        api(&format!("CONSUMER.CREATE.{stream}.>")),
        format!("$JS.FC.{stream}.>"),
    ]);
    out
}

/// [`object_store`] with no consumer: an object is read by direct gets of
/// its metadata and its chunks.
fn object_store_direct(bucket: &str) -> Vec<String> {
    let stream = obj_stream(bucket);
    vec![
        format!("$O.{bucket}.>"),
        api(&format!("DIRECT.GET.{stream}")),
        api(&format!("DIRECT.GET.{stream}.>")),
        msg_get(&stream),
        api(&format!("STREAM.PURGE.{stream}")),
    ]
}

/// Reading, writing and removing entries of the memory bucket: puts and
/// purges on `$KV.<bucket>.>`, gets by direct get, the key listing through
/// an ordered push consumer with flow control.
fn memory_bucket() -> Vec<String> {
    let stream = kv_stream(subjects::MEMORY_BUCKET);
    vec![
        format!("$KV.{}.>", subjects::MEMORY_BUCKET),
        api(&format!("DIRECT.GET.{stream}.>")),
        api(&format!("CONSUMER.CREATE.{stream}")),
        api(&format!("CONSUMER.CREATE.{stream}.>")),
        format!("$JS.FC.{stream}.>"),
    ]
}

/// Every stream and bucket the system declares, by the names JetStream gives them.
pub fn all_streams() -> Vec<String> {
    vec![
        subjects::SESSIONS_STREAM.to_owned(),
        subjects::HUMAN_STREAM.to_owned(),
        subjects::ORCH_STREAM.to_owned(),
        subjects::SUMMONS_STREAM.to_owned(),
        subjects::STATE_STREAM.to_owned(),
        subjects::ORCH_STATE_STREAM.to_owned(),
        kv_stream(subjects::SESSIONS_BUCKET),
        kv_stream(subjects::COORDINATOR_LEASES_BUCKET),
        kv_stream(subjects::MEMORY_BUCKET),
        obj_stream(subjects::SESSION_BLOBS_BUCKET),
        obj_stream(subjects::ORCH_BLOBS_BUCKET),
        obj_stream(subjects::ARCHIVE_BUCKET),
    ]
}

/// The streams (and bucket streams) a role works with and must find at
/// start. The admin and the coordinator declare them all.
pub fn streams_used(role: NatsRole) -> Vec<String> {
    match role {
        NatsRole::Admin | NatsRole::Coordinator => all_streams(),
        NatsRole::Worker => vec![
            subjects::SESSIONS_STREAM.to_owned(),
            subjects::ORCH_STREAM.to_owned(),
            subjects::SUMMONS_STREAM.to_owned(),
            subjects::ORCH_STATE_STREAM.to_owned(),
            obj_stream(subjects::ORCH_BLOBS_BUCKET),
            kv_stream(subjects::SESSIONS_BUCKET),
        ],
        NatsRole::Console | NatsRole::Web => vec![
            subjects::SESSIONS_STREAM.to_owned(),
            kv_stream(subjects::SESSIONS_BUCKET),
        ],
    }
}

/// The operations of a role, each with its subjects. [`permissions`]
/// flattens them; `docs/protocol.md` shows them as a table.
pub fn grants(who: Identity<'_>) -> Vec<Grant> {
    let inbox = format!("{}.>", inbox_prefix(who.name));
    let own_inbox =
        Grant::new("replies to its requests, pulled messages, PubAcks").subscribe([inbox]);
    match who.role {
        NatsRole::Admin => vec![
            own_inbox,
            Grant::new(
                "create, inspect, update and delete streams, consumers, buckets and object stores",
            )
            .publish([
                api(">"),
                "$JS.ACK.>".into(),
                "$JS.FC.>".into(),
                "$KV.>".into(),
                "$O.>".into(),
            ]),
            Grant::new("see the worker fleet (`nats micro`, each worker's presence endpoint)")
                .publish(["$SRV.>".to_owned(), format!("{PREFIX}.worker.*.presence")]),
            Grant::new("cancel an Orchestrator (`orch.<id>.ctl`)")
                .publish([format!("{PREFIX}.orch.*.ctl")]),
        ],
        NatsRole::Coordinator => {
            let sessions = subjects::SESSIONS_STREAM;
            let orch = subjects::ORCH_STREAM;
            let summons = subjects::SUMMONS_STREAM;
            let state = subjects::STATE_STREAM;
            let orch_state = subjects::ORCH_STATE_STREAM;
            let kv = kv_stream(subjects::SESSIONS_BUCKET);
            let leases = kv_stream(subjects::COORDINATOR_LEASES_BUCKET);
            let notify = subjects::NOTIFY_STREAM;
            let streams = all_streams();
            vec![
                own_inbox,
                Grant::new("declare the streams, the buckets and the object stores (create if missing, update its own settings)")
                    .publish([api("INFO")])
                    .publish(stream_info(streams.iter().map(String::as_str)))
                    .publish(streams.iter().map(|s| api(&format!("STREAM.CREATE.{s}"))))
                    .publish(streams.iter().map(|s| api(&format!("STREAM.UPDATE.{s}")))),
                Grant::new("write the conversation log (its inputs included) and its own step records (JetStream)")
                    .publish([
                        subjects::ALL_SESSION_LOG,
                        subjects::ALL_SESSION_IN,
                        subjects::ALL_SESSION_STATE,
                    ]),
                Grant::new("session status and the Arbiter's streamed words, and whether a console follows a session (core NATS)")
                    .publish([
                        format!("{PREFIX}.session.*.status"),
                        format!("{PREFIX}.session.*.delta"),
                        format!("{PREFIX}.session.*.watchers"),
                    ]),
                Grant::new("summon Orchestrators to any pool")
                    .publish([format!("{PREFIX}.summon.*")]),
                Grant::new("speak to, release and cancel Orchestrators")
                    .publish([subjects::ALL_ORCH_IN, subjects::ALL_ORCH_CTL]),
                Grant::new("read human messages through its durable `coordinator-human` on the human intake, and drain the one an older version made on the session stream")
                    .publish(durable(
                        subjects::HUMAN_STREAM,
                        subjects::COORDINATOR_HUMAN_CONSUMER,
                        None,
                    ))
                    .publish(durable(sessions, subjects::COORDINATOR_HUMAN_CONSUMER, None)),
                Grant::new("read Orchestrator output (bare, or the state record that is it) through its durable `coordinator-orch-out` on the Orchestrator state stream")
                    .publish(durable(
                        orch_state,
                        subjects::COORDINATOR_ORCH_CONSUMER,
                        Some(subjects::ALL_ORCH_OUT),
                    )),
                Grant::new("see Orchestrator output as it is published, to start the Arbiter's model call early (core; the output is taken only from the stored copy)")
                    .subscribe([subjects::ALL_ORCH_OUT]),
                Grant::new("make each pool's shared summons consumer `pool-<pool>` before any worker runs (scale from zero)")
                    .publish([
                        api(&format!("CONSUMER.CREATE.{summons}.*.{PREFIX}.summon.*")),
                        api(&format!("CONSUMER.INFO.{summons}.*")),
                    ]),
                Grant::new("restore sessions: last log and input seqs, last step record, replay of its records, whether a summoned Orchestrator was taken (its first state record)")
                    .publish([
                        msg_get(sessions),
                        msg_get(orch),
                        msg_get(state),
                        msg_get(subjects::ORCH_STATE_STREAM),
                    ])
                    .publish(ordered(state)),
                Grant::new("session state records too large for one message")
                    .publish(object_store(subjects::SESSION_BLOBS_BUCKET)),
                Grant::new("the sessions bucket: write each session's status")
                    .publish([
                        format!("$KV.{}.*", subjects::SESSIONS_BUCKET),
                        api(&format!("DIRECT.GET.{kv}.>")),
                    ]),
                Grant::new("workspace memory: read a workspace's entries for a new session's first prompt, write new ones")
                    .publish(memory_bucket()),
                Grant::new("ask whether a worker of a pool is up")
                    .publish([format!("$SRV.PING.{}", subjects::WORKER_SERVICE)]),
                Grant::new("archive idle sessions: list the sessions bucket, read a session's log and its Orchestrators' records, write the archive, purge the live subjects")
                    .publish(ordered(sessions))
                    .publish(ordered(orch_state))
                    .publish([
                        api(&format!("CONSUMER.CREATE.{kv}")),
                        format!("$JS.FC.{kv}.>"),
                    ])
                    .publish([msg_get(orch_state)])
                    .publish(
                        [sessions, orch, state, orch_state]
                            .map(|s| api(&format!("STREAM.PURGE.{s}"))),
                    )
                    .publish(object_store(subjects::ORCH_BLOBS_BUCKET))
                    .publish(object_store(subjects::ARCHIVE_BUCKET)),
                Grant::new("session leases: take and hand over a session, say it is up (renewed), watch who owns what and who is gone")
                    .publish([
                        format!("$KV.{}.>", subjects::COORDINATOR_LEASES_BUCKET),
                        api(&format!("DIRECT.GET.{leases}.>")),
                        msg_get(&leases),
                        format!("$JS.FC.{leases}.>"),
                    ])
                    .publish(ordered(&leases)),
                Grant::new("pass a message of a session another coordinator owns to it, and take those passed to it (core request; it answers on the asker's inbox)")
                    .publish([subjects::ALL_COORDINATOR_FORWARD])
                    .subscribe([subjects::ALL_COORDINATOR_FORWARD]),
                Grant::new("webhooks (only when hooks are configured): declare the notification stream, store each session's events on it, deliver them through each hook's durable `hook-<name>`")
                    .publish([
                        api(&format!("STREAM.INFO.{notify}")),
                        api(&format!("STREAM.CREATE.{notify}")),
                        api(&format!("STREAM.UPDATE.{notify}")),
                        subjects::ALL_NOTIFICATIONS.to_owned(),
                    ])
                    .publish(["CREATE", "INFO", "MSG.NEXT"].map(|op| api(&format!("CONSUMER.{op}.{notify}.*"))))
                    .publish([format!("$JS.ACK.{notify}.*.>")]),
            ]
        }
        NatsRole::Worker => {
            let orch = subjects::ORCH_STREAM;
            let summons = subjects::SUMMONS_STREAM;
            let orch_state = subjects::ORCH_STATE_STREAM;
            let mut pool_subjects = Vec::new();
            let mut urgent_subjects = Vec::new();
            for pool in who.pools {
                let name = subjects::pool_consumer(pool);
                let filter = subjects::summon(pool);
                pool_subjects.extend(bound_durable(summons, &name, &filter));
                let name = subjects::urgent_consumer(pool);
                let filter = subjects::summon_urgent(pool);
                pool_subjects.extend(bound_durable(summons, &name, &filter));
                urgent_subjects.push(filter);
            }
            vec![
                own_inbox,
                Grant::new("check that the streams it uses exist")
                    .publish(stream_info([
                        orch,
                        summons,
                        orch_state,
                        &obj_stream(subjects::ORCH_BLOBS_BUCKET),
                        &kv_stream(subjects::SESSIONS_BUCKET),
                    ])),
                Grant::new("take summonses of its own pools through `pool-<pool>`, emergencies first through `urgent-<pool>` (bind; make it, or update its ack wait to the lease, only on the subject that names its filter; fetch, renew, ack), woken by a core subscription on the emergency lane")
                    .publish(pool_subjects)
                    .publish([msg_get(summons)])
                    .subscribe(urgent_subjects),
                Grant::new("publish its Orchestrators' turns, state records (JetStream) and status (core NATS)")
                    .publish([
                        subjects::ALL_ORCH_OUT,
                        subjects::ALL_ORCH_STATE,
                        subjects::ALL_ORCH_STATUS,
                    ]),
                Grant::new("read each Orchestrator's inputs (protocol v3: log entries on `session.<id>.in.<orch_id>.<n>`, one direct get of exactly that subject, which reaches no other message of the session) and its control, woken by core subscriptions")
                    .publish(stream_info([subjects::SESSIONS_STREAM]))
                    .publish([api(&format!(
                        "DIRECT.GET.{}.{}",
                        subjects::SESSIONS_STREAM,
                        subjects::ALL_SESSION_IN
                    ))])
                    .subscribe([subjects::ALL_SESSION_IN]),
                Grant::new("read control, and inputs as protocol v2 workers do, from `ARBITER_ORCH` by direct get, woken by core subscriptions on the two subjects")
                    .publish([
                        api(&format!("DIRECT.GET.{orch}")),
                        api(&format!("DIRECT.GET.{orch}.>")),
                    ])
                    .subscribe([subjects::ALL_ORCH_IN, subjects::ALL_ORCH_CTL]),
                Grant::new("claim and replay Orchestrator state records and outputs (fenced writes, last record, replay by direct gets), and check between lease renewals whose the last record is (a direct get)")
                    .publish([msg_get(orch_state), api(&format!("DIRECT.GET.{orch_state}"))]),
                Grant::new("Orchestrator state records too large for one message (read by direct gets)")
                    .publish(object_store_direct(subjects::ORCH_BLOBS_BUCKET)),
                Grant::new("answer presence: the `arbiter-worker` micro service (replies go to the asker's inbox)")
                    .subscribe([
                        "$SRV.PING".to_owned(),
                        "$SRV.INFO".to_owned(),
                        "$SRV.STATS".to_owned(),
                        format!("$SRV.*.{}", subjects::WORKER_SERVICE),
                        format!("$SRV.*.{}.*", subjects::WORKER_SERVICE),
                        format!("{PREFIX}.worker.*.presence"),
                    ]),
            ]
        }
        NatsRole::Web => {
            let mut grants = console_reads_and_writes(who);
            grants.push(
                Grant::new("see the worker fleet: ping the `arbiter-worker` service (each worker's pool, runtime and lanes) and ask its stats (each worker's slots); replies to its own inbox")
                    .publish([
                        subjects::worker_service_ping(),
                        subjects::worker_service_stats(),
                    ]),
            );
            grants
        }
        NatsRole::Console => {
            let mut grants = console_reads_and_writes(who);
            grants.extend([
                Grant::new("`arbiter-console memory` (list, show, forget): list a workspace's memory entries (the subjects the bucket's stream holds), read them, remove one")
                    .publish(stream_info([kv_stream(subjects::MEMORY_BUCKET).as_str()]))
                    .publish({
                        let stream = kv_stream(subjects::MEMORY_BUCKET);
                        [
                            format!("$KV.{}.>", subjects::MEMORY_BUCKET),
                            api(&format!("DIRECT.GET.{stream}.>")),
                        ]
                    }),
                Grant::new("read an archived session's log (one object of the archive bucket, by direct gets of its metadata and chunks)")
                    .publish({
                        let archive = obj_stream(subjects::ARCHIVE_BUCKET);
                        [
                            api(&format!("STREAM.INFO.{archive}")),
                            api(&format!("DIRECT.GET.{archive}")),
                            api(&format!("DIRECT.GET.{archive}.>")),
                        ]
                    }),
            ]);
            grants
        }
    }
}

/// What a console and `arbiter-web` both do: follow sessions and speak in
/// them as the human.
fn console_reads_and_writes(who: Identity<'_>) -> Vec<Grant> {
    let sessions = subjects::SESSIONS_STREAM;
    let kv = kv_stream(subjects::SESSIONS_BUCKET);
    vec![
        Grant::new("replies to its requests, pulled messages, PubAcks")
            .subscribe([format!("{}.>", inbox_prefix(who.name))]),
        Grant::new("check that the streams it uses exist")
            .publish(stream_info([sessions, kv.as_str()])),
        Grant::new("send the human's lines (approval answers and commands among them), under its own name; a credential issued for some sessions (`--session`) only in those")
            .publish(if who.sessions.is_empty() {
                vec![subjects::session_human_from("*", who.name)]
            } else {
                who.sessions
                    .iter()
                    .map(|s| subjects::session_human_from(s, who.name))
                    .collect()
            }),
        Grant::new("replay and follow a session's log (its entries on `session.<id>.log` and its inputs on `session.<id>.in.>`) by batched direct gets, woken by core subscriptions on those subjects")
            .publish([api(&format!("DIRECT.GET.{sessions}"))])
            .subscribe([
                subjects::ALL_SESSION_LOG.to_owned(),
                format!("{PREFIX}.session.*.in.>"),
            ]),
        Grant::new("say it follows a session: answer the coordinator's `session.<id>.watchers` (core request)")
            .subscribe([format!("{PREFIX}.session.*.watchers")]),
        Grant::new("read session status: the bucket (one key by direct get; for `sessions`, its keys from the subjects its stream holds) and the live subjects")
            .publish([api(&format!("DIRECT.GET.{kv}.>"))])
            .subscribe([
                format!("{PREFIX}.session.*.status"),
                format!("{PREFIX}.session.*.delta"),
                subjects::ALL_ORCH_STATUS.to_owned(),
            ]),
    ]
}

/// A role's whole permission set: the union of its [`grants`].
pub fn permissions(who: Identity<'_>) -> Permissions {
    let mut out = Permissions {
        allow_responses: matches!(
            who.role,
            NatsRole::Worker | NatsRole::Coordinator | NatsRole::Console | NatsRole::Web
        ),
        ..Permissions::default()
    };
    for grant in grants(who) {
        push_unique(&mut out.publish_allow, grant.publish);
        push_unique(&mut out.subscribe_allow, grant.subscribe);
        push_unique(&mut out.publish_deny, grant.deny_publish);
    }
    out
}

fn push_unique(into: &mut Vec<String>, subjects: Vec<String>) {
    for s in subjects {
        if !into.contains(&s) {
            into.push(s);
        }
    }
}

/// The "Roles and permissions" table of `docs/protocol.md`, for a console
/// named `<name>` and a worker of pool `<pool>`.
pub fn render_table() -> String {
    let pools = ["<pool>".to_owned()];
    let mut out =
        String::from("| role | operation | publish | subscribe |\n| --- | --- | --- | --- |\n");
    for role in NatsRole::ALL {
        let who = Identity {
            role,
            name: if matches!(role, NatsRole::Console | NatsRole::Web | NatsRole::Worker) {
                "<name>"
            } else {
                role.as_str()
            },
            pools: &pools,
            sessions: &[],
        };
        for grant in grants(who) {
            let code = |list: &[String]| {
                list.iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join("<br>")
            };
            let mut publish = code(&grant.publish);
            if !grant.deny_publish.is_empty() {
                publish.push_str("<br>**deny** ");
                publish.push_str(&code(&grant.deny_publish));
            }
            out.push_str(&format!(
                "| {role} | {} | {publish} | {} |\n",
                grant.operation,
                code(&grant.subscribe),
            ));
        }
        if role == NatsRole::Coordinator {
            out.push_str(
                "| coordinator | answer a forwarded message (to the asker's inbox) | `allow_responses: true` | |\n",
            );
        }
        if role == NatsRole::Worker {
            out.push_str("| worker | answer requests made to it | `allow_responses: true` | |\n");
        }
        if role == NatsRole::Console || role == NatsRole::Web {
            out.push_str(&format!(
                "| {role} | answer the coordinator's question whether it follows a session (to the asker's inbox) | `allow_responses: true` | |\n",
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(role: NatsRole) -> Permissions {
        permissions(Identity {
            role,
            name: "n1",
            pools: &["default".to_owned()],
            sessions: &[],
        })
    }

    #[test]
    fn a_console_issued_for_some_sessions_speaks_in_those_only() {
        let sessions = ["s-1".to_owned(), "s-2".to_owned()];
        let scoped = permissions(Identity {
            role: NatsRole::Console,
            name: "alice",
            pools: &[],
            sessions: &sessions,
        });
        let human = |s: &str| subjects::session_human_from(s, "alice");
        assert!(allows(&scoped.publish_allow, &human("s-1")));
        assert!(allows(&scoped.publish_allow, &human("s-2")));
        assert!(!allows(&scoped.publish_allow, &human("s-3")));
        assert!(!allows(
            &scoped.publish_allow,
            &subjects::session_human_from("s-1", "bob")
        ));
        let every = permissions(Identity {
            role: NatsRole::Console,
            name: "alice",
            pools: &[],
            sessions: &[],
        });
        assert!(allows(&every.publish_allow, &human("s-3")));
    }

    fn allows(list: &[String], subject: &str) -> bool {
        list.iter().any(|p| matches(p, subject))
    }

    /// NATS subject matching: `*` one token, `>` one or more at the end.
    fn matches(pattern: &str, subject: &str) -> bool {
        let mut p = pattern.split('.');
        let mut s = subject.split('.');
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    fn may_publish(p: &Permissions, subject: &str) -> bool {
        allows(&p.publish_allow, subject) && !allows(&p.publish_deny, subject)
    }

    #[test]
    fn a_worker_cannot_forge_what_others_say_or_touch_streams() {
        let w = perms(NatsRole::Worker);
        for denied in [
            "arbiter.v1.summon.default",
            "arbiter.v1.session.s1.human",
            "arbiter.v1.session.s1.human.alice",
            "arbiter.v1.session.s1.log",
            "arbiter.v1.orch.o1.in",
            "arbiter.v1.orch.o1.ctl",
            "$KV.arbiter_sessions.s1",
            "$JS.API.STREAM.DELETE.ARBITER_SESSIONS",
            "$JS.API.STREAM.CREATE.ARBITER_ORCH",
            "$JS.API.CONSUMER.CREATE.ARBITER_SESSIONS",
            "$JS.API.STREAM.MSG.GET.ARBITER_SESSIONS",
            "$JS.API.CONSUMER.MSG.NEXT.ARBITER_ORCH.coordinator-orch-out",
            "$JS.API.CONSUMER.DELETE.ARBITER_ORCH.coordinator-orch-out",
            "$JS.API.CONSUMER.MSG.NEXT.ARBITER_ORCH_STATE.coordinator-orch-out",
            "$JS.API.CONSUMER.DELETE.ARBITER_ORCH_STATE.coordinator-orch-out",
            "$JS.ACK.ARBITER_ORCH_STATE.coordinator-orch-out.1.2.3.4.5.6",
            "$JS.API.CONSUMER.MSG.NEXT.ARBITER_SUMMONS.pool-gpu",
            "$JS.API.CONSUMER.CREATE.ARBITER_ORCH.orch-o1",
        ] {
            assert!(!may_publish(&w, denied), "worker may publish {denied}");
        }
        for allowed in [
            "arbiter.v1.orch.o1.out",
            "arbiter.v1.orch.o1.state",
            "arbiter.v1.orch.o1.status",
            "$JS.API.CONSUMER.MSG.NEXT.ARBITER_SUMMONS.pool-default",
            "$JS.API.CONSUMER.CREATE.ARBITER_SUMMONS.pool-default.arbiter.v1.summon.default",
            "$JS.ACK.ARBITER_SUMMONS.pool-default.1.2.3.4.5.6",
        ] {
            assert!(may_publish(&w, allowed), "worker may not publish {allowed}");
        }
        assert!(!allows(&w.subscribe_allow, "_INBOX_console.x"));
        assert!(!allows(&w.subscribe_allow, "arbiter.v1.session.s1.log"));
        assert!(allows(&w.subscribe_allow, "_INBOX_n1.abc"));
    }

    #[test]
    fn a_console_speaks_only_as_itself() {
        let c = perms(NatsRole::Console);
        assert!(may_publish(&c, "arbiter.v1.session.s1.human.n1"));
        for denied in [
            "arbiter.v1.session.s1.human",
            "arbiter.v1.session.s1.human.other",
            "arbiter.v1.summon.default",
            "arbiter.v1.orch.o1.out",
            "arbiter.v1.session.s1.log",
            "$JS.API.CONSUMER.MSG.NEXT.ARBITER_SESSIONS.coordinator-human",
            "$JS.API.CONSUMER.CREATE.ARBITER_SESSIONS.x.arbiter.v1.session.*.human",
            "$JS.API.STREAM.DELETE.ARBITER_ORCH",
            // The human intake is the coordinator's alone: no other reader,
            // no way around its cap per console.
            "arbiter.v1.human.n1",
            "$JS.API.CONSUMER.CREATE.ARBITER_HUMAN",
            "$JS.API.CONSUMER.MSG.NEXT.ARBITER_HUMAN.coordinator-human",
            "$JS.API.STREAM.UPDATE.ARBITER_HUMAN",
        ] {
            assert!(!may_publish(&c, denied), "console may publish {denied}");
        }
        assert!(!may_publish(
            &c,
            "$JS.API.CONSUMER.CREATE.ARBITER_SESSIONS.console-1.arbiter.v1.session.s1.log"
        ));
    }

    /// A consumer create carries its delivery subject in the payload, which
    /// permissions never see: a role that may make a consumer may make one
    /// that delivers onto any subject, and a stream that captures it stores
    /// what it delivers. So the console makes none (it reads by direct get),
    /// and the worker only its own two summons durables, on the subject
    /// that names their filter: on the summons stream, whose own subjects
    /// the server refuses as a delivery subject (docs/security.md, "No
    /// consumer that writes where its role may not").
    #[test]
    fn no_console_or_worker_consumer_can_deliver_where_the_role_may_not_publish() {
        let creates = |p: &Permissions| -> Vec<String> {
            p.publish_allow
                .iter()
                .filter(|s| s.starts_with("$JS.API.CONSUMER.") && s.contains("CREATE"))
                .cloned()
                .collect()
        };
        assert_eq!(creates(&perms(NatsRole::Console)), Vec::<String>::new());
        assert!(
            !perms(NatsRole::Console)
                .publish_allow
                .iter()
                .any(|s| s.starts_with("$JS.FC.")),
            "a console needs no flow control: it has no push consumer"
        );
        assert_eq!(
            creates(&perms(NatsRole::Worker)),
            [
                "$JS.API.CONSUMER.CREATE.ARBITER_SUMMONS.pool-default.arbiter.v1.summon.default",
                "$JS.API.CONSUMER.CREATE.ARBITER_SUMMONS.urgent-default.arbiter.v1.summon.default.urgent",
            ]
        );
        for stream in all_streams() {
            for role in [NatsRole::Console, NatsRole::Worker] {
                let p = perms(role);
                for create in [
                    format!("$JS.API.CONSUMER.CREATE.{stream}"),
                    format!("$JS.API.CONSUMER.CREATE.{stream}.x"),
                    format!("$JS.API.CONSUMER.CREATE.{stream}.x.arbiter.v1.summon.default"),
                    format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.x"),
                ] {
                    assert!(!may_publish(&p, &create), "{role} may publish {create}");
                }
            }
        }
    }

    #[test]
    fn nobody_but_the_admin_deletes_and_only_the_coordinator_purges_records() {
        for role in [NatsRole::Coordinator, NatsRole::Worker, NatsRole::Console] {
            let p = perms(role);
            for stream in all_streams() {
                let subject = format!("$JS.API.STREAM.DELETE.{stream}");
                assert!(!may_publish(&p, &subject), "{role} may delete {stream}");
                let subject = format!("$JS.API.STREAM.PURGE.{stream}");
                let own_blobs = match role {
                    NatsRole::Coordinator => stream.starts_with("OBJ_"),
                    NatsRole::Worker => stream == obj_stream(subjects::ORCH_BLOBS_BUCKET),
                    _ => false,
                };
                // Archiving purges a session's live subjects (docs/protocol.md,
                // Retention); the human intake holds no session's record.
                let archives = role == NatsRole::Coordinator
                    && stream.starts_with("ARBITER_")
                    && stream != subjects::HUMAN_STREAM;
                assert_eq!(
                    may_publish(&p, &subject),
                    own_blobs || (archives && stream != subjects::SUMMONS_STREAM),
                    "{role} purging {stream}"
                );
            }
        }
        assert!(may_publish(
            &perms(NatsRole::Admin),
            "$JS.API.STREAM.DELETE.ARBITER_SESSIONS"
        ));
    }

    #[test]
    fn matching_follows_nats() {
        assert!(matches("a.*.c", "a.b.c"));
        assert!(!matches("a.*.c", "a.b.d.c"));
        assert!(matches("a.>", "a.b.c"));
        assert!(!matches("a.>", "a"));
        assert!(!matches("a.b", "a.b.c"));
    }
}
