//! The decisions of `devkit provision` (pure; the watch loop is in `provisioner.rs`): which claims
//! get a volume, the PersistentVolume built for a claim and its StorageClass, and which volumes
//! are reclaimed.
//!
//! Volumes are directories `<root>/<claim uid>` with mode 0777. kubelet applies a pod's `fsGroup`
//! to the volumes that support ownership management (CSI drivers declaring it, emptyDir, ...),
//! never to hostPath volumes; a directory owned by root with 0750 (what the in-tree host-path
//! provisioner makes) is therefore not writable by a pod running as a non-root user, while on a
//! real cluster the same pod writes its volume. A world-writable directory stands in for that
//! ownership change (Rancher's local-path provisioner does the same), so the local cluster
//! accepts what real storage accepts, and no more is claimed: the data is not chowned to the
//! pod's group.
//!
//! On a cluster of several nodes (`Layout::PerNode`) a volume lives on one node, as a local disk
//! does: `<root>/<node>/<claim uid>` on the node the scheduler selected for the claim's first pod
//! (the class binds `WaitForFirstConsumer`), and the volume carries a node affinity for that
//! node's `kubernetes.io/hostname`, so its pods are scheduled there only. Removing
//! `<root>/<node>` is wiping that node's disk.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Names the provisioner of a dynamically provisioned volume; the PV controller leaves the
/// deletion of a Released volume whose provisioner is not an in-tree plugin to that provisioner.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The class of a claim from before `spec.storageClassName` (still honoured by the PV controller).
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Set by the scheduler on a claim of a `WaitForFirstConsumer` class once a pod using it is placed.
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The mode of each volume directory: writable by any pod user (see the module comment).
pub const VOLUME_DIR_MODE: u32 = 0o777;
/// The node label a volume's node affinity names (kubelet sets it to the node's name).
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Where volumes live.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// `<root>/<claim uid>`, usable from every node (the one-node local cluster).
    Flat,
    /// `<root>/<node>/<claim uid>` on the node selected for the claim, with a node affinity.
    PerNode,
}

/// What to do with a claim.
#[derive(Debug, PartialEq)]
pub enum ClaimDecision {
    /// Not a claim of this provisioner, or already bound / being deleted.
    Ignore,
    /// Ours, but its class binds on first use and no pod has been scheduled with it yet.
    WaitForConsumer,
    /// Ours, but it asks for something a host directory cannot give: why (for a Warning Event).
    Refuse(String),
    /// Create the directory, then the volume (pre-bound to the claim; the PV controller binds).
    Provision(Box<Provision>),
}

#[derive(Debug, PartialEq)]
pub struct Provision {
    pub dir: PathBuf,
    pub volume: PersistentVolume,
}

/// The name of the StorageClass a claim asks for, if any.
pub fn claim_class(pvc: &PersistentVolumeClaim) -> Option<&str> {
    let spec_class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref());
    let beta = || pvc.metadata.annotations.as_ref().and_then(|a| a.get(BETA_CLASS)).map(String::as_str);
    spec_class.or_else(beta).filter(|c| !c.is_empty())
}

/// Whether `pvc` (whose class, looked up by `claim_class`, is `class`) gets a volume now.
pub fn decide_claim(
    pvc: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    provisioner: &str,
    root: &Path,
    layout: Layout,
) -> ClaimDecision {
    let Some(class) = class.filter(|c| c.provisioner == provisioner) else {
        return ClaimDecision::Ignore;
    };
    let Some(spec) = pvc.spec.as_ref() else { return ClaimDecision::Ignore };
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let bound = spec.volume_name.as_deref().is_some_and(|v| !v.is_empty());
    if pvc.metadata.deletion_timestamp.is_some() || bound || phase != "Pending" {
        return ClaimDecision::Ignore;
    }
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && !pvc.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(SELECTED_NODE))
    {
        return ClaimDecision::WaitForConsumer;
    }
    match build_volume(pvc, class, provisioner, root, layout) {
        Ok(p) => ClaimDecision::Provision(Box::new(p)),
        Err(why) => ClaimDecision::Refuse(why),
    }
}

/// The directory and the PersistentVolume for a claim of this provisioner: hostPath
/// `<root>/<claim uid>` (`<root>/<node>/<claim uid>` and a node affinity for the selected node
/// with `Layout::PerNode`), the requested capacity, the claim's access modes, pre-bound to the
/// claim (claimRef with its UID), the class's name and reclaim policy, and the provisioned-by
/// annotation.
pub fn build_volume(
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    provisioner: &str,
    root: &Path,
    layout: Layout,
) -> Result<Provision, String> {
    let spec = pvc.spec.as_ref().ok_or("the claim has no spec")?;
    let uid = pvc.metadata.uid.as_deref().ok_or("the claim has no UID yet")?;
    if !is_plain_name(uid) {
        return Err(format!("the claim's UID {uid:?} cannot name a directory"));
    }
    if spec.selector.is_some() {
        return Err("claims with a selector are not supported by dynamic provisioning".into());
    }
    if spec.data_source.is_some() || spec.data_source_ref.is_some() {
        return Err("a data source (clone, snapshot, populator) is not supported by the host-path provisioner".into());
    }
    if spec.volume_mode.as_deref().is_some_and(|m| m != "Filesystem") {
        return Err("only volumeMode Filesystem is supported (a host directory is not a block device)".into());
    }
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .ok_or("the claim requests no storage (spec.resources.requests.storage)")?;
    let access_modes = spec.access_modes.clone().filter(|m| !m.is_empty()).ok_or("the claim has no accessModes")?;
    let class_name = class.metadata.name.clone().ok_or("the StorageClass has no name")?;
    let (dir, node_affinity) = match layout {
        Layout::Flat => (root.join(uid), None),
        Layout::PerNode => {
            // Immediate binding has no node yet: a directory of some node would pin the claim's
            // pods to it whatever else they need (anti-affinity, zones).
            let node = pvc.metadata.annotations.as_ref().and_then(|a| a.get(SELECTED_NODE)).ok_or(
                "volumes live on one node here: the class must bind WaitForFirstConsumer (no node was selected)",
            )?;
            if !is_plain_name(node) {
                return Err(format!("the selected node {node:?} cannot name a directory"));
            }
            (root.join(node).join(uid), Some(node_affinity(node)))
        }
    };
    let volume = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name(uid)),
            annotations: Some(BTreeMap::from([(PROVISIONED_BY.to_string(), provisioner.to_string())])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), storage.clone())])),
            access_modes: Some(access_modes),
            // The directory exists before the volume does: a missing one is an error at mount,
            // never a silently empty volume (DirectoryOrCreate would hide lost data).
            host_path: Some(HostPathVolumeSource {
                path: dir.to_string_lossy().into_owned(),
                type_: Some("Directory".into()),
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: pvc.metadata.namespace.clone(),
                name: pvc.metadata.name.clone(),
                uid: Some(uid.to_string()),
                ..Default::default()
            }),
            storage_class_name: Some(class_name),
            persistent_volume_reclaim_policy: Some(class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into())),
            volume_mode: Some("Filesystem".into()),
            node_affinity,
            ..Default::default()
        }),
        status: None,
    };
    Ok(Provision { dir, volume })
}

/// Required: the node named `node` (its `kubernetes.io/hostname` label).
fn node_affinity(node: &str) -> VolumeNodeAffinity {
    VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: HOSTNAME_LABEL.into(),
                    operator: "In".into(),
                    values: Some(vec![node.into()]),
                }]),
                match_fields: None,
            }],
        }),
    }
}

/// The volume of a claim: `pvc-<uid>`, as the in-tree and the CSI external provisioners name it.
pub fn volume_name(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

/// What to do with a volume.
#[derive(Debug, PartialEq)]
pub enum VolumeDecision {
    Ignore,
    /// Remove the directory, then delete the volume.
    Reclaim {
        dir: PathBuf,
    },
    /// Ours and due for deletion, but its path is not a directory this provisioner made: nothing
    /// is removed (why, for a Warning Event).
    Refuse(String),
}

/// Reclaims a volume of this provisioner once its claim is gone (phase Released) and its policy is
/// Delete; volumes of others, bound ones and those to Retain are left alone.
pub fn decide_volume(pv: &PersistentVolume, provisioner: &str, root: &Path, layout: Layout) -> VolumeDecision {
    let ours = pv.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY)).is_some_and(|p| p == provisioner);
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let spec = pv.spec.as_ref();
    let delete = spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Delete") == "Delete";
    if !(ours && released && delete) {
        return VolumeDecision::Ignore;
    }
    let Some(path) = spec.and_then(|s| s.host_path.as_ref()).map(|h| Path::new(&h.path)) else {
        return VolumeDecision::Refuse("the volume has no hostPath".into());
    };
    // Only `<root>/<one plain name>` (`<root>/<node>/<one plain name>` per node): never remove
    // anything else, whatever the object says.
    let depth = match layout {
        Layout::Flat => 1,
        Layout::PerNode => 2,
    };
    let plain = |rest: &Path| {
        let parts: Vec<_> = rest.components().collect();
        parts.len() == depth && parts.iter().all(|c| c.as_os_str().to_str().is_some_and(is_plain_name))
    };
    match path.strip_prefix(root) {
        Ok(rest) if plain(rest) => VolumeDecision::Reclaim { dir: path.to_path_buf() },
        _ => VolumeDecision::Refuse(format!(
            "its hostPath {} is not a directory {} {}: not removed",
            path.display(),
            if depth == 1 { "directly under" } else { "of a node under" },
            root.display()
        )),
    }
}

/// One path component that is neither `.` nor `..` (a claim UID, a directory under the root).
fn is_plain_name(s: &str) -> bool {
    let mut parts = Path::new(s).components();
    matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None)) && !s.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeStatus, TypedLocalObjectReference,
        VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    const OURS: &str = "dev.etcd-operator/host-path";
    const ROOT: &str = "/var/lib/etcd-operator-dev/pv";
    const UID: &str = "0b6c5f9e-1111-4222-8333-944445555666";

    fn class(name: &str, provisioner: &str) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            provisioner: provisioner.into(),
            reclaim_policy: Some("Delete".into()),
            volume_binding_mode: Some("Immediate".into()),
            ..Default::default()
        }
    }

    fn claim() -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("ns1".into()),
                uid: Some(UID.into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".to_string(), Quantity("64Mi".into()))])),
                    ..Default::default()
                }),
                storage_class_name: Some("standard".into()),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus { phase: Some("Pending".into()), ..Default::default() }),
        }
    }

    fn decide(pvc: &PersistentVolumeClaim, class: &StorageClass) -> ClaimDecision {
        decide_claim(pvc, Some(class), OURS, Path::new(ROOT), Layout::Flat)
    }

    fn kind(d: &ClaimDecision) -> String {
        match d {
            ClaimDecision::Ignore => "ignore".into(),
            ClaimDecision::WaitForConsumer => "wait".into(),
            ClaimDecision::Refuse(why) => format!("refuse: {why}"),
            ClaimDecision::Provision(_) => "provision".into(),
        }
    }

    #[test]
    fn volume_built_from_claim_and_class() {
        let mut sc = class("standard", OURS);
        sc.reclaim_policy = Some("Retain".into());
        let mut pvc = claim();
        pvc.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteOnce".into(), "ReadOnlyMany".into()]);
        let ClaimDecision::Provision(p) = decide(&pvc, &sc) else { panic!("{:?}", decide(&pvc, &sc)) };
        assert_eq!(p.dir, Path::new(ROOT).join(UID));
        let want: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("pvc-{UID}"),
                "annotations": { "pv.kubernetes.io/provisioned-by": OURS },
            },
            "spec": {
                "capacity": { "storage": "64Mi" },
                "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                "hostPath": { "path": format!("{ROOT}/{UID}"), "type": "Directory" },
                "claimRef": { "apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ns1", "name": "data", "uid": UID },
                "storageClassName": "standard",
                "persistentVolumeReclaimPolicy": "Retain",
                "volumeMode": "Filesystem",
            },
        }))
        .unwrap();
        assert_eq!(p.volume, want);
    }

    #[test]
    fn reclaim_policy_defaults_to_delete_and_beta_class_annotation_counts() {
        let mut sc = class("old", OURS);
        sc.reclaim_policy = None;
        sc.volume_binding_mode = None;
        let mut pvc = claim();
        pvc.spec.as_mut().unwrap().storage_class_name = None;
        pvc.metadata.annotations = Some(BTreeMap::from([(BETA_CLASS.to_string(), "old".to_string())]));
        assert_eq!(claim_class(&pvc), Some("old"));
        let ClaimDecision::Provision(p) = decide(&pvc, &sc) else { panic!() };
        let spec = p.volume.spec.unwrap();
        assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("old"));
    }

    #[test]
    fn which_claims_are_provisioned() {
        type Change = fn(&mut PersistentVolumeClaim, &mut StorageClass);
        let cases: Vec<(&str, Change, &str)> = vec![
            ("pending claim of our class", |_, _| {}, "provision"),
            ("no status yet counts as Pending", |c, _| c.status = None, "provision"),
            ("class of another provisioner", |_, s| s.provisioner = "kubernetes.io/host-path".into(), "ignore"),
            ("already has a volume name", |c, _| c.spec.as_mut().unwrap().volume_name = Some("pv-1".into()), "ignore"),
            ("bound", |c, _| c.status.as_mut().unwrap().phase = Some("Bound".into()), "ignore"),
            ("lost", |c, _| c.status.as_mut().unwrap().phase = Some("Lost".into()), "ignore"),
            (
                "being deleted",
                |c, _| c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                "ignore",
            ),
            (
                "WaitForFirstConsumer, no pod yet",
                |_, s| s.volume_binding_mode = Some("WaitForFirstConsumer".into()),
                "wait",
            ),
            (
                "WaitForFirstConsumer, node selected",
                |c, s| {
                    s.volume_binding_mode = Some("WaitForFirstConsumer".into());
                    c.metadata.annotations = Some(BTreeMap::from([(SELECTED_NODE.into(), "node-1".into())]));
                },
                "provision",
            ),
            (
                "selector",
                |c, _| c.spec.as_mut().unwrap().selector = Some(LabelSelector::default()),
                "refuse: claims with a selector are not supported by dynamic provisioning",
            ),
            (
                "block volume",
                |c, _| c.spec.as_mut().unwrap().volume_mode = Some("Block".into()),
                "refuse: only volumeMode Filesystem is supported (a host directory is not a block device)",
            ),
            (
                "clone",
                |c, _| {
                    c.spec.as_mut().unwrap().data_source = Some(TypedLocalObjectReference {
                        kind: "PersistentVolumeClaim".into(),
                        name: "src".into(),
                        api_group: None,
                    })
                },
                "refuse: a data source (clone, snapshot, populator) is not supported by the host-path provisioner",
            ),
            (
                "no storage request",
                |c, _| c.spec.as_mut().unwrap().resources = None,
                "refuse: the claim requests no storage (spec.resources.requests.storage)",
            ),
            (
                "UID that is not a plain name",
                |c, _| c.metadata.uid = Some("../etc".into()),
                "refuse: the claim's UID \"../etc\" cannot name a directory",
            ),
        ];
        for (name, change, want) in cases {
            let (mut pvc, mut sc) = (claim(), class("standard", OURS));
            change(&mut pvc, &mut sc);
            assert_eq!(kind(&decide(&pvc, &sc)), want, "{name}");
        }
        // No class (or one that does not exist): not ours.
        assert_eq!(decide_claim(&claim(), None, OURS, Path::new(ROOT), Layout::Flat), ClaimDecision::Ignore);
        let mut pvc = claim();
        pvc.spec.as_mut().unwrap().storage_class_name = Some(String::new());
        assert_eq!(claim_class(&pvc), None);
    }

    fn volume(provisioner: &str, phase: &str, policy: &str, path: &str) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(format!("pvc-{UID}")),
                annotations: Some(BTreeMap::from([(PROVISIONED_BY.to_string(), provisioner.to_string())])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                persistent_volume_reclaim_policy: Some(policy.into()),
                host_path: Some(HostPathVolumeSource { path: path.into(), type_: None }),
                ..Default::default()
            }),
            status: Some(PersistentVolumeStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    #[test]
    fn which_volumes_are_reclaimed() {
        let ours = format!("{ROOT}/{UID}");
        let reclaim = VolumeDecision::Reclaim { dir: PathBuf::from(&ours) };
        let cases = [
            ("released, Delete", volume(OURS, "Released", "Delete", &ours), reclaim),
            ("bound", volume(OURS, "Bound", "Delete", &ours), VolumeDecision::Ignore),
            ("available", volume(OURS, "Available", "Delete", &ours), VolumeDecision::Ignore),
            ("released, Retain", volume(OURS, "Released", "Retain", &ours), VolumeDecision::Ignore),
            (
                "another provisioner's",
                volume("kubernetes.io/host-path", "Released", "Delete", &ours),
                VolumeDecision::Ignore,
            ),
            (
                "path outside the root",
                volume(OURS, "Released", "Delete", "/var/lib/etcd"),
                VolumeDecision::Refuse(format!(
                    "its hostPath /var/lib/etcd is not a directory directly under {ROOT}: not removed"
                )),
            ),
            (
                "the root itself",
                volume(OURS, "Released", "Delete", ROOT),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT} is not a directory directly under {ROOT}: not removed"
                )),
            ),
            (
                "below the root through ..",
                volume(OURS, "Released", "Delete", &format!("{ROOT}/../pki")),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT}/../pki is not a directory directly under {ROOT}: not removed"
                )),
            ),
            (
                "two levels down",
                volume(OURS, "Released", "Delete", &format!("{ROOT}/a/b")),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT}/a/b is not a directory directly under {ROOT}: not removed"
                )),
            ),
        ];
        for (name, pv, want) in cases {
            assert_eq!(decide_volume(&pv, OURS, Path::new(ROOT), Layout::Flat), want, "{name}");
        }
        let mut unannotated = volume(OURS, "Released", "Delete", &ours);
        unannotated.metadata.annotations = None;
        assert_eq!(decide_volume(&unannotated, OURS, Path::new(ROOT), Layout::Flat), VolumeDecision::Ignore);
    }

    fn wait_class() -> StorageClass {
        let mut sc = class("standard", OURS);
        sc.volume_binding_mode = Some("WaitForFirstConsumer".into());
        sc
    }

    fn selected(node: &str) -> PersistentVolumeClaim {
        let mut pvc = claim();
        pvc.metadata.annotations = Some(BTreeMap::from([(SELECTED_NODE.to_string(), node.to_string())]));
        pvc
    }

    #[test]
    fn per_node_volume_lives_on_the_selected_node() {
        let decide = |pvc: &PersistentVolumeClaim| {
            decide_claim(pvc, Some(&wait_class()), OURS, Path::new(ROOT), Layout::PerNode)
        };
        let ClaimDecision::Provision(p) = decide(&selected("node-2")) else {
            panic!("{:?}", decide(&selected("node-2")))
        };
        assert_eq!(p.dir, Path::new(ROOT).join("node-2").join(UID));
        let spec = p.volume.spec.unwrap();
        assert_eq!(spec.host_path.unwrap().path, format!("{ROOT}/node-2/{UID}"));
        let want: VolumeNodeAffinity = serde_json::from_value(serde_json::json!({
            "required": { "nodeSelectorTerms": [
                { "matchExpressions": [{ "key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"] }] },
            ] },
        }))
        .unwrap();
        assert_eq!(spec.node_affinity, Some(want));
        // No node selected yet: wait for the scheduler, as with one node.
        assert_eq!(decide(&claim()), ClaimDecision::WaitForConsumer);
        // A node name that is not a plain directory name is refused, never joined into a path.
        assert_eq!(kind(&decide(&selected("../pki"))), "refuse: the selected node \"../pki\" cannot name a directory");
        // An Immediate class names no node: refused rather than pinned to some node.
        assert_eq!(
            kind(&decide_claim(&claim(), Some(&class("standard", OURS)), OURS, Path::new(ROOT), Layout::PerNode)),
            "refuse: volumes live on one node here: the class must bind WaitForFirstConsumer (no node was selected)"
        );
        // The one-node layout ignores the selected node: the directory under the root, no affinity.
        let ClaimDecision::Provision(flat) =
            decide_claim(&selected("vm"), Some(&wait_class()), OURS, Path::new(ROOT), Layout::Flat)
        else {
            panic!()
        };
        assert_eq!(flat.dir, Path::new(ROOT).join(UID));
        assert_eq!(flat.volume.spec.unwrap().node_affinity, None);
    }

    #[test]
    fn per_node_volumes_are_reclaimed_only_from_a_node_directory() {
        let on_node = format!("{ROOT}/node-1/{UID}");
        let cases = [
            ("a node's volume", on_node.clone(), VolumeDecision::Reclaim { dir: PathBuf::from(&on_node) }),
            (
                "directly under the root (one-node layout)",
                format!("{ROOT}/{UID}"),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT}/{UID} is not a directory of a node under {ROOT}: not removed"
                )),
            ),
            (
                "a node's whole disk",
                format!("{ROOT}/node-1"),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT}/node-1 is not a directory of a node under {ROOT}: not removed"
                )),
            ),
            (
                "through ..",
                format!("{ROOT}/node-1/../../pki"),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT}/node-1/../../pki is not a directory of a node under {ROOT}: not removed"
                )),
            ),
            (
                "three levels down",
                format!("{ROOT}/node-1/a/b"),
                VolumeDecision::Refuse(format!(
                    "its hostPath {ROOT}/node-1/a/b is not a directory of a node under {ROOT}: not removed"
                )),
            ),
        ];
        for (name, path, want) in cases {
            let pv = volume(OURS, "Released", "Delete", &path);
            assert_eq!(decide_volume(&pv, OURS, Path::new(ROOT), Layout::PerNode), want, "{name}");
        }
    }
}
