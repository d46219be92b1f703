//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use std::io::{Read, Write};

use crate::retention::ArchiveLine;

/// Most bytes an archive is decompressed to here: a small input that
/// inflates without end (a zip bomb) is cut, not followed.
const MAX_INFLATED: u64 = 1 << 20;

/// `protocol_records` (the bus's part): a session's archive as
/// `retention::read_archive` reads it from the object store: gzip,
/// decompressed, then one [`ArchiveLine`] per non-empty line. The first
/// byte says whether the rest is the compressed object as stored (hostile
/// bytes through the decompressor) or its lines, compressed here first as
/// `retention::archive` writes them. What decodes round-trips.
pub fn archive(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let compressed = if pick % 2 == 0 {
        rest.to_vec()
    } else {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if encoder.write_all(rest).is_err() {
            return;
        }
        match encoder.finish() {
            Ok(bytes) => bytes,
            Err(_) => return,
        }
    };
    let mut text = String::new();
    let read = flate2::read::GzDecoder::new(compressed.as_slice())
        .take(MAX_INFLATED)
        .read_to_string(&mut text);
    if read.is_err() {
        return;
    }
    if pick % 2 == 1 {
        assert_eq!(text.as_bytes(), rest, "the archive decompresses otherwise");
    }
    for line in text.lines().filter(|l| !l.is_empty()) {
        let Ok(decoded) = serde_json::from_str::<ArchiveLine>(line) else {
            continue;
        };
        let encoded = serde_json::to_value(&decoded).unwrap_or_default();
        let again = serde_json::from_value::<ArchiveLine>(encoded.clone())
            .map(|l| serde_json::to_value(&l).unwrap_or_default());
        assert_eq!(
            again.ok(),
            Some(encoded),
            "an archive line reads back otherwise"
        );
        if let ArchiveLine::Header { status, .. } = decoded {
            let _ = crate::retention::live(&status);
        }
    }
    let _ = crate::decode::<arbiter_protocol::SessionStatus>(
        &arbiter_protocol::subjects::session_log("fuzz"),
        rest,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/protocol_records");
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
                archive(&data);
                archive(data.get(1..).unwrap_or_default());
            });
            assert!(replayed.is_ok(), "protocol_records/{name} panicked");
        }
    }

    /// What `retention::archive` writes, `read_archive` reads back.
    #[test]
    fn an_archive_written_here_reads_back() {
        let mut data = vec![1u8];
        data.extend_from_slice(
            b"{\"kind\":\"log\",\"entry\":{\"seq\":1}}\n{\"kind\":\"orch_state\",\"orch_id\":\"o\",\"record\":{}}\n",
        );
        archive(&data);
    }
}
