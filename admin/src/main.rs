//! `arbiter-admin`: credentials and setup for a secure Arbiter deployment.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use arbiter_admin::{InitOptions, Pushed};
use arbiter_bus::cli::NatsArgs;
use arbiter_protocol::roles::NatsRole;
use clap::{Parser, Subcommand};

/// Makes and keeps a deployment's NATS secure: the server config, a CA with
/// server and client certificates, one credential per role; more credentials
/// and revocations; the streams.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// The admin directory (keys, CA, server config, credential bundles).
    #[arg(
        long,
        env = "ARBITER_ADMIN_DIR",
        default_value = "arbiter-secrets",
        global = true
    )]
    dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a new deployment: server config, CA and certificates, and one
    /// credential bundle per role (admin, coordinator, worker, console).
    Init {
        /// Another name (DNS or IP) the server's certificate is valid for; repeatable.
        #[arg(long = "san", value_name = "NAME")]
        server_names: Vec<String>,
        /// A pool the first worker credential serves; repeatable (default: default).
        #[arg(long = "pool")]
        pools: Vec<String>,
        /// Where the server listens.
        #[arg(long, default_value = "0.0.0.0:4222")]
        listen: String,
        /// The URL clients reach the server at (written into each bundle's env file).
        #[arg(long, default_value = "tls://127.0.0.1:4222")]
        url: String,
        /// This directory as the server sees it (for example where a container mounts it).
        #[arg(long)]
        server_root: Option<PathBuf>,
        /// Where the server keeps the account JWTs pushed to it (default <server root>/server/jwt).
        #[arg(long)]
        resolver_dir: Option<PathBuf>,
        /// Days the certificates are valid.
        #[arg(long, default_value_t = 730)]
        days: i64,
        /// Replace an existing deployment: every credential it issued stops working.
        #[arg(long)]
        force: bool,
        /// A node of a NATS cluster, NAME@HOST[:CLIENT_PORT[:ROUTE_PORT]]
        /// (ports 4222 and 6222 by default); repeat for each node (3 or
        /// more). Each gets server/NAME.conf; clients get every node's URL.
        #[arg(long = "node", value_name = "NAME@HOST", value_parser = arbiter_admin::ClusterNode::parse)]
        nodes: Vec<arbiter_admin::ClusterNode>,
        /// The cluster's name, with --node.
        #[arg(long, default_value = "arbiter")]
        cluster_name: String,
    },
    /// Issue one more credential bundle (creds/<NAME>/); nothing changes on the server.
    Issue {
        /// admin, coordinator, worker, console or web.
        role: String,
        /// The credential's name: a console's identity, a worker's name (letters, digits, - or _).
        name: String,
        /// A pool the worker serves; repeatable (default: default).
        #[arg(long = "pool")]
        pools: Vec<String>,
        /// A session the console may speak in (its lines, `/stop`, approval
        /// answers); repeatable (default: every session).
        #[arg(long = "session")]
        sessions: Vec<String>,
        #[arg(long, default_value_t = 730)]
        days: i64,
    },
    /// Issue a certificate for `arbiter-web`'s HTTPS, signed by this
    /// deployment's CA: web/cert.pem and web/key.pem (browsers must trust ca/ca.pem).
    WebCert {
        /// A host name or IP address the browser reaches it by; repeatable.
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, default_value_t = 397)]
        days: i64,
    },
    /// Revoke a credential: its connections are closed and it is refused from now on.
    Revoke {
        name: String,
        /// Rewrite the server's files only; apply them with a reload (SIGHUP).
        #[arg(long)]
        no_push: bool,
        #[command(flatten)]
        nats: NatsArgs,
    },
    /// List the credentials issued, revoked ones included.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Create the streams, buckets and each pool's summons consumer (as the admin credential).
    Setup {
        /// A pool whose summons consumer to create; repeatable (default: default).
        #[arg(long = "pool")]
        pools: Vec<String>,
        /// Wait up to this many seconds for the server to come up, rather than
        /// failing at once (a start-up step, as compose.yaml runs it).
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
        /// Bytes each stream and bucket may hold (applied to existing streams too).
        #[arg(long, env = "ARBITER_STREAM_MAX_BYTES", default_value_t = arbiter_bus::retention::DEFAULT_STREAM_MAX_BYTES)]
        stream_max_bytes: i64,
        #[command(flatten)]
        nats: NatsArgs,
    },
    /// List, archive or delete sessions (as the admin credential).
    Sessions {
        #[command(subcommand)]
        action: SessionsAction,
    },
}

#[derive(Debug, Subcommand)]
enum SessionsAction {
    /// Every session: id, live / idle / archived, last activity, log entries.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        nats: NatsArgs,
    },
    /// Move a session's log and records into one compressed archive object
    /// and purge its live subjects; `arbiter-console` still reads it.
    Archive {
        session_id: String,
        /// Archive even a live session (an Arbiter turn in flight, an Orchestrator active).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        nats: NatsArgs,
    },
    /// Delete a session for good: its live subjects, its archive and its status.
    Delete {
        session_id: String,
        /// Delete even a live session.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        nats: NatsArgs,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("arbiter-admin: {}", arbiter_bus::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Init {
            server_names,
            pools,
            listen,
            url,
            server_root,
            resolver_dir,
            days,
            force,
            nodes,
            cluster_name,
        } => {
            let cluster = (!nodes.is_empty()).then_some(arbiter_admin::Cluster {
                name: cluster_name,
                nodes,
            });
            let options = InitOptions {
                server_names,
                pools: if pools.is_empty() {
                    vec![arbiter_protocol::subjects::DEFAULT_POOL.into()]
                } else {
                    pools
                },
                listen,
                url,
                server_root,
                resolver_dir,
                days,
                force,
                cluster,
            };
            let registry = arbiter_admin::init(&cli.dir, &options)?;
            let d = cli.dir.display();
            println!("wrote a new deployment to {d}:");
            match &registry.cluster {
                None => println!(
                    "  server config   {d}/server/nats-server.conf  (run: nats-server -c {d}/server/nats-server.conf -sd <store dir>)"
                ),
                Some(cluster) => {
                    for node in &cluster.nodes {
                        println!(
                            "  node {:<10} {d}/server/{}.conf  (run: nats-server -c {d}/server/{}.conf -sd <its store dir>)",
                            node.name, node.name, node.name
                        );
                    }
                    println!(
                        "  clients use    NATS_URL={}  ARBITER_REPLICAS=3",
                        registry.url
                    );
                }
            }
            for user in &registry.users {
                println!(
                    "  {:<12}    {d}/creds/{}/  (source its env file)",
                    user.role.as_str(),
                    user.name
                );
            }
            println!(
                "the server's certificate names: {}",
                registry.server_names.join(", ")
            );
            println!("admin-only, never on a worker's host nor where its sandbox shows:");
            println!("  {d}/keys/  {d}/ca/   they issue credentials and certificates");
            println!("  {d}/admin.json       the registry of what was issued");
            println!("  {d}/server/          the server's key and config (the NATS host only)");
            println!("  {d}/creds/<name>/    each bundle goes to its own process only");
            println!(
                "a worker is given its own bundle alone (copy {d}/creds/worker/ to its host); \
                 its sandbox shows neither it nor this directory (docs/security.md)"
            );
        }
        Command::Issue {
            role,
            name,
            pools,
            sessions,
            days,
        } => {
            let role = NatsRole::parse(&role).with_context(|| {
                format!("unknown role {role:?}: admin, coordinator, worker, console or web")
            })?;
            let scope = arbiter_admin::Scope {
                pools: &pools,
                sessions: &sessions,
            };
            let record = arbiter_admin::issue(&cli.dir, role, &name, scope, days)?;
            println!(
                "issued {} credential {:?}{}{}: {}/creds/{}/",
                record.role,
                record.name,
                if record.pools.is_empty() {
                    String::new()
                } else {
                    format!(" (pools {})", record.pools.join(", "))
                },
                if record.sessions.is_empty() {
                    String::new()
                } else {
                    format!(" (sessions {})", record.sessions.join(", "))
                },
                cli.dir.display(),
                record.name
            );
        }
        Command::WebCert { names, days } => {
            let out = arbiter_admin::issue_web_cert(&cli.dir, &names, days)?;
            println!(
                "issued the arbiter-web certificate for {}: {d}/cert.pem and {d}/key.pem (browsers trust {ca})",
                names.join(", "),
                d = out.display(),
                ca = cli.dir.join("ca").join("ca.pem").display()
            );
        }
        Command::Revoke {
            name,
            no_push,
            nats,
        } => {
            let url = (!no_push).then_some(nats.url.as_str());
            let pushed = runtime.block_on(arbiter_admin::revoke(&cli.dir, &name, url))?;
            match pushed {
                Pushed::Live => println!(
                    "revoked {name:?}: the server closed its connections and refuses it from now on"
                ),
                Pushed::NotPushed(why) => println!(
                    "revoked {name:?} in {}/server/resolver.conf; not pushed to a server ({why}): reload it \
                     (`nats-server --signal reload`; with compose.yaml, \
                     `docker compose run --rm init && docker compose kill -s HUP nats`)",
                    cli.dir.display()
                ),
            }
        }
        Command::List { json } => {
            for user in arbiter_admin::list(&cli.dir)? {
                if json {
                    println!("{}", serde_json::to_string(&user)?);
                } else {
                    let state = match user.revoked_at {
                        Some(at) => format!(
                            "revoked {}",
                            chrono::DateTime::from_timestamp(at, 0)
                                .map_or(at.to_string(), |t| t.to_rfc3339())
                        ),
                        None => "active".into(),
                    };
                    println!(
                        "{:<20} {:<12} {:<16} {}",
                        user.name,
                        user.role.as_str(),
                        user.pools.join(","),
                        state
                    );
                }
            }
        }
        Command::Sessions { action } => runtime.block_on(sessions(action))?,
        Command::Setup {
            pools,
            wait,
            stream_max_bytes,
            nats,
        } => {
            let pools = if pools.is_empty() {
                vec![arbiter_protocol::subjects::DEFAULT_POOL.to_owned()]
            } else {
                pools
            };
            runtime.block_on(arbiter_admin::setup(
                &nats.options(),
                &pools,
                wait.map(std::time::Duration::from_secs),
                arbiter_bus::retention::Limits { stream_max_bytes },
            ))?;
            println!(
                "streams, buckets and the summons consumers of {} are in place",
                pools.join(", ")
            );
        }
    }
    Ok(())
}

async fn sessions(action: SessionsAction) -> anyhow::Result<()> {
    use arbiter_admin::sessions;
    match action {
        SessionsAction::List { json, nats } => {
            let all = sessions::list(&nats.options()).await?;
            if all.is_empty() {
                eprintln!("no sessions");
            }
            for status in &all {
                if json {
                    println!("{}", serde_json::to_string(status)?);
                } else {
                    println!("{}", sessions::row(status));
                }
            }
        }
        SessionsAction::Archive {
            session_id,
            force,
            nats,
        } => {
            let r = sessions::archive(&nats.options(), &session_id, force).await?;
            println!(
                "session {session_id} archived: {} log entries, {} records, {} Orchestrators; {} bytes live -> {} bytes archived",
                r.log_entries, r.records, r.orchestrators, r.live_bytes, r.archive_bytes
            );
        }
        SessionsAction::Delete {
            session_id,
            force,
            nats,
        } => {
            let r = sessions::delete(&nats.options(), &session_id, force).await?;
            println!(
                "session {session_id} deleted: {} log entries, {} records, {} Orchestrators ({} bytes)",
                r.log_entries, r.records, r.orchestrators, r.live_bytes
            );
        }
    }
    Ok(())
}
