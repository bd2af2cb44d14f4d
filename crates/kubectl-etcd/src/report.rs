//! `kubectl etcd report`: a support bundle (.tar.gz) of one cluster. Objects are redacted by
//! field name (`redact::object`); every file, logs included, is then scrubbed of every value of
//! the Secrets of the namespaces involved, which are read into memory for that and never written.

use std::time::Duration;

use anyhow::{Context, Result};
use etcd_operator_api::backup::EtcdBackup;
use etcd_operator_api::cluster::EtcdCluster;
use etcd_operator_api::restore::EtcdRestore;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use serde::Serialize;

use crate::cli::ReportArgs;
use crate::redact;

const LOG_TIMEOUT: Duration = Duration::from_secs(15);
const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

/// The bundle's files before scrubbing: (path, text).
#[derive(Default)]
pub struct Bundle {
    pub files: Vec<(String, String)>,
    pub problems: Vec<String>,
}

impl Bundle {
    fn objects<T: Serialize>(&mut self, path: &str, items: &[T]) {
        let mut v = serde_json::to_value(items).unwrap_or_default();
        redact::object(&mut v);
        self.files.push((path.into(), serde_yaml::to_string(&v).unwrap_or_default()));
    }
}

/// Objects of this cluster among a namespace's: named after it, or labelled with it.
fn of_cluster<K: ResourceExt>(items: Vec<K>, name: &str) -> Vec<K> {
    let prefix = format!("{name}-");
    items
        .into_iter()
        .filter(|o| {
            let n = o.name_any();
            n == name || n.starts_with(&prefix) || o.labels().get("etcd_cluster").is_some_and(|c| c == name)
        })
        .collect()
}

pub async fn run(client: &kube::Client, ns: &str, a: &ReportArgs) -> Result<i32> {
    let name = &a.name;
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let cluster = clusters.get(name).await.with_context(|| format!("EtcdCluster {ns}/{name}"))?;
    let mut b = Bundle::default();
    b.objects("objects/etcdcluster.yaml", &[cluster]);

    macro_rules! list {
        ($t:ty, $path:expr, $filter:expr) => {{
            let api: Api<$t> = Api::namespaced(client.clone(), ns);
            match api.list(&ListParams::default()).await {
                Ok(l) => {
                    let items: Vec<$t> = $filter(l.items);
                    b.objects($path, &items);
                    items
                }
                Err(e) => {
                    b.problems.push(format!("{}: {e}", $path));
                    vec![]
                }
            }
        }};
    }
    let service = format!("{name}-client");
    list!(EtcdBackup, "objects/etcdbackups.yaml", |v: Vec<EtcdBackup>| v
        .into_iter()
        .filter(|x| x.spec.cluster_name == *name || x.spec.etcd_endpoints.iter().any(|e| e.contains(&service)))
        .collect());
    list!(EtcdRestore, "objects/etcdrestores.yaml", |v| v);
    list!(Event, "objects/events.yaml", |v| v);
    let pods = list!(Pod, "objects/pods.yaml", |v| of_cluster(v, name));
    list!(PersistentVolumeClaim, "objects/pvcs.yaml", |v| of_cluster(v, name));
    list!(Service, "objects/services.yaml", |v| of_cluster(v, name));
    list!(PodDisruptionBudget, "objects/pdb.yaml", |v| of_cluster(v, name));

    // Member status, as `status -o json` shows it.
    match crate::status::gather::gather(client, ns, name, Duration::from_secs(3)).await {
        Ok(s) => b.files.push(("status.json".into(), serde_json::to_string_pretty(&s)?)),
        Err(e) => b.problems.push(format!("status: {e:#}")),
    }

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in &pods {
        pod_logs(&mut b, &pods_api, p, &format!("logs/{}", p.name_any()), a.tail).await;
    }
    let mut scrub_namespaces = vec![ns.to_string()];
    let (op_api, op_pods) = operator_pods(client, ns, a.operator_namespace.as_deref(), &mut b).await;
    for p in &op_pods {
        let pns = p.namespace().unwrap_or_default();
        if !scrub_namespaces.contains(&pns) {
            scrub_namespaces.push(pns.clone());
        }
        let api = op_api.clone().unwrap_or_else(|| Api::namespaced(client.clone(), &pns));
        pod_logs(&mut b, &api, p, &format!("logs/operator/{pns}/{}", p.name_any()), a.tail).await;
    }

    // Every value of every Secret of the namespaces involved, scrubbed from every file.
    let mut values = vec![];
    for sns in &scrub_namespaces {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), sns);
        match secrets.list(&ListParams::default()).await {
            Ok(l) => {
                for s in l.items {
                    values.extend(s.data.unwrap_or_default().into_values().map(|v| v.0));
                    values.extend(s.string_data.unwrap_or_default().into_values().map(String::into_bytes));
                }
            }
            Err(e) => b.problems.push(format!(
                "Secrets of namespace {sns} could not be listed to scrub their values from logs ({e}); objects are still redacted by field name"
            )),
        }
    }
    let needles = redact::needles(&values);
    drop(values);
    let mut readme = format!(
        "Support bundle of EtcdCluster {ns}/{name}, made by kubectl-etcd {}.\n\
         Secret data is never collected; fields named like passwords, tokens and keys are replaced by {},\n\
         and every value of the Secrets of namespaces {:?} is scrubbed from every file, logs included.\n",
        env!("CARGO_PKG_VERSION"),
        redact::REDACTED,
        scrub_namespaces
    );
    if !b.problems.is_empty() {
        readme.push_str("\nNot collected:\n");
        for p in &b.problems {
            readme.push_str(&format!("- {p}\n"));
        }
    }
    b.files.insert(0, ("README.txt".into(), readme));
    let files: Vec<(String, String)> = b.files.iter().map(|(p, t)| (p.clone(), redact::scrub(t, &needles))).collect();

    let out = a.output.clone().unwrap_or_else(|| format!("report-{name}-{}.tar.gz", crate::status::now()));
    let root = format!("report-{name}");
    write_tar_gz(&out, &root, &files)?;
    eprintln!(
        "wrote {out} ({} files{})",
        files.len(),
        if b.problems.is_empty() {
            String::new()
        } else {
            format!(", {} not collected: see README.txt", b.problems.len())
        }
    );
    Ok(0)
}

/// The current and previous logs of every container of `p`.
async fn pod_logs(b: &mut Bundle, api: &Api<Pod>, p: &Pod, dir: &str, tail: i64) {
    let spec = p.spec.clone().unwrap_or_default();
    let containers: Vec<String> =
        spec.init_containers.iter().flatten().chain(&spec.containers).map(|c| c.name.clone()).collect();
    for c in containers {
        for previous in [false, true] {
            let lp = LogParams { container: Some(c.clone()), previous, tail_lines: Some(tail), ..Default::default() };
            match tokio::time::timeout(LOG_TIMEOUT, api.logs(&p.name_any(), &lp)).await {
                Ok(Ok(text)) => {
                    let suffix = if previous { ".previous" } else { "" };
                    b.files.push((format!("{dir}/{c}{suffix}.log"), text));
                }
                // No previous container is the usual case.
                Ok(Err(_)) if previous => {}
                Ok(Err(e)) => b.problems.push(format!("logs of {}/{c}: {e}", p.name_any())),
                Err(_) => b.problems.push(format!(
                    "logs of {}/{c}: no answer within {}s",
                    p.name_any(),
                    LOG_TIMEOUT.as_secs()
                )),
            }
        }
    }
}

/// The operator's pods: in `--operator-namespace`, else the cluster's namespace, else any the
/// user may list.
async fn operator_pods(
    client: &kube::Client,
    ns: &str,
    op_ns: Option<&str>,
    b: &mut Bundle,
) -> (Option<Api<Pod>>, Vec<Pod>) {
    let lp = ListParams::default().labels(OPERATOR_SELECTOR);
    let namespaced = |n: &str| -> Api<Pod> { Api::namespaced(client.clone(), n) };
    let first = namespaced(op_ns.unwrap_or(ns));
    match first.list(&lp).await {
        Ok(l) if !l.items.is_empty() => return (Some(first), l.items),
        Ok(_) if op_ns.is_some() => {
            b.problems
                .push(format!("no operator pod ({OPERATOR_SELECTOR}) in namespace {}", op_ns.unwrap_or_default()));
            return (None, vec![]);
        }
        Ok(_) => {}
        Err(e) => b.problems.push(format!("operator pods in {}: {e}", op_ns.unwrap_or(ns))),
    }
    let all: Api<Pod> = Api::all(client.clone());
    match all.list(&lp).await {
        Ok(l) if !l.items.is_empty() => (None, l.items),
        Ok(_) => {
            b.problems.push(format!("no operator pod ({OPERATOR_SELECTOR}) found: its logs are not included (an operator run outside the cluster logs elsewhere)"));
            (None, vec![])
        }
        Err(e) => {
            b.problems.push(format!("operator pods (all namespaces): {e}; pass --operator-namespace"));
            (None, vec![])
        }
    }
}

pub fn write_tar_gz(path: &str, root: &str, files: &[(String, String)]) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = crate::status::now().max(0) as u64;
    for (p, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(mtime);
        h.set_cksum();
        tar.append_data(&mut h, format!("{root}/{p}"), text.as_bytes())?;
    }
    tar.into_inner()?.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The whole path: objects redacted by name, then every file scrubbed of Secret values, then
    /// written; no value of a Secret is in the archive, byte for byte.
    #[test]
    fn no_secret_value_leaves_in_the_bundle() {
        let password = "r00t-Pa55-9f8e7d";
        let key_line = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw";
        let secret_values = vec![
            password.as_bytes().to_vec(),
            format!("-----BEGIN PRIVATE KEY-----\n{key_line}\n-----END PRIVATE KEY-----\n").into_bytes(),
        ];
        let pod = serde_json::json!({"kind": "Pod", "spec": {"containers": [{"env": [{"name": "ETCD_ROOT_PASSWORD", "value": "literal-pw-1234"}]}]}});
        let mut b = Bundle::default();
        b.objects("objects/pods.yaml", &[pod]);
        b.files
            .push(("logs/m1/etcd.log".into(), format!("authenticated root with {password}\nloaded key {key_line}\n")));
        let needles = redact::needles(&secret_values);
        let files: Vec<(String, String)> =
            b.files.iter().map(|(p, t)| (p.clone(), redact::scrub(t, &needles))).collect();
        let dir = std::env::temp_dir().join(format!("kubectl-etcd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.tar.gz");
        write_tar_gz(path.to_str().unwrap(), "report-x", &files).unwrap();
        let mut raw = vec![];
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw);
        for leaked in [password, key_line, "literal-pw-1234"] {
            assert!(!text.contains(leaked), "{leaked} is in the bundle");
        }
        assert!(text.contains("report-x/logs/m1/etcd.log") && text.contains("authenticated root with [REDACTED]"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
