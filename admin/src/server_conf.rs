//! The nats-server configuration: `nats-server.conf` (listen address, TLS
//! that requires a client certificate signed by the deployment's CA,
//! JetStream's durable settings) includes `resolver.conf` (operator mode: the
//! operator JWT, the system account, a full resolver and the preloaded
//! account JWTs). `revoke` rewrites only `resolver.conf`.
//!
//! A deployment with a cluster also gets one file per node,
//! `<node>.conf`: the same TLS and JetStream settings, its own
//! `server_name` and resolver directory, and a `cluster` block whose routes
//! use mutual TLS with the deployment's CA and a route password kept in
//! `routes.conf` (owner-only). The operator and accounts they share are in
//! `accounts.conf`, which `revoke` rewrites with `resolver.conf`.

use crate::Result;
use crate::layout::Layout;
use crate::registry::{Cluster, Registry};

/// The user name of the routes between the nodes of a cluster.
const ROUTE_USER: &str = "route";

/// Writes `routes.conf` (owner-only): the route password the nodes check,
/// and the route of every node, carrying it.
pub(crate) fn write_routes(layout: &Layout, cluster: &Cluster, password: &str) -> Result<()> {
    let mut routes = String::new();
    for node in &cluster.nodes {
        routes.push_str(&format!(
            "  \"nats-route://{ROUTE_USER}:{password}@{}:{}\"\n",
            node.host, node.route_port
        ));
    }
    let text = format!(
        r#"# The routes of cluster "{name}", written by `arbiter-admin init`: keep
# this file private (it holds the route password). Included by every node's
# cluster block.
authorization {{
  user: "{ROUTE_USER}"
  password: "{password}"
  timeout: 2
}}
routes: [
{routes}]
"#,
        name = cluster.name,
    );
    layout.write_secret(&layout.server_file("routes.conf"), &text)
}

/// Writes both files. `accounts` are `(public key, JWT)` pairs to preload.
pub(crate) fn write(
    layout: &Layout,
    registry: &Registry,
    operator_jwt: &str,
    accounts: &[(&String, &String)],
) -> Result<()> {
    let server = registry.server_root.join("server");
    let path = |name: &str| server.join(name).display().to_string();
    let main = format!(
        r#"# nats-server for Arbiter, written by `arbiter-admin init`. Nobody connects
# without a credential it issued: TLS verifies every client's certificate
# against the deployment's CA, and operator mode checks every user's JWT.
#   nats-server -c {conf} -sd <store dir>
# Revoking a credential (`arbiter-admin revoke NAME`) rewrites resolver.conf and
# pushes the change to the running server; a reload (SIGHUP) also applies it.
listen: "{listen}"
max_payload: 1MB
# The CONNECT line carries the user JWT, and a role's permissions make it long.
max_control_line: 16KB

tls {{
  cert_file: "{cert}"
  key_file: "{key}"
  ca_file: "{ca}"
  verify: true
  timeout: 2
}}

include "resolver.conf"

jetstream {{
  # fsync every write before acknowledging it (see docs/durability.md).
  sync_interval: always
}}
"#,
        conf = path("nats-server.conf"),
        listen = registry.listen,
        cert = path("server-cert.pem"),
        key = path("server-key.pem"),
        ca = path("ca.pem"),
    );
    let mut preload = String::new();
    for (key, jwt) in accounts {
        preload.push_str(&format!("  {key}: \"{jwt}\"\n"));
    }
    let resolver = format!(
        r#"# Operator mode, written by arbiter-admin. Do not edit: `arbiter-admin revoke`
# rewrites this file.
operator: "{operator_jwt}"
system_account: "{system}"
resolver {{
  type: full
  dir: "{dir}"
  allow_delete: false
  interval: "2m"
  timeout: "1.9s"
}}
resolver_preload {{
{preload}}}
"#,
        system = registry.system_account,
        dir = registry.resolver_dir.display(),
    );
    layout.write_public(&layout.server_file("nats-server.conf"), &main)?;
    layout.write_public(&layout.server_file("resolver.conf"), &resolver)?;
    let Some(cluster) = &registry.cluster else {
        return Ok(());
    };
    let accounts = format!(
        r#"# Operator mode for every node of the cluster, written by arbiter-admin. Do
# not edit: `arbiter-admin revoke` rewrites this file.
operator: "{operator_jwt}"
system_account: "{system}"
resolver_preload {{
{preload}}}
"#,
        system = registry.system_account,
    );
    layout.write_public(&layout.server_file("accounts.conf"), &accounts)?;
    let host = registry
        .listen
        .rsplit_once(':')
        .map_or("0.0.0.0", |(host, _)| host);
    for node in &cluster.nodes {
        let text = format!(
            r#"# Node {node} of the NATS cluster "{cluster}" for Arbiter, written by
# `arbiter-admin init`. Each node runs from its own file and store:
#   nats-server -c {conf} -sd <this node's store dir>
# Clients list every node: NATS_URL={urls}
server_name: "{node}"
listen: "{host}:{client_port}"
max_payload: 1MB
max_control_line: 16KB

tls {{
  cert_file: "{cert}"
  key_file: "{key}"
  ca_file: "{ca}"
  verify: true
  timeout: 2
}}

include "accounts.conf"
resolver {{
  type: full
  dir: "{resolver_dir}/{node}"
  allow_delete: false
  interval: "2m"
  timeout: "1.9s"
}}

jetstream {{
  # fsync every write before acknowledging it (see docs/durability.md).
  sync_interval: always
}}

cluster {{
  name: "{cluster}"
  listen: "{host}:{route_port}"
  # Routes: mutual TLS with the deployment's CA, and the route password.
  tls {{
    cert_file: "{cert}"
    key_file: "{key}"
    ca_file: "{ca}"
    verify: true
    timeout: 2
  }}
  include "routes.conf"
}}
"#,
            node = node.name,
            cluster = cluster.name,
            conf = path(&format!("{}.conf", node.name)),
            urls = registry.url,
            client_port = node.client_port,
            route_port = node.route_port,
            cert = path("server-cert.pem"),
            key = path("server-key.pem"),
            ca = path("ca.pem"),
            resolver_dir = registry.resolver_dir.display(),
        );
        layout.write_public(&layout.server_file(&format!("{}.conf", node.name)), &text)?;
    }
    Ok(())
}
