//! `spec.TLS.auto`: creating a 3-member cluster with operator-made certificates (beside the
//! plaintext create of the same run), and a CA rotation of a healthy 3-member cluster forced
//! with the `rotate-ca` annotation (two rolling restarts; reported per member: total / 3). The
//! members speak TLS only, so progress is read from pods, status and the CA Secret (the
//! observer's plaintext probes of etcd find nothing).

use anyhow::{Context, Result};
use e2e::TestNamespace;
use e2e::manifests::cluster_manifest;

use crate::observe::Observer;
use crate::report::{Sample, secs};
use crate::scenarios::{CLUSTER, Ctx, SELECTOR, in_namespace, operator_sample};

const TLS_AUTO: &str = "  TLS:\n    auto: {}\n";

/// The CA Secret: its `ca.crt` and rotation phase annotation.
fn ca_state(ns: &TestNamespace) -> (String, String) {
    let s = ns.json(&["get", "secret", &format!("{CLUSTER}-tls-ca")]).unwrap_or_default();
    let cert = s["data"]["ca.crt"].as_str().unwrap_or("").to_string();
    let phase = s["metadata"]["annotations"]["etcd.database.coreos.com/ca-rotation"].as_str().unwrap_or("").to_string();
    (cert, phase)
}

/// `kubectl apply` of a 3-member EtcdCluster with `TLS: {auto: {}}` → 3 pods and status 3
/// ready (the operator reached every member over TLS with its own certificate).
pub fn create(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-tls-create", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        obs.start();
        ns.apply(&cluster_manifest(&ns.name, CLUSTER, 3, "3.5.1", TLS_AUTO))?;
        obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
        let (at, _) = obs.until(ctx.timeout, "3 pods and status 3 ready", |s, m| {
            m.once("CA and certificates issued", !ca_state(ns).0.is_empty(), s.at);
            m.once("3 pods exist", s.live_count() == 3, s.at);
            m.once("3 pods Ready", s.ready_pods() == 3, s.at);
            m.once("status: 3 ready", s.status_ready(3), s.at);
            s.live_count() == 3 && s.status_ready(3)
        })?;
        Ok(operator_sample("create with TLS.auto", ns, op, &obs, at, true))
    })
}

/// A healthy 3-member TLS.auto cluster; `rotate-ca` annotated → a new CA in the CA Secret, no
/// rotation phase left, status 3 ready. The sample is per member (total / 3); `total` in extra.
pub fn ca_rotation(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-tls-rotate", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        ns.apply(&cluster_manifest(&ns.name, CLUSTER, 3, "3.5.1", TLS_AUTO))?;
        obs.until(ctx.timeout, "set-up: 3 pods and status 3 ready", |s, _| s.live_count() == 3 && s.status_ready(3))?;
        std::thread::sleep(ctx.settle);
        let (old, _) = ca_state(ns);
        obs.start();
        ns.run(&["annotate", "etcdcluster", CLUSTER, "etcd.database.coreos.com/rotate-ca=bench"])?;
        let (at, _) = obs.until(ctx.timeout * 3, "a new CA, no rotation phase, status 3 ready", |s, m| {
            let (cert, phase) = ca_state(ns);
            m.once("phase introducing (members restart to trust both)", phase == "introducing", s.at);
            m.once("phase reissuing (certificates of the new CA)", phase == "reissuing", s.at);
            m.once("phase dropping (members restart without the old CA)", phase == "dropping", s.at);
            cert != old && !cert.is_empty() && phase.is_empty() && s.live_count() == 3 && s.status_ready(3)
        })?;
        let mut sample = operator_sample("CA rotation of 3 members", ns, op, &obs, at, true);
        sample.extra.insert("total", secs(at));
        sample.value = secs(at) / 3.0;
        Ok(sample)
    })
}
