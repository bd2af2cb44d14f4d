//! `kubectl etcd check-perf` (crates/kubectl-etcd/src/check_perf.rs) on the real local cluster:
//! a plaintext 3-member cluster, load `s` for 10 s through the port-forwards. The verdict is not
//! asserted (a loaded 2-core machine may well FAIL etcd's criteria): the document has its schema
//! and three criteria with numbers that agree with each other and with the exit code, and the
//! keys under the prefix are gone afterwards. A prefix that already holds a key is refused and
//! that key kept. The text output ends with a verdict line. Needs `target/debug/kubectl-etcd`
//! (`cargo build -p kubectl-etcd`) or `$KUBECTL_ETCD_BIN`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::TestNamespace;
use etcd_client::{Client, ConnectOptions, GetOptions};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const CREATE: Duration = Duration::from_secs(180);
const PREFIX: &str = "/etcdctl-check-perf/";

/// Runs the plugin: exit code, stdout, stderr, how long it took.
fn plugin(ns: &TestNamespace, args: &[&str]) -> Result<(i32, String, String, Duration)> {
    let bin = plugin_bin();
    ensure!(bin.exists(), "{} is missing: cargo build -p kubectl-etcd", bin.display());
    let start = Instant::now();
    let out = Command::new(&bin).env("KUBECONFIG", kubeconfig()).args(["-n", &ns.name]).args(args).output()?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr), start.elapsed()))
}

/// Keys under `prefix`, counted through the client Service.
fn keys_under(rt: &tokio::runtime::Runtime, url: &str, prefix: &str) -> Result<i64> {
    let opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(Duration::from_secs(10));
    rt.block_on(async {
        let mut c = Client::connect([url], Some(opts)).await?;
        Ok(c.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())).await?.count())
    })
}

fn num(v: &Value, what: &str) -> Result<f64> {
    v.as_f64().with_context(|| format!("{what} is not a number: {v}"))
}

#[test]
fn check_perf_runs_etcds_workload_and_cleans_up() -> Result<()> {
    with_operator("e2e-kubectl-perf", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "kp", 3, VERSION, ""))?;
        let started = Instant::now();
        wait_healthy(ns, "kp", 3, CREATE)?;
        eprintln!("cluster ready after {:?}", started.elapsed());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let url = client_endpoint(ns, "kp")?;

        // Load s for 10 s, as JSON.
        let (code, out, err, took) =
            plugin(ns, &["check-perf", "kp", "--load", "s", "--duration", "10", "-o", "json"])?;
        eprintln!("check-perf (json) took {took:?}, exit {code}; stderr: {err}\n{out}");
        let v: Value = serde_json::from_str(&out).with_context(|| format!("not JSON (exit {code}): {out} {err}"))?;
        ensure!(v["schema"] == "kubectl-etcd/check-perf/v1", "{v}");
        ensure!(v["load"]["name"] == "s" && v["load"]["clients"] == 50 && v["load"]["rate"] == 150, "{}", v["load"]);
        ensure!(v["load"]["durationSeconds"] == 10 && v["load"]["prefix"] == PREFIX, "{}", v["load"]);
        ensure!(v["members"].as_array().map(Vec::len) == Some(3), "the load goes to every member: {}", v["members"]);
        let criteria = v["criteria"].as_array().context("criteria")?;
        let names: Vec<&str> = criteria.iter().filter_map(|c| c["name"].as_str()).collect();
        ensure!(names == ["throughput", "slowest", "stddev"], "{criteria:?}");
        for c in criteria {
            num(&c["value"], "a criterion's value")?;
            num(&c["limit"], "a criterion's limit")?;
            ensure!(c["pass"].is_boolean(), "{c}");
        }
        let r = &v["results"];
        let requests = r["requests"].as_u64().context("requests")?;
        let errors = r["errors"].as_u64().context("errors")?;
        ensure!(requests > 0, "no request succeeded: {v}");
        let (avg, fastest, slowest, stddev) = (
            num(&r["averageSeconds"], "average")?,
            num(&r["fastestSeconds"], "fastest")?,
            num(&r["slowestSeconds"], "slowest")?,
            num(&r["stddevSeconds"], "stddev")?,
        );
        ensure!(0.0 < fastest && fastest <= avg && avg <= slowest && stddev >= 0.0, "{r}");
        let (elapsed, throughput) = (num(&r["elapsedSeconds"], "elapsed")?, num(&r["throughput"], "throughput")?);
        // At most the profile's rate over the 10 s; the elapsed time ends with the last answer.
        ensure!(elapsed >= 10.0 && requests + errors <= 150 * 10 + 50 + 1, "{r}");
        ensure!((throughput - requests as f64 / elapsed).abs() < 0.02, "{r}");
        ensure!(criteria[0]["value"] == r["throughput"] && criteria[1]["value"] == r["slowestSeconds"], "{v}");
        ensure!(criteria[2]["value"] == r["stddevSeconds"], "{v}");
        // The verdict follows the criteria and the errors, the exit code the verdict.
        let all_pass = criteria.iter().all(|c| c["pass"] == true) && errors == 0;
        ensure!(v["verdict"] == if all_pass { "PASS" } else { "FAIL" }, "{v}");
        ensure!(code == if all_pass { 0 } else { 1 }, "exit {code} for {}", v["verdict"]);
        // Every key written is deleted (a failed request may still have been written).
        let deleted = v["cleanup"]["keysDeleted"].as_u64().with_context(|| format!("{}", v["cleanup"]))?;
        ensure!(requests <= deleted && deleted <= requests + errors, "{} deleted of {requests} written", deleted);
        ensure!(keys_under(&rt, &url, PREFIX)? == 0, "keys left under {PREFIX}");

        // A prefix that holds a key is refused, and the key kept.
        rt.block_on(async {
            let mut c = Client::connect([url.as_str()], None).await?;
            c.put("/mine/k", "v", None).await?;
            Ok::<_, etcd_client::Error>(())
        })?;
        let (code, out, err, _) = plugin(ns, &["check-perf", "kp", "--prefix", "/mine/", "--duration", "1"])?;
        ensure!(code == 1 && err.contains("has keys") && !out.contains("verdict"), "exit {code}: {out} {err}");
        ensure!(keys_under(&rt, &url, "/mine/")? == 1, "the existing key under /mine/ was touched");

        // Text: one line per criterion and a verdict line.
        let (code, out, err, took) = plugin(ns, &["check-perf", "kp", "--duration", "3"])?;
        eprintln!("check-perf (text) took {took:?}, exit {code}:\n{out}{err}");
        let lines: Vec<&str> = out.lines().collect();
        for what in ["throughput", "slowest request", "standard deviation"] {
            ensure!(
                lines.iter().any(|l| (l.starts_with("PASS  ") || l.starts_with("FAIL  ")) && l[6..].starts_with(what)),
                "no {what} line: {out}"
            );
        }
        let verdict = lines.last().context("no output")?;
        ensure!(
            (verdict.starts_with("verdict: PASS") && code == 0) || (verdict.starts_with("verdict: FAIL") && code == 1),
            "exit {code}, last line {verdict:?}"
        );
        ensure!(keys_under(&rt, &url, PREFIX)? == 0, "keys left under {PREFIX} after the text run");
        Ok(())
    })
}
