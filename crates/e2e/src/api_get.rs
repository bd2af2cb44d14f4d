//! `kubectl get KIND [NAME] [-n NS] [-l SELECTOR] -o json|name`, asked of the API server directly.
//!
//! The tests poll with `kubectl get ... -o json` several times a second each. Every such call
//! starts a kubectl process (about 70 ms of CPU, and its discovery requests to the API server):
//! with four tests at a time on two cores, about a sixth of the machine. The same read as one
//! HTTP GET over a kept connection costs a fraction of a millisecond. What is answered here is
//! exactly what kubectl prints for those calls (a `List` of items that carry their kind and
//! apiVersion, without `managedFields` as kubectl from 1.21 prints them; an error that reads
//! `Error from server (NotFound): ...`); any other form of a
//! call (another output, a field selector, `kind/name`, a kind not in the table) still runs
//! kubectl. `E2E_KUBECTL_ONLY=1` turns this off.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// The kinds the tests read, by every name they use: API path prefix, plural, namespaced, and
/// what `-o name` prints before the name. Only kinds whose group version is the same on every
/// Kubernetes the suite runs (1.20 and 1.37).
const RESOURCES: &[(&[&str], &str, &str, bool, &str)] = &[
    (&["pod", "pods", "po"], "/api/v1", "pods", true, "pod"),
    (
        &["pvc", "persistentvolumeclaim", "persistentvolumeclaims"],
        "/api/v1",
        "persistentvolumeclaims",
        true,
        "persistentvolumeclaim",
    ),
    (&["pv", "persistentvolume", "persistentvolumes"], "/api/v1", "persistentvolumes", false, "persistentvolume"),
    (&["service", "services", "svc"], "/api/v1", "services", true, "service"),
    (&["endpoints", "ep"], "/api/v1", "endpoints", true, "endpoints"),
    (&["secret", "secrets"], "/api/v1", "secrets", true, "secret"),
    (&["configmap", "configmaps", "cm"], "/api/v1", "configmaps", true, "configmap"),
    (&["event", "events", "ev"], "/api/v1", "events", true, "event"),
    (&["events.v1.events.k8s.io"], "/apis/events.k8s.io/v1", "events", true, "event.events.k8s.io"),
    (&["serviceaccount", "serviceaccounts", "sa"], "/api/v1", "serviceaccounts", true, "serviceaccount"),
    (&["namespace", "namespaces", "ns"], "/api/v1", "namespaces", false, "namespace"),
    (&["node", "nodes", "no"], "/api/v1", "nodes", false, "node"),
    (&["deployment", "deployments", "deploy"], "/apis/apps/v1", "deployments", true, "deployment.apps"),
    (&["job", "jobs"], "/apis/batch/v1", "jobs", true, "job.batch"),
    (
        &["crd", "crds", "customresourcedefinition", "customresourcedefinitions"],
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        false,
        "customresourcedefinition.apiextensions.k8s.io",
    ),
    (
        &["etcdcluster", "etcdclusters"],
        "/apis/etcd.database.coreos.com/v1beta2",
        "etcdclusters",
        true,
        "etcdcluster.etcd.database.coreos.com",
    ),
    (
        &["etcdbackup", "etcdbackups"],
        "/apis/etcd.database.coreos.com/v1beta2",
        "etcdbackups",
        true,
        "etcdbackup.etcd.database.coreos.com",
    ),
    (
        &["etcdrestore", "etcdrestores"],
        "/apis/etcd.database.coreos.com/v1beta2",
        "etcdrestores",
        true,
        "etcdrestore.etcd.database.coreos.com",
    ),
];

/// A `kubectl get` this module answers: the API paths (one per kind asked) and the output.
#[derive(Debug, PartialEq, Eq)]
pub struct Get {
    /// Per kind asked: the path with its query, and what `-o name` prints before a name.
    pub paths: Vec<(String, &'static str)>,
    /// One object (a name was given), else a list.
    pub one: bool,
    /// `-o name` (else `-o json`).
    pub names: bool,
}

/// The GETs that stand for kubectl arguments `args`, or `None` when kubectl must run them.
pub fn parse(args: &[&str]) -> Option<Get> {
    let (mut ns, mut selector, mut output, mut words) = (None, None, None, vec![]);
    let mut it = args.iter().copied();
    while let Some(a) = it.next() {
        match a {
            "-n" | "--namespace" => ns = Some(it.next()?),
            "-l" | "--selector" => selector = Some(it.next()?),
            "-o" | "--output" => output = Some(it.next()?),
            _ if a.starts_with("-o=") => output = Some(&a[3..]),
            _ if a.starts_with("--output=") => output = Some(&a["--output=".len()..]),
            _ if a.starts_with("-o") && a.len() > 2 => output = Some(&a[2..]),
            _ if a.starts_with("--namespace=") => ns = Some(&a["--namespace=".len()..]),
            _ if a.starts_with('-') => return None,
            _ => words.push(a),
        }
    }
    let names = match output? {
        "json" => false,
        "name" => true,
        _ => return None,
    };
    let ["get", kinds, rest @ ..] = words.as_slice() else { return None };
    if rest.len() > 1 || rest.iter().any(|n| n.contains('/')) || kinds.contains('/') {
        return None;
    }
    let kinds: Vec<&str> = kinds.split(',').collect();
    // Several kinds: only their names (one list of several kinds is not worth the mimicry).
    if kinds.len() > 1 && (!names || !rest.is_empty()) {
        return None;
    }
    let mut paths = vec![];
    for kind in kinds {
        let (_, prefix, plural, namespaced, name_prefix) = RESOURCES.iter().find(|(n, ..)| n.contains(&kind))?;
        let mut path = prefix.to_string();
        if *namespaced {
            path.push_str(&format!("/namespaces/{}", ns.unwrap_or("default")));
        }
        path.push_str(&format!("/{plural}"));
        if let Some(name) = rest.first() {
            if selector.is_some() {
                return None;
            }
            path.push_str(&format!("/{name}"));
        }
        if let Some(s) = selector {
            path.push_str(&format!("?labelSelector={}", encode(s)));
        }
        paths.push((path, *name_prefix));
    }
    Some(Get { paths, one: !rest.is_empty(), names })
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What kubectl prints for a list: kind `List`, each item with its kind and apiVersion.
pub fn as_kubectl_list(mut list: Value) -> Value {
    let api_version = list["apiVersion"].clone();
    let kind = list["kind"].as_str().and_then(|k| k.strip_suffix("List")).map(str::to_string);
    let mut items = list["items"].take();
    if let (Some(items), Some(kind)) = (items.as_array_mut(), kind) {
        for item in items {
            if let Some(o) = item.as_object_mut() {
                o.insert("apiVersion".into(), api_version.clone());
                o.insert("kind".into(), Value::String(kind.clone()));
            }
        }
    }
    serde_json::json!({
        "apiVersion": "v1",
        "items": if items.is_null() { Value::Array(vec![]) } else { items },
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    })
}

struct Api {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

fn api(kubeconfig: &Path) -> Option<&'static Api> {
    static API: OnceLock<Option<(std::path::PathBuf, Api)>> = OnceLock::new();
    let got = API.get_or_init(|| {
        if std::env::var_os("E2E_KUBECTL_ONLY").is_some_and(|v| v == "1") {
            return None;
        }
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().ok()?;
        let path = kubeconfig.to_path_buf();
        // On a thread of its own: the first call may come from inside another runtime, where
        // blocking on this one would panic.
        let make = rt.spawn(async move {
            let kc = kube::config::Kubeconfig::read_from(&path).ok()?;
            let config =
                kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.ok()?;
            kube::Client::try_from(config).ok()
        });
        let handle = rt.handle().clone();
        let client = std::thread::spawn(move || handle.block_on(make)).join().ok()?.ok()??;
        Some((kubeconfig.to_path_buf(), Api { rt, client }))
    });
    // One kubeconfig per process in practice; another one goes through kubectl.
    got.as_ref().filter(|(p, _)| p == kubeconfig).map(|(_, a)| a)
}

/// Answers `get` for kubectl arguments `args` as kubectl would print it (`Ok(None)`: kubectl
/// must run it).
pub fn get(kubeconfig: &Path, args: &[&str]) -> Result<Option<String>> {
    let Some(g) = parse(args) else { return Ok(None) };
    let Some(api) = api(kubeconfig) else { return Ok(None) };
    let mut out = String::new();
    for (path, name_prefix) in &g.paths {
        let v = fetch(api, path)?;
        if !g.names {
            let v = if g.one { v } else { as_kubectl_list(v) };
            return Ok(Some(serde_json::to_string_pretty(&v)?));
        }
        let objects = if g.one { vec![v] } else { v["items"].as_array().cloned().unwrap_or_default() };
        for o in objects {
            out.push_str(&format!("{name_prefix}/{}\n", o["metadata"]["name"].as_str().unwrap_or_default()));
        }
    }
    Ok(Some(out))
}

/// One GET of `path`, its JSON; an error status reads as kubectl says it.
fn fetch(api: &Api, path: &str) -> Result<Value> {
    let req = http::Request::get(path).body(Vec::new()).context("a GET request")?;
    let client = api.client.clone();
    // Run on this module's runtime from any thread, also one inside another runtime.
    let (tx, rx) = std::sync::mpsc::channel();
    api.rt.spawn(async move {
        // As kubectl's --request-timeout=20s: the whole answer, body included.
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            let resp = client.send(req.map(kube::client::Body::from)).await?;
            let status = resp.status();
            let body = http_body_util::BodyExt::collect(resp.into_body()).await?.to_bytes().to_vec();
            Ok::<_, anyhow::Error>((status, body))
        })
        .await;
        let _ = tx.send(answer.unwrap_or_else(|_| Err(anyhow!("no answer within 20s"))));
    });
    let (status, body) = rx.recv().context("the API runtime stopped")?.with_context(|| format!("GET {path}"))?;
    let v: Value = serde_json::from_slice(&body).with_context(|| format!("GET {path}: not JSON ({status})"))?;
    if !status.is_success() {
        // A kind the server does not serve (its CRD not installed) is not an object that is
        // gone: kubectl says so differently, and callers look for "NotFound" meaning gone.
        if status == http::StatusCode::NOT_FOUND && v["details"]["name"].is_null() {
            bail!("GET {path} failed ({status}): error: the server doesn't have a resource type for {path}");
        }
        // As kubectl says it: callers look for "NotFound", "not found", "Forbidden".
        let reason = v["reason"].as_str().unwrap_or("Unknown");
        let message = v["message"].as_str().unwrap_or_default();
        bail!("GET {path} failed ({status}): Error from server ({reason}): {message}");
    }
    Ok(without_managed_fields(v))
}

/// kubectl (from 1.21) leaves `metadata.managedFields` out of what it prints.
fn without_managed_fields(mut v: Value) -> Value {
    // `get_mut`, not indexing: `v["items"]` on an object would add `"items": null` to it.
    fn strip(o: &mut Value) {
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip);
    }
    strip(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gets_the_tests_make_become_api_paths() {
        let p = |a: &[&str]| parse(a).map(|g| (g.paths.into_iter().map(|(p, _)| p).collect::<Vec<_>>(), g.one));
        let one = |s: &str| vec![s.to_string()];
        assert_eq!(
            p(&["-n", "ns1", "get", "pod", "ex-0", "-o", "json"]),
            Some((one("/api/v1/namespaces/ns1/pods/ex-0"), true))
        );
        assert_eq!(
            p(&["-n", "ns1", "get", "pods", "-l", "app=etcd,etcd_cluster=ex", "-o", "json"]),
            Some((one("/api/v1/namespaces/ns1/pods?labelSelector=app%3Detcd%2Cetcd_cluster%3Dex"), false))
        );
        assert_eq!(
            p(&["get", "etcdcluster", "ex", "-n", "ns1", "-o", "json"]),
            Some((one("/apis/etcd.database.coreos.com/v1beta2/namespaces/ns1/etcdclusters/ex"), true))
        );
        assert_eq!(p(&["get", "nodes", "-o", "json"]), Some((one("/api/v1/nodes"), false)));
        assert_eq!(p(&["get", "pods", "-ojson"]), Some((one("/api/v1/namespaces/default/pods"), false)));
        assert_eq!(
            p(&["-n", "x", "get", "crd", "etcdclusters.etcd.database.coreos.com", "-o", "json"]),
            Some((
                one("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/etcdclusters.etcd.database.coreos.com"),
                true
            ))
        );
        assert_eq!(
            p(&["-n", "x", "get", "events.v1.events.k8s.io", "-o", "json"]),
            Some((one("/apis/events.k8s.io/v1/namespaces/x/events"), false))
        );
        let names = parse(&["-n", "x", "get", "pods,services,pvc", "-l", "etcd_cluster=ex", "-o", "name"]).unwrap();
        assert!(names.names);
        let prefixes: Vec<&str> = names.paths.iter().map(|(_, n)| *n).collect();
        assert_eq!(prefixes, ["pod", "service", "persistentvolumeclaim"]);
        assert_eq!(names.paths[2].0, "/api/v1/namespaces/x/persistentvolumeclaims?labelSelector=etcd_cluster%3Dex");
        // kubectl runs whatever else.
        for a in [
            &["-n", "x", "get", "pods", "-o", "wide"][..],
            &["-n", "x", "get", "pods"],
            &["-n", "x", "get", "events", "--sort-by=.lastTimestamp", "-o", "json"],
            &["-n", "x", "get", "pod/ex-0", "-o", "json"],
            &["-n", "x", "get", "pods,pvc", "-o", "json"],
            &["-n", "x", "get", "pdb", "-o", "json"],
            &["-n", "x", "get", "certificates.cert-manager.io", "-o", "json"],
            &["-n", "x", "get", "pods", "a", "b", "-o", "json"],
            &["-n", "x", "delete", "pod", "a", "-o", "json"],
            &["-n", "x", "get", "pod", "a", "-o", "jsonpath={.status}"],
            &["-n", "x", "get", "etcdcluster,etcdbackup,events", "-o", "yaml"],
        ] {
            assert_eq!(parse(a), None, "{a:?}");
        }
    }

    #[test]
    fn managed_fields_go_and_nothing_else_changes() {
        let one = serde_json::json!({"kind": "Pod", "metadata": {"name": "a", "managedFields": [{}]}});
        assert_eq!(without_managed_fields(one), serde_json::json!({"kind": "Pod", "metadata": {"name": "a"}}));
        let list = serde_json::json!({"kind": "PodList", "items": [{"metadata": {"name": "a", "managedFields": []}}]});
        assert_eq!(without_managed_fields(list)["items"][0]["metadata"], serde_json::json!({"name": "a"}));
    }

    #[test]
    fn a_list_reads_as_kubectl_prints_it() {
        let api = serde_json::json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "42"},
            "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}],
        });
        let l = as_kubectl_list(api);
        assert_eq!(l["kind"], "List");
        assert_eq!(l["items"][1]["kind"], "Pod");
        assert_eq!(l["items"][0]["apiVersion"], "v1");
        assert_eq!(l["items"][1]["metadata"]["name"], "b");
        let empty = as_kubectl_list(serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": null}));
        assert_eq!(empty["items"], serde_json::json!([]));
    }
}
