//! The NATS connection flags every binary shares (feature `cli`). Names
//! follow the `nats` CLI (`--creds`, `--nkey`, `--user`, `--password`,
//! `--tlsca`, `--tlscert`, `--tlskey`) and its environment variables
//! (`NATS_URL`, `NATS_CREDS`, `NATS_NKEY`, `NATS_USER`, `NATS_PASSWORD`,
//! `NATS_CA`, `NATS_CERT`, `NATS_KEY`). No value of the environment is ever
//! shown by `--help`.

use std::path::PathBuf;

use crate::connect::{DEFAULT_URL, NatsOptions, Secret};

#[derive(Debug, Clone, clap::Args)]
pub struct NatsArgs {
    /// NATS server URL, or several separated by commas (nats://, tls://).
    #[arg(long = "nats-url", alias = "server", env = "NATS_URL", default_value = DEFAULT_URL, global = true)]
    pub url: String,
    /// User credentials file (JWT and nkey seed), as `arbiter-admin` writes them.
    #[arg(long, env = "NATS_CREDS", value_name = "PATH", global = true)]
    pub creds: Option<PathBuf>,
    /// File holding a user nkey seed.
    #[arg(long, env = "NATS_NKEY", value_name = "PATH", global = true)]
    pub nkey: Option<PathBuf>,
    /// User name (with --password).
    #[arg(long, env = "NATS_USER", hide_env_values = true, global = true)]
    pub user: Option<String>,
    /// Password (never logged; prefer NATS_PASSWORD over the flag).
    #[arg(long, env = "NATS_PASSWORD", hide_env_values = true, global = true)]
    pub password: Option<Secret>,
    /// CA certificate (PEM) that signed the server's certificate.
    #[arg(long = "tlsca", env = "NATS_CA", value_name = "PATH", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for servers that verify clients.
    #[arg(
        long = "tlscert",
        env = "NATS_CERT",
        value_name = "PATH",
        global = true
    )]
    pub tls_cert: Option<PathBuf>,
    /// Client private key (PEM) of --tlscert.
    #[arg(long = "tlskey", env = "NATS_KEY", value_name = "PATH", global = true)]
    pub tls_key: Option<PathBuf>,
    /// Inbox prefix for replies (default: the one the credentials allow, else _INBOX).
    #[arg(long, env = "NATS_INBOX_PREFIX", global = true)]
    pub inbox_prefix: Option<String>,
    /// Copies of each stream and bucket this process creates: 1 on a single
    /// server, 3 on a 3-node cluster. Given, it also changes existing ones
    /// (the coordinator and `arbiter-admin setup` declare them; others ignore it).
    #[arg(long, env = "ARBITER_REPLICAS", value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5), global = true)]
    pub replicas: Option<u8>,
    /// Connect to a NATS server on another machine even without TLS or
    /// without a credential (refused otherwise; on this machine it is only
    /// warned about). For a test network, never a deployment.
    #[arg(long, env = "ARBITER_INSECURE", value_parser = clap::builder::BoolishValueParser::new(), global = true)]
    pub insecure: bool,
}

impl NatsArgs {
    pub fn options(&self) -> NatsOptions {
        NatsOptions {
            url: self.url.clone(),
            creds: self.creds.clone(),
            nkey: self.nkey.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            inbox_prefix: self.inbox_prefix.clone(),
            replicas: self.replicas.map(usize::from),
            insecure: self.insecure,
        }
    }
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM: what `docker stop`,
/// systemd and Kubernetes send. Long-running binaries shut down gracefully
/// on either.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C still stops");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
