//! Pod Security: member pods pass the `restricted` Pod Security Standard by default, and members
//! made as root before that default keep their data.
//!
//! - Under Pod Security Admission (Kubernetes 1.25+; the modern leg enforces it) a namespace
//!   enforcing `restricted`, the level a platform team sets for production namespaces, runs the
//!   operator (installed from `etcd-operator manifests`) and clusters without any
//!   `spec.pod.securityContext`: PVC members restart on data uid 65532 wrote, every supported
//!   etcd minor runs with a read-only root filesystem; a backup to a PVC runs as uid 65532 too.
//!   On 1.20 (no admission) the same clusters run and the pod fields admission would check are
//!   asserted instead.
//! - A cluster whose members ran as root (a securityContext with `runAsUser: 0` stands in for
//!   the pods of earlier operator versions: same data, written as root) rolls to the default
//!   when the securityContext goes, one member at a time, every key kept. On the local
//!   cluster's hostPath volumes the kubelet applies no `fsGroup`: each member's data check finds
//!   root's data it cannot use, its volume is marked `data-owner: "0"` and it runs as root
//!   again; a member added afterwards runs as non-root. On `local` volumes (which the kubelet
//!   does apply `fsGroup` to) the same members move to non-root on the same data.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::*;
use e2e::{TestNamespace, wait_until};
use serde_json::Value;

const CREATE: Duration = Duration::from_secs(180);
const ROLL: Duration = Duration::from_secs(600);
const DATA_OWNER: &str = "etcd.database.coreos.com/data-owner";
const NONROOT: i64 = 65532;

/// Labels `ns` to enforce (and warn at) the `restricted` level; false before 1.25, where Pod
/// Security Admission is absent or not on by default (the label would be inert).
fn enforce_restricted(ns: &TestNamespace) -> Result<bool> {
    if ns.kubectl.server_minor()? < 25 {
        eprintln!(
            "Kubernetes 1.{} has no Pod Security Admission (1.25+): asserting pod fields only",
            ns.kubectl.server_minor()?
        );
        return Ok(false);
    }
    ns.kubectl.run(&[
        "label",
        "namespace",
        &ns.name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
        "pod-security.kubernetes.io/warn=restricted",
    ])?;
    Ok(true)
}

const PVC: &str = "    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";

/// What `restricted` checks, on a member pod as the API returns it (admission has let it in on
/// 1.25+; on 1.20 this is the check): non-root, uid 65532, fsGroup, RuntimeDefault seccomp, and
/// for every container no privilege escalation, no capability, a read-only root filesystem.
fn assert_restricted(pod: &Value) -> Result<()> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let sc = &pod["spec"]["securityContext"];
    ensure!(sc["runAsNonRoot"] == true && sc["runAsUser"] == NONROOT && sc["fsGroup"] == NONROOT, "{name}: {sc}");
    ensure!(sc["seccompProfile"]["type"] == "RuntimeDefault", "{name}: {sc}");
    let inits = pod["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
    let mains = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    for c in inits.iter().chain(mains.iter()) {
        let csc = &c["securityContext"];
        let what = format!("{name}/{}: {csc}", c["name"]);
        ensure!(csc["allowPrivilegeEscalation"] == false, "{what}");
        ensure!(csc["capabilities"]["drop"] == serde_json::json!(["ALL"]), "{what}");
        ensure!(csc["readOnlyRootFilesystem"] == true, "{what}");
        ensure!(csc["runAsUser"].as_i64().is_none_or(|u| u != 0), "{what}");
    }
    Ok(())
}

/// The host directory of a bound claim's hostPath or local volume (the tests run on the node).
fn volume_dir(ns: &TestNamespace, claim: &str) -> Result<std::path::PathBuf> {
    let pvc = ns.json(&["get", "pvc", claim])?;
    let pv = pvc["spec"]["volumeName"].as_str().context("claim not bound")?;
    let v = ns.kubectl.json(&["get", "pv", pv])?;
    let path = v["spec"]["hostPath"]["path"].as_str().or(v["spec"]["local"]["path"].as_str()).context("path")?;
    Ok(path.into())
}

fn owner_of(path: &std::path::Path) -> Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).with_context(|| path.display().to_string())?;
    Ok((m.uid(), m.gid()))
}

#[test]
fn the_operator_and_clusters_without_a_security_context_run_under_enforced_restricted() -> Result<()> {
    let ns = TestNamespace::create("e2e-psa")?;
    let enforced = enforce_restricted(&ns)?;
    // The operator's Deployment must be admitted: install() waits for a Ready leader.
    let op = InClusterOperator::install(&ns, &Install::default())?;
    let logs = |e: anyhow::Error| anyhow::anyhow!("{e:#}\noperator log:\n{}", op.logs());

    // PVC members: the data check, etcd and the restart on the volume all as uid 65532.
    ns.apply(&cluster_manifest(&ns.name, "locked", 3, "3.5.1", &format!("  pod:\n{PVC}")))?;
    // One member of every supported minor, read-only root filesystems included.
    let minors = [("v34", "3.4.23"), ("v36", "3.6.15"), ("v37", "3.7.2")];
    for (name, version) in minors {
        ns.apply(&cluster_manifest(&ns.name, name, 1, version, ""))?;
    }
    wait_healthy(&ns, "locked", 3, CREATE).map_err(logs)?;
    let ep = client_endpoint(&ns, "locked")?;
    write_keys(&ep, "psa", 20)?;
    for p in member_pods(&ns, "locked")? {
        assert_restricted(&p)?;
    }
    // etcd wrote its data as the non-root user (the claim's directory is on this host).
    let first = pod_names(&member_pods(&ns, "locked")?)[0].clone();
    let dir = volume_dir(&ns, &format!("{first}-data"))?;
    ensure!(owner_of(&dir.join("data/member"))?.0 == NONROOT as u32, "{}: {:?}", dir.display(), owner_of(&dir)?);
    // A restart on the volume: the data check demands the member's data, as uid 65532.
    ns.run(&["delete", "pod", &first, "--wait=false"])?;
    wait_until(CREATE, "the member to restart on its volume", || {
        let pods = member_pods(&ns, "locked")?;
        let back = pods.iter().find(|p| p["metadata"]["name"] == first.as_str());
        Ok(back.filter(|p| condition_true(p, "Ready")).map(|_| ()))
    })
    .map_err(logs)?;
    wait_healthy(&ns, "locked", 3, CREATE).map_err(logs)?;
    check_keys(&ep, "psa", 20)?;

    for (name, version) in minors {
        wait_healthy(&ns, name, 1, CREATE).map_err(|e| logs(e.context(format!("etcd {version}"))))?;
        let ep = client_endpoint(&ns, name)?;
        write_keys(&ep, name, 5)?;
        check_keys(&ep, name, 5)?;
        for p in member_pods(&ns, name)? {
            assert_restricted(&p).with_context(|| format!("etcd {version}"))?;
        }
    }
    // A backup to a PVC (a hostPath claim here: no fsGroup applied, a 0777 directory) runs as
    // uid 65532 and is admitted like the members.
    ns.apply(&backups::claim_manifest(&ns.name, "backups"))?;
    let to_pvc = "pvc: {claimName: backups, path: locked/etcd.backup}";
    ns.apply(&backups::backup_manifest(&ns.name, "to-pvc", "locked", "PVC", to_pvc, ""))?;
    backups::wait_backup_succeeded(&ns, "to-pvc").map_err(logs)?;
    let evs = backups::e2e_events(&ns, "EtcdBackup", "to-pvc")?;
    ensure!(evs.iter().any(|(r, n)| r == "BackupSucceeded" && n.contains("as uid 65532")), "{evs:?}");
    ensure!(!evs.iter().any(|(r, _)| r == "BackupFailed" || r == "BackupRunsAsRoot"), "{evs:?}");
    if enforced {
        // Nothing was refused on the way.
        for name in ["locked", "v34", "v36", "v37", "to-pvc"] {
            let refused: Vec<_> =
                events_for(&ns, name)?.into_iter().filter(|(_, note)| note.contains("violates PodSecurity")).collect();
            ensure!(refused.is_empty(), "{name}: {refused:?}");
        }
    }
    Ok(())
}

/// A securityContext of the user's is used as given: one that follows `restricted` passes it.
#[test]
fn members_with_a_users_restricted_security_context_run_under_enforced_restricted() -> Result<()> {
    let ns = TestNamespace::create("e2e-psa-user")?;
    if !enforce_restricted(&ns)? {
        return Ok(());
    }
    let op = InClusterOperator::install(&ns, &Install::default())?;
    let given = "  pod:\n    securityContext:\n      runAsNonRoot: true\n      runAsUser: 1000\n      runAsGroup: 1000\n      fsGroup: 1000\n      seccompProfile:\n        type: RuntimeDefault\n";
    ns.apply(&cluster_manifest(&ns.name, "given", 1, "3.5.1", given))?;
    wait_healthy(&ns, "given", 1, CREATE).map_err(|e| anyhow::anyhow!("{e}\noperator log:\n{}", op.logs()))?;
    for p in member_pods(&ns, "given")? {
        ensure!(p["spec"]["securityContext"]["runAsUser"] == 1000, "{}", p["spec"]["securityContext"]);
    }
    Ok(())
}

// ---- members made as root ------------------------------------------------------------------

/// Watches a rolling change of `name`'s members (pods replaced in place on their volumes) and
/// fails if ever more than one member is down because of it: a member is down from the moment
/// its first pod goes until a pod of its name is back, Ready for the kubelet or healthy for the
/// operator (`status.members.ready`, from etcd's answers: what the operator moves on by, while
/// the kubelet's Ready may lag a probe period behind). A reconcile writes its status after its
/// step: the members found down together count only once a newer status still shows them so.
struct RollWatch {
    first_uid: BTreeMap<String, String>,
    back: BTreeMap<String, bool>,
    worst: Vec<String>,
    /// Members found down together, and the status they were found with.
    suspect: Option<(Vec<String>, Value)>,
}

impl RollWatch {
    fn new(ns: &TestNamespace, name: &str) -> Result<Self> {
        let first_uid: BTreeMap<String, String> = member_pods(ns, name)?
            .iter()
            .map(|p| {
                let field = |f: &str| p["metadata"][f].as_str().unwrap_or_default().to_string();
                (field("name"), field("uid"))
            })
            .collect();
        let back = first_uid.keys().map(|k| (k.clone(), false)).collect();
        Ok(RollWatch { back, first_uid, worst: vec![], suspect: None })
    }

    /// One sample; the members replaced and back so far.
    fn sample(&mut self, ns: &TestNamespace, name: &str) -> Result<usize> {
        let c = cluster(ns, name)?;
        let healthy: Vec<&str> =
            c["status"]["members"]["ready"].as_array().into_iter().flatten().filter_map(|m| m.as_str()).collect();
        let pods: BTreeMap<String, Value> = member_pods(ns, name)?
            .into_iter()
            .filter_map(|p| Some((p["metadata"]["name"].as_str()?.to_string(), p)))
            .collect();
        let mut down = vec![];
        for (member, uid) in &self.first_uid {
            match pods.get(member) {
                Some(p) if p["metadata"]["uid"] == uid.as_str() => {}
                Some(p) if condition_true(p, "Ready") || healthy.contains(&member.as_str()) => {
                    self.back.insert(member.clone(), true);
                }
                _ => {
                    self.back.insert(member.clone(), false);
                    down.push(member.clone());
                }
            }
        }
        if down.len() < 2 {
            self.suspect = None;
        } else if let Some((before, status)) = &self.suspect
            && *before == down
        {
            ensure!(*status == c["status"], "more than one member down at once during the roll: {down:?}");
        } else {
            self.suspect = Some((down.clone(), c["status"].clone()));
        }
        if down.len() > self.worst.len() {
            self.worst = down;
        }
        Ok(self.back.values().filter(|b| **b).count())
    }
}

/// A cluster of `size` PVC members running as root (a user's `runAsUser: 0`: the pods of
/// earlier operator versions, data written as root), with 100 keys; the securityContext then
/// goes. Returns once every member was replaced, each back before the next went, and the
/// cluster is healthy with every key.
fn roll_members_made_as_root(ns: &TestNamespace, op: &Operator, pvc: &str, size: usize) -> Result<String> {
    let root = format!("  pod:\n    securityContext: {{runAsUser: 0}}\n{pvc}");
    ns.apply(&cluster_manifest(&ns.name, "old", size, "3.5.1", &root))?;
    wait_healthy(ns, "old", size, CREATE)?;
    for p in member_pods(ns, "old")? {
        ensure!(p["spec"]["securityContext"]["runAsUser"] == 0, "{}", p["spec"]["securityContext"]);
    }
    let ep = client_endpoint(ns, "old")?;
    write_keys(&ep, "before", 100)?;
    let first = pod_names(&member_pods(ns, "old")?)[0].clone();
    let dir = volume_dir(ns, &format!("{first}-data"))?;
    ensure!(owner_of(&dir.join("data/member"))? == (0, 0), "etcd wrote as root: {:?}", owner_of(&dir)?);

    let mut watch = RollWatch::new(ns, "old")?;
    ns.run(&[
        "patch",
        "etcdcluster",
        "old",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/pod/securityContext"}]"#,
    ])?;
    wait_until(ROLL, "every member replaced, one at a time, and back", || {
        let back = watch.sample(ns, "old")?;
        Ok((back == size).then_some(()))
    })
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", diagnostics(ns, Some(op))))?;
    wait_healthy(ns, "old", size, CREATE)?;
    check_keys(&ep, "before", 100)?;
    Ok(ep)
}

/// hostPath volumes (the local cluster's `standard` class): no fsGroup, so root's data stays
/// root's: each member is marked and runs as root, with every key; a new member runs non-root.
#[test]
fn members_made_as_root_on_hostpath_volumes_roll_one_at_a_time_and_keep_running_as_root() -> Result<()> {
    with_operator("e2e-psa-root", |ns, op| {
        let ep = roll_members_made_as_root(ns, op, PVC, 3)?;
        for p in member_pods(ns, "old")? {
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let pvc = ns.json(&["get", "pvc", &format!("{name}-data")])?;
            ensure!(pvc["metadata"]["annotations"][DATA_OWNER] == "0", "{name}'s claim is not marked: {pvc}");
            // As before: no pod securityContext (the API shows `{}`), etcd as its image's root.
            let sc = &p["spec"]["securityContext"];
            ensure!(sc.as_object().is_none_or(|o| o.is_empty()), "{name} runs as before: {sc}");
        }
        let warned: Vec<_> = events_v1(ns, "old")?.into_iter().filter(|e| e.reason == "MemberRunsAsRoot").collect();
        ensure!(warned.len() == 3 && warned.iter().all(|e| e.type_ == "Warning"), "{warned:?}");
        // A member added now gets a fresh volume, which uid 65532 writes: it runs restricted.
        let before: Vec<String> = pod_names(&member_pods(ns, "old")?);
        patch_spec(ns, "old", r#"{"size":4}"#)?;
        wait_healthy(ns, "old", 4, CREATE)?;
        let new = member_pods(ns, "old")?
            .into_iter()
            .find(|p| !before.contains(&p["metadata"]["name"].as_str().unwrap().to_string()))
            .context("no new member")?;
        assert_restricted(&new)?;
        let name = new["metadata"]["name"].as_str().unwrap();
        let pvc = ns.json(&["get", "pvc", &format!("{name}-data")])?;
        ensure!(pvc["metadata"]["annotations"][DATA_OWNER].is_null(), "{pvc}");
        check_keys(&ep, "before", 100)?;
        write_keys(&ep, "after", 10)?;
        check_keys(&ep, "after", 10)
    })
}

/// `local` PersistentVolumes of a StorageClass of this test, in host directories; removed on drop
/// (volumes, class, directories).
struct LocalVolumes {
    kubectl: e2e::Kubectl,
    class: String,
    names: Vec<String>,
    root: std::path::PathBuf,
}

impl LocalVolumes {
    fn create(ns: &TestNamespace, count: usize) -> Result<LocalVolumes> {
        let node = ns.kubectl.node_ready_statuses()?.first().context("no node")?.0.clone();
        let class = format!("local-{}", ns.name);
        let root = std::env::temp_dir().join(format!("e2e-local-pv-{}", ns.name));
        let mut lv = LocalVolumes { kubectl: ns.kubectl.clone(), class: class.clone(), names: vec![], root };
        ns.kubectl.apply(&format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {class}}}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer\nreclaimPolicy: Retain\n"
        ))?;
        for i in 0..count {
            let name = format!("{class}-{i}");
            let dir = lv.root.join(&name);
            std::fs::create_dir_all(&dir)?;
            lv.names.push(name.clone());
            ns.kubectl.apply(&format!(
                r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 64Mi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  local: {{path: {path}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]
"#,
                path = dir.display()
            ))?;
        }
        Ok(lv)
    }
}

impl Drop for LocalVolumes {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self.kubectl.run(&["delete", "pv", n, "--wait=false"]);
        }
        let _ = self.kubectl.run(&["delete", "storageclass", &self.class, "--wait=false"]);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `local` volumes: the kubelet applies the pod's fsGroup (group 65532, group read and write),
/// so the same root-written data serves etcd as uid 65532: the members move to the default.
#[test]
fn members_made_as_root_on_volumes_that_apply_fs_group_move_to_non_root_on_their_data() -> Result<()> {
    with_operator("e2e-psa-local", |ns, op| {
        let volumes = LocalVolumes::create(ns, 3)?;
        let pvc = format!(
            "    persistentVolumeClaimSpec:\n      storageClassName: {}\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: 64Mi}}}}\n",
            volumes.class
        );
        let ep = roll_members_made_as_root(ns, op, &pvc, 3)?;
        for p in member_pods(ns, "old")? {
            assert_restricted(&p)?;
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let claim = format!("{name}-data");
            let pvc = ns.json(&["get", "pvc", &claim])?;
            ensure!(pvc["metadata"]["annotations"][DATA_OWNER].is_null(), "{name}: {pvc}");
            // Root's files, now in group 65532 (the kubelet's fsGroup), served by uid 65532.
            let dir = volume_dir(ns, &claim)?;
            let wal = std::fs::read_dir(dir.join("data/member/wal"))?
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "wal"))
                .context("no WAL file")?;
            let (uid, gid) = owner_of(&wal)?;
            if gid != NONROOT as u32 {
                bail!("{}: owner {uid}:{gid}, the kubelet did not apply fsGroup", wal.display());
            }
        }
        let roots: Vec<_> = events_v1(ns, "old")?.into_iter().filter(|e| e.reason == "MemberRunsAsRoot").collect();
        ensure!(roots.is_empty(), "{roots:?}");
        write_keys(&ep, "after", 10)?;
        check_keys(&ep, "after", 10)?;
        // The members go before their volumes are released.
        ns.run(&["delete", "etcdcluster", "old", "--wait=true", "--timeout=120s"])?;
        drop(volumes);
        Ok(())
    })
}
