//! The start-up check that the sandbox shows no secret of the deployment:
//! a worker whose commands could read a NATS operator or account key, a
//! CA or server key, another credential, or an `arbiter-admin` deployment
//! directory does not start. It walks what the [`View`] shows (but the
//! package manager's directories and the toolchain trees) and knows the
//! layout `arbiter-admin init` writes (`admin/src/layout.rs`: `admin.json`
//! beside `keys/*.nk`, `ca/ca-key.pem`, `server/server-key.pem`, bundles of
//! `nats.creds` and `key.pem` in `creds/<name>/`) and the nkey seed
//! prefixes (`SO` operator, `SA` account, `SU` user).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::view::View;

/// How deep the walk goes below each root.
const MAX_DEPTH: usize = 12;
/// Entries looked at in all, at most: past that the walk stops and says so.
pub(super) const MAX_ENTRIES: usize = 200_000;
/// Bytes of a candidate file read for a seed or a key.
const READ_LIMIT: u64 = 64 * 1024;

/// A secret commands could read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposed {
    pub path: PathBuf,
    /// What it is, in the words of the refusal.
    pub what: &'static str,
}

/// What the walk found: the first secret, and whether it stopped early.
#[derive(Debug, Default)]
pub(super) struct Scan {
    pub(super) exposed: Option<Exposed>,
    /// The walk stopped at [`MAX_ENTRIES`] before it looked at everything.
    pub(super) cut: bool,
}

/// Walks what `view` shows for a secret.
pub(super) fn scan(view: &View) -> Scan {
    let mut scan = Scan::default();
    let mut seen = 0usize;
    for root in view.scanned() {
        walk(view, &root, 0, &mut seen, &mut scan);
        if scan.exposed.is_some() || scan.cut {
            break;
        }
    }
    scan
}

fn walk(view: &View, path: &Path, depth: usize, seen: &mut usize, scan: &mut Scan) {
    if view.hides(path) {
        return;
    }
    *seen += 1;
    if *seen > MAX_ENTRIES {
        scan.cut = true;
        return;
    }
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_file() {
        if let Some(what) = secret_in(path, meta.len()) {
            scan.exposed = Some(Exposed {
                path: path.to_path_buf(),
                what,
            });
        }
        return;
    }
    if !meta.is_dir() || depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    children.sort();
    for child in children {
        walk(view, &child, depth + 1, seen, scan);
        if scan.exposed.is_some() || scan.cut {
            return;
        }
    }
}

/// What secret `file` holds, by its name and place in `arbiter-admin`'s
/// layout and, for a candidate name, by what it starts with.
pub(super) fn secret_in(file: &Path, len: u64) -> Option<&'static str> {
    let name = file.file_name()?.to_str()?;
    let dir = file.parent()?;
    if name == "admin.json" && dir.join("keys").is_dir() {
        return Some(
            "the admin directory of an arbiter-admin deployment (admin.json beside keys/)",
        );
    }
    let bundle_key = name == "key.pem" && dir.join("nats.creds").exists();
    let candidate = [".nk", ".creds", ".seed"].iter().any(|e| name.ends_with(e))
        || ["ca-key.pem", "server-key.pem"].contains(&name)
        || bundle_key;
    if !candidate {
        return None;
    }
    let mut head = Vec::new();
    let file_handle = std::fs::File::open(file).ok()?;
    file_handle
        .take(READ_LIMIT.min(len))
        .read_to_end(&mut head)
        .ok()?;
    let text = String::from_utf8_lossy(&head);
    if let Some(kind) = nkey_seed(&text) {
        return Some(match kind {
            b'O' => "an operator key (an nkey seed SO…), which signs accounts",
            b'A' => "an account or signing key (an nkey seed SA…), which signs credentials",
            _ => "a NATS credential (an nkey seed SU…)",
        });
    }
    if text.contains("PRIVATE KEY-----") {
        return Some(match name {
            "ca-key.pem" => "the deployment CA's private key",
            "server-key.pem" => "the NATS server's TLS private key",
            _ => "another credential's TLS private key",
        });
    }
    None
}

/// The kind byte (`O`, `A`, `U`) of the first nkey seed of an operator, an
/// account or a user in `text`: `S`, the kind, then 56 more base32 letters
/// (58 in all), standing alone.
pub(super) fn nkey_seed(text: &str) -> Option<u8> {
    const LEN: usize = 58;
    let bytes = text.as_bytes();
    let base32 = |b: u8| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b);
    let mut i = 0;
    while i + LEN <= bytes.len() {
        let standalone_before = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if bytes[i] == b'S'
            && matches!(bytes[i + 1], b'O' | b'A' | b'U')
            && standalone_before
            && bytes[i + 2..i + LEN].iter().all(|&b| base32(b))
            && bytes
                .get(i + LEN)
                .is_none_or(|b| !b.is_ascii_alphanumeric())
        {
            return Some(bytes[i + 1]);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER_SEED: &str = "SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU";

    #[test]
    fn seeds_are_told_by_their_prefix_and_length() {
        assert_eq!(nkey_seed(USER_SEED), Some(b'U'));
        let creds = format!(
            "-----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            USER_SEED.replacen("SU", "SA", 1)
        );
        assert_eq!(nkey_seed(&creds), Some(b'A'));
        assert_eq!(nkey_seed(&USER_SEED.replacen("SU", "SO", 1)), Some(b'O'));
        // A public key, a seed cut short, one inside a longer word, a
        // server's seed (not a credential's): none.
        assert_eq!(nkey_seed(&USER_SEED.replacen('S', "", 1)), None);
        assert_eq!(nkey_seed(&USER_SEED[..50]), None);
        assert_eq!(nkey_seed(&format!("X{USER_SEED}")), None);
        assert_eq!(nkey_seed(&format!("{USER_SEED}Q")), None);
        assert_eq!(nkey_seed(&USER_SEED.replacen("SU", "SN", 1)), None);
    }

    #[test]
    fn the_admin_layout_and_seed_files_are_secrets_and_the_rest_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["keys", "ca", "server", "creds/console", "certs"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let pem = "-----BEGIN PRIVATE KEY-----\nMIG\n-----END PRIVATE KEY-----\n";
        let files = [
            ("admin.json", "{}".to_owned()),
            ("keys/signing.nk", USER_SEED.replacen("SU", "SA", 1)),
            ("keys/operator.nk", USER_SEED.replacen("SU", "SO", 1)),
            ("ca/ca-key.pem", pem.to_owned()),
            ("server/server-key.pem", pem.to_owned()),
            ("creds/console/nats.creds", format!("jwt\n{USER_SEED}\n")),
            ("creds/console/key.pem", pem.to_owned()),
            (
                "creds/console/ca.pem",
                "-----BEGIN CERTIFICATE-----".to_owned(),
            ),
            ("certs/key.pem", pem.to_owned()),
            ("keys/empty.nk", String::new()),
            ("notes.creds", "no seed here".to_owned()),
        ];
        for (name, text) in &files {
            std::fs::write(d.join(name), text).unwrap();
        }
        let found = |name: &str| {
            let path = d.join(name);
            secret_in(&path, std::fs::metadata(&path).unwrap().len())
        };
        assert!(found("admin.json").unwrap().contains("arbiter-admin"));
        assert!(found("keys/signing.nk").unwrap().contains("signing key"));
        assert!(found("keys/operator.nk").unwrap().contains("operator key"));
        assert!(found("ca/ca-key.pem").unwrap().contains("CA"));
        assert!(found("server/server-key.pem").unwrap().contains("server"));
        assert!(
            found("creds/console/nats.creds")
                .unwrap()
                .contains("credential")
        );
        assert!(found("creds/console/key.pem").unwrap().contains("TLS"));
        for harmless in [
            "creds/console/ca.pem",
            "certs/key.pem",
            "keys/empty.nk",
            "notes.creds",
        ] {
            assert_eq!(found(harmless), None, "{harmless}");
        }
    }
}
