//! Scale 5 → 3 while a client writes through the cluster's client Service (its ClusterIP, as an
//! application in the cluster would): from `kubectl apply` of size 3 until etcd lists 3 voters,
//! the 2 removed pods are gone from the API, 3 members answer and status reports 3 ready. Failed
//! writes are counted from the apply until 2 s after the end (a write fails when the one
//! endpoint, the Service, refused it or gave no answer within --write-timeout-ms; a write refused
//! for want of a leader is re-sent for up to 2 s first, as a client of etcd does).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::manifests::cluster_manifest;
use etcd_client::{Client, ConnectOptions};

use crate::etcd::Writer;
use crate::observe::Observer;
use crate::phases;
use crate::report::{Sample, secs};
use crate::scenarios::{CLUSTER, Ctx, SELECTOR, healthy_cluster, in_namespace, operator_sample};

/// The client Service's URL once a write through it succeeds.
pub(crate) fn service_url(ctx: &Ctx, ns: &e2e::TestNamespace) -> Result<String> {
    let svc = ns.json(&["get", "service", &format!("{CLUSTER}-client")])?;
    let ip = svc["spec"]["clusterIP"].as_str().context("the client Service has no clusterIP")?;
    let url = format!("http://{ip}:2379");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ok = ctx.rt.block_on(async {
            let opts =
                ConnectOptions::new().with_connect_timeout(Duration::from_secs(1)).with_timeout(Duration::from_secs(2));
            let mut c = Client::connect([url.as_str()], Some(opts)).await?;
            c.put("bench-probe", "x", None).await.map(drop)
        });
        match ok {
            Ok(()) => return Ok(url),
            Err(e) if Instant::now() > deadline => bail!("no write through the client Service {url}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

pub fn scale_down(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-scaledown", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let before = healthy_cluster(ctx, ns, &mut obs, 5, "3.5.1")?;
        let url = service_url(ctx, ns)?;
        let writer = Writer::start(&ctx.rt, vec![url], "scaledown", ctx.write_interval, ctx.write_timeout);
        std::thread::sleep(Duration::from_secs(1));
        obs.start();
        ns.apply(&cluster_manifest(&ns.name, CLUSTER, 3, "3.5.1", ""))?;
        obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
        let result = obs.until(ctx.timeout, "3 voters, 3 pods, status 3 ready", |s, m| {
            phases::track_removal(s, m, 5, 3);
            m.once("status: 3 ready", s.status_ready(3), s.at);
            s.pods.len() == 3 && s.live_count() == 3 && s.answering() == 3 && s.voters_are(3) && s.status_ready(3)
        });
        if result.is_ok() && obs.marks.get(phases::ENDPOINTS_DOWN).is_none() {
            // Not part of the value: how long until the Service stops routing to the removed pods.
            let _ = obs.until(Duration::from_secs(15), "the client Service routing to the 3 left", |s, m| {
                phases::track_removal(s, m, 5, 3);
                m.get(phases::ENDPOINTS_DOWN).is_some()
            });
        }
        std::thread::sleep(Duration::from_secs(2));
        let records = writer.stop(&ctx.rt)?;
        let (at, _) = result?;
        let mut sample = operator_sample("scale 5→3", ns, op, &obs, at, false);
        phases::collect(&mut sample, ns, SELECTOR, &phases::uids(&before), obs.t0_wall, Some(&op.log_text()), at);
        let during: Vec<_> = records.iter().filter(|r| r.started >= obs.t0).collect();
        let failed = during.iter().filter(|r| !r.ok).count();
        let max_latency = during.iter().map(|r| r.latency).max().unwrap_or_default();
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        for r in during.iter().filter(|r| !r.ok) {
            *errors.entry(r.last_err.clone().unwrap_or_default().chars().take(120).collect()).or_default() += 1;
        }
        eprintln!(
            "    writer through the client Service: {} writes from the apply to 2 s after the end, {failed} failed, max latency {:.0} ms",
            during.len(),
            secs(max_latency) * 1000.0
        );
        for (e, n) in &errors {
            eprintln!("      {n:5} × {e}");
        }
        sample.extra.insert("writes", during.len() as f64);
        sample.extra.insert("failed", failed as f64);
        sample.extra.insert("max_latency_ms", (secs(max_latency) * 1000.0).round());
        Ok(sample)
    })
}
