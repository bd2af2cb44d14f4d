//! The Helm chart `charts/etcd-operator` against the operator's own install manifests, so that the
//! two cannot drift: `helm template` for a setting renders the same objects as `etcd-operator
//! manifests` for the same setting: RBAC rules compared as sets of (group, resource, verb, name),
//! every other field of the ServiceAccount, bindings, Deployment and monitoring objects compared
//! as is (the chart may only add labels). Also: `helm lint --strict`, the values `manifests` has
//! no flag for, and the chart's generated files (`crds/`, `files/`) against what the operator
//! generates now (`UPDATE_CHART=1` rewrites them).
//!
//! Needs no cluster: the operator binary (`cargo build -p etcd-operator`, or `$ETCD_OPERATOR_BIN`)
//! and Helm (`$HELM`, see `tests/helm/mod.rs`). Every test name starts with `helm_chart_`:
//! `hack/test.sh` runs this file with the unit tests and skips these names in its cluster runs.

mod common;
mod helm;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::{Value, json};

const NS: &str = "etcd";
const IMAGE_SET: [&str; 2] = ["image.repository=registry.example/etcd-operator", "image.tag=t1"];
const IMAGE: &str = "registry.example/etcd-operator:t1";

fn ok<T>(r: anyhow::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e:#}"))
}

/// `etcd-operator manifests --no-crds --namespace etcd ARGS`, without the Namespace (which Helm
/// does not own: `helm install --create-namespace`).
fn manifests(args: &[&str]) -> Vec<Value> {
    let mut c = Command::new(common::operator_bin());
    c.args(["manifests", "--no-crds", "--namespace", NS]).args(args);
    let docs = ok(helm::yaml_docs(&ok(helm::output(&mut c))));
    docs.into_iter().filter(|o| o["kind"] != "Namespace").collect()
}

fn chart(set: &[&str]) -> Vec<Value> {
    ok(helm::template(NS, set))
}

fn with_image<'a>(set: &[&'a str]) -> Vec<&'a str> {
    [&IMAGE_SET[..], set].concat()
}

fn key(o: &Value) -> String {
    let m = &o["metadata"];
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap_or("?"),
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or("?")
    )
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", objs.iter().map(key).collect::<Vec<_>>()))
}

/// A role's rules as atoms: (apiGroup, resource, verb, resourceName or "*any*").
fn rule_set(rules: &Value) -> BTreeSet<(String, String, String, String)> {
    let strs = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().map(|s| s.as_str().expect("a string").to_string()).collect()
    };
    let mut set = BTreeSet::new();
    for r in rules.as_array().expect("rules") {
        let fields: BTreeSet<&str> = r.as_object().expect("a rule is an object").keys().map(String::as_str).collect();
        let known = BTreeSet::from(["apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"]);
        assert!(fields.is_subset(&known), "{r}");
        // A non-resource URL (the metrics reader's `/metrics`) as the resource `url:<path>`.
        for url in strs(&r["nonResourceURLs"]) {
            for v in strs(&r["verbs"]) {
                set.insert((String::new(), format!("url:{url}"), v, "*any*".to_string()));
            }
        }
        let names = if r["resourceNames"].is_null() { vec!["*any*".to_string()] } else { strs(&r["resourceNames"]) };
        for g in strs(&r["apiGroups"]) {
            for res in strs(&r["resources"]) {
                for v in strs(&r["verbs"]) {
                    for n in &names {
                        set.insert((g.clone(), res.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    set
}

/// Every label of `want` is on `have`, with the same value.
fn assert_labels_include(have: &Value, want: &Value, what: &str) {
    for (k, v) in want.as_object().into_iter().flatten() {
        assert_eq!(&have[k], v, "{what}: label {k} (has {have})");
    }
}

/// The chart's objects are the manifests' objects (see the file's doc).
fn assert_same(chart: &[Value], manifests: &[Value], setting: &str) {
    let c: BTreeMap<String, &Value> = chart.iter().map(|o| (key(o), o)).collect();
    let m: BTreeMap<String, &Value> = manifests.iter().map(|o| (key(o), o)).collect();
    assert_eq!(c.keys().collect::<Vec<_>>(), m.keys().collect::<Vec<_>>(), "{setting}: the objects differ");
    for (k, want) in m {
        let what = format!("{setting}: {k}");
        let mut have = c[&k].clone();
        let mut want = want.clone();
        assert_labels_include(&have["metadata"]["labels"], &want["metadata"]["labels"], &what);
        for o in [&mut have, &mut want] {
            o.as_object_mut().expect("a Kubernetes object is an object").remove("metadata");
        }
        if k.starts_with("Role ") || k.starts_with("ClusterRole ") {
            let (h, w) = (rule_set(&have["rules"]), rule_set(&want["rules"]));
            assert!(
                h == w,
                "{what}: the chart's rules differ from rbac.rs (`etcd-operator manifests`); \
                 (group, resource, verb, name) only in the chart: {:?}; only in rbac.rs: {:?}",
                h.difference(&w).collect::<Vec<_>>(),
                w.difference(&h).collect::<Vec<_>>()
            );
            have["rules"] = Value::Null;
            want["rules"] = Value::Null;
        }
        if k.starts_with("Deployment ") {
            let labels = &want["spec"]["template"]["metadata"]["labels"];
            assert_labels_include(&have["spec"]["template"]["metadata"]["labels"], labels, &what);
            have["spec"]["template"]["metadata"]["labels"] = labels.clone();
        }
        assert!(
            have == want,
            "{what} differs from `etcd-operator manifests`:\nchart:\n{}\nmanifests:\n{}",
            serde_yaml::to_string(&have).expect("JSON values print as YAML"),
            serde_yaml::to_string(&want).expect("JSON values print as YAML")
        );
    }
}

#[test]
fn helm_chart_defaults_match_manifests() {
    // No image given: the chart's appVersion and the operator's version name the same image.
    assert_same(&chart(&[]), &manifests(&[]), "defaults");
}

#[test]
fn helm_chart_namespaced_install_matches_manifests() {
    let objs = chart(&with_image(&[]));
    assert_same(&objs, &manifests(&["--image", IMAGE]), "namespaced");
    let role = find(&objs, "Role", "etcd-operator");
    assert_eq!(role["metadata"]["namespace"], NS);
}

#[test]
fn helm_chart_cluster_wide_install_matches_manifests() {
    let objs = chart(&with_image(&["clusterWide=true"]));
    assert_same(&objs, &manifests(&["--image", IMAGE, "--cluster-wide"]), "cluster-wide");
    assert!(!objs.iter().any(|o| o["kind"] == "Role"), "a cluster-wide install has no Role");
}

#[test]
fn helm_chart_two_replicas_match_manifests() {
    // Leader election is on by default in the binary; neither passes a flag for it.
    let objs = chart(&with_image(&["replicas=2"]));
    assert_same(&objs, &manifests(&["--image", IMAGE, "--replicas", "2"]), "replicas 2");
    assert_eq!(find(&objs, "Deployment", "etcd-operator")["spec"]["replicas"], 2);
}

#[test]
fn helm_chart_monitoring_objects_match_manifests() {
    let objs = chart(&with_image(&["monitoring.enabled=true"]));
    assert_same(&objs, &manifests(&["--image", IMAGE, "--monitoring"]), "monitoring");
    for kind in ["PodMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(objs.iter().any(|o| o["kind"] == kind), "no {kind}");
    }
    let wide = chart(&with_image(&["monitoring.enabled=true", "clusterWide=true"]));
    assert_same(&wide, &manifests(&["--image", IMAGE, "--monitoring", "--cluster-wide"]), "monitoring, cluster-wide");
    assert!(!chart(&with_image(&[])).iter().any(|o| o["kind"] == "PodMonitor"), "monitoring is off by default");
}

/// `metrics.auth=none` is `manifests --metrics-auth none`: no flag, no review permissions, no
/// metrics reader, a PodMonitor without a token.
#[test]
fn helm_chart_open_metrics_match_manifests() {
    let objs = chart(&with_image(&["metrics.auth=none", "monitoring.enabled=true"]));
    assert_same(&objs, &manifests(&["--image", IMAGE, "--metrics-auth", "none", "--monitoring"]), "metrics.auth=none");
    assert!(container(&objs).get("args").is_none());
    assert!(!objs.iter().any(|o| o["metadata"]["name"] == "etcd-operator-metrics-reader"));
}

/// The operator container of a rendering.
fn container(objs: &[Value]) -> Value {
    find(objs, "Deployment", "etcd-operator")["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The binary accepts `args` the way the Deployment passes them (clap stops at `--help` only after
/// every argument before it parsed).
fn assert_operator_accepts(args: &[Value]) {
    let args: Vec<&str> = args.iter().map(|a| a.as_str().expect("container args are strings")).collect();
    let mut c = Command::new(common::operator_bin());
    c.args(&args).arg("--help");
    ok(helm::output(&mut c));
}

#[test]
fn helm_chart_values_beyond_manifests_land_in_the_deployment() {
    let set = with_image(&[
        "logFormat=json",
        "crds.operatorInstall=false",
        "nodeSelector.disk=ssd",
        "tolerations[0].key=dedicated,tolerations[0].operator=Exists",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=disk,affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "podAnnotations.team=storage",
        "imagePullSecrets[0].name=pull",
        "image.pullPolicy=Always",
        "resources.limits.memory=1Gi",
    ]);
    let objs = chart(&set);
    let c = container(&objs);
    assert_eq!(c["args"], json!(["--log-format=json", "--metrics-auth=kubernetes", "--create-crd=false"]));
    assert_operator_accepts(c["args"].as_array().unwrap());
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        c["resources"],
        json!({ "limits": { "memory": "1Gi" }, "requests": { "cpu": "20m", "memory": "32Mi" } })
    );
    let pod = &find(&objs, "Deployment", "etcd-operator")["spec"]["template"];
    assert_eq!(pod["metadata"]["annotations"], json!({ "team": "storage" }));
    assert_eq!(pod["spec"]["nodeSelector"], json!({ "disk": "ssd" }));
    assert_eq!(pod["spec"]["tolerations"], json!([{ "key": "dedicated", "operator": "Exists" }]));
    let term = json!({ "matchExpressions": [{ "key": "disk", "operator": "Exists" }] });
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([term])
    );
    assert_eq!(pod["spec"]["imagePullSecrets"], json!([{ "name": "pull" }]));

    // Cluster-wide's flag, in the Go spelling manifests uses, is accepted too.
    let wide = container(&chart(&with_image(&["clusterWide=true", "logFormat=text"])));
    assert_eq!(wide["args"], json!(["-cluster-wide", "--log-format=text", "--metrics-auth=kubernetes"]));
    assert_operator_accepts(wide["args"].as_array().unwrap());
}

#[test]
fn helm_chart_watch_namespace_puts_the_role_there() {
    let objs = chart(&with_image(&["watchNamespace=apps", "monitoring.enabled=true"]));
    let role = find(&objs, "Role", "etcd-operator");
    assert_eq!(role["metadata"]["namespace"], "apps");
    let shipped = find(&manifests(&[]), "Role", "etcd-operator").clone();
    assert!(rule_set(&role["rules"]) == rule_set(&shipped["rules"]), "the Role's rules differ from rbac.rs");
    let binding = find(&objs, "RoleBinding", "etcd-operator");
    assert_eq!(binding["metadata"]["namespace"], "apps");
    assert_eq!(binding["subjects"], json!([{ "kind": "ServiceAccount", "name": "etcd-operator", "namespace": NS }]));
    let c = container(&objs);
    assert_eq!(c["args"], json!(["--namespace=apps", "--metrics-auth=kubernetes"]));
    assert_operator_accepts(c["args"].as_array().unwrap());
    let members = find(&objs, "PodMonitor", "etcd-operator-members");
    assert_eq!(members["spec"]["namespaceSelector"], json!({ "matchNames": ["apps"] }));
    // The release namespace itself is the default: no flag.
    assert_eq!(container(&chart(&with_image(&["watchNamespace=etcd"])))["args"], json!(["--metrics-auth=kubernetes"]));
}

#[test]
fn helm_chart_refuses_contradicting_values() {
    for (set, says) in [
        ("clusterWide=true,watchNamespace=apps", "watchNamespace is for a namespaced operator"),
        ("logFormat=xml", "logFormat must be"),
        ("metrics.auth=basic", "metrics.auth must be"),
    ] {
        let err = helm::template(NS, &[set]).expect_err(set);
        assert!(format!("{err:#}").contains(says), "{set}: {err:#}");
    }
}

#[test]
fn helm_chart_lint_is_clean() {
    for set in ["", "clusterWide=true,monitoring.enabled=true,replicas=2"] {
        let mut c = ok(helm::helm());
        c.args(["lint", "--strict"]).arg(helm::chart_dir());
        if !set.is_empty() {
            c.args(["--set", set]);
        }
        let out = ok(helm::output(&mut c));
        assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{set}: {out}");
        assert!(!out.contains("[WARNING]") && !out.contains("[ERROR]"), "{set}: {out}");
    }
}

const GENERATED: &str = "Generated by `UPDATE_CHART=1 cargo test -p e2e --test helm_chart`; do not edit.";

/// The chart's generated files as the operator generates them now: (path in the chart, text).
fn generated_files() -> Vec<(String, String)> {
    let mut files = vec![];
    let crds = ok(helm::output(Command::new(common::operator_bin()).arg("crds")));
    // The documents as text: split at `---` lines.
    let mut docs = vec![String::new()];
    for line in crds.lines() {
        if line == "---" {
            docs.push(String::new());
        } else {
            let d = docs.last_mut().expect("docs starts with one document");
            d.push_str(line);
            d.push('\n');
        }
    }
    for doc in docs.iter().filter(|d| !d.trim().is_empty()) {
        let v: Value = serde_yaml::from_str(doc).expect("the chart renders YAML");
        let name = v["metadata"]["name"].as_str().expect("a CRD name");
        files.push((format!("crds/{name}.yaml"), format!("# {GENERATED} From `etcd-operator crds`.\n---\n{doc}")));
    }
    let monitoring = manifests(&["--monitoring"]);
    let rules = serde_yaml::to_string(&find(&monitoring, "PrometheusRule", "etcd-operator")["spec"])
        .expect("JSON values print as YAML");
    files.push((
        "files/prometheus-rules.yaml".into(),
        format!("# {GENERATED}\n# The PrometheusRule's spec of `etcd-operator manifests --monitoring`.\n{rules}"),
    ));
    let dashboard = &find(&monitoring, "ConfigMap", "etcd-operator-dashboard")["data"]["etcd-operator.json"];
    files.push(("files/grafana-dashboard.json".into(), dashboard.as_str().expect("the dashboard").to_string()));
    files
}

#[test]
fn helm_chart_generated_files_are_current() {
    let dir = helm::chart_dir();
    let update = std::env::var("UPDATE_CHART").is_ok_and(|v| v == "1");
    let files = generated_files();
    let mut stale = vec![];
    for (path, text) in &files {
        let file = dir.join(path);
        let have = std::fs::read_to_string(&file).unwrap_or_default();
        // The rules file is YAML re-serialised here: compared as data, not text.
        let same = if path.ends_with(".yaml") && path.starts_with("files/") {
            serde_yaml::from_str::<Value>(&have).ok() == serde_yaml::from_str::<Value>(text).ok()
        } else {
            have == *text
        };
        if !same && update {
            std::fs::write(&file, text).unwrap();
        } else if !same {
            stale.push(path.clone());
        }
    }
    let want: BTreeSet<String> = files.iter().map(|(p, _)| p.clone()).filter(|p| p.starts_with("crds/")).collect();
    for e in std::fs::read_dir(dir.join("crds")).unwrap() {
        let p = format!("crds/{}", e.unwrap().file_name().to_string_lossy());
        if !want.contains(&p) {
            if update {
                std::fs::remove_file(dir.join(&p)).unwrap();
            } else {
                stale.push(format!("{p} (no such CRD)"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "charts/etcd-operator/{{{}}} differ from what the operator generates; regenerate them with \
         `UPDATE_CHART=1 cargo test -p e2e --test helm_chart helm_chart_generated_files_are_current`",
        stale.join(", ")
    );
}
