//! The Helm CLI and the chart `charts/etcd-operator`, for `tests/helm_chart.rs` (no cluster) and
//! `tests/helm_install.rs` (the local cluster).
//!
//! Helm is `$HELM`, which `hack/test.sh` exports from `hack/build-helm.sh` (Helm built from the Go
//! module proxy once, then cached). Without it these tests fail, saying so; they never skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// The Helm binary: `$HELM`.
pub fn helm_bin() -> Result<PathBuf> {
    let Some(p) = std::env::var_os("HELM").filter(|p| !p.is_empty()) else {
        bail!(
            "HELM is unset: these tests run the Helm CLI. hack/test.sh sets it; by hand: \
             export HELM=$(bash hack/build-helm.sh)"
        );
    };
    let p = PathBuf::from(p);
    ensure!(p.is_file(), "HELM={} is not a file (export HELM=$(bash hack/build-helm.sh))", p.display());
    Ok(p)
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/etcd-operator")
}

/// `helm` with its config, cache and data directories under the test's target directory, so that
/// a test neither reads nor writes the user's Helm set-up.
pub fn helm() -> Result<Command> {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let mut c = Command::new(helm_bin()?);
    c.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    Ok(c)
}

/// Runs a command; its stdout, or an error with both outputs.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The documents of a YAML stream (split at `---` lines; empty ones left out).
pub fn yaml_docs(text: &str) -> Result<Vec<Value>> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line == "---" {
            docs.push(String::new());
        } else {
            let d = docs.last_mut().expect("one document");
            d.push_str(line);
            d.push('\n');
        }
    }
    let mut out = vec![];
    for d in docs {
        let v: Value = serde_yaml::from_str(&d).with_context(|| format!("not a YAML document:\n{d}"))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// `helm template` of the chart as release `etcd-operator` in `namespace`, with `--set` values.
pub fn template(namespace: &str, set: &[&str]) -> Result<Vec<Value>> {
    let mut c = helm()?;
    c.args(["template", "etcd-operator"]).arg(chart_dir()).args(["--namespace", namespace]);
    for s in set {
        c.args(["--set", s]);
    }
    yaml_docs(&output(&mut c)?)
}
