//! etcd authentication (`spec.auth`) on the real local cluster: the operator creates the root
//! Secret, turns authentication on, and from then on a client without a login is refused while
//! one with the root password works; the operator still resizes 3 → 5 → 3 and replaces a deleted
//! member (logged in as root). With a Secret of the user's: a backup to S3 (moto) from a pod that
//! logs in, a new password in the Secret becomes etcd's, authentication is turned off again. No
//! password ever appears in the operator's log (its etcd client logging at trace). A refused
//! root Secret is reported naming the key and changes nothing.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, wait_until};

const VERSION: &str = "3.6.15";
const CHANGE: Duration = Duration::from_secs(240);
/// The `spec.auth` of the tests' clusters.
const ON_EX: &str = r#"{"enabled":true,"rootSecret":"ex-root"}"#;
const ON_MINE: &str = r#"{"enabled":true,"rootSecret":"mine"}"#;

/// The operator as a process, logging everything it and its etcd client say: the scan for
/// passwords must see every line there is.
fn verbose_operator(ns: &TestNamespace) -> Result<Operator> {
    let opts = ProcessOptions {
        rust_log: "info,etcd_operator=trace,etcd_client=trace,tonic=debug".into(),
        ..ProcessOptions::default()
    };
    Operator::start_process_with(ns, &opts)
}

/// Puts `puts` and reads every key under `prefix` through the client Service, logged in as
/// `login` (user, password) or as no one.
fn kv(
    ns: &TestNamespace,
    cluster: &str,
    login: Option<(&str, &str)>,
    puts: &[(String, String)],
    prefix: &str,
) -> Result<Vec<(String, String)>> {
    use etcd_client::ConnectOptions;
    let url = client_endpoint(ns, cluster)?;
    let mut opts =
        ConnectOptions::new().with_connect_timeout(Duration::from_secs(3)).with_timeout(Duration::from_secs(5));
    if let Some((u, p)) = login {
        opts = opts.with_user(u, p);
    }
    put_then_list(&url, opts, puts, prefix)
}

fn keys(n: usize) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("keys/{i:03}"), format!("value-{i}"))).collect()
}

/// A client without a login is refused with etcd's own reason.
fn refused_anonymously(ns: &TestNamespace, cluster: &str) -> Result<()> {
    match kv(ns, cluster, None, &[("anon".into(), "x".into())], "anon") {
        Ok(got) => bail!("a client without a login was served: {got:?}"),
        Err(e) => {
            let e = format!("{e:#}");
            ensure!(e.contains("user name is empty") || e.contains("permission denied"), "refused, but why? {e}");
            Ok(())
        }
    }
}

fn secret_password(ns: &TestNamespace, name: &str) -> Result<String> {
    use base64::Engine;
    let s = ns.json(&["get", "secret", name])?;
    let b64 = s["data"]["password"].as_str().context("no password key")?;
    Ok(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64)?)?)
}

/// Waits for the `Authentication` condition's `reason` while the spec says `auth` (JSON).
fn wait_auth(ns: &TestNamespace, cluster: &str, auth: &str, reason: &str) -> Result<serde_json::Value> {
    wait_until(CHANGE, &format!("condition Authentication reason {reason}"), || {
        keep_auth(ns, cluster, auth)?;
        let c = common::cluster(ns, cluster)?;
        Ok(condition(&c, "Authentication").filter(|x| x["reason"] == reason).cloned())
    })
}

/// [`wait_healthy`] while [`keep_auth`] holds the spec's `auth`.
fn wait_healthy_keeping(ns: &TestNamespace, cluster: &str, size: usize, auth: &str) -> Result<()> {
    wait_until(CHANGE, &format!("{cluster} to have {size} healthy members"), || {
        keep_auth(ns, cluster, auth)?;
        Ok(wait_healthy(ns, cluster, size, Duration::from_secs(5)).ok().map(drop))
    })
}

/// The shared cluster's CRDs are re-applied by every operator that starts (other tests, other
/// builds); one without `spec.auth` makes the API server drop the field from every
/// EtcdCluster. When that happened, ours are applied again (as the operator applies them) and
/// the spec's `auth` with them. Nothing happens on a cluster where only this build runs.
fn keep_auth(ns: &TestNamespace, cluster: &str, auth: &str) -> Result<()> {
    if crd_note(ns).is_empty() {
        return Ok(());
    }
    let out = std::process::Command::new(operator_bin()).arg("crds").output().context("etcd-operator crds")?;
    ensure!(out.status.success(), "etcd-operator crds: {}", String::from_utf8_lossy(&out.stderr));
    let mut child = ns
        .kubectl
        .command()
        .args(["apply", "--server-side", "--force-conflicts", "--field-manager=etcd-operator", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()?;
    std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, &out.stdout)?;
    ensure!(child.wait()?.success(), "kubectl apply of the CRDs failed");
    eprintln!("re-applied this build's CRDs (another operator had applied its own) and spec.auth {auth}");
    wait_until(Duration::from_secs(30), "spec.auth to stick", || {
        patch_spec(ns, cluster, &format!(r#"{{"auth":{auth}}}"#))?;
        Ok((!common::cluster(ns, cluster)?["spec"]["auth"].is_null()).then_some(()))
    })
}

/// Runs `body` with a fresh namespace and a verbose operator process; a failure carries the
/// diagnostics.
fn with_verbose_operator(prefix: &str, body: impl FnOnce(&TestNamespace, &Operator) -> Result<()>) -> Result<()> {
    let ns = TestNamespace::create(prefix)?;
    let op = verbose_operator(&ns)?;
    body(&ns, &op).map_err(|e| e.context(format!("{}{}", crd_note(&ns), diagnostics(&ns, Some(&op)))))
}

/// Not one of `passwords` in the operator's log (its etcd client logged at trace) or in the
/// objects' YAML.
fn no_password_shown(ns: &TestNamespace, op: &Operator, passwords: &[&str]) -> Result<()> {
    let log = op.log_text();
    ensure!(log.contains("AuthEnabled"), "the log is not the operator's: {}", op.log.display());
    let objects = ns.run(&["get", "etcdcluster,etcdbackup,events", "-o", "yaml"])?;
    for p in passwords {
        ensure!(!log.contains(p), "a root password is in the operator log {}", op.log.display());
        ensure!(!objects.contains(p), "a root password is in an object or Event");
    }
    Ok(())
}

/// Events about `cluster` observed (first or again) since its first `since` Event that say it
/// lost its quorum or is unavailable or degraded: a `NoQuorum` or `Unreachable` reason, or a
/// Warning about the `Available` or `Degraded` condition (an Event's `action` is the condition
/// it reports). As `reason: note`.
fn quorum_alarms_since(ns: &TestNamespace, cluster: &str, since: &str) -> Result<Vec<String>> {
    let evs = ns.json(&["get", "events.v1.events.k8s.io"])?;
    let evs: Vec<serde_json::Value> = evs["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["regarding"]["kind"] == "EtcdCluster" && e["regarding"]["name"] == cluster)
        .collect();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    // RFC 3339 with microseconds: ordered as strings.
    let last = |e: &serde_json::Value| {
        e["series"]["lastObservedTime"].as_str().map(str::to_string).unwrap_or_else(|| text(&e["eventTime"]))
    };
    let start = evs
        .iter()
        .filter(|e| e["reason"] == since)
        .map(|e| text(&e["eventTime"]))
        .min()
        .with_context(|| format!("no {since} Event"))?;
    Ok(evs
        .iter()
        .filter(|e| last(e) >= start)
        .filter(|e| {
            ["NoQuorum", "Unreachable"].contains(&e["reason"].as_str().unwrap_or_default())
                || (e["type"] == "Warning"
                    && ["Available", "Degraded"].contains(&e["action"].as_str().unwrap_or_default()))
        })
        .map(|e| format!("{}: {} (at {})", text(&e["reason"]), text(&e["note"]), last(e)))
        .collect())
}

fn replace_a_member(ns: &TestNamespace, cluster: &str, size: usize) -> Result<()> {
    let victim = pod_names(&member_pods(ns, cluster)?)[0].clone();
    ns.run(&["delete", "pod", &victim, "--wait=false"])?;
    wait_until(CHANGE, "a replacement member", || {
        let c = common::cluster(ns, cluster)?;
        let ready: Vec<String> = c["status"]["members"]["ready"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        Ok((ready.len() == size && !ready.contains(&victim)).then_some(()))
    })?;
    wait_healthy_keeping(ns, cluster, size, ON_EX)
}

#[test]
fn an_auth_cluster_refuses_anonymous_clients_and_still_scales_and_heals() -> Result<()> {
    refuses_anonymous_clients_scales_and_heals("e2e-auth", VERSION)
}

/// etcd 3.4 forwards a promotion sent to a follower to the leader without the caller's login
/// and times out: the operator promotes through the leader.
#[test]
fn an_auth_cluster_of_etcd_3_4_scales_too() -> Result<()> {
    refuses_anonymous_clients_scales_and_heals("e2e-auth-34", "3.4.23")
}

fn refuses_anonymous_clients_scales_and_heals(prefix: &str, version: &str) -> Result<()> {
    with_verbose_operator(prefix, |ns, op| {
        // The Secret does not exist: the operator makes it, owned by the cluster.
        let spec = "  auth:\n    enabled: true\n    rootSecret: ex-root\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, version, spec))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let x = wait_auth(ns, "ex", ON_EX, "Enabled")?;
        ensure!(x["status"] == "True", "{x}");
        let secret = ns.json(&["get", "secret", "ex-root"])?;
        ensure!(secret["metadata"]["ownerReferences"][0]["kind"] == "EtcdCluster", "{}", secret["metadata"]);
        let password = secret_password(ns, "ex-root")?;
        ensure!(password.len() >= 32, "a generated password of {} characters", password.len());

        // Without a login: refused. With root's password: served; with another: refused.
        refused_anonymously(ns, "ex")?;
        let got = wait_until(Duration::from_secs(30), "a put logged in as root", || {
            Ok(kv(ns, "ex", Some(("root", &password)), &keys(KEYS), "keys/").ok())
        })?;
        ensure!(got == keys(KEYS), "read back {} of {KEYS} keys", got.len());
        ensure!(
            kv(ns, "ex", Some(("root", "not-the-password")), &[], "keys/").is_err(),
            "a wrong password was accepted"
        );
        // From `auth enable` on, every member logs the operator in (a bcrypt hash each, slow on
        // a busy node): whatever the operator said meanwhile is recorded by now, and the cluster
        // served all along.
        let alarms = quorum_alarms_since(ns, "ex", "AuthEnabled")?;
        ensure!(alarms.is_empty(), "a healthy cluster reported as failing after auth enable: {alarms:?}");

        // The operator resizes and heals logged in as root (a learner gets its token through
        // another member).
        patch_spec(ns, "ex", r#"{"size":5}"#)?;
        wait_healthy_keeping(ns, "ex", 5, ON_EX)?;
        patch_spec(ns, "ex", r#"{"size":3}"#)?;
        wait_healthy_keeping(ns, "ex", 3, ON_EX)?;
        replace_a_member(ns, "ex", 3)?;
        refused_anonymously(ns, "ex")?;
        ensure!(kv(ns, "ex", Some(("root", &password)), &[], "keys/")? == keys(KEYS), "keys lost");
        let evs = events_for(ns, "ex")?;
        for reason in ["RootSecretCreated", "RootUserAdded", "RootRoleGranted", "AuthEnabled"] {
            ensure!(evs.iter().any(|(r, _)| r == reason), "no {reason} Event: {evs:?}");
        }
        no_password_shown(ns, op, &[&password])
    })
}

#[test]
fn a_new_root_password_a_backup_and_authentication_off_again() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_verbose_operator("e2e-auth-day2", |ns, op| {
        let n = ns.name.clone();
        // The user's own Secret (not touched by the operator).
        let first = "first-root-password-4e2e";
        ns.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: mine, namespace: {n}}}\nstringData: {{username: root, password: {first}}}\n"
        ))?;
        let spec = "  auth:\n    enabled: true\n    rootSecret: mine\n";
        ns.apply(&cluster_manifest(&n, "ex", 1, VERSION, spec))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        wait_auth(ns, "ex", ON_MINE, "Enabled")?;
        refused_anonymously(ns, "ex")?;
        wait_until(Duration::from_secs(30), "a put logged in as root", || {
            Ok(kv(ns, "ex", Some(("root", first)), &keys(KEYS), "keys/").ok())
        })?;

        // A backup of the cluster: the backup pod logs in with the cluster's root Secret.
        keep_auth(ns, "ex", ON_MINE)?;
        ns.apply(&moto.secret_manifest(&n, "creds"))?;
        let storage = storage_block(&moto, "ex/etcd.backup", "creds");
        ns.apply(&backup_manifest(&n, "auth-backup", "ex", "S3", &storage, ""))?;
        let b = wait_backup_succeeded(ns, "auth-backup")?;
        let data = moto.get_object(BUCKET, "ex/etcd.backup")?;
        ensure!(sha256_hex(&data)? == b["status"]["sha256"].as_str().unwrap_or_default(), "stored sha256 differs");

        // A new password in the Secret becomes etcd's root password; the old one stops working.
        let second = "second-root-password-4e2e";
        ns.run(&[
            "patch",
            "secret",
            "mine",
            "--type=merge",
            "-p",
            &format!(r#"{{"stringData":{{"password":"{second}"}}}}"#),
        ])?;
        wait_until(CHANGE, "the new root password to work", || {
            keep_auth(ns, "ex", ON_MINE)?;
            Ok(kv(ns, "ex", Some(("root", second)), &[], "keys/").ok())
        })?;
        wait_auth(ns, "ex", ON_MINE, "Enabled")?;
        ensure!(kv(ns, "ex", Some(("root", first)), &[], "keys/").is_err(), "the old password still works");
        let evs = events_for(ns, "ex")?;
        ensure!(evs.iter().any(|(r, _)| r == "RootPasswordChanged"), "{evs:?}");

        // Off again: a client without a login is served.
        let off = r#"{"enabled":false,"rootSecret":"mine"}"#;
        patch_spec(ns, "ex", &format!(r#"{{"auth":{off}}}"#))?;
        wait_auth(ns, "ex", off, "Disabled")?;
        wait_until(Duration::from_secs(30), "a put without a login", || {
            Ok(kv(ns, "ex", None, &[("anon".into(), "x".into())], "anon").ok())
        })?;
        no_password_shown(ns, op, &[first, second])
    })
}

/// On a shared cluster another operator version may re-install the CRDs without `spec.auth`
/// (the API server then prunes the field from every object): said with a failure.
fn crd_note(ns: &TestNamespace) -> String {
    let has_auth = ns
        .json(&["get", "crd", "etcdclusters.etcd.database.coreos.com"])
        .map(|c| {
            !c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["auth"].is_null()
        })
        .unwrap_or(true);
    if has_auth {
        String::new()
    } else {
        "NOTE: the installed EtcdCluster CRD has no spec.auth (another operator version re-installed it; the field is pruned)\n".into()
    }
}

/// A restored cluster has the users and the root password of its snapshot. With another
/// password in its root Secret, etcd refuses the operator's login: that is said
/// (`LoginRefused`, `AuthRefused`) and nothing is done; with the snapshot's password back in the
/// Secret, the operator logs in and every key is there.
#[test]
fn a_restored_auth_cluster_keeps_its_snapshots_root_password() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_verbose_operator("e2e-auth-restore", |ns, op| {
        let n = ns.name.clone();
        let first = "snapshot-root-password-4e2e";
        let another = "another-root-password-4e2e";
        let mine = |p: &str| {
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: mine, namespace: {n}}}\nstringData: {{password: {p}}}\n"
            )
        };
        ns.apply(&mine(first))?;
        ns.apply(&cluster_manifest(&n, "ex", 1, VERSION, "  auth:\n    enabled: true\n    rootSecret: mine\n"))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        wait_auth(ns, "ex", ON_MINE, "Enabled")?;
        wait_until(Duration::from_secs(30), "a put logged in as root", || {
            Ok(kv(ns, "ex", Some(("root", first)), &keys(KEYS), "keys/").ok())
        })?;
        keep_auth(ns, "ex", ON_MINE)?;
        ns.apply(&moto.secret_manifest(&n, "creds"))?;
        let storage = storage_block(&moto, "ex/etcd.backup", "creds");
        ns.apply(&backup_manifest(&n, "auth-backup", "ex", "S3", &storage, ""))?;
        wait_backup_succeeded(ns, "auth-backup")?;
        delete_cluster(ns, "ex")?;

        ns.apply(&mine(another))?;
        ns.apply(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: back, namespace: {n}}}\nspec:\n  backupStorageType: S3\n  {storage}\n  etcdCluster:\n    name: ex\n    spec:\n      size: 1\n      version: \"{VERSION}\"\n      auth: {{enabled: true, rootSecret: mine}}\n"
        ))?;
        // The restore counts as done once the cluster serves: not before the operator can log in.
        let x = wait_auth(ns, "ex", ON_MINE, "LoginRefused")?;
        let msg = x["message"].as_str().unwrap_or_default();
        ensure!(msg.contains("Secret mine") && msg.contains("restored from a backup"), "{msg}");
        let c = common::cluster(ns, "ex")?;
        ensure!(cond_str(&c, "Degraded", "reason") == "AuthRefused", "{}", c["status"]);

        ns.apply(&mine(first))?;
        wait_auth(ns, "ex", ON_MINE, "Enabled")?;
        wait_healthy_keeping(ns, "ex", 1, ON_MINE)?;
        wait_until(RESTORE, "EtcdRestore to succeed", || {
            let r = get(ns, "etcdrestore", "back")?;
            ensure!(r["status"]["phase"] != "Failed", "restore failed: {}", r["status"]);
            Ok((r["status"]["succeeded"] == true).then_some(()))
        })?;
        let got = wait_until(Duration::from_secs(30), "the restored keys", || {
            Ok(kv(ns, "ex", Some(("root", first)), &[], "keys/").ok())
        })?;
        ensure!(got == keys(KEYS), "restored {} of {KEYS} keys", got.len());
        refused_anonymously(ns, "ex")?;
        no_password_shown(ns, op, &[first, another])
    })
}

#[test]
fn a_bad_root_secret_is_refused_naming_the_key_and_changes_nothing() -> Result<()> {
    with_operator("e2e-auth-bad", |ns, _op| {
        let n = ns.name.clone();
        ns.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: bad-root, namespace: {n}}}\nstringData: {{username: admin, password: \"pw\"}}\n"
        ))?;
        let before = ns.json(&["get", "secret", "bad-root"])?["metadata"]["resourceVersion"].clone();
        let spec = "  auth:\n    enabled: true\n    rootSecret: bad-root\n";
        ns.apply(&cluster_manifest(&n, "ex", 1, VERSION, spec))?;
        // The cluster itself runs: only authentication waits for the Secret.
        wait_healthy(ns, "ex", 1, CREATE)?;
        let x = wait_auth(ns, "ex", r#"{"enabled":true,"rootSecret":"bad-root"}"#, "SecretInvalid")?;
        let msg = x["message"].as_str().unwrap_or_default();
        ensure!(msg.contains("Secret bad-root key username is \"admin\""), "{msg}");
        let evs = events_for(ns, "ex")?;
        ensure!(evs.iter().any(|(r, note)| r == "SecretInvalid" && note.contains("bad-root")), "{evs:?}");
        // Nothing changed: etcd serves clients without a login, the Secret is as it was.
        std::thread::sleep(Duration::from_secs(5));
        kv(ns, "ex", None, &[("free".into(), "x".into())], "free")?;
        let after = ns.json(&["get", "secret", "bad-root"])?["metadata"]["resourceVersion"].clone();
        ensure!(before == after, "the operator wrote the user's Secret");
        // Fixed: authentication goes on.
        ns.run(&["patch", "secret", "bad-root", "--type=json", "-p", r#"[{"op":"remove","path":"/data/username"}]"#])?;
        wait_auth(ns, "ex", r#"{"enabled":true,"rootSecret":"bad-root"}"#, "Enabled")?;
        refused_anonymously(ns, "ex")?;
        Ok(())
    })
}
