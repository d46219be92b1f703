//! `arbiter-mcp`: flags, logging (to stderr: stdout is the MCP channel on
//! stdio), then [`arbiter_mcp::run`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The environment variable that may hold the HTTP access token.
const TOKEN_ENV: &str = "ARBITER_MCP_TOKEN";

#[derive(Debug, Parser)]
#[command(
    name = "arbiter-mcp",
    version,
    about = "Arbiter as an MCP server: start, steer, follow and stop Arbiter sessions from any MCP client.",
    long_about = "Arbiter as an MCP server: start, steer, follow and stop Arbiter sessions from any \
                  MCP client. It speaks MCP on stdin and stdout unless --http is given, and \
                  connects to NATS on a console credential (--creds, or NATS_CREDS)."
)]
struct Cli {
    /// Serve streamable HTTP on this address (at /mcp) instead of stdio.
    /// It needs an access token (--token-file, or ARBITER_MCP_TOKEN);
    /// an address beyond loopback also needs --plain-http-beyond-loopback.
    #[arg(long, env = "ARBITER_MCP_HTTP", value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// A file holding the HTTP access token (one line, 16 characters or
    /// more). ARBITER_MCP_TOKEN may hold the token itself instead.
    #[arg(long, env = "ARBITER_MCP_TOKEN_FILE", value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback: only behind a
    /// proxy that speaks TLS, or on a network that is itself private.
    #[arg(long, env = "ARBITER_MCP_PLAIN_HTTP_BEYOND_LOOPBACK")]
    plain_http_beyond_loopback: bool,
    /// A host name (or host:port) clients beyond loopback reach the server
    /// by; the `Host` header is checked against these and loopback's.
    #[arg(
        long = "allowed-host",
        env = "ARBITER_MCP_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    allowed_hosts: Vec<String>,
    #[command(flatten)]
    nats: arbiter_bus::cli::NatsArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "{}",
                arbiter_console::inert::block("arbiter-mcp: ", &format!("{e:#}"))
            );
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let transport = match cli.http {
        None => arbiter_mcp::Transport::Stdio,
        Some(listen) => {
            if !listen.ip().is_loopback() && !cli.plain_http_beyond_loopback {
                anyhow::bail!(
                    "refusing to serve plain HTTP on {listen}: the token would cross the network \
                     in the clear. Listen on 127.0.0.1, or say --plain-http-beyond-loopback \
                     behind a proxy that speaks TLS"
                );
            }
            let raw = match (&cli.token_file, std::env::var(TOKEN_ENV)) {
                (Some(path), _) => std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read the token file {}: {e}", path.display())
                })?,
                (None, Ok(token)) => token,
                (None, Err(_)) => anyhow::bail!(
                    "--http needs an access token: give --token-file PATH (or \
                     ARBITER_MCP_TOKEN_FILE), or set {TOKEN_ENV}; every request must then carry \
                     `Authorization: Bearer <token>`"
                ),
            };
            let token = arbiter_mcp::Token::new(&raw).map_err(anyhow::Error::msg)?;
            arbiter_mcp::Transport::Http {
                listen,
                token,
                allowed_hosts: cli.allowed_hosts.clone(),
            }
        }
    };
    let nats = cli.nats.options();
    let identity = nats
        .credential_name()
        .unwrap_or_else(|| arbiter_console::DEFAULT_IDENTITY.to_owned());
    let config = arbiter_mcp::Config {
        nats,
        identity,
        transport,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(arbiter_mcp::run(
        config,
        arbiter_bus::cli::shutdown_signal(),
    ))?;
    // A read of stdin may still be waiting on a blocking thread.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}
