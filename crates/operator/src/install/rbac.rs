//! The permissions this operator's code uses, in one table. The shipped Role/ClusterRole are
//! generated from it and the start-up permission check reads it, so that what is granted,
//! what is checked and what is used cannot drift apart silently.
//!
//! When code starts to call a new verb on a resource, add it here; `manifests` and the
//! start-up check follow.
//!
//! Narrowed by name (`resourceNames`) wherever the names are known when the operator is
//! installed: the CRDs it patches, the Leases it reads and renews. The rest cannot be:
//! - `create` never can (RBAC sees no name on a create), nor `list`/`watch` (collections);
//! - Secrets: the ones read are those a cluster's spec names (`spec.TLS.static`, `spec.auth`,
//!   an EtcdBackup's `clientTLSSecret`/`authSecret`) or cert-manager issued for it
//!   (`<name>-cm-*`), the ones written are named after the cluster (`<name>-tls-*`,
//!   `<name>-etcd-root*`): names chosen by users after the install,
//!   which a Role cannot list in advance. The operator never lists, watches or deletes
//!   Secrets (owner references delete its own with their cluster), so it can read only a
//!   Secret whose name it is given. In cluster-wide mode the ClusterRole still lets it get
//!   and write any Secret of the cluster by name: install it namespaced (a Role per namespace)
//!   where that is too much.

/// Where a permission applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// In the namespace(s) the operator manages: a Role (or the ClusterRole in cluster-wide mode).
    Namespaced,
    /// Cluster-scoped objects: always a ClusterRole.
    Cluster,
}

/// One rule: verbs on one resource of one API group.
#[derive(Clone, Copy, Debug)]
pub struct Permission {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    pub scope: Scope,
    /// Only these objects (`resourceNames`); empty: any.
    pub names: &'static [&'static str],
    /// What the verbs are used for, printed with a missing-permission error.
    pub why: &'static str,
}

const ETCD: &str = etcd_operator_api::GROUP;
/// The operator's own CRDs: the only ones it may change.
pub const CRD_NAMES: &[&str] = &[
    "etcdclusters.etcd.database.coreos.com",
    "etcdbackups.etcd.database.coreos.com",
    "etcdrestores.etcd.database.coreos.com",
];

/// The Leases leader election uses: the install's own, and the one every cluster-wide install
/// shares.
pub const LEASE_NAMES: &[&str] = &[crate::OPERATOR_NAME, crate::runtime::leader_election::CLUSTER_WIDE_LEASE];

/// Every permission the operator needs.
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        group: ETCD,
        resource: "etcdclusters",
        verbs: &["get", "list", "watch", "create", "patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "watch clusters; EtcdRestore creates one; durable marks in their annotations",
    },
    Permission {
        group: ETCD,
        resource: "etcdclusters/status",
        verbs: &["patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "report cluster status",
    },
    Permission {
        group: ETCD,
        resource: "etcdbackups",
        verbs: &["get", "list", "watch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "watch backups",
    },
    Permission {
        group: ETCD,
        resource: "etcdbackups/status",
        verbs: &["patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "report backup status",
    },
    Permission {
        group: ETCD,
        resource: "etcdrestores",
        verbs: &["get", "list", "watch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "watch restores",
    },
    Permission {
        group: ETCD,
        resource: "etcdrestores/status",
        verbs: &["patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "report restore status",
    },
    Permission {
        group: "",
        resource: "pods",
        verbs: &["get", "list", "watch", "create", "delete", "patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "run etcd members",
    },
    Permission {
        group: "",
        resource: "services",
        verbs: &["get", "list", "watch", "create", "patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "peer and client Services",
    },
    Permission {
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        scope: Scope::Namespaced,
        names: &[],
        why: "member data volumes (patch: grow them when the spec asks for more; record a moved peer URL; mark root's data; retire a refused one) and backup claims (get, patch: mark as root's)",
    },
    Permission {
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "update", "patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "read the spec.TLS.static and spec.auth Secrets a cluster names, to check them and to connect; create and update the spec.TLS.auto Secrets a cluster owns (also for spec.TLS.certManager, from cert-manager's Secrets, which it reads); create a missing spec.auth root Secret and patch the record of the root password etcd has (no list, watch or delete: only Secrets a spec names or the operator owns)",
    },
    Permission {
        group: "cert-manager.io",
        resource: "certificates",
        verbs: &["get", "create", "update"],
        scope: Scope::Namespaced,
        names: &[],
        why: "spec.TLS.certManager: keep a cluster's four cert-manager Certificates as its spec asks (no list, watch or delete: owner references delete them with their cluster)",
    },
    Permission {
        group: "cert-manager.io",
        resource: "certificates/status",
        verbs: &["update"],
        scope: Scope::Namespaced,
        names: &[],
        why: "spec.TLS.certManager: ask cert-manager to issue a certificate again from the issuer's new CA during a CA rotation (as `cmctl renew` does)",
    },
    Permission {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: &["list", "watch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "see when the client Service no longer lists a drained member, so that it leaves no sooner (nor later) than clients stop reaching it",
    },
    Permission {
        group: "policy",
        resource: "poddisruptionbudgets",
        verbs: &["get", "list", "watch", "create", "patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "one PodDisruptionBudget per cluster: a drain evicts at most one member at a time",
    },
    Permission {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        scope: Scope::Namespaced,
        names: &[],
        why: "one NetworkPolicy per cluster (spec.networkPolicy): who may reach the members; deleted when turned off",
    },
    Permission {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        scope: Scope::Namespaced,
        names: &[],
        why: "report every action as an Event",
    },
    Permission {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["create"],
        scope: Scope::Namespaced,
        names: &[],
        why: "leader election: create the Lease the first time (RBAC cannot narrow create by name)",
    },
    Permission {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "update"],
        scope: Scope::Namespaced,
        names: LEASE_NAMES,
        why: "leader election: read and renew the operator's Lease and the cluster-wide one",
    },
    Permission {
        group: "",
        resource: "nodes",
        verbs: &["get"],
        scope: Scope::Cluster,
        names: &[],
        why: "read the Node of a member that is not Ready (is it lost, cut off, or declared out of service?) before replacing or recovering anything (spec.recovery.nodeLoss)",
    },
    Permission {
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        verbs: &["get", "list", "watch", "create"],
        scope: Scope::Cluster,
        names: &[],
        why: "install the CRDs at start-up (--create-crd)",
    },
    Permission {
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        verbs: &["patch"],
        scope: Scope::Cluster,
        names: CRD_NAMES,
        why: "update this operator's own CRDs at start-up (--create-crd)",
    },
];

/// What `--metrics-auth=kubernetes` needs besides: reviewing the token of a `/metrics` request
/// (cluster-scoped review APIs; they read nothing and change nothing).
pub const METRICS_AUTH_PERMISSIONS: &[Permission] = &[
    Permission {
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        verbs: &["create"],
        scope: Scope::Cluster,
        names: &[],
        why: "check the bearer token of a /metrics request (--metrics-auth=kubernetes)",
    },
    Permission {
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        verbs: &["create"],
        scope: Scope::Cluster,
        names: &[],
        why: "check that a /metrics request's user may get /metrics (--metrics-auth=kubernetes)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wildcards_and_no_duplicates() {
        let mut seen = std::collections::BTreeSet::new();
        for p in PERMISSIONS {
            assert!(!p.verbs.contains(&"*") && p.resource != "*", "{p:?}");
            assert!(seen.insert((p.group, p.resource, p.names)), "duplicate {p:?}");
        }
    }

    #[test]
    fn crd_names_are_the_operators_own() {
        use kube::CustomResourceExt;
        let own = [
            etcd_operator_api::EtcdCluster::crd_name(),
            etcd_operator_api::EtcdBackup::crd_name(),
            etcd_operator_api::EtcdRestore::crd_name(),
        ];
        assert_eq!(CRD_NAMES, own);
    }

    /// Leases: read and renewed only by name (the operator's own Lease and the shared
    /// cluster-wide one); `create` cannot be narrowed by name (RBAC never sees a name on create).
    #[test]
    fn leases_are_read_and_renewed_only_by_name() {
        let l: Vec<_> = PERMISSIONS.iter().filter(|p| p.resource == "leases").collect();
        let named: Vec<_> = l.iter().filter(|p| !p.names.is_empty()).collect();
        assert_eq!(named.len(), 1, "{l:?}");
        assert_eq!(named[0].verbs, ["get", "update"]);
        assert_eq!(named[0].names, [crate::OPERATOR_NAME, crate::runtime::leader_election::CLUSTER_WIDE_LEASE]);
        let unnamed: Vec<_> = l.iter().filter(|p| p.names.is_empty()).collect();
        assert_eq!(unnamed.len(), 1, "{l:?}");
        assert_eq!(unnamed[0].verbs, ["create"]);
    }

    /// Secrets: `get` by name (the TLS and auth Secrets a cluster's spec names), `create` and
    /// `update` (the `spec.TLS.auto` Secrets a cluster owns: `tls::auto` never replaces one it
    /// does not own), `create` and `patch` for the auth Secrets the operator owns; never list,
    /// watch or delete (owner references delete them with their cluster). Storage credentials
    /// are still mounted only into backup and restore pods.
    #[test]
    fn secrets_are_only_read_and_written_by_name() {
        let s: Vec<_> = PERMISSIONS.iter().filter(|p| p.resource == "secrets").collect();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].verbs, ["get", "create", "update", "patch"]);
        assert_eq!(s[0].scope, Scope::Namespaced);
    }
}
