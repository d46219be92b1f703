//! `arbiter-mcp`: Arbiter as an MCP server. Any MCP client (Claude Code,
//! Codex, an SDK) can start a session with a brief, send it lines, follow
//! its status and its log, and stop it, through six tools (`tools.rs`).
//! It is a console to the system: it connects on a console credential,
//! sends the human's lines with the console's own parsing and feed
//! (`send.rs`), and reads what a console reads (`link.rs`, `log.rs`,
//! `report.rs`). It speaks MCP on stdio by default, or streamable HTTP
//! behind a bearer token (`http.rs`, `gate.rs`); its logs go to stderr.

#![deny(clippy::print_stdout, clippy::print_stderr)]

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
pub mod gate;
mod http;
pub mod link;
pub mod log;
pub mod report;
mod send;
mod tools;

use std::future::Future;
use std::net::SocketAddr;

use arbiter_bus::NatsOptions;
use rmcp::ServiceExt as _;
use tokio_util::sync::CancellationToken;

pub use gate::Token;
pub use tools::Arbiter;

/// What can stop `arbiter-mcp` from serving.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the MCP session over stdio could not start: {0}")]
    Stdio(String),
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
}

pub type Result<T> = std::result::Result<T, McpError>;

/// How clients reach it.
#[derive(Debug, Clone)]
pub enum Transport {
    /// One client, on this process's stdin and stdout.
    Stdio,
    /// Streamable HTTP at `http://<listen>/mcp`, for whoever has the token.
    Http {
        listen: SocketAddr,
        token: Token,
        /// Host names beyond loopback the server answers to (rmcp checks
        /// the `Host` header against DNS rebinding).
        allowed_hosts: Vec<String>,
    },
}

/// Everything `arbiter-mcp` needs, resolved from flags and env.
#[derive(Debug, Clone)]
pub struct Config {
    /// The NATS connection, on a console credential.
    pub nats: NatsOptions,
    /// The console name its lines go under: its credential's.
    pub identity: String,
    pub transport: Transport,
}

/// Serves MCP until the client leaves (stdio) or `shutdown` completes. On
/// HTTP it first prints where it listens, once, on stdout (which is not the
/// MCP channel there); never the token.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let server = Arbiter::new(link::Link::start(config.nats, config.identity));
    match config.transport {
        Transport::Stdio => stdio(server, shutdown).await,
        Transport::Http {
            listen,
            token,
            allowed_hosts,
        } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|source| McpError::Listen {
                    addr: listen,
                    source,
                })?;
            let addr = listener.local_addr().map_err(McpError::Http)?;
            #[allow(clippy::print_stdout)]
            {
                println!("arbiter-mcp: serving MCP on http://{addr}{}", http::PATH);
            }
            tracing::info!(%addr, path = http::PATH, "serving MCP over streamable HTTP");
            let stop = CancellationToken::new();
            let app = http::router(
                server,
                std::sync::Arc::new(gate::Gate::new(&token)),
                &allowed_hosts,
                stop.clone(),
            );
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    shutdown.await;
                    stop.cancel();
                })
                .await
                .map_err(McpError::Http)
        }
    }
}

/// One client on stdin and stdout, until it closes them or `shutdown`.
async fn stdio(server: Arbiter, shutdown: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(shutdown);
    let running = tokio::select! {
        running = server.serve(rmcp::transport::stdio_pipes()) => {
            running.map_err(|e| McpError::Stdio(e.to_string()))?
        }
        () = &mut shutdown => return Ok(()),
    };
    tracing::info!("serving MCP on stdio");
    let token = running.cancellation_token();
    tokio::select! {
        quit = running.waiting() => {
            tracing::info!(reason = ?quit.ok(), "the client left");
        }
        () = &mut shutdown => token.cancel(),
    }
    Ok(())
}
