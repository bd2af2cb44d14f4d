//! A one-shot backup replaces the backup at its key, and the previous one stays restorable until
//! the new one is complete. With K the key, P = K[`PREVIOUS_SUFFIX`] and `.meta.json` sidecars:
//!
//! 0. what K holds is judged from the store's metadata (the ETag its sidecar recorded, or the
//!    size for sidecars written before ETags were): a complete pair (K, K.meta.json), or a
//!    complete P pair left by a run that died half-way, or nothing restorable;
//! 1. K's complete pair is copied to P (server-side: data, then sidecar) **while** the new
//!    snapshot streams (a multipart upload to K: K changes only when the upload completes, and it
//!    completes only after the copy);
//! 2. the upload completes: K is new, K.meta.json still the old one: P covers this moment;
//! 3. K.meta.json is written (with K's new ETag): (K, K.meta.json) complete again;
//! 4. P.meta.json, then P, are deleted.
//!
//! At every moment (K, K.meta.json) or (P, P.meta.json) is complete; a reader that finds K and its
//! sidecar disagree looks at P (`fetch`). A P pair left complete by a dead run is never
//! overwritten by a K that its sidecar does not vouch for. The copy runs beside the stream, so a
//! one-shot backup takes no longer end to end than a periodic one. Runs in backup pods (I/O).
//!
//! [`PREVIOUS_SUFFIX`]: super::location::PREVIOUS_SUFFIX

use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::contract::PodError;
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

fn path(key: &str) -> Result<Path, PodError> {
    Path::parse(key).map_err(|e| format!("object key {key:?}: {e}").into())
}

/// The sidecar of `key`, if there is one that parses.
pub async fn read_sidecar(store: &dyn ObjectStore, key: &str) -> Result<Option<BackupMeta>, PodError> {
    let sidecar = location::sidecar_key(key);
    match store.get(&path(&sidecar)?).await {
        Ok(g) => {
            let bytes = g.bytes().await.map_err(|e| format!("read sidecar {sidecar}: {}", store::why(&e)))?;
            Ok(serde_json::from_slice(&bytes).ok())
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(format!("read sidecar {sidecar}: {}", store::why(&e)).into()),
    }
}

/// Write the sidecar of `key`, with a few tries (without it no restore accepts the backup).
pub async fn write_sidecar(store: &dyn ObjectStore, key: &str, meta: &BackupMeta) -> Result<(), PodError> {
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
    Err(format!("write checksum sidecar {sidecar}: {last}").into())
}

/// The store's ETag of `key` (empty when the store gives none), None when there is no object.
pub async fn etag(store: &dyn ObjectStore, key: &str) -> Result<Option<String>, PodError> {
    match store.head(&path(key)?).await {
        Ok(m) => Ok(Some(m.e_tag.unwrap_or_default())),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(format!("head {key}: {}", store::why(&e)).into()),
    }
}

/// Whether the object at `key` is the one its sidecar describes, judged from metadata (the
/// sha256 is what restores check; this only decides what to keep).
pub async fn pair_looks_complete(store: &dyn ObjectStore, key: &str) -> Result<bool, PodError> {
    let Some(meta) = read_sidecar(store, key).await? else { return Ok(false) };
    let head = match store.head(&path(key)?).await {
        Ok(m) => m,
        Err(object_store::Error::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(format!("head {key}: {}", store::why(&e)).into()),
    };
    Ok(if meta.object_etag.is_empty() {
        head.size as i64 == meta.size
    } else {
        head.e_tag.as_deref() == Some(meta.object_etag.as_str())
    })
}

/// What the key holds before a one-shot backup replaces it (step 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Before {
    /// A complete backup at the key: copy it aside while the new one streams.
    Complete,
    /// The key is not complete but the previous backup kept aside is: keep it as it is.
    PreviousKept,
    /// Nothing restorable (the first backup, or both broken).
    Nothing,
}

pub async fn before(store: &dyn ObjectStore, key: &str) -> Result<Before, PodError> {
    if pair_looks_complete(store, key).await? {
        return Ok(Before::Complete);
    }
    if pair_looks_complete(store, &location::previous_key(key)).await? {
        return Ok(Before::PreviousKept);
    }
    Ok(Before::Nothing)
}

/// Step 1: the pair at `key` copied aside, data first, then its sidecar (naming the copy's own
/// ETag: a server-side copy may get a new one, e.g. of an S3 multipart object).
pub async fn keep_previous(store: &dyn ObjectStore, key: &str) -> Result<(), PodError> {
    let previous = location::previous_key(key);
    let mut meta = read_sidecar(store, key).await?.ok_or_else(|| format!("{key} has no sidecar any more"))?;
    store
        .copy(&path(key)?, &path(&previous)?)
        .await
        .map_err(|e| format!("copy {key} to {previous}: {}", store::why(&e)))?;
    meta.object_etag = etag(store, &previous).await?.unwrap_or_default();
    write_sidecar(store, &previous, &meta).await?;
    pause_if_armed().await;
    Ok(())
}

/// Step 4, once the new pair at `key` is complete: the previous pair goes, sidecar first.
pub async fn drop_previous(store: &dyn ObjectStore, key: &str) -> Result<(), PodError> {
    let previous = location::previous_key(key);
    for k in [location::sidecar_key(&previous), previous.clone()] {
        match store.delete(&path(&k)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(format!("delete {k}: {}", store::why(&e)).into()),
        }
    }
    Ok(())
}
