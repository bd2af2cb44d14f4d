//! The local cluster's Prometheus (`MONITORING=1 hack/cluster.sh up`: the Prometheus Operator,
//! and one Prometheus that scrapes every PodMonitor and evaluates every PrometheusRule of every
//! namespace), read over its HTTP API as Grafana and an alert router read it.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::Kubectl;

/// Namespace and Service of the local cluster's Prometheus (hack/cluster.sh `start_monitoring`).
pub const PROMETHEUS_NAMESPACE: &str = "monitoring";
pub const PROMETHEUS_SERVICE: &str = "prometheus-e2e";

/// One series of an instant query: its labels and its value.
#[derive(Clone, Debug)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or("")
    }
}

/// One alert as Prometheus holds it: `pending` (its expression is true, not yet for its `for`)
/// or `firing`.
#[derive(Clone, Debug)]
pub struct Alert {
    /// The rule file of its group: the Prometheus Operator names it after the PrometheusRule's
    /// namespace and name, so a test tells its own rules from other namespaces'.
    pub file: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub state: String,
    /// When its expression first held (RFC 3339, as Prometheus prints it).
    pub active_at: String,
}

impl Alert {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or("")
    }
}

pub struct Prometheus {
    pub base: String,
    agent: ureq::Agent,
}

impl Prometheus {
    /// The local cluster's Prometheus, by its Service's ClusterIP (this machine is the node:
    /// kube-proxy routes it), once it says it is ready.
    pub fn find(kubectl: &Kubectl) -> Result<Prometheus> {
        let svc = kubectl
            .json(&["-n", PROMETHEUS_NAMESPACE, "get", "service", PROMETHEUS_SERVICE])
            .context("no Prometheus in the local cluster: start it with MONITORING=1 hack/cluster.sh up")?;
        let ip = svc["spec"]["clusterIP"].as_str().context("the Prometheus Service has no clusterIP")?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .timeout_connect(Some(Duration::from_secs(5)))
            .build();
        let p = Prometheus { base: format!("http://{ip}:9090"), agent: ureq::Agent::new_with_config(config) };
        let (status, body) = p.get("/-/ready")?;
        ensure!(status == 200, "Prometheus at {} is not ready ({status}): {body}", p.base);
        Ok(p)
    }

    fn get(&self, path_and_query: &str) -> Result<(u16, String)> {
        let url = format!("{}{path_and_query}", self.base);
        let resp = self.agent.get(&url).call().with_context(|| format!("GET {url}"))?;
        let status = resp.status().as_u16();
        let mut body = String::new();
        resp.into_body()
            .into_with_config()
            .limit(64 << 20)
            .reader()
            .read_to_string(&mut body)
            .with_context(|| format!("GET {url}: reading the body"))?;
        Ok((status, body))
    }

    /// `GET /api/v1/<what>`: its `data`, or the error Prometheus gave.
    fn api(&self, path_and_query: &str) -> Result<Value> {
        let (status, body) = self.get(&format!("/api/v1/{path_and_query}"))?;
        let v: Value = serde_json::from_str(&body).with_context(|| format!("{path_and_query} ({status}): {body}"))?;
        if v["status"] != "success" {
            bail!("Prometheus refused {path_and_query} ({status}): {} {}", v["errorType"], v["error"]);
        }
        Ok(v["data"].clone())
    }

    /// An instant query, now. A query Prometheus refuses (a syntax error) is an error; an empty
    /// result is an empty vector.
    pub fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        let data = self.api(&format!("query?query={}", encode(expr))).with_context(|| format!("query `{expr}`"))?;
        let value = |v: &Value| -> Result<f64> {
            let s = v[1].as_str().context("a sample value")?;
            Ok(match s {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                s => s.parse().with_context(|| format!("sample value {s}"))?,
            })
        };
        match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| Ok(Sample { labels: labels(&r["metric"]), value: value(&r["value"])? }))
                .collect(),
            Some("scalar") => Ok(vec![Sample { labels: BTreeMap::new(), value: value(&data["result"])? }]),
            other => bail!("query `{expr}`: result type {other:?}"),
        }
    }

    /// Every alert Prometheus holds now, pending or firing, with the rule file it comes from
    /// (read from `/api/v1/rules`: one Prometheus evaluates every namespace's PrometheusRule,
    /// and each rule matches series of every namespace).
    pub fn alerts(&self) -> Result<Vec<Alert>> {
        let data = self.api("rules?type=alert")?;
        let mut out = vec![];
        for g in data["groups"].as_array().into_iter().flatten() {
            let file = g["file"].as_str().unwrap_or_default();
            for r in g["rules"].as_array().into_iter().flatten() {
                for a in r["alerts"].as_array().into_iter().flatten() {
                    let labels = labels(&a["labels"]);
                    out.push(Alert {
                        file: file.to_string(),
                        name: labels.get("alertname").cloned().unwrap_or_default(),
                        labels,
                        state: a["state"].as_str().unwrap_or_default().to_string(),
                        active_at: a["activeAt"].as_str().unwrap_or_default().to_string(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The scrape targets Prometheus has now (`activeTargets`): labels after relabelling,
    /// `health` ("up", "down", "unknown") and the last error.
    pub fn targets(&self) -> Result<Vec<Value>> {
        let data = self.api("targets?state=active")?;
        Ok(data["activeTargets"].as_array().cloned().unwrap_or_default())
    }

    /// The names of the rule groups loaded from PrometheusRules, as `<file>;<group>`.
    pub fn rule_groups(&self) -> Result<Vec<(String, String)>> {
        let data = self.api("rules")?;
        Ok(data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                (g["file"].as_str().unwrap_or_default().to_string(), g["name"].as_str().unwrap_or_default().to_string())
            })
            .collect())
    }
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()
}

/// Percent-encoding of a query parameter (everything but RFC 3986's unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn a_query_is_encoded_whole() {
        assert_eq!(encode(r#"up{job="a b"} == 1"#), "up%7Bjob%3D%22a%20b%22%7D%20%3D%3D%201");
    }
}
