//! Live Arbiter words: pulls the `intent` and the growing `message` out of
//! the Arbiter's JSON reply while it streams, so consoles can show the text
//! as it is written. Best effort: the log entry that ends the turn is the record.

use arbiter_protocol::ArbiterIntent;

/// Incremental reader of `{"intent": "...", "message": "..."}` as it arrives.
#[derive(Debug, Default)]
pub(crate) struct MessageExtractor {
    raw: String,
    intent: Option<ArbiterIntent>,
    /// Byte offset in `raw` where the message string's next undecoded char is.
    cursor: Option<usize>,
    done: bool,
}

impl MessageExtractor {
    pub(crate) fn intent(&self) -> Option<ArbiterIntent> {
        self.intent
    }

    /// Takes the next piece of raw reply text; returns the newly decoded
    /// message text, if any.
    pub(crate) fn push(&mut self, piece: &str) -> Option<String> {
        self.raw.push_str(piece);
        if self.intent.is_none() {
            self.intent = string_value_after(&self.raw, "\"intent\"").and_then(|(value, _)| {
                serde_json::from_value(serde_json::Value::String(value)).ok()
            });
        }
        if self.done {
            return None;
        }
        if self.cursor.is_none() {
            self.cursor = string_start_after(&self.raw, "\"message\"");
        }
        let start = self.cursor?;
        let (text, consumed, closed) = decode_partial(&self.raw[start..]);
        self.cursor = Some(start + consumed);
        self.done = closed;
        (!text.is_empty()).then_some(text)
    }
}

/// The offset just past the opening quote of the string value of `key`.
fn string_start_after(raw: &str, key: &str) -> Option<usize> {
    let at = raw.find(key)? + key.len();
    let rest = &raw[at..];
    let colon = rest.find(|c: char| !c.is_whitespace())?;
    if !rest[colon..].starts_with(':') {
        return None;
    }
    let after_colon = &rest[colon + 1..];
    let quote = after_colon.find(|c: char| !c.is_whitespace())?;
    after_colon[quote..]
        .starts_with('"')
        .then_some(at + colon + 1 + quote + 1)
}

/// A complete string value of `key`, once its closing quote has arrived.
fn string_value_after(raw: &str, key: &str) -> Option<(String, usize)> {
    let start = string_start_after(raw, key)?;
    let (text, consumed, closed) = decode_partial(&raw[start..]);
    closed.then_some((text, start + consumed))
}

/// Decodes a JSON string body up to its closing quote or up to the end of
/// what has arrived, holding back an escape that is not complete yet.
/// Returns the text, the bytes consumed, and whether the string closed.
fn decode_partial(body: &str) -> (String, usize, bool) {
    let bytes = body.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return (out, i + 1, true),
            b'\\' => {
                let Some(&kind) = bytes.get(i + 1) else {
                    break;
                };
                let simple = match kind {
                    b'n' => Some('\n'),
                    b't' => Some('\t'),
                    b'r' => Some('\r'),
                    b'b' => Some('\u{8}'),
                    b'f' => Some('\u{c}'),
                    b'"' => Some('"'),
                    b'\\' => Some('\\'),
                    b'/' => Some('/'),
                    _ => None,
                };
                if let Some(c) = simple {
                    out.push(c);
                    i += 2;
                    continue;
                }
                if kind != b'u' {
                    // Not valid JSON; show it as written.
                    out.push('\\');
                    i += 1;
                    continue;
                }
                let Some(unit) = hex4(bytes, i + 2) else {
                    break;
                };
                if (0xD800..0xDC00).contains(&unit) {
                    // A surrogate pair needs its second half.
                    if bytes.len() < i + 12 {
                        break;
                    }
                    let low = if &bytes[i + 6..i + 8] == b"\\u" {
                        hex4(bytes, i + 8)
                    } else {
                        None
                    };
                    match low.and_then(|low| {
                        char::from_u32(
                            0x10000 + ((unit - 0xD800) << 10) + (low.wrapping_sub(0xDC00)),
                        )
                    }) {
                        Some(c) => {
                            out.push(c);
                            i += 12;
                        }
                        None => {
                            out.push('\u{FFFD}');
                            i += 6;
                        }
                    }
                } else {
                    out.push(char::from_u32(unit).unwrap_or('\u{FFFD}'));
                    i += 6;
                }
            }
            _ => {
                // Copy a run of plain text at once (it is valid UTF-8: it came from a &str).
                let run = body[i..].find(['"', '\\']).map_or(body.len(), |n| i + n);
                out.push_str(&body[i..run]);
                i = run;
            }
        }
    }
    (out, i, false)
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(pieces: &[&str]) -> (Option<ArbiterIntent>, Vec<String>) {
        let mut x = MessageExtractor::default();
        let out = pieces.iter().filter_map(|p| x.push(p)).collect();
        (x.intent(), out)
    }

    #[test]
    fn streams_the_message_as_it_arrives() {
        let (intent, out) = feed(&[
            r#"{"intent": "addr"#,
            r#"ess_human", "mess"#,
            r#"age": "What OAuth"#,
            r#" providers? \"Tok"#,
            r#"en\" exp\u00"#,
            r#"e9ry?\n"}"#,
        ]);
        assert_eq!(intent, Some(ArbiterIntent::AddressHuman));
        assert_eq!(out.concat(), "What OAuth providers? \"Token\" expéry?\n");
        assert!(out.len() >= 3, "{out:?}");
    }

    #[test]
    fn holds_back_split_escapes_and_surrogate_pairs() {
        let (_, out) = feed(&[r#"{"message":"a\"#, r#"nb \ud83d"#, r#"\ude00 c"}"#]);
        assert_eq!(out.concat(), "a\nb 😀 c");
    }

    #[test]
    fn message_before_intent_and_nothing_after_the_end() {
        let (intent, out) = feed(&[r#"{"message":"Hi","#, r#""intent":"musings"}"#, "  "]);
        assert_eq!(intent, Some(ArbiterIntent::Musings));
        assert_eq!(out, vec!["Hi".to_owned()]);
    }
}
