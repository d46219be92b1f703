//! `admin.json`: the public half of a deployment (its keys' public parts,
//! where the server sees its files) and every credential issued, so that
//! `revoke` and `list` know them. It holds no secret.

use std::path::{Path, PathBuf};

use arbiter_protocol::roles::NatsRole;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registry {
    pub v: u32,
    pub operator: String,
    pub system_account: String,
    /// The Arbiter account: every role's user is in it.
    pub account: String,
    /// The account's signing key, which signs the users.
    pub signing_key: String,
    /// When the account JWT in force was signed (a newer one must be later).
    pub account_iat: i64,
    /// The URL clients reach the server at.
    pub url: String,
    pub listen: String,
    /// This directory as the server sees it.
    pub server_root: PathBuf,
    /// Where the server keeps the account JWTs pushed to it.
    pub resolver_dir: PathBuf,
    pub server_names: Vec<String>,
    pub users: Vec<UserRecord>,
    /// The nodes of a NATS cluster, when the deployment runs one (each gets
    /// its own `server/<node>.conf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
}

/// A JetStream cluster of nats-servers that route to each other over mutual
/// TLS (the deployment's CA) and a route password (in `server/routes.conf`,
/// owner-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// The cluster's name (`cluster { name }`).
    pub name: String,
    pub nodes: Vec<ClusterNode>,
}

/// One server of a [`Cluster`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    /// Its `server_name` and the name of its file, `server/<name>.conf`.
    pub name: String,
    /// Where its clients connect, as they reach it (`nats-1:4222`).
    pub host: String,
    pub client_port: u16,
    /// Its route port, which the other nodes dial.
    pub route_port: u16,
}

impl ClusterNode {
    /// Parses `NAME@HOST[:CLIENT_PORT[:ROUTE_PORT]]` (ports 4222 and 6222 by default).
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let (name, rest) = text
            .split_once('@')
            .ok_or_else(|| format!("{text:?}: expected NAME@HOST[:CLIENT_PORT[:ROUTE_PORT]]"))?;
        let mut parts = rest.split(':');
        let host = parts.next().unwrap_or_default().to_owned();
        let port = |p: Option<&str>, default: u16| match p {
            None => Ok(default),
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("{text:?}: bad port {p:?}")),
        };
        let client_port = port(parts.next(), 4222)?;
        let route_port = port(parts.next(), 6222)?;
        if name.is_empty() || host.is_empty() || parts.next().is_some() {
            return Err(format!(
                "{text:?}: expected NAME@HOST[:CLIENT_PORT[:ROUTE_PORT]]"
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            host,
            client_port,
            route_port,
        })
    }

    /// The URL clients reach it at.
    pub fn url(&self) -> String {
        format!("tls://{}:{}", self.host, self.client_port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    pub role: NatsRole,
    #[serde(default)]
    pub pools: Vec<String>,
    /// A console's sessions, the only ones it may speak in; none: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<String>,
    pub public_key: String,
    pub issued_at: i64,
    #[serde(default)]
    pub revoked_at: Option<i64>,
}

impl Registry {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Usage(format!(
                "{} not found: run `arbiter-admin init` first (or give --dir)",
                path.display()
            )),
            _ => Error::io(path, e),
        })?;
        serde_json::from_str(&text).map_err(|e| Error::Io {
            path: path.display().to_string(),
            cause: format!("not a registry arbiter-admin wrote: {e}"),
        })
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|e| Error::Io {
            path: path.display().to_string(),
            cause: e.to_string(),
        })?;
        crate::layout::Layout::new(path.parent().unwrap_or(Path::new(".")))
            .write_public(path, &(text + "\n"))
    }
}
