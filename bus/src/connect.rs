//! Connecting to NATS: every way a binary can authenticate (a `.creds` file,
//! an nkey seed, user and password, TLS with a custom CA and a client
//! certificate), a first connection that fails with one clear line instead of
//! retrying silently, and a watch on the live connection that turns a refusal
//! of the credentials (revoked, expired) into a fatal error.
//!
//! What is retried and what is not: a server that cannot be reached yet is
//! waited for by services (they may start first) and is an error at once for
//! command-line tools; a refused credential, a certificate the server or the
//! client does not accept, and a file that cannot be read are never retried.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::{Client, ClientError, ConnectErrorKind, Event, ServerError};
use tokio::sync::watch;

use crate::{BusError, Result};

mod alarms;

pub use alarms::{Alarms, DENIALS_KEPT};

/// A secret given on the command line or in the environment: never shown
/// by `Debug`, logs or error messages.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// The default server of every binary.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// How to reach NATS and who to be there. The field names follow the `nats`
/// CLI's flags (`--creds`, `--nkey`, `--user`, `--password`, `--tlsca`,
/// `--tlscert`, `--tlskey`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsOptions {
    /// One server URL or a comma-separated list (`nats://`, `tls://`).
    pub url: String,
    /// A `.creds` file: a user JWT and its nkey seed.
    pub creds: Option<PathBuf>,
    /// A file holding an nkey seed (`SU…`).
    pub nkey: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    /// CA certificate(s) to trust for the server, in PEM.
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate and key, in PEM, for servers that verify clients (mTLS).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Where request replies come; by default the one a `.creds` file's
    /// permissions name (`_INBOX_<user>`), else `_INBOX`.
    pub inbox_prefix: Option<String>,
    /// How many copies of each stream, bucket and object store a process
    /// that declares them (the coordinator, `arbiter-admin setup`) keeps: 1
    /// on a single server, 3 on a 3-node cluster. `None`: new ones get 1 and
    /// existing ones keep theirs; `Some(n)`: existing ones are changed to `n`.
    pub replicas: Option<usize>,
    /// Connect to a server that is not on this machine even without TLS or
    /// without a credential (`--insecure`); see [`exposure`].
    pub insecure: bool,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self::url(DEFAULT_URL)
    }
}

impl NatsOptions {
    /// The name in the credentials file's user JWT, if it has one: the
    /// name a console or `arbiter-web` speaks under (the server lets it
    /// publish human lines only under that name).
    pub fn credential_name(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.creds.as_ref()?).ok()?;
        read_creds_info(&text)?.name
    }

    /// Options with only a URL: no credential, no TLS unless the URL asks for it.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            creds: None,
            nkey: None,
            user: None,
            password: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            inbox_prefix: None,
            replicas: None,
            insecure: false,
        }
    }

    /// The files these options read, each with the flag that names it.
    pub fn files(&self) -> Vec<(&'static str, &Path)> {
        [
            ("the credentials file (--creds, NATS_CREDS)", &self.creds),
            ("the nkey seed file (--nkey, NATS_NKEY)", &self.nkey),
            ("the CA certificate (--tlsca, NATS_CA)", &self.tls_ca),
            (
                "the client certificate (--tlscert, NATS_CERT)",
                &self.tls_cert,
            ),
            ("the client key (--tlskey, NATS_KEY)", &self.tls_key),
        ]
        .into_iter()
        .filter_map(|(what, path)| path.as_deref().map(|p| (what, p)))
        .collect()
    }

    fn wants_tls(&self) -> bool {
        self.url.split(',').any(|u| u.trim().starts_with("tls://"))
            || self.tls_ca.is_some()
            || self.tls_cert.is_some()
    }

    /// Whether the connection carries a credential: a `.creds` file, an
    /// nkey, a user, or a user and password in the URL.
    fn has_credential(&self) -> bool {
        self.creds.is_some()
            || self.nkey.is_some()
            || self.user.is_some()
            || server_list(&self.url).iter().any(|u| {
                u.parse::<async_nats::ServerAddr>()
                    .is_ok_and(|a| a.has_user_pass())
            })
    }
}

/// What a connection lacks to be fit to cross a network, and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// TLS and a credential: nothing to say.
    Protected,
    /// Without TLS, a credential or both, to this machine only (tests, the
    /// benchmark, a server on 127.0.0.1): allowed, with a warning.
    Loopback { lacks: &'static str },
    /// The same to a server that is not on this machine: refused unless
    /// [`NatsOptions::insecure`].
    Remote { lacks: &'static str },
}

/// Whether `options` would connect without TLS or without a credential,
/// and to a server off this machine. A host counts as this machine when it
/// is `localhost` or a loopback address (127.0.0.0/8, ::1); names are not
/// resolved, so any other name is remote. One remote server in a list
/// makes the whole list remote.
pub fn exposure(options: &NatsOptions) -> Exposure {
    let lacks = match (options.wants_tls(), options.has_credential()) {
        (true, true) => return Exposure::Protected,
        (false, false) => "without TLS and without a credential",
        (false, true) => "without TLS",
        (true, false) => "without a credential",
    };
    let remote = server_list(&options.url).iter().any(|u| {
        u.parse::<async_nats::ServerAddr>()
            .map_or(true, |a| !is_loopback(a.host()))
    });
    if remote {
        Exposure::Remote { lacks }
    } else {
        Exposure::Loopback { lacks }
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a connection that [`exposure`] calls remote, unless
/// `--insecure`; says once per process what an allowed one lacks.
fn check_exposure(options: &NatsOptions) -> Result<()> {
    // One line per process, however many connections it makes (the
    // console and `arbiter-admin` connect more than once): a log dedup.
    static WARNED: std::sync::Once = std::sync::Once::new();
    let url = crate::redact_url(&options.url);
    match exposure(options) {
        Exposure::Protected => {}
        Exposure::Loopback { lacks } => WARNED.call_once(|| {
            tracing::warn!(nats = %url, "connecting to NATS {lacks}: fine on this machine (tests, the benchmark), never across a network");
        }),
        Exposure::Remote { lacks } if options.insecure => WARNED.call_once(|| {
            tracing::warn!(nats = %url, "connecting to NATS {lacks} to another machine, because --insecure (ARBITER_INSECURE) was given: anyone on the network can read and forge every message");
        }),
        Exposure::Remote { lacks } => return Err(BusError::Insecure { url, lacks }),
    }
    Ok(())
}

/// Whether a server that cannot be reached yet is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Services: wait (saying so) until the server answers.
    Wait,
    /// Command-line tools: fail at once.
    FailFast,
}

/// A live connection and what the bus has learned about it.
#[derive(Clone)]
pub struct Connection {
    pub client: Client,
    pub alarms: Alarms,
    /// The user name in the credential, when it carries one (a `.creds` JWT).
    pub user: Option<String>,
    /// The replicas asked for ([`NatsOptions::replicas`]).
    pub replicas: Option<usize>,
}

/// What a `.creds` file says about its user, read from the JWT (not verified:
/// the server does that).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CredsInfo {
    pub name: Option<String>,
    /// The `_INBOX_<x>` prefix its subscribe permissions allow, if any.
    pub inbox_prefix: Option<String>,
    /// Its expiry, seconds since the epoch, if it has one.
    pub expires: Option<i64>,
}

/// Reads the user JWT of a `.creds` file.
pub fn read_creds_info(text: &str) -> Option<CredsInfo> {
    let mut lines = text.lines();
    lines.find(|l| l.contains("BEGIN NATS USER JWT"))?;
    let jwt = lines.find(|l| !l.trim().is_empty())?.trim();
    let payload = jwt.split('.').nth(1)?;
    let bytes = data_encoding::BASE64URL_NOPAD
        .decode(payload.trim_end_matches('=').as_bytes())
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let inbox_prefix = claims["nats"]["sub"]["allow"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str())
        .find_map(|s| {
            let prefix = s.strip_suffix(".>")?;
            (prefix.starts_with("_INBOX_") && !prefix.contains(['*', '>']))
                .then(|| prefix.to_owned())
        });
    Some(CredsInfo {
        name: claims["name"].as_str().map(str::to_owned),
        inbox_prefix,
        expires: claims["exp"].as_i64(),
    })
}

/// Checks every file the options name before connecting, so that a wrong
/// path or a bad file is one clear line, not a TLS or auth error later.
fn check_files(options: &NatsOptions) -> Result<Option<CredsInfo>> {
    let file_error = |what: &str, path: &Path, problem: FileProblem| BusError::File {
        what: what.to_owned(),
        path: path.display().to_string(),
        problem,
    };
    let mut info = None;
    for (what, path) in options.files() {
        let text =
            std::fs::read(path).map_err(|e| file_error(what, path, FileProblem::Unreadable(e)))?;
        let text = String::from_utf8_lossy(&text);
        if what.contains("NATS_CREDS") {
            let creds = read_creds_info(&text)
                .ok_or_else(|| file_error(what, path, FileProblem::NoUserJwt))?;
            if let Some(exp) = creds
                .expires
                .filter(|&exp| exp <= chrono::Utc::now().timestamp())
            {
                return Err(file_error(what, path, FileProblem::JwtExpired { at: exp }));
            }
            if !text.contains("NKEY SEED") {
                return Err(file_error(what, path, FileProblem::NoSeed));
            }
            info = Some(creds);
        } else if what.contains("NATS_NKEY") {
            if !text.trim().starts_with("SU") {
                return Err(file_error(what, path, FileProblem::NotUserSeed));
            }
        } else if what.contains("NATS_KEY") {
            if !text.contains("PRIVATE KEY") {
                return Err(file_error(what, path, FileProblem::NoPrivateKey));
            }
        } else {
            check_certificates(&text).map_err(|problem| file_error(what, path, problem))?;
        }
    }
    match (&options.tls_cert, &options.tls_key) {
        (Some(_), None) => Err(BusError::Config(
            "--tlscert (NATS_CERT) was given without --tlskey (NATS_KEY)".into(),
        )),
        (None, Some(_)) => Err(BusError::Config(
            "--tlskey (NATS_KEY) was given without --tlscert (NATS_CERT)".into(),
        )),
        _ => Ok(info),
    }
}

/// What is wrong with a file the connection settings name
/// ([`BusError::File`]).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// It cannot be read. The error is said in words of its kind (not kept
    /// as a source: those words are its text).
    #[error("{}", io_cause(.0))]
    Unreadable(std::io::Error),
    /// A credentials file async-nats does not take.
    #[error("{0}")]
    Credentials(#[source] std::io::Error),
    #[error("it holds no NATS user JWT")]
    NoUserJwt,
    /// Its JWT expired `at` (seconds since the epoch).
    #[error("its JWT expired at {}", format_time(*.at))]
    JwtExpired { at: i64 },
    #[error("it holds no nkey seed")]
    NoSeed,
    #[error("it does not hold a user nkey seed (SU…)")]
    NotUserSeed,
    #[error("it holds no PEM private key")]
    NoPrivateKey,
    #[error("it is not a PEM certificate file: {0}")]
    NotPem(#[source] rustls_pki_types::pem::Error),
    /// A certificate that does not parse (the parser's words).
    #[error("it holds a certificate that cannot be read: {0}")]
    BadCertificate(String),
    /// The certificate of `subject` expired `on` (seconds since the epoch).
    #[error("its certificate ({subject}) expired on {}", format_time(*.on))]
    CertificateExpired { subject: String, on: i64 },
    /// The certificate of `subject` is valid from `from` on.
    #[error("its certificate ({subject}) is not valid before {}", format_time(*.from))]
    CertificateNotYetValid { subject: String, from: i64 },
    #[error("it holds no PEM certificate")]
    NoCertificate,
}

/// Every certificate in a PEM file parses (as the TLS client will read it)
/// and is valid now.
fn check_certificates(text: &str) -> std::result::Result<(), FileProblem> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let mut found = 0;
    // Read the way the TLS client reads it, so that what fails there fails here.
    for der in CertificateDer::pem_reader_iter(&mut std::io::BufReader::new(text.as_bytes())) {
        let der = der.map_err(FileProblem::NotPem)?;
        found += 1;
        let (_, cert) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| FileProblem::BadCertificate(e.to_string()))?;
        let validity = cert.validity();
        let now = chrono::Utc::now().timestamp();
        if validity.not_after.timestamp() < now {
            return Err(FileProblem::CertificateExpired {
                subject: cert.subject().to_string(),
                on: validity.not_after.timestamp(),
            });
        }
        if validity.not_before.timestamp() > now {
            return Err(FileProblem::CertificateNotYetValid {
                subject: cert.subject().to_string(),
                from: validity.not_before.timestamp(),
            });
        }
    }
    if found == 0 {
        return Err(FileProblem::NoCertificate);
    }
    Ok(())
}

fn format_time(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0).map_or_else(
        || secs.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

fn io_cause(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied (cannot read it)".into(),
        std::io::ErrorKind::IsADirectory => "it is a directory".into(),
        _ => e.to_string(),
    }
}

/// How long a services waits between attempts to reach a server that is not up.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How often a waiting service says again that it is waiting.
const WAITING_NOTICE: Duration = Duration::from_secs(30);
/// Resets during the TLS handshake in a row before the client certificate is
/// blamed (a server that refuses a certificate may just drop the connection).
const HANDSHAKE_RESETS: u32 = 2;

/// Connects as `name` (the client name servers and monitoring show).
///
/// Fails with one line and never retries when a file cannot be read, the
/// connection would cross a network without TLS or a credential (see
/// [`exposure`]), the credentials are refused, or TLS fails; a server that cannot be reached is
/// waited for under [`Reach::Wait`] and an error under [`Reach::FailFast`].
pub async fn connect_with(options: &NatsOptions, name: &str, reach: Reach) -> Result<Connection> {
    let creds = check_files(options)?;
    check_exposure(options)?;
    let url = crate::redact_url(&options.url);
    let inbox = options
        .inbox_prefix
        .clone()
        .or_else(|| creds.as_ref().and_then(|c| c.inbox_prefix.clone()));
    let alarms = Alarms::default();
    let started = Instant::now();
    let mut last_notice: Option<Instant> = None;
    let mut resets = 0;
    let mut delay = Duration::from_millis(50);
    loop {
        let attempt = build(options, name, inbox.as_deref(), &alarms).await?;
        // async-nats reads one URL from a string: the list is split here.
        let error = match attempt.connect(server_list(&options.url)).await {
            Ok(client) => {
                return Ok(Connection {
                    client,
                    alarms,
                    user: creds.and_then(|c| c.name),
                    replicas: options.replicas,
                });
            }
            Err(e) => e,
        };
        let cause = crate::error_chain(&error);
        match error.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                return Err(BusError::Refused(format!(
                    "NATS at {url} refused {}: {cause}",
                    who(options)
                )));
            }
            // A refusal by the server during the handshake reaches the client
            // as an IO error carrying the TLS alert.
            _ if is_tls_refusal(&cause) => {
                return Err(BusError::Tls {
                    url,
                    cause: tls_hint(&cause, options),
                    source: error,
                });
            }
            ConnectErrorKind::Tls => {
                return Err(BusError::Tls {
                    url,
                    cause: tls_hint(&cause, options),
                    source: error,
                });
            }
            ConnectErrorKind::ServerParse => {
                return Err(BusError::Config(format!("bad NATS URL {url}: {cause}")));
            }
            _ => {}
        }
        let reset = is_reset(&cause);
        if reset && options.wants_tls() {
            resets += 1;
            if resets >= HANDSHAKE_RESETS {
                return Err(BusError::Tls {
                    url,
                    cause: "the server closed the connection during the TLS handshake: it does \
                            not accept this client's certificate (missing, expired, or not \
                            signed by its CA?)"
                        .into(),
                    source: error,
                });
            }
        } else {
            resets = 0;
        }
        if reach == Reach::FailFast {
            return Err(BusError::Connect { url, source: error });
        }
        if last_notice.is_none_or(|t| t.elapsed() >= WAITING_NOTICE) {
            tracing::warn!(nats = %url, error = %cause, waited = ?started.elapsed(), "NATS is not reachable yet; waiting for it");
            last_notice = Some(Instant::now());
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// The servers of a comma-separated URL list, in order, blanks dropped. The
/// client connects to one of them and moves to another when it is lost.
pub fn server_list(url: &str) -> Vec<String> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The credential named in messages: a file path or a user name, never a secret.
fn who(options: &NatsOptions) -> String {
    if let Some(p) = &options.creds {
        format!("the credentials in {}", p.display())
    } else if let Some(p) = &options.nkey {
        format!("the nkey in {}", p.display())
    } else if let Some(u) = &options.user {
        format!("user {u:?}")
    } else {
        "an anonymous connection (give --creds, --nkey or --user)".into()
    }
}

async fn build(
    options: &NatsOptions,
    name: &str,
    inbox: Option<&str>,
    alarms: &Alarms,
) -> Result<async_nats::ConnectOptions> {
    let alarms = alarms.clone();
    let mut connect = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(4))
        .event_callback(move |event| {
            let alarms = alarms.clone();
            async move { alarms.on_event(event) }
        });
    if let Some(path) = &options.creds {
        connect = connect
            .credentials_file(path)
            .await
            .map_err(|e| BusError::File {
                what: "the credentials file (--creds, NATS_CREDS)".into(),
                path: path.display().to_string(),
                problem: FileProblem::Credentials(e),
            })?;
    }
    if let Some(path) = &options.nkey {
        let seed = std::fs::read_to_string(path).map_err(|e| BusError::File {
            what: "the nkey seed file (--nkey, NATS_NKEY)".into(),
            path: path.display().to_string(),
            problem: FileProblem::Unreadable(e),
        })?;
        connect = connect.nkey(seed.trim().to_owned());
    }
    if let Some(user) = &options.user {
        let password = options.password.as_ref().map(|p| p.expose().to_owned());
        connect = connect.user_and_password(user.clone(), password.unwrap_or_default());
    }
    if options.wants_tls() {
        connect = connect.require_tls(true);
    }
    if let Some(ca) = &options.tls_ca {
        connect = connect.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&options.tls_cert, &options.tls_key) {
        connect = connect.add_client_certificate(cert.clone(), key.clone());
    }
    if let Some(prefix) = inbox {
        connect = connect.custom_inbox_prefix(prefix);
    }
    Ok(connect)
}

fn is_tls_refusal(cause: &str) -> bool {
    let lower = cause.to_lowercase();
    [
        "fatal alert",
        "invalid peer certificate",
        "handshake failure",
    ]
    .iter()
    .any(|s| lower.contains(s))
}

fn is_reset(cause: &str) -> bool {
    let lower = cause.to_lowercase();
    [
        "connection reset",
        "broken pipe",
        "unexpected eof",
        "early eof",
        "connection aborted",
    ]
    .iter()
    .any(|s| lower.contains(s))
}

/// Says what a TLS failure most likely means, in the user's terms.
fn tls_hint(cause: &str, options: &NatsOptions) -> String {
    let lower = cause.to_lowercase();
    let ca = options
        .tls_ca
        .as_ref()
        .map_or("the system's trusted CAs".to_owned(), |p| {
            format!("the CA in {}", p.display())
        });
    let hint = if lower.contains("unknownissuer")
        || lower.contains("unknown issuer")
        || lower.contains("badsignature")
    {
        format!("the server's certificate is not signed by {ca}")
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        "the server's certificate does not name the host in the URL".into()
    } else if lower.contains("expired") && lower.contains("alert") {
        "the server refused this client's certificate as expired".into()
    } else if lower.contains("expired") {
        "the server's certificate has expired".into()
    } else if lower.contains("unknownca")
        || lower.contains("unknown ca")
        || lower.contains("badcertificate")
        || lower.contains("bad certificate")
    {
        "the server does not trust this client's certificate (signed by another CA?)".into()
    } else if lower.contains("certificaterequired") || lower.contains("certificate required") {
        "the server requires a client certificate: give --tlscert and --tlskey (NATS_CERT, NATS_KEY)".into()
    } else {
        return cause.to_owned();
    };
    format!("{hint} ({cause})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug() {
        let mut o = NatsOptions::url("nats://h:4222");
        o.user = Some("u".into());
        o.password = Some(Secret::new("hunter2"));
        assert!(!format!("{o:?}").contains("hunter2"));
    }

    #[test]
    fn creds_info_reads_the_name_and_inbox() {
        let claims = serde_json::json!({
            "name": "w3",
            "nats": {"sub": {"allow": ["_INBOX_w3.>", "$SRV.PING"]}}
        });
        let payload = data_encoding::BASE64URL_NOPAD.encode(claims.to_string().as_bytes());
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.{payload}.c2ln\n------END NATS USER JWT------\n"
        );
        let info = read_creds_info(&creds).unwrap();
        assert_eq!(info.name.as_deref(), Some("w3"));
        assert_eq!(info.inbox_prefix.as_deref(), Some("_INBOX_w3"));
        assert_eq!(read_creds_info("nonsense"), None);
    }

    #[test]
    fn plaintext_or_anonymous_is_refused_off_this_machine_only() {
        let plain = |url: &str| NatsOptions::url(url);
        for url in [
            "nats://127.0.0.1:4222",
            "127.0.0.2:4222",
            "nats://localhost:4222",
            "nats://[::1]:4222",
            "nats://127.0.0.1:1,nats://localhost:2",
        ] {
            assert_eq!(
                exposure(&plain(url)),
                Exposure::Loopback {
                    lacks: "without TLS and without a credential"
                },
                "{url}"
            );
        }
        for url in [
            "nats://10.0.0.1:4222",
            "nats://nats:4222",
            "nats://127.0.0.1:1,nats://10.0.0.1:2",
            "not a url",
        ] {
            assert!(
                matches!(exposure(&plain(url)), Exposure::Remote { .. }),
                "{url}"
            );
        }
        let with_creds = NatsOptions {
            creds: Some("x.creds".into()),
            ..plain("nats://10.0.0.1:4222")
        };
        assert_eq!(
            exposure(&with_creds),
            Exposure::Remote {
                lacks: "without TLS"
            }
        );
        assert_eq!(
            exposure(&plain("nats://u:p@10.0.0.1:4222")),
            Exposure::Remote {
                lacks: "without TLS"
            }
        );
        assert_eq!(
            exposure(&plain("tls://10.0.0.1:4222")),
            Exposure::Remote {
                lacks: "without a credential"
            }
        );
        let secure = NatsOptions {
            tls_ca: Some("ca.pem".into()),
            ..with_creds.clone()
        };
        assert_eq!(exposure(&secure), Exposure::Protected);
        // --insecure lets a remote one through, and only it.
        let insecure = NatsOptions {
            insecure: true,
            ..plain("nats://10.0.0.1:4222")
        };
        assert!(check_exposure(&insecure).is_ok());
        let refused = check_exposure(&plain("nats://10.0.0.1:4222"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with(
                "refusing to connect to NATS at nats://10.0.0.1:4222 without TLS and without a credential: "
            ) && refused.contains("--insecure (ARBITER_INSECURE=1)"),
            "{refused}"
        );
        assert!(check_exposure(&plain("nats://127.0.0.1:4222")).is_ok());
    }

    #[test]
    fn a_url_list_is_split_on_commas() {
        assert_eq!(
            server_list("tls://a:4222, tls://b:4222,,tls://c:4222 "),
            vec!["tls://a:4222", "tls://b:4222", "tls://c:4222"]
        );
        assert_eq!(server_list("nats://h:4222"), vec!["nats://h:4222"]);
    }

    #[test]
    fn tls_failures_are_explained() {
        let o = NatsOptions::url("tls://h:4222");
        assert!(
            tls_hint("invalid peer certificate: UnknownIssuer", &o)
                .starts_with("the server's certificate is not signed")
        );
        assert!(
            tls_hint("received fatal alert: UnknownCA", &o)
                .starts_with("the server does not trust")
        );
        assert_eq!(tls_hint("something else", &o), "something else");
    }
}
