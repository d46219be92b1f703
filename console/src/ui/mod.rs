//! Drawing the full-screen console, after the layout of seed 004: the title,
//! the conversation, the status area and the input, in one double-lined box.
//! Drawing reads the [`App`] and records only the scroll metrics in it.

mod conversation;
mod input;
mod status;
mod theme;
mod wrap;

use std::time::Instant;

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph, Widget, Wrap};
use unicode_width::UnicodeWidthStr;

pub use conversation::WrapCache;

use crate::app::App;

const TITLE: &str = "THE ARBITER";
const SUBTITLE: &str = "OF THAT WHICH WAS, THAT WHICH IS, AND THAT WHICH SHALL COME TO BE";
/// Below this size the layout cannot be drawn.
pub const MIN_WIDTH: u16 = 30;
pub const MIN_HEIGHT: u16 = 12;
/// The input grows up to this many rows, then scrolls.
const MAX_INPUT_ROWS: u16 = 8;
/// The conversation keeps at least this many rows.
const MIN_CONVERSATION_ROWS: u16 = 3;

/// Draws the whole screen for the moment `now` (liveness depends on it).
pub fn draw(frame: &mut Frame<'_>, app: &mut App, now: Instant) {
    let area = frame.area();
    let cursor = render(app, now, area, frame.buffer_mut());
    if let Some(cursor) = cursor {
        frame.set_cursor_position(cursor);
    }
}

/// Draws into a buffer; returns where the terminal cursor goes, if anywhere.
pub fn render(
    app: &mut App,
    now: Instant,
    area: Rect,
    buf: &mut Buffer,
) -> Option<ratatui::layout::Position> {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(area, buf);
        return None;
    }
    let inner_width = area.width - 2;
    let status = status::lines(&app.vitals, now, inner_width as usize);
    let input = input::Layout::new(&app.input, inner_width);
    let banner = app.down_for(now).map(|down| {
        // Before the first attach the console has never been connected.
        let doing = if app.attached {
            "reconnecting"
        } else {
            "connecting"
        };
        format!(
            "NATS unreachable at {}: {doing} ({} s)",
            app.nats_url,
            down.as_secs()
        )
    });

    // Rows: border, title, rule, [banner], conversation, rule, status, rule, input, border.
    let mut title_rows: u16 = if inner_width as usize >= SUBTITLE.width() + 2 {
        2
    } else {
        1
    };
    let banner_rows = u16::from(banner.is_some());
    let status_rows = status.len() as u16;
    let fixed = |title: u16, input: u16| 5 + title + banner_rows + status_rows + input;
    let max_input = MAX_INPUT_ROWS.min(area.height / 4).max(1);
    let mut input_rows = (input.height() as u16).clamp(1, max_input);
    if area.height < fixed(title_rows, input_rows) + MIN_CONVERSATION_ROWS {
        title_rows = 1;
    }
    while input_rows > 1 && area.height < fixed(title_rows, input_rows) + MIN_CONVERSATION_ROWS {
        input_rows -= 1;
    }
    let conversation_rows = area
        .height
        .saturating_sub(fixed(title_rows, input_rows))
        .max(1);

    Block::bordered()
        .border_type(BorderType::Double)
        .border_style(theme::frame())
        .render(area, buf);
    session_label(app, area, buf);

    let x = area.x + 1;
    let mut y = area.y + 1;
    let row = |y: u16, height: u16| Rect::new(x, y, inner_width, height);
    Paragraph::new(Line::styled(TITLE, theme::title()))
        .alignment(Alignment::Center)
        .render(row(y, 1), buf);
    if title_rows == 2 {
        Paragraph::new(Line::styled(SUBTITLE, theme::subtitle()))
            .alignment(Alignment::Center)
            .render(row(y + 1, 1), buf);
    }
    y += title_rows;
    separator(area, y, buf, None);
    y += 1;
    if let Some(text) = banner {
        Paragraph::new(Line::styled(format!(" {text} "), theme::banner()))
            .alignment(Alignment::Center)
            .render(row(y, 1), buf);
        y += 1;
    }
    conversation::render(app, row(y, conversation_rows), buf);
    y += conversation_rows;
    let below = app.scroll.rows_below();
    let marker = (below > 0).then(|| format!("↓ {below} more rows · End returns to the live tail"));
    separator(area, y, buf, marker.as_deref());
    y += 1;
    for (i, line) in status.iter().enumerate() {
        buf.set_line(x, y + i as u16, line, inner_width);
    }
    y += status_rows;
    separator(area, y, buf, None);
    y += 1;
    let cursor = input.render(row(y, input_rows), buf);
    help(app, area, buf);
    Some(cursor)
}

/// `╠═════╣` across the box at row `y`, with an optional label near its right end.
fn separator(area: Rect, y: u16, buf: &mut Buffer, label: Option<&str>) {
    let rule = format!("╠{}╣", "═".repeat(area.width.saturating_sub(2) as usize));
    buf.set_string(area.x, y, rule, theme::frame());
    if let Some(label) = label {
        let label = format!(" {label} ");
        let width = label.width() as u16;
        if width + 6 <= area.width {
            let x = area.right() - 3 - width;
            buf.set_string(x, y, label, theme::warning());
        }
    }
}

/// The session id in the top border, right-aligned, when it fits.
fn session_label(app: &App, area: Rect, buf: &mut Buffer) {
    let label = format!(" session {} ", app.session_id);
    let width = label.width() as u16;
    if width + 6 <= area.width {
        buf.set_string(area.right() - 3 - width, area.y, label, theme::dim());
    }
}

/// The keys, in the bottom border: as many as fit, most needed first.
fn help(app: &App, area: Rect, buf: &mut Buffer) {
    let musings = if app.show_musings {
        "Ctrl-T hide musings"
    } else {
        "Ctrl-T musings"
    };
    // (priority, text), shown in this order.
    let keys = [
        (4, "Enter send"),
        (1, "Alt-Enter newline"),
        (5, "↑↓ history"),
        (2, "PgUp/PgDn scroll"),
        (3, musings),
        (0, "Ctrl-C quit"),
    ];
    let room = area.width.saturating_sub(6) as usize;
    let mut chosen = [false; 6];
    let mut used = 0;
    for priority in 0..keys.len() {
        if let Some(index) = keys.iter().position(|(p, _)| *p == priority) {
            let cost = keys[index].1.width() + if used == 0 { 2 } else { 3 };
            if used + cost <= room {
                chosen[index] = true;
                used += cost;
            }
        }
    }
    let text: Vec<&str> = keys
        .iter()
        .zip(chosen)
        .filter(|(_, c)| *c)
        .map(|((_, t), _)| *t)
        .collect();
    if text.is_empty() {
        return;
    }
    let line = Line::from(vec![Span::styled(
        format!(" {} ", text.join(" · ")),
        theme::dim(),
    )]);
    let width = line.width() as u16;
    buf.set_line(area.right() - 3 - width, area.bottom() - 1, &line, width);
}

fn too_small(area: Rect, buf: &mut Buffer) {
    let text = format!(
        "The terminal is {}×{}; the console needs at least {MIN_WIDTH}×{MIN_HEIGHT}.",
        area.width, area.height
    );
    Paragraph::new(text)
        .wrap(Wrap { trim: true })
        .render(area, buf);
}
