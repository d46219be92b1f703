//! Text from the wire or a model, made inert before it reaches a terminal: no
//! character a terminal would act on (escape sequences, a carriage return,
//! bidi overrides) is written raw, and in the line modes no text can start a
//! line of its own, so none can pose as another speaker.
//!
//! Escaped characters are shown as `\x1b` (ASCII) or `\u{202e}` (the rest).
//! A backslash is not escaped itself: `\x1b` in the text reads the same as an
//! escaped ESC, which is ambiguous to the eye but inert.

use std::fmt::Write as _;
use std::io;

use serde::Serialize;

/// Starts every line after the first of a multi-line text in the line modes.
/// Speaker lines (`You: `, `Arbiter: `, `· `, `! ` …) start at column 0, so no
/// continuation line can look like one.
pub const CONTINUATION: &str = "  │ ";
/// What a tab becomes: a terminal moves it to the next tab stop, the screen
/// cannot draw it.
const TAB: &str = "    ";

/// Whether `c` is one a terminal acts on rather than shows, or one that makes
/// text look other than it is: C0 controls, DEL and C1 controls; the bidi
/// controls that reorder text (LRM, RLM, ALM, embeddings, overrides,
/// isolates); the zero-width characters that hide where text breaks or
/// joins (ZWSP, word joiner, invisible operators, BOM); line and paragraph
/// separators, which some renderers break lines at; and interlinear
/// annotations, which hide text. ZWJ and ZWNJ stay: scripts and emoji need them.
pub fn is_active(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'
                | '\u{200e}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

/// `text` with every active character shown escaped, newlines kept (`\r\n`
/// becomes one), tabs as spaces. The full-screen view shows all text this way.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => out.push('\n'),
            '\t' => out.push_str(TAB),
            c if is_active(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// `text` escaped on one line: newlines are escaped too. For table cells and
/// log fields.
pub fn one_line(text: &str) -> String {
    escape(text).replace('\n', "\\x0a")
}

/// The line-mode form of a speaker's words: `label` (the console's own text)
/// then `text` escaped, every line after the first starting with
/// [`CONTINUATION`] (an empty one with its bar alone).
pub fn block(label: &str, text: &str) -> String {
    let text = escape(text);
    let mut lines = text.split('\n');
    let mut out = String::with_capacity(label.len() + text.len());
    out.push_str(label);
    out.push_str(lines.next().unwrap_or_default());
    for line in lines {
        out.push('\n');
        if line.is_empty() {
            out.push_str(CONTINUATION.trim_end());
        } else {
            out.push_str(CONTINUATION);
            out.push_str(line);
        }
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    let code = u32::from(c);
    // Writing to a String cannot fail.
    let _ = if code < 0x80 {
        write!(out, "\\x{code:02x}")
    } else {
        write!(out, "\\u{{{code:x}}}")
    };
}

/// `value` as one line of compact JSON in which the active characters serde
/// leaves raw (DEL, C1, bidi and the rest of [`is_active`]) are written as
/// `\uXXXX` escapes: the same JSON value for a program, nothing a terminal
/// acts on for a human who looks at it.
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut bytes = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, InertJson);
    value.serialize(&mut serializer)?;
    String::from_utf8(bytes).map_err(|e| serde::ser::Error::custom(e.to_string()))
}

/// serde_json's compact format, with the active characters escaped.
struct InertJson;

impl serde_json::ser::Formatter for InertJson {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| is_active(c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let mut units = [0; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn active_characters_are_shown_escaped() {
        let cases = [
            ("\u{1b}]0;pwned\u{7}\u{1b}[2J", "\\x1b]0;pwned\\x07\\x1b[2J"),
            ("ok\rYou: fake", "ok\\x0dYou: fake"),
            ("crlf\r\nends", "crlf\nends"),
            ("\u{9b}2J\u{7f}\u{0}", "\\u{9b}2J\\x7f\\x00"),
            (
                "abc\u{202e}fed\u{2066}x\u{2069}",
                "abc\\u{202e}fed\\u{2066}x\\u{2069}",
            ),
            (
                "a\u{200b}b\u{feff}\u{2028}",
                "a\\u{200b}b\\u{feff}\\u{2028}",
            ),
            ("tab\there", "tab    here"),
            (
                "emoji 👩\u{200d}💻, café, 日本語",
                "emoji 👩\u{200d}💻, café, 日本語",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(escape(text), want, "{text:?}");
        }
        assert_eq!(one_line("a\nb\u{1b}"), "a\\x0ab\\x1b");
    }

    #[test]
    fn continuation_lines_are_marked() {
        assert_eq!(block("You: ", "hello"), "You: hello");
        assert_eq!(
            block("Arbiter: ", "line1\nYou: fake\n\n  Arbiter: fake\n"),
            "Arbiter: line1\n  │ You: fake\n  │\n  │   Arbiter: fake\n  │"
        );
        assert_eq!(
            block("· Orchestrators released.", ""),
            "· Orchestrators released."
        );
    }

    #[test]
    fn json_lines_escape_what_serde_leaves_raw() {
        let text = "\u{1b}[2J \u{9b}2J \u{7f} \u{202e}x \u{1f600} é \"q\"\n";
        let line = json_line(text).unwrap();
        assert_eq!(line, r#""\u001b[2J \u009b2J \u007f \u202ex 😀 é \"q\"\n""#);
        assert!(!line.chars().any(is_active), "{line:?}");
        let back: String = serde_json::from_str(&line).unwrap();
        assert_eq!(back, text);
    }
}
