//! Reading and removing a workspace's memory in the KV bucket
//! `arbiter_memory` (one `MemoryEntry` per key `<workspace>.<id>`): the
//! coordinator reads it for a new session's first prompt, the console lists
//! and forgets entries (listed from the subjects the bucket holds, with no
//! consumer). The coordinator writes entries as effects of a
//! session's stored step (`coordinator/src/memory.rs`).

use arbiter_protocol::{MemoryEntry, subjects};
use async_nats::jetstream::{self, kv};

use crate::Result;

/// Opens the memory bucket (the coordinator and `arbiter-admin setup`
/// create it).
pub async fn open(js: &jetstream::Context) -> Result<kv::Store> {
    js.get_key_value(subjects::MEMORY_BUCKET)
        .await
        .map_err(|e| crate::js_error("opening the memory bucket", e))
}

/// Every entry of `workspace`, in no particular order. An entry that cannot
/// be decoded is skipped with a warning.
pub async fn entries(store: &kv::Store, workspace: &str) -> Result<Vec<MemoryEntry>> {
    let prefix = format!("{workspace}.");
    let mut mine: Vec<String> = crate::direct::keys(store, &prefix).await?;
    mine.retain(|key| key.starts_with(&prefix));
    let mut entries = Vec::with_capacity(mine.len());
    for key in mine {
        if let Some(entry) = get_key(store, &key).await? {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// Entry `id` of `workspace`, if it is there.
pub async fn get(store: &kv::Store, workspace: &str, id: &str) -> Result<Option<MemoryEntry>> {
    get_key(store, &subjects::memory_key(workspace, id)).await
}

async fn get_key(store: &kv::Store, key: &str) -> Result<Option<MemoryEntry>> {
    let Some(bytes) = store
        .get(key)
        .await
        .map_err(|e| crate::js_error("reading the memory bucket", e))?
    else {
        return Ok(None);
    };
    let name = format!("{}/{key}", subjects::MEMORY_BUCKET);
    match crate::decode::<MemoryEntry>(&name, &bytes) {
        Ok(entry) => Ok(Some(entry)),
        Err(e) => {
            tracing::warn!(error = %e, "memory entry skipped");
            Ok(None)
        }
    }
}

/// Removes entry `id` of `workspace` (its value is gone from the server:
/// the bucket keeps one revision per key, and the delete marker replaces it).
pub async fn forget(store: &kv::Store, workspace: &str, id: &str) -> Result<()> {
    store
        .purge(subjects::memory_key(workspace, id))
        .await
        .map_err(|e| crate::js_error("removing a memory entry", e))
}
