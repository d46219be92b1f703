//! The input area: ` > ` and what is being typed, wrapped by character so the
//! cursor lands where the next character goes.

use ratatui::buffer::Buffer;
use ratatui::layout::{Position, Rect};
use ratatui::text::Line;
use unicode_width::UnicodeWidthStr;

use super::theme;
use super::wrap::chunks;
use crate::input::Input;

const PROMPT: &str = " > ";
const CONTINUATION: &str = "   ";
/// Cells kept free after the text, so the cursor never sits on the border.
const RIGHT: u16 = 1;

/// The wrapped rows of the input and the row and column of the cursor in them.
pub struct Layout {
    rows: Vec<String>,
    cursor: (usize, u16),
}

impl Layout {
    pub fn new(input: &Input, width: u16) -> Self {
        let text_width = width.saturating_sub(PROMPT.len() as u16 + RIGHT).max(1) as usize;
        let (cursor_line, cursor_col) = input.cursor();
        let mut rows = Vec::new();
        let mut cursor = (0, 0);
        for (index, line) in input.lines().iter().enumerate() {
            let mut pieces = chunks(line, text_width);
            if index == cursor_line {
                let before: String = line.chars().take(cursor_col).collect();
                let mut placed = chunks(&before, text_width);
                let mut x = placed.last().map_or(0, |p| p.width());
                if x >= text_width {
                    placed.push(String::new());
                    x = 0;
                }
                // A cursor after a full row needs a row of its own.
                if placed.len() > pieces.len() {
                    pieces.push(String::new());
                }
                cursor = (rows.len() + placed.len() - 1, x as u16);
            }
            rows.extend(pieces);
        }
        Self { rows, cursor }
    }

    /// Rows the input wants.
    pub fn height(&self) -> usize {
        self.rows.len()
    }

    /// Draws the rows that fit in `area`, scrolled to keep the cursor in
    /// view, and returns where the terminal cursor goes.
    pub fn render(&self, area: Rect, buf: &mut Buffer) -> Position {
        let height = area.height.max(1) as usize;
        let first = (self.cursor.0 + 1).saturating_sub(height);
        for (i, row) in self.rows.iter().skip(first).take(height).enumerate() {
            let y = area.y + i as u16;
            let prompt = if first + i == 0 { PROMPT } else { CONTINUATION };
            buf.set_line(area.x, y, &Line::styled(prompt, theme::human()), area.width);
            let x = area.x + PROMPT.len() as u16;
            buf.set_string(x, y, row, ratatui::style::Style::new());
        }
        Position {
            x: area.x + PROMPT.len() as u16 + self.cursor.1,
            y: area.y + (self.cursor.0 - first) as u16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn layout(text: &str, cursor_back: usize, width: u16) -> Layout {
        let mut input = Input::default();
        input.insert_str(text);
        for _ in 0..cursor_back {
            input.left();
        }
        Layout::new(&input, width)
    }

    #[test]
    fn wraps_and_places_the_cursor() {
        // 10 cells wide: 3 for the prompt, 1 kept free, 6 for text.
        let l = layout("abcdefghij", 0, 10);
        assert_eq!(l.rows, ["abcdef", "ghij"]);
        assert_eq!(l.cursor, (1, 4));
        let l = layout("abcdef", 0, 10);
        assert_eq!(l.rows, ["abcdef", ""], "the cursor gets a row of its own");
        assert_eq!(l.cursor, (1, 0));
        let l = layout("abcdef", 1, 10);
        assert_eq!(l.rows, ["abcdef"]);
        assert_eq!(l.cursor, (0, 5));
        let l = layout("one\ntwo", 4, 10);
        assert_eq!(l.rows, ["one", "two"]);
        assert_eq!(l.cursor, (0, 3));
        let l = layout("abcdef\nx", 2, 10);
        assert_eq!(l.rows, ["abcdef", "", "x"]);
        assert_eq!(l.cursor, (1, 0));
        let l = layout("", 0, 10);
        assert_eq!((l.rows.len(), l.cursor), (1, (0, 0)));
    }

    #[test]
    fn a_tall_input_scrolls_to_the_cursor() {
        let l = layout("1\n2\n3\n4\n5", 0, 10);
        let mut buf = Buffer::empty(Rect::new(0, 0, 10, 2));
        let cursor = l.render(Rect::new(0, 0, 10, 2), &mut buf);
        assert_eq!(cursor, Position { x: 4, y: 1 });
        let text: Vec<String> = (0..2)
            .map(|y| (0..10).map(|x| buf[(x, y)].symbol().to_owned()).collect())
            .collect();
        assert_eq!(text, ["   4      ", "   5      "]);
    }
}
