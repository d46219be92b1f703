//! The streamable HTTP transport (`--http`): rmcp's service at `/mcp`,
//! every request behind the bearer token ([`crate::gate`]). A request
//! without it gets 401, with a JSON-RPC error that says what is missing,
//! and a log line that says only where it went.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::gate::Gate;
use crate::tools::Arbiter;

/// Where the MCP endpoint is.
pub const PATH: &str = "/mcp";
/// The JSON-RPC error code of a refused request (in the range JSON-RPC
/// leaves to servers).
const UNAUTHORIZED_CODE: i64 = -32001;

/// The routes: the MCP service, behind the gate.
pub fn router(
    server: Arbiter,
    gate: Arc<Gate>,
    allowed_hosts: &[String],
    stop: CancellationToken,
) -> Router {
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(stop);
    if !allowed_hosts.is_empty() {
        // rmcp's default is loopback only (against DNS rebinding); an
        // address beyond it names the host names it answers to.
        let mut hosts = config.allowed_hosts.clone();
        hosts.extend(allowed_hosts.iter().cloned());
        config = config.with_allowed_hosts(hosts);
    }
    let service: StreamableHttpService<Arbiter, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .nest_service(PATH, service)
        .layer(middleware::from_fn_with_state(gate, check))
}

/// Lets a request through only with `Authorization: Bearer <token>`.
async fn check(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if gate.allows(authorization) {
        return next.run(request).await;
    }
    tracing::warn!(
        path = %arbiter_console::inert::one_line(request.uri().path()),
        with_header = authorization.is_some(),
        "refused a request without the right bearer token"
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(refusal()),
    )
        .into_response()
}

/// The body of a 401: a JSON-RPC error, which MCP clients show their user
/// (a plain-text body they replace with a generic "error response").
fn refusal() -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": UNAUTHORIZED_CODE,
            "message": "401 Unauthorized: arbiter-mcp needs `Authorization: Bearer <token>` \
                        (the token it was started with)",
        },
    })
}
