//! The PrometheusRule: the alerts on the operator's per-cluster series and etcd's own, and the
//! rule groups as Prometheus reads them. Pure.

use serde_json::{Value, json};

use super::{API_VERSION, MEMBERS_JOB, Options, meta};
use crate::OPERATOR_NAME;

/// One alerting rule.
#[derive(Clone, Debug)]
pub struct Alert {
    pub name: &'static str,
    pub severity: &'static str,
    /// How long the condition must hold.
    pub for_: &'static str,
    pub expr: String,
    pub summary: &'static str,
    pub description: &'static str,
}

/// The operator's per-cluster series, aggregated over operator replicas and targets.
fn op(metric: &str) -> String {
    format!("max by (namespace, name) ({metric})")
}

/// Quorum of the desired size: `floor(size / 2) + 1`.
fn quorum() -> String {
    format!("(floor({} / 2) + 1)", op("etcd_operator_cluster_desired_size"))
}

/// Every alert, in the order of the rule group.
pub fn alerts() -> Vec<Alert> {
    let m = format!(r#"job="{MEMBERS_JOB}""#);
    let ready = op("etcd_operator_cluster_ready_members");
    let desired = op("etcd_operator_cluster_desired_size");
    vec![
        Alert {
            name: "EtcdNoLeader",
            severity: "critical",
            for_: "1m",
            expr: format!("max by (namespace, name, pod) (etcd_server_has_leader{{{m}}}) == 0"),
            summary: "etcd member {{ $labels.pod }} of cluster {{ $labels.namespace }}/{{ $labels.name }} \
                      has no leader",
            description: "Member {{ $labels.pod }} of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} \
                          has seen no leader for a minute: it serves no writes and no linearizable reads. When a \
                          majority of the members say so, the cluster has lost its quorum.",
        },
        Alert {
            name: "EtcdQuorumAtRisk",
            severity: "warning",
            for_: "10m",
            expr: format!("{ready} < {desired}\nand\n{ready} >= {}", quorum()),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} is down to {{ $value }} ready members",
            description: "Fewer members of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} are ready \
                          than its spec.size, though still a quorum: one more lost member may stop it. See the \
                          EtcdCluster's conditions and Events.",
        },
        Alert {
            name: "EtcdQuorumAtRisk",
            severity: "critical",
            for_: "5m",
            expr: format!("{ready} < {}\nand\n{desired} > 0", quorum()),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} has lost its quorum \
                      (ready members: {{ $value }})",
            description: "Fewer members of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} are ready \
                          than a quorum of its spec.size: it accepts no writes. The operator changes no membership \
                          without a quorum; see the EtcdCluster's conditions, its Events and spec.recovery.",
        },
        Alert {
            name: "EtcdMemberDown",
            severity: "warning",
            for_: "5m",
            expr: format!("up{{{m}}} == 0"),
            summary: "etcd member {{ $labels.pod }} of cluster {{ $labels.namespace }}/{{ $labels.name }} is down",
            description: "Prometheus cannot scrape member {{ $labels.pod }} of the etcd cluster \
                          {{ $labels.namespace }}/{{ $labels.name }} on its client port.",
        },
        Alert {
            name: "EtcdBackupTooOld",
            severity: "warning",
            for_: "5m",
            // 90 s more than twice the interval: a scrape shows the newest success up to a scrape
            // interval late, and a backup takes its own time. Without it a backup every 10 s looks
            // late between scrapes (seen on the real stack at a 30 s scrape interval).
            expr: format!(
                "time() - {}\n  > 2 * {} + 90",
                op("etcd_operator_backup_last_success_timestamp_seconds"),
                op("etcd_operator_backup_interval_seconds > 0")
            ),
            summary: "EtcdBackup {{ $labels.namespace }}/{{ $labels.name }} last succeeded \
                      {{ $value | humanizeDuration }} ago",
            description: "More than twice backupIntervalInSecond (and 90 s for scrapes) has passed since the last \
                          successful backup of the EtcdBackup {{ $labels.namespace }}/{{ $labels.name }}. See its status.reason and its \
                          BackupFailed Events.",
        },
        Alert {
            name: "EtcdBackupArchiveBehind",
            severity: "warning",
            for_: "5m",
            expr: format!("{}\n  > 300", op("etcd_operator_archive_lag_seconds")),
            summary: "The continuous archive of EtcdBackup {{ $labels.namespace }}/{{ $labels.name }} is \
                      {{ $value | humanizeDuration }} behind",
            description: "Changes the archiver of the EtcdBackup {{ $labels.namespace }}/{{ $labels.name }} received \
                          have not been written to the store for more than 5 minutes, or its pod does not answer: a \
                          point-in-time restore reaches only the newest durable change. See its ArchiveCurrent \
                          condition and status.archive.lastError.",
        },
        Alert {
            name: "EtcdBackupDrillFailed",
            severity: "warning",
            for_: "1m",
            expr: format!("{} == 0", op("etcd_operator_backup_drill_last_success")),
            summary: "EtcdBackup {{ $labels.namespace }}/{{ $labels.name }}: the last restore drill failed",
            description: "The last restore drill of the EtcdBackup {{ $labels.namespace }}/{{ $labels.name }} did not \
                          give back the live cluster's data: a damaged or missing snapshot or archive segment, a \
                          restore that differs from the live cluster, or a drill that could not verify (the live \
                          cluster compacted past the restored revision). Its status.lastDrill.message and \
                          DrillFailed Event say which.",
        },
        Alert {
            name: "EtcdDatabaseNearQuota",
            severity: "warning",
            for_: "10m",
            expr: format!(
                "max by (namespace, name, pod) (etcd_mvcc_db_total_size_in_bytes{{{m}}})\n  \
                 / max by (namespace, name, pod) (etcd_server_quota_backend_bytes{{{m}}})\n  > 0.8"
            ),
            summary: "etcd member {{ $labels.pod }} of cluster {{ $labels.namespace }}/{{ $labels.name }} \
                      uses {{ $value | humanizePercentage }} of its space quota",
            description: "The database of member {{ $labels.pod }} of the etcd cluster \
                          {{ $labels.namespace }}/{{ $labels.name }} is above 80% of its quota. At the quota etcd \
                          raises a NOSPACE alarm and refuses writes: compact and defragment, or raise the quota.",
        },
        Alert {
            name: "EtcdAlarmActive",
            severity: "critical",
            for_: "1m",
            // The operator's gauge (from etcd's alarm list), or etcd's own per-member gauge for a
            // cluster no operator has reported on for 5 minutes (the operator drops its series
            // when it cannot read the list; 5 minutes ride over its restarts); one alert per
            // cluster and alarm either way. etcd's gauge counts activations, not alarms: a
            // member that raised NOSPACE twice is decremented once by the disarm and stays at 1
            // until it restarts, so it is not believed over the operator's list.
            expr: format!(
                "max by (namespace, name, alarm) (etcd_operator_alarms{{alarm=~\"NOSPACE|CORRUPT\"}}) > 0\nor\n\
                 (max by (namespace, name, alarm) (label_replace(etcd_debugging_server_alarms{{{m}, \
                 alarm_type=~\"NOSPACE|CORRUPT\"}}, \"alarm\", \"$1\", \"alarm_type\", \"(.+)\")) > 0\n  \
                 unless on (namespace, name, alarm) max_over_time(etcd_operator_alarms[5m]))"
            ),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} has a {{ $labels.alarm }} alarm",
            description: "The etcd cluster {{ $labels.namespace }}/{{ $labels.name }} reports the alarm \
                          {{ $labels.alarm }}. NOSPACE: the database reached its quota and etcd takes only reads \
                          and deletes until space is freed and the alarm is disarmed. CORRUPT: members disagree \
                          on their data.",
        },
        Alert {
            name: "EtcdFrequentLeaderChanges",
            severity: "warning",
            for_: "5m",
            expr: format!("max by (namespace, name) (increase(etcd_server_leader_changes_seen_total{{{m}}}[1h])) > 3"),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} changed leader \
                      {{ $value | humanize }} times in an hour",
            description: "The etcd cluster {{ $labels.namespace }}/{{ $labels.name }} elects new leaders often: \
                          slow disks (WAL fsync), an overloaded member or trouble on the network between members.",
        },
        Alert {
            name: "EtcdCertificateExpiresSoon",
            severity: "warning",
            for_: "10m",
            expr: format!("{} - time() < 30 * 86400", op("etcd_operator_cluster_certificate_expiry_timestamp_seconds")),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }}: a TLS certificate expires in \
                      {{ $value | humanizeDuration }}",
            description: "A certificate of the static TLS Secrets of the etcd cluster \
                          {{ $labels.namespace }}/{{ $labels.name }} (or a CA that issued one) expires within 30 \
                          days. The EtcdCluster's CertificatesExpiring condition names it. Put a renewed \
                          certificate into its Secret (no restart), or rotate the CA bundle first.",
        },
        Alert {
            name: "EtcdCertificateExpiresSoon",
            severity: "critical",
            for_: "10m",
            expr: format!("{} - time() < 7 * 86400", op("etcd_operator_cluster_certificate_expiry_timestamp_seconds")),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }}: a TLS certificate expires in \
                      {{ $value | humanizeDuration }}",
            description: "A certificate of the static TLS Secrets of the etcd cluster \
                          {{ $labels.namespace }}/{{ $labels.name }} (or a CA that issued one) expires within 7 \
                          days; once it has, members refuse connections made with it. The EtcdCluster's \
                          CertificatesExpiring condition names it.",
        },
        // Certificates renewed for the cluster: the operator judges against their own
        // renewBefore (a default one is renewed with 30 days left, which the rules above would
        // call expiring every time).
        Alert {
            name: "EtcdCertificateRenewalOverdue",
            severity: "critical",
            for_: "1m",
            expr: format!("{} == 1", op("etcd_operator_cluster_certificate_renewal_overdue")),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }}: a TLS certificate was not renewed in time",
            description: "A certificate of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} that \
                          spec.TLS.auto or cert-manager renews is still in use past its renewal time \
                          (renewBefore before it expires) and a grace. Once it expires members refuse \
                          connections made with it. The EtcdCluster's CertificatesExpiring condition names it \
                          and who should have renewed it (cert-manager: its Certificate and issuer).",
        },
        // Per cluster: its members are scraped (answering or not), and no operator says it
        // handles it (`cluster_managed`, set first thing in each reconcile, goes stale once its
        // operator's pod is gone or answers no scrape). Covers an operator scaled to 0 or
        // crash-looping, and a cluster in a namespace no scraped operator watches; a deleted
        // cluster takes its members' series with it.
        Alert {
            name: "EtcdOperatorDown",
            severity: "warning",
            for_: "5m",
            expr: format!(
                "max by (namespace, name) (up{{{m}}})\nunless on (namespace, name)\n\
                 max by (namespace, name) (etcd_operator_cluster_managed)"
            ),
            summary: "No etcd operator reports on the etcd cluster {{ $labels.namespace }}/{{ $labels.name }}",
            description: "Prometheus scrapes the members of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }}, \
                          but no etcd operator has said it handles the cluster for 5 minutes: the operator that \
                          manages it is down or answers no scrape, or no operator that Prometheus scrapes watches \
                          its namespace (install every operator with its monitoring objects). The cluster keeps \
                          serving, but \
                          nothing heals, scales, upgrades or backs it up, and the alerts made from the operator's \
                          series go quiet. See the operator's Deployment, pods and logs.",
        },
        Alert {
            name: "EtcdUpgradeStuck",
            severity: "warning",
            for_: "1m",
            expr: op(r#"etcd_operator_cluster_waiting{reason="UpgradeFailed"}"#) + " == 1",
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }}: the upgrade is stopped",
            description: "An upgraded member of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} did \
                          not come back healthy in time, so the operator stopped the rolling upgrade (reason \
                          UpgradeFailed). The EtcdCluster's conditions and Events name the member and why.",
        },
    ]
}

/// The rule groups, as Prometheus reads them from a rules file (and as a PrometheusRule's spec).
pub fn rule_groups() -> Value {
    let rules: Vec<Value> = alerts()
        .into_iter()
        .map(|a| {
            json!({
                "alert": a.name,
                "expr": a.expr,
                "for": a.for_,
                "labels": { "severity": a.severity },
                "annotations": { "summary": a.summary, "description": a.description },
            })
        })
        .collect();
    json!({ "groups": [{ "name": "etcd-operator", "rules": rules }] })
}

pub fn prometheus_rule(o: &Options) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": meta(OPERATOR_NAME, o),
        "spec": rule_groups(),
    })
}
