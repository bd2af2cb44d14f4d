//! Space measurements (the day-2 autopilot):
//! - `defrag`: a 3-member cluster holding 100 MiB of live data plus 100 MiB written, deleted
//!   and compacted; the operator's defragmentation policy defragments each member. Value: the
//!   seconds one member's defragmentation takes per 100 MiB of data it rewrites (its database
//!   after; from the operator's `MemberDefragmented` notes); extra: the time from the compaction
//!   until every member shrank (includes waiting for the operator's periodic health check, at
//!   most 15 s). Baseline `defrag-etcdctl`: the same cluster paused, each member defragmented by
//!   the bench itself in turn (what `etcdctl defrag` does), normalized the same way.
//! - `nospace`: a 3-member cluster with a 16 MiB quota filled until etcd refuses writes; once
//!   the operator has tried once (the data still fills it), the bench deletes its filler keys
//!   (as a user would) and the clock runs until a put succeeds again. Baseline
//!   `nospace-manual`: the same with the cluster paused and the bench doing etcd's documented
//!   procedure itself as fast as it can (compact, defragment each member, disarm).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{AlarmAction, AlarmOptions, AlarmType, Client, CompactionOptions, ConnectOptions, DeleteOptions};

use crate::observe::Observer;
use crate::report::{Sample, secs};
use crate::scenarios::{CLUSTER, Ctx, SELECTOR, healthy_cluster_with, in_namespace};

const MIB: usize = 1 << 20;
/// Data written and deleted before a defragmentation.
const JUNK_MIB: usize = 100;
const QUOTA: usize = 16 * MIB;

fn options() -> ConnectOptions {
    ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_timeout(Duration::from_secs(120))
}

fn blob(bytes: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Each member's own endpoint from the set-up snapshot.
fn endpoints(snap: &crate::observe::Snap) -> Vec<String> {
    snap.live().filter_map(|p| p.ip.as_ref().map(|ip| format!("http://{ip}:2379"))).collect()
}

async fn db_size(ep: &str) -> Result<i64> {
    let mut c = Client::connect([ep], Some(options())).await?;
    Ok(c.status().await?.db_size())
}

fn pause(ns: &e2e::TestNamespace) -> Result<()> {
    ns.run(&["patch", "etcdcluster", CLUSTER, "--type=merge", "-p", r#"{"spec":{"paused":true}}"#]).map(drop)
}

/// Writes `mib` MiB of 1 MiB values under `live/` that stay, and as much under `junk/` that is
/// deleted and compacted away (physically): every member's database file holds that much free
/// space beside the live data a defragmentation rewrites.
async fn fragment(eps: &[String], mib: usize) -> Result<()> {
    let mut c = Client::connect(eps, Some(options())).await?;
    for i in 0..mib {
        c.put(format!("live/{i:05}"), blob(MIB, 1_000_000 + i as u64), None).await?;
    }
    for i in 0..mib {
        c.put(format!("junk/{i:05}"), blob(MIB, i as u64), None).await?;
    }
    // The delete's own revision: a status call may be answered by a member that has not
    // applied the delete yet, and a compaction below it frees nothing.
    let rev = c.delete("junk/", Some(DeleteOptions::new().with_prefix())).await?.header().map(|h| h.revision());
    c.compact(rev.context("no revision in the delete's answer")?, Some(CompactionOptions::new().with_physical()))
        .await?;
    Ok(())
}

/// `defragmented member X (...): A → B, C reclaimed in 0.84s` lines of the operator's log:
/// (seconds, MiB after: the data it rewrote).
fn defrag_notes(log: &str) -> Vec<(f64, f64)> {
    log.lines()
        .filter(|l| l.contains("defragmented member") && l.contains("MemberDefragmented"))
        .filter_map(|l| {
            let took = l.split(" reclaimed in ").nth(1)?.split('s').next()?.parse::<f64>().ok()?;
            let after = l.split(" → ").nth(1)?.split(", ").next()?;
            let (n, unit) = after.split_once(' ')?;
            let n: f64 = n.parse().ok()?;
            let mib = match unit {
                "GiB" => n * 1024.0,
                "MiB" => n,
                "KiB" => n / 1024.0,
                _ => return None,
            };
            Some((took, mib))
        })
        .collect()
}

pub fn defrag(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-defrag", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let extra = "  maintenance:\n    defragmentation: {minFreePercent: 30, minFreeBytes: 8388608}\n";
        let snap = healthy_cluster_with(ctx, ns, &mut obs, 3, "3.6.15", extra)?;
        let eps = endpoints(&snap);
        ctx.rt.block_on(fragment(&eps, JUNK_MIB))?;
        let before: Vec<i64> = eps.iter().map(|e| ctx.rt.block_on(db_size(e))).collect::<Result<_>>()?;
        let t0 = Instant::now();
        // A trickle of writes, as any cluster in use has: a member shows the space a compaction
        // freed in its dbSizeInUse only after its next write (bbolt keeps freed pages pending
        // until then), and the policy decides from dbSizeInUse.
        let mut trickle = ctx.rt.block_on(Client::connect(eps.as_slice(), Some(options())))?;
        let mut n = 0u64;
        loop {
            n += 1;
            ctx.rt.block_on(trickle.put("trickle", n.to_string(), None))?;
            let now: Vec<i64> = eps.iter().map(|e| ctx.rt.block_on(db_size(e))).collect::<Result<_>>()?;
            // Half the file was the deleted data: each member shrinks by more than a third.
            if now.iter().zip(&before).all(|(n, b)| n * 3 < b * 2) {
                break;
            }
            if t0.elapsed() > ctx.timeout {
                let in_use: Vec<String> = eps
                    .iter()
                    .map(|e| {
                        ctx.rt
                            .block_on(async {
                                let mut c = Client::connect([e.as_str()], Some(options())).await?;
                                let s = c.status().await?;
                                Ok::<_, anyhow::Error>(format!(
                                    "{}: {} of {} in use",
                                    e,
                                    s.raft_used_db_size(),
                                    s.db_size()
                                ))
                            })
                            .unwrap_or_else(|err| format!("{e}: {err}"))
                    })
                    .collect();
                bail!("members not defragmented within {:?}: {before:?} → {now:?}; {in_use:?}", ctx.timeout);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let total = t0.elapsed();
        // The notes are logged right after each defragmentation; the last may trail the poll.
        std::thread::sleep(Duration::from_secs(1));
        let notes = defrag_notes(&op.log_text());
        if notes.len() < 3 {
            bail!("expected 3 MemberDefragmented notes in the operator log, found {}", notes.len());
        }
        let per_100: Vec<f64> = notes.iter().map(|(s, mib)| s * 100.0 / mib.max(1.0)).collect();
        let median = crate::report::stats(&per_100).map(|s| s.median).unwrap_or(0.0);
        eprintln!(
            "  defrag (operator): {median:.2}s per 100 MiB (members: {notes:?}); compaction → all shrunk {:.1}s",
            secs(total)
        );
        let mut s = Sample { value: median, ..Default::default() };
        s.extra.insert("total", secs(total));
        Ok(s)
    })
}

pub fn defrag_etcdctl(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-defrag-b", true, |ns, _op| {
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let extra = "  maintenance:\n    defragmentation: {mode: \"Off\"}\n";
        let snap = healthy_cluster_with(ctx, ns, &mut obs, 3, "3.6.15", extra)?;
        pause(ns)?;
        let eps = endpoints(&snap);
        ctx.rt.block_on(fragment(&eps, JUNK_MIB))?;
        let mut per_100 = vec![];
        let t0 = Instant::now();
        for ep in &eps {
            let started = Instant::now();
            ctx.rt.block_on(async {
                let mut c = Client::connect([ep.as_str()], Some(options())).await?;
                c.defragment().await?;
                Ok::<_, anyhow::Error>(())
            })?;
            let took = secs(started.elapsed());
            let after = ctx.rt.block_on(db_size(ep))? as f64 / MIB as f64;
            per_100.push(took * 100.0 / after.max(1.0));
        }
        let median = crate::report::stats(&per_100).map(|s| s.median).unwrap_or(0.0);
        eprintln!("  defrag (etcdctl-style, by hand): {median:.2}s per 100 MiB ({per_100:?})");
        let mut s = Sample { value: median, ..Default::default() };
        s.extra.insert("total", secs(t0.elapsed()));
        Ok(s)
    })
}

/// Fills the 16 MiB quota until etcd refuses a put; returns how many 64 KiB puts it took.
async fn fill(eps: &[String]) -> Result<u64> {
    let mut c = Client::connect(eps, Some(options())).await?;
    for i in 0..2000u64 {
        match c.put(format!("fill/{i:05}"), blob(64 << 10, i), None).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("database space exceeded") => return Ok(i),
            Err(e) => return Err(e.into()),
        }
    }
    bail!("2000 puts of 64 KiB never filled a 16 MiB quota")
}

/// Deletes the filler keys, then polls a put until it succeeds: the time from the delete.
fn delete_and_wait_writable(ctx: &Ctx, eps: &[String], manual: bool) -> Result<Duration> {
    ctx.rt.block_on(async {
        let mut c = Client::connect(eps, Some(options())).await?;
        let t0 = Instant::now();
        c.delete("fill/", Some(DeleteOptions::new().with_prefix())).await?;
        if manual {
            // etcd's documented procedure, scripted: compact, defragment each member, disarm.
            let rev = c.get("after", None).await?.header().map(|h| h.revision()).unwrap_or(0);
            c.compact(rev, Some(CompactionOptions::new().with_physical())).await?;
            for ep in eps {
                Client::connect([ep.as_str()], Some(options())).await?.defragment().await?;
            }
            let alarms = c.alarm(AlarmAction::Get, AlarmType::None, None).await?;
            for a in alarms.alarms() {
                let mut o = AlarmOptions::new();
                o.with_member(a.member_id());
                c.alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(o)).await?;
            }
        }
        loop {
            if c.put("after", "x", None).await.is_ok() {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > ctx.timeout {
                bail!("not writable within {:?}", ctx.timeout);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn nospace_with(ctx: &Ctx, prefix: &str, manual: bool) -> Result<Sample> {
    in_namespace(ctx, prefix, true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let extra = format!("  maintenance:\n    quotaBackendBytes: {QUOTA}\n");
        let snap = healthy_cluster_with(ctx, ns, &mut obs, 3, "3.6.15", &extra)?;
        if manual {
            pause(ns)?;
        }
        let eps = endpoints(&snap);
        let puts = ctx.rt.block_on(fill(&eps))?;
        if !manual {
            // The operator's first attempt cannot disarm (the data fills the quota).
            let t = Instant::now();
            while !op.log_text().contains("NoSpaceNotRecovered") {
                if t.elapsed() > ctx.timeout {
                    bail!("the operator made no recovery attempt within {:?}", ctx.timeout);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let took = delete_and_wait_writable(ctx, &eps, manual)?;
        eprintln!(
            "  nospace ({}): writable {:.2}s after the delete (quota hit after {puts} puts of 64 KiB)",
            if manual { "by hand" } else { "operator" },
            secs(took)
        );
        Ok(Sample { value: secs(took), ..Default::default() })
    })
}

pub fn nospace(ctx: &Ctx) -> Result<Sample> {
    nospace_with(ctx, "bench-nospace", false)
}

pub fn nospace_manual(ctx: &Ctx) -> Result<Sample> {
    nospace_with(ctx, "bench-nospace-b", true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defrag_notes_are_read_from_the_operator_log() {
        let log = r#"{"fields":{"message":"defragmented member ex-a (300.0 MiB of its database was unused): 401.2 MiB → 101.1 MiB, 300.1 MiB reclaimed in 1.50s","reason":"MemberDefragmented"}}"#;
        assert_eq!(defrag_notes(log), [(1.5, 101.1)]);
    }
}
