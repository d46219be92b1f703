//! `arbiter-web`: flags, logging, then [`arbiter_web::serve`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "arbiter-web",
    version,
    about = "The Arbiter's sessions in a browser: watch, answer, stop and approve."
)]
struct Cli {
    /// Where to listen. This machine only by default; another address
    /// needs --tls-cert, or --plain-http-beyond-loopback behind a proxy that speaks TLS.
    #[arg(long, env = "ARBITER_WEB_LISTEN", default_value = arbiter_web::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// A file holding the access token (one line). Without it (or
    /// ARBITER_WEB_TOKEN) a fresh token is made and printed once.
    #[arg(long, env = "ARBITER_WEB_TOKEN_FILE", value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// The access token itself (prefer --token-file: an environment is easier to read).
    #[arg(
        long = "token",
        env = "ARBITER_WEB_TOKEN",
        hide_env_values = true,
        hide = true
    )]
    token: Option<String>,
    /// The certificate (PEM) to serve HTTPS with; `arbiter-admin web-cert` issues one.
    #[arg(
        long = "tls-cert",
        env = "ARBITER_WEB_TLS_CERT",
        value_name = "PATH",
        requires = "web_key"
    )]
    web_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(
        long = "tls-key",
        env = "ARBITER_WEB_TLS_KEY",
        value_name = "PATH",
        requires = "web_cert"
    )]
    web_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback: only behind a
    /// reverse proxy (or a published port) that is itself private or speaks TLS.
    #[arg(long, env = "ARBITER_WEB_PLAIN_HTTP_BEYOND_LOOPBACK")]
    plain_http_beyond_loopback: bool,
    /// Seconds a session no tab shows stays followed.
    #[arg(long, default_value_t = 10)]
    linger_secs: u64,
    #[command(flatten)]
    nats: arbiter_bus::cli::NatsArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "{}",
                arbiter_console::inert::block("arbiter-web: ", &format!("{e:#}"))
            );
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let tls = cli.web_cert.clone().zip(cli.web_key.clone());
    if tls.is_none() && !cli.listen.ip().is_loopback() && !cli.plain_http_beyond_loopback {
        anyhow::bail!(
            "refusing to serve plain HTTP on {}: the token and the cookie would cross the network in the clear. Give --tls-cert and --tls-key, listen on 127.0.0.1, or say --plain-http-beyond-loopback behind a proxy that speaks TLS",
            cli.listen
        );
    }
    let given = match (&cli.token_file, &cli.token) {
        (Some(path), _) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read the token file {}: {e}", path.display()))?
                .trim()
                .to_owned(),
        ),
        (None, Some(token)) => Some(token.trim().to_owned()),
        (None, None) => None,
    };
    if given.as_ref().is_some_and(|t| t.len() < 16) {
        anyhow::bail!(
            "the access token must be at least 16 characters (arbiter-web makes a 43-character one when given none)"
        );
    }
    let made = given.is_none();
    let token = match given {
        Some(token) => token,
        None => arbiter_web::auth::random_token()?,
    };
    let nats = cli.nats.options();
    let identity = nats.credential_name().unwrap_or_else(|| "web".to_owned());
    let config = arbiter_web::Config {
        listen: cli.listen,
        nats,
        identity,
        token,
        tls,
        linger: Duration::from_secs(cli.linger_secs),
        token_made: made,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(arbiter_web::run(config, async {
        let _ = tokio::signal::ctrl_c().await;
    }))
}
