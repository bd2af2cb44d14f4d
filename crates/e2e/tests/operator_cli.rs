//! The operator binary against the real apiserver: its generated CRDs and install manifests are
//! accepted, and a bad kubeconfig is one clear line.

mod common;

use std::io::Read;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::operator_bin;
use e2e::process::Supervised;
use e2e::{Kubectl, TestNamespace};

/// Everything a child process writes to stdout and stderr, collected as it comes.
struct OutputLog(Arc<Mutex<Vec<u8>>>);

impl OutputLog {
    fn capture(child: &mut Child) -> OutputLog {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let readers: Vec<Box<dyn Read + Send>> = [
            child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>),
            child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        for mut r in readers {
            let buf = buf.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = r.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    buf.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(&chunk[..n]);
                }
            });
        }
        OutputLog(buf)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

fn operator_stdout(args: &[&str]) -> Result<String> {
    let out = Command::new(operator_bin()).args(args).output().context("running etcd-operator")?;
    ensure!(out.status.success(), "etcd-operator {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}

fn server_dry_run(k: &Kubectl, yaml: &str) -> Result<String> {
    kubectl_with_input(k, &["apply", "--dry-run=server", "-f", "-"], yaml)
}

/// `kubectl <args>` with `yaml` on its standard input.
fn kubectl_with_input(k: &Kubectl, args: &[&str], yaml: &str) -> Result<String> {
    let mut child = k
        .command()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    use std::io::Write;
    child.stdin.take().expect("stdin is piped").write_all(yaml.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "apiserver refused: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn generated_crds_are_accepted_by_the_apiserver() -> Result<()> {
    let k = Kubectl::from_env()?;
    // With the CEL rules where the server has CEL (it compiles them and checks their cost at
    // create time); the variant without rules everywhere.
    let mut variants = vec![vec!["crds", "--no-validation-rules"]];
    if k.has_crd_validation_rules()? {
        variants.push(vec!["crds"]);
    }
    for args in variants {
        let out = server_dry_run(&k, &operator_stdout(&args)?)?;
        for crd in ["etcdclusters", "etcdbackups", "etcdrestores"] {
            ensure!(out.contains(&format!("{crd}.etcd.database.coreos.com")), "{args:?}: {out}");
        }
    }
    Ok(())
}

#[test]
fn install_manifests_apply_cleanly_namespaced_and_cluster_wide() -> Result<()> {
    let ns = TestNamespace::create("e2e-manifests")?;
    for extra in [&[][..], &["--cluster-wide"][..]] {
        let mut args = vec!["manifests", "--namespace", ns.name.as_str()];
        args.extend_from_slice(extra);
        if !ns.kubectl.has_crd_validation_rules()? {
            args.push("--no-validation-rules");
        }
        let out = server_dry_run(&ns.kubectl, &operator_stdout(&args)?)?;
        for kind in ["serviceaccount/etcd-operator", "deployment.apps/etcd-operator", "clusterrole."] {
            ensure!(out.contains(kind), "{args:?}: {out}");
        }
    }
    Ok(())
}

fn one_line_error(kubeconfig: &str) -> Result<String> {
    one_line_error_after(kubeconfig, 0)
}

/// `patience`: how long the operator waits for an apiserver that does not answer.
fn one_line_error_after(kubeconfig: &str, patience: u64) -> Result<String> {
    let out = Command::new(operator_bin())
        .args(["run", "--namespace", "x"])
        .env("KUBECONFIG", kubeconfig)
        .env("ETCD_OPERATOR_CONNECT_PATIENCE_SECS", patience.to_string())
        .output()?;
    ensure!(out.status.code() == Some(1), "exit status {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    ensure!(lines.len() == 1 && err.lines().last() == lines.first().copied(), "not one error line: {err}");
    Ok(lines[0].to_string())
}

#[test]
fn a_bad_kubeconfig_is_one_clear_line() -> Result<()> {
    let missing = one_line_error("/nonexistent/kubeconfig")?;
    ensure!(missing.contains("KUBECONFIG=/nonexistent/kubeconfig") && missing.contains("No such file"), "{missing}");

    let dir = std::env::temp_dir().join(format!("e2e-kc-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n\
         users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )?;
    let unreachable = one_line_error(kc.to_str().unwrap())?;
    ensure!(unreachable.contains("cannot reach the Kubernetes API at https://127.0.0.1:1"), "{unreachable}");
    // An apiserver that does not answer may be restarting: tried again until the patience ends
    // (a restarted control plane must not crash-loop the operator), then the same one line.
    let started = std::time::Instant::now();
    let patient = one_line_error_after(kc.to_str().unwrap(), 3)?;
    ensure!(patient.contains("cannot reach") && patient.contains("tried for 3s"), "{patient}");
    ensure!(started.elapsed() >= Duration::from_secs(3), "gave up after {:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// The shipped RBAC, under the operator's own ServiceAccount, with one verb removed from the
/// Role: the operator names exactly that verb and resource and does not start (nor exit); once
/// the verb is granted again, the same process starts.
#[test]
fn a_missing_verb_is_reported_by_name() -> Result<()> {
    let ns = TestNamespace::create("e2e-rbac")?;
    let cluster_rbac = format!("etcd-operator-{}", ns.name);
    let result = (|| -> Result<()> {
        // Everything but the Deployment (this test runs the operator itself).
        let all = operator_stdout(&["manifests", "--namespace", &ns.name, "--no-crds"])?;
        let rbac: Vec<&str> =
            all.split("---\n").filter(|d| !d.contains("kind: Deployment") && !d.trim().is_empty()).collect();
        ns.apply(&rbac.join("---\n"))?;
        let mut role = ns.json(&["get", "role", "etcd-operator"])?;
        let mut granted = role.clone();
        if let Some(meta) = granted["metadata"].as_object_mut() {
            for k in ["resourceVersion", "uid", "managedFields", "creationTimestamp"] {
                meta.remove(k);
            }
        }
        for rule in role["rules"].as_array_mut().context("rules")? {
            if rule["resources"] == serde_json::json!(["pods"]) {
                rule["verbs"].as_array_mut().unwrap().retain(|v| v != "delete");
            }
        }
        ns.apply(&role.to_string())?;
        // A kubeconfig with the ServiceAccount's token and the admin kubeconfig's server and CA.
        ns.kubectl.wait_service_account(&ns.name, "etcd-operator")?;
        let token = ns.kubectl.service_account_token(&ns.name, "etcd-operator")?;
        let admin = ns.kubectl.json(&["config", "view", "--raw", "--minify"])?;
        let cluster = &admin["clusters"][0]["cluster"];
        let kc = std::env::temp_dir().join(format!("{}.kubeconfig", ns.name));
        std::fs::write(
            &kc,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Config", "current-context": "sa",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": ns.name}}],
            })
            .to_string(),
        )?;
        let mut cmd = Command::new(operator_bin());
        cmd.args(["run", "--namespace", &ns.name, "--listen-address", "127.0.0.1:0"])
            .env("KUBECONFIG", &kc)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = Supervised::spawn(cmd, "the operator", Duration::ZERO)?;
        let log = OutputLog::capture(child.child_mut().context("the operator")?);
        let outcome = (|| -> Result<()> {
            let want = format!(
                "missing permissions, not starting until they are granted: cannot delete pods in namespace {}",
                ns.name
            );
            e2e::wait_until(Duration::from_secs(60), "the operator to name the missing verb", || {
                Ok(log.text().contains(&want).then_some(()))
            })
            .with_context(|| format!("operator output:\n{}", log.text()))?;
            ensure!(
                child.try_wait()?.is_none(),
                "the operator exited instead of waiting for permissions: {}",
                log.text()
            );
            ensure!(
                !log.text().contains("watch caches synced"),
                "the controller started without its permissions:\n{}",
                log.text()
            );
            // Granting the verb back lets the same process start (it checks again every 30 s).
            ns.apply(&granted.to_string())?;
            e2e::wait_until(Duration::from_secs(90), "the operator to start once the verb is granted", || {
                ensure!(child.try_wait()?.is_none(), "the operator exited: {}", log.text());
                Ok(log.text().contains("watch caches synced").then_some(()))
            })
            .with_context(|| format!("operator output:\n{}", log.text()))?;
            Ok(())
        })();
        child.stop();
        std::fs::remove_file(&kc).ok();
        outcome?;
        Ok(())
    })();
    let _ = ns.kubectl.run(&["delete", "clusterrole,clusterrolebinding", &cluster_rbac, "--ignore-not-found"]);
    result
}

/// `kubectl explain` prints the CRDs' field descriptions (the API types' doc comments). The
/// CRDs are installed as the operator installs them (server-side apply, its field manager);
/// they are cluster-scoped and shared with other tests, so they are applied, never deleted. The
/// apiserver publishes a changed CRD's OpenAPI a moment later, and another test's operator may
/// re-apply its own build's CRDs meanwhile: apply and ask again until the text shows.
#[test]
fn kubectl_explain_prints_the_field_descriptions() -> Result<()> {
    let k = Kubectl::from_env()?;
    let args: &[&str] = if k.has_crd_validation_rules()? { &["crds"] } else { &["crds", "--no-validation-rules"] };
    let crds = operator_stdout(args)?;
    let apply = || -> Result<()> {
        let args = ["apply", "--server-side", "--force-conflicts", "--field-manager=etcd-operator", "-f", "-"];
        kubectl_with_input(&k, &args, &crds).map(drop)
    };
    // (field, phrases its explanation must carry: the description, and for an object a field of it)
    let cases: [(&str, &[&str]); 2] = [
        ("etcdcluster.spec.size", &["Number of etcd members, 1 to 7", "Mirrors CoreOS `spec.size`"]),
        (
            "etcdcluster.spec.pod.persistentVolumeClaimSpec",
            &[
                "own PersistentVolumeClaim `<member>-data`",
                "Default: emptyDir",
                "Mirrors CoreOS `spec.pod.persistentVolumeClaimSpec`",
                "accessModes",
                "storageClassName",
            ],
        ),
    ];
    let mut last_apply = std::time::Instant::now() - Duration::from_secs(60);
    e2e::wait_until(Duration::from_secs(120), "kubectl explain to print the descriptions", || {
        if last_apply.elapsed() > Duration::from_secs(10) {
            apply()?;
            last_apply = std::time::Instant::now();
        }
        for (field, phrases) in cases {
            // kubectl wraps and indents: compare with whitespace collapsed.
            let out = k.run(&["explain", field])?.split_whitespace().collect::<Vec<_>>().join(" ");
            if let Some(p) = phrases.iter().find(|p| !out.contains(*p)) {
                anyhow::bail!("`kubectl explain {field}` lacks {p:?}: {out}");
            }
        }
        Ok(Some(()))
    })
}

/// Under OLM the bundle's Deployment passes `olm.targetNamespaces` as `OLM_TARGET_NAMESPACES`
/// (SingleNamespace: another namespace than the operator's own). The operator manages the
/// EtcdClusters there, not those of its own namespace, and keeps its Lease at home.
#[test]
fn olm_target_namespaces_choose_what_the_operator_manages() -> Result<()> {
    let home = TestNamespace::create("e2e-olm-home")?;
    let target = TestNamespace::create("e2e-olm-target")?;
    let mut op = common::Operator::start_process_with_env(&home, &[("OLM_TARGET_NAMESPACES", &target.name)])?;
    let r = (|| -> Result<()> {
        for ns in [&home, &target] {
            ns.apply(&common::cluster_manifest(&ns.name, "olm", 1, "3.5.1", ""))?;
        }
        common::wait_healthy(&target, "olm", 1, Duration::from_secs(120))?;
        ensure!(common::cluster(&home, "olm")?["status"].is_null(), "the home namespace's cluster was managed");
        home.run(&["get", "lease", "etcd-operator"]).context("the Lease is in the operator's own namespace")?;
        Ok(())
    })();
    op.stop();
    r.with_context(|| format!("operator log:\n{}", op.log_text()))
}
