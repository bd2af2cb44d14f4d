//! Maintenance calls: the store's revision, compaction, a member's database size and its
//! defragmentation, alarms.

use std::time::{Duration, Instant};

use super::{Access, CHANGE_TIMEOUT, Error, READ_TIMEOUT, change_client, connect, with_deadline};
use crate::observed::{Alarm, AlarmKind};

/// Time to defragment one member: it rewrites its whole database file (about a second per
/// 100 MiB on ordinary disks).
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(300);

/// The store's current revision: the header of a linearizable read (a Status answer may come
/// from a member that has not applied the latest writes yet; a compaction below them would free
/// nothing they deleted). The read counts one key and fetches nothing.
pub async fn revision(endpoints: &[String], access: Access<'_>) -> Result<i64, Error> {
    let mut c = change_client(endpoints, access).await?;
    let opts = etcd_client::GetOptions::new().with_count_only();
    let r = with_deadline("revision read", READ_TIMEOUT, c.get("\0", Some(opts))).await?;
    Ok(r.header().map(|h| h.revision()).unwrap_or_default())
}

/// Compact the history up to `revision` and wait until every member has applied it
/// (physical). A revision compacted already is not an error.
pub async fn compact(endpoints: &[String], access: Access<'_>, revision: i64) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    let opts = etcd_client::CompactionOptions::new().with_physical();
    match with_deadline("compact", DEFRAG_TIMEOUT, c.compact(revision, Some(opts))).await {
        Err(Error::Call { source, .. }) if source.to_string().contains("compacted") => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Size of a member's database file and how much of it is in use, asked of that member.
pub async fn db_size(endpoint: &str, access: Access<'_>) -> Result<(i64, i64), Error> {
    let mut c = connect(&[endpoint.to_string()], access, READ_TIMEOUT).await?;
    let s = with_deadline(endpoint, READ_TIMEOUT, c.status()).await?;
    Ok((s.db_size(), s.raft_used_db_size()))
}

/// Defragment one member (only the member behind `endpoint`); returns its database file size
/// before and after, and how long the defragmentation call took.
pub async fn defragment(endpoint: &str, access: Access<'_>) -> Result<(i64, i64, Duration), Error> {
    let before = db_size(endpoint, access).await?.0;
    let mut c = connect(&[endpoint.to_string()], access, DEFRAG_TIMEOUT).await?;
    let started = Instant::now();
    with_deadline(endpoint, DEFRAG_TIMEOUT, c.defragment()).await?;
    let took = started.elapsed();
    let after = db_size(endpoint, access).await?.0;
    Ok((before, after, took))
}

/// The alarms raised now (through any of `endpoints`).
pub async fn alarms_of(endpoints: &[String], access: Access<'_>) -> Result<Vec<Alarm>, Error> {
    let mut c = change_client(endpoints, access).await?;
    super::status::alarms(&mut c).await
}

/// Deactivate one alarm.
pub async fn disarm(endpoints: &[String], access: Access<'_>, alarm: &Alarm) -> Result<(), Error> {
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
    let mut c = change_client(endpoints, access).await?;
    let kind = match alarm.kind {
        AlarmKind::NoSpace => AlarmType::Nospace,
        AlarmKind::Corrupt => AlarmType::Corrupt,
    };
    let mut opts = AlarmOptions::new();
    opts.with_member(alarm.member_id);
    with_deadline("alarm disarm", CHANGE_TIMEOUT, c.alarm(AlarmAction::Deactivate, kind, Some(opts))).await.map(|_| ())
}
