//! Events (`events.k8s.io/v1`) about the objects under test.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::Value;

use crate::TestNamespace;

/// Events of the namespace about `name`, as (reason, message).
pub fn events_for(ns: &TestNamespace, name: &str) -> Result<Vec<(String, String)>> {
    let evs = ns.json(&["get", "events.v1.events.k8s.io"])?;
    Ok(evs["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["regarding"]["name"] == name)
        .map(|e| (e["reason"].as_str().unwrap_or("").to_string(), e["note"].as_str().unwrap_or("").to_string()))
        .collect())
}

/// One `events.k8s.io/v1` Event about an EtcdCluster.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub name: String,
    pub type_: String,
    pub reason: String,
    pub note: String,
    /// `action`: what the operator was doing (for a condition change, the condition's type).
    pub action: String,
    /// `reportingInstance`: the operator pod that published it (empty for a process).
    pub reporter: String,
    /// `related.name`: the member pod the Event concerns, if any.
    pub related: String,
    /// When it was last observed: `series.lastObservedTime` for a folded series, else
    /// `eventTime` (RFC 3339 with microseconds, so the strings sort by time).
    pub last: String,
    pub count: i64,
}

/// Events about the EtcdCluster `name`, oldest (by last observation) first.
pub fn events_v1(ns: &TestNamespace, name: &str) -> Result<Vec<EventRecord>> {
    let evs = ns.json(&["get", "events.v1.events.k8s.io"])?;
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out: Vec<EventRecord> = evs["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["regarding"]["name"] == name && e["regarding"]["kind"] == "EtcdCluster")
        .map(|e| EventRecord {
            name: s(&e["metadata"]["name"]),
            type_: s(&e["type"]),
            reason: s(&e["reason"]),
            note: s(&e["note"]),
            action: s(&e["action"]),
            reporter: s(&e["reportingInstance"]),
            related: s(&e["related"]["name"]),
            last: e["series"]["lastObservedTime"].as_str().map(str::to_string).unwrap_or_else(|| s(&e["eventTime"])),
            count: e["series"]["count"].as_i64().unwrap_or(1),
        })
        .collect();
    out.sort_by(|a, b| a.last.cmp(&b.last));
    Ok(out)
}

/// Events of `name` by Event name → when last observed, to tell later ones apart.
pub fn event_marks(ns: &TestNamespace, name: &str) -> Result<BTreeMap<String, String>> {
    Ok(events_v1(ns, name)?.into_iter().map(|e| (e.name, e.last)).collect())
}

/// Events of `name` that are new or were observed again since `before` (from `event_marks`).
pub fn events_since(ns: &TestNamespace, name: &str, before: &BTreeMap<String, String>) -> Result<Vec<EventRecord>> {
    Ok(events_v1(ns, name)?.into_iter().filter(|e| before.get(&e.name) != Some(&e.last)).collect())
}
