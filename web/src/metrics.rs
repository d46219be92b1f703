//! What a user charts, drawn on the server as SVG: each session's cost over
//! time, from the statuses this process has seen (the bucket's latest on
//! start, then every live one), and the Orchestrators of each generation of
//! one session (a team's members share their generation's number).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Mutex;

use arbiter_protocol::SessionStatus;
use chrono::{DateTime, TimeDelta, Utc};

/// Points kept per session; past this every other one is dropped.
const MAX_POINTS: usize = 512;
/// Sessions kept; past this the one least recently active goes.
const MAX_SESSIONS: usize = 256;
/// Sessions drawn in the cost chart: the most recently active.
const DRAWN: usize = 8;
/// A status whose cost did not change adds a point only this long after the last.
const SAME_COST_EVERY: TimeDelta = TimeDelta::seconds(60);
const COLOURS: [&str; DRAWN] = [
    "#6cc5ff", "#e08cff", "#ffa45c", "#5cf0c0", "#ff7b9c", "#c0c060", "#d7b45a", "#8fb4ff",
];
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 30.0;
const TOP: f64 = 12.0;

#[derive(Debug, Default)]
struct Series {
    /// (when, cost in nano-dollars), oldest first.
    points: Vec<(DateTime<Utc>, u64)>,
    /// Orchestrators by generation number.
    generations: BTreeMap<u32, u32>,
    last: DateTime<Utc>,
}

/// Every session's series.
#[derive(Default)]
pub struct Metrics {
    sessions: Mutex<HashMap<String, Series>>,
}

impl Metrics {
    /// Takes one status in.
    pub fn record(&self, status: &SessionStatus) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if !sessions.contains_key(&status.session_id)
            && sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.last)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        let series = sessions.entry(status.session_id.clone()).or_default();
        let cost = status.spend.total.cost_nanos;
        if series.points.is_empty() {
            series.points.push((status.created_at, 0));
        }
        let add = match series.points.last() {
            Some(&(at, last)) => {
                status.at > at && (cost != last || status.at - at >= SAME_COST_EVERY)
            }
            None => true,
        };
        if add {
            series.points.push((status.at, cost));
            if series.points.len() > MAX_POINTS {
                let mut i = 0;
                series.points.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
            }
        }
        series.last = series.last.max(status.at);
        series.generations.clear();
        for o in &status.spend.orchestrators {
            *series.generations.entry(o.number).or_default() += 1;
        }
    }

    /// The cost chart.
    pub fn cost_svg(&self) -> String {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let mut drawn: Vec<(&String, &Series)> = sessions.iter().collect();
        drawn.sort_by(|a, b| b.1.last.cmp(&a.1.last).then_with(|| a.0.cmp(b.0)));
        drawn.truncate(DRAWN);
        let points = drawn.iter().flat_map(|(_, s)| s.points.iter());
        let (Some(from), Some(to)) = (
            points.clone().map(|p| p.0).min(),
            points.clone().map(|p| p.0).max(),
        ) else {
            return empty("No session has a status yet.");
        };
        let top = points.map(|p| p.1).max().unwrap_or(0).max(1);
        let span = (to - from).num_milliseconds().max(1) as f64;
        let x = |at: DateTime<Utc>| {
            LEFT + (at - from).num_milliseconds() as f64 / span * (WIDTH - LEFT - 10.0)
        };
        let y = |cost: u64| HEIGHT - BOTTOM - cost as f64 / top as f64 * (HEIGHT - BOTTOM - TOP);
        let mut svg = frame();
        axis_labels(
            &mut svg,
            &dollars(top),
            &from.format("%H:%M:%S").to_string(),
            &to.format("%H:%M:%S").to_string(),
        );
        for (i, (id, series)) in drawn.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let line: Vec<String> = series
                .points
                .iter()
                .map(|&(at, cost)| format!("{:.1},{:.1}", x(at), y(cost)))
                .collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
                line.join(" "),
                escape(id)
            );
            let last = series.points.last().map_or(0, |p| p.1);
            let _ = write!(
                svg,
                r#"<text x="{:.0}" y="{:.0}" fill="{colour}" font-size="11">{} {}</text>"#,
                LEFT + 8.0,
                TOP + 14.0 * (i as f64 + 1.0),
                escape(&short(id)),
                escape(&dollars(last))
            );
        }
        svg.push_str("</svg>");
        svg
    }

    /// The generations chart of `session` (by default the most recently
    /// active), and which session it is.
    pub fn generations_svg(&self, session: Option<&str>) -> (Option<String>, String) {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let chosen = match session {
            Some(id) => sessions.get_key_value(id),
            None => sessions
                .iter()
                .max_by(|a, b| a.1.last.cmp(&b.1.last).then_with(|| b.0.cmp(a.0))),
        };
        let Some((id, series)) = chosen.filter(|(_, s)| !s.generations.is_empty()) else {
            return (None, empty("No Orchestrator yet."));
        };
        let top = series
            .generations
            .values()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let n = series.generations.len() as f64;
        let slot = (WIDTH - LEFT - 10.0) / n;
        let mut svg = frame();
        axis_labels(&mut svg, &top.to_string(), "", "");
        for (i, (generation, count)) in series.generations.iter().enumerate() {
            let h = f64::from(*count) / f64::from(top) * (HEIGHT - BOTTOM - TOP);
            let x = LEFT + slot * i as f64 + slot * 0.15;
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#6cc5ff"><title>{count}</title></rect><text x="{:.1}" y="{:.0}" fill="#e4e4e4" font-size="12" text-anchor="middle">{}</text>"##,
                HEIGHT - BOTTOM - h,
                slot * 0.7,
                x + slot * 0.35,
                HEIGHT - BOTTOM + 16.0,
                escape(&arbiter_protocol::roman(*generation)),
            );
        }
        svg.push_str("</svg>");
        (Some(id.clone()), svg)
    }
}

fn frame() -> String {
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img"><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}" stroke="#555"/><line x1="{LEFT}" y1="{b}" x2="{r}" y2="{b}" stroke="#555"/>"##,
        b = HEIGHT - BOTTOM,
        r = WIDTH - 10.0,
    )
}

fn axis_labels(svg: &mut String, top: &str, from: &str, to: &str) {
    let _ = write!(
        svg,
        r##"<text x="{:.0}" y="{:.0}" fill="#8a8a93" font-size="11" text-anchor="end">{}</text><text x="{:.0}" y="{:.0}" fill="#8a8a93" font-size="11" text-anchor="end">0</text><text x="{LEFT}" y="{:.0}" fill="#8a8a93" font-size="11">{}</text><text x="{:.0}" y="{:.0}" fill="#8a8a93" font-size="11" text-anchor="end">{}</text>"##,
        LEFT - 6.0,
        TOP + 10.0,
        escape(top),
        LEFT - 6.0,
        HEIGHT - BOTTOM,
        HEIGHT - 8.0,
        escape(from),
        WIDTH - 10.0,
        HEIGHT - 8.0,
        escape(to),
    );
}

fn empty(why: &str) -> String {
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} 40" width="{WIDTH}" height="40"><text x="10" y="25" fill="#8a8a93" font-size="13">{}</text></svg>"##,
        escape(why)
    )
}

fn dollars(nanos: u64) -> String {
    format!("${:.4}", nanos as f64 / 1e9)
}

fn short(id: &str) -> String {
    id.chars()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// Text for SVG: `& < > " '` as entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if arbiter_console::inert::is_active(c) => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{OrchestratorSpend, SessionSpend, Spend};

    fn status(id: &str, secs: i64, cost: u64, numbers: &[u32]) -> SessionStatus {
        let base = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let mut s: SessionStatus = serde_json::from_value(serde_json::json!({
            "v": 1, "session_id": id, "state": "idle", "queued": 0,
            "arbiter_context_pct": 0.0, "arbiter_context_tokens": 0,
            "summoned": 0, "last_seq": 0,
            "created_at": base, "at": base + TimeDelta::seconds(secs),
        }))
        .unwrap_or_else(|e| panic!("a status: {e}"));
        s.spend = SessionSpend {
            orchestrators: numbers
                .iter()
                .map(|&number| OrchestratorSpend {
                    orch_id: format!("o-{number}"),
                    number,
                    spend: Spend::default(),
                })
                .collect(),
            ..SessionSpend::default()
        };
        s.spend.total.cost_nanos = cost;
        s
    }

    #[test]
    fn costs_make_one_line_per_session_and_names_are_escaped() {
        let m = Metrics::default();
        m.record(&status("s<1>", 10, 1_000_000, &[]));
        m.record(&status("s<1>", 20, 3_000_000, &[]));
        m.record(&status("s<1>", 21, 3_000_000, &[]));
        let svg = m.cost_svg();
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains("s&lt;1&gt;"), "{svg}");
        assert!(!svg.contains("s<1>"));
        assert!(svg.contains("$0.0030"), "{svg}");
        // The creation, and the two costs; the same cost a second later adds none.
        let points = svg
            .split("points=\"")
            .nth(1)
            .map(|p| p.split('"').next().unwrap_or(""))
            .unwrap_or("");
        assert_eq!(points.split(' ').count(), 3, "{points}");
    }

    #[test]
    fn a_team_is_one_generation_of_several() {
        let m = Metrics::default();
        m.record(&status("s", 5, 0, &[1, 2, 2, 2, 3]));
        let (of, svg) = m.generations_svg(None);
        assert_eq!(of.as_deref(), Some("s"));
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("<title>3</title>"), "{svg}");
        assert!(svg.contains(">II</text>"));
    }

    #[test]
    fn nothing_yet_is_said_not_drawn() {
        let m = Metrics::default();
        assert!(m.cost_svg().contains("No session has a status yet."));
        assert!(m.generations_svg(None).1.contains("No Orchestrator yet."));
    }
}
