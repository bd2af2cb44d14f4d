//! Healing a member with a PVC (64Mi, the default StorageClass, etcd 3.6.15): the operator's
//! heal beside its floor, a StatefulSet of 3 etcd pods whose pod is deleted (Kubernetes' own
//! controller recreates it on the same claim, with no etcd knowledge). The same yardstick for
//! both: from `kubectl delete pod` until the deleted pod object is gone and 3 members answer a
//! linearizable read at their pod IPs as voters (and, for the operator, status 3 ready).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use e2e::CLUSTER_DOMAIN;
use e2e::manifests::{cluster_ip_service, headless_service};

use crate::observe::{Observer, Snap};
use crate::phases;
use crate::report::{Sample, pod_facts, secs};
use crate::scenarios::{CLUSTER, Ctx, SELECTOR, healthy_cluster_with, in_namespace, operator_sample, print_timeline};

pub const VERSION: &str = "3.6.15";
pub const PVC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
const STS: &str = "sts";

/// The follower to delete, and its UID.
fn follower(s: &Snap) -> Result<(String, String)> {
    s.live()
        .find(|p| s.probes.get(&p.name).is_some_and(|x| x.read_ok && !x.is_leader))
        .map(|p| (p.name.clone(), p.uid.clone()))
        .context("no follower found")
}

/// The end condition of a heal: the deleted pod object is gone, 3 live pods, each answers, 3 voters.
fn healed(s: &Snap, victim_uid: &str) -> bool {
    !s.pods.iter().any(|p| p.uid == victim_uid) && s.live_count() == 3 && s.answering() == 3 && s.voters_are(3)
}

/// Operator: delete one follower pod of a healthy 3-member PVC cluster.
pub fn operator(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-healpvc", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let before = healthy_cluster_with(ctx, ns, &mut obs, 3, VERSION, PVC)?;
        let (victim, vuid) = follower(&before)?;
        let before_uids = phases::uids(&before);
        obs.start();
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        obs.marks.once("kubectl delete returned", true, obs.t0.elapsed());
        let (at, _) = obs.until(ctx.timeout, "3 healthy members again, the deleted pod gone", |s, m| {
            m.once("deleted pod gone from the API", !s.pods.iter().any(|p| p.uid == vuid), s.at);
            phases::track_new(s, m, &before_uids, 1);
            m.once("3 members answer (etcd healthy)", healed(s, &vuid), s.at);
            m.once("status: 3 ready", s.status_ready(3), s.at);
            healed(s, &vuid) && s.status_ready(3)
        })?;
        phases::until_routed(&mut obs, &before_uids, 1);
        let mut sample = operator_sample(&format!("heal PVC member (deleted {victim})"), ns, op, &obs, at, false);
        phases::collect(&mut sample, ns, SELECTOR, &before_uids, obs.t0_wall, Some(&op.log_text()), at);
        if let Some(d) = obs.marks.get("3 members answer (etcd healthy)") {
            sample.extra.insert("etcd_healthy", secs(d));
        }
        Ok(sample)
    })
}

/// A headless Service, a client Service and a StatefulSet of 3 etcd pods, each with a 64Mi PVC
/// from the default StorageClass, a static `--initial-cluster`, the operator's readiness probe
/// and grace period.
fn statefulset_manifest(ns: &str) -> String {
    let host = |i: usize| format!("{STS}-{i}.{STS}.{ns}.svc.{CLUSTER_DOMAIN}");
    let initial: Vec<String> = (0..3).map(|i| format!("{STS}-{i}=http://{}:2380", host(i))).collect();
    let me = format!("$(POD_NAME).{STS}.{ns}.svc.{CLUSTER_DOMAIN}");
    format!(
        r#"{headless}---
{client}---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{ name: {STS}, namespace: {ns} }}
spec:
  serviceName: {STS}
  replicas: 3
  podManagementPolicy: Parallel
  selector: {{ matchLabels: {{ app: {STS} }} }}
  template:
    metadata: {{ labels: {{ app: {STS} }} }}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: etcd
        image: quay.io/coreos/etcd:v{VERSION}
        imagePullPolicy: IfNotPresent
        env:
        - name: POD_NAME
          valueFrom: {{ fieldRef: {{ fieldPath: metadata.name }} }}
        command: ["/usr/local/bin/etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data",
          "--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://{me}:2379",
          "--listen-peer-urls=http://0.0.0.0:2380", "--initial-advertise-peer-urls=http://{me}:2380",
          "--initial-cluster={initial}", "--initial-cluster-state=new"]
        ports:
        - {{ name: client, containerPort: 2379 }}
        - {{ name: peer, containerPort: 2380 }}
        readinessProbe:
          httpGet: {{ path: /health, port: 2379 }}
          periodSeconds: 1
          failureThreshold: 3
        volumeMounts:
        - {{ name: data, mountPath: /var/lib/etcd }}
  volumeClaimTemplates:
  - metadata: {{ name: data }}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{ requests: {{ storage: 64Mi }} }}
"#,
        headless = headless_service(ns, STS),
        client = cluster_ip_service(ns, &format!("{STS}-client"), STS),
        initial = initial.join(","),
    )
}

/// Baseline: delete one follower pod of a healthy StatefulSet of 3 etcd members with PVCs.
pub fn statefulset(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-sts", false, |ns, _| {
        let selector = format!("app={STS}");
        let mut obs = Observer::new(ns, &ctx.rt, &selector, None);
        obs.client_service = Some(format!("{STS}-client"));
        ns.apply(&statefulset_manifest(&ns.name))?;
        let (_, before) = obs.until(ctx.timeout, "set-up: 3 healthy StatefulSet members", |s, _| {
            s.live_count() == 3 && s.answering() == 3 && s.voters_are(3)
        })?;
        std::thread::sleep(ctx.settle);
        let (victim, vuid) = follower(&before)?;
        let before_uids = phases::uids(&before);
        obs.start();
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        obs.marks.once("kubectl delete returned", true, obs.t0.elapsed());
        let (at, _) = obs.until(ctx.timeout, "3 healthy members again, the deleted pod gone", |s, m| {
            m.once("deleted pod gone from the API", !s.pods.iter().any(|p| p.uid == vuid), s.at);
            phases::track_new(s, m, &before_uids, 1);
            healed(s, &vuid)
        })?;
        phases::until_routed(&mut obs, &before_uids, 1);
        let facts = pod_facts(ns, &selector, obs.t0_wall, false);
        print_timeline(
            &format!("StatefulSet heal (deleted {victim}, namespace {})", ns.name),
            at,
            &obs.marks,
            &[],
            &facts,
        );
        let mut sample = Sample { value: secs(at), marks: obs.marks.clone(), extra: BTreeMap::new() };
        phases::collect(&mut sample, ns, &selector, &before_uids, obs.t0_wall, None, at);
        Ok(sample)
    })
}
