//! `arbiter-console memory list|show <id>|forget <id>`: what a workspace
//! remembers across sessions (the bucket `arbiter_memory`), and removing
//! an entry. Also which workspace a console is in: `--workspace`, else the
//! name of the directory it runs in.

use arbiter_protocol::memory::is_valid_workspace;
use arbiter_protocol::{MemoryEntry, subjects};
use async_nats::jetstream::kv;
use chrono::{DateTime, Utc};
use tokio::io::AsyncWrite;
use unicode_width::UnicodeWidthStr;

use crate::session::CLIENT_NAME;
use crate::{ConsoleError, Result, inert, write_line};

/// Characters of an entry's text the list shows (`show` gives it whole).
const LIST_TEXT_CHARS: usize = 72;

/// What to do with the memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    List,
    Show { id: String },
    Forget { id: String },
}

/// The workspace a console is in: `given` (`--workspace`), checked; else
/// the name of `cwd` with every character a key cannot hold made `-`
/// (`default` if nothing is left).
pub fn workspace(given: Option<&str>, cwd: Option<&std::path::Path>) -> Result<String> {
    if let Some(name) = given {
        return if is_valid_workspace(name) {
            Ok(name.to_owned())
        } else {
            Err(ConsoleError::InvalidWorkspace {
                name: name.to_owned(),
            })
        };
    }
    let base = cwd
        .and_then(|dir| dir.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(arbiter_protocol::memory::MAX_WORKSPACE);
    let name = name.trim_matches('-').to_owned();
    Ok(if name.is_empty() {
        "default".to_owned()
    } else {
        name
    })
}

/// Runs one memory command on `workspace`, printing on `out`: a table or
/// one JSON object per line. An id that is not there is an error.
pub async fn run<W: AsyncWrite + Unpin>(
    nats: &arbiter_bus::NatsOptions,
    workspace: &str,
    action: Action,
    json: bool,
    mut out: W,
) -> Result<()> {
    let error = |message: String| ConsoleError::Memory {
        workspace: workspace.to_owned(),
        message,
    };
    if let Action::Show { id } | Action::Forget { id } = &action
        && !subjects::is_valid_token(id)
    {
        return Err(error(format!(
            "{id:?} is not a memory entry id (they look like m0123456789ab)"
        )));
    }
    let conn = arbiter_bus::connect_with(nats, CLIENT_NAME, arbiter_bus::Reach::FailFast).await?;
    let js = async_nats::jetstream::new(conn.client);
    // No coordinator has run against this server yet: nothing is kept.
    let store: Option<kv::Store> = arbiter_bus::memory::open(&js).await.ok();
    match action {
        Action::List => {
            let mut entries = match &store {
                Some(store) => arbiter_bus::memory::entries(store, workspace).await?,
                None => Vec::new(),
            };
            entries.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.id.cmp(&b.id)));
            if json {
                for entry in &entries {
                    write_line(&mut out, &inert::json_line(entry)?).await?;
                }
            } else if entries.is_empty() {
                write_line(
                    &mut tokio::io::stderr(),
                    &format!("no memory in workspace {workspace}"),
                )
                .await?;
            } else {
                for line in table(&entries) {
                    write_line(&mut out, &line).await?;
                }
            }
        }
        Action::Show { id } => {
            let entry = find(store.as_ref(), workspace, &id).await?;
            if json {
                write_line(&mut out, &inert::json_line(&entry)?).await?;
            } else {
                for line in shown(&entry) {
                    write_line(&mut out, &line).await?;
                }
            }
        }
        Action::Forget { id } => {
            let entry = find(store.as_ref(), workspace, &id).await?;
            if let Some(store) = &store {
                arbiter_bus::memory::forget(store, workspace, &id).await?;
            }
            if json {
                let forgotten = serde_json::json!({ "forgotten": entry });
                write_line(&mut out, &inert::json_line(&forgotten)?).await?;
            } else {
                let text = inert::one_line(&entry.text);
                write_line(
                    &mut out,
                    &format!("forgotten: {id} (workspace {workspace}): {text}"),
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// Entry `id` of `workspace`, or an error that says how to find the ids.
async fn find(store: Option<&kv::Store>, workspace: &str, id: &str) -> Result<MemoryEntry> {
    let entry = match store {
        Some(store) => arbiter_bus::memory::get(store, workspace, id).await?,
        None => None,
    };
    entry.ok_or_else(|| ConsoleError::Memory {
        workspace: workspace.to_owned(),
        message: format!(
            "no entry {id} (see `arbiter-console memory list --workspace {workspace}`)"
        ),
    })
}

/// The table `memory list` prints: a header, then one row per entry.
pub fn table(entries: &[MemoryEntry]) -> Vec<String> {
    let mut rows = vec![
        ["ID", "KIND", "RECORDED", "BY", "TEXT"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for e in entries {
        let text = inert::one_line(&e.text);
        let cut: String = text.chars().take(LIST_TEXT_CHARS).collect();
        let cut = if cut.len() < text.len() {
            format!("{cut}…")
        } else {
            cut
        };
        rows.push(vec![
            e.id.clone(),
            e.kind.as_str().to_owned(),
            date(e.at),
            inert::one_line(&e.by),
            cut,
        ]);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].width()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == columns {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(widths[c] - cell.width() + 2));
                }
            }
            line
        })
        .collect()
}

/// What `memory show` prints: the entry's particulars, then its text.
pub fn shown(e: &MemoryEntry) -> Vec<String> {
    vec![
        format!("id:        {}", e.id),
        format!("workspace: {}", e.workspace),
        format!("kind:      {}", e.kind.as_str()),
        format!(
            "recorded:  {} by {} in session {}",
            e.at.format("%Y-%m-%d %H:%M:%S UTC"),
            inert::one_line(&e.by),
            inert::one_line(&e.session_id)
        ),
        String::new(),
        inert::block("", &e.text),
    ]
}

fn date(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_workspace_is_the_flag_or_the_directory_name() {
        assert_eq!(workspace(Some("proj_1"), None).unwrap(), "proj_1");
        let err = workspace(Some("a.b"), None).unwrap_err().to_string();
        assert!(err.contains("invalid workspace \"a.b\""), "{err}");
        let cwd = Path::new("/home/me/My Project.v2");
        assert_eq!(workspace(None, Some(cwd)).unwrap(), "My-Project-v2");
        assert_eq!(workspace(None, Some(Path::new("/"))).unwrap(), "default");
        assert_eq!(workspace(None, None).unwrap(), "default");
    }
}
