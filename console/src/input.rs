//! The input line of the full-screen console: a small multi-line editor with
//! a history of what was sent. Pure state, no terminal.

/// How many sent messages the history keeps.
const HISTORY_LIMIT: usize = 500;

/// What the human is typing, and what they typed before.
#[derive(Debug, Clone)]
pub struct Input {
    /// Never empty: an empty input is one empty line.
    lines: Vec<String>,
    /// Cursor line.
    row: usize,
    /// Cursor position in `lines[row]`, in chars.
    col: usize,
    history: Vec<String>,
    /// The history entry shown now, while browsing with Up/Down.
    browsing: Option<usize>,
    /// What was typed before browsing started, restored by Down past the newest entry.
    draft: String,
}

impl Default for Input {
    fn default() -> Self {
        Self {
            lines: vec![String::new()],
            row: 0,
            col: 0,
            history: Vec::new(),
            browsing: None,
            draft: String::new(),
        }
    }
}

impl Input {
    /// The lines typed so far (at least one).
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The cursor as (line, char index in that line).
    pub fn cursor(&self) -> (usize, usize) {
        (self.row, self.col)
    }

    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    pub fn is_empty(&self) -> bool {
        self.lines.len() == 1 && self.lines[0].is_empty()
    }

    pub fn is_single_line(&self) -> bool {
        self.lines.len() == 1
    }

    /// Replaces the whole text and puts the cursor at its end.
    pub fn set_text(&mut self, text: &str) {
        self.lines = text.split('\n').map(clean).collect();
        if self.lines.is_empty() {
            self.lines.push(String::new());
        }
        self.row = self.lines.len() - 1;
        self.col = self.lines[self.row].chars().count();
    }

    /// Takes the text to send: empties the input and records the text in the
    /// history. `None` (and nothing changes) when there is only whitespace.
    pub fn submit(&mut self) -> Option<String> {
        let text = self.text();
        if text.trim().is_empty() {
            return None;
        }
        self.remember(&text);
        self.set_text("");
        self.browsing = None;
        self.draft.clear();
        Some(text)
    }

    /// Adds a message to the history (a message seen in the log, or sent here),
    /// unless it repeats the newest entry.
    pub fn remember(&mut self, text: &str) {
        if self.history.last().is_some_and(|last| last == text) {
            return;
        }
        self.history.push(text.to_owned());
        if self.history.len() > HISTORY_LIMIT {
            let extra = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..extra);
            self.browsing = self.browsing.and_then(|i| i.checked_sub(extra));
        }
    }

    pub fn history(&self) -> &[String] {
        &self.history
    }

    pub fn insert_char(&mut self, c: char) {
        if c == '\n' {
            self.newline();
            return;
        }
        let c = if c == '\t' { ' ' } else { c };
        if c.is_control() {
            return;
        }
        let at = byte_index(&self.lines[self.row], self.col);
        self.lines[self.row].insert(at, c);
        self.col += 1;
    }

    /// Inserts pasted text as is: its newlines become lines, none is sent.
    /// Each line goes in whole, so a large paste costs one pass, not one per character.
    pub fn insert_str(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        for (i, piece) in text.split('\n').enumerate() {
            if i > 0 {
                self.newline();
            }
            let piece = clean(piece);
            let at = byte_index(&self.lines[self.row], self.col);
            self.lines[self.row].insert_str(at, &piece);
            self.col += piece.chars().count();
        }
    }

    /// Splits the line at the cursor.
    pub fn newline(&mut self) {
        let at = byte_index(&self.lines[self.row], self.col);
        let rest = self.lines[self.row].split_off(at);
        self.row += 1;
        self.lines.insert(self.row, rest);
        self.col = 0;
    }

    pub fn backspace(&mut self) {
        if self.col > 0 {
            self.col -= 1;
            let at = byte_index(&self.lines[self.row], self.col);
            self.lines[self.row].remove(at);
        } else if self.row > 0 {
            let line = self.lines.remove(self.row);
            self.row -= 1;
            self.col = self.lines[self.row].chars().count();
            self.lines[self.row].push_str(&line);
        }
    }

    pub fn delete(&mut self) {
        let len = self.lines[self.row].chars().count();
        if self.col < len {
            let at = byte_index(&self.lines[self.row], self.col);
            self.lines[self.row].remove(at);
        } else if self.row + 1 < self.lines.len() {
            let next = self.lines.remove(self.row + 1);
            self.lines[self.row].push_str(&next);
        }
    }

    pub fn left(&mut self) {
        if self.col > 0 {
            self.col -= 1;
        } else if self.row > 0 {
            self.row -= 1;
            self.col = self.lines[self.row].chars().count();
        }
    }

    pub fn right(&mut self) {
        if self.col < self.lines[self.row].chars().count() {
            self.col += 1;
        } else if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = 0;
        }
    }

    pub fn home(&mut self) {
        self.col = 0;
    }

    pub fn end(&mut self) {
        self.col = self.lines[self.row].chars().count();
    }

    /// Moves the cursor one line up; `false` when it is on the first line.
    pub fn up(&mut self) -> bool {
        if self.row == 0 {
            return false;
        }
        self.row -= 1;
        self.col = self.col.min(self.lines[self.row].chars().count());
        true
    }

    /// Moves the cursor one line down; `false` when it is on the last line.
    pub fn down(&mut self) -> bool {
        if self.row + 1 >= self.lines.len() {
            return false;
        }
        self.row += 1;
        self.col = self.col.min(self.lines[self.row].chars().count());
        true
    }

    /// Deletes from the start of the line to the cursor (Ctrl-U).
    pub fn kill_to_start(&mut self) {
        let at = byte_index(&self.lines[self.row], self.col);
        self.lines[self.row].drain(..at);
        self.col = 0;
    }

    /// Deletes from the cursor to the end of the line (Ctrl-K).
    pub fn kill_to_end(&mut self) {
        let at = byte_index(&self.lines[self.row], self.col);
        self.lines[self.row].truncate(at);
    }

    /// Deletes the word before the cursor (Ctrl-W).
    pub fn delete_word(&mut self) {
        let chars: Vec<char> = self.lines[self.row].chars().collect();
        let mut start = self.col;
        while start > 0 && chars[start - 1].is_whitespace() {
            start -= 1;
        }
        while start > 0 && !chars[start - 1].is_whitespace() {
            start -= 1;
        }
        let from = byte_index(&self.lines[self.row], start);
        let to = byte_index(&self.lines[self.row], self.col);
        self.lines[self.row].replace_range(from..to, "");
        self.col = start;
    }

    /// Shows the previous history entry; `false` when there is none.
    pub fn history_prev(&mut self) -> bool {
        let index = match self.browsing {
            Some(0) => return false,
            Some(i) => i - 1,
            None if self.history.is_empty() => return false,
            None => {
                self.draft = self.text();
                self.history.len() - 1
            }
        };
        self.browsing = Some(index);
        let text = self.history[index].clone();
        self.set_text(&text);
        true
    }

    /// Shows the next history entry, or the draft after the newest; `false`
    /// when not browsing.
    pub fn history_next(&mut self) -> bool {
        let Some(index) = self.browsing else {
            return false;
        };
        if index + 1 < self.history.len() {
            self.browsing = Some(index + 1);
            let text = self.history[index + 1].clone();
            self.set_text(&text);
        } else {
            self.browsing = None;
            let draft = std::mem::take(&mut self.draft);
            self.set_text(&draft);
        }
        true
    }
}

/// Tabs become spaces and other control characters are dropped.
fn clean(line: &str) -> String {
    line.chars()
        .filter_map(|c| match c {
            '\t' => Some(' '),
            c if c.is_control() => None,
            c => Some(c),
        })
        .collect()
}

/// The byte offset of char `col` in `s` (its length past the end).
fn byte_index(s: &str, col: usize) -> usize {
    s.char_indices().nth(col).map_or(s.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn typed(s: &str) -> Input {
        let mut input = Input::default();
        input.insert_str(s);
        input
    }

    #[test]
    fn typing_editing_and_lines() {
        let mut input = typed("héllo");
        assert_eq!(input.cursor(), (0, 5));
        input.left();
        input.left();
        input.insert_char('X');
        assert_eq!(input.text(), "hélXlo");
        input.newline();
        assert_eq!(input.lines(), ["hélX", "lo"]);
        assert_eq!(input.cursor(), (1, 0));
        input.backspace();
        assert_eq!(input.lines(), ["hélXlo"]);
        assert_eq!(input.cursor(), (0, 4));
        input.delete();
        input.backspace();
        assert_eq!(input.text(), "hélo");
        input.end();
        input.delete_word();
        assert_eq!(input.text(), "");
        assert!(input.is_empty());
    }

    #[test]
    fn paste_keeps_lines_and_drops_control_characters() {
        let input = typed("one\r\ntwo\tthree\u{1b}[2J\nfour");
        assert_eq!(input.lines(), ["one", "two three[2J", "four"]);
        assert_eq!(input.cursor(), (2, 4));
    }

    #[test]
    fn a_large_paste_is_quick() {
        let big = "x".repeat(200_000);
        let started = std::time::Instant::now();
        let mut input = typed("ab");
        input.left();
        input.insert_str(&big);
        assert_eq!(input.lines()[0].len(), 200_002);
        assert_eq!(input.cursor(), (0, 200_001));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn up_and_down_move_between_lines() {
        let mut input = typed("a long line\nab");
        assert!(input.up());
        assert_eq!(input.cursor(), (0, 2));
        assert!(!input.up());
        assert!(input.down());
        assert!(!input.down());
        input.home();
        input.kill_to_end();
        assert_eq!(input.text(), "a long line\n");
        input.up();
        input.end();
        input.left();
        input.kill_to_start();
        assert_eq!(input.text(), "e\n");
    }

    #[test]
    fn submit_records_history_and_browsing_restores_the_draft() {
        let mut input = Input::default();
        assert_eq!(input.submit(), None);
        input.insert_str("  ");
        assert_eq!(input.submit(), None, "whitespace is not sent");
        input.set_text("first");
        assert_eq!(input.submit().as_deref(), Some("first"));
        input.set_text("second\nline");
        assert_eq!(input.submit().as_deref(), Some("second\nline"));
        input.remember("second\nline");
        assert_eq!(input.history(), ["first", "second\nline"]);

        input.insert_str("draft");
        assert!(input.history_prev());
        assert_eq!(input.text(), "second\nline");
        assert!(input.history_prev());
        assert_eq!(input.text(), "first");
        assert!(!input.history_prev());
        assert!(input.history_next());
        assert!(input.history_next());
        assert_eq!(input.text(), "draft");
        assert!(!input.history_next());
    }

    #[test]
    fn history_is_bounded() {
        let mut input = Input::default();
        for i in 0..HISTORY_LIMIT + 10 {
            input.remember(&i.to_string());
        }
        assert_eq!(input.history().len(), HISTORY_LIMIT);
        assert_eq!(input.history()[0], "10");
    }
}
