//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arbiter_console::app::{App, FeedEvent};
use arbiter_protocol::{ArbiterDelta, LogEntry, OrchestratorStatus, SessionStatus};
use askama::Template;
use axum::extract::{Form, FromRequest, Query};
use axum::http::{HeaderMap, HeaderValue, Request, header};

use crate::auth::{Gate, cookie, token_in, without_token};
use crate::view::View;

/// The session page's own template (`templates/session.html`), drawn as
/// `pages::session` draws it.
#[derive(Template)]
#[template(path = "session.html")]
struct SessionPage {
    csrf: String,
    session_id: String,
    path: String,
    musings: bool,
    view: Arc<View>,
}

/// `web_inputs`: what the web console reads from a browser or a script,
/// and what it draws of what models wrote. The first byte picks:
/// the request's headers and query (the access token, the login cookie),
/// a form or a query string (decoded by axum into the pages' own types),
/// or a session's log as the wire brings it (JSON lines of log entries and
/// statuses), drawn into the session page.
pub fn web_inputs(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => access(rest),
        1 => forms(rest),
        _ => page(rest),
    }
}

const TOKEN: &str = "an-access-token-of-32-characters";

/// Headers: the first line is the `Authorization` header, the others
/// `Cookie` headers; the whole text is also a query string. What must
/// hold: only the token itself lets a script in; no login is made from
/// a cookie the gate never set; a cookie's value stops at its `;`; a query
/// without its token has no token.
fn access(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let mut headers = HeaderMap::new();
    let authorization = lines.next().unwrap_or_default();
    if let Ok(value) = HeaderValue::from_str(authorization) {
        headers.append(header::AUTHORIZATION, value);
    }
    for line in lines {
        if let Ok(value) = HeaderValue::from_str(line) {
            headers.append(header::COOKIE, value);
        }
    }
    for tls in [false, true] {
        let gate = Gate::new(TOKEN.to_owned(), tls);
        let granted = gate.access(&headers);
        if granted.is_some() {
            let bearer = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            assert_eq!(bearer, Some(TOKEN), "access without the token: {headers:?}");
        }
        if let Some(value) = cookie(&headers, gate.cookie_name()) {
            assert!(!value.contains(';'), "a cookie's value runs on: {value:?}");
        }
    }
    let query = text.as_ref();
    let kept = without_token(query);
    assert_eq!(
        token_in(&kept),
        None,
        "{query:?} keeps its token as {kept:?}"
    );
    if let Some(token) = token_in(query) {
        assert!(query.contains(token));
    }
    let _ = crate::auth::same(query, TOKEN);
}

/// A form's body, as the pages decode it (`Form<…>`: the send, approve
/// and new-session forms), and a query string (`Query<…>`: the session
/// and metrics pages), and a session id from a path. Nothing may panic.
fn forms(data: &[u8]) {
    fn form<T: serde::de::DeserializeOwned>(data: &[u8]) {
        let request = Request::builder()
            .method("POST")
            .uri("/s/fuzz/send")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(data.to_vec()));
        if let Ok(request) = request {
            let _ = futures::executor::block_on(Form::<T>::from_request(request, &()));
        }
    }
    form::<crate::pages::SendForm>(data);
    form::<crate::pages::ApproveForm>(data);
    form::<crate::pages::CsrfForm>(data);
    let text = String::from_utf8_lossy(data);
    if let Ok(uri) = format!("/s/fuzz?{text}").parse::<axum::http::Uri>() {
        if let Ok(Query(query)) = Query::<crate::pages::SessionQuery>::try_from_uri(&uri) {
            let _ = query.musings();
        }
        let _ = Query::<crate::pages::MetricsQuery>::try_from_uri(&uri);
    }
    let _ = crate::view::cut(&text);
}

/// JSON lines, each a log entry, a session's or an Orchestrator's status
/// or the Arbiter's words as they come, fed to the console's state as the
/// hub feeds it, then drawn into the session page. What must hold: what a
/// model wrote never becomes markup: the page has only the template's own
/// elements, and no more scripts than the template has.
fn page(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let now = Instant::now();
    let mut app = App::new("fuzz", "");
    app.apply(FeedEvent::Attached, now);
    for line in text.lines() {
        let event = if let Ok(entry) = serde_json::from_str::<LogEntry>(line) {
            FeedEvent::Log(entry)
        } else if let Ok(status) = serde_json::from_str::<SessionStatus>(line) {
            FeedEvent::Session(status)
        } else if let Ok(status) = serde_json::from_str::<OrchestratorStatus>(line) {
            FeedEvent::Orchestrator(status)
        } else if let Ok(delta) = serde_json::from_str::<ArbiterDelta>(line) {
            FeedEvent::Delta(delta)
        } else {
            FeedEvent::Malformed {
                detail: line.chars().take(200).collect(),
            }
        };
        app.apply(event, now);
        let _ = app.after_feed();
    }
    let view = View::of(&app, now, &View::default());
    let Some(html) = draw(view) else {
        return;
    };
    let allowed = template_tags();
    for tag in tags(&html) {
        assert!(
            allowed.contains(&tag),
            "a <{tag}> the template does not have: {html}"
        );
    }
    let scripts = html.matches("<script").count();
    assert_eq!(
        scripts,
        empty_page_scripts(),
        "a script the template does not have"
    );
}

fn draw(view: View) -> Option<String> {
    SessionPage {
        csrf: "csrf".to_owned(),
        session_id: "fuzz".to_owned(),
        path: "/s/fuzz".to_owned(),
        musings: true,
        view: Arc::new(view),
    }
    .render()
    .ok()
}

/// The element names in `html` (`<name`, `</name`), lowercased.
fn tags(html: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let name: String = rest
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '!')
            .collect();
        out.insert(name.to_ascii_lowercase());
    }
    out
}

fn template_tags() -> &'static BTreeSet<String> {
    static TAGS: OnceLock<BTreeSet<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut found = tags(include_str!("../templates/base.html"));
        found.extend(tags(include_str!("../templates/session.html")));
        found
    })
}

fn empty_page_scripts() -> usize {
    static SCRIPTS: OnceLock<usize> = OnceLock::new();
    *SCRIPTS.get_or_init(|| {
        draw(View::default())
            .map(|html| html.matches("<script").count())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/web_inputs");
        let seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, std::fs::read(e.path()).ok()?))
            })
            .collect();
        assert!(seeds.len() >= 3, "{} seeds", seeds.len());
        for (name, data) in seeds {
            let replayed = std::panic::catch_unwind(|| web_inputs(&data));
            assert!(replayed.is_ok(), "web_inputs/{name} panicked");
        }
    }

    /// A model's markup is drawn as text: the check above would see it.
    #[test]
    fn a_models_markup_is_drawn_as_text() {
        let entry = serde_json::json!({
            "v": 1, "session_id": "fuzz", "seq": 1, "at": "2026-01-01T00:00:00Z",
            "body": {"type": "arbiter", "text": "<script>alert(1)</script><img src=x onerror=alert(2)>"}
        });
        let mut app = App::new("fuzz", "");
        if let Ok(entry) = serde_json::from_value::<LogEntry>(entry) {
            app.apply(FeedEvent::Log(entry), Instant::now());
        }
        let view = View::of(&app, Instant::now(), &View::default());
        assert!(!view.entries.is_empty(), "the entry is not shown");
        let html = draw(view).unwrap_or_default();
        assert!(html.contains("alert(1)"), "the text is not shown: {html}");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!tags(&html).contains("img"), "{html}");
        assert_eq!(html.matches("<script").count(), empty_page_scripts());
    }
}
