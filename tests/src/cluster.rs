//! A 3-node JetStream cluster of real nats-servers, secured the way users
//! secure one: `arbiter-admin init --node …` writes one config per node (TLS
//! that verifies clients, JWT operator mode, routes over mutual TLS with a
//! route password) and one credential bundle per role. Each node runs in its
//! own process with its own store; a test can find the node that leads a
//! stream, kill it with SIGKILL, and start it again on its ports and store.

use std::path::PathBuf;
use std::time::Duration;

use arbiter_admin::{Cluster, ClusterNode, InitOptions};
use arbiter_bus::NatsOptions;
use async_nats::jetstream;
use tempfile::TempDir;

use crate::{NatsServer, eventually};

/// How long a cluster may take to elect its meta leader, or a restarted
/// node to catch up.
const SETTLE: Duration = Duration::from_secs(60);

/// A running cluster, its nodes named `n1`, `n2`, `n3`.
pub struct SecureCluster {
    pub nodes: Vec<NatsServer>,
    names: Vec<String>,
    /// The admin directory (keys, CA, node configs, credential bundles).
    pub admin: TempDir,
}

impl SecureCluster {
    /// Starts three nodes on 127.0.0.1 and waits until JetStream answers
    /// (a meta leader is elected).
    pub async fn start() -> Self {
        let admin = tempfile::Builder::new()
            .prefix("arbiter-admin-cluster-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create the admin dir: {e}"));
        let nodes: Vec<ClusterNode> = (1..=3)
            .map(|i| ClusterNode {
                name: format!("n{i}"),
                host: "127.0.0.1".into(),
                client_port: free_port(),
                route_port: free_port(),
            })
            .collect();
        arbiter_admin::init(
            admin.path(),
            &InitOptions {
                listen: "127.0.0.1:4222".into(),
                pools: vec!["default".into()],
                cluster: Some(Cluster {
                    name: "arbiter-test".into(),
                    nodes: nodes.clone(),
                }),
                ..InitOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("arbiter-admin init --node … failed: {e}"));
        let mut servers = Vec::new();
        for node in &nodes {
            let config = admin
                .path()
                .join("server")
                .join(format!("{}.conf", node.name));
            servers.push(NatsServer::start_node(&config, "127.0.0.1", node.client_port).await);
        }
        let cluster = Self {
            nodes: servers,
            names: nodes.iter().map(|n| n.name.clone()).collect(),
            admin,
        };
        let js = cluster.jetstream("admin").await;
        eventually(
            SETTLE,
            "the cluster to elect a JetStream meta leader",
            || {
                let js = js.clone();
                async move { js.query_account().await.ok().map(|_| ()) }
            },
        )
        .await;
        cluster
    }

    /// Every node's URL, comma-separated, as clients are given them.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The directory of the bundle of credential `name`.
    pub fn bundle(&self, name: &str) -> PathBuf {
        self.admin.path().join("creds").join(name)
    }

    /// Connection options with credential `name`'s bundle and every node's URL.
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

    /// The last lines of every node's log, for a failure's message.
    pub fn logs_tail(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .zip(&self.names)
            .map(|(node, name)| {
                let log = node.log();
                let tail: Vec<&str> = log.lines().rev().take(lines).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- node {name} ({}):\n{}", node.url(), tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The environment a binary connects with as credential `name`.
    pub fn env(&self, name: &str) -> Vec<(&'static str, String)> {
        let bundle = self.bundle(name);
        let path = |file: &str| bundle.join(file).display().to_string();
        vec![
            ("NATS_URL", self.url()),
            ("NATS_CREDS", path("nats.creds")),
            ("NATS_CA", path("ca.pem")),
            ("NATS_CERT", path("cert.pem")),
            ("NATS_KEY", path("key.pem")),
        ]
    }

    /// A JetStream context for credential `name`, over every node.
    pub async fn jetstream(&self, name: &str) -> jetstream::Context {
        let conn = arbiter_bus::connect_with(
            &self.options(name),
            "test-cluster",
            arbiter_bus::Reach::FailFast,
        )
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the cluster as {name}: {e}"));
        jetstream::new(conn.client)
    }

    /// The name of node `i` (`n1`…).
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("no node named {name:?}"))
    }

    /// The node that leads `stream` now (`$JS.API.STREAM.INFO` →
    /// `cluster.leader`), waiting while it has none.
    pub async fn leader_of(&self, js: &jetstream::Context, stream: &str) -> usize {
        let name = eventually(SETTLE, &format!("stream {stream} to have a leader"), || {
            let js = js.clone();
            async move {
                let mut s = js.get_stream(stream).await.ok()?;
                s.info().await.ok()?.cluster.clone()?.leader
            }
        })
        .await;
        self.index_of(&name)
    }

    /// Kills node `i` with SIGKILL, as a crash does.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on its ports and store, and waits until it is
    /// a current replica of every stream in `streams` again.
    pub async fn restart(&mut self, i: usize, js: &jetstream::Context, streams: &[String]) {
        self.nodes[i].restart().await;
        let name = self.names[i].clone();
        for stream in streams {
            eventually(
                SETTLE,
                &format!("node {name} to be a current replica of {stream} again"),
                || {
                    let js = js.clone();
                    let name = name.clone();
                    async move {
                        let mut s = js.get_stream(stream).await.ok()?;
                        let cluster = s.info().await.ok()?.cluster.clone()?;
                        let here = cluster.leader.as_deref() == Some(name.as_str())
                            || cluster.replicas.iter().any(|p| p.name == name && p.current);
                        here.then_some(())
                    }
                },
            )
            .await;
        }
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .zip(&self.names)
            .map(|(n, name)| format!("--- {name}\n{}", n.log()))
            .collect()
    }
}

/// A port free on 127.0.0.1 now (the kernel's choice, released at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}
