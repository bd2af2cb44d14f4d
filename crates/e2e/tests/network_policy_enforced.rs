//! The per-cluster NetworkPolicy enforced: packets, not objects (`network_policy.rs` checks the
//! objects). The local cluster enforces NetworkPolicies with kube-router's firewall controller
//! (`hack/cluster.sh`, on unless `NETPOL=0`); every test first proves that enforcement is on (a
//! deny-all policy really refuses) and fails with "no NetworkPolicy enforcement on this
//! cluster" otherwise. Then, with one-shot etcdctl pods as clients:
//! - a cluster the operator creates (namespace default): a pod of its namespace reaches the
//!   client port, through the Service and on each member; a pod of another namespace is refused
//!   there and on the peer port; so is a pod of the namespace on the peer port; members reach
//!   each other (a member restarted under the policy rejoins over new peer connections and
//!   replicates); the operator, restarted under a policy naming other clients, reaches every
//!   member (a status for a newer generation lists them all as answering); with the policy off,
//!   the pod of the other namespace reaches the member it was refused by: the refusals were the
//!   policy's;
//! - a cluster that existed before the policy (adopted from CoreOS, or an earlier version; mark
//!   `any`): every namespace reaches the client port, nobody but members the peer port; narrowed
//!   with `clients`, only the named pods get through.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::*;
use e2e::{ETCD_IMAGE_3_5_1, TestNamespace, etcd_pod, headless_service, host_etcdctl, wait_until};
use serde_json::{Value, json};

const CREATE: Duration = Duration::from_secs(180);
const CHANGE: Duration = Duration::from_secs(60);
const POD: Duration = Duration::from_secs(90);
const VERSION: &str = "3.6.15";
const DEFAULT_MARK: &str = "etcd.database.coreos.com/network-policy-default";

/// What one client pod saw.
#[derive(Debug, PartialEq)]
enum Reach {
    /// A TCP connection was made: the call succeeded, or the peer port took the connection and
    /// closed it (etcd 3.6 serves no gRPC there; 3.5 does).
    Reached,
    /// No connection: refused (kube-router rejects) or timed out (a dropping implementation).
    Refused,
}

/// Reads etcdctl's output: the last connection error gRPC reports says whether a connection was
/// made. Anything else (no image, a DNS failure) is an error, never taken for a refusal.
fn classify(succeeded: bool, logs: &str) -> Result<Reach> {
    // etcd 3.6's peer port closes a gRPC connection: "connection closed", or a write after it.
    let closed = ["last connection error: connection closed", "use of closed network connection"];
    if succeeded || closed.iter().any(|c| logs.contains(c)) {
        Ok(Reach::Reached)
    } else if logs.contains("connection refused") || logs.contains("i/o timeout") {
        Ok(Reach::Refused)
    } else {
        bail!("the probe failed for another reason than the network:\n{logs}")
    }
}

/// A client pod in `ns` labelled `labels` runs `etcdctl put` against `url` (up to 10 s of dial
/// retries: a policy implementation learns a new pod's address a moment after it starts).
fn probe(ns: &TestNamespace, name: &str, labels: &Value, url: &str) -> Result<Reach> {
    let cmd = json!([
        "/usr/local/bin/etcdctl",
        format!("--endpoints={url}"),
        "--dial-timeout=10s",
        "--command-timeout=12s",
        "put",
        format!("probe/{name}"),
        "ok"
    ]);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns.name, "labels": labels},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": ETCD_IMAGE_3_5_1, "imagePullPolicy": "IfNotPresent", "command": cmd}]
        }
    });
    ns.apply(&pod.to_string())?;
    let phase = wait_until(POD, &format!("probe pod {}/{name} to finish", ns.name), || {
        Ok(match ns.pod(name)?["status"]["phase"].as_str() {
            Some(p @ ("Succeeded" | "Failed")) => Some(p.to_string()),
            _ => None,
        })
    })?;
    let logs = ns.logs(name)?;
    classify(phase == "Succeeded", &logs).with_context(|| format!("probe {}/{name} -> {url}", ns.name))
}

fn expect(ns: &TestNamespace, name: &str, labels: &Value, url: &str, want: Reach) -> Result<()> {
    let got = probe(ns, name, labels, url)?;
    ensure!(got == want, "a pod of namespace {} ({labels}) -> {url}: {got:?}, expected {want:?}", ns.name);
    Ok(())
}

/// Enforcement is on: an etcd pod behind a deny-all ingress policy answers the host (a pod's
/// own node always gets through) and refuses a pod of its own namespace.
fn assert_enforced(ns: &TestNamespace) -> Result<()> {
    ns.apply(&headless_service(&ns.name, "scratch"))?;
    ns.apply(&etcd_pod(&ns.name, "scratch-0", "scratch", ETCD_IMAGE_3_5_1, "emptyDir: {}"))?;
    let deny = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-scratch", "namespace": ns.name},
        "spec": {"podSelector": {"matchLabels": {"app": "scratch"}}, "policyTypes": ["Ingress"]}
    });
    ns.apply(&deny.to_string())?;
    let pod = ns.wait_pod_ready("scratch-0", POD)?;
    let url = format!("http://{}:2379", pod["status"]["podIP"].as_str().context("scratch-0 has no IP")?);
    host_etcdctl(&url, &["put", "scratch", "from-host"]).context("the scratch etcd does not answer the host")?;
    if probe(ns, "scratch-probe", &json!({}), &url)? == Reach::Reached {
        bail!(
            "no NetworkPolicy enforcement on this cluster: a pod reached {url} through a deny-all \
             NetworkPolicy (the local cluster enforces with kube-router unless started with NETPOL=0; \
             hack/cluster.sh status shows `netpol`)"
        );
    }
    Ok(())
}

fn policy(ns: &TestNamespace, name: &str) -> Option<Value> {
    ns.json(&["get", "networkpolicy", name, "--ignore-not-found"]).ok().filter(|v| v.get("spec").is_some())
}

fn pod_ip(pod: &Value) -> Result<String> {
    Ok(pod["status"]["podIP"].as_str().filter(|ip| !ip.is_empty()).context("a member without an IP")?.to_string())
}

/// A member's etcd is killed under the policy; its container restarts with the same address and
/// data and must open new peer connections both ways: Ready again (etcd's /health needs a
/// leader) and serving a key written after the restart from its own copy (serializable read).
fn members_reach_each_other(ns: &TestNamespace, name: &str) -> Result<()> {
    let pods = member_pods(ns, name)?;
    let victim = pods.first().context("no member")?.clone();
    let vname = victim["metadata"]["name"].as_str().unwrap_or("").to_string();
    let restarts = |p: &Value| p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0);
    let before = restarts(&victim);
    signal_container(&victim, "etcd", "SIGKILL")?;
    wait_until(CHANGE, &format!("{vname} restarted and Ready"), || {
        let p = ns.pod(&vname)?;
        Ok((restarts(&p) > before && condition_true(&p, "Ready")).then_some(()))
    })?;
    let ep = client_endpoint(ns, name)?;
    write_keys(&ep, "after-restart", 3)?;
    for p in member_pods(ns, name)? {
        let url = format!("http://{}:2379", pod_ip(&p)?);
        let who = p["metadata"]["name"].as_str().unwrap_or("").to_string();
        wait_until(CHANGE, &format!("{who} to hold after-restart/2 in its own copy"), || {
            let v = host_etcdctl(&url, &["get", "--consistency=s", "--print-value-only", "after-restart/2"]).ok();
            Ok(v.filter(|v| v.trim() == "value-2"))
        })?;
    }
    Ok(())
}

/// The operator reaches every member under the policy with `clients` set to `narrow`, over new
/// connections: the policy is changed first, then the operator restarted (connections it had are
/// tracked and outlive a policy change, in every stateful implementation), then `clients` moved
/// to `narrower`: the status written for that generation comes from the new operator's
/// observation, and lists every member as ready only if each answered its status call.
fn operator_reaches_every_member(ns: &TestNamespace, op: &mut Operator, name: &str, size: usize) -> Result<()> {
    let nobody = |app: &str| json!([{"podSelector": {"matchLabels": {"app": app}}}]);
    patch_spec(ns, name, &json!({"networkPolicy": {"clients": nobody("nobody")}}).to_string())?;
    wait_until(CHANGE, "the policy to name no clients but app=nobody", || {
        Ok(policy(ns, name).filter(|p| p.to_string().contains(r#""app":"nobody""#)))
    })?;
    op.stop();
    *op = Operator::start(ns)?;
    let before = cluster(ns, name)?["metadata"]["generation"].as_i64().unwrap_or(0);
    patch_spec(ns, name, &json!({"networkPolicy": {"clients": nobody("nobody-else")}}).to_string())?;
    let c = wait_healthy(ns, name, size, CHANGE)?;
    ensure!(c["status"]["observedGeneration"].as_i64().unwrap_or(0) > before, "no status for the new spec");
    Ok(())
}

#[test]
fn a_new_cluster_admits_its_namespace_and_refuses_other_namespaces() -> Result<()> {
    with_operator("e2e-npe", |ns, op| {
        let other = TestNamespace::create("e2e-npe-other")?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        assert_enforced(ns)?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        wait_until(CHANGE, "the NetworkPolicy", || Ok(policy(ns, "ex")))?;
        ensure!(cluster(ns, "ex")?["metadata"]["annotations"][DEFAULT_MARK] == "namespace", "not a new cluster");

        let service = client_endpoint(ns, "ex")?;
        let members = member_pods(ns, "ex")?;
        let ip = pod_ip(&members[0])?;
        let (client, peer) = (format!("http://{ip}:2379"), format!("http://{ip}:2380"));
        let any = json!({});
        expect(ns, "same-ns-service", &any, &service, Reach::Reached)?;
        for (i, m) in members.iter().enumerate() {
            expect(ns, &format!("same-ns-member-{i}"), &any, &format!("http://{}:2379", pod_ip(m)?), Reach::Reached)?;
        }
        expect(ns, "same-ns-peer", &any, &peer, Reach::Refused)?;
        expect(&other, "other-ns-service", &any, &service, Reach::Refused)?;
        expect(&other, "other-ns-client", &any, &client, Reach::Refused)?;
        expect(&other, "other-ns-peer", &any, &peer, Reach::Refused)?;

        members_reach_each_other(ns, "ex")?;
        // An operator pod of this namespace admitted by its own entry alone (after the probes of
        // the namespace default, which admits it too).
        operator_reaches_every_member(ns, op, "ex", 3)?;

        // Without the policy the same pod gets through: the refusals above were the policy's.
        patch_spec(ns, "ex", &json!({"networkPolicy": {"enabled": false, "clients": null}}).to_string())?;
        wait_until(CHANGE, "the NetworkPolicy to be deleted", || Ok(policy(ns, "ex").is_none().then_some(())))?;
        expect(&other, "other-ns-client-no-policy", &any, &client, Reach::Reached)?;
        expect(&other, "other-ns-peer-no-policy", &any, &peer, Reach::Reached)?;
        Ok(())
    })
}

/// What the CoreOS operator allowed (no policy: every source) stays allowed for a cluster that
/// existed before the policy — here formed, then its policy and mark removed with the operator
/// stopped, which is what an earlier version leaves (`coreos_adoption.rs` shows a CoreOS
/// cluster gets the same `any` mark) — until the user narrows it with `clients`.
#[test]
fn a_cluster_that_existed_before_admits_every_namespace_until_narrowed() -> Result<()> {
    with_operator("e2e-npe-old", |ns, op| {
        let other = TestNamespace::create("e2e-npe-old-other")?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        assert_enforced(ns)?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        wait_until(CHANGE, "the NetworkPolicy", || Ok(policy(ns, "ex")))?;
        op.stop();
        ns.run(&["annotate", "etcdcluster", "ex", &format!("{DEFAULT_MARK}-")])?;
        ns.run(&["delete", "networkpolicy", "ex"])?;
        *op = Operator::start(ns)?;
        let np = wait_until(CHANGE, "the NetworkPolicy of a cluster that existed before", || Ok(policy(ns, "ex")))?;
        ensure!(cluster(ns, "ex")?["metadata"]["annotations"][DEFAULT_MARK] == "any", "mark: {}", np["spec"]);

        let members = member_pods(ns, "ex")?;
        let ip = pod_ip(&members[0])?;
        let (client, peer) = (format!("http://{ip}:2379"), format!("http://{ip}:2380"));
        let (any, api) = (json!({}), json!({"app": "api"}));
        expect(&other, "other-ns-client", &any, &client, Reach::Reached)?;
        expect(&other, "other-ns-service", &any, &client_endpoint(ns, "ex")?, Reach::Reached)?;
        expect(&other, "other-ns-peer", &any, &peer, Reach::Refused)?;
        expect(ns, "same-ns-peer", &any, &peer, Reach::Refused)?;

        // Narrowed to the pods labelled app=api of the cluster's namespace.
        patch_spec(
            ns,
            "ex",
            &json!({"networkPolicy": {"clients": [{"podSelector": {"matchLabels": {"app": "api"}}}]}}).to_string(),
        )?;
        wait_until(CHANGE, "the named clients in the policy", || {
            Ok(policy(ns, "ex").filter(|p| p.to_string().contains(r#""app":"api""#)))
        })?;
        expect(ns, "named-client", &api, &client, Reach::Reached)?;
        expect(ns, "unnamed-client", &any, &client, Reach::Refused)?;
        expect(&other, "other-ns-named-client", &api, &client, Reach::Refused)?;
        Ok(())
    })
}
