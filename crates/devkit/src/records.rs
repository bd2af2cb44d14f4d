//! Pure computation of the cluster DNS records (no I/O), so it can be unit-tested.
//!
//! The records follow the Kubernetes DNS specification for the parts this project needs:
//! - a Service with a ClusterIP: `<svc>.<ns>.svc.<domain>` -> ClusterIP;
//! - a headless Service: `<svc>.<ns>.svc.<domain>` -> the IPs of the pods its selector matches
//!   (only ready ones, or all of them with `publishNotReadyAddresses`);
//! - a pod with `hostname` and `subdomain`: `<hostname>.<subdomain>.<ns>.svc.<domain>` -> pod IP.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service};

/// When a pod with hostname + subdomain gets its own record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodRecordPolicy {
    /// As soon as the pod has an IP, ready or not, with or without a matching headless Service.
    /// Lenient: etcd needs its own peer name before it is ready.
    Any,
    /// Like CoreDNS on a real cluster: only when a headless Service named like the subdomain
    /// selects the pod, and the pod is ready or that Service publishes not-ready addresses.
    Endpoints,
}

/// The parts of a Pod that DNS depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ip: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Phase Succeeded or Failed: the IP is released.
    pub finished: bool,
}

/// The parts of a Service that DNS depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceView {
    pub namespace: String,
    pub name: String,
    /// `None` for headless Services (`clusterIP: None`) and for ExternalName Services.
    pub cluster_ip: Option<String>,
    pub headless: bool,
    pub selector: BTreeMap<String, String>,
    pub publish_not_ready: bool,
}

/// One `IP name` line of a hosts file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub name: String,
    pub ip: String,
}

impl PodView {
    pub fn from_pod(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        PodView {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            hostname: spec.and_then(|s| s.hostname.clone()).filter(|h| !h.is_empty()),
            subdomain: spec.and_then(|s| s.subdomain.clone()).filter(|h| !h.is_empty()),
            ip: status.and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()),
            labels: meta.labels.clone().unwrap_or_default(),
            ready,
            terminating: meta.deletion_timestamp.is_some(),
            finished: matches!(phase, Some("Succeeded") | Some("Failed")),
        }
    }

    /// The pod would be an address of a Service that selects it (endpoints controller rules).
    fn is_endpoint_of(&self, svc: &ServiceView) -> bool {
        self.namespace == svc.namespace
            && !svc.selector.is_empty()
            && svc.selector.iter().all(|(k, v)| self.labels.get(k) == Some(v))
            && self.ip.is_some()
            && !self.finished
            && (svc.publish_not_ready || (self.ready && !self.terminating))
    }
}

impl ServiceView {
    pub fn from_service(svc: &Service) -> Self {
        let meta = &svc.metadata;
        let spec = svc.spec.as_ref();
        let cluster_ip = spec.and_then(|s| s.cluster_ip.clone()).unwrap_or_default();
        let is_external_name = spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName");
        let headless = cluster_ip == "None";
        ServiceView {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            cluster_ip: (!headless && !is_external_name && !cluster_ip.is_empty()).then_some(cluster_ip),
            headless,
            selector: spec.and_then(|s| s.selector.clone()).unwrap_or_default(),
            publish_not_ready: spec.and_then(|s| s.publish_not_ready_addresses).unwrap_or(false),
        }
    }
}

/// All records of the cluster domain, sorted and without duplicates.
pub fn compute(pods: &[PodView], services: &[ServiceView], domain: &str, policy: PodRecordPolicy) -> Vec<Record> {
    let mut out = BTreeSet::new();
    let fqdn = |parts: &[&str]| format!("{}.svc.{domain}", parts.join("."));

    for svc in services {
        let name = fqdn(&[&svc.name, &svc.namespace]);
        if let Some(ip) = &svc.cluster_ip {
            out.insert(Record { name, ip: ip.clone() });
        } else if svc.headless {
            for ip in pods.iter().filter(|p| p.is_endpoint_of(svc)).filter_map(|p| p.ip.clone()) {
                out.insert(Record { name: name.clone(), ip });
            }
        }
    }

    for pod in pods {
        let (Some(host), Some(sub), Some(ip)) = (&pod.hostname, &pod.subdomain, &pod.ip) else {
            continue;
        };
        if pod.finished {
            continue;
        }
        let wanted = match policy {
            PodRecordPolicy::Any => true,
            PodRecordPolicy::Endpoints => {
                services.iter().any(|s| s.headless && s.name == *sub && pod.is_endpoint_of(s))
            }
        };
        if wanted {
            out.insert(Record { name: fqdn(&[host, sub, &pod.namespace]), ip: ip.clone() });
        }
    }
    out.into_iter().collect()
}

/// Renders records as hosts-file lines (`IP name`), in a stable order.
pub fn render(records: &[Record]) -> String {
    records.iter().map(|r| format!("{} {}\n", r.ip, r.name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn etcd_pod(name: &str, ip: Option<&str>, ready: bool) -> PodView {
        PodView {
            namespace: "ns".into(),
            name: name.into(),
            hostname: Some(name.into()),
            subdomain: Some("etcd".into()),
            ip: ip.map(Into::into),
            labels: labels(&[("app", "etcd")]),
            ready,
            ..Default::default()
        }
    }

    fn headless(publish_not_ready: bool) -> ServiceView {
        ServiceView {
            namespace: "ns".into(),
            name: "etcd".into(),
            headless: true,
            selector: labels(&[("app", "etcd")]),
            publish_not_ready,
            ..Default::default()
        }
    }

    fn names(records: &[Record]) -> Vec<String> {
        records.iter().map(|r| format!("{} {}", r.ip, r.name)).collect()
    }

    #[test]
    fn cluster_ip_service() {
        let svc = ServiceView {
            namespace: "default".into(),
            name: "kubernetes".into(),
            cluster_ip: Some("10.96.0.1".into()),
            ..Default::default()
        };
        let r = compute(&[], &[svc], "cluster.local", PodRecordPolicy::Any);
        assert_eq!(names(&r), ["10.96.0.1 kubernetes.default.svc.cluster.local"]);
    }

    #[test]
    fn pod_record_before_ready_and_without_service() {
        let pods = [etcd_pod("etcd-0", Some("10.244.0.5"), false), etcd_pod("etcd-1", None, false)];
        let r = compute(&pods, &[], "cluster.local", PodRecordPolicy::Any);
        assert_eq!(names(&r), ["10.244.0.5 etcd-0.etcd.ns.svc.cluster.local"]);
    }

    #[test]
    fn headless_service_lists_only_ready_pods_unless_publish_not_ready() {
        let pods = [etcd_pod("etcd-0", Some("10.244.0.5"), true), etcd_pod("etcd-1", Some("10.244.0.6"), false)];
        let r = compute(&pods, &[headless(false)], "cluster.local", PodRecordPolicy::Any);
        let svc_lines: Vec<_> = names(&r).into_iter().filter(|l| l.ends_with(" etcd.ns.svc.cluster.local")).collect();
        assert_eq!(svc_lines, ["10.244.0.5 etcd.ns.svc.cluster.local"]);

        let r = compute(&pods, &[headless(true)], "cluster.local", PodRecordPolicy::Any);
        let svc_lines: Vec<_> = names(&r).into_iter().filter(|l| l.ends_with(" etcd.ns.svc.cluster.local")).collect();
        assert_eq!(svc_lines, ["10.244.0.5 etcd.ns.svc.cluster.local", "10.244.0.6 etcd.ns.svc.cluster.local"]);
    }

    #[test]
    fn selector_must_match_all_labels_and_namespace() {
        let mut other_ns = etcd_pod("etcd-0", Some("10.244.0.7"), true);
        other_ns.namespace = "other".into();
        let mut other_labels = etcd_pod("etcd-1", Some("10.244.0.8"), true);
        other_labels.labels = labels(&[("app", "web")]);
        let mut svc = headless(true);
        svc.selector.insert("tier".into(), "db".into());
        let mut matching = etcd_pod("etcd-2", Some("10.244.0.9"), true);
        matching.labels.insert("tier".into(), "db".into());
        let r = compute(&[other_ns, other_labels, matching], &[svc], "cluster.local", PodRecordPolicy::Endpoints);
        assert_eq!(names(&r), ["10.244.0.9 etcd-2.etcd.ns.svc.cluster.local", "10.244.0.9 etcd.ns.svc.cluster.local"]);
    }

    #[test]
    fn endpoints_policy_follows_readiness_like_coredns() {
        let pods = [etcd_pod("etcd-0", Some("10.244.0.5"), false)];
        assert!(compute(&pods, &[headless(false)], "cluster.local", PodRecordPolicy::Endpoints).is_empty());
        assert!(compute(&pods, &[], "cluster.local", PodRecordPolicy::Endpoints).is_empty());
        let r = compute(&pods, &[headless(true)], "cluster.local", PodRecordPolicy::Endpoints);
        assert_eq!(names(&r), ["10.244.0.5 etcd-0.etcd.ns.svc.cluster.local", "10.244.0.5 etcd.ns.svc.cluster.local"]);
    }

    #[test]
    fn finished_and_terminating_pods() {
        let mut done = etcd_pod("etcd-0", Some("10.244.0.5"), false);
        done.finished = true;
        let mut leaving = etcd_pod("etcd-1", Some("10.244.0.6"), true);
        leaving.terminating = true;
        let r = compute(&[done, leaving], &[headless(false)], "cluster.local", PodRecordPolicy::Any);
        // A terminating pod keeps its own name until it is gone but leaves the Service's addresses.
        assert_eq!(names(&r), ["10.244.0.6 etcd-1.etcd.ns.svc.cluster.local"]);
    }

    #[test]
    fn views_from_api_objects() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd-0", "namespace": "ns", "labels": {"app": "etcd"}},
            "spec": {"hostname": "etcd-0", "subdomain": "etcd", "containers": [{"name": "etcd"}]},
            "status": {"phase": "Running", "podIP": "10.244.0.5",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let v = PodView::from_pod(&pod);
        assert_eq!(v, PodView { ready: true, ..etcd_pod("etcd-0", Some("10.244.0.5"), true) });

        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd", "namespace": "ns"},
            "spec": {"clusterIP": "None", "selector": {"app": "etcd"}, "publishNotReadyAddresses": true}
        }))
        .unwrap();
        assert_eq!(ServiceView::from_service(&svc), headless(true));

        let ext: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ext", "namespace": "ns"},
            "spec": {"type": "ExternalName", "externalName": "example.org"}
        }))
        .unwrap();
        let r = compute(&[], &[ServiceView::from_service(&ext)], "cluster.local", PodRecordPolicy::Any);
        assert!(r.is_empty());
    }

    #[test]
    fn render_is_stable() {
        let r = vec![
            Record { name: "b.ns.svc.cluster.local".into(), ip: "10.96.0.2".into() },
            Record { name: "a.ns.svc.cluster.local".into(), ip: "10.96.0.3".into() },
        ];
        assert_eq!(render(&r), "10.96.0.2 b.ns.svc.cluster.local\n10.96.0.3 a.ns.svc.cluster.local\n");
    }
}
