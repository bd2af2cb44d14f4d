//! The local cluster of `hack/cluster.sh` does what the operator's e2e tests rely on.
//!
//! Run with the cluster up: `KUBECONFIG=$(hack/cluster.sh kubeconfig) cargo test -p e2e -- --test-threads=1`.
//! Without a cluster these tests fail; they never skip.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::{
    ETCD_IMAGE_3_5_1, Kubectl, TestNamespace, cluster_ip_service, condition_true, etcd_pod, headless_service,
    host_etcdctl, wait_until,
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

/// Every node is Ready, as many as the local cluster was started with (`NODES`, recorded by
/// hack/cluster.sh in its state directory; one without the record).
#[test]
fn node_is_ready() -> Result<()> {
    let kubectl = Kubectl::from_env()?;
    let nodes = kubectl.node_ready_statuses()?;
    let want = std::fs::read_to_string(NODE_COUNT_FILE).ok().and_then(|n| n.trim().parse().ok()).unwrap_or(1usize);
    ensure!(nodes.len() == want, "expected {want} node(s), got {nodes:?}");
    for (name, ready) in &nodes {
        ensure!(ready == "True", "node {name} is not Ready: {nodes:?}");
    }
    Ok(())
}

/// hack/cluster-env.sh's NODES_FILE.
const NODE_COUNT_FILE: &str = "/var/lib/etcd-operator-dev/node-count";

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
/// writes to it (etcd's data directory); deleting the claim deletes the volume. The pod is made
/// before the claim is waited for: with several nodes the class binds WaitForFirstConsumer.
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
    start_etcd(&ns, "persistentVolumeClaim: { claimName: data }")?;
    let pv = wait_until(Duration::from_secs(60), "the claim to bind", || {
        let pvc = ns.json(&["get", "pvc", "data"])?;
        Ok((pvc["status"]["phase"] == "Bound").then_some(pvc))
    })?;
    ensure!(pv["spec"]["storageClassName"] == "standard", "claim did not get the default class: {pv}");
    let pv_name = pv["spec"]["volumeName"].as_str().context("bound claim without volumeName")?.to_string();
    let volume = ns.kubectl.json(&["get", "pv", &pv_name])?;
    let host_path = volume["spec"]["hostPath"]["path"].as_str().context("PV is not a hostPath volume")?.to_string();

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

/// Pod Security `restricted` members (non-root user and fsGroup 65532) can write a claim of the
/// default class, as on real storage: its provisioner (`devkit provision`, started by
/// hack/cluster.sh) makes each volume a 0777 directory because kubelet never applies fsGroup to
/// hostPath volumes. Deleting the claim removes the volume and its directory.
#[test]
fn non_root_pod_writes_its_claim_of_the_default_class() -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const UID: u32 = 65532;
    let ns = TestNamespace::create("e2e-pvc-nonroot")?;
    ns.kubectl.run(&["label", "namespace", &ns.name, "pod-security.kubernetes.io/enforce=restricted"])?;
    ns.apply(&format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{ name: data, namespace: {ns} }}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{ requests: {{ storage: 16Mi }} }}
---
apiVersion: v1
kind: Pod
metadata: {{ name: etcd-0, namespace: {ns} }}
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    {{ runAsUser: {UID}, runAsGroup: {UID}, fsGroup: {UID}, runAsNonRoot: true, seccompProfile: {{ type: RuntimeDefault }} }}
  containers:
  - name: etcd
    image: {ETCD_IMAGE_3_5_1}
    imagePullPolicy: IfNotPresent
    command: [/usr/local/bin/etcd, --data-dir=/var/lib/etcd/data, --listen-client-urls=http://0.0.0.0:2379,
      --advertise-client-urls=http://127.0.0.1:2379]
    securityContext: {{ allowPrivilegeEscalation: false, capabilities: {{ drop: [ALL] }} }}
    readinessProbe: {{ httpGet: {{ path: /health, port: 2379 }}, periodSeconds: 1 }}
    volumeMounts: [{{ name: data, mountPath: /var/lib/etcd }}]
  volumes: [{{ name: data, persistentVolumeClaim: {{ claimName: data }} }}]
"#,
        ns = ns.name
    ))?;
    // A volume this pod cannot write makes etcd exit at once ("permission denied"): the first
    // restart fails the test with etcd's last words (wait_pod_ready would wait out the back-off).
    let exited = wait_until(POD_START, "etcd-0 Ready (or its container exiting)", || {
        let pod = ns.pod("etcd-0")?;
        if pod["status"]["containerStatuses"][0]["restartCount"].as_u64().unwrap_or(0) > 0 {
            return Ok(Some(Some(ns.run(&["logs", "etcd-0", "--previous", "--tail=3"]).unwrap_or_default())));
        }
        Ok(condition_true(&pod, "Ready").then_some(None))
    })?;
    if let Some(logs) = exited {
        bail!("etcd running as uid {UID} exited; last lines:\n{logs}");
    }
    let out = ns.exec("etcd-0", &etcdctl_cmd("--endpoints=http://127.0.0.1:2379", &["put", "on-disk", "yes"]))?;
    ensure!(out.trim() == "OK", "put printed {out:?}");

    let pvc = ns.json(&["get", "pvc", "data"])?;
    ensure!(pvc["spec"]["storageClassName"] == "standard", "claim did not get the default class: {pvc}");
    let pv_name = pvc["spec"]["volumeName"].as_str().context("bound claim without volumeName")?.to_string();
    let volume = ns.kubectl.json(&["get", "pv", &pv_name])?;
    let by = &volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"];
    ensure!(by == "dev.etcd-operator/host-path", "volume {pv_name} provisioned by {by}, not devkit provision");
    let dir = std::path::PathBuf::from(volume["spec"]["hostPath"]["path"].as_str().context("not a hostPath volume")?);
    let mode = std::fs::metadata(&dir).with_context(|| format!("{}", dir.display()))?.permissions().mode() & 0o7777;
    ensure!(mode == 0o777, "{} has mode {mode:o}", dir.display());
    let data = std::fs::metadata(dir.join("data"))?;
    ensure!(data.uid() == UID, "etcd's data directory is owned by {}, not the pod's user", data.uid());

    ns.run(&["delete", "pod", "etcd-0", "--wait=true", "--timeout=60s"])?;
    ns.run(&["delete", "pvc", "data", "--wait=true", "--timeout=60s"])?;
    wait_until(Duration::from_secs(60), "the volume and its directory to be removed", || {
        let gone = ns.kubectl.run(&["get", "pv", &pv_name, "--ignore-not-found", "-o", "name"])?.trim().is_empty();
        Ok((gone && !dir.exists()).then_some(()))
    })?;
    Ok(())
}

/// Run by `a_test_process_stopped_by_a_signal_deletes_its_namespace` in a child process:
/// creates a namespace, prints its name, and waits to be signalled.
#[test]
#[ignore = "helper: only meaningful when run by a_test_process_stopped_by_a_signal_deletes_its_namespace"]
fn wait_for_a_signal_with_a_namespace() -> Result<()> {
    if std::env::var_os("E2E_SIGNAL_HELPER").is_none() {
        return Ok(());
    }
    let ns = TestNamespace::create("e2e-signal")?;
    println!("NAMESPACE {}", ns.name);
    std::thread::sleep(Duration::from_secs(120));
    bail!("no signal came")
}

/// A test process stopped by SIGTERM, SIGINT or SIGHUP (a CI timeout, Ctrl-C, a closed
/// terminal) deletes the namespaces it made, then ends by that signal (a dropped namespace was
/// never reached).
#[test]
fn a_test_process_stopped_by_a_signal_deletes_its_namespace() -> Result<()> {
    use std::io::{BufRead, BufReader};
    let k = Kubectl::from_env()?;
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .args(["--exact", "wait_for_a_signal_with_a_namespace", "--ignored", "--nocapture", "--test-threads=1"])
            .env("E2E_SIGNAL_HELPER", "1")
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("the helper's stdout")?;
        let name = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.split_once("NAMESPACE ").map(|(_, n)| n.trim().to_string()))
            .context("the helper printed no namespace")?;
        e2e::process::kill_process(child.id(), signal).with_context(|| format!("kill -{signal}"))?;
        let status = child.wait()?;
        // Ended by the signal itself (not an exit code), as a caller's shell expects.
        use std::os::unix::process::ExitStatusExt;
        ensure!(status.signal() == Some(signal), "signal {signal}: the helper ended with {status:?}");
        let gone = wait_until(Duration::from_secs(30), &format!("namespace {name} to be deleted"), || {
            match k.run(&["get", "namespace", &name, "-o", "json"]) {
                Err(e) if format!("{e:#}").contains("NotFound") => Ok(Some(())),
                Err(e) => Err(e),
                Ok(out) => {
                    let v: serde_json::Value = serde_json::from_str(&out)?;
                    Ok(v["metadata"]["deletionTimestamp"].is_string().then_some(()))
                }
            }
        });
        if gone.is_err() {
            let _ = k.run(&["delete", "namespace", &name, "--wait=false"]);
        }
        gone.with_context(|| format!("signal {signal}"))?;
    }
    Ok(())
}

/// The harness answers the tests' `kubectl get ... -o json|name` from the API server directly
/// (`e2e::api_get`): the answers are kubectl's own, objects, lists, names and errors.
#[test]
fn direct_gets_answer_as_kubectl_does() -> Result<()> {
    let ns = TestNamespace::create("e2e-apiget")?;
    start_etcd(&ns, "")?;
    let k = Kubectl::from_env()?;
    let kubectl = |args: &[&str]| e2e::run(k.command().args(args));
    let n = ns.name.as_str();
    let cases: [&[&str]; 8] = [
        &["-n", n, "get", "pod", "etcd-0", "-o", "json"],
        &["-n", n, "get", "pods", "-o", "json"],
        &["-n", n, "get", "pods", "-l", "app=etcd", "-o", "json"],
        &["-n", n, "get", "services,pods", "-o", "name"],
        &["-n", n, "get", "serviceaccount", "default", "-o", "json"],
        &["get", "namespace", n, "-o", "name"],
        &["get", "crd", "etcdclusters.etcd.database.coreos.com", "-o", "json"],
        &["get", "crd", "etcdclusters.etcd.database.coreos.com", "-o", "name"],
    ];
    for args in cases {
        ensure!(e2e::api_get::parse(args).is_some(), "{args:?} is not answered directly");
        let direct = k.run(args)?;
        let theirs = kubectl(args)?;
        if args.contains(&"name") {
            ensure!(direct == theirs, "{args:?}: {direct:?} != kubectl's {theirs:?}");
        } else {
            let (mut a, mut b): (serde_json::Value, serde_json::Value) =
                (serde_json::from_str(&direct)?, serde_json::from_str(&theirs)?);
            // A pod's status may move between the two reads.
            for v in [&mut a, &mut b] {
                strip_moving(v);
            }
            ensure!(a == b, "{args:?}: direct\n{a:#}\nkubectl\n{b:#}");
        }
    }
    let missing = ["-n", n, "get", "pod", "nope", "-o", "json"];
    let direct = format!("{:#}", k.run(&missing).expect_err("no such pod"));
    let theirs = format!("{:#}", kubectl(&missing).expect_err("no such pod"));
    let said = r#"Error from server (NotFound): pods "nope" not found"#;
    ensure!(direct.contains(said) && theirs.contains(said), "direct: {direct}\nkubectl: {theirs}");
    Ok(())
}

/// Drops what may change between two reads of the same objects.
fn strip_moving(v: &mut serde_json::Value) {
    if let Some(items) = v.get_mut("items").and_then(|i| i.as_array_mut()) {
        items.iter_mut().for_each(strip_moving);
        return;
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
        if let Some(m) = o.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("resourceVersion");
        }
    }
}
