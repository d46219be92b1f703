//! The conversation area: every entry wrapped to the width, a blank row
//! between entries, the streaming reply and unsent messages at the end,
//! scrolled to the live tail or wherever the human left it.

use arbiter_protocol::{ArbiterIntent, member_name, roman};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::StatefulWidget;

use super::theme;
use super::wrap::wrap;
use crate::app::{App, Scroll};
use crate::conversation::{Conversation, Entry, Kind, Streaming};
use crate::vitals::Vitals;

/// Cells left blank on each side of the text, as in the seed's layout.
pub const MARGIN: u16 = 2;
/// Shown at the end of a reply that is still being written.
const CURSOR: &str = "▍";
/// Shown after a message this console sent that is not in the log yet.
const UNCONFIRMED: &str = " ⋯";

/// What the conversation view keeps between draws: the wrapped rows of the
/// log's entries. Entries only ever get appended, so only new ones are
/// wrapped; a new width or the musings shown or hidden wraps them all again.
#[derive(Debug, Clone, Default)]
pub struct ConversationState {
    width: usize,
    show_musings: bool,
    /// Entries wrapped so far.
    entries: usize,
    rows: Vec<Line<'static>>,
}

impl ConversationState {
    fn update(&mut self, entries: &[Entry], width: usize, show_musings: bool) {
        if width != self.width || show_musings != self.show_musings || entries.len() < self.entries
        {
            *self = Self {
                width,
                show_musings,
                ..Self::default()
            };
        }
        for entry in &entries[self.entries..] {
            if entry.kind == Kind::Musing && !show_musings {
                continue;
            }
            self.rows.push(Line::default());
            self.rows.extend(wrap(&entry_spans(entry), width));
        }
        self.entries = entries.len();
    }
}

/// The conversation area. It reads the [`App`]'s conversation and writes
/// only the scroll metrics (rows in all, rows shown), which paging needs.
pub struct ConversationView<'a> {
    conversation: &'a Conversation,
    vitals: &'a Vitals,
    show_musings: bool,
    scroll: &'a mut Scroll,
}

impl<'a> ConversationView<'a> {
    pub fn new(app: &'a mut App) -> Self {
        Self {
            conversation: &app.conversation,
            vitals: &app.vitals,
            show_musings: app.show_musings,
            scroll: &mut app.scroll,
        }
    }

    /// The rows after the log's entries: the reply being written, then the
    /// messages sent from here that the log does not show yet.
    fn tail_rows(&self, width: usize) -> Vec<Line<'static>> {
        let mut rows = Vec::new();
        if let Some(streaming) = self.conversation.streaming()
            && (streaming.intent != Some(ArbiterIntent::Musings) || self.show_musings)
        {
            let mut spans = streaming_spans(streaming, self.vitals);
            spans.push(Span::styled(CURSOR, theme::arbiter()));
            rows.push(Line::default());
            rows.extend(wrap(&spans, width));
        }
        for pending in self.conversation.pending() {
            let spans = [
                Span::styled("You: ", theme::human().patch(theme::note())),
                Span::styled(pending.text.clone(), theme::note()),
                Span::styled(UNCONFIRMED, theme::dim()),
            ];
            rows.push(Line::default());
            rows.extend(wrap(&spans, width));
        }
        rows
    }
}

impl StatefulWidget for ConversationView<'_> {
    type State = ConversationState;

    /// Draws the conversation into `area` and records the scroll metrics.
    fn render(self, area: Rect, buf: &mut Buffer, wrapped: &mut ConversationState) {
        let width = area.width.saturating_sub(2 * MARGIN) as usize;
        wrapped.update(self.conversation.entries(), width, self.show_musings);
        let tail = self.tail_rows(width);
        let total = wrapped.rows.len() + tail.len();
        self.scroll.rows = total;
        self.scroll.height = area.height as usize;

        if total == 0 && area.height > 1 {
            let hint = Line::styled("Nothing has been said yet.", theme::dim());
            buf.set_line(area.x + MARGIN, area.y + 1, &hint, width as u16);
            return;
        }
        let first = self.scroll.first_row();
        for (i, y) in (area.y..area.bottom()).enumerate() {
            let index = first + i;
            let row = if index < wrapped.rows.len() {
                wrapped.rows.get(index)
            } else {
                tail.get(index - wrapped.rows.len())
            };
            if let Some(row) = row {
                buf.set_line(area.x + MARGIN, y, row, width as u16);
            }
        }
    }
}

/// Who speaks in an entry of `kind`, as the conversation starts its line
/// (`You: `, `Arbiter → I: `, `· `): the terminal's and the web page's.
pub fn speaker(kind: Kind) -> String {
    match kind {
        Kind::Human => "You: ".to_owned(),
        Kind::Arbiter => "Arbiter: ".to_owned(),
        Kind::ArbiterToOrchestrator(n, Some(m)) => format!("Arbiter → {}.{m}: ", roman(n)),
        Kind::ArbiterToOrchestrator(n, None) => format!("Arbiter → {}: ", roman(n)),
        Kind::Orchestrator(n, m) | Kind::Note(n, m) => format!("{}: ", member_name(n, m)),
        Kind::Musing => "Arbiter (musing): ".to_owned(),
        Kind::Event => "· ".to_owned(),
        Kind::Approval => "? ".to_owned(),
        Kind::Evidence => "· Evidence: ".to_owned(),
        Kind::Check => "! Check: ".to_owned(),
        Kind::Error => "! ".to_owned(),
    }
}

/// Who is speaking and what they say, styled.
fn entry_spans(entry: &Entry) -> Vec<Span<'static>> {
    let speaker = speaker(entry.kind);
    let (speaker_style, text_style) = match entry.kind {
        Kind::Human => (theme::human(), Style::new()),
        Kind::Arbiter | Kind::ArbiterToOrchestrator(..) => (theme::arbiter(), Style::new()),
        Kind::Orchestrator(n, _) => (theme::orchestrator(n), Style::new()),
        Kind::Note(n, _) => (theme::orchestrator(n).patch(theme::note()), theme::note()),
        Kind::Musing => (theme::musing(), theme::musing()),
        Kind::Event | Kind::Evidence => (theme::dim(), theme::dim()),
        Kind::Approval => (theme::warning(), theme::warning()),
        Kind::Check | Kind::Error => (theme::error(), theme::error()),
    };
    vec![
        Span::styled(speaker, speaker_style),
        Span::styled(entry.text.clone(), text_style),
    ]
}

/// The reply being written, under the name its intent gives it.
fn streaming_spans(streaming: &Streaming, vitals: &Vitals) -> Vec<Span<'static>> {
    let speaker = streaming_speaker(streaming, vitals);
    let style = if streaming.intent == Some(ArbiterIntent::Musings) {
        theme::musing()
    } else {
        Style::new()
    };
    vec![
        Span::styled(speaker, theme::arbiter()),
        Span::styled(streaming.text.clone(), style),
    ]
}

/// Who a reply being written is headed for, as [`speaker`] names it.
pub fn streaming_speaker(streaming: &Streaming, vitals: &Vitals) -> String {
    match streaming.intent {
        Some(ArbiterIntent::AddressOrchestrator) => match vitals.active_number() {
            Some(n) => format!("Arbiter → {}: ", roman(n)),
            None => "Arbiter → Orchestrator: ".to_owned(),
        },
        Some(ArbiterIntent::SummonOrchestrator) => {
            format!("Arbiter → {}: ", roman(vitals.next_number()))
        }
        Some(ArbiterIntent::Musings) => "Arbiter (musing): ".to_owned(),
        Some(ArbiterIntent::AddressHuman | ArbiterIntent::ReleaseOrchestrators) | None => {
            "Arbiter: ".to_owned()
        }
    }
}
