//! The local cluster of `hack/cluster.sh` does what the operator's e2e tests rely on.
//!
//! Run with the cluster up: `KUBECONFIG=$(hack/cluster.sh kubeconfig) cargo test -p e2e -- --test-threads=1`.
//! Without a cluster these tests fail; they never skip.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::{
    ETCD_IMAGE_3_5_1, Kubectl, TestNamespace, cluster_ip_service, etcd_pod, headless_service, host_etcdctl, wait_until,
};

const POD_START: Duration = Duration::from_secs(90);

/// A one-member etcd 3.5.1 pod `etcd-0` under the headless Service `etcd`, Ready.
fn start_etcd(ns: &TestNamespace, data_volume: &str) -> Result<()> {
    ns.apply(&headless_service(&ns.name, "etcd"))?;
    ns.apply(&etcd_pod(&ns.name, "etcd-0", "etcd", ETCD_IMAGE_3_5_1, data_volume))?;
    ns.wait_pod_ready("etcd-0", POD_START)?;
    Ok(())
}

fn etcdctl_cmd<'a>(endpoint: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut cmd = vec!["/usr/local/bin/etcdctl", endpoint, "--dial-timeout=5s", "--command-timeout=10s"];
    cmd.extend_from_slice(args);
    cmd
}

#[test]
fn node_is_ready() -> Result<()> {
    let kubectl = Kubectl::from_env()?;
    let nodes = kubectl.node_ready_statuses()?;
    ensure!(nodes.len() == 1, "expected one node, got {nodes:?}");
    ensure!(nodes[0].1 == "True", "node {} is not Ready: {nodes:?}", nodes[0].0);
    Ok(())
}

/// etcd in one pod answers put/get from other pods by its cluster DNS name; the get goes
/// through the resolver's search list (`<pod>.<svc>.<ns>.svc` first gets NXDOMAIN for
/// `...svc.<ns>.svc.cluster.local` and `...svc.svc.cluster.local`), and `kubectl logs` works.
#[test]
fn etcd_pod_answers_another_pod_by_dns_name() -> Result<()> {
    let ns = TestNamespace::create("e2e-dns")?;
    start_etcd(&ns, "emptyDir: {}")?;

    let fqdn = format!("--endpoints=http://etcd-0.{}:2379", ns.service_fqdn("etcd"));
    let out = ns.run_pod("put", ETCD_IMAGE_3_5_1, &etcdctl_cmd(&fqdn, &["put", "e2e-key", "e2e-value"]), POD_START)?;
    ensure!(out.trim() == "OK", "etcdctl put printed {out:?}");

    let short = format!("--endpoints=http://etcd-0.etcd.{}.svc:2379", ns.name);
    let out = ns.run_pod(
        "get",
        ETCD_IMAGE_3_5_1,
        &etcdctl_cmd(&short, &["get", "e2e-key", "--print-value-only"]),
        POD_START,
    )?;
    ensure!(out.trim() == "e2e-value", "etcdctl get printed {out:?}");
    Ok(())
}

/// A ClusterIP Service in front of the etcd pod is reachable from another pod (by IP and by
/// name), from the pod behind it (hairpin), and from the host (by IP and by the names that
/// `devkit dns-sync --etc-hosts` keeps in /etc/hosts).
#[test]
fn service_cluster_ip_reaches_pod_from_pods_and_host() -> Result<()> {
    let ns = TestNamespace::create("e2e-svc")?;
    ns.apply(&cluster_ip_service(&ns.name, "etcd-client", "etcd"))?;
    start_etcd(&ns, "emptyDir: {}")?;
    let ip = ns.json(&["get", "service", "etcd-client"])?["spec"]["clusterIP"]
        .as_str()
        .context("service has no clusterIP")?
        .to_string();
    let by_ip = format!("http://{ip}:2379");

    let pod_ip = ns.pod("etcd-0")?["status"]["podIP"].as_str().context("etcd-0 has no IP")?.to_string();
    wait_until(Duration::from_secs(60), "the Service's endpoints to list etcd-0", || {
        let ep = ns.json(&["get", "endpoints", "etcd-client"])?;
        Ok((ep["subsets"][0]["addresses"][0]["ip"] == pod_ip.as_str()).then_some(()))
    })?;

    // From the host through kube-proxy's rules; also waits until kube-proxy has synced them.
    wait_until(Duration::from_secs(30), "etcd through the ClusterIP from the host", || {
        host_etcdctl(&by_ip, &["put", "e2e-key", "from-host"]).map(Some)
    })?;

    // Another pod on the same bridge -> ClusterIP -> etcd pod (replies must be un-NATed).
    let endpoint = format!("--endpoints={by_ip}");
    let out = ns.run_pod(
        "get-by-ip",
        ETCD_IMAGE_3_5_1,
        &etcdctl_cmd(&endpoint, &["get", "e2e-key", "--print-value-only"]),
        POD_START,
    )?;
    ensure!(out.trim() == "from-host", "get through the ClusterIP from a pod printed {out:?}");

    // The Service's own DNS name, short form through the search list.
    let out = ns.run_pod(
        "put-by-name",
        ETCD_IMAGE_3_5_1,
        &etcdctl_cmd("--endpoints=http://etcd-client:2379", &["put", "e2e-key", "from-pod"]),
        POD_START,
    )?;
    ensure!(out.trim() == "OK", "put through the Service name printed {out:?}");

    // Hairpin: the etcd pod reaches itself through the ClusterIP (kubectl exec, no shell).
    let out = ns.exec("etcd-0", &etcdctl_cmd(&endpoint, &["get", "e2e-key", "--print-value-only"]))?;
    ensure!(out.trim() == "from-pod", "hairpin get printed {out:?}");

    // The host resolves cluster names through /etc/hosts.
    let by_name = format!("http://{}:2379", ns.service_fqdn("etcd-client"));
    let out = host_etcdctl(&by_name, &["get", "e2e-key", "--print-value-only"])?;
    ensure!(out.trim() == "from-pod", "host get through the Service name printed {out:?}");
    let pod_name = format!("http://etcd-0.{}:2379", ns.service_fqdn("etcd"));
    let out = wait_until(Duration::from_secs(10), "the pod's name in /etc/hosts", || {
        host_etcdctl(&pod_name, &["get", "e2e-key", "--print-value-only"]).map(Some)
    })?;
    ensure!(out.trim() == "from-pod", "host get through the pod name printed {out:?}");
    Ok(())
}

/// A PVC without a class gets the default StorageClass, binds to a host-path volume, and a pod
/// writes to it (etcd's data directory); deleting the claim deletes the volume.
#[test]
fn pvc_binds_and_pod_writes_to_it() -> Result<()> {
    let ns = TestNamespace::create("e2e-pvc")?;
    ns.apply(&format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{ name: data, namespace: {} }}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: 16Mi }} }}
"#,
        ns.name
    ))?;
    let pv = wait_until(Duration::from_secs(60), "the claim to bind", || {
        let pvc = ns.json(&["get", "pvc", "data"])?;
        Ok((pvc["status"]["phase"] == "Bound").then(|| pvc))
    })?;
    ensure!(pv["spec"]["storageClassName"] == "standard", "claim did not get the default class: {pv}");
    let pv_name = pv["spec"]["volumeName"].as_str().context("bound claim without volumeName")?.to_string();
    let volume = ns.kubectl.json(&["get", "pv", &pv_name])?;
    let host_path = volume["spec"]["hostPath"]["path"].as_str().context("PV is not a hostPath volume")?.to_string();

    start_etcd(&ns, "persistentVolumeClaim: { claimName: data }")?;
    let out = ns.exec("etcd-0", &etcdctl_cmd("--endpoints=http://127.0.0.1:2379", &["put", "on-disk", "yes"]))?;
    ensure!(out.trim() == "OK", "put printed {out:?}");
    let wal_dir = std::path::Path::new(&host_path).join("data/member/wal");
    let wals = std::fs::read_dir(&wal_dir).with_context(|| format!("etcd wrote no {}", wal_dir.display()))?.count();
    ensure!(wals > 0, "no WAL files in {}", wal_dir.display());

    ns.run(&["delete", "pod", "etcd-0", "--wait=true", "--timeout=60s"])?;
    ns.run(&["delete", "pvc", "data", "--wait=true", "--timeout=60s"])?;
    wait_until(Duration::from_secs(60), "the volume to be deleted", || {
        let gone = ns.kubectl.run(&["get", "pv", &pv_name, "--ignore-not-found", "-o", "name"])?.trim().is_empty();
        Ok((gone && !std::path::Path::new(&host_path).exists()).then_some(()))
    })?;
    Ok(())
}
