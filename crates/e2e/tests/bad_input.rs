//! Bad input on the real cluster: absurd numbers, names that cannot name a Service, flags the
//! operator owns. Each is refused — by the apiserver's schema where a schema can say it, by the
//! operator otherwise, with a condition and an Event naming the field — and the operator keeps
//! running and healing other clusters (it never restarts).

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use e2e::{TestNamespace, wait_until};

fn backup(ns: &TestNamespace, name: &str, policy: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: {name}, namespace: {}}}\nspec:\n  clusterName: ex\n  storageType: S3\n  s3: {{path: b/k, awsSecret: none}}\n  backupPolicy: {policy}\n",
        ns.name
    )
}

/// `kubectl apply` fails, and the message names the field.
fn refused_by_schema(ns: &TestNamespace, manifest: &str, field: &str) -> Result<()> {
    match ns.apply(manifest) {
        Ok(()) => anyhow::bail!("the apiserver accepted {field}: {manifest}"),
        Err(e) => {
            let msg = format!("{e:#}");
            ensure!(msg.contains(field), "refused, but the message does not name {field}: {msg}");
            Ok(())
        }
    }
}

/// The operator refuses it: SpecValid=False naming `field`, an InvalidSpec Event, no pod.
fn refused_by_operator(ns: &TestNamespace, name: &str, manifest: &str, field: &str) -> Result<()> {
    ns.apply(manifest)?;
    let c = wait_until(Duration::from_secs(60), &format!("{name}: SpecValid=False naming {field}"), || {
        let c = cluster(ns, name)?;
        Ok(condition(&c, "SpecValid").filter(|s| s["status"] == "False").is_some().then_some(c))
    })?;
    let msg = condition(&c, "SpecValid").map(|s| s["message"].to_string()).unwrap_or_default();
    ensure!(msg.contains(field), "{name}: the condition does not name {field}: {msg}");
    ensure!(events_for(ns, name)?.iter().any(|(r, _)| r == "InvalidSpec"), "{name}: no InvalidSpec Event");
    ensure!(member_pods(ns, name)?.is_empty(), "{name}: pods were created");
    Ok(())
}

/// Refused at `kubectl apply` by the CRDs' CEL rules where the apiserver runs them (1.25+),
/// by the operator elsewhere; either way the answer names `field`.
fn refused_by_rule_or_operator(ns: &TestNamespace, name: &str, manifest: &str, field: &str) -> Result<()> {
    if ns.kubectl.has_crd_validation_rules()? {
        refused_by_schema(ns, manifest, field)
    } else {
        refused_by_operator(ns, name, manifest, field)
    }
}

/// Deletes one member pod of the 3-member cluster `name` and waits until a new pod replaced it
/// and the cluster is healthy again: the operator is still at work.
fn heal_after_deleting_a_member(ns: &TestNamespace, name: &str) -> Result<()> {
    let victim = pod_names(&member_pods(ns, name)?)[0].clone();
    ns.run(&["delete", "pod", &victim, "--wait=false"])?;
    wait_until(Duration::from_secs(180), "the deleted member to be replaced", || {
        let pods = pod_names(&member_pods(ns, name)?);
        Ok((pods.len() == 3 && !pods.contains(&victim)).then_some(()))
    })?;
    wait_healthy(ns, name, 3, Duration::from_secs(180)).map(drop)
}

#[test]
fn absurd_input_is_refused_and_the_operator_keeps_healing_others() -> Result<()> {
    with_operator("e2e-bad-input", |ns, op| {
        // Numbers past any sensible value: the schema refuses them (they used to panic the
        // operator in date arithmetic).
        refused_by_schema(ns, &backup(ns, "huge-timeout", "{timeoutInSecond: 10000000000000000}"), "timeoutInSecond")?;
        refused_by_schema(
            ns,
            &backup(ns, "huge-interval", "{backupIntervalInSecond: 100000000000000}"),
            "backupIntervalInSecond",
        )?;
        let negative_dns = cluster_manifest(&ns.name, "dns", 1, "3.5.1", "  pod: {DNSTimeoutInSecond: -5}\n");
        refused_by_schema(ns, &negative_dns, "DNSTimeoutInSecond")?;

        // What an OpenAPI schema cannot say: the dotted name (a valid object name) the operator
        // refuses; the long name and the reserved variable the CEL rules refuse at apply time
        // where the server has CEL, the operator elsewhere.
        let dotted = cluster_manifest(&ns.name, "my.cluster", 1, "3.5.1", "");
        refused_by_operator(ns, "my.cluster", &dotted, "metadata.name")?;
        let long = "a".repeat(60);
        refused_by_rule_or_operator(ns, &long, &cluster_manifest(&ns.name, &long, 1, "3.5.1", ""), "at most 56")?;
        // Names the operator owned from the start: the CEL rule where the server has CEL.
        let initial = "  pod:\n    etcdEnv: [{name: ETCD_INITIAL_CLUSTER, value: \"x=http://x:2380\"}]\n";
        refused_by_rule_or_operator(
            ns,
            "initial",
            &cluster_manifest(&ns.name, "initial", 1, "3.5.1", initial),
            "ETCD_INITIAL_CLUSTER",
        )?;
        // Owned since the operator recovers quorum loss itself: a cluster formed under an older
        // operator may carry it, so no CRD rule refuses it (it would block that cluster's status
        // updates); the operator refuses it for new clusters.
        let force = "  pod:\n    etcdEnv: [{name: ETCD_FORCE_NEW_CLUSTER, value: \"true\"}]\n";
        refused_by_operator(
            ns,
            "force",
            &cluster_manifest(&ns.name, "force", 1, "3.5.1", force),
            "ETCD_FORCE_NEW_CLUSTER",
        )?;

        // The operator is unharmed: a good cluster comes up and heals.
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", ""))?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(120))?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "ok", 10)?;
        heal_after_deleting_a_member(ns, "ex")?;
        check_keys(&ep, "ok", 10)?;
        ensure!(op.restarts()? == 0, "the operator went down");
        Ok(())
    })
}

/// A bug that panics in one object's reconcile (injected with the `reconcile-panic` failpoint,
/// armed only in this test's operator) is reported on that object and nowhere else: the operator
/// process stays up and keeps creating and healing the other clusters.
#[test]
fn a_reconcile_that_panics_stays_with_its_object() -> Result<()> {
    let ns = TestNamespace::create("e2e-panic")?;
    let mut op = Operator::start_process_with_env(&ns, &[("ETCD_OPERATOR_FAILPOINTS", "reconcile-panic")])?;
    let result = (|| -> Result<()> {
        let armed = "  annotations: {etcd.database.coreos.com/failpoint: reconcile-panic}\n";
        // The panicking objects first, a good cluster after them in the same watches.
        let boom = cluster_manifest(&ns.name, "boom", 1, "3.5.1", "").replace("\nspec:", &format!("\n{armed}spec:"));
        ns.apply(&boom)?;
        ns.apply(&backup(&ns, "boom-backup", "{}").replace(
            "metadata: {name: boom-backup, ",
            "metadata: {annotations: {etcd.database.coreos.com/failpoint: reconcile-panic}, name: boom-backup, ",
        ))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", ""))?;
        wait_healthy(&ns, "ex", 3, Duration::from_secs(150))?;
        let ep = client_endpoint(&ns, "ex")?;
        write_keys(&ep, "panic", 10)?;
        heal_after_deleting_a_member(&ns, "ex")?;
        check_keys(&ep, "panic", 10)?;

        for name in ["boom", "boom-backup"] {
            let note = wait_until(Duration::from_secs(60), &format!("a ReconcilePanicked Event on {name}"), || {
                Ok(events_for(&ns, name)?.into_iter().find(|(r, _)| r == "ReconcilePanicked").map(|(_, n)| n))
            })?;
            ensure!(note.contains(&format!("failpoint reconcile-panic fired on {}/{name}", ns.name)), "{note}");
        }
        ensure!(member_pods(&ns, "boom")?.is_empty(), "the panicking cluster got pods");
        ensure!(op.restarts()? == 0, "the operator process exited");
        let log = op.log_text();
        ensure!(log.contains("failpoints armed") && log.contains("reconcile panicked"), "log lacks the panic report");
        Ok(())
    })();
    result.map_err(|e| e.context(format!("operator log: {}", op.log.display())))
}
