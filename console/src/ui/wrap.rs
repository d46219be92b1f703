//! Word wrapping of styled text into rows of a given width, measured in
//! terminal cells (wide characters count two).

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// One styled character.
type Cell = (char, Style);

fn width_of(c: char) -> usize {
    c.width().unwrap_or(0)
}

/// Wraps `spans` (which may hold `\n`) into lines no wider than `width`.
/// Words move to the next line whole when they fit on one; longer words are
/// cut. Spaces at a wrap are dropped. An empty text gives one empty line.
pub fn wrap(spans: &[Span<'_>], width: usize) -> Vec<Line<'static>> {
    if width == 0 {
        return Vec::new();
    }
    let cells: Vec<Cell> = spans
        .iter()
        .flat_map(|span| span.content.chars().map(move |c| (c, span.style)))
        .collect();
    let mut lines = Vec::new();
    for paragraph in cells.split(|(c, _)| *c == '\n') {
        wrap_paragraph(paragraph, width, &mut lines);
    }
    lines.into_iter().map(to_line).collect()
}

fn wrap_paragraph(cells: &[Cell], width: usize, out: &mut Vec<Vec<Cell>>) {
    let mut line: Vec<Cell> = Vec::new();
    let mut used = 0;
    let mut rest = cells;
    while let Some(&(first, _)) = rest.first() {
        let space = first == ' ';
        let len = rest
            .iter()
            .position(|(c, _)| (*c == ' ') != space)
            .unwrap_or(rest.len());
        let (token, tail) = rest.split_at(len);
        rest = tail;
        let token_width: usize = token.iter().map(|(c, _)| width_of(*c)).sum();
        if used + token_width <= width {
            line.extend_from_slice(token);
            used += token_width;
        } else if space {
            finish(&mut line, out);
            used = 0;
        } else if token_width <= width {
            finish(&mut line, out);
            line.extend_from_slice(token);
            used = token_width;
        } else {
            for &cell in token {
                let w = width_of(cell.0);
                if used + w > width {
                    finish(&mut line, out);
                    used = 0;
                }
                line.push(cell);
                used += w;
            }
        }
    }
    finish(&mut line, out);
}

/// Ends a line without its trailing spaces.
fn finish(line: &mut Vec<Cell>, out: &mut Vec<Vec<Cell>>) {
    while line.last().is_some_and(|(c, _)| *c == ' ') {
        line.pop();
    }
    out.push(std::mem::take(line));
}

/// Merges runs of one style into spans.
fn to_line(cells: Vec<Cell>) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut text = String::new();
    let mut style = None;
    for (c, s) in cells {
        if style.is_some_and(|current| current != s) {
            spans.push(Span::styled(
                std::mem::take(&mut text),
                style.unwrap_or_default(),
            ));
        }
        style = Some(s);
        text.push(c);
    }
    if let Some(style) = style {
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}

/// Cuts `text` into pieces of at most `width` cells, character by character
/// (for the input, where every character must stay where the cursor expects
/// it). An empty text is one empty piece.
pub fn chunks(text: &str, width: usize) -> Vec<String> {
    let mut pieces = vec![String::new()];
    let mut used = 0;
    for c in text.chars() {
        let w = width_of(c);
        if used + w > width.max(1) {
            pieces.push(String::new());
            used = 0;
        }
        if let Some(last) = pieces.last_mut() {
            last.push(c);
        }
        used += w;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use ratatui::style::Stylize;

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn words_wrap_whole_and_long_words_are_cut() {
        let spans = [Span::raw("You: ").green(), Span::raw("the quick brown fox")];
        assert_eq!(texts(&wrap(&spans, 10)), ["You: the", "quick", "brown fox"]);
        assert_eq!(
            texts(&wrap(&[Span::raw("abcdefghijkl mn")], 5)),
            ["abcde", "fghij", "kl mn"]
        );
        assert_eq!(texts(&wrap(&[Span::raw("a\n\nb  ")], 5)), ["a", "", "b"]);
        assert_eq!(texts(&wrap(&[Span::raw("")], 5)), [""]);
        assert!(wrap(&[Span::raw("x")], 0).is_empty());
    }

    #[test]
    fn styles_survive_wrapping() {
        let lines = wrap(&[Span::raw("You: ").green(), Span::raw("hi there")], 7);
        assert_eq!(lines[0].spans.len(), 2);
        assert_eq!(lines[0].spans[0], Span::raw("You: ").green());
        assert_eq!(lines[0].spans[1], Span::raw("hi"));
        assert_eq!(lines[1].spans, [Span::raw("there")]);
    }

    #[test]
    fn wide_characters_count_two_cells() {
        assert_eq!(
            texts(&wrap(&[Span::raw("日本語 ok")], 4)),
            ["日本", "語", "ok"]
        );
        assert_eq!(chunks("日本語", 4), ["日本", "語"]);
        assert_eq!(chunks("", 4), [""]);
        assert_eq!(chunks("abcd", 4), ["abcd"]);
        assert_eq!(chunks("abcde", 4), ["abcd", "e"]);
    }
}
