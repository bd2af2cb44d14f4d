//! Migrating from the CoreOS etcd-operator: an etcd cluster as the CoreOS operator left it (built
//! here by hand, the way its `pkg/util/k8sutil` made it: pods `<name>-<10 random chars>` with
//! `app=etcd`, `etcd_node`, `etcd_cluster` labels, the `etcd.version` annotation, its etcd command
//! line, `restartPolicy: Never`, an owner reference to the EtcdCluster; the headless peer Service
//! `<name>` and the client Service `<name>-client`; members added one by one after a seed member,
//! as CoreOS grew a cluster; the EtcdCluster carrying only the status CoreOS wrote) is adopted by
//! this operator in place: the same pods (same UIDs, never restarted), the same etcd members, the
//! data written before still there; then a resize and an etcd upgrade that work. A CoreOS cluster
//! on PVCs (one claim per member, named after the member) loses two of its three pods and comes
//! back on its own claims.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::{
    Operator, client_endpoint, cluster, cond_str, events_v1, member_list, patch_spec, pod_versions, wait_healthy,
};
use e2e::{ETCD_IMAGE_3_5_1, TestNamespace, host_etcdctl, wait_until};
use serde_json::{Value, json};

const NAME: &str = "coreos";
const VERSION: &str = "3.5.1";
/// A patch upgrade (an image `hack/images.sh` loads).
const UPGRADE_TO: &str = "3.5.34";

/// CoreOS' member name suffix: 10 characters of Kubernetes' `utilrand` alphabet.
fn coreos_suffix(seed: &mut u64) -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|_| {
            // xorshift: good enough for names.
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            CHARS[(*seed % CHARS.len() as u64) as usize] as char
        })
        .collect()
}

fn create(ns: &TestNamespace, obj: &Value) -> Result<()> {
    let path =
        std::env::temp_dir().join(format!("{}-{}.json", ns.name, obj["metadata"]["name"].as_str().unwrap_or("x")));
    std::fs::write(&path, obj.to_string())?;
    let r = ns.run(&["create", "-f", path.to_str().unwrap_or_default()]);
    let _ = std::fs::remove_file(&path);
    r.map(drop)
}

fn owner(uid: &str) -> Value {
    json!([{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster", "name": NAME, "uid": uid,
            "controller": true}])
}

/// The two Services CoreOS made (`CreateClientService`, `CreatePeerService`): selector
/// `app=etcd,etcd_cluster=<name>`. CoreOS asked for the peer Service's unready addresses with the
/// `tolerate-unready-endpoints` annotation, which Kubernetes removed in 1.24; a CoreOS cluster
/// that still grows on a current Kubernetes has `publishNotReadyAddresses` set instead.
fn coreos_services(ns: &TestNamespace, uid: &str) -> Result<()> {
    let labels = json!({"app": "etcd", "etcd_cluster": NAME});
    let port = |name: &str, p: i64| json!({"name": name, "port": p, "targetPort": p, "protocol": "TCP"});
    for (name, peer) in [(format!("{NAME}-client"), false), (NAME.to_string(), true)] {
        let mut spec = json!({"selector": labels, "ports": [port("client", 2379)]});
        if peer {
            spec["clusterIP"] = "None".into();
            spec["publishNotReadyAddresses"] = true.into();
            spec["ports"] = json!([port("client", 2379), port("peer", 2380)]);
        }
        create(
            ns,
            &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "labels": labels, "ownerReferences": owner(uid),
                    "annotations": {"service.alpha.kubernetes.io/tolerate-unready-endpoints": peer.to_string()}},
                "spec": spec}),
        )?;
    }
    Ok(())
}

/// The claim CoreOS' `NewEtcdPodPVC` made for a member from `spec.pod.persistentVolumeClaimSpec`:
/// named after the member (`PVCNameFromMember`), its two labels, the owner reference.
fn coreos_claim(ns: &TestNamespace, uid: &str, member: &str) -> Result<()> {
    create(
        ns,
        &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": member, "labels": {"app": "etcd", "etcd_cluster": NAME}, "ownerReferences": owner(uid)},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}),
    )
}

/// A member pod as CoreOS' `newEtcdPod` made it, its `etcd-data` volume an emptyDir or (with a
/// PVC spec, `AddEtcdVolumeToPod`) the member's claim. Two stand-ins, because the etcd images here
/// have no shell: the `check-dns` init container runs the operator image's `wait-dns` instead
/// of busybox's `nslookup` loop, and the readiness probe is `GET /health` instead of
/// `sh -c "etcdctl endpoint status"` (CoreOS' exec liveness probe is left out for the same reason).
#[allow(clippy::too_many_arguments)]
fn coreos_pod(
    ns: &str,
    uid: &str,
    member: &str,
    initial: &[String],
    state: &str,
    token: &str,
    init_image: &str,
    claim: bool,
) -> Value {
    let host = |m: &str| format!("{m}.{NAME}.{ns}.svc");
    let initial: Vec<String> = initial.iter().map(|m| format!("{m}=http://{}:2380", host(m))).collect();
    let mut command = format!(
        "/usr/local/bin/etcd --data-dir=/var/etcd/data --name={member} --initial-advertise-peer-urls=http://{h}:2380 \
         --listen-peer-urls=http://0.0.0.0:2380 --listen-client-urls=http://0.0.0.0:2379 --advertise-client-urls=http://{h}:2379 \
         --initial-cluster={} --initial-cluster-state={state}",
        initial.join(","),
        h = host(member)
    );
    if state == "new" {
        command.push_str(&format!(" --initial-cluster-token={token}"));
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": member,
            "labels": {"app": "etcd", "etcd_node": member, "etcd_cluster": NAME},
            "annotations": {"etcd.version": VERSION},
            "ownerReferences": owner(uid),
        },
        "spec": {
            "initContainers": [{"name": "check-dns", "image": init_image, "imagePullPolicy": "IfNotPresent",
                "command": ["etcd-operator", "wait-dns", format!("--host={}", host(member))]}],
            "containers": [{
                "name": "etcd", "image": ETCD_IMAGE_3_5_1, "imagePullPolicy": "IfNotPresent",
                "command": command.split(' ').collect::<Vec<_>>(),
                "ports": [{"name": "server", "containerPort": 2380, "protocol": "TCP"},
                          {"name": "client", "containerPort": 2379, "protocol": "TCP"}],
                "volumeMounts": [{"name": "etcd-data", "mountPath": "/var/etcd"}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "initialDelaySeconds": 1,
                    "timeoutSeconds": 5, "periodSeconds": 5, "failureThreshold": 3},
            }],
            "volumes": [if claim {
                json!({"name": "etcd-data", "persistentVolumeClaim": {"claimName": member}})
            } else {
                json!({"name": "etcd-data", "emptyDir": {}})
            }],
            "restartPolicy": "Never",
            "hostname": member,
            "subdomain": NAME,
            "automountServiceAccountToken": false,
        }
    })
}

/// `http://<pod IP>:2379` once the member answers a health check there.
fn wait_member(ns: &TestNamespace, member: &str) -> Result<String> {
    wait_until(Duration::from_secs(120), &format!("CoreOS-style member {member} to be healthy"), || {
        let pod = ns.pod(member)?;
        // Failed (restart policy Never): no use waiting on.
        if pod["status"]["phase"] == "Failed" {
            return Ok(Some(Err(anyhow::anyhow!("pod {member} failed"))));
        }
        let Some(ip) = pod["status"]["podIP"].as_str().filter(|ip| !ip.is_empty()) else { return Ok(None) };
        let ep = format!("http://{ip}:2379");
        Ok(host_etcdctl(&ep, &["endpoint", "health"]).ok().map(|_| Ok(ep)))
    })
    .and_then(|r| r)
    .map_err(|e| {
        // Seen once in a CI run (in-cluster, right after the in-cluster lifecycle suite): the
        // hand-made seed member never answered. Say what the pod was doing.
        let status = ns.pod(member).map(|p| p["status"].to_string()).unwrap_or_default();
        let logs = ns.run(&["logs", member, "--all-containers", "--tail=20"]).unwrap_or_default();
        e.context(format!("pod {member} status: {status}\nlast log lines:\n{logs}"))
    })
}

/// The cluster CoreOS would have left: a seed member, then each further member added to etcd
/// first and started with `--initial-cluster-state=existing` (each on its own claim with
/// `claims`); the status CoreOS wrote. Returns the member (pod) names.
fn build_coreos_cluster(ns: &TestNamespace, init_image: &str, claims: bool) -> Result<Vec<String>> {
    // Only the spec: CoreOS' status is written below, once there is something to report.
    // The CoreOS operator had installed the CRD; on a fresh cluster no operator of ours has yet.
    e2e::harness::ensure_crds(ns)?;
    let pvc_spec = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
    ns.apply(&common::cluster_manifest(&ns.name, NAME, 3, VERSION, if claims { pvc_spec } else { "" }))?;
    let uid = cluster(ns, NAME)?["metadata"]["uid"].as_str().context("no uid")?.to_string();
    coreos_services(ns, &uid)?;
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64 | 1;
    let members: Vec<String> = (0..3).map(|_| format!("{NAME}-{}", coreos_suffix(&mut seed))).collect();
    let token = format!("{:016x}-coreos", seed);
    if claims {
        for m in &members {
            coreos_claim(ns, &uid, m)?;
        }
    }
    create(ns, &coreos_pod(&ns.name, &uid, &members[0], &members[..1], "new", &token, init_image, claims))?;
    let seed_ep = wait_member(ns, &members[0])?;
    for i in 1..members.len() {
        let peer = format!("--peer-urls=http://{}.{NAME}.{}.svc:2380", members[i], ns.name);
        // etcd refuses a new voter ("unhealthy cluster") until every member has been connected
        // for a few seconds, as CoreOS' retrying reconcile loop found too.
        wait_until(Duration::from_secs(60), "etcd to accept a new member", || {
            Ok(host_etcdctl(&seed_ep, &["member", "add", &members[i], &peer]).map_err(|e| eprintln!("{e:#}")).ok())
        })?;
        let pod = coreos_pod(&ns.name, &uid, &members[i], &members[..=i], "existing", &token, init_image, claims);
        // A joining etcd gives up after 2 s without an answer from a peer; its pod (restart
        // policy Never, as CoreOS made them) then fails. Seen on a loaded machine (five e2e
        // tests at a time). CoreOS' loop made such a member again: so does this one, twice.
        for attempt in 1..=3 {
            create(ns, &pod)?;
            match wait_member(ns, &members[i]) {
                Ok(_) => break,
                Err(e) if attempt < 3 && ns.pod(&members[i]).is_ok_and(|p| p["status"]["phase"] == "Failed") => {
                    eprintln!("member {} failed to join (attempt {attempt}), made again: {e:#}", members[i]);
                    ns.run(&["delete", "pod", &members[i], "--wait=true"])?;
                }
                Err(e) => return Err(e),
            }
        }
    }
    for m in &members {
        ns.wait_pod_ready(m, Duration::from_secs(60))?;
    }
    write_coreos_status(ns, &members)?;
    Ok(members)
}

/// The status CoreOS wrote for a running cluster (no cluster ID: CoreOS recorded none).
fn write_coreos_status(ns: &TestNamespace, members: &[String]) -> Result<()> {
    let now = "2020-03-01T10:00:00Z";
    let status = json!({"status": {
        "phase": "Running", "size": members.len(), "serviceName": format!("{NAME}-client"), "clientPort": 2379,
        "members": {"ready": members}, "currentVersion": VERSION, "targetVersion": "",
        "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": now, "lastTransitionTime": now,
                        "reason": "Cluster available"}],
    }});
    ns.run(&["patch", "etcdcluster", NAME, "--subresource=status", "--type=merge", "-p", &status.to_string()]).map(drop)
}

/// `(id, name)` of every etcd member, sorted.
fn etcd_members(ep: &str) -> Result<Vec<(String, String)>> {
    let mut v: Vec<(String, String)> = member_list(ep)?.into_iter().map(|m| (m[0].clone(), m[2].clone())).collect();
    v.sort();
    Ok(v)
}

#[test]
fn a_coreos_cluster_is_adopted_in_place_then_resized_and_upgraded() -> Result<()> {
    let ns = TestNamespace::create("e2e-coreos")?;
    let init_image = common::operator_image()?;
    let members = build_coreos_cluster(&ns, &init_image, false)?;
    let ep = client_endpoint(&ns, NAME)?;
    common::write_keys(&ep, "before-adoption", 20)?;
    let before = pod_versions(&ns, NAME)?;
    let ids_before = etcd_members(&ep)?;
    ensure!(before.len() == 3 && ids_before.len() == 3, "{before:?} {ids_before:?}");

    let mut op = Operator::start(&ns)?;
    let r = adopted(&ns, &members, &before, &ids_before);
    if r.is_err() {
        let log = op.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let events = ns.run(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
        return r.context(format!("operator log (newest first):\n{}\n--- events:\n{events}", tail.join("\n")));
    }
    op.stop();
    Ok(())
}

fn adopted(
    ns: &TestNamespace,
    members: &[String],
    before: &[common::PodVersion],
    ids_before: &[(String, String)],
) -> Result<()> {
    // Adopted: this operator's status (cluster ID, its conditions), the same three pods.
    let c = wait_until(Duration::from_secs(120), "the cluster to be adopted", || {
        let c = wait_healthy(ns, NAME, 3, Duration::from_secs(5)).ok();
        Ok(c.filter(|c| c["status"]["clusterId"].as_str().is_some_and(|id| !id.is_empty())))
    })?;
    ensure!(cond_str(&c, "Available", "reason") == "QuorumHealthy", "{}", c["status"]);
    ensure!(c["metadata"]["annotations"]["etcd.database.coreos.com/cluster-id"].is_string(), "{}", c["metadata"]);
    let mut ready: Vec<String> = c["status"]["members"]["ready"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str().map(String::from))
        .collect();
    ready.sort();
    let mut expected = members.to_vec();
    expected.sort();
    ensure!(ready == expected, "status lists {ready:?}, the CoreOS members are {expected:?}");
    // Nothing restarted or replaced: same pods (UIDs), same containers, same etcd members.
    let after = pod_versions(ns, NAME)?;
    ensure!(after == before, "pods changed on adoption:\nbefore {before:?}\nafter  {after:?}");
    let ep = client_endpoint(ns, NAME)?;
    ensure!(etcd_members(&ep)? == ids_before, "etcd membership changed on adoption");
    for e in events_v1(ns, NAME)? {
        ensure!(
            !["BootstrapStarted", "MemberRemoved", "PodDeleted", "MemberPodCreated"].contains(&e.reason.as_str()),
            "adoption acted on the cluster: {e:?}"
        );
    }
    // The pods carry the labels this operator's Services select on, and the Services select on them.
    let uid = c["metadata"]["uid"].as_str().unwrap_or_default();
    for m in members {
        let labels = &ns.pod(m)?["metadata"]["labels"];
        ensure!(labels["etcd.database.coreos.com/cluster-uid"] == uid, "{m}: {labels}");
        ensure!(labels["etcd.database.coreos.com/serving"] == "true", "{m}: {labels}");
    }
    let client = ns.json(&["get", "service", &format!("{NAME}-client")])?;
    ensure!(client["spec"]["selector"]["etcd.database.coreos.com/serving"] == "true", "{}", client["spec"]);
    common::check_keys(&ep, "before-adoption", 20)?;
    // Its clients keep reaching it: the NetworkPolicy made on adoption leaves the client port
    // open to every source (rule without `from`), as it was before, and says so in a mark.
    ensure!(
        c["metadata"]["annotations"]["etcd.database.coreos.com/network-policy-default"] == "any",
        "{}",
        c["metadata"]
    );
    let np = wait_until(Duration::from_secs(30), "the NetworkPolicy", || {
        Ok(ns.json(&["get", "networkpolicy", NAME, "--ignore-not-found"]).ok().filter(|v| v.get("spec").is_some()))
    })?;
    let rules = np["spec"]["ingress"].as_array().cloned().unwrap_or_default();
    let client = rules.iter().find(|r| r["ports"][0]["port"] == 2379).cloned().unwrap_or_default();
    ensure!(client.get("from").is_none_or(Value::is_null), "client port narrowed on adoption: {client}");

    // A resize works, one learner at a time, beside the CoreOS members.
    patch_spec(ns, NAME, r#"{"size": 5}"#)?;
    wait_healthy(ns, NAME, 5, Duration::from_secs(300))?;
    let now = pod_versions(ns, NAME)?;
    for p in before {
        ensure!(
            now.iter().any(|n| n.uid == p.uid && n.restarts == 0),
            "CoreOS member {} was replaced or restarted",
            p.pod
        );
    }
    let ids_now = etcd_members(&ep)?;
    ensure!(ids_now.len() == 5 && ids_before.iter().all(|m| ids_now.contains(m)), "{ids_now:?}");
    common::check_keys(&ep, "before-adoption", 20)?;
    common::write_keys(&ep, "after-resize", 5)?;

    // An upgrade reaches the CoreOS members too: their image is changed in place, as CoreOS
    // did (the kubelet restarts a container whose image changed whatever the restart policy).
    patch_spec(ns, NAME, &format!(r#"{{"version": "{UPGRADE_TO}"}}"#))?;
    wait_until(Duration::from_secs(400), &format!("every member to run {UPGRADE_TO}"), || {
        let c = cluster(ns, NAME)?;
        Ok((c["status"]["currentVersion"] == UPGRADE_TO && c["status"]["readyMembers"] == 5).then_some(()))
    })?;
    let upgraded = pod_versions(ns, NAME)?;
    for p in before {
        let n = upgraded
            .iter()
            .find(|n| n.uid == p.uid)
            .with_context(|| format!("CoreOS member {} was replaced", p.pod))?;
        ensure!(n.annotation == UPGRADE_TO && n.image.ends_with(UPGRADE_TO), "{n:?}");
    }
    common::check_keys(&ep, "before-adoption", 20)?;
    common::check_keys(&ep, "after-resize", 5)?;
    Ok(())
}

/// A CoreOS cluster whose (emptyDir) pods are all gone by the time this operator starts: its
/// data is lost, and an empty cluster in its place would hide that. Its status shows it ran, so
/// it is reported (`Degraded=DataLost`, phase `Failed`) and nothing is created.
#[test]
fn a_coreos_cluster_without_pods_is_reported_lost_not_bootstrapped_again() -> Result<()> {
    let ns = TestNamespace::create("e2e-coreos-lost")?;
    e2e::harness::ensure_crds(&ns)?;
    ns.apply(&common::cluster_manifest(&ns.name, NAME, 3, VERSION, ""))?;
    write_coreos_status(&ns, &[format!("{NAME}-4kd9qnfq2b"), format!("{NAME}-l7mbzxk5w2")])?;
    let mut op = Operator::start(&ns)?;
    let c = wait_until(Duration::from_secs(60), "Degraded=DataLost", || {
        let c = cluster(&ns, NAME)?;
        Ok((cond_str(&c, "Degraded", "reason") == "DataLost").then_some(c))
    });
    let c = c.with_context(|| format!("operator log:\n{}", op.log_text()))?;
    ensure!(c["status"]["phase"] == "Failed", "{}", c["status"]);
    std::thread::sleep(Duration::from_secs(5));
    let pods = common::member_pods(&ns, NAME)?;
    ensure!(pods.is_empty(), "a new cluster was bootstrapped: {:?}", common::pod_names(&pods));
    ensure!(!events_v1(&ns, NAME)?.iter().any(|e| e.reason == "BootstrapStarted"));
    op.stop();
    Ok(())
}

/// A CoreOS cluster on PVCs: adopted, then two of its three pods deleted, a quorum lost. Each
/// member comes back on the claim CoreOS made for it (named after the member), with its data:
/// every key, the same etcd member IDs, no claim made or deleted, no recovery (although
/// `FromSurvivor` with `afterSeconds: 0` would start one at once for members it counted lost).
#[test]
fn a_coreos_pvc_cluster_that_loses_two_pods_comes_back_on_its_claims() -> Result<()> {
    let ns = TestNamespace::create("e2e-coreos-pvc")?;
    let init_image = common::operator_image()?;
    let members = build_coreos_cluster(&ns, &init_image, true)?;
    let ep = client_endpoint(&ns, NAME)?;
    common::write_keys(&ep, "before-loss", 50)?;
    let ids_before = etcd_members(&ep)?;
    let mut op = Operator::start(&ns)?;
    let r = back_on_its_claims(&ns, &members, &ids_before);
    if r.is_err() {
        let log = op.log_text();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let events = ns.run(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
        return r.context(format!("operator log (newest first):\n{}\n--- events:\n{events}", tail.join("\n")));
    }
    op.stop();
    Ok(())
}

fn claims_of(ns: &TestNamespace) -> Result<Vec<String>> {
    let list = ns.json(&["get", "pvc", "-l", &format!("etcd_cluster={NAME}")])?;
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    Ok(names)
}

fn back_on_its_claims(ns: &TestNamespace, members: &[String], ids_before: &[(String, String)]) -> Result<()> {
    wait_until(Duration::from_secs(120), "the cluster to be adopted", || {
        let c = cluster(ns, NAME)?;
        Ok(c["metadata"]["annotations"]["etcd.database.coreos.com/cluster-id"].is_string().then_some(()))
    })?;
    wait_healthy(ns, NAME, 3, Duration::from_secs(60))?;
    let mut claims_before = members.to_vec();
    claims_before.sort();
    ensure!(claims_of(ns)? == claims_before, "claims before: {:?}", claims_of(ns)?);
    patch_spec(ns, NAME, r#"{"recovery": {"quorumLoss": "FromSurvivor", "afterSeconds": 0}}"#)?;
    let mark = common::event_marks(ns, NAME)?;
    ns.run(&["delete", "pod", &members[1], &members[2], "--wait=false"])?;
    // Nothing replaced or recovered, ever (checked as it goes: a wrong answer fails at once).
    let answered_wrong = || -> Result<()> {
        for e in common::events_since(ns, NAME, &mark)? {
            let wrong = ["QuorumLossRecoveryStarted", "MemberRemoved", "MemberAdded", "BootstrapStarted"];
            ensure!(!wrong.contains(&e.reason.as_str()), "the loss was answered by {e:?}");
        }
        Ok(())
    };
    // Back: three healthy voters, the same three members (names and etcd IDs).
    let back = wait_until(Duration::from_secs(300), "the two members to be back", || {
        if let Err(e) = answered_wrong() {
            return Ok(Some(Err(e)));
        }
        let c = wait_healthy(ns, NAME, 3, Duration::from_secs(5)).ok();
        let ready: Vec<String> = c
            .map(|c| c["status"]["members"]["ready"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.as_str().map(String::from))
            .collect();
        Ok((ready.len() == 3 && members.iter().all(|m| ready.contains(m))).then_some(Ok(())))
    })?;
    back?;
    let ep = client_endpoint(ns, NAME)?;
    ensure!(etcd_members(&ep)? == ids_before, "etcd membership changed: {:?}", etcd_members(&ep)?);
    common::check_keys(&ep, "before-loss", 50)?;
    // On the claims CoreOS made: mounted as the data volume, none made, none deleted.
    for m in &members[1..] {
        let pod = ns.pod(m)?;
        let data =
            pod["spec"]["volumes"].as_array().and_then(|vs| vs.iter().find(|v| v["name"] == "etcd-data")).cloned();
        let claim = data.as_ref().and_then(|v| v["persistentVolumeClaim"]["claimName"].as_str());
        ensure!(claim == Some(m.as_str()), "{m} restarted on {data:?}");
    }
    ensure!(claims_of(ns)? == claims_before, "claims after: {:?}", claims_of(ns)?);
    // What happened, from the Events: each member restarted, nothing replaced or recovered.
    let events = common::events_since(ns, NAME, &mark)?;
    let created: Vec<&str> =
        events.iter().filter(|e| e.reason == "MemberPodCreated").map(|e| e.related.as_str()).collect();
    for m in &members[1..] {
        ensure!(created.contains(&m.as_str()), "no MemberPodCreated for {m}: {events:?}");
    }
    answered_wrong()
}
