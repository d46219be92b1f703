//! The status area: a context bar for the Arbiter (with what the session
//! has cost so far) and one for the active Orchestrator (with what it has
//! cost) with its current tool and liveness, or "Awaiting your command."
//! when no Orchestrator is active. A team shows "2 of 3 reported" and a bar
//! per member (II.1, II.2…), with the tool each one is in.

use std::time::{Duration, Instant};

use arbiter_protocol::{member_name, orchestrator_name};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

use super::theme;
use crate::vitals::{ArbiterLiveness, Blind, Liveness, Vitals};

/// Cells of a full-width context bar.
const BAR: usize = 10;
/// Cells of a context bar on a narrow screen.
const NARROW_BAR: usize = 5;
/// The percentage field: `74%`, `100%`.
const PCT: usize = 4;
/// Blank cells after the percentage, as in the seed's layout.
const PAD: usize = 3;
/// The shortest rule worth drawing between a label and its bar.
const MIN_RULE: usize = 3;
/// The widest label the bars must leave room for, `Orchestrator XIII`.
const LONG_LABEL: usize = 17;

/// The rows of the status area for an inner width of `width`.
/// The Arbiter's label: `Arbiter`, then `Arbiter II` once it has handed
/// itself off, numbered as Orchestrators are.
fn arbiter_name(generation: u32) -> String {
    if generation <= 1 {
        "Arbiter".to_owned()
    } else {
        format!("Arbiter {}", arbiter_protocol::roman(generation))
    }
}

pub fn lines(vitals: &Vitals, now: Instant, width: usize) -> Vec<Line<'static>> {
    let arbiter_state = match vitals.arbiter(now) {
        ArbiterLiveness::Idle => None,
        ArbiterLiveness::Thinking { queued: 0 } => Some(("thinking".to_owned(), theme::dim())),
        ArbiterLiveness::Thinking { queued } => {
            Some((format!("thinking, {queued} queued"), theme::dim()))
        }
        ArbiterLiveness::Lost { silent } => {
            Some((format!("no status for {}", seconds(silent)), theme::bad()))
        }
        ArbiterLiveness::Unknown(blind) => Some((unknown(blind).to_owned(), theme::dim())),
    };
    // What the session has cost, once a model request has been answered.
    let session_cost = vitals
        .session_status()
        .map(|s| s.spend.total)
        .filter(|spend| spend.requests > 0)
        .map(|spend| format!("session {}", spend.cost_text()));
    // The session's cap and what is left of it, or that it holds there.
    let budget = vitals
        .session_status()
        .and_then(crate::budget::status_words);
    let session_cost = match (session_cost, budget) {
        (Some(cost), Some(budget)) => Some(format!("{cost} · {budget}")),
        (None, Some(budget)) => Some(budget),
        (cost, None) => cost,
    };
    let arbiter_state = match (arbiter_state, session_cost) {
        (Some((text, style)), Some(cost)) => Some((format!("{text} · {cost}"), style)),
        (None, Some(cost)) => Some((cost, theme::dim())),
        (state, None) => state,
    };
    // Both bars get the same size: full where the longest label leaves room.
    let bar = if width >= 2 + LONG_LABEL + 1 + MIN_RULE + 1 + BAR + 1 + PCT + PAD {
        Bar::Full
    } else {
        Bar::Narrow
    };
    let mut rows = vec![bar_line(
        Span::styled(arbiter_name(vitals.arbiter_generation()), theme::arbiter()),
        arbiter_state,
        vitals.arbiter_pct(),
        bar,
        width,
    )];
    let team = vitals.team();
    if team.len() > 1 {
        // A team: how many reported, then one bar per member.
        let number = team[0].number;
        let reported = team.iter().filter(|m| m.reported).count();
        rows.push(Line::from(vec![
            Span::raw("  "),
            Span::styled(
                format!(
                    "Team {}: {reported} of {} reported",
                    arbiter_protocol::roman(number),
                    team.len()
                ),
                theme::orchestrator(number),
            ),
        ]));
        for member in team {
            let status = vitals.status_of(&member.orch_id);
            // At work: the tool it is in, as for one Orchestrator.
            let tool = status.and_then(|s| {
                let tool = s.current_tool.as_ref()?;
                Some(format!("◈ {tool} ({})", s.tool_count))
            });
            let mut state = match (member.reported, tool) {
                (true, _) => "reported".to_owned(),
                (false, Some(tool)) => tool,
                (false, None) => "at work".to_owned(),
            };
            if let Some(spend) = status.map(|s| s.spend).filter(|s| s.requests > 0) {
                state.push_str(&format!(" · {}", spend.cost_text()));
            }
            rows.push(bar_line(
                Span::styled(
                    member_name(member.number, member.member),
                    theme::orchestrator(member.number),
                ),
                Some((state, theme::dim())),
                status.map(|s| s.context_pct),
                bar,
                width,
            ));
        }
        return rows;
    }
    let Some(number) = vitals.active_number() else {
        rows.push(Line::from(vec![
            Span::raw("  "),
            Span::styled("Awaiting your command.", theme::subtitle()),
        ]));
        return rows;
    };
    let status = vitals.active_status();
    let cost = status
        .map(|s| s.spend)
        .filter(|spend| spend.requests > 0)
        .map(|spend| (spend.cost_text(), theme::dim()));
    rows.push(bar_line(
        Span::styled(orchestrator_name(number), theme::orchestrator(number)),
        cost,
        status.map(|s| s.context_pct),
        bar,
        width,
    ));

    let tool = match status {
        Some(s) => match &s.current_tool {
            Some(tool) => vec![
                Span::styled("◈ ", theme::orchestrator(number)),
                Span::raw(format!("{tool} ({})", s.tool_count)),
            ],
            None => vec![Span::styled(
                match s.tool_count {
                    1 => "◇ 1 tool call".to_owned(),
                    n => format!("◇ {n} tool calls"),
                },
                theme::dim(),
            )],
        },
        None => Vec::new(),
    };
    let (word, style) = liveness_word(vitals.liveness(now));
    let mut spans = vec![Span::raw("  ")];
    spans.extend(tool);
    let used: usize = spans.iter().map(|s| s.content.width()).sum();
    let right = word.width() + PAD;
    if used + 1 + right <= width {
        spans.push(Span::raw(" ".repeat(width - used - right)));
        spans.push(Span::styled(word, style));
    }
    rows.push(Line::from(spans));
    rows
}

/// The size of the context bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bar {
    Full,
    Narrow,
}

/// `  Label · state ───────── ██░░░░░░░░ 18%   `, fitted to `width`.
fn bar_line(
    label: Span<'static>,
    state: Option<(String, Style)>,
    pct: Option<f32>,
    size: Bar,
    width: usize,
) -> Line<'static> {
    let mut left = vec![Span::raw("  "), label];
    if let Some((text, style)) = state {
        left.push(Span::styled(format!(" · {text}"), style));
    }
    let left_width = |spans: &[Span<'_>]| spans.iter().map(|s| s.content.width()).sum::<usize>();
    let (bar, pad) = match size {
        Bar::Full => (BAR, PAD),
        Bar::Narrow => (NARROW_BAR, 1),
    };
    let mut rule = rule_width(left_width(&left), bar, pad, width);
    if rule < 1 && left.len() > 2 {
        left.truncate(2);
        rule = rule_width(left_width(&left), bar, pad, width);
    }
    let mut spans = left;
    spans.push(Span::raw(" "));
    spans.push(Span::styled("─".repeat(rule), theme::frame()));
    spans.push(Span::raw(" "));
    spans.extend(bar_spans(pct, bar));
    spans.push(Span::raw(" ".repeat(pad)));
    Line::from(spans)
}

/// Cells left for the rule between the label and the bar.
fn rule_width(left: usize, bar: usize, pad: usize, width: usize) -> usize {
    width.saturating_sub(left + 1 + 1 + bar + 1 + PCT + pad)
}

/// `██░░░░░░░░ 18% `: a cell is filled as soon as any of its share is used.
fn bar_spans(pct: Option<f32>, cells: usize) -> Vec<Span<'static>> {
    let Some(pct) = pct else {
        return vec![
            Span::styled("░".repeat(cells), theme::frame()),
            Span::raw(" "),
            Span::styled(format!("{:<PCT$}", "--%"), theme::dim()),
        ];
    };
    let pct = if pct.is_finite() {
        pct.clamp(0.0, 100.0)
    } else {
        0.0
    };
    // The bar agrees with the number: 0 % is empty, 1 % fills one cell.
    let shown = pct.round() as usize;
    let filled = (shown * cells).div_ceil(100).min(cells);
    let style = theme::context(pct);
    vec![
        Span::styled("█".repeat(filled), style),
        Span::styled("░".repeat(cells - filled), theme::frame()),
        Span::raw(" "),
        Span::styled(format!("{:<PCT$}", format!("{shown}%")), style),
    ]
}

fn liveness_word(liveness: Option<Liveness>) -> (String, Style) {
    match liveness {
        None => (String::new(), Style::new()),
        Some(Liveness::Starting) => ("starting".to_owned(), theme::dim()),
        Some(Liveness::Working) => ("working".to_owned(), theme::good()),
        Some(Liveness::Waiting) => ("waiting for the Arbiter".to_owned(), theme::waiting()),
        Some(Liveness::Stalled { silent }) => (
            format!("stalled: no status for {}", seconds(silent)),
            theme::warning(),
        ),
        Some(Liveness::Lost { silent }) => (
            format!("lost: no status for {}", seconds(silent)),
            theme::bad(),
        ),
        Some(Liveness::Stopped) => ("stopped".to_owned(), theme::dim()),
        Some(Liveness::Unknown(blind)) => (unknown(blind).to_owned(), theme::dim()),
    }
}

/// What is shown instead of a liveness this console cannot tell.
fn unknown(blind: Blind) -> &'static str {
    match blind {
        Blind::Offline => "unknown: console offline",
        Blind::Reconnected => "unknown: no status since reconnecting",
        Blind::Attached => "unknown: no heartbeat yet",
    }
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn text(line: &Line<'_>) -> String {
        line.to_string()
    }

    #[test]
    fn bars_fill_and_fit() {
        assert_eq!(arbiter_name(1), "Arbiter");
        assert_eq!(arbiter_name(3), "Arbiter III");
        let full = |pct| text(&bar_line(Span::raw("Arbiter"), None, pct, Bar::Full, 40));
        assert_eq!(full(Some(18.0)), "  Arbiter ─────────── ██░░░░░░░░ 18%    ");
        assert_eq!(full(Some(18.0)).chars().count(), 40);
        assert_eq!(
            full(Some(100.0)),
            "  Arbiter ─────────── ██████████ 100%   "
        );
        assert_eq!(full(Some(0.4)), "  Arbiter ─────────── ░░░░░░░░░░ 0%     ");
        assert_eq!(full(Some(0.6)), "  Arbiter ─────────── █░░░░░░░░░ 1%     ");
        assert_eq!(full(None), "  Arbiter ─────────── ░░░░░░░░░░ --%    ");
        let narrow = bar_line(
            Span::raw("Orchestrator I"),
            None,
            Some(74.0),
            Bar::Narrow,
            30,
        );
        assert_eq!(text(&narrow), "  Orchestrator I ─ ████░ 74%  ");
        let state = Some(("thinking".to_owned(), Style::new()));
        let crowded = bar_line(Span::raw("Arbiter"), state, Some(1.0), Bar::Narrow, 24);
        assert_eq!(
            text(&crowded),
            "  Arbiter ── █░░░░ 1%   ",
            "the state gives way"
        );
    }

    #[test]
    fn nothing_is_claimed_before_a_status_arrives() {
        let t0 = Instant::now();
        let mut vitals = Vitals::new("s");
        let rows: Vec<String> = lines(&vitals, t0, 50).iter().map(text).collect();
        assert_eq!(
            rows,
            [
                "  Arbiter ───────────────────── ░░░░░░░░░░ --%    ",
                "  Awaiting your command.",
            ]
        );
        vitals.connection(false, t0);
        let offline = text(&lines(&vitals, t0, 60)[0]);
        assert_eq!(
            offline,
            "  Arbiter · unknown: console offline ──── ░░░░░░░░░░ --%    "
        );
    }
}
