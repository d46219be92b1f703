//! `arbiter-web`: the Arbiter's sessions in a browser. It reads what a
//! console reads and writes what a console writes, on its own `web`
//! credential; it serves pages rendered on the server and live updates over
//! Server-Sent Events. Its security model is in `docs/web.md`: loopback by
//! default, a token printed once and exchanged for an HttpOnly SameSite
//! cookie, a CSRF token on every change, a strict Content-Security-Policy,
//! and everything from the wire shown as text.

#![deny(clippy::print_stderr)]

pub mod auth;
pub mod fleet;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
pub mod hub;
mod live;
pub mod metrics;
mod pages;
pub mod view;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arbiter_bus::{Bus, NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{SessionStatus, subjects};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures::StreamExt as _;
use tokio::sync::watch;

use crate::auth::Gate;

/// The address it listens on unless told otherwise: this machine only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8420";
/// The name its connections give the server.
const CLIENT_NAME: &str = "arbiter-web";
/// Pause between attempts to reach NATS.
const RECONNECT: Duration = Duration::from_secs(1);
/// What every response says about what a page may load and do.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Everything `arbiter-web` needs, resolved from flags and env.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub nats: NatsOptions,
    /// The name its human lines go under: its credential's.
    pub identity: String,
    /// The access token (a fresh one when none was given).
    pub token: String,
    /// A certificate and its key (PEM): HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// How long a session nobody watches stays followed (a reload, the page then its stream).
    pub linger: Duration,
    /// The token was made here (none was given): [`run`] prints it, once.
    pub token_made: bool,
}

/// Binds, prints the address to open (with the token when it was made
/// here: once, on stdout, never in the log, as Jupyter does), and serves
/// until `shutdown`.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let made = config.token_made;
    let bound = bind(config)?;
    let url = bound.url();
    #[allow(clippy::print_stdout)]
    if made {
        println!("arbiter-web: open {url}");
    } else {
        let bare = url.split("?token=").next().unwrap_or(&url);
        println!("arbiter-web: open {bare}?token=<your token>");
    }
    tracing::info!(addr = %bound.addr, "serving");
    serve(bound, shutdown).await
}

/// What the pages share.
pub struct Shared {
    gate: Gate,
    hubs: Arc<hub::Hubs>,
    metrics: metrics::Metrics,
    fleet: fleet::Fleet,
    bus: watch::Receiver<Option<Bus>>,
    /// Bumped on every session status seen.
    changed: watch::Sender<u64>,
    nats_url: String,
    tls: bool,
}

impl Shared {
    fn bus(&self) -> Option<Bus> {
        self.bus.borrow().clone()
    }

    fn unreachable(&self) -> String {
        format!("NATS at {} is not reachable yet", self.nats_url)
    }
}

/// A server bound and ready: its address, and the URL that signs in.
pub struct Bound {
    pub addr: SocketAddr,
    listener: std::net::TcpListener,
    config: Config,
}

impl Bound {
    /// The address to open, with the token: the one line a user needs.
    pub fn url(&self) -> String {
        let scheme = if self.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}/?token={}", self.addr, self.config.token)
    }
}

/// Binds the listening socket (so the caller can say where before serving).
pub fn bind(config: Config) -> anyhow::Result<Bound> {
    let listener = std::net::TcpListener::bind(config.listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    Ok(Bound {
        addr,
        listener,
        config,
    })
}

/// Serves until `shutdown`.
pub async fn serve(
    bound: Bound,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Bound {
        listener, config, ..
    } = bound;
    let (bus_tx, bus) = watch::channel(None);
    let (changed, _) = watch::channel(0);
    let shared = Arc::new(Shared {
        gate: Gate::new(config.token.clone(), config.tls.is_some()),
        hubs: Arc::new(hub::Hubs::new(
            config.nats.clone(),
            config.identity.clone(),
            config.linger,
        )),
        metrics: metrics::Metrics::default(),
        fleet: fleet::Fleet::default(),
        bus,
        changed,
        nats_url: arbiter_bus::redact_url(&config.nats.url),
        tls: config.tls.is_some(),
    });
    let connection = tokio::spawn(stay_connected(config.nats.clone(), bus_tx, shared.clone()));
    let app = router(shared);
    let result = match &config.tls {
        None => {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(anyhow::Error::from)
        }
        Some((cert, key)) => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read the certificate {} and key {}: {e}",
                        cert.display(),
                        key.display()
                    )
                })?;
            let handle = axum_server::Handle::new();
            let stopper = handle.clone();
            tokio::spawn(async move {
                shutdown.await;
                stopper.graceful_shutdown(Some(Duration::from_secs(5)));
            });
            axum_server::from_tcp_rustls(listener, tls)?
                .handle(handle)
                .serve(app.into_make_service())
                .await
                .map_err(anyhow::Error::from)
        }
    };
    connection.abort();
    result
}

/// The routes; every one behind the gate, every response with the headers.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(pages::sessions))
        .route("/events", get(live::sessions))
        .route("/new", post(pages::new_session))
        .route("/approvals", get(pages::approvals))
        .route("/fleet", get(pages::fleet))
        .route("/metrics", get(pages::metrics))
        .route("/s/{id}", get(pages::session))
        .route("/s/{id}/events", get(live::session))
        .route("/s/{id}/send", post(pages::send))
        .route("/s/{id}/stop", post(pages::stop))
        .route("/s/{id}/approve", post(pages::approve))
        .route("/static/web.js", get(script))
        .route("/static/web.css", get(style))
        .layer(middleware::from_fn_with_state(shared.clone(), gate))
        .layer(middleware::from_fn_with_state(shared.clone(), headers))
        .with_state(shared)
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../static/web.js"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../static/web.css"),
    )
        .into_response()
}

/// Every response: no framing, no sniffing, no referrer (a URL may carry
/// the token), no caching, and only this server's own script and style.
async fn headers(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if shared.tls {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    response
}

/// The gate: a `?token=` signs in (a cookie, then the same address without
/// the token); otherwise the login cookie or the bearer token, or 401.
async fn gate(State(shared): State<Arc<Shared>>, mut request: Request, next: Next) -> Response {
    let query = request.uri().query().unwrap_or("");
    if let Some(token) = auth::token_in(query) {
        if !shared.gate.token_matches(token) {
            tracing::warn!(path = %request.uri().path(), "a sign-in with a wrong token was refused");
            return pages::Denied {
                why: "That token is not this server's.".into(),
            }
            .into_response();
        }
        let cookie = match shared.gate.login() {
            Ok(cookie) => cookie,
            Err(e) => {
                tracing::error!(error = %e, "cannot make a login");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        };
        let path = request.uri().path();
        // Only a path of this server: never `//elsewhere`.
        let path = if path.starts_with("//") || path.contains('\\') {
            "/"
        } else {
            path
        };
        let rest = auth::without_token(query);
        let to = if rest.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{rest}")
        };
        let mut response = Redirect::to(&to).into_response();
        response.headers_mut().insert(header::SET_COOKIE, cookie);
        return response;
    }
    match shared.gate.access(request.headers()) {
        Some(access) => {
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        None => pages::Denied {
            why: "This page needs the access token.".into(),
        }
        .into_response(),
    }
}

/// Keeps the process's own connection (for the sessions list, the fleet
/// and the statuses the metrics draw), reconnecting for as long as it takes.
async fn stay_connected(
    nats: NatsOptions,
    bus_tx: watch::Sender<Option<Bus>>,
    shared: Arc<Shared>,
) {
    let mut told = false;
    loop {
        let opened = async {
            let conn = arbiter_bus::connect_with(&nats, CLIENT_NAME, Reach::FailFast).await?;
            let bus = Bus::open(conn, NatsRole::Web, Reach::FailFast).await?;
            anyhow::Ok(bus)
        };
        match opened.await {
            Ok(bus) => {
                tracing::info!("connected to NATS");
                told = false;
                let statuses = bus.client.subscribe(subjects::ALL_SESSION_STATUS).await;
                bus_tx.send_replace(Some(bus));
                match statuses {
                    Ok(mut statuses) => {
                        while let Some(message) = statuses.next().await {
                            if let Ok(status) = arbiter_bus::decode::<SessionStatus>(
                                &message.subject,
                                &message.payload,
                            ) {
                                shared.metrics.record(&status);
                                shared.changed.send_modify(|n| *n += 1);
                            }
                        }
                    }
                    // Without the statuses the charts and the live sessions
                    // table stand still: start over, as after a lost connection.
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot follow the session statuses; connecting again")
                    }
                }
                bus_tx.send_replace(None);
            }
            Err(e) => {
                if !told {
                    tracing::warn!(error = %arbiter_console::inert::one_line(&format!("{e:#}")), "cannot reach NATS yet; trying again every second");
                    told = true;
                }
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}
