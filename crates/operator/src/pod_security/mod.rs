//! Who member pods run as. Pure.
//!
//! Without `spec.pod.securityContext`, member pods pass the Pod Security Standard `restricted`:
//! etcd and every init container run as uid/gid [`NONROOT`] (distroless' `nonroot`, the user of
//! the operator's own pod and of backup pods), the pod's `fsGroup` is the same id so the kubelet
//! makes the data volume (and the TLS Secrets) usable by it, no privilege escalation, every
//! capability dropped, seccomp `RuntimeDefault`, read-only root filesystems (etcd, `etcdutl` and
//! `etcdctl` write only under `--data-dir`).
//!
//! A user's `spec.pod.securityContext` is used as given (CoreOS compatibility): [`Profile::Users`].
//!
//! Data an earlier operator version wrote as root stays usable: the kubelet applies `fsGroup` to
//! most volume types (emptyDir, CSI drivers that support it, `local`, block volumes with a
//! filesystem), but not to hostPath volumes (Rancher's local-path provisioner, this project's
//! local cluster), NFS or CSI drivers without fsGroup support. So a member is never trusted to
//! read its volume as [`NONROOT`]: its data check (`member_volume`, the first init container)
//! walks what the member uses and exits with `INACCESSIBLE_EXIT_CODE` when the pod's user
//! cannot read and write it. The planner then marks the volume (`naming::DATA_OWNER_ANNOTATION`
//! `= "0"`) and restarts the member as root, as it ran before: [`Profile::Root`] is exactly the
//! pod of earlier versions (no pod securityContext, the data containers as root, every
//! capability dropped). Nothing is refused or replaced for it, and no data moves.

#[cfg(test)]
pub mod restricted;

use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, SeccompProfile, SecurityContext};

/// The non-root user and group member pods run as by default (distroless' `nonroot`).
pub const NONROOT: i64 = 65532;

/// The security settings of one member pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Profile<'a> {
    /// The default: passes `restricted`.
    Restricted,
    /// A member whose volume holds data only root can use: the pod of operator versions before
    /// the restricted default, unchanged.
    Root,
    /// `spec.pod.securityContext`, as given.
    Users(&'a PodSecurityContext),
}

/// The profile of a member with the user's `spec.pod.securityContext`; `root_data`: its
/// volume is marked as root's.
pub fn profile(users: Option<&PodSecurityContext>, root_data: bool) -> Profile<'_> {
    match users {
        Some(sc) => Profile::Users(sc),
        None if root_data => Profile::Root,
        None => Profile::Restricted,
    }
}

impl Profile<'_> {
    /// The pod's securityContext.
    pub fn pod_context(self) -> Option<PodSecurityContext> {
        match self {
            Profile::Restricted => Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(NONROOT),
                run_as_group: Some(NONROOT),
                fs_group: Some(NONROOT),
                // A volume whose root already belongs to the group is not walked again at every
                // start (a large data directory would delay each restart).
                fs_group_change_policy: Some("OnRootMismatch".into()),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                ..Default::default()
            }),
            Profile::Root => None,
            Profile::Users(sc) => Some(sc.clone()),
        }
    }

    /// The securityContext of every container of the pod (etcd and the init containers): no
    /// privilege escalation, no capability; a read-only root filesystem in the default profile
    /// (the two others keep the containers of earlier versions). The user is the pod's.
    pub fn container_context(self) -> SecurityContext {
        SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
            read_only_root_filesystem: (self == Profile::Restricted).then_some(true),
            ..Default::default()
        }
    }

    /// The user of the containers that write the data volume before etcd starts (the data
    /// check, the restore steps): etcd's, so that etcd owns what they write. The pod's where it
    /// names one (`None`); `Some(0)` where it names none (etcd runs as the image's user, root);
    /// [`NONROOT`] where it names none but demands `runAsNonRoot: true` (the kubelet refuses a
    /// container as root there; etcd then runs as its image's non-root user: name that user in
    /// `runAsUser`, or give the data to a group with `fsGroup`, so that the two agree).
    pub fn data_writer(self) -> Option<i64> {
        let sc = self.pod_context();
        match sc.as_ref().map(|sc| (sc.run_as_user, sc.run_as_non_root)) {
            Some((Some(_), _)) => None,
            Some((None, Some(true))) => Some(NONROOT),
            _ => Some(0),
        }
    }

    /// The mode of the Secret files member pods mount (TLS, the login of a recovery's seed):
    /// owner and group only (`0440`), readable by etcd through the pod's `fsGroup`, or as root.
    /// Under a securityContext of the user's that runs as a non-root user without `fsGroup`
    /// the files belong to root, so they are world-readable (`0444`, Kubernetes' own default
    /// being `0644`): etcd must read its certificates, and only the pod's containers see them.
    pub fn secret_mode(self) -> i32 {
        match self {
            Profile::Users(sc)
                if sc.fs_group.is_none()
                    && (sc.run_as_user.is_some_and(|u| u != 0)
                        || (sc.run_as_user.is_none() && sc.run_as_non_root == Some(true))) =>
            {
                0o444
            }
            _ => 0o440,
        }
    }

    /// What the pod-spec hash adds for this profile: the default changes every member made
    /// before it (they roll, one at a time); the two others hash as before, so members that
    /// run as root for their data, or as the user says, are never rolled by an operator upgrade.
    pub fn hash_tag(self) -> Option<&'static str> {
        (self == Profile::Restricted).then_some("pod-security=restricted,user=65532")
    }
}

#[cfg(test)]
mod tests;
