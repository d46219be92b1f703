//! Drawing the full-screen console, after the layout of seed 004: the title,
//! the conversation, the status area and the input, in one double-lined box.
//! Drawing reads the [`App`] and records only the scroll metrics in it; what
//! drawing keeps for itself between draws (the conversation's wrapped rows)
//! is a [`ScreenState`], the state of the [`Screen`] widget.

pub mod conversation;
mod input;
pub mod status;
mod theme;
mod wrap;

use std::time::Instant;

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph, StatefulWidget, Widget, Wrap};
use unicode_width::UnicodeWidthStr;

use conversation::{ConversationState, ConversationView};

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

/// What the screen keeps between draws, beside the [`App`]: the
/// conversation's wrapped rows, and where the last draw put the cursor.
#[derive(Debug, Clone, Default)]
pub struct ScreenState {
    conversation: ConversationState,
    cursor: Option<Position>,
}

impl ScreenState {
    /// Where the terminal cursor goes after the last draw, if anywhere (not
    /// when the terminal is too small).
    pub fn cursor(&self) -> Option<Position> {
        self.cursor
    }
}

/// The whole screen at the moment `now` (liveness depends on it).
pub struct Screen<'a> {
    app: &'a mut App,
    now: Instant,
}

impl<'a> Screen<'a> {
    pub fn new(app: &'a mut App, now: Instant) -> Self {
        Self { app, now }
    }
}

impl StatefulWidget for Screen<'_> {
    type State = ScreenState;

    fn render(self, area: Rect, buf: &mut Buffer, state: &mut ScreenState) {
        state.cursor = render(self.app, self.now, area, buf, &mut state.conversation);
    }
}

/// Draws the whole screen for the moment `now`, keeping in `state` what the
/// next draw can reuse. The full-screen loop draws with this.
pub fn draw_with(frame: &mut Frame<'_>, app: &mut App, state: &mut ScreenState, now: Instant) {
    frame.render_stateful_widget(Screen::new(app, now), frame.area(), state);
    if let Some(cursor) = state.cursor {
        frame.set_cursor_position(cursor);
    }
}

/// Draws the whole screen for the moment `now` from nothing kept: every
/// entry is wrapped again. For a single draw (the screen tests); the same
/// screen as [`draw_with`] gives.
pub fn draw(frame: &mut Frame<'_>, app: &mut App, now: Instant) {
    draw_with(frame, app, &mut ScreenState::default(), now);
}

/// Draws into a buffer; returns where the terminal cursor goes, if anywhere.
fn render(
    app: &mut App,
    now: Instant,
    area: Rect,
    buf: &mut Buffer,
    conversation: &mut ConversationState,
) -> Option<Position> {
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

    // A tool call waiting for the human's word: asked above the input.
    let prompt = crate::approval::prompt(&app.approvals, inner_width.saturating_sub(2) as usize);

    // Rows: border, title, rule, [banner], conversation, rule, status, rule,
    // [prompt], input, border.
    let mut title_rows: u16 = if inner_width as usize >= SUBTITLE.width() + 2 {
        2
    } else {
        1
    };
    let banner_rows = u16::from(banner.is_some());
    let prompt_rows = u16::from(prompt.is_some());
    let status_rows = status.len() as u16;
    let fixed =
        |title: u16, input: u16| 5 + title + banner_rows + status_rows + prompt_rows + input;
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
    ConversationView::new(app).render(row(y, conversation_rows), buf, conversation);
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
    if let Some(text) = prompt {
        buf.set_line(
            x,
            y,
            &Line::styled(format!(" {text}"), theme::warning()),
            inner_width,
        );
        y += 1;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{ArbiterEntry, HumanEntry, LogBody, LogEntry, MusingEntry};
    use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
    use pretty_assertions::assert_eq;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use crate::app::FeedEvent;

    fn log(app: &mut App, seq: u64, body: LogBody, now: Instant) {
        let entry = LogEntry {
            v: 1,
            session_id: "s".into(),
            seq,
            at: chrono::Utc::now(),
            body,
        };
        app.apply(FeedEvent::Log(entry), now);
    }

    fn say(app: &mut App, seq: u64, now: Instant) {
        let text = format!("reply {seq}: the quick brown fox jumps over the lazy dog again");
        log(app, seq, LogBody::Arbiter(ArbiterEntry { text }), now);
    }

    fn press(app: &mut App, code: KeyCode, modifiers: KeyModifiers) {
        app.event(&Event::Key(KeyEvent::new(code, modifiers)));
    }

    /// Draws with the kept state and from nothing; both must show the same
    /// screen and leave the same scroll metrics. Returns the kept draw's text.
    fn both(app: &mut App, kept: &mut ScreenState, size: (u16, u16), now: Instant) -> String {
        let mut screen = |state: Option<&mut ScreenState>| {
            let mut terminal = Terminal::new(TestBackend::new(size.0, size.1)).unwrap();
            terminal
                .draw(|frame| match state {
                    Some(state) => draw_with(frame, app, state, now),
                    None => draw(frame, app, now),
                })
                .unwrap();
            let metrics = (app.scroll.rows, app.scroll.height, app.scroll.first_row());
            (terminal.backend().buffer().clone(), metrics)
        };
        let with = screen(Some(kept));
        let fresh = screen(None);
        assert_eq!(with, fresh, "a kept state draws what a fresh one does");
        let (buffer, _) = with;
        buffer
            .content
            .chunks(size.0 as usize)
            .map(|row| row.iter().map(|cell| cell.symbol()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_kept_wrapping_follows_scrolling_new_entries_resizing_and_musings() {
        let now = Instant::now();
        let mut app = App::new("s", "nats://h");
        let mut kept = ScreenState::default();
        both(&mut app, &mut kept, (60, 20), now);
        for seq in 1..=30 {
            say(&mut app, seq, now);
        }
        let tail = both(&mut app, &mut kept, (60, 20), now);
        assert!(tail.contains("reply 30"), "the live tail is shown");
        assert_eq!(app.scroll.rows_below(), 0);

        press(&mut app, KeyCode::PageUp, KeyModifiers::NONE);
        let first = app.scroll.first_row();
        let scrolled = both(&mut app, &mut kept, (60, 20), now);
        assert!(!scrolled.contains("reply 30"));
        assert!(scrolled.contains("more rows"), "{scrolled}");

        // New entries while scrolled up: the view stays where it was.
        for seq in 31..=33 {
            say(&mut app, seq, now);
        }
        log(
            &mut app,
            34,
            LogBody::Musing(MusingEntry {
                text: "a musing, hidden until asked for".into(),
            }),
            now,
        );
        log(
            &mut app,
            35,
            LogBody::Human(HumanEntry {
                message_id: "m".into(),
                text: "and the human".into(),
            }),
            now,
        );
        let later = both(&mut app, &mut kept, (60, 20), now);
        assert_eq!(app.scroll.first_row(), first);
        let above_marker = |screen: &str| -> Vec<String> {
            let rows = screen.lines().take_while(|row| !row.contains("more rows"));
            rows.map(str::to_owned).collect()
        };
        assert_eq!(above_marker(&later), above_marker(&scrolled));
        assert!(later.contains("20 more rows"), "{later}");

        // Narrower and wider: everything is wrapped again, the scroll holds.
        both(&mut app, &mut kept, (34, 16), now);
        both(&mut app, &mut kept, (90, 30), now);
        press(&mut app, KeyCode::Char('t'), KeyModifiers::CONTROL);
        let musings = both(&mut app, &mut kept, (90, 30), now);
        press(&mut app, KeyCode::End, KeyModifiers::CONTROL);
        let tail = both(&mut app, &mut kept, (90, 30), now);
        assert!(tail.contains("a musing"), "{musings}\n{tail}");
        assert!(tail.contains("and the human"));
        press(&mut app, KeyCode::Char('t'), KeyModifiers::CONTROL);
        assert!(!both(&mut app, &mut kept, (90, 30), now).contains("a musing"));
    }
}
