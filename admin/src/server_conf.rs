//! The nats-server configuration: `nats-server.conf` (listen address, TLS
//! that requires a client certificate signed by the deployment's CA,
//! JetStream's durable settings) includes `resolver.conf` (operator mode: the
//! operator JWT, the system account, a full resolver and the preloaded
//! account JWTs). `revoke` rewrites only `resolver.conf`.

use crate::Result;
use crate::layout::Layout;
use crate::registry::Registry;

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
  # fsync every write before acknowledging it (see README, Durability).
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
    layout.write_public(&layout.server_file("resolver.conf"), &resolver)
}
