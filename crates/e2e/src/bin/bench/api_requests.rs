//! The Kubernetes API requests of `--only idle`: the operator's own, by verb and resource, from
//! its JSON log (kube-client's request trace), and the apiserver's `apiserver_request_total`
//! counters, labelled the same way.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};
use e2e::Kubectl;
use serde_json::Value;

/// (verb as the apiserver labels it, `resource[.group][/subresource]`)
pub(crate) type Key = (String, String);

// --- the operator's requests, from its JSON log ------------------------------------------------

pub(crate) fn file_len(p: &Path) -> Result<u64> {
    Ok(std::fs::metadata(p).with_context(|| format!("{}", p.display()))?.len())
}

/// Requests the operator logged between two offsets of its log (whole lines only).
pub(crate) fn requests(log: &Path, from: u64, to: u64) -> Result<BTreeMap<Key, u64>> {
    let mut f = std::fs::File::open(log)?;
    f.seek(SeekFrom::Start(from))?;
    let mut buf = vec![0; to.saturating_sub(from) as usize];
    f.read_exact(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if !line.contains("\"requesting\"") {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        if v["message"] != "requesting" {
            continue;
        }
        let span = std::iter::once(&v["span"])
            .chain(v["spans"].as_array().into_iter().flatten())
            .find(|s| s["http.method"].is_string());
        let Some(span) = span else { continue };
        let key = classify(span["http.method"].as_str().unwrap_or(""), span["http.url"].as_str().unwrap_or(""));
        *out.entry(key).or_default() += 1;
    }
    Ok(out)
}

/// `resource[.group][/subresource]`, as the table shows it.
fn resource_name(resource: &str, group: &str, sub: &str) -> String {
    let mut s = resource.to_string();
    if !group.is_empty() {
        s = format!("{s}.{group}");
    }
    if !sub.is_empty() {
        s = format!("{s}/{sub}");
    }
    s
}

/// An HTTP request of the Kubernetes API → the apiserver's verb and the resource.
fn classify(method: &str, url: &str) -> Key {
    let path_query = match url.find("://") {
        Some(i) => {
            let rest = &url[i + 3..];
            &rest[rest.find('/').unwrap_or(rest.len())..]
        }
        None => url,
    };
    let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
    let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] => ("", rest),
        ["apis", g, _v, rest @ ..] => (*g, rest),
        _ => return (method.to_string(), format!("(non-resource {path})")),
    };
    let rest = if rest.len() >= 3 && rest[0] == "namespaces" { &rest[2..] } else { rest };
    let resource = rest.first().copied().unwrap_or("");
    let named = rest.len() >= 2;
    let sub = rest.get(2..).map(|s| s.join("/")).unwrap_or_default();
    let verb = match method {
        "GET" if watch => "WATCH",
        "GET" if !named => "LIST",
        "DELETE" if !named => "DELETECOLLECTION",
        m => m,
    };
    (verb.to_string(), resource_name(resource, group, &sub))
}

// --- the apiserver's counters ------------------------------------------------------------------

/// `apiserver_request_total` summed over code, scope, version, component and dry_run.
pub(crate) fn server_totals(k: &Kubectl) -> Result<BTreeMap<Key, f64>> {
    let text = k.run(&["get", "--raw", "/metrics"]).context("reading the apiserver's /metrics")?;
    Ok(parse_request_totals(&text))
}

fn parse_request_totals(text: &str) -> BTreeMap<Key, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let l = parse_labels(labels);
        let get = |k: &str| l.get(k).map(String::as_str).unwrap_or("");
        let resource = if get("resource").is_empty() {
            "(non-resource)".to_string()
        } else {
            resource_name(get("resource"), get("group"), get("subresource"))
        };
        *out.entry((get("verb").to_string(), resource)).or_default() += value;
    }
    out
}

/// `a="x",b="y"` → {a: x, b: y} (Prometheus text format, `\"` and `\\` escapes).
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect::<String>().trim_start_matches(',').into();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut val = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => val.extend(chars.next()),
                '"' => break,
                c => val.push(c),
            }
        }
        out.insert(key, val);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_like_the_apiserver_does() {
        let c = |m: &str, u: &str| {
            let (v, r) = classify(m, u);
            format!("{v} {r}")
        };
        assert_eq!(
            c("GET", "https://10.0.0.1:6443/api/v1/namespaces/ns/pods?labelSelector=app&watch=true&timeoutSeconds=290"),
            "WATCH pods"
        );
        assert_eq!(c("GET", "/api/v1/namespaces/ns/pods?labelSelector=app"), "LIST pods");
        assert_eq!(
            c("GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/etcd-operator"),
            "GET leases.coordination.k8s.io"
        );
        assert_eq!(
            c("PATCH", "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/a/status"),
            "PATCH etcdclusters.etcd.database.coreos.com/status"
        );
        assert_eq!(
            c("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x"),
            "GET customresourcedefinitions.apiextensions.k8s.io"
        );
        assert_eq!(c("GET", "/api/v1/namespaces/ns"), "GET namespaces");
        assert_eq!(c("GET", "/version"), "GET (non-resource /version)");
    }

    #[test]
    fn apiserver_counters_are_summed_by_verb_and_resource() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="etcd.database.coreos.com",resource="etcdclusters",scope="resource",subresource="status",verb="PATCH",version="v1beta2"} 1
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 9
"#;
        let m = parse_request_totals(text);
        assert_eq!(m[&("LIST".into(), "pods".into())], 7.0);
        assert_eq!(m[&("PATCH".into(), "etcdclusters.etcd.database.coreos.com/status".into())], 1.0);
        assert_eq!(m[&("GET".into(), "(non-resource)".into())], 9.0);
    }

    #[test]
    fn request_lines_of_the_json_log_are_counted() {
        let dir = std::env::temp_dir().join(format!("idle-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("op.log");
        let lines = [
            r#"{"timestamp":"t","level":"DEBUG","message":"requesting","span":{"http.method":"GET","http.url":"/api/v1/namespaces/n/pods?watch=true","name":"HTTP"},"spans":[]}"#,
            r#"{"timestamp":"t","level":"DEBUG","message":"stream closed","span":{"http.method":"GET","http.url":"/api/v1/namespaces/n/pods?watch=true","name":"HTTP"}}"#,
            r#"{"timestamp":"t","level":"DEBUG","message":"requesting","spans":[{"name":"reconcile"},{"http.method":"PUT","http.url":"/apis/coordination.k8s.io/v1/namespaces/n/leases/x","name":"HTTP"}]}"#,
            r#"{"timestamp":"t","level":"INFO","message":"watch caches synced"}"#,
        ];
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        let r = requests(&log, 0, file_len(&log).unwrap()).unwrap();
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[&("WATCH".into(), "pods".into())], 1);
        assert_eq!(r[&("PUT".into(), "leases.coordination.k8s.io".into())], 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
