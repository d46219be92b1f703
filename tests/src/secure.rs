//! A secure deployment for tests, made the way users make one: `arbiter-admin
//! init` writes the server config (TLS that verifies clients, JWT operator
//! mode) and one credential bundle per role, and a real nats-server runs from
//! that config. Each process connects with its own role's bundle.

use std::path::{Path, PathBuf};

use arbiter_admin::{InitOptions, Pushed};
use arbiter_bus::NatsOptions;
use arbiter_protocol::roles::NatsRole;
use tempfile::TempDir;

use crate::NatsServer;

/// A nats-server started from the config `arbiter-admin init` wrote.
pub struct SecureNats {
    pub server: NatsServer,
    /// The admin directory (keys, CA, bundles).
    pub admin: TempDir,
}

impl SecureNats {
    /// A deployment on 127.0.0.1.
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1", &[]).await
    }

    /// A deployment whose server listens on `addr`, its certificate also
    /// valid for `names`.
    pub async fn start_on(addr: &str, names: &[&str]) -> Self {
        Self::start_in(addr, names, &std::env::temp_dir()).await
    }

    /// [`SecureNats::start_on`] with the admin directory made in `parent`
    /// (a checkout, say: what a sandbox test must find hidden outside `/tmp`).
    pub async fn start_in(addr: &str, names: &[&str], parent: &Path) -> Self {
        let admin = tempfile::Builder::new()
            .prefix("arbiter-admin-")
            .tempdir_in(parent)
            .unwrap_or_else(|e| panic!("cannot create the admin dir: {e}"));
        let mut server_names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        server_names.push(addr.to_owned());
        arbiter_admin::init(
            admin.path(),
            &InitOptions {
                server_names,
                pools: vec!["default".into(), "gpu".into()],
                ..InitOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("arbiter-admin init failed: {e}"));
        let config = admin.path().join("server").join("nats-server.conf");
        let server = NatsServer::start_tls(&config, addr).await;
        Self { server, admin }
    }

    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// The directory of the bundle of credential `name`.
    pub fn bundle(&self, name: &str) -> PathBuf {
        self.admin.path().join("creds").join(name)
    }

    /// Connection options with credential `name`'s bundle.
    pub fn options(&self, name: &str) -> NatsOptions {
        let bundle = self.bundle(name);
        NatsOptions {
            creds: Some(bundle.join("nats.creds")),
            tls_ca: Some(bundle.join("ca.pem")),
            tls_cert: Some(bundle.join("cert.pem")),
            tls_key: Some(bundle.join("key.pem")),
            ..NatsOptions::url(self.url())
        }
    }

    /// The environment a binary connects with as credential `name`.
    pub fn env(&self, name: &str) -> Vec<(&'static str, String)> {
        let o = self.options(name);
        let path = |p: &Option<PathBuf>| {
            p.as_deref()
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_default()
        };
        vec![
            ("NATS_URL", o.url.clone()),
            ("NATS_CREDS", path(&o.creds)),
            ("NATS_CA", path(&o.tls_ca)),
            ("NATS_CERT", path(&o.tls_cert)),
            ("NATS_KEY", path(&o.tls_key)),
        ]
    }

    /// Issues one more credential, as `arbiter-admin issue` does.
    pub fn issue(&self, role: NatsRole, name: &str, pools: &[&str]) {
        let pools: Vec<String> = pools.iter().map(|p| (*p).to_owned()).collect();
        let scope = arbiter_admin::Scope {
            pools: &pools,
            sessions: &[],
        };
        arbiter_admin::issue(self.admin.path(), role, name, scope, 30)
            .unwrap_or_else(|e| panic!("arbiter-admin issue failed: {e}"));
    }

    /// Issues a console credential that may speak in `sessions` only
    /// (`arbiter-admin issue console NAME --session ID`).
    pub fn issue_console_for(&self, name: &str, sessions: &[&str]) {
        let sessions: Vec<String> = sessions.iter().map(|s| (*s).to_owned()).collect();
        let scope = arbiter_admin::Scope {
            pools: &[],
            sessions: &sessions,
        };
        arbiter_admin::issue(self.admin.path(), NatsRole::Console, name, scope, 30)
            .unwrap_or_else(|e| panic!("arbiter-admin issue failed: {e}"));
    }

    /// Revokes credential `name` and pushes the change to the running server.
    pub async fn revoke(&self, name: &str) {
        let pushed = arbiter_admin::revoke(self.admin.path(), name, Some(self.url()))
            .await
            .unwrap_or_else(|e| panic!("arbiter-admin revoke failed: {e}"));
        assert_eq!(
            pushed,
            Pushed::Live,
            "the revocation did not reach the server"
        );
    }
}
