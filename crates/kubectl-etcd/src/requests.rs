//! `switchover`, `fence` and `unfence`: each writes a request annotation on the EtcdCluster
//! (`etcd_operator_api::SWITCHOVER_ANNOTATION`, `FENCED_MEMBERS_ANNOTATION`) that the operator
//! carries out, so it survives an operator restart and leaves Events; then waits for the
//! operator's answer in the `Switchover` / `Fenced` conditions and the member pod's labels.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use etcd_operator_api::cluster::EtcdCluster;
use etcd_operator_api::{
    Condition, DEFRAGMENT_ANNOTATION, FENCED_MEMBERS_ANNOTATION, HIBERNATION_ANNOTATION, SERVING_LABEL,
    SWITCHOVER_ANNOTATION,
};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::cli::{DefragArgs, FenceArgs, SwitchoverArgs, WaitArgs};

const POLL: Duration = Duration::from_millis(500);

fn condition<'a>(c: &'a EtcdCluster, type_: &str) -> Option<&'a Condition> {
    etcd_operator_api::condition::find(&c.status.as_ref()?.conditions, type_)
}

pub async fn switchover(client: &kube::Client, ns: &str, a: &SwitchoverArgs) -> Result<i32> {
    let api: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let before = api.get(&a.name).await.with_context(|| format!("EtcdCluster {ns}/{}", a.name))?;
    let key = |c: Option<&Condition>| c.map(|x| (x.reason.clone(), x.message.clone(), x.last_transition_time.clone()));
    let before = key(condition(&before, "Switchover"));
    let patch =
        serde_json::json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: a.to.clone().unwrap_or_default()}}});
    api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let target = a.to.as_deref().unwrap_or("the most caught-up voter");
    println!("etcdcluster {ns}/{}: switchover to {target} asked for", a.name);
    if a.wait == 0 {
        return Ok(0);
    }
    let deadline = Instant::now() + Duration::from_secs(a.wait);
    let mut gone_at: Option<Instant> = None;
    loop {
        let c = api.get(&a.name).await?;
        let cond = condition(&c, "Switchover");
        // The operator drops the request, then writes the outcome with the status: the answer
        // is the condition once it is no longer Pending and has changed since the request (or
        // has not for a few seconds: asked for the member that leads already, nothing changes).
        if !c.annotations().contains_key(SWITCHOVER_ANNOTATION) {
            let since = *gone_at.get_or_insert_with(Instant::now);
            if let Some(cond) = cond.filter(|x| x.reason != "Pending")
                && (key(Some(cond)) != before || since.elapsed() > Duration::from_secs(3))
            {
                println!("{}: {}", cond.reason, cond.message);
                return Ok(if cond.status == "True" { 0 } else { 1 });
            }
        }
        if Instant::now() >= deadline {
            let pending =
                cond.map(|x| format!("{}: {}", x.reason, x.message)).unwrap_or_else(|| "no answer yet".into());
            eprintln!(
                "not done within {} s ({pending}); the request stays on the EtcdCluster (remove annotation {SWITCHOVER_ANNOTATION} to call it off)",
                a.wait
            );
            return Ok(2);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The fenced-members list after adding (`fence`) or removing `member`.
pub fn edited(current: Option<&str>, member: &str, fence: bool) -> Result<Vec<String>> {
    let mut names: Vec<String> = match current.map(str::trim).filter(|v| !v.is_empty()) {
        None => Vec::new(),
        Some(v) => serde_json::from_str(v)
            .with_context(|| format!("annotation {FENCED_MEMBERS_ANNOTATION} is not a JSON list: {v}"))?,
    };
    names.retain(|n| n != member);
    if fence {
        names.push(member.to_string());
    }
    Ok(names)
}

pub async fn fence(client: &kube::Client, ns: &str, a: &FenceArgs, fence: bool) -> Result<i32> {
    let api: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let c = api.get(&a.name).await.with_context(|| format!("EtcdCluster {ns}/{}", a.name))?;
    let names = edited(c.annotations().get(FENCED_MEMBERS_ANNOTATION).map(String::as_str), &a.member, fence)?;
    // With the resourceVersion read: a concurrent edit of the list makes this one fail, not
    // drop the other's name.
    let value = if names.is_empty() { serde_json::Value::Null } else { serde_json::to_string(&names)?.into() };
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": c.resource_version(),
        "annotations": {FENCED_MEMBERS_ANNOTATION: value},
    }});
    api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("the EtcdCluster changed meanwhile; run the command again")?;
    let verb = if fence { "fence" } else { "unfence" };
    println!("etcdcluster {ns}/{}: {verb} {} asked for", a.name, a.member);
    if a.wait == 0 {
        return Ok(0);
    }
    let deadline = Instant::now() + Duration::from_secs(a.wait);
    loop {
        let serving = pods.get_opt(&a.member).await?.and_then(|p| p.labels().get(SERVING_LABEL).cloned());
        if serving.as_deref() == Some(if fence { "false" } else { "true" }) {
            println!(
                "{}: {}",
                a.member,
                if fence { "out of the client Service (still a voting member)" } else { "back in the client Service" }
            );
            return Ok(0);
        }
        let c = api.get(&a.name).await?;
        if fence
            && let Some(cond) = condition(&c, "Fenced").filter(|x| x.reason == "FenceRefused")
            && cond.message.contains(&format!("{}:", a.member))
        {
            eprintln!("refused: {}", cond.message);
            // The refused name stays out of the list: asking again later is a new request.
            let names = edited(c.annotations().get(FENCED_MEMBERS_ANNOTATION).map(String::as_str), &a.member, false)?;
            let value = if names.is_empty() { serde_json::Value::Null } else { serde_json::to_string(&names)?.into() };
            let patch = serde_json::json!({"metadata": {"annotations": {FENCED_MEMBERS_ANNOTATION: value}}});
            api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            return Ok(1);
        }
        if Instant::now() >= deadline {
            eprintln!("not done within {} s; the request stays on the EtcdCluster", a.wait);
            return Ok(2);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `hibernate` (`on`) or `resume` (`off`): writes the annotation, then waits until no member
/// runs (the `Hibernated` condition is True) or, resumed, until every member is ready again.
pub async fn hibernate(client: &kube::Client, ns: &str, a: &WaitArgs, on: bool) -> Result<i32> {
    let api: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    api.get(&a.name).await.with_context(|| format!("EtcdCluster {ns}/{}", a.name))?;
    let value = if on { "on" } else { "off" };
    let patch = serde_json::json!({"metadata": {"annotations": {HIBERNATION_ANNOTATION: value}}});
    api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    println!("etcdcluster {ns}/{}: {} asked for", a.name, if on { "hibernation" } else { "resume" });
    if a.wait == 0 {
        return Ok(0);
    }
    let deadline = Instant::now() + Duration::from_secs(a.wait);
    loop {
        let c = api.get(&a.name).await?;
        let cond = condition(&c, "Hibernated");
        if on {
            match cond {
                Some(x) if x.status == "True" => {
                    println!("Hibernated: {}", x.message);
                    return Ok(0);
                }
                Some(x) if x.reason == "HibernationRefused" => {
                    eprintln!("refused: {}", x.message);
                    // Taken back, so that nothing happens later by surprise.
                    let patch = serde_json::json!({"metadata": {"annotations": {HIBERNATION_ANNOTATION: null}}});
                    api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                    return Ok(1);
                }
                _ => {}
            }
        } else {
            let status = c.status.as_ref();
            let size = c.spec.size;
            let ready = status.map_or(0, |s| s.ready_members);
            let available = condition(&c, "Available").is_some_and(|x| x.status == "True");
            if available && ready >= size && cond.is_none_or(|x| x.status != "True") {
                println!("resumed: {ready} of {size} members ready");
                return Ok(0);
            }
        }
        if Instant::now() >= deadline {
            let now = cond.map(|x| format!("{}: {}", x.reason, x.message)).unwrap_or_else(|| "no answer yet".into());
            eprintln!("not done within {} s ({now}); the request stays on the EtcdCluster", a.wait);
            return Ok(2);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `defrag`: writes the request, then waits for the operator's answer. The operator takes the
/// request off only once the `Defragmentation` condition holds its outcome.
pub async fn defrag(client: &kube::Client, ns: &str, a: &DefragArgs) -> Result<i32> {
    let api: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    api.get(&a.name).await.with_context(|| format!("EtcdCluster {ns}/{}", a.name))?;
    let value = a.member.clone().unwrap_or_else(|| "all".into());
    let patch = serde_json::json!({"metadata": {"annotations": {DEFRAGMENT_ANNOTATION: value}}});
    api.patch(&a.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    println!("etcdcluster {ns}/{}: defragmentation of {value} asked for", a.name);
    if a.wait == 0 {
        return Ok(0);
    }
    let deadline = Instant::now() + Duration::from_secs(a.wait);
    loop {
        let c = api.get(&a.name).await?;
        let cond = condition(&c, "Defragmentation");
        if !c.annotations().contains_key(DEFRAGMENT_ANNOTATION)
            && let Some(x) = cond.filter(|x| x.reason != "Pending")
        {
            println!("{}: {}", x.reason, x.message);
            return Ok(if x.status == "True" { 0 } else { 1 });
        }
        if Instant::now() >= deadline {
            let now = cond.map(|x| format!("{}: {}", x.reason, x.message)).unwrap_or_else(|| "no answer yet".into());
            eprintln!("not done within {} s ({now}); the request stays on the EtcdCluster", a.wait);
            return Ok(2);
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_gains_and_loses_one_name_and_keeps_the_others() {
        assert_eq!(edited(None, "b", true).unwrap(), vec!["b"]);
        assert_eq!(edited(Some(r#"["a"]"#), "b", true).unwrap(), vec!["a", "b"]);
        assert_eq!(edited(Some(r#"["a","b"]"#), "b", true).unwrap(), vec!["a", "b"]);
        assert_eq!(edited(Some(r#"["a","b"]"#), "a", false).unwrap(), vec!["b"]);
        assert!(edited(Some("a,b"), "a", false).is_err());
    }
}
