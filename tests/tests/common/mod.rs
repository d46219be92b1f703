//! The system under test: a real nats-server, the mock Anthropic server, and
//! a coordinator and worker running in-process against them.

mod cli;
mod log;
mod script;
mod store;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use {cli::*, log::*, script::*, store::*};

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arbiter_bus::{Bus, NatsOptions, Reach, TraceContext};
use arbiter_llm::{ApiKey, ModelConfig, Provider, RetryPolicy};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{HumanMessage, LogBody, LogEntry, SessionStatus, VERSION, subjects};
use arbiter_tests::{MockAnthropic, MockOpenAi, NatsServer, SecureNats, eventually};
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const ARBITER_MODEL: &str = "mock-arbiter";
pub const ORCH_MODEL: &str = "mock-orch";
/// The subagents' (`task` tool) model; its lanes are `mock-sub:<task prompt>`.
pub const SUB_MODEL: &str = "mock-sub";
pub const API_KEY: &str = "sk-ant-test-key-0123456789";
pub const WAIT: Duration = Duration::from_secs(20);
/// What an Orchestrator's first output says in a workspace that is not a
/// git repository (the tests' usual one).
pub const NO_GIT: &str =
    "no checkpoints: the workspace is not a git repository (`git init` in it to have them)";
/// The lease of worker processes in tests: short, so that takeovers take
/// seconds. `ARBITER_TEST_LEASE_SECS` overrides it (e.g. 6, the default of
/// the binary, to measure takeover times as deployed).
pub fn test_lease_secs() -> String {
    std::env::var("ARBITER_TEST_LEASE_SECS").unwrap_or_else(|_| "2".to_owned())
}

/// Runs `git <args>` in `dir` as a user named Test; its stdout. Panics
/// with git's answer when it fails.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Where a test process's stderr goes: `$ARBITER_TEST_LOGS/<name>.log`
/// (appended, so restarts add to it) when that is set, else nowhere.
pub fn process_log(name: &str) -> std::process::Stdio {
    let Some(dir) = std::env::var_os("ARBITER_TEST_LOGS") else {
        return std::process::Stdio::null();
    };
    let _ = std::fs::create_dir_all(&dir);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(PathBuf::from(dir).join(format!("{name}.log")))
        .map_or_else(|_| std::process::Stdio::null(), Into::into)
}

/// Connection options for credential `name`: its bundle in `admin` when the
/// system is secure, else the plain `url`.
fn bundle_options(admin: Option<&tempfile::TempDir>, url: &str, name: &str) -> NatsOptions {
    let Some(admin) = admin else {
        return NatsOptions::url(url);
    };
    let bundle = admin.path().join("creds").join(name);
    NatsOptions {
        creds: Some(bundle.join("nats.creds")),
        tls_ca: Some(bundle.join("ca.pem")),
        tls_cert: Some(bundle.join("cert.pem")),
        tls_key: Some(bundle.join("key.pem")),
        ..NatsOptions::url(url)
    }
}

/// What a [`LogWatch`] has received so far.
type Entries = Mutex<Vec<LogEntry>>;

/// A running system. Everything stops when it is dropped.
pub struct System {
    pub nats: NatsServer,
    /// The admin directory of a secure system ([`Options::secure`]).
    pub admin: Option<tempfile::TempDir>,
    /// A secure system's console connection, which [`System::send`] uses.
    console: Option<Bus>,
    pub mock: MockAnthropic,
    /// The OpenAI-compatible mock, used when [`Options::provider`] says so.
    pub openai: MockOpenAi,
    provider: Provider,
    runtime: arbiter_worker::Runtime,
    pub bus: Bus,
    pub workspaces: tempfile::TempDir,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// Live [`LogWatch`]es by session, so [`System::settled`] also waits
    /// until they have received what the status says is stored.
    watches: Mutex<Vec<(String, Weak<Entries>)>>,
}

pub struct Options {
    /// Run the coordinator in-process (false: the test runs the binary itself).
    pub coordinator: bool,
    pub slots: usize,
    pub workers: usize,
    pub orch_context_budget: u64,
    /// Which API every role talks to: the Anthropic mock or the OpenAI-compatible one.
    pub provider: Provider,
    /// A config file for the nats-server (e.g. `deploy/nats-server.conf`).
    pub nats_config: Option<PathBuf>,
    /// The secure deployment: a server from `arbiter-admin init`'s config
    /// (TLS verifying clients, JWT operator mode), every process on its own
    /// role's credential, the test's own sends as the `console` credential.
    pub secure: bool,
    /// The address the nats-server and the mock models listen on (default
    /// 127.0.0.1): a host address that a test's other network namespace reaches.
    pub bind: Option<std::net::IpAddr>,
    /// What runs the in-process workers' Orchestrators.
    pub runtime: arbiter_worker::Runtime,
    /// Where a secure system's admin directory is made (default: the
    /// system's temporary directory).
    pub admin_in: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            coordinator: true,
            slots: 4,
            workers: 1,
            orch_context_budget: 200_000,
            provider: Provider::Anthropic,
            nats_config: None,
            secure: false,
            bind: None,
            runtime: arbiter_worker::Runtime::Native,
            admin_in: None,
        }
    }
}

impl System {
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        arbiter_tests::init_tracing();
        let bind = options.bind.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
        let (nats, admin) = if options.secure {
            let parent = options.admin_in.clone().unwrap_or_else(std::env::temp_dir);
            let secure = SecureNats::start_in(&bind.to_string(), &[], &parent).await;
            (secure.server, Some(secure.admin))
        } else {
            let nats = match &options.nats_config {
                Some(config) => NatsServer::start_with_config(config).await,
                None => NatsServer::start().await,
            };
            (nats, None)
        };
        let mock = MockAnthropic::start_on(bind).await;
        mock.set_lane_fn(lane_of);
        let openai = MockOpenAi::start().await;
        openai.set_lane_fn(lane_of);
        let options_for = |name: &str| bundle_options(admin.as_ref(), nats.url(), name);
        // The test looks on as the admin; it speaks as the console.
        let admin_conn = arbiter_bus::connect_with(&options_for("admin"), "test", Reach::FailFast)
            .await
            .unwrap();
        let bus = Bus::open(admin_conn, NatsRole::Admin, Reach::FailFast)
            .await
            .unwrap();
        let console = match &admin {
            Some(_) => {
                let conn = arbiter_bus::connect_with(
                    &options_for("console"),
                    "test-console",
                    Reach::FailFast,
                )
                .await
                .unwrap();
                Some(
                    Bus::open(conn, NatsRole::Console, Reach::FailFast)
                        .await
                        .unwrap(),
                )
            }
            None => None,
        };
        let workspaces = tempfile::tempdir().unwrap();
        let mut system = Self {
            nats,
            admin,
            console,
            mock,
            openai,
            provider: options.provider,
            runtime: options.runtime,
            bus,
            workspaces,
            shutdown: CancellationToken::new(),
            tasks: Vec::new(),
            watches: Mutex::new(Vec::new()),
        };
        if options.coordinator {
            system.spawn_coordinator();
        }
        for i in 0..options.workers {
            system.spawn_worker(
                &format!("worker-{i}"),
                options.slots,
                options.orch_context_budget,
            );
        }
        system
    }

    /// Client settings for `model` on the mock of the configured provider.
    pub fn model_config(&self, model: &str) -> ModelConfig {
        let mut config = ModelConfig::new(self.provider, model);
        config.base_url = match self.provider {
            Provider::Anthropic => self.mock.base_url(),
            Provider::OpenAi => self.openai.base_url(),
        };
        config.api_key = Some(ApiKey::new(API_KEY));
        config.retry = RetryPolicy::none();
        config
    }

    /// The Orchestrators' model: on the configured provider's mock, except
    /// on the codex runtime, which speaks the Responses API (the OpenAI mock).
    pub fn orch_model_config(&self) -> ModelConfig {
        if self.runtime != arbiter_worker::Runtime::Codex {
            return self.model_config(ORCH_MODEL);
        }
        let mut config = ModelConfig::new(Provider::OpenAi, ORCH_MODEL);
        config.base_url = self.openai.base_url();
        config.api_key = Some(ApiKey::new(API_KEY));
        config.retry = RetryPolicy::none();
        config
    }

    /// How a process connects as credential `name` (`coordinator`,
    /// `worker`, …): its bundle on a secure system, the plain URL otherwise.
    pub fn nats_options(&self, name: &str) -> NatsOptions {
        bundle_options(self.admin.as_ref(), self.nats.url(), name)
    }

    /// The environment a binary connects with as credential `name`.
    pub fn nats_env(&self, name: &str) -> Vec<(&'static str, std::ffi::OsString)> {
        let o = self.nats_options(name);
        let mut env = vec![("NATS_URL", o.url.into())];
        for (key, path) in [
            ("NATS_CREDS", o.creds),
            ("NATS_CA", o.tls_ca),
            ("NATS_CERT", o.tls_cert),
            ("NATS_KEY", o.tls_key),
        ] {
            if let Some(path) = path {
                env.push((key, path.into_os_string()));
            }
        }
        env
    }

    pub fn coordinator_config(&self) -> arbiter_coordinator::Config {
        arbiter_coordinator::Config {
            nats: self.nats_options("coordinator"),
            model: self.model_config(ARBITER_MODEL),
            // Tests of the limits set their own.
            console_caps: arbiter_coordinator::ConsoleCaps::off(),
            ..Default::default()
        }
    }

    pub fn worker_config(&self, id: &str, slots: usize, budget: u64) -> arbiter_worker::Config {
        arbiter_worker::Config {
            nats: self.nats_options("worker"),
            max_orchestrators: slots,
            workspace_root: self.workspaces.path().to_owned(),
            model: self.orch_model_config(),
            context_budget: budget,
            subagent_model: Some(self.model_config(SUB_MODEL)),
            worker_id: id.to_owned(),
            runtime: self.runtime,
            claude_code: claude_code(),
            codex: codex(),
            ..Default::default()
        }
    }

    pub fn spawn_coordinator(&mut self) {
        let config = self.coordinator_config();
        self.spawn_coordinator_with(config);
    }

    /// Runs a coordinator with a config the test adjusted (see [`System::coordinator_config`]).
    pub fn spawn_coordinator_with(&mut self, config: arbiter_coordinator::Config) {
        let stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            arbiter_coordinator::run(config, stop.cancelled_owned())
                .await
                .expect("coordinator failed");
        }));
    }

    pub fn spawn_worker(&mut self, id: &str, slots: usize, budget: u64) {
        let config = self.worker_config(id, slots, budget);
        self.spawn_worker_with(config);
    }

    /// Runs a worker with a config the test adjusted (see [`System::worker_config`]).
    pub fn spawn_worker_with(&mut self, config: arbiter_worker::Config) {
        let stop = self.shutdown.clone();
        self.tasks.push(tokio::spawn(async move {
            arbiter_worker::run(config, stop.cancelled_owned())
                .await
                .expect("worker failed");
        }));
    }

    /// Runs the real coordinator binary against this system, as a process.
    pub fn coordinator_process(&self) -> tokio::process::Child {
        self.coordinator_process_with(&[])
    }

    /// [`System::coordinator_process`] with more environment variables.
    pub fn coordinator_process_with(
        &self,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> tokio::process::Child {
        tokio::process::Command::new(arbiter_tests::bin("arbiter-coordinator"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.nats_env("coordinator"))
            .env("ANTHROPIC_BASE_URL", self.mock.base_url())
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("ARBITER_MODEL", format!("anthropic:{ARBITER_MODEL}"))
            .env("ARBITER_MODEL_RETRIES", "0")
            .env("ARBITER_MAX_SESSIONS_PER_CONSOLE", "0")
            .env("ARBITER_CONSOLE_RATE", "off")
            .env("RUST_LOG", "info,async_nats=warn")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(process_log("coordinator"))
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    /// Runs the real worker binary against this system, as a process named
    /// `id` with `slots` slots and the short test lease ([`test_lease_secs`]).
    /// Its log goes to `$ARBITER_TEST_LOGS/<id>.log` when that is set.
    pub fn worker_process(&self, id: &str, slots: usize) -> tokio::process::Child {
        self.worker_process_with(id, slots, &[])
    }

    /// [`System::worker_process`] with more environment variables.
    pub fn worker_process_with(
        &self,
        id: &str,
        slots: usize,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> tokio::process::Child {
        self.worker_process_in(None, id, slots, env)
    }

    /// [`System::worker_process_with`], run inside network namespace
    /// `netns` when given (another host, as the network sees it).
    pub fn worker_process_in(
        &self,
        netns: Option<&str>,
        id: &str,
        slots: usize,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> tokio::process::Child {
        self.worker_command(netns, id, slots, env).spawn().unwrap()
    }

    /// The command [`System::worker_process_in`] runs, for a test to adjust.
    pub fn worker_command(
        &self,
        netns: Option<&str>,
        id: &str,
        slots: usize,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> tokio::process::Command {
        let bin = arbiter_tests::bin("arbiter-worker");
        let mut command = match netns {
            Some(ns) => {
                let mut c = tokio::process::Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => tokio::process::Command::new(bin),
        };
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.nats_env("worker"))
            .env("ANTHROPIC_BASE_URL", self.mock.base_url())
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("ORCHESTRATOR_MODEL", format!("anthropic:{ORCH_MODEL}"))
            .env("SUBAGENT_MODEL", format!("anthropic:{SUB_MODEL}"))
            .env("ORCHESTRATOR_MODEL_RETRIES", "0")
            .env("ARBITER_WORKER_ID", id)
            .env("ARBITER_MAX_ORCHESTRATORS", slots.to_string())
            .env("ARBITER_WORKSPACE_ROOT", self.workspaces.path())
            .env("ARBITER_LEASE_SECS", test_lease_secs())
            .env("RUST_LOG", "info,async_nats=warn")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(process_log(id))
            .kill_on_drop(true);
        command
    }

    /// Sends what the human typed, as a console named `console` does.
    pub async fn send_as(&self, console: &str, session: &str, text: &str) -> String {
        self.send_on(
            subjects::session_human_from(session, console),
            session,
            text,
        )
        .await
    }

    /// Sends what the human typed on the bare subject (no console identity);
    /// on a secure system, as the `console` credential, under its name.
    pub async fn send(&self, session: &str, text: &str) -> String {
        if self.console.is_some() {
            return self.send_as("console", session, text).await;
        }
        self.send_on(subjects::session_human(session), session, text)
            .await
    }

    /// Sends what the human typed in a console of workspace `workspace`
    /// (the session's memory is that workspace's).
    pub async fn send_in(&self, workspace: &str, session: &str, text: &str) -> String {
        let subject = if self.console.is_some() {
            subjects::session_human_from(session, "console")
        } else {
            subjects::session_human(session)
        };
        self.send_message(subject, session, text, None, Some(workspace))
            .await
    }

    /// Sends the human's `/stop`, as console `console` does.
    pub async fn stop_as(&self, console: &str, session: &str) -> String {
        self.send_command(
            subjects::session_human_from(session, console),
            session,
            "/stop",
            Some(arbiter_protocol::HumanCommand::Stop),
        )
        .await
    }

    async fn send_on(&self, subject: String, session: &str, text: &str) -> String {
        self.send_command(subject, session, text, None).await
    }

    async fn send_command(
        &self,
        subject: String,
        session: &str,
        text: &str,
        command: Option<arbiter_protocol::HumanCommand>,
    ) -> String {
        self.send_message(subject, session, text, command, None)
            .await
    }

    async fn send_message(
        &self,
        subject: String,
        session: &str,
        text: &str,
        command: Option<arbiter_protocol::HumanCommand>,
        workspace: Option<&str>,
    ) -> String {
        let message_id = uuid::Uuid::now_v7().to_string();
        let message = HumanMessage {
            v: VERSION,
            session_id: session.to_owned(),
            message_id: message_id.clone(),
            text: text.to_owned(),
            sent_at: chrono::Utc::now(),
            command,
            budget: None,
            workspace: workspace.map(str::to_owned),
            approval: None,
            policy: None,
            rewind: None,
        };
        self.console
            .as_ref()
            .unwrap_or(&self.bus)
            .publish_js(subject, &message_id, &TraceContext::none(), &message)
            .await
            .unwrap();
        message_id
    }

    /// Follows a session's log from its start.
    pub async fn watch_log(&self, session: &str) -> LogWatch {
        let stream = self
            .bus
            .js
            .get_stream(subjects::SESSIONS_STREAM)
            .await
            .unwrap();
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subjects: subjects::session_log_filters(session),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut messages = consumer.messages().await.unwrap();
        let entries = Arc::new(Mutex::new(Vec::new()));
        self.watches
            .lock()
            .unwrap()
            .push((session.to_owned(), Arc::downgrade(&entries)));
        let sink = entries.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                let entry: LogEntry = serde_json::from_slice(&msg.payload)
                    .unwrap_or_else(|e| panic!("the log holds a malformed entry: {e}"));
                // A step entry carries the coordinator's record: consoles skip it.
                if matches!(entry.body, LogBody::Step(_)) {
                    continue;
                }
                sink.lock().unwrap().push(entry);
            }
        });
        LogWatch { entries, task }
    }

    pub async fn status(&self, session: &str) -> Option<SessionStatus> {
        let bytes = self.bus.sessions_kv.get(session).await.unwrap()?;
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    /// Waits until the session is idle with no Orchestrator and `n` log
    /// entries stored, and every [`LogWatch`] on it has received them.
    pub async fn settled(&self, session: &str, n: u64) -> SessionStatus {
        let status = eventually(WAIT, "the session to settle", || async {
            self.status(session).await.filter(|s| {
                s.state == arbiter_protocol::SessionState::Idle
                    && s.queued == 0
                    && s.active.is_none()
                    && s.last_seq == n
            })
        })
        .await;
        let watches: Vec<_> = self
            .watches
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _)| s == session)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for entries in watches {
            eventually(
                WAIT,
                &format!("the log watch to receive {n} entries"),
                || async { (entries.lock().unwrap().len() as u64 >= n).then_some(()) },
            )
            .await;
        }
        status
    }

    /// Waits until worker `id` answers on its presence endpoint (it is
    /// ready: a worker of the claude-code runtime checks its CLI first).
    pub async fn worker_up(&self, id: &str) {
        let subject = arbiter_worker::presence::presence_subject(id);
        eventually(WAIT, &format!("worker {id} to be up"), || async {
            self.bus
                .client
                .request(subject.clone(), "".into())
                .await
                .ok()
                .map(|_| ())
        })
        .await;
    }

    pub fn workspace(&self, session: &str) -> PathBuf {
        self.workspaces.path().join(session)
    }

    /// The last input seq an Orchestrator's stored state has taken (its
    /// `in_seq`), 0 before it has any record.
    pub async fn orch_inputs_taken(&self, orch_id: &str) -> u64 {
        let Ok(stream) = self.bus.js.get_stream(subjects::ORCH_STATE_STREAM).await else {
            return 0;
        };
        let Ok(last) = stream
            .get_last_raw_message_by_subject(&subjects::orch_records(orch_id))
            .await
        else {
            return 0;
        };
        serde_json::from_slice::<serde_json::Value>(&last.payload)
            .ok()
            .and_then(|record| record["snapshot"]["in_seq"].as_u64())
            .unwrap_or(0)
    }
}

impl Drop for System {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}
