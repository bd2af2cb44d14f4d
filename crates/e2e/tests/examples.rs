//! Every manifest in `examples/`, applied as a user applies it (issue 26), so that an example
//! the docs point to cannot rot: each file in a namespace of its own with the operator under
//! test, after what its comments say to make first, and waited for until what it makes is
//! Running (an EtcdCluster: `spec.size` ready members, no learner, and no warning condition:
//! no `EtcdAdvisory`, `Degraded`, refused spec, refused login or certificate problem) or
//! Succeeded (an EtcdBackup; an EtcdRestore, then the cluster it makes, Running).
//!
//! What the waits derive from the files themselves: an EtcdBackup's `clusterName` is the
//! example that defines that EtcdCluster, applied first; an EtcdRestore's S3 `path` is the
//! example whose EtcdBackup writes it, applied first (with its own prerequisites). Made before
//! applying, as the comments tell a user to: the CoreOS TLS Secrets of `spec.TLS.static`
//! (`etcd-peer-tls`, `etcd-server-tls`, `etcd-client-tls`, from a CA of the test), and for an
//! S3 block its bucket and its `awsSecret` (moto's credentials, on this machine). The one change
//! made to a file: the commented `# endpoint:` / `# forcePathStyle:` lines of an S3 block are
//! filled in with moto's address, as the comment tells a user of an S3-compatible server to.
//! A document of another kind, a storage this test has no server for, or a file in `examples/`
//! without a test below fails.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::tls::coreos_secrets;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, unique_name, wait_until};
use serde_json::Value;

const CLUSTER: Duration = Duration::from_secs(300);
const JOB: Duration = Duration::from_secs(300);

/// One test per file; `every_file_in_examples_has_a_test` fails on a file missing here.
macro_rules! examples {
    ($($test:ident: $file:literal,)*) => {
        const TESTED: &[&str] = &[$($file),*];
        $(
            #[test]
            fn $test() -> Result<()> {
                run($file)
            }
        )*
    };
}

examples! {
    example_etcd_cluster: "example-etcd-cluster.yaml",
    example_pvc_cluster: "example-pvc-cluster.yaml",
    example_tls_static_cluster: "tls/example-tls-cluster.yaml",
    example_tls_auto_cluster: "example-tls-auto-cluster.yaml",
    example_auth_cluster: "example-auth-cluster.yaml",
    example_monitored_cluster: "example-monitored-cluster.yaml",
    example_backup_to_s3: "example-backup-s3.yaml",
    example_backup_to_pvc: "example-backup-pvc.yaml",
    example_restore_from_s3: "example-restore.yaml",
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// An example file: its path under `examples/`, its text and its documents.
struct Example {
    file: String,
    text: String,
    docs: Vec<Value>,
}

fn load(file: &str) -> Result<Example> {
    let text = std::fs::read_to_string(examples_dir().join(file)).with_context(|| format!("examples/{file}"))?;
    let mut docs = vec![];
    for d in text.split("\n---\n") {
        let v: Value = serde_yaml::from_str(d).with_context(|| format!("examples/{file} is not YAML"))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(Example { file: file.to_string(), text, docs })
}

/// Every `.yaml`/`.yml` file under `examples/`, relative to it.
fn files_in_examples() -> Result<BTreeSet<String>> {
    let root = examples_dir();
    let mut out = BTreeSet::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)?.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.insert(p.strip_prefix(&root)?.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    Ok(out)
}

fn all_examples() -> Result<Vec<Example>> {
    files_in_examples()?.iter().map(|f| load(f)).collect()
}

fn kind(d: &Value) -> &str {
    d["kind"].as_str().unwrap_or_default()
}

fn name(d: &Value) -> &str {
    d["metadata"]["name"].as_str().unwrap_or_default()
}

/// The S3 block of an EtcdBackup or EtcdRestore, if it has one.
fn s3(d: &Value) -> Option<&Value> {
    Some(&d["spec"]["s3"]).filter(|s| s.is_object())
}

/// The examples to apply before `file`, then `file`: the cluster a backup names, the backup a
/// restore reads.
fn apply_order(all: &[Example], file: &str, order: &mut Vec<String>) -> Result<()> {
    if order.iter().any(|f| f == file) {
        return Ok(());
    }
    let ex = all.iter().find(|e| e.file == file).with_context(|| format!("no examples/{file}"))?;
    for d in &ex.docs {
        let needed = match kind(d) {
            "EtcdBackup" => {
                let cluster = d["spec"]["clusterName"].as_str().unwrap_or_default();
                let f = all.iter().find(|e| e.docs.iter().any(|o| kind(o) == "EtcdCluster" && name(o) == cluster));
                Some(f.with_context(|| format!("{file}: no example defines the EtcdCluster {cluster} it backs up"))?)
            }
            "EtcdRestore" => {
                let path =
                    s3(d).and_then(|s| s["path"].as_str()).context("an EtcdRestore this test reads only from S3")?;
                let f = all.iter().find(|e| {
                    e.docs.iter().any(|o| kind(o) == "EtcdBackup" && s3(o).is_some_and(|s| s["path"] == path))
                });
                Some(f.with_context(|| format!("{file}: no example writes the backup {path} it restores"))?)
            }
            _ => None,
        };
        if let Some(n) = needed.filter(|n| n.file != file) {
            apply_order(all, &n.file, order)?;
        }
    }
    order.push(file.to_string());
    Ok(())
}

/// `text` with its S3 blocks pointed at `moto`: the commented `endpoint` and `forcePathStyle`
/// lines filled in. Fails when a block has no such comment to fill in.
fn pointed_at(text: &str, moto: &dyn ObjectServer) -> Result<String> {
    let mut out = String::new();
    let mut filled = 0;
    for line in text.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        match line.trim_start() {
            l if l.starts_with("# endpoint:") => {
                out.push_str(&format!("{indent}endpoint: \"{}\"\n", moto.endpoint()));
                filled += 1;
            }
            l if l.starts_with("# forcePathStyle:") => out.push_str(&format!("{indent}forcePathStyle: true\n")),
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let blocks = text.lines().filter(|l| l.trim_start() == "s3:").count();
    ensure!(filled == blocks, "{blocks} s3 blocks but {filled} commented endpoint lines to point at a test server");
    Ok(out)
}

/// Applies `text` (a file of `examples/`, maybe pointed at moto) into the namespace.
fn apply(ns: &TestNamespace, text: &str) -> Result<()> {
    let path = std::env::temp_dir().join(unique_name("example") + ".yaml");
    std::fs::write(&path, text)?;
    let r = ns.run(&["apply", "-f", path.to_str().context("a temporary path")?]);
    let _ = std::fs::remove_file(&path);
    r.map(drop)
}

/// What the comments say to make before `ex`: TLS Secrets, a bucket and its credentials.
fn prepare(ns: &TestNamespace, ex: &Example, moto: Option<&MotoServer>) -> Result<String> {
    for d in ex.docs.iter().filter(|d| kind(d) == "EtcdCluster") {
        let tls = &d["spec"]["TLS"]["static"];
        if tls.is_object() {
            let names = [&tls["member"]["peerSecret"], &tls["member"]["serverSecret"], &tls["operatorSecret"]];
            ensure!(
                names.iter().zip(["etcd-peer-tls", "etcd-server-tls", "etcd-client-tls"]).all(|(n, want)| *n == want),
                "{}: the test makes the Secrets etcd-peer-tls, etcd-server-tls, etcd-client-tls; the example names {names:?}",
                ex.file
            );
            coreos_secrets(ns, name(d), None)?;
        }
    }
    let mut text = ex.text.clone();
    for d in ex.docs.iter().filter(|d| ["EtcdBackup", "EtcdRestore"].contains(&kind(d))) {
        for storage in ["abs", "gcs"] {
            ensure!(d["spec"][storage].is_null(), "{}: no {storage} server for the test here", ex.file);
        }
        if let Some(s) = s3(d) {
            let moto = moto.context("an S3 block without moto")?;
            let path = s["path"].as_str().context("s3.path")?;
            moto.create_bucket(path.split('/').next().unwrap_or_default())?;
            ns.apply(&moto.secret_manifest(&ns.name, s["awsSecret"].as_str().context("s3.awsSecret")?))?;
            text = pointed_at(&ex.text, moto)?;
        }
    }
    Ok(text)
}

/// Waits until the EtcdCluster `cluster` runs `size` members and reports no warning.
fn wait_running(ns: &TestNamespace, cluster_name: &str, size: usize, spec: &Value) -> Result<()> {
    let c = wait_healthy(ns, cluster_name, size, CLUSTER)?;
    ensure!(c["status"]["phase"] == "Running", "{cluster_name}: phase {}", c["status"]["phase"]);
    // What the features say they are: on, current, with no warning.
    let mut want = vec![];
    if spec["auth"]["enabled"] == true {
        want.push("Authentication");
    }
    if spec["TLS"]["auto"].is_object() {
        want.push("CertificatesReady");
    }
    // One read that shows the cluster settled: the features on, no warning condition. An
    // advisory or a refused spec fails at once; another warning that never clears fails the
    // wait, named.
    let fatal = wait_until(CLUSTER, &format!("{cluster_name}: {want:?} True and no warning condition"), || {
        let c = cluster(ns, cluster_name)?;
        let warnings: Vec<String> =
            [("EtcdAdvisory", "True"), ("SpecValid", "False"), ("Degraded", "True"), ("NoSpace", "True")]
                .iter()
                .filter_map(|(t, bad)| {
                    let x = condition(&c, t).filter(|x| x["status"] == *bad)?;
                    Some(format!("{t}={bad}: {} {}", x["reason"], x["message"]))
                })
                .collect();
        if let Some(w) = warnings.iter().find(|w| w.starts_with("EtcdAdvisory") || w.starts_with("SpecValid")) {
            return Ok(Some(Err(anyhow::anyhow!("{cluster_name}: {w}"))));
        }
        let off: Vec<&&str> =
            want.iter().filter(|t| !condition(&c, t).is_some_and(|x| x["status"] == "True")).collect();
        ensure!(off.is_empty() && warnings.is_empty(), "{cluster_name}: not True: {off:?}; warnings: {warnings:?}");
        Ok(Some(Ok(())))
    })?;
    fatal?;
    if spec["pod"]["persistentVolumeClaimSpec"].is_object() {
        for pod in pod_names(&member_pods(ns, cluster_name)?) {
            let pvc = ns.json(&["get", "pvc", &format!("{pod}-data")])?;
            ensure!(pvc["status"]["phase"] == "Bound", "{pod}-data: {}", pvc["status"]);
        }
    }
    Ok(())
}

fn wait_job(ns: &TestNamespace, kind: &str, name: &str) -> Result<Value> {
    wait_until(JOB, &format!("{kind} {name} to succeed"), || {
        let o = ns.json(&["get", kind, name])?;
        let st = &o["status"];
        ensure!(st["phase"] != "Failed", "{kind} {name} failed: {st}");
        ensure!(st["consecutiveFailures"].as_i64().unwrap_or(0) < 3, "{kind} {name} keeps failing: {st}");
        Ok((st["succeeded"] == true).then_some(o))
    })
}

/// Waits for everything `ex` makes to be Running or Succeeded.
fn wait_for(ns: &TestNamespace, ex: &Example) -> Result<()> {
    for d in &ex.docs {
        let spec = &d["spec"];
        match kind(d) {
            "EtcdCluster" => wait_running(ns, name(d), spec["size"].as_u64().context("spec.size")? as usize, spec)?,
            "EtcdBackup" => drop(wait_job(ns, "etcdbackup", name(d))?),
            "EtcdRestore" => {
                wait_job(ns, "etcdrestore", name(d))?;
                let c = &spec["etcdCluster"];
                let size = c["spec"]["size"].as_u64().unwrap_or(3) as usize;
                wait_running(ns, c["name"].as_str().context("etcdCluster.name")?, size, &c["spec"])?;
            }
            // Used by what follows in the file (a claim for backups): nothing of its own to wait for.
            "PersistentVolumeClaim" => {}
            other => bail!("{}: no way to wait for a {other}: teach crates/e2e/tests/examples.rs", ex.file),
        }
    }
    Ok(())
}

fn run(file: &str) -> Result<()> {
    let all = all_examples()?;
    let mut order = vec![];
    apply_order(&all, file, &mut order)?;
    let examples: Vec<&Example> = order.iter().filter_map(|f| all.iter().find(|e| &e.file == f)).collect();
    let needs_s3 = examples.iter().any(|e| e.docs.iter().any(|d| s3(d).is_some()));
    let moto = if needs_s3 { Some(MotoServer::start()?) } else { None };
    with_operator("e2e-example", |ns, _op| {
        for ex in examples {
            let text = prepare(ns, ex, moto.as_ref())?;
            apply(ns, &text).with_context(|| format!("kubectl apply -f examples/{}", ex.file))?;
            wait_for(ns, ex).with_context(|| format!("examples/{}", ex.file))?;
        }
        // The first example is the first thing a newcomer runs: it creates a cluster without a
        // single Warning on the way (a cluster forming is not one without a quorum).
        if file == FIRST {
            for d in all.iter().filter(|e| e.file == FIRST).flat_map(|e| &e.docs) {
                let warnings: Vec<String> = events_since(ns, name(d), &Default::default())?
                    .into_iter()
                    .filter(|e| e.type_ == "Warning")
                    .map(|e| format!("{}: {}", e.reason, e.note))
                    .collect();
                ensure!(warnings.is_empty(), "examples/{FIRST}: Warning Events: {warnings:?}");
            }
        }
        Ok(())
    })
}

/// The README's example.
const FIRST: &str = "example-etcd-cluster.yaml";

/// No cluster needed: every file has a test, parses, and names no namespace (it goes into
/// the user's, or the test's).
#[test]
fn every_file_in_examples_has_a_test() -> Result<()> {
    let files = files_in_examples()?;
    let tested: BTreeSet<String> = TESTED.iter().map(|f| f.to_string()).collect();
    let untested: Vec<&String> = files.difference(&tested).collect();
    ensure!(untested.is_empty(), "examples without a test in crates/e2e/tests/examples.rs: {untested:?}");
    let gone: Vec<&String> = tested.difference(&files).collect();
    ensure!(gone.is_empty(), "tests of examples that do not exist: {gone:?}");
    for ex in all_examples()? {
        ensure!(!ex.docs.is_empty(), "examples/{}: no document", ex.file);
        for d in &ex.docs {
            ensure!(d["metadata"]["namespace"].is_null(), "examples/{}: names a namespace", ex.file);
        }
        let mut order = vec![];
        apply_order(&all_examples()?, &ex.file, &mut order)?;
    }
    Ok(())
}
