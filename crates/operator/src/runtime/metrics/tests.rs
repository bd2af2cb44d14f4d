//! Tests: every family's series appear with their object and disappear with it.

use super::*;
use crate::observed::{EtcdState, MemberState, MemberStatus};

#[test]
fn cluster_gauges_follow_status_and_disappear_with_the_cluster() {
    let m = Metrics::default();
    let mut o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
    o.desired = crate::validation::validate(
        "ex",
        &etcd_operator_api::EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() },
    );
    o.etcd = Some(EtcdState {
        cluster_id: 1,
        leader: Some(1),
        members: vec![MemberState {
            id: 1,
            status: Some(MemberStatus { db_size: 4096, leader: 1, ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    });
    let st = etcd_operator_api::EtcdClusterStatus {
        ready_members: 3,
        current_version: "3.5.1".into(),
        ..Default::default()
    };
    m.observe_cluster(&o, &st);
    m.reconciled("etcdcluster", Duration::from_millis(20), false);
    let text = m.encode();
    assert!(text.contains(r#"etcd_operator_cluster_desired_size{namespace="ns",name="ex"} 3"#), "{text}");
    assert!(text.contains(r#"etcd_operator_cluster_ready_members{namespace="ns",name="ex"} 3"#));
    assert!(text.contains(r#"etcd_operator_cluster_leader_present{namespace="ns",name="ex"} 1"#));
    assert!(text.contains(r#"etcd_operator_cluster_db_size_bytes{namespace="ns",name="ex"} 4096"#));
    assert!(text.contains(r#"etcd_operator_cluster_version_info{namespace="ns",name="ex",version="3.5.1"} 1"#));
    assert!(text.contains(r#"etcd_operator_reconcile_total{controller="etcdcluster"} 1"#), "{text}");
    m.retain_clusters(&BTreeSet::new());
    let text = m.encode();
    assert!(!text.contains(r#"name="ex""#), "{text}");
}

fn step_waiting(reason: crate::planner::WaitReason) -> crate::planner::Step {
    crate::planner::Step::Wait(crate::planner::Wait { reason, message: String::new() })
}

#[test]
fn the_wait_reason_has_one_series_that_follows_the_planner() {
    use crate::planner::WaitReason;
    let m = Metrics::default();
    let o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
    m.observe_step(&o, &step_waiting(WaitReason::MemberUpgrading));
    let text = m.encode();
    assert!(
        text.contains(r#"etcd_operator_cluster_waiting{namespace="ns",name="ex",reason="MemberUpgrading"} 1"#),
        "{text}"
    );
    m.observe_step(&o, &step_waiting(WaitReason::UpgradeFailed));
    let text = m.encode();
    assert!(
        text.contains(r#"etcd_operator_cluster_waiting{namespace="ns",name="ex",reason="UpgradeFailed"} 1"#),
        "{text}"
    );
    assert!(!text.contains("MemberUpgrading"), "the old reason is gone: {text}");
    m.observe_step(&o, &crate::planner::Step::CreateServices);
    assert!(!m.encode().contains(r#"etcd_operator_cluster_waiting{"#), "no reason while acting");
    m.observe_step(&o, &step_waiting(WaitReason::Stable));
    m.retain_clusters(&BTreeSet::new());
    assert!(!m.encode().contains(r#"name="ex""#));
}

#[test]
fn defrag_and_alarm_series_appear_and_disappear_with_the_cluster() {
    let m = Metrics::default();
    let live = std::sync::Arc::new(Mutex::new(BTreeSet::from([cluster("ns", "ex"), cluster("ns", "other")])));
    let l = live.clone();
    m.set_live_clusters(Box::new(move || l.lock().unwrap().clone()));
    m.record_defrag("ns", "ex", "ex-abcde", 1000);
    m.record_defrag("ns", "ex", "ex-abcde", 24);
    m.record_defrag("ns", "ex", "ex-fghij", 0);
    m.set_alarms("ns", "ex", true, false);
    m.record_alarm_recovery("ns", "ex");
    m.set_alarms("ns", "other", false, false);
    let text = m.encode();
    for line in [
        r#"etcd_operator_defrag_total{namespace="ns",name="ex",member="ex-abcde"} 2"#,
        r#"etcd_operator_defrag_total{namespace="ns",name="ex",member="ex-fghij"} 1"#,
        r#"etcd_operator_defrag_reclaimed_bytes_total{namespace="ns",name="ex"} 1024"#,
        r#"etcd_operator_alarms{namespace="ns",name="ex",alarm="NOSPACE"} 1"#,
        r#"etcd_operator_alarms{namespace="ns",name="ex",alarm="CORRUPT"} 0"#,
        r#"etcd_operator_alarm_recoveries_total{namespace="ns",name="ex"} 1"#,
        r#"etcd_operator_alarms{namespace="ns",name="other",alarm="NOSPACE"} 0"#,
        "# TYPE etcd_operator_defrag counter",
        "# TYPE etcd_operator_alarms gauge",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    m.set_alarms("ns", "ex", false, false);
    assert!(m.encode().contains(r#"etcd_operator_alarms{namespace="ns",name="ex",alarm="NOSPACE"} 0"#));
    // The alarm list could not be read: no answer rather than a stale one (the alert falls back
    // on etcd's gauge); the other cluster keeps its series.
    m.forget_alarms("ns", "ex");
    let text = m.encode();
    assert!(!text.contains(r#"etcd_operator_alarms{namespace="ns",name="ex""#), "{text}");
    assert!(text.contains(r#"etcd_operator_alarms{namespace="ns",name="other",alarm="NOSPACE"} 0"#), "{text}");
    m.set_alarms("ns", "ex", false, false);
    // Deleted: dropped at the next scrape; the other cluster keeps its series.
    live.lock().unwrap().remove(&cluster("ns", "ex"));
    let text = m.encode();
    assert!(!text.contains(r#"name="ex""#), "{text}");
    assert!(text.contains(r#"etcd_operator_alarms{namespace="ns",name="other",alarm="NOSPACE"} 0"#), "{text}");
}

#[test]
fn backup_series_follow_status_and_disappear_with_the_backup() {
    let m = Metrics::default();
    let live = std::sync::Arc::new(Mutex::new(BTreeSet::from([cluster("ns", "nightly"), cluster("ns", "once")])));
    let l = live.clone();
    m.set_live_backups(Box::new(move || l.lock().unwrap().clone()));
    m.observe_backup("ns", "nightly", None, Some(Duration::from_secs(3600)));
    let text = m.encode();
    assert!(text.contains(r#"etcd_operator_backup_interval_seconds{namespace="ns",name="nightly"} 3600"#), "{text}");
    assert!(!text.contains("etcd_operator_backup_last_success_timestamp_seconds{"), "never succeeded: {text}");
    m.observe_backup("ns", "nightly", Some(1_767_225_600), Some(Duration::from_secs(3600)));
    m.observe_backup("ns", "once", Some(1_767_225_000), None);
    let text = m.encode();
    for line in [
        r#"etcd_operator_backup_last_success_timestamp_seconds{namespace="ns",name="nightly"} 1767225600"#,
        r#"etcd_operator_backup_last_success_timestamp_seconds{namespace="ns",name="once"} 1767225000"#,
        r#"etcd_operator_backup_interval_seconds{namespace="ns",name="once"} 0"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    live.lock().unwrap().remove(&cluster("ns", "nightly"));
    let text = m.encode();
    assert!(!text.contains(r#"name="nightly""#), "{text}");
    assert!(text.contains(r#"name="once""#), "{text}");
}

#[test]
fn the_first_certificate_expiry_is_a_series_of_static_tls_clusters_only() {
    let m = Metrics::default();
    let mut o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
    o.desired =
        crate::validation::validate("ex", &etcd_operator_api::EtcdClusterSpec { size: 3, ..Default::default() });
    let cert = |not_after| crate::tls::material::Expiry {
        secret: "s".into(),
        key: "server.crt".into(),
        subject: "CN=s".into(),
        not_after,
    };
    o.tls_material.expiries = vec![cert(2_000_000_000), cert(1_900_000_000)];
    m.observe_cluster(&o, &Default::default());
    let series = r#"etcd_operator_cluster_certificate_expiry_timestamp_seconds{namespace="ns",name="ex"}"#;
    assert!(m.encode().contains(&format!("{series} 1900000000")), "the first to expire");
    o.tls_material.expiries.clear();
    m.observe_cluster(&o, &Default::default());
    assert!(!m.encode().contains(series), "gone with the certificates");
    o.tls_material.expiries = vec![cert(1_900_000_000)];
    m.observe_cluster(&o, &Default::default());
    m.retain_clusters(&Default::default());
    assert!(!m.encode().contains(series), "gone with the cluster");
}

#[test]
fn archive_series_follow_the_reported_archive_and_go_with_it() {
    use etcd_operator_api::backup::{ArchiveGap, ArchiveStatus};
    let m = Metrics::default();
    let a = ArchiveStatus {
        durable_time: Some("2026-01-01T00:00:00Z".into()),
        gaps: vec![ArchiveGap { from_revision: 5, to_revision: 9, time: "2026-01-01T00:00:00Z".into() }],
        ..Default::default()
    };
    m.observe_archive("ns", "nightly", Some(&a));
    let text = m.encode();
    assert!(
        text.contains(r#"etcd_operator_archive_durable_timestamp_seconds{namespace="ns",name="nightly"} 1767225600"#),
        "{text}"
    );
    assert!(text.contains(r#"etcd_operator_archive_gaps{namespace="ns",name="nightly"} 1"#), "{text}");
    assert!(text.contains(r#"etcd_operator_archive_durable_revision{namespace="ns",name="nightly"} 0"#), "{text}");
    m.observe_archive_lag("ns", "nightly", Some(42));
    m.observe_restorable(
        "ns",
        "nightly",
        &[
            etcd_operator_api::backup::RestorableRange {
                cluster_id: "c1".into(),
                from_revision: 100,
                to_revision: 250,
                from_time: "2025-12-31T23:00:00Z".into(),
                to_time: "2026-01-01T00:00:00Z".into(),
                snapshot: String::new(),
                cut_short: false,
            },
            etcd_operator_api::backup::RestorableRange {
                cluster_id: "c1".into(),
                from_revision: 10,
                to_revision: 90,
                from_time: "2025-12-30T00:00:00Z".into(),
                to_time: "2025-12-30T01:00:00Z".into(),
                snapshot: String::new(),
                cut_short: false,
            },
        ],
    );
    let text = m.encode();
    for line in [
        r#"etcd_operator_archive_lag_seconds{namespace="ns",name="nightly"} 42"#,
        r#"etcd_operator_backup_restorable_revision{namespace="ns",name="nightly"} 250"#,
        r#"etcd_operator_backup_restorable_timestamp_seconds{namespace="ns",name="nightly"} 1767225600"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    m.observe_archive("ns", "nightly", None);
    m.observe_archive_lag("ns", "nightly", None);
    m.observe_restorable("ns", "nightly", &[]);
    let text = m.encode();
    for gone in [
        "archive_durable_timestamp_seconds{",
        "archive_gaps{",
        "archive_durable_revision{",
        "archive_lag_seconds{",
        "backup_restorable_revision{",
        "backup_restorable_timestamp_seconds{",
    ] {
        assert!(!text.contains(gone), "{gone} in {text}");
    }
}

#[test]
fn drill_series_follow_the_last_drill_and_go_with_the_backup() {
    use etcd_operator_api::backup::DrillResult;
    let m = Metrics::default();
    let passed = DrillResult {
        time: "2026-01-01T00:00:00Z".into(),
        succeeded: true,
        duration_seconds: 12.5,
        ..Default::default()
    };
    m.observe_drill("ns", "nightly", Some(&passed));
    let text = m.encode();
    for line in [
        r#"etcd_operator_backup_drill_last_success{namespace="ns",name="nightly"} 1"#,
        r#"etcd_operator_backup_drill_duration_seconds{namespace="ns",name="nightly"} 12.5"#,
        r#"etcd_operator_backup_drill_last_timestamp_seconds{namespace="ns",name="nightly"} 1767225600"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    let failed = DrillResult { succeeded: false, duration_seconds: 3.0, ..passed };
    m.observe_drill("ns", "nightly", Some(&failed));
    let text = m.encode();
    assert!(text.contains(r#"etcd_operator_backup_drill_last_success{namespace="ns",name="nightly"} 0"#), "{text}");
    m.observe_drill("ns", "nightly", None);
    assert!(!m.encode().contains("etcd_operator_backup_drill_"), "no drill, no series");
    m.observe_drill("ns", "nightly", Some(&failed));
    m.retain_backups(&BTreeSet::new());
    assert!(!m.encode().contains("etcd_operator_backup_drill_"), "gone with the EtcdBackup");
}

/// `cluster_managed` says an operator handles the cluster before anything else of a reconcile
/// can fail (an unreadable spec never gets the other series), and goes with the cluster.
#[test]
fn a_managed_cluster_is_said_before_anything_else_and_goes_with_it() {
    let m = Metrics::default();
    m.mark_managed("ns", "ex");
    let text = m.encode();
    assert!(text.contains(r#"etcd_operator_cluster_managed{namespace="ns",name="ex"} 1"#), "{text}");
    assert!(!text.contains("etcd_operator_cluster_desired_size{"), "only the mark so far: {text}");
    m.retain_clusters(&BTreeSet::new());
    assert!(!m.encode().contains(r#"name="ex""#));
}
