//! The pages, rendered on the server (askama escapes every value), and the
//! forms that change something: each checks the login's CSRF token.

use std::sync::Arc;
use std::time::Duration;

use arbiter_protocol::{SessionStatus, subjects};
use askama::Template;
use axum::Extension;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::Utc;
use serde::{Deserialize, Serialize};

use crate::auth::Access;
use crate::view::View;
use crate::{Shared, fleet};

/// How long a session page waits for its log to be replayed before it is
/// drawn as far as it got (the stream brings the rest).
const SETTLE: Duration = Duration::from_secs(3);

/// An error page: the status and one sentence.
pub struct Failure(pub StatusCode, pub String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.1,
        )
            .into_response()
    }
}

fn render(page: impl Template) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a page did not render");
            Failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page did not render".into(),
            )
            .into_response()
        }
    }
}

/// A session id from a path: a subject token, or 404.
fn session_id(id: &str) -> Result<&str, Failure> {
    if subjects::is_valid_token(id) {
        Ok(id)
    } else {
        Err(Failure(
            StatusCode::NOT_FOUND,
            "no such session: a session id is 1 to 64 letters, digits, - or _".into(),
        ))
    }
}

/// Refuses a change whose form does not carry the login's CSRF token, or
/// that another site's page sent.
fn check_change(access: &Access, headers: &HeaderMap, csrf: &str) -> Result<(), Failure> {
    let cross_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "cross-site");
    if cross_site || !access.allows_change(csrf) {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "refused: the form's CSRF token is missing or not this login's; reload the page and try again".into(),
        ));
    }
    Ok(())
}

/// After a change: a script gets 204, a plain form goes back to `to`.
fn done(headers: &HeaderMap, to: &str) -> Response {
    let script = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"));
    if script {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Redirect::to(to).into_response()
    }
}

/// One row of the sessions table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub id: String,
    pub href: String,
    pub state: String,
    pub last: String,
    pub cost: String,
    pub context: String,
    pub attention: String,
}

impl Row {
    pub fn of(s: &SessionStatus, now: chrono::DateTime<Utc>) -> Self {
        let id = arbiter_console::inert::one_line(&s.session_id);
        Self {
            href: format!("/s/{id}"),
            id,
            state: arbiter_console::sessions::state(s),
            last: format!(
                "{} ({})",
                s.at.format("%Y-%m-%d %H:%M:%S UTC"),
                arbiter_console::sessions::ago(now, s.at)
            ),
            cost: s.spend.total.cost_text(),
            context: format!("{:.0} %", s.arbiter_context_pct),
            attention: match (arbiter_console::sessions::attention(s), &s.attention) {
                (Some(what), Some(why)) => {
                    let why = arbiter_console::inert::one_line(&why.summary);
                    let why: String = why.chars().take(160).collect();
                    format!("{what}: {why}")
                }
                (what, _) => what.unwrap_or_default(),
            },
        }
    }
}

/// Every session's status from the bucket (and into the metrics).
pub async fn rows(shared: &Shared) -> Result<Vec<Row>, String> {
    let bus = shared.bus().ok_or_else(|| shared.unreachable())?;
    let statuses = arbiter_console::sessions::list_on(&bus.js)
        .await
        .map_err(|e| arbiter_console::inert::one_line(&e.to_string()))?;
    let now = Utc::now();
    for s in &statuses {
        shared.metrics.record(s);
    }
    Ok(statuses
        .iter()
        .filter(|s| subjects::is_valid_token(&s.session_id))
        .map(|s| Row::of(s, now))
        .collect())
}

#[derive(Template)]
#[template(path = "sessions.html")]
struct SessionsPage {
    csrf: String,
    rows: Vec<Row>,
    trouble: Option<String>,
}

pub async fn sessions(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
) -> Response {
    let (rows, trouble) = match rows(&shared).await {
        Ok(rows) => (rows, None),
        Err(e) => (Vec::new(), Some(format!("cannot list the sessions: {e}"))),
    };
    render(SessionsPage {
        csrf: access.csrf().to_owned(),
        rows,
        trouble,
    })
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// A new session: its id, made here; the first line sent starts it.
pub async fn new_session(
    Extension(access): Extension<Access>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Failure> {
    check_change(&access, &headers, &form.csrf)?;
    let id = uuid::Uuid::now_v7();
    Ok(Redirect::to(&format!("/s/{id}")).into_response())
}

#[derive(Deserialize, Default)]
pub struct SessionQuery {
    #[serde(default)]
    musings: Option<String>,
}

impl SessionQuery {
    pub fn musings(&self) -> bool {
        self.musings
            .as_deref()
            .is_some_and(|m| m == "1" || m == "true")
    }
}

#[derive(Template)]
#[template(path = "session.html")]
struct SessionPage {
    csrf: String,
    session_id: String,
    path: String,
    musings: bool,
    view: Arc<View>,
}

pub async fn session(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
    Path(id): Path<String>,
    Query(query): Query<SessionQuery>,
) -> Result<Response, Failure> {
    let id = session_id(&id)?;
    let hub = shared.hubs.watch(id);
    let view = hub.settled_view(SETTLE).await;
    shared.hubs.release(hub);
    Ok(render(SessionPage {
        csrf: access.csrf().to_owned(),
        session_id: id.to_owned(),
        path: format!("/s/{id}"),
        musings: query.musings(),
        view,
    }))
}

#[derive(Deserialize)]
pub struct SendForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    text: String,
}

/// Sends a line typed into the page, as the console's input does: words,
/// or a command (`/stop`, `/allow 3`, `/budget …`).
pub async fn send(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<SendForm>,
) -> Result<Response, Failure> {
    let id = session_id(&id)?;
    check_change(&access, &headers, &form.csrf)?;
    let text = form.text.trim_end().to_owned();
    if text.trim().is_empty() {
        return Err(Failure(StatusCode::BAD_REQUEST, "nothing to send".into()));
    }
    line(&shared, id, text).await?;
    Ok(done(&headers, &format!("/s/{id}")))
}

pub async fn stop(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Failure> {
    let id = session_id(&id)?;
    check_change(&access, &headers, &form.csrf)?;
    line(&shared, id, "/stop".to_owned()).await?;
    Ok(done(&headers, &format!("/s/{id}")))
}

#[derive(Deserialize)]
pub struct ApproveForm {
    #[serde(default)]
    csrf: String,
    approval: u32,
    answer: String,
}

pub async fn approve(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ApproveForm>,
) -> Result<Response, Failure> {
    let id = session_id(&id)?;
    check_change(&access, &headers, &form.csrf)?;
    let answer = match form.answer.as_str() {
        "allow" | "always" | "deny" => form.answer.as_str(),
        _ => {
            return Err(Failure(
                StatusCode::BAD_REQUEST,
                "an answer is allow, always or deny".into(),
            ));
        }
    };
    line(&shared, id, format!("/{answer} {}", form.approval)).await?;
    Ok(done(&headers, &format!("/s/{id}")))
}

/// Hands a line to the session's hub (started for it if no tab watches).
async fn line(shared: &Shared, id: &str, text: String) -> Result<(), Failure> {
    let hub = shared.hubs.watch(id);
    let sent = hub.line(text).await;
    shared.hubs.release(hub);
    if sent {
        Ok(())
    } else {
        Err(Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "the session's feed stopped; reload the page".into(),
        ))
    }
}

struct WaitingRow {
    session: String,
    href: String,
    text: String,
}

#[derive(Template)]
#[template(path = "approvals.html")]
struct ApprovalsPage {
    csrf: String,
    waiting: Vec<WaitingRow>,
    trouble: Option<String>,
}

pub async fn approvals(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
) -> Response {
    let mut trouble = None;
    let mut waiting = Vec::new();
    match shared.bus() {
        None => trouble = Some(shared.unreachable()),
        Some(bus) => match arbiter_console::sessions::list_on(&bus.js).await {
            Err(e) => trouble = Some(arbiter_console::inert::one_line(&e.to_string())),
            Ok(statuses) => {
                for s in statuses
                    .iter()
                    .filter(|s| subjects::is_valid_token(&s.session_id))
                {
                    for a in &s.approvals {
                        waiting.push(WaitingRow {
                            session: s.session_id.clone(),
                            href: format!("/s/{}", s.session_id),
                            text: arbiter_console::inert::one_line(&format!(
                                "approval {} of {} asks to run {}: {} (until {})",
                                a.approval,
                                arbiter_protocol::member_name(a.number, a.member),
                                a.tool,
                                a.summary,
                                a.deadline.format("%H:%M:%S UTC")
                            )),
                        });
                    }
                }
            }
        },
    }
    render(ApprovalsPage {
        csrf: access.csrf().to_owned(),
        waiting,
        trouble,
    })
}

struct WorkerRow {
    worker_id: String,
    pool: String,
    runtime: String,
    slots_used: usize,
    slots_free: usize,
    lanes: String,
    orchestrators: usize,
    heartbeat: String,
    answering: bool,
}

#[derive(Template)]
#[template(path = "fleet.html")]
struct FleetPage {
    csrf: String,
    workers: Vec<WorkerRow>,
    trouble: Option<String>,
}

pub async fn fleet(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
) -> Response {
    let (workers, trouble) = match shared.bus() {
        None => (Vec::new(), Some(shared.unreachable())),
        Some(bus) => match shared.fleet.look(&bus.client).await {
            Ok(workers) => (workers, None),
            Err(e) => (Vec::new(), Some(format!("cannot ask the fleet: {e}"))),
        },
    };
    let now = Utc::now();
    let one = arbiter_console::inert::one_line;
    let workers = workers
        .into_iter()
        .map(|w: fleet::Worker| WorkerRow {
            worker_id: one(&w.worker_id),
            pool: one(&w.pool),
            runtime: one(&w.runtime),
            slots_used: w.slots_used,
            slots_free: w.slots_free,
            lanes: one(&w.lanes),
            orchestrators: w.orchestrators,
            heartbeat: if w.answering {
                "now".to_owned()
            } else {
                format!(
                    "{}: not answering",
                    arbiter_console::sessions::ago(now, w.seen)
                )
            },
            answering: w.answering,
        })
        .collect();
    render(FleetPage {
        csrf: access.csrf().to_owned(),
        workers,
        trouble,
    })
}

#[derive(Deserialize, Default)]
pub struct MetricsQuery {
    session: Option<String>,
}

#[derive(Template)]
#[template(path = "metrics.html")]
struct MetricsPage {
    csrf: String,
    cost_chart: String,
    generations_of: Option<String>,
    generations_chart: String,
}

pub async fn metrics(
    State(shared): State<Arc<Shared>>,
    Extension(access): Extension<Access>,
    Query(query): Query<MetricsQuery>,
) -> Response {
    // The bucket's latest statuses first, so a fresh start has a point each.
    let _ = rows(&shared).await;
    let (generations_of, generations_chart) =
        shared.metrics.generations_svg(query.session.as_deref());
    render(MetricsPage {
        csrf: access.csrf().to_owned(),
        cost_chart: shared.metrics.cost_svg(),
        generations_of,
        generations_chart,
    })
}

#[derive(Template)]
#[template(path = "denied.html")]
pub struct Denied {
    pub why: String,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let body = self.render().unwrap_or_else(|_| "401: sign in".to_owned());
        (StatusCode::UNAUTHORIZED, Html(body)).into_response()
    }
}
