//! `arbiter-admin`: makes a deployment's NATS secure and keeps it so.
//!
//! - `init` writes the nats-server config (TLS that verifies clients, and
//!   JWT operator mode with one account for Arbiter), a CA with the server's
//!   certificate, and one credential bundle per role: admin, coordinator,
//!   worker, console. Each bundle is the user's `.creds` (a JWT carrying the
//!   role's permissions from [`arbiter_protocol::roles`], and its nkey
//!   seed), a client certificate and key, and the CA.
//! - `issue` makes one more bundle (another worker, another console), with
//!   nothing to change on the server: the account's signing key signs it.
//! - `revoke` adds the user to the account's revocation list, rewrites the
//!   server's account file and pushes the new account JWT to the running
//!   server, which closes the user's connections and refuses it from then on.
//! - `setup` declares the streams, consumers and buckets (as the admin user).
//!
//! Why JWT operator mode rather than users in the server config: issuing a
//! credential needs no change on the server and no restart of anything, a
//! revocation reaches a running server without a reload, and tenants map to
//! accounts (subjects and streams are per account). See `docs/security.md`.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod jwt;
mod layout;
pub mod pki;
mod registry;
mod server_conf;
pub mod sessions;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arbiter_protocol::roles::{self, Identity, NatsRole};
use arbiter_protocol::subjects;
use nkeys::KeyPair;

pub use layout::Layout;
pub use registry::{Cluster, ClusterNode, Registry, UserRecord};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {cause}")]
    Io { path: String, cause: String },
    #[error("{0}")]
    Usage(String),
    #[error("keys or certificates: {0}")]
    Key(String),
    #[error(transparent)]
    Bus(#[from] arbiter_bus::BusError),
    #[error("the server did not take the new account JWT: {0}")]
    Push(String),
}

impl Error {
    fn io(path: &Path, e: std::io::Error) -> Self {
        Error::Io {
            path: path.display().to_string(),
            cause: e.to_string(),
        }
    }
}

/// What `init` is told.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// Extra names (DNS or IP) the server's certificate is valid for.
    pub server_names: Vec<String>,
    /// Pools the first worker credential serves.
    pub pools: Vec<String>,
    /// Where the server listens.
    pub listen: String,
    /// The URL clients reach the server at, written into each bundle's `env`.
    pub url: String,
    /// Where the server will see this directory (default: where it is written).
    pub server_root: Option<PathBuf>,
    /// Where the server keeps account JWTs it is sent (default `<server>/jwt`).
    pub resolver_dir: Option<PathBuf>,
    /// Days the certificates are valid.
    pub days: i64,
    /// Overwrite an existing directory (every old credential stops working).
    pub force: bool,
    /// A JetStream cluster: one config per node (`server/<node>.conf`),
    /// routes over mutual TLS with a route password. Clients get every
    /// node's URL.
    pub cluster: Option<Cluster>,
}

impl Default for InitOptions {
    fn default() -> Self {
        Self {
            server_names: Vec::new(),
            pools: vec![subjects::DEFAULT_POOL.into()],
            listen: "0.0.0.0:4222".into(),
            url: "tls://127.0.0.1:4222".into(),
            server_root: None,
            resolver_dir: None,
            days: 730,
            force: false,
            cluster: None,
        }
    }
}

/// Names the server certificate always carries.
const DEFAULT_SERVER_NAMES: [&str; 4] = ["localhost", "127.0.0.1", "::1", "nats"];
/// The CA outlives the certificates it signs.
const CA_DAYS: i64 = 3650;

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Writes a new deployment into `dir` (see the crate docs). Returns what it made.
pub fn init(dir: &Path, options: &InitOptions) -> Result<Registry> {
    let layout = Layout::new(dir);
    if layout.registry().exists() && !options.force {
        return Err(Error::Usage(format!(
            "{} already holds a deployment (admin.json); --force replaces it, \
             and every credential it issued stops working",
            dir.display()
        )));
    }
    for pool in &options.pools {
        check_token("pool", pool)?;
    }
    if let Some(cluster) = &options.cluster {
        check_token("cluster name", &cluster.name)?;
        for node in &cluster.nodes {
            check_token("node name", &node.name)?;
            if ["nats-server", "resolver", "accounts", "routes"].contains(&node.name.as_str()) {
                return Err(Error::Usage(format!(
                    "node name {:?} is taken by another file of server/",
                    node.name
                )));
            }
        }
        if cluster.nodes.len() < 3 {
            return Err(Error::Usage(
                "a JetStream cluster needs at least 3 nodes (--node, repeated) to survive the loss of one".into(),
            ));
        }
    }
    layout.create_dirs()?;
    let root = match &options.server_root {
        Some(root) => root.clone(),
        None => std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?,
    };
    let operator = KeyPair::new_operator();
    let system = KeyPair::new_account();
    let account = KeyPair::new_account();
    let signing = KeyPair::new_account();
    let system_user = KeyPair::new_user();
    for (path, key) in [
        (layout.key("operator"), &operator),
        (layout.key("system"), &system),
        (layout.key("account"), &account),
        (layout.key("signing"), &signing),
    ] {
        layout.write_secret(&path, &seed(key)?)?;
    }
    let iat = now();
    let system_user_jwt = jwt::user(
        &system,
        &system.public_key(),
        &system_user.public_key(),
        "system",
        None,
        &[],
        iat,
    )?;
    layout.write_secret(
        &layout.system_creds(),
        &jwt::creds_file(&system_user_jwt, &seed(&system_user)?),
    )?;

    let ca = pki::new_ca(CA_DAYS)?;
    layout.write_secret(&layout.ca_key(), &ca.key)?;
    layout.write_public(&layout.ca_cert(), &ca.cert)?;
    let mut names: Vec<String> = DEFAULT_SERVER_NAMES
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let node_hosts = options
        .cluster
        .iter()
        .flat_map(|c| c.nodes.iter().map(|n| n.host.clone()));
    for name in options.server_names.iter().cloned().chain(node_hosts) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let server = pki::issue(&ca, "nats-server", "server", &names, true, options.days)?;
    layout.write_public(&layout.server_file("ca.pem"), &ca.cert)?;
    layout.write_public(&layout.server_file("server-cert.pem"), &server.cert)?;
    layout.write_secret(&layout.server_file("server-key.pem"), &server.key)?;

    let mut registry = Registry {
        v: 1,
        operator: operator.public_key(),
        system_account: system.public_key(),
        account: account.public_key(),
        signing_key: signing.public_key(),
        account_iat: iat,
        url: match &options.cluster {
            Some(cluster) => cluster
                .nodes
                .iter()
                .map(ClusterNode::url)
                .collect::<Vec<_>>()
                .join(","),
            None => options.url.clone(),
        },
        listen: options.listen.clone(),
        server_root: root.clone(),
        resolver_dir: options
            .resolver_dir
            .clone()
            .unwrap_or_else(|| root.join("server").join("jwt")),
        server_names: names,
        users: Vec::new(),
        cluster: options.cluster.clone(),
    };
    if let Some(cluster) = &registry.cluster {
        server_conf::write_routes(&layout, cluster, &KeyPair::new_user().public_key())?;
    }
    for (role, name, pools) in [
        (NatsRole::Admin, "admin", Vec::new()),
        (NatsRole::Coordinator, "coordinator", Vec::new()),
        (NatsRole::Worker, "worker", options.pools.clone()),
        (NatsRole::Console, "console", Vec::new()),
        (NatsRole::Web, "web", Vec::new()),
    ] {
        issue_into(
            &layout,
            &mut registry,
            &ca,
            &signing,
            role,
            name,
            Scope {
                pools: &pools,
                sessions: &[],
            },
            options.days,
        )?;
    }
    write_server_config(&layout, &registry, &operator)?;
    registry.save(&layout.registry())?;
    Ok(registry)
}

/// Issues a certificate for `arbiter-web`'s HTTPS, signed by the
/// deployment's CA, for `names` (host names or IP addresses): written to
/// `<dir>/web/cert.pem` and `key.pem` (the key private), with the CA beside
/// them as `ca.pem` (what a browser must trust). Returns the folder.
pub fn issue_web_cert(dir: &Path, names: &[String], days: i64) -> Result<PathBuf> {
    if names.is_empty() {
        return Err(Error::Usage(
            "name at least one host the browser will reach it by (127.0.0.1, localhost, arbiter.example.com)".into(),
        ));
    }
    let layout = Layout::new(dir);
    let ca = pki::Pem {
        cert: layout.read(&layout.ca_cert())?,
        key: layout.read(&layout.ca_key())?,
    };
    let cert = pki::issue(&ca, "arbiter-web", "web", names, true, days)?;
    let out = dir.join("web");
    layout.fresh_dir(&out)?;
    layout.write_public(&out.join("cert.pem"), &cert.cert)?;
    layout.write_secret(&out.join("key.pem"), &cert.key)?;
    layout.write_public(&out.join("ca.pem"), &ca.cert)?;
    Ok(out)
}

/// What one credential may reach beyond its role: a worker's pools, a
/// console's sessions (none: every session).
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    pub pools: &'a [String],
    pub sessions: &'a [String],
}

/// Issues one more credential bundle (`creds/<name>/`).
pub fn issue(
    dir: &Path,
    role: NatsRole,
    name: &str,
    scope: Scope<'_>,
    days: i64,
) -> Result<UserRecord> {
    let Scope { pools, sessions } = scope;
    let layout = Layout::new(dir);
    let mut registry = Registry::load(&layout.registry())?;
    if let Some(existing) = registry
        .users
        .iter()
        .find(|u| u.name == name && u.revoked_at.is_none())
    {
        return Err(Error::Usage(format!(
            "a {} credential named {name:?} exists already; revoke it first or pick another name",
            existing.role
        )));
    }
    let ca = pki::Pem {
        cert: layout.read(&layout.ca_cert())?,
        key: layout.read(&layout.ca_key())?,
    };
    let signing = layout.read_key("signing")?;
    let pools = if role == NatsRole::Worker && pools.is_empty() {
        vec![subjects::DEFAULT_POOL.to_owned()]
    } else {
        pools.to_vec()
    };
    let record = issue_into(
        &layout,
        &mut registry,
        &ca,
        &signing,
        role,
        name,
        Scope {
            pools: &pools,
            sessions,
        },
        days,
    )?;
    registry.save(&layout.registry())?;
    Ok(record)
}

#[allow(clippy::too_many_arguments)]
fn issue_into(
    layout: &Layout,
    registry: &mut Registry,
    ca: &pki::Pem,
    signing: &KeyPair,
    role: NatsRole,
    name: &str,
    Scope { pools, sessions }: Scope<'_>,
    days: i64,
) -> Result<UserRecord> {
    check_token("credential name", name)?;
    for pool in pools {
        check_token("pool", pool)?;
    }
    for session in sessions {
        check_token("session", session)?;
    }
    if role != NatsRole::Worker && !pools.is_empty() {
        return Err(Error::Usage("--pool is for worker credentials only".into()));
    }
    if !matches!(role, NatsRole::Console | NatsRole::Web) && !sessions.is_empty() {
        return Err(Error::Usage(
            "--session is for console and web credentials only".into(),
        ));
    }
    let user = KeyPair::new_user();
    let permissions = roles::permissions(Identity {
        role,
        name,
        pools,
        sessions,
    });
    let iat = now();
    let token = jwt::user(
        signing,
        &registry.account,
        &user.public_key(),
        name,
        Some(&permissions),
        &[format!("role:{role}")],
        iat,
    )?;
    let bundle = layout.bundle(name);
    layout.fresh_dir(&bundle)?;
    layout.write_secret(
        &bundle.join("nats.creds"),
        &jwt::creds_file(&token, &seed(&user)?),
    )?;
    let cert = pki::issue(ca, name, role.as_str(), &[], false, days)?;
    layout.write_public(&bundle.join("cert.pem"), &cert.cert)?;
    layout.write_secret(&bundle.join("key.pem"), &cert.key)?;
    layout.write_public(&bundle.join("ca.pem"), &ca.cert)?;
    let abs = std::fs::canonicalize(&bundle).map_err(|e| Error::io(&bundle, e))?;
    layout.write_public(
        &bundle.join("env"),
        &format!(
            "# {role} credential {name:?}, written by arbiter-admin. Source it, or set these in\n\
             # the process's environment (paths as on this host; adjust them where you copy it).\n\
             NATS_URL={url}\nNATS_CREDS={d}/nats.creds\nNATS_CA={d}/ca.pem\nNATS_CERT={d}/cert.pem\nNATS_KEY={d}/key.pem\n",
            url = registry.url,
            d = abs.display()
        ),
    )?;
    let record = UserRecord {
        name: name.to_owned(),
        role,
        pools: pools.to_vec(),
        sessions: sessions.to_vec(),
        public_key: user.public_key(),
        issued_at: iat,
        revoked_at: None,
    };
    registry.users.retain(|u| u.name != name);
    registry.users.push(record.clone());
    Ok(record)
}

/// What `revoke` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// The running server took the new account JWT: the user's connections
    /// are closed and it is refused from now on.
    Live,
    /// Not pushed (no URL, or the server could not be reached): the file is
    /// rewritten; a server reload (SIGHUP) or restart applies it.
    NotPushed(String),
}

/// Revokes the credential `name`: its JWTs are refused from now on.
pub async fn revoke(dir: &Path, name: &str, push_to: Option<&str>) -> Result<Pushed> {
    let layout = Layout::new(dir);
    let mut registry = Registry::load(&layout.registry())?;
    let at = now();
    let user = registry
        .users
        .iter_mut()
        .find(|u| u.name == name)
        .ok_or_else(|| {
            Error::Usage(format!(
                "no credential named {name:?} (see `arbiter-admin list`)"
            ))
        })?;
    if user.revoked_at.is_some() {
        return Err(Error::Usage(format!("{name:?} is revoked already")));
    }
    // Revocation covers every JWT issued at or before this second.
    user.revoked_at = Some(at.max(user.issued_at));
    let operator = layout.read_key("operator")?;
    let account_jwt = write_server_config(&layout, &registry, &operator)?;
    registry.save(&layout.registry())?;
    let bundle = layout.bundle(name);
    if bundle.exists() {
        std::fs::remove_dir_all(&bundle).map_err(|e| Error::io(&bundle, e))?;
    }
    let Some(url) = push_to else {
        return Ok(Pushed::NotPushed("no server URL given".into()));
    };
    match push_account(&layout, url, &account_jwt).await {
        Ok(()) => Ok(Pushed::Live),
        Err(e) => Ok(Pushed::NotPushed(e.to_string())),
    }
}

/// Sends the account JWT to the server over its system account.
async fn push_account(layout: &Layout, url: &str, account_jwt: &str) -> Result<()> {
    let admin = layout.bundle("admin");
    let options = arbiter_bus::NatsOptions {
        creds: Some(layout.system_creds()),
        tls_ca: Some(layout.ca_cert()),
        tls_cert: Some(admin.join("cert.pem")),
        tls_key: Some(admin.join("key.pem")),
        ..arbiter_bus::NatsOptions::url(url)
    };
    let conn =
        arbiter_bus::connect_with(&options, "arbiter-admin", arbiter_bus::Reach::FailFast).await?;
    let reply = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        conn.client
            .request("$SYS.REQ.CLAIMS.UPDATE", account_jwt.to_owned().into()),
    )
    .await
    .map_err(|_| Error::Push("no answer within 5 s".into()))?
    .map_err(|e| Error::Push(e.to_string()))?;
    let body: serde_json::Value = serde_json::from_slice(&reply.payload)
        .map_err(|e| Error::Push(format!("unreadable answer: {e}")))?;
    match body["data"]["code"].as_i64() {
        Some(200) => Ok(()),
        _ => Err(Error::Push(body.to_string())),
    }
}

/// Signs the accounts (with the current revocations) and writes the server's
/// files. Returns the Arbiter account's JWT.
fn write_server_config(layout: &Layout, registry: &Registry, operator: &KeyPair) -> Result<String> {
    let revocations: BTreeMap<String, i64> = registry
        .users
        .iter()
        .filter_map(|u| u.revoked_at.map(|at| (u.public_key.clone(), at)))
        .collect();
    // A newer account JWT must have a later iat than the one it replaces.
    let iat = now().max(registry.account_iat + 1);
    let operator_jwt = jwt::operator(operator, &registry.system_account, iat)?;
    let system_jwt = jwt::account(
        operator,
        &registry.system_account,
        "SYS",
        None,
        false,
        &BTreeMap::new(),
        iat,
    )?;
    // The account is named by its public key, as in a deployment without
    // names: the server's monitoring endpoint reports an account by its name
    // and selects it by its key (`/jsz?acc=`), and KEDA's nats-jetstream
    // scaler (before 2.17) asks with one value for both. With another name it
    // finds no stream, reads a lag of 0 and never starts a worker.
    let account_jwt = jwt::account(
        operator,
        &registry.account,
        &registry.account,
        Some(&registry.signing_key),
        true,
        &revocations,
        iat,
    )?;
    server_conf::write(
        layout,
        registry,
        &operator_jwt,
        &[
            (&registry.system_account, &system_jwt),
            (&registry.account, &account_jwt),
        ],
    )?;
    Ok(account_jwt)
}

/// Declares the streams, the bucket, the object stores and each pool's
/// summons consumer, connected as the admin. With `wait`, a server that is
/// not up yet is waited for that long (a start-up step, as in compose.yaml);
/// without, it is an error at once.
pub async fn setup(
    nats: &arbiter_bus::NatsOptions,
    pools: &[String],
    wait: Option<std::time::Duration>,
    limits: arbiter_bus::retention::Limits,
) -> Result<()> {
    for pool in pools {
        check_token("pool", pool)?;
    }
    let conn = match wait {
        None => {
            arbiter_bus::connect_with(nats, "arbiter-admin", arbiter_bus::Reach::FailFast).await?
        }
        Some(wait) => tokio::time::timeout(
            wait,
            arbiter_bus::connect_with(nats, "arbiter-admin", arbiter_bus::Reach::Wait),
        )
        .await
        .map_err(|_| {
            Error::Usage(format!(
                "NATS at {} did not answer within {} s",
                arbiter_bus::redact_url(&nats.url),
                wait.as_secs()
            ))
        })??,
    };
    let bus = arbiter_bus::Bus::open(conn, NatsRole::Admin, arbiter_bus::Reach::FailFast).await?;
    arbiter_bus::retention::apply_limits(&bus.js, &limits).await?;
    for pool in pools {
        arbiter_bus::setup::ensure_pool_consumer(&bus.js, pool).await?;
        arbiter_bus::setup::ensure_urgent_consumer(&bus.js, pool).await?;
    }
    Ok(())
}

/// Every credential the directory knows, revoked ones included.
pub fn list(dir: &Path) -> Result<Vec<UserRecord>> {
    let layout = Layout::new(dir);
    Ok(Registry::load(&layout.registry())?.users)
}

fn seed(key: &KeyPair) -> Result<String> {
    key.seed().map_err(|e| Error::Key(e.to_string()))
}

fn check_token(what: &str, value: &str) -> Result<()> {
    if subjects::is_valid_token(value) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{what} {value:?} must be 1 to 64 letters, digits, - or _"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use data_encoding::BASE64URL_NOPAD;

    /// The claims of the JWT preloaded for `key` in `resolver.conf`.
    fn preloaded_claims(resolver: &str, key: &str) -> serde_json::Value {
        let line = resolver
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap();
        let token = line.split('"').nth(1).unwrap();
        let payload = token.split('.').nth(1).unwrap();
        serde_json::from_slice(&BASE64URL_NOPAD.decode(payload.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn cluster_nodes_are_parsed_with_default_ports() {
        let node = ClusterNode::parse("n1@nats-1").unwrap();
        assert_eq!((node.client_port, node.route_port), (4222, 6222));
        let node = ClusterNode::parse("n2@10.0.0.2:4223:6223").unwrap();
        assert_eq!(
            node,
            ClusterNode {
                name: "n2".into(),
                host: "10.0.0.2".into(),
                client_port: 4223,
                route_port: 6223
            }
        );
        assert!(ClusterNode::parse("nats-1").is_err());
        assert!(ClusterNode::parse("n1@h:x").is_err());
    }

    #[test]
    fn a_cluster_gets_a_config_per_node_and_private_routes() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<ClusterNode> = ["n1@a", "n2@b", "n3@c"]
            .iter()
            .map(|n| ClusterNode::parse(n).unwrap())
            .collect();
        let registry = init(
            dir.path(),
            &InitOptions {
                cluster: Some(Cluster {
                    name: "arbiter".into(),
                    nodes,
                }),
                ..InitOptions::default()
            },
        )
        .unwrap();
        assert_eq!(registry.url, "tls://a:4222,tls://b:4222,tls://c:4222");
        assert!(registry.server_names.contains(&"b".to_owned()));
        let layout = Layout::new(dir.path());
        let n2 = layout.read(&layout.server_file("n2.conf")).unwrap();
        assert!(n2.contains("server_name: \"n2\""));
        assert!(n2.contains("include \"routes.conf\""));
        assert!(n2.contains("/jwt/n2\""));
        let routes = layout.server_file("routes.conf");
        let mode = std::fs::metadata(&routes).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the route password is owner-only");
        assert!(
            layout
                .read(&routes)
                .unwrap()
                .contains("nats-route://route:")
        );
        // Too few nodes to survive the loss of one.
        let small = tempfile::tempdir().unwrap();
        let two = InitOptions {
            cluster: Some(Cluster {
                name: "arbiter".into(),
                nodes: vec![
                    ClusterNode::parse("n1@a").unwrap(),
                    ClusterNode::parse("n2@b").unwrap(),
                ],
            }),
            ..InitOptions::default()
        };
        assert!(matches!(init(small.path(), &two), Err(Error::Usage(_))));
    }

    #[test]
    fn the_arbiter_account_is_named_by_its_public_key_before_and_after_a_revocation() {
        let dir = tempfile::tempdir().unwrap();
        let registry = init(dir.path(), &InitOptions::default()).unwrap();
        let layout = Layout::new(dir.path());
        let resolver = layout.read(&layout.server_file("resolver.conf")).unwrap();
        let claims = preloaded_claims(&resolver, &registry.account);
        assert_eq!(claims["sub"], registry.account);
        assert_eq!(claims["name"], registry.account);

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime
            .block_on(revoke(dir.path(), "console", None))
            .unwrap();
        let resolver = layout.read(&layout.server_file("resolver.conf")).unwrap();
        let claims = preloaded_claims(&resolver, &registry.account);
        assert_eq!(claims["name"], registry.account);
        assert!(claims["nats"]["revocations"].is_object());
    }
}
