//! The operator binary against the real apiserver: its generated CRDs and install manifests are
//! accepted, and a bad kubeconfig is one clear line.

mod common;

use std::process::Command;

use anyhow::{Context, Result, ensure};
use common::operator_bin;
use e2e::{Kubectl, TestNamespace};

fn operator_stdout(args: &[&str]) -> Result<String> {
    let out = Command::new(operator_bin()).args(args).output().context("running etcd-operator")?;
    ensure!(out.status.success(), "etcd-operator {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}

fn server_dry_run(k: &Kubectl, yaml: &str) -> Result<String> {
    let mut child = k
        .command()
        .args(["apply", "--dry-run=server", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    use std::io::Write;
    child.stdin.take().unwrap().write_all(yaml.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "apiserver refused: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn generated_crds_are_accepted_by_the_apiserver() -> Result<()> {
    let k = Kubectl::from_env()?;
    let out = server_dry_run(&k, &operator_stdout(&["crds"])?)?;
    for crd in ["etcdclusters", "etcdbackups", "etcdrestores"] {
        ensure!(out.contains(&format!("{crd}.etcd.database.coreos.com")), "{out}");
    }
    Ok(())
}

#[test]
fn install_manifests_apply_cleanly_namespaced_and_cluster_wide() -> Result<()> {
    let ns = TestNamespace::create("e2e-manifests")?;
    for extra in [&[][..], &["--cluster-wide"][..]] {
        let mut args = vec!["manifests", "--namespace", ns.name.as_str()];
        args.extend_from_slice(extra);
        let out = server_dry_run(&ns.kubectl, &operator_stdout(&args)?)?;
        for kind in ["serviceaccount/etcd-operator", "deployment.apps/etcd-operator", "clusterrole."] {
            ensure!(out.contains(kind), "{args:?}: {out}");
        }
    }
    Ok(())
}

fn one_line_error(kubeconfig: &str) -> Result<String> {
    let out = Command::new(operator_bin()).args(["run", "--namespace", "x"]).env("KUBECONFIG", kubeconfig).output()?;
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
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
