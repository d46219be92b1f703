//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use arbiter_console::app::App;
use arbiter_protocol::{LogEntry, subjects};
use serde_json::Value;

use crate::log::{MAX_TEXT, items};
use crate::tools::{ReadArgs, SendArgs, SessionArgs, StartArgs};

/// `mcp_inputs` (the server's part): what an MCP client sends this
/// server. The first byte picks: a tool call's arguments (JSON, decoded as
/// rmcp's `Parameters` decodes them, into each tool's argument type; the
/// session id read as `link::session_id` reads it; a line to send read by
/// the console's own state, as `send` reads it), or a log entry as `read`
/// turns it into items for the client. What must hold: an id taken is a
/// subject token; an item's text is at most [`MAX_TEXT`] characters and a
/// note.
pub fn mcp_server(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 2 == 1 {
        if let Ok(entry) = serde_json::from_slice::<LogEntry>(rest) {
            for musings in [false, true] {
                for item in items(&entry, musings) {
                    assert_eq!(item.seq, entry.seq);
                    assert!(
                        item.text.chars().count() <= MAX_TEXT + 100,
                        "an item of {} characters",
                        item.text.chars().count()
                    );
                }
            }
        }
        return;
    }
    let Ok(Value::Object(arguments)) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let arguments = Value::Object(arguments);
    let session = |id: &str| {
        if let Ok(taken) = crate::link::session_id(id) {
            assert!(
                subjects::is_valid_token(taken),
                "{taken:?} taken as a session id"
            );
            assert_eq!(taken, id.trim());
        }
    };
    if let Ok(args) = serde_json::from_value::<StartArgs>(arguments.clone()) {
        let _ = args
            .workspace
            .as_deref()
            .map(arbiter_protocol::memory::is_valid_workspace);
        let _ = args.brief.len();
    }
    if let Ok(args) = serde_json::from_value::<SendArgs>(arguments.clone()) {
        session(&args.session);
        let mut app = App::new("fuzz", "");
        let _ = app.send(args.text);
        let _ = app.after_feed();
    }
    if let Ok(args) = serde_json::from_value::<SessionArgs>(arguments.clone()) {
        session(&args.session);
    }
    if let Ok(args) = serde_json::from_value::<ReadArgs>(arguments) {
        session(&args.session);
        let _ = (args.since_seq, args.musings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/mcp_inputs");
        let seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, std::fs::read(e.path()).ok()?))
            })
            .collect();
        assert!(seeds.len() >= 3, "{} seeds", seeds.len());
        for (name, data) in seeds {
            let replayed = std::panic::catch_unwind(|| {
                mcp_server(&data);
                mcp_server(data.get(1..).unwrap_or_default());
            });
            assert!(replayed.is_ok(), "mcp_inputs/{name} panicked");
        }
    }
}
