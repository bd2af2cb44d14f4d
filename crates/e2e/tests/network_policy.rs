//! The NetworkPolicy per cluster (`spec.networkPolicy`, on by default), on the real API server:
//! created with the cluster and owned by it, shaped as `network_policy.rs` says (peers only from
//! members; the client port from members, operator, backups and `clients`), re-created when
//! someone deletes it, changed with the spec, left alone by a refused spec, removed when turned
//! off — while the cluster keeps serving; a cluster that existed before the operator made
//! policies keeps its client port open to every source across operator restarts, until
//! `clients` narrows it. What is asserted here is the objects; `network_policy_enforced.rs`
//! sends the packets (the local cluster enforces policies with kube-router's firewall).

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use e2e::wait_until;
use serde_json::{Value, json};

const CREATE: Duration = Duration::from_secs(150);
const CHANGE: Duration = Duration::from_secs(30);
/// The durable mark that says who the client port admits while `clients` is unset.
const DEFAULT_MARK: &str = "etcd.database.coreos.com/network-policy-default";

/// The rule that opens `port`.
fn rule_for(np: &Value, port: i64) -> Option<Value> {
    let rules = np["spec"]["ingress"].as_array().cloned().unwrap_or_default();
    rules.into_iter().find(|r| r["ports"][0]["port"] == port)
}

fn mark(ns: &e2e::TestNamespace) -> Result<Value> {
    Ok(cluster(ns, "ex")?["metadata"]["annotations"][DEFAULT_MARK].clone())
}

/// The `from` list of the rule that opens `port`.
fn from_for(np: &Value, port: i64) -> Vec<Value> {
    let rules = np["spec"]["ingress"].as_array().cloned().unwrap_or_default();
    rules.iter().find(|r| r["ports"][0]["port"] == port).and_then(|r| r["from"].as_array().cloned()).unwrap_or_default()
}

fn policy(ns: &e2e::TestNamespace) -> Option<Value> {
    ns.json(&["get", "networkpolicy", "ex", "--ignore-not-found"]).ok().filter(|v| v.get("spec").is_some())
}

/// Merge-patches `spec.networkPolicy` and checks the API server kept `want`: it prunes fields
/// its CRD does not know, and on a cluster shared with other operator versions the last one
/// started installed its CRDs; say so rather than time out later.
fn set_network_policy(ns: &e2e::TestNamespace, patch: Value, want: Value) -> Result<()> {
    patch_spec(ns, "ex", &json!({"networkPolicy": patch}).to_string())?;
    let kept = cluster(ns, "ex")?["spec"]["networkPolicy"].clone();
    ensure!(kept == want, "spec.networkPolicy is {kept}, not {want}: does the CRD on the server lack the field?");
    Ok(())
}

#[test]
fn a_cluster_gets_its_network_policy_and_loses_it_when_turned_off() -> Result<()> {
    with_operator("e2e-netpol", |ns, op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        let c = wait_healthy(ns, "ex", 1, CREATE)?;
        let np = wait_until(CHANGE, "the NetworkPolicy", || Ok(policy(ns)))?;
        // Created with the policy: the namespace default, recorded once.
        ensure!(mark(ns)? == "namespace", "{DEFAULT_MARK}: {}", mark(ns)?);

        // Owned by the EtcdCluster (deleted with it), selecting its members.
        let owner = &np["metadata"]["ownerReferences"][0];
        ensure!(owner["kind"] == "EtcdCluster" && owner["uid"] == c["metadata"]["uid"], "{owner}");
        let members = json!({"matchLabels": {"app": "etcd", "etcd_cluster": "ex"}});
        ensure!(np["spec"]["podSelector"] == members, "{}", np["spec"]);
        ensure!(np["spec"]["policyTypes"] == json!(["Ingress"]), "{}", np["spec"]);
        // Peers only from members and the operator (when it is a pod: it reads the peer
        // certificates); the client port from members, the operator, this cluster's backup pods
        // and, by default, every pod of the namespace.
        let operator = json!({"podSelector": {"matchLabels": {"app.kubernetes.io/name": "etcd-operator"}}});
        let mut peers = vec![json!({"podSelector": members})];
        peers.extend(op.in_cluster().map(|_| operator.clone()));
        ensure!(from_for(&np, 2380) == peers, "{}", np["spec"]);
        let mut want = vec![json!({"podSelector": members})];
        if op.in_cluster().is_some() {
            want.push(operator);
        }
        want.push(json!({"podSelector": {"matchLabels": {"etcd_backup_of": "ex"}}}));
        want.push(json!({"podSelector": {}}));
        ensure!(from_for(&np, 2379) == want, "client port: {:?}", from_for(&np, 2379));

        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "np", 10)?;

        // Deleted by someone: the watch brings it back.
        let uid = np["metadata"]["uid"].clone();
        ns.run(&["delete", "networkpolicy", "ex", "--wait=false"])?;
        wait_until(CHANGE, "the NetworkPolicy to be re-created", || {
            Ok(policy(ns).filter(|p| p["metadata"]["uid"] != uid))
        })?;

        // The spec names the clients: the policy follows.
        let api = json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "podSelector": {"matchLabels": {"app": "api"}}});
        set_network_policy(ns, json!({"clients": [api]}), json!({"clients": [api]}))?;
        wait_until(CHANGE, "the named clients in the policy", || {
            Ok(policy(ns).filter(|p| from_for(p, 2379).last() == Some(&api)))
        })?;
        ensure!(!from_for(&policy(ns).unwrap_or_default(), 2379).contains(&json!({"podSelector": {}})));

        // A spec the operator refuses changes nothing and says why.
        if ns.kubectl.server_minor()? >= 25 {
            // CEL (1.25+) refuses an ipBlock mixed with a selector before the operator sees it.
            let mixed = json!({"networkPolicy": {"clients": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}});
            let out =
                ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", &json!({"spec": mixed}).to_string()]);
            ensure!(out.is_err_and(|e| e.to_string().contains("either an ipBlock alone")), "CEL rule missing");
        }
        let bad = json!({"clients": [{"ipBlock": {"cidr": "10.0.0.0"}}]});
        set_network_policy(ns, bad.clone(), bad)?;
        let why = wait_until(CHANGE, "SpecValid=False", || {
            let c = cluster(ns, "ex")?;
            Ok(condition(&c, "SpecValid").filter(|s| s["status"] == "False").map(|s| s["message"].to_string()))
        })?;
        ensure!(why.contains("clients[0].ipBlock.cidr"), "{why}");
        std::thread::sleep(Duration::from_secs(3));
        ensure!(
            from_for(&policy(ns).unwrap_or_default(), 2379).last() == Some(&api),
            "a refused spec changed the policy"
        );

        // Turned off: the policy goes, the cluster keeps serving.
        set_network_policy(ns, json!({"enabled": false, "clients": null}), json!({"enabled": false}))?;
        wait_until(CHANGE, "the NetworkPolicy to be deleted", || Ok(policy(ns).is_none().then_some(())))?;
        // Published once the delete call has returned: a moment after the policy is gone.
        wait_until(CHANGE, "a NetworkPolicyDeleted Event", || {
            Ok(events_for(ns, "ex")?.iter().any(|(reason, _)| reason == "NetworkPolicyDeleted").then_some(()))
        })?;
        wait_healthy(ns, "ex", 1, CHANGE)?;
        check_keys(&ep, "np", 10)?;
        Ok(())
    })
}

/// A cluster that existed before its operator made NetworkPolicies (here: formed, then its
/// policy and policy mark removed with the operator stopped, which is what an earlier operator
/// version leaves; `coreos_adoption` checks a CoreOS cluster the same way): the operator marks
/// it `any` and leaves its client port open to every source (no `from`), as it was without a
/// policy, while peers stay members-only. The mark survives operator restarts; `clients`
/// narrows the port; setting the mark to `namespace` opts in to the namespace default.
#[test]
fn a_cluster_formed_before_the_policy_keeps_its_client_port_open() -> Result<()> {
    with_operator("e2e-netpol-old", |ns, op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        wait_until(CHANGE, "the NetworkPolicy", || Ok(policy(ns)))?;
        op.stop();
        ns.run(&["annotate", "etcdcluster", "ex", &format!("{DEFAULT_MARK}-")])?;
        ns.run(&["delete", "networkpolicy", "ex"])?;
        *op = Operator::start(ns)?;

        let np = wait_until(CHANGE, "the NetworkPolicy of a cluster formed before", || Ok(policy(ns)))?;
        ensure!(mark(ns)? == "any", "{DEFAULT_MARK}: {}", mark(ns)?);
        let client = rule_for(&np, 2379).unwrap_or_default();
        ensure!(client.get("from").is_none_or(Value::is_null), "client port not open to every source: {client}");
        let members = json!({"matchLabels": {"app": "etcd", "etcd_cluster": "ex"}});
        let operator = json!({"podSelector": {"matchLabels": {"app.kubernetes.io/name": "etcd-operator"}}});
        let mut peers = vec![json!({"podSelector": members})];
        peers.extend(op.in_cluster().map(|_| operator));
        ensure!(from_for(&np, 2380) == peers, "{}", np["spec"]);
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "old", 5)?;

        // An operator restart keeps the mark and the policy as they are.
        let version = np["metadata"]["resourceVersion"].clone();
        op.stop();
        *op = Operator::start(ns)?;
        wait_healthy(ns, "ex", 1, CHANGE)?;
        ensure!(mark(ns)? == "any", "after a restart {DEFAULT_MARK}: {}", mark(ns)?);
        let again = policy(ns).unwrap_or_default();
        ensure!(again["metadata"]["resourceVersion"] == version, "the policy was rewritten: {}", again["spec"]);

        // The user narrows it.
        let api = json!({"podSelector": {"matchLabels": {"app": "api"}}});
        set_network_policy(ns, json!({"clients": [api]}), json!({"clients": [api]}))?;
        wait_until(CHANGE, "the named clients in the policy", || {
            Ok(policy(ns).filter(|p| from_for(p, 2379).last() == Some(&api)))
        })?;
        // Unset again, with the mark set to `namespace`: the namespace default.
        set_network_policy(ns, json!({"clients": null}), json!({}))?;
        ns.run(&["annotate", "etcdcluster", "ex", "--overwrite", &format!("{DEFAULT_MARK}=namespace")])?;
        wait_until(CHANGE, "the namespace default", || {
            Ok(policy(ns).filter(|p| from_for(p, 2379).last() == Some(&json!({"podSelector": {}}))))
        })?;
        check_keys(&ep, "old", 5)?;
        Ok(())
    })
}
