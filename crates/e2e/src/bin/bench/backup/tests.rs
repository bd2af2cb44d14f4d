//! Table tests of the backup bench's pure parts.

use std::collections::BTreeMap;

use super::report::*;
use super::setup::random_value;
use super::*;
use crate::report::{Sample, Stats};

fn st(median: f64, min: f64, max: f64) -> Stats {
    Stats { median, min, max, n: 3 }
}

#[test]
fn s3_is_also_compared_with_save_then_upload() {
    let mut r: BTreeMap<&str, Vec<Sample>> = BTreeMap::new();
    let mut setup = Sample { value: 100.0 * MIB, ..Default::default() };
    setup.extra.insert("moto_put_s", 1.0);
    r.insert(SETUP, vec![setup]);
    let mut base = Sample::default();
    base.extra.insert("transfer_s", 0.5);
    r.insert(BASELINE, vec![base]);
    let mut s3 = Sample::default();
    s3.extra.insert("transfer_mibs", 100.0); // 1 s for 100 MiB
    r.insert(S3, vec![s3]);
    let text = render(&r);
    // save then upload: 100 MiB in 0.5 + 1.0 s = 66.7 MiB/s; 100 / 66.7 = 1.50.
    let line = text.lines().find(|l| l.contains("save-then-upload")).expect(&text);
    assert!(line.contains("66.7 MiB/s") && line.contains("ratio: 1.50") && line.ends_with("PASS"), "{line}");
}

#[test]
fn throughput_is_mib_per_second() {
    assert_eq!(mib_per_s(110.0 * MIB, 2.0), Some(55.0));
    assert_eq!(mib_per_s(1.0, 0.0), None);
    assert_eq!(fmt_rate(st(55.04, 50.0, 60.0)), "55.0 MiB/s [min 50.0, max 60.0, n=3]");
}

#[test]
fn rate_lines_pass_at_or_above_the_target_ratio() {
    let l = rate_line("x", Some(st(40.0, 39.0, 41.0)), Some(("base", st(50.0, 49.0, 51.0))), 0.8);
    assert!(l.ends_with("ratio: 0.80, target: ≥0.8×) PASS"), "{l}");
    let l = rate_line("x", Some(st(30.0, 29.0, 31.0)), Some(("base", st(50.0, 49.0, 51.0))), 0.8);
    assert!(l.ends_with("ratio: 0.60, target: ≥0.8×) MISS"), "{l}");
    assert!(l.starts_with("x: 30.0 MiB/s [min 29.0, max 31.0, n=3] (baseline: base 50.0 MiB/s"), "{l}");
    assert!(rate_line("x", Some(st(1.0, 1.0, 1.0)), None, 0.8).ends_with("ERROR (no baseline)"));
    assert_eq!(rate_line("x", None, None, 0.8), "x: no successful sample (ERROR)");
}

#[test]
fn zap_timestamps_in_every_shape() {
    let t = 1_637_058_225.123;
    let close = |v: Value| (zap_ts(&v).unwrap() - t).abs() < 1e-6;
    assert!(close(Value::from(t)));
    assert!(close(Value::from("2021-11-16T10:23:45.123Z")));
    assert!(close(Value::from("2021-11-16T10:23:45.123+0000")));
    assert!(close(Value::from("2021-11-16T11:23:45.123+01:00")));
    assert!(close(Value::from("2021-11-16T09:23:45.123-0100")));
    assert_eq!(zap_ts(&Value::from("garbage")), None);
}

#[test]
fn etcdctl_log_gives_the_in_pod_transfer() {
    let log = r#"{"level":"info","ts":"2021-11-16T10:23:45.100Z","caller":"snapshot/v3_snapshot.go:68","msg":"created temporary db file","path":"/backup/snapshot.db.part"}
{"level":"info","ts":"2021-11-16T10:23:45.120Z","caller":"snapshot/v3_snapshot.go:76","msg":"fetching snapshot","endpoint":"http://10.0.0.5:2379"}
{"level":"info","ts":"2021-11-16T10:23:47.620Z","caller":"snapshot/v3_snapshot.go:91","msg":"fetched snapshot","endpoint":"http://10.0.0.5:2379","size":"116 MB","took":"2 seconds ago"}
{"level":"info","ts":"2021-11-16T10:23:47.625Z","caller":"snapshot/v3_snapshot.go:100","msg":"saved","path":"/backup/snapshot.db"}
Snapshot saved at /backup/snapshot.db
"#;
    let (t, size) = etcdctl_transfer(log).unwrap();
    assert!((t - 2.505).abs() < 1e-6, "{t}");
    assert_eq!(size, "116 MB");
    assert_eq!(etcdctl_transfer("Error: context deadline exceeded"), None);
}

#[test]
fn backup_pod_reports_and_event_notes() {
    let msg = r#"{"backup":{"path":"s3://b/k","sha256":"ab","size":115343392,"etcdVersion":"3.5.1","etcdRevision":112,"member":"bench-x","time":"2026-01-01T00:00:00Z"},"transferSeconds":2.25,"deleted":[],"kept":[]}"#;
    assert_eq!(save_report(msg), Some((2.25, 115_343_392.0, "bench-x".into())));
    assert_eq!(save_report("connect to ...: refused"), None);
    let note = "backup of member m at revision 9 (5 bytes, sha256 ab) written to s3://b/k in 2.3s";
    assert_eq!(transfer_from_note(note), Some(2.3));
    assert_eq!(transfer_from_note(&format!("{note}; retention deleted s3://b/k_v1")), Some(2.3));
}

#[test]
fn events_are_counted_by_reason_with_their_series() {
    let list = serde_json::json!({"items": [
        {"reason": "BackupStarted", "count": 1},
        {"reason": "BackupSucceeded", "series": {"count": 2}, "count": 2},
        {"reason": "BackupSucceeded"},
    ]});
    assert_eq!(event_counts(&list), "BackupStarted ×1, BackupSucceeded ×3");
    assert_eq!(event_counts(&serde_json::json!({"items": []})), "none");
}

#[test]
fn values_are_distinct_and_sized() {
    let (a, b) = (random_value(1, VALUE_BYTES), random_value(2, VALUE_BYTES));
    assert_eq!(a.len(), VALUE_BYTES);
    assert_ne!(a, b);
    assert_ne!(a[..8], a[8..16]);
}

#[test]
fn render_puts_the_baseline_beside_each_row() {
    let mut r: BTreeMap<&str, Vec<Sample>> = BTreeMap::new();
    let s = |e2e: f64, transfer: f64| {
        let mut x = Sample { value: 110.0 / e2e, ..Default::default() };
        x.extra.insert("e2e_mibs", e2e);
        x.extra.insert("transfer_mibs", transfer);
        x.extra.insert("transfer_s", 110.0 / transfer);
        x
    };
    r.insert(S3, vec![s(20.0, 40.0)]);
    r.insert(PVC, vec![s(30.0, 90.0)]);
    r.insert(BASELINE, vec![s(25.0, 100.0)]);
    let out = render(&r);
    assert!(
        out.contains("backup to S3 (moto), end to end incl. pod start (apply → status.succeeded): 20.0 MiB/s"),
        "{out}"
    );
    assert!(out.contains("ratio: 0.80, target: ≥0.8×) PASS"), "{out}");
    assert!(out.contains("ratio: 0.40, target: ≥0.8×) MISS"), "{out}");
    assert!(out.contains("ratio: 1.20, target: ≥0.8×) PASS"), "{out}");
}
