//! A continuous archive has its snapshot series to itself. Two EtcdBackups that schedule into
//! the same series (the same store, bucket or claim, and path) where one of them archives
//! continuously would write two archives under one `.archive/` (or one archive continuing
//! snapshots that the other's retention deletes), and make the series' drills and
//! point-in-time restores ambiguous. The EtcdBackup created first keeps the series; a later one
//! that conflicts with it is refused (an invalid spec: nothing starts, the reason in status and
//! an Event) until one of the two moves or goes. Periodic backups alone may share a path (each
//! one's retention counts only its own snapshots), and so may one-shot backups, as with CoreOS.
//!
//! Pure: the listing of the namespace's EtcdBackups is the controller's.

use etcd_operator_api::backup::EtcdBackupSpec;
use k8s_openapi::jiff::Timestamp;

use super::location::Location;

/// A snapshot series as the stores address it: an S3 bucket of another endpoint is another
/// series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    pub location: Location,
    pub endpoint: String,
}

/// An EtcdBackup of the namespace as far as series go.
#[derive(Clone, Debug)]
pub struct Scheduler {
    pub name: String,
    pub created: Option<Timestamp>,
    /// The series it schedules into; None for a one-shot backup or an invalid spec.
    pub series: Option<Series>,
    /// It archives continuously into that series.
    pub continuous: bool,
}

impl Scheduler {
    /// EtcdBackup `name` created at `created` with `spec` (None: a spec that cannot be read).
    pub fn of(name: &str, created: Option<Timestamp>, spec: Option<&EtcdBackupSpec>, namespace: &str) -> Scheduler {
        let series = spec.and_then(|s| series_of(s, namespace));
        let continuous = series.is_some() && spec.and_then(|s| s.continuous.as_ref()).is_some_and(|c| c.enabled);
        Scheduler { name: name.into(), created, series, continuous }
    }
}

/// The series `spec` schedules into (periodic backups or a continuous archive), if any.
pub fn series_of(spec: &EtcdBackupSpec, namespace: &str) -> Option<Series> {
    let t = super::backup_planner::check_spec(spec, namespace).ok()?;
    let scheduled = t.interval.is_some() || t.archive_flush_secs.is_some();
    let endpoint = spec.source.s3.as_ref().map(|s| s.endpoint.trim_end_matches('/').to_string()).unwrap_or_default();
    scheduled.then_some(Series { location: t.location, endpoint })
}

/// The EtcdBackup that keeps the series `me` schedules into from it: one created earlier (then
/// by name, so that two backups created in the same second agree) that schedules into the same
/// series, where either of the two archives continuously.
pub fn owner<'a>(me: &Scheduler, others: &'a [Scheduler]) -> Option<&'a Scheduler> {
    let mine = me.series.as_ref()?;
    others
        .iter()
        .filter(|o| o.name != me.name && o.series.as_ref() == Some(mine) && (me.continuous || o.continuous))
        .filter(|o| (o.created, &o.name) < (me.created, &me.name))
        .min_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)))
}

/// Why `series` is refused to a later EtcdBackup.
pub fn refusal(series: &Series, owner: &str) -> String {
    format!(
        "{} is the snapshot series of EtcdBackup {owner}, created earlier, and a continuous archive needs its series to itself (two schedules there would interleave archives or delete snapshots an archive continues): give this backup another path",
        series.location.url()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::backup::{BackupPolicy, BackupSource, ContinuousArchive, PvcSource, S3Source};

    fn s3(path: &str, endpoint: &str) -> BackupSource {
        BackupSource {
            s3: Some(S3Source {
                path: path.into(),
                aws_secret: "creds".into(),
                endpoint: endpoint.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pvc(claim: &str, path: &str) -> BackupSource {
        BackupSource { pvc: Some(PvcSource { claim_name: claim.into(), path: path.into() }), ..Default::default() }
    }

    /// `schedule`: "periodic", "continuous" or "one-shot".
    fn spec(storage: &str, source: BackupSource, schedule: &str) -> EtcdBackupSpec {
        EtcdBackupSpec {
            cluster_name: "ex".into(),
            storage_type: storage.into(),
            source,
            // A continuous archive continues periodic snapshots: it needs an interval too.
            backup_policy: (schedule != "one-shot")
                .then(|| BackupPolicy { backup_interval_in_second: 600, ..Default::default() }),
            continuous: (schedule == "continuous").then(|| ContinuousArchive { enabled: true, ..Default::default() }),
            ..Default::default()
        }
    }

    fn at(name: &str, second: i64, spec: &EtcdBackupSpec) -> Scheduler {
        Scheduler::of(name, Some(Timestamp::from_second(second).unwrap()), Some(spec), "ns")
    }

    #[test]
    fn a_continuous_archive_keeps_its_series_from_later_schedules() {
        let periodic = spec("S3", s3("bucket/etcd/ex", "http://moto:5000"), "periodic");
        let continuous = spec("S3", s3("bucket/etcd/ex", "http://moto:5000/"), "continuous");
        let other_path = spec("S3", s3("bucket/etcd/other", "http://moto:5000"), "periodic");
        let other_endpoint = spec("S3", s3("bucket/etcd/ex", "http://minio:9000"), "periodic");
        let one_shot = spec("S3", s3("bucket/etcd/ex", "http://moto:5000"), "one-shot");
        let periodic_too = spec("S3", s3("bucket/etcd/ex", "http://moto:5000"), "periodic");
        let continuous_too = spec("S3", s3("bucket/etcd/ex", "http://moto:5000"), "continuous");
        let on_claim = spec("PVC", pvc("backups", "etcd/ex"), "periodic");
        let on_claim_too = spec("PVC", pvc("backups", "etcd/ex"), "continuous");
        let other_claim = spec("PVC", pvc("backups-2", "etcd/ex"), "periodic");
        // (me, created at, the other, created at) → the owner that refuses me.
        let cases: &[(&EtcdBackupSpec, i64, &EtcdBackupSpec, i64, Option<&str>)] = &[
            (&continuous, 20, &periodic, 10, Some("first")),
            (&periodic_too, 20, &continuous, 10, Some("first")),
            (&continuous_too, 20, &continuous, 10, Some("first")),
            (&periodic, 10, &continuous, 20, None),
            (&continuous, 10, &periodic, 10, Some("first")),
            (&periodic_too, 20, &periodic, 10, None),
            (&other_path, 20, &periodic, 10, None),
            (&other_endpoint, 20, &periodic, 10, None),
            (&one_shot, 20, &periodic, 10, None),
            (&periodic, 20, &one_shot, 10, None),
            (&on_claim_too, 20, &on_claim, 10, Some("first")),
            (&other_claim, 20, &on_claim, 10, None),
        ];
        for (i, (mine, t_me, theirs, t_them, want)) in cases.iter().enumerate() {
            // Created in the same second, the name decides: "first" < "second".
            let me = at("second", *t_me, mine);
            let others = [at("first", *t_them, theirs), at("second", *t_me, mine)];
            let got = owner(&me, &others).map(|o| o.name.as_str());
            assert_eq!(got, *want, "case {i}");
        }
    }

    #[test]
    fn the_refusal_names_the_series_and_its_owner() {
        let s = series_of(&spec("PVC", pvc("backups", "etcd/ex"), "periodic"), "ns").unwrap();
        let why = refusal(&s, "nightly");
        assert!(why.contains("pvc://backups/etcd/ex") && why.contains("EtcdBackup nightly"), "{why}");
        let unreadable = Scheduler::of("bad", None, None, "ns");
        assert!(unreadable.series.is_none() && !unreadable.continuous);
        assert_eq!(series_of(&spec("PVC", pvc("backups", "etcd/ex"), "one-shot"), "ns"), None);
    }
}
