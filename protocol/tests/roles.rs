//! The "Roles and permissions" table of docs/protocol.md is the one
//! `protocol::roles` renders: the document cannot drift from what
//! `arbiter-admin` signs into credentials. `UPDATE_DOCS=1` rewrites it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

const BEGIN: &str = "<!-- roles:begin -->\n";
const END: &str = "<!-- roles:end -->";

#[test]
fn the_documented_permissions_are_the_ones_signed_into_credentials() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc
        .find(BEGIN)
        .expect("docs/protocol.md lacks the roles:begin marker")
        + BEGIN.len();
    let end = doc
        .find(END)
        .expect("docs/protocol.md lacks the roles:end marker");
    let table = arbiter_protocol::roles::render_table();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    pretty_assertions::assert_eq!(
        &doc[start..end],
        table,
        "docs/protocol.md's roles table is stale: run UPDATE_DOCS=1 cargo test -p arbiter-protocol --test roles"
    );
}
