//! A one-shot backup replaces the backup at its key, and the previous one stays restorable until
//! the new one is complete. With K the key, S = K[`STAGED_SUFFIX`] and `.meta.json` sidecars:
//!
//! 0. a staged pair an interrupted run left complete (S.meta.json exists) is published first;
//! 1. the snapshot is uploaded to S (multipart: S appears whole or not at all);
//! 2. S.meta.json is written: from here (S, S.meta.json) is a complete backup;
//! 3. S is copied over K (server-side), 4. K.meta.json is written: (K, K.meta.json) is complete;
//! 5. S.meta.json, then S, are deleted.
//!
//! At every moment one of the pairs is complete: the old (K, K.meta.json) until step 3, the
//! staged one from step 2 to 5, the new (K, K.meta.json) from step 4. A reader that finds K and
//! its sidecar disagree looks at the staged pair ([`read_pair`] callers in `fetch`). Runs in
//! backup pods (I/O).
//!
//! [`STAGED_SUFFIX`]: super::location::STAGED_SUFFIX

use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::location::{self, BackupMeta};
use super::store;

/// Failpoint of the backup pod (armed through `ETCD_OPERATOR_FAILPOINTS`, which the operator
/// passes on to the pods it starts when it is armed itself): a 3 s pause between the steps of
/// the protocol, so that a reader can watch every intermediate state.
pub const PUBLISH_PAUSE: &str = "backup-publish-pause";

pub async fn pause_if_armed() {
    if crate::failpoints::armed(PUBLISH_PAUSE) {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

fn path(key: &str) -> Result<Path, String> {
    Path::parse(key).map_err(|e| format!("object key {key:?}: {e}"))
}

/// The sidecar of `key`, if there is one that parses.
pub async fn read_sidecar(store: &dyn ObjectStore, key: &str) -> Result<Option<BackupMeta>, String> {
    let sidecar = location::sidecar_key(key);
    match store.get(&path(&sidecar)?).await {
        Ok(g) => {
            let bytes = g.bytes().await.map_err(|e| format!("read sidecar {sidecar}: {}", store::why(&e)))?;
            Ok(serde_json::from_slice(&bytes).ok())
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(format!("read sidecar {sidecar}: {}", store::why(&e))),
    }
}

/// Write the sidecar of `key`, with a few tries (without it no restore accepts the backup).
pub async fn write_sidecar(store: &dyn ObjectStore, key: &str, meta: &BackupMeta) -> Result<(), String> {
    let sidecar = location::sidecar_key(key);
    let body = serde_json::to_vec_pretty(meta).map_err(|e| e.to_string())?;
    let mut last = String::new();
    for attempt in 0..3u64 {
        match store.put(&path(&sidecar)?, PutPayload::from(body.clone())).await {
            Ok(_) => return Ok(()),
            Err(e) => last = store::why(&e),
        }
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
    }
    Err(format!("write checksum sidecar {sidecar}: {last}"))
}

/// Steps 3 to 5 for the staged pair of `key`, if there is a complete one; its metadata then.
pub async fn publish_staged(store: &dyn ObjectStore, key: &str) -> Result<Option<BackupMeta>, String> {
    let staged = location::staged_key(key);
    let Some(meta) = read_sidecar(store, &staged).await? else { return Ok(None) };
    store
        .copy(&path(&staged)?, &path(key)?)
        .await
        .map_err(|e| format!("copy {staged} to {key}: {}", store::why(&e)))?;
    pause_if_armed().await;
    write_sidecar(store, key, &meta).await?;
    pause_if_armed().await;
    for k in [location::sidecar_key(&staged), staged.clone()] {
        match store.delete(&path(&k)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(format!("delete {k}: {}", store::why(&e))),
        }
    }
    Ok(Some(meta))
}

/// Step 0: finish a publication an interrupted run left half-done (or remove an incomplete
/// staged object, which no sidecar vouches for, by overwriting it in step 1).
pub async fn recover(store: &dyn ObjectStore, key: &str) -> Result<Option<String>, String> {
    Ok(publish_staged(store, key)
        .await?
        .map(|m| format!("published the backup an interrupted run had staged (sha256 {})", m.sha256)))
}
