//! The live streams (Server-Sent Events). A session's stream sends each new
//! entry once, numbered (`id:` is the next index, so a reconnecting browser
//! resumes with `Last-Event-ID`), and the tail, the status and the approvals
//! whenever they change. It reads the hub's newest view, so a slow tab skips
//! states and never makes the server queue for it. A closed tab drops its
//! stream, and with the last one the hub goes after its linger.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Shared;
use crate::hub::{Hub, Hubs};
use crate::pages::{Failure, Row, SessionQuery};
use crate::view::{Line, View, Waiting};

/// How often an idle stream says it is alive (proxies close silent ones).
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The sessions table is listed again at most this often.
const ROWS_EVERY: Duration = Duration::from_secs(1);

#[derive(Deserialize, Default)]
pub struct Resume {
    #[serde(default)]
    from: usize,
}

/// What a stream has sent of a view.
#[derive(Default)]
struct Sent {
    entries: usize,
    tail: Option<Vec<Line>>,
    status: Option<Status>,
    approvals: Option<Vec<Waiting>>,
}

#[derive(Clone, PartialEq, Serialize)]
struct Status {
    lines: Vec<String>,
    cost: String,
    connected: bool,
}

/// Gives the hub back (to linger) when the stream is dropped.
struct Holding {
    hub: Option<Arc<Hub>>,
    hubs: Arc<Hubs>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.take() {
            self.hubs.release(hub);
        }
    }
}

fn event(name: &str, id: Option<usize>, data: &impl Serialize) -> Event {
    let event = Event::default().event(name);
    let event = match id {
        Some(id) => event.id(id.to_string()),
        None => event,
    };
    event
        .json_data(data)
        .unwrap_or_else(|_| Event::default().comment("unencodable"))
}

/// The events that bring a page that has `sent` up to `view`.
fn diff(sent: &mut Sent, view: &View, musings: bool) -> Vec<Event> {
    let mut out = Vec::new();
    if view.entries.len() < sent.entries {
        // The view started over (a feed that replays anew): so must the page.
        sent.entries = 0;
        out.push(Event::default().event("reload").data(""));
        return out;
    }
    for (i, line) in view.entries.iter().enumerate().skip(sent.entries) {
        if line.musing && !musings {
            continue;
        }
        out.push(event(
            "entry",
            Some(i + 1),
            &json!({ "i": i, "line": &**line }),
        ));
    }
    sent.entries = view.entries.len();
    if sent.tail.as_ref() != Some(&view.tail) {
        out.push(event("tail", None, &view.tail));
        sent.tail = Some(view.tail.clone());
    }
    let status = Status {
        lines: view.status.clone(),
        cost: view.cost.clone(),
        connected: view.connected,
    };
    if sent.status.as_ref() != Some(&status) {
        out.push(event("status", None, &status));
        sent.status = Some(status);
    }
    if sent.approvals.as_ref() != Some(&view.approvals) {
        out.push(event("approvals", None, &view.approvals));
        sent.approvals = Some(view.approvals.clone());
    }
    out
}

pub async fn session(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(from): Query<Resume>,
    Query(query): Query<SessionQuery>,
    headers: HeaderMap,
) -> Response {
    if !arbiter_protocol::subjects::is_valid_token(&id) {
        return Failure(axum::http::StatusCode::NOT_FOUND, "no such session".into())
            .into_response();
    }
    // A browser that reconnects says the id of the last event it had.
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let hub = shared.hubs.watch(&id);
    let view = hub.view.clone();
    let holding = Holding {
        hub: Some(hub),
        hubs: shared.hubs.clone(),
    };
    let sent = Sent {
        entries: from.from.max(resume),
        ..Sent::default()
    };
    Sse::new(stream(view, sent, query.musings(), holding))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

fn stream(
    view: tokio::sync::watch::Receiver<Arc<View>>,
    sent: Sent,
    musings: bool,
    holding: Holding,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(
        (view, sent, holding, true),
        move |(mut view, mut sent, holding, first)| async move {
            if !first {
                // The hub gone (its task ended): the stream ends, the
                // browser reconnects and a new hub starts.
                view.changed().await.ok()?;
            }
            let shown = view.borrow_and_update().clone();
            let events = diff(&mut sent, &shown, musings);
            Some((futures::stream::iter(events), (view, sent, holding, false)))
        },
    )
    .flatten()
    .map(Ok)
}

/// The sessions table, live: its rows again whenever a status changed.
pub async fn sessions(State(shared): State<Arc<Shared>>) -> Response {
    let changed = shared.changed.subscribe();
    let stream = futures::stream::unfold(
        (shared, changed, None::<Vec<Row>>, true),
        |(shared, mut changed, mut last, mut first)| async move {
            loop {
                if !first {
                    changed.changed().await.ok()?;
                    tokio::time::sleep(ROWS_EVERY).await;
                    changed.borrow_and_update();
                }
                first = false;
                if let Ok(rows) = crate::pages::rows(&shared).await
                    && last.as_ref() != Some(&rows)
                {
                    let event = event("rows", None, &rows);
                    last = Some(rows);
                    return Some((event, (shared, changed, last, false)));
                }
            }
        },
    )
    .map(Ok::<_, Infallible>);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, musing: bool) -> Arc<Line> {
        Arc::new(Line {
            class: "arbiter".into(),
            speaker: "Arbiter: ".into(),
            text: text.into(),
            musing,
        })
    }

    #[test]
    fn each_entry_goes_once_and_the_rest_only_when_it_changes() {
        let mut sent = Sent::default();
        let mut view = View {
            entries: vec![line("a", false), line("hidden", true)],
            ..View::default()
        };
        // Two entries (one a musing, not sent), the tail, the status, the approvals.
        assert_eq!(diff(&mut sent, &view, false).len(), 4);
        assert!(diff(&mut sent, &view, false).is_empty(), "nothing new");
        view.entries.push(line("b", false));
        assert_eq!(diff(&mut sent, &view, false).len(), 1);
        view.status = vec!["Arbiter ── 10%".into()];
        assert_eq!(diff(&mut sent, &view, false).len(), 1);
        let mut musing = Sent::default();
        assert_eq!(diff(&mut musing, &view, true).len(), 6, "musings asked for");
    }

    #[test]
    fn a_page_that_has_some_entries_gets_the_rest_and_a_shorter_view_reloads() {
        let view = View {
            entries: vec![line("a", false), line("b", false), line("c", false)],
            ..View::default()
        };
        let mut sent = Sent {
            entries: 2,
            ..Sent::default()
        };
        let events = diff(&mut sent, &view, false);
        assert_eq!(events.len(), 4, "c, then tail, status, approvals");
        let mut ahead = Sent {
            entries: 5,
            ..Sent::default()
        };
        assert_eq!(diff(&mut ahead, &view, false).len(), 1, "reload");
    }
}
