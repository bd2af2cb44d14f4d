//! Turning TLS on and off for a running cluster (issue 14, item 3) on the real local cluster: a
//! plaintext 3-member cluster with 100 keys gets `spec.TLS.static` (the CoreOS Secrets, made
//! here with a real CA); the operator moves it member by member (certificates, then each peer
//! URL by `member update` and a restart, then https-only clients). Afterwards a client without
//! a certificate is refused, one with it reads every key. Then `spec.TLS` is removed and the
//! cluster moves back: a plaintext client reads every key. A client that follows the cluster
//! (plaintext while it works, else TLS with its certificate) writes all along; every write it
//! got acknowledged must be there at the end, and its failed writes are reported. On the way
//! on, the `tls-serve-both` annotation holds the client port at http and https until removed
//! (both kinds of client are served then); on the way off nothing holds it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::tls::*;
use common::*;
use e2e::{TestNamespace, wait_until};
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const CREATE: Duration = Duration::from_secs(180);
/// Two restarts per member, one at a time, on a shared and busy machine.
const SWITCH: Duration = Duration::from_secs(1200);
const KEYS: usize = 100;
const PVC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
const TLS_ON: &str = r#"{"TLS":{"static":{"member":{"peerSecret":"etcd-peer-tls","serverSecret":"etcd-server-tls"},"operatorSecret":"etcd-client-tls"}}}"#;
const TLS_OFF: &str = r#"{"TLS":null}"#;
const TLS_AUTO: &str = r#"{"TLS":{"auto":{}}}"#;
const SERVE_BOTH: &str = "etcd.database.coreos.com/tls-serve-both";

/// How a client reaches the cluster: through the client Service, plaintext or TLS.
#[derive(Clone)]
struct Access {
    ip: String,
    /// CA, client certificate and key, and the name the server certificate is checked for.
    tls: (String, (String, String), String),
}

impl Access {
    async fn connect(&self, https: bool, with_cert: bool) -> Result<Client> {
        let opts =
            ConnectOptions::new().with_connect_timeout(Duration::from_secs(3)).with_timeout(Duration::from_secs(5));
        let (ca, (cert, key), name) = &self.tls;
        let (url, opts) = if https {
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(ca)).domain_name(name.clone());
            if with_cert {
                t = t.identity(Identity::from_pem(cert, key));
            }
            (format!("https://{}:2379", self.ip), opts.with_tls(t))
        } else {
            (format!("http://{}:2379", self.ip), opts)
        };
        Ok(Client::connect([url.as_str()], Some(opts)).await?)
    }

    /// Every key under `prefix` (one page is enough here), plaintext or with the certificate.
    fn read(&self, https: bool, prefix: &str) -> Result<BTreeMap<String, String>> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let mut c = self.connect(https, true).await?;
            let r = c.get(prefix, Some(GetOptions::new().with_prefix())).await?;
            Ok(r.kvs()
                .iter()
                .map(|kv| (kv.key_str().unwrap_or("").to_string(), kv.value_str().unwrap_or("").to_string()))
                .collect())
        })
    }

    fn put(&self, https: bool, with_cert: bool, key: &str) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let mut c = self.connect(https, with_cert).await?;
            c.put(key, "v", None).await?;
            Ok(())
        })
    }
}

/// What the following writer saw.
#[derive(Clone, Debug, Default)]
struct Stats {
    /// Acknowledged key indices.
    acked: Vec<u64>,
    /// Keys no attempt got acknowledged (three rounds over both schemes).
    failed: Vec<u64>,
    /// Acknowledged puts per scheme: the writer follows the cluster from http to https and back.
    by_scheme: BTreeMap<&'static str, u64>,
    /// Keys whose first attempt failed (acknowledged on a later one, or failed).
    retried: u64,
    errors: Vec<String>,
}

/// A client as an application would move with the cluster: it puts unique keys through the
/// client Service, plaintext while that works, else over TLS with its certificate (and back),
/// reconnecting after an error; a key is failed after three rounds over both schemes.
struct Follower {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<Stats>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Follower {
    fn start(access: Access, prefix: &str) -> Follower {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(Stats::default()));
        let (stop2, stats2, prefix) = (stop.clone(), stats.clone(), prefix.to_string());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let mut clients: [Option<Client>; 2] = [None, None];
                let mut prefer_https = false;
                let mut i: u64 = 0;
                while !stop2.load(Ordering::Relaxed) {
                    let key = format!("{prefix}/{i:08}");
                    let mut ok = false;
                    let mut first_failed = false;
                    'rounds: for round in 0..3 {
                        for https in [prefer_https, !prefer_https] {
                            let slot = usize::from(https);
                            if clients[slot].is_none() {
                                clients[slot] = access.connect(https, true).await.ok();
                            }
                            let Some(c) = clients[slot].as_mut() else { continue };
                            let put =
                                tokio::time::timeout(Duration::from_secs(6), c.put(key.as_str(), "v", None)).await;
                            match put {
                                Ok(Ok(_)) => {
                                    ok = true;
                                    prefer_https = https;
                                    *stats2
                                        .lock()
                                        .unwrap_or_else(PoisonError::into_inner)
                                        .by_scheme
                                        .entry(if https { "https" } else { "http" })
                                        .or_default() += 1;
                                    break 'rounds;
                                }
                                other => {
                                    clients[slot] = None;
                                    let mut s = stats2.lock().unwrap_or_else(PoisonError::into_inner);
                                    if !first_failed {
                                        first_failed = true;
                                        s.retried += 1;
                                    }
                                    if s.errors.len() < 30 {
                                        let e = match other {
                                            Ok(Err(e)) => e.to_string(),
                                            _ => "no answer in 6s".into(),
                                        };
                                        s.errors.push(format!(
                                            "{key} over {} (round {round}): {e}",
                                            if https { "https" } else { "http" }
                                        ));
                                    }
                                }
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    {
                        let mut s = stats2.lock().unwrap_or_else(PoisonError::into_inner);
                        if ok { s.acked.push(i) } else { s.failed.push(i) }
                    }
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        });
        Follower { stop, stats, thread: Some(thread) }
    }

    fn finish(mut self) -> Stats {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn command(pod: &Value) -> String {
    pod["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "etcd"))
        .map(|c| c["command"].to_string())
        .unwrap_or_default()
}

/// The member list's peer URLs, asked of a member over `https` or not.
fn peer_urls(access: &Access, https: bool) -> Result<Vec<String>> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut c = access.connect(https, true).await?;
        let l = c.member_list().await?;
        Ok(l.members().iter().flat_map(|m| m.peer_urls().to_vec()).collect())
    })
}

/// The `TLSTransition` condition's values since `marks`, as "reason: message", from the Event
/// each change publishes (reason: the phase, action: `TLSTransition`): every phase shown, however
/// briefly.
fn transitions(ns: &TestNamespace, name: &str, marks: &BTreeMap<String, String>) -> Result<BTreeSet<String>> {
    Ok(events_since(ns, name, marks)?
        .into_iter()
        .filter(|e| e.action == "TLSTransition")
        .map(|e| format!("{}: {}", e.reason, e.note))
        .collect())
}

/// Waits until the transition is done: every member pod made as `https` says (peers and
/// clients), the cluster healthy, no `TLSTransition` condition. Returns the condition reasons
/// and members shown since `marks`.
fn wait_switched(
    ns: &TestNamespace,
    name: &str,
    https: bool,
    hook: &mut Hook,
    marks: &BTreeMap<String, String>,
) -> Result<BTreeSet<String>> {
    let (peer, client) = if https {
        ("--listen-peer-urls=https://", "--listen-client-urls=https://0.0.0.0:2379\"")
    } else {
        ("--listen-peer-urls=http://", "--listen-client-urls=http://0.0.0.0:2379\"")
    };
    let done = |hook: &mut Hook| -> Result<Option<()>> {
        let c = cluster(ns, name)?;
        hook.at(&transitions(ns, name, marks)?)?;
        let pods = member_pods(ns, name)?;
        let made = pods.len() == 3 && pods.iter().all(|p| command(p).contains(peer) && command(p).contains(client));
        let healthy = c["status"]["members"]["ready"].as_array().map(|a| a.len()) == Some(3)
            && c["status"]["members"]["learners"].as_array().is_none_or(Vec::is_empty);
        Ok((made && healthy && condition(&c, "TLSTransition").is_none()).then_some(()))
    };
    let what = format!("every member moved to {}", if https { "TLS" } else { "plaintext" });
    wait_until(SWITCH, &what, || done(hook))?;
    // Done means done: once the last replaced pod has stopped, nothing moves any more.
    wait_until(Duration::from_secs(120), "the replaced members' pods to stop", || {
        let all = ns.json(&["get", "pods", "-l", &format!("app=etcd,etcd_cluster={name}")])?;
        Ok((all["items"].as_array().map_or(0, Vec::len) == 3).then_some(()))
    })?;
    let uids = |pods: Vec<Value>| -> Vec<String> {
        pods.iter().map(|p| format!("{}/{}", p["metadata"]["name"], p["metadata"]["uid"])).collect()
    };
    let settled = event_marks(ns, name)?;
    let before = uids(member_pods(ns, name)?);
    std::thread::sleep(Duration::from_secs(5));
    let moved: Vec<String> = events_since(ns, name, &settled)?
        .into_iter()
        .filter(|e| ["MemberAdded", "MemberRemoved", "MemberPodCreated"].contains(&e.reason.as_str()))
        .map(|e| format!("{}: {}", e.reason, e.note))
        .collect();
    ensure!(moved.is_empty(), "members changed after the transition was done: {moved:#?}");
    let after = uids(member_pods(ns, name)?);
    ensure!(before == after, "member pods changed after the transition was done: {before:?} → {after:?}");
    transitions(ns, name, marks)
}

fn report(what: &str, s: &Stats, seen: &BTreeSet<String>) {
    eprintln!(
        "{what}: follower acknowledged {} writes ({:?}; {} needed more than one attempt), {} failed; first errors: {:#?}",
        s.acked.len(),
        s.by_scheme,
        s.retried,
        s.failed.len(),
        &s.errors[..s.errors.len().min(8)]
    );
    for c in seen {
        eprintln!("  TLSTransition {c}");
    }
}

/// The follower's counts since `before`.
fn since(now: &Stats, before: &Stats) -> Stats {
    let mut by_scheme = now.by_scheme.clone();
    for (k, v) in &before.by_scheme {
        *by_scheme.entry(k).or_default() -= v;
    }
    Stats {
        acked: now.acked[before.acked.len().min(now.acked.len())..].to_vec(),
        failed: now.failed[before.failed.len().min(now.failed.len())..].to_vec(),
        by_scheme,
        retried: now.retried - before.retried,
        errors: now.errors[before.errors.len().min(now.errors.len())..].to_vec(),
    }
}

/// Something done once, when the `TLSTransition` condition has shown a phase (its Event seen).
struct Hook<'a> {
    phase: &'static str,
    action: Option<Box<dyn FnOnce() -> Result<()> + 'a>>,
}

impl Hook<'_> {
    fn none() -> Hook<'static> {
        Hook { phase: "", action: None }
    }

    /// `shown`: from [`transitions`].
    fn at(&mut self, shown: &BTreeSet<String>) -> Result<()> {
        if shown.iter().any(|t| t.starts_with(&format!("{}:", self.phase)))
            && let Some(f) = self.action.take()
        {
            f()?;
        }
        Ok(())
    }
}

/// Changes `spec.TLS` to `patch`; with `hold`, under the `tls-serve-both` annotation: waits
/// until every member serves both schemes with peers moved (`ServingBoth`), checks that
/// plaintext and TLS clients are both served, then removes the annotation. Waits until the
/// move is done; returns the conditions shown since `marks` (Events of the cluster before the
/// move began).
fn switch(
    ns: &TestNamespace,
    access: &Access,
    patch: &str,
    https: bool,
    hold: bool,
    hook: &mut Hook,
    marks: &BTreeMap<String, String>,
) -> Result<BTreeSet<String>> {
    let started = Instant::now();
    if hold {
        ns.run(&["annotate", "etcdcluster", "example", &format!("{SERVE_BOTH}=true")])?;
    }
    patch_spec(ns, "example", patch)?;
    if hold {
        wait_until(SWITCH, "peers moved, clients served both ways (ServingBoth)", || {
            hook.at(&transitions(ns, "example", marks)?)?;
            // A phase that holds until the annotation goes: its condition stays.
            let c = cluster(ns, "example")?;
            Ok((cond_str(&c, "TLSTransition", "reason") == "ServingBoth").then_some(()))
        })?;
        eprintln!("peers moved, clients served both ways after {:.0}s", started.elapsed().as_secs_f64());
        let urls = wait_until(Duration::from_secs(30), "the member list", || Ok(peer_urls(access, true).ok()))?;
        ensure!(
            urls.len() == 3 && urls.iter().all(|u| u.starts_with(if https { "https://" } else { "http://" })),
            "{urls:?}"
        );
        wait_until(Duration::from_secs(30), "a plaintext put while both are served", || {
            Ok(access.put(false, false, "both/plaintext").ok())
        })?;
        access.put(true, true, "both/tls").context("a put over TLS while both are served")?;
        ensure!(access.put(true, false, "both/no-cert").is_err(), "TLS without a certificate was served");
        ns.run(&["annotate", "etcdcluster", "example", &format!("{SERVE_BOTH}-")])?;
    }
    let seen = wait_switched(ns, "example", https, hook, marks)?;
    eprintln!("turning TLS {} took {:.0}s", if https { "on" } else { "off" }, started.elapsed().as_secs_f64());
    Ok(seen)
}

/// A plaintext 3-member cluster (`extra`: its volumes) with 100 keys is switched to TLS and
/// back under the following writer; `hold_on`/`hold_off`: with `tls-serve-both` on that way;
/// `restart`: the operator is stopped and started again once the first peer URL moves (it must
/// go on from what the pods and the member list say).
fn scenario(
    ns: &TestNamespace,
    op: &mut Operator,
    extra: &str,
    hold_on: bool,
    hold_off: bool,
    restart: bool,
    auto: bool,
) -> Result<()> {
    let n = ns.name.clone();
    ns.apply(&cluster_manifest(&n, "example", 3, VERSION, extra))?;
    wait_healthy(ns, "example", 3, CREATE)?;
    let ip = client_ip(ns, "example")?;
    // 100 keys, plaintext.
    let plain = format!("http://{ip}:2379");
    write_keys(&plain, "keys", KEYS)?;
    let marks_on = event_marks(ns, "example")?;
    // The client's certificate: from the Secrets made here (static), or from the client Secret
    // the operator makes once `spec.TLS.auto` is set (which starts the move).
    let server_name = format!("example-client.{n}.svc");
    let (tls_on, access) = if auto {
        patch_spec(ns, "example", TLS_AUTO)?;
        let files = wait_until(Duration::from_secs(120), "the operator's client Secret", || {
            Ok(secret_data(ns, "example-tls-client").ok())
        })?;
        let get = |k: &str| files.get(k).cloned().with_context(|| format!("example-tls-client lacks {k}"));
        let cert = (get("etcd-client.crt")?, get("etcd-client.key")?);
        (TLS_AUTO, Access { ip, tls: (get("etcd-client-ca.crt")?, cert, server_name) })
    } else {
        let m = coreos_secrets(ns, "example", None)?;
        (TLS_ON, Access { ip, tls: (m.ca.pem.clone(), m.client.clone(), server_name) })
    };
    let follower = Follower::start(access.clone(), "follow");
    std::thread::sleep(Duration::from_secs(3));

    // On.
    let restarted = std::cell::RefCell::new(None);
    let mut hook = if restart {
        Hook {
            phase: "MovingPeerURLsToHttps",
            action: Some(Box::new(|| {
                op.stop();
                std::thread::sleep(Duration::from_secs(5));
                *restarted.borrow_mut() = Some(event_marks(ns, "example")?);
                *op = Operator::start_process(ns)?;
                eprintln!("operator restarted while peer URLs move");
                Ok(())
            })),
        }
    } else {
        Hook::none()
    };
    let seen_on = switch(ns, &access, tls_on, true, hold_on, &mut hook, &marks_on)?;
    drop(hook);
    ensure!(restarted.borrow().is_some() == restart, "the operator was not restarted half-way");
    if let Some(marks) = restarted.borrow().as_ref() {
        // Half-way: the restarted operator moved peer URLs itself.
        let moved: Vec<String> = events_since(ns, "example", marks)?
            .into_iter()
            .filter(|e| e.reason == "PeerURLUpdated")
            .map(|e| e.note)
            .collect();
        ensure!(!moved.is_empty(), "the operator was restarted only after every peer URL had moved");
        eprintln!("after the restart: {moved:#?}");
    }
    let on = follower.stats.lock().unwrap_or_else(PoisonError::into_inner).clone();
    report("turning TLS on", &on, &seen_on);
    let mut phases = vec!["AddingCertificates", "MovingPeerURLsToHttps"];
    if hold_on {
        phases.extend(["ServingBoth", "DroppingPlaintextClients"]);
    }
    for phase in phases {
        ensure!(seen_on.iter().any(|c| c.starts_with(&format!("{phase}:"))), "phase {phase} never shown: {seen_on:#?}");
    }
    let urls = wait_until(Duration::from_secs(30), "the member list over TLS", || Ok(peer_urls(&access, true).ok()))?;
    ensure!(urls.len() == 3 && urls.iter().all(|u| u.starts_with("https://")), "{urls:?}");
    // A plaintext client and a client without a certificate are refused; with it, every key.
    ensure!(access.put(false, false, "tls/plaintext").is_err(), "a plaintext client was served");
    ensure!(access.put(true, false, "tls/no-cert").is_err(), "a client without a certificate was served");
    let got = wait_until(Duration::from_secs(30), "the keys over TLS", || Ok(access.read(true, "keys/").ok()))?;
    ensure!(got.len() == KEYS, "{} of {KEYS} keys over TLS", got.len());
    check_keys_in(&got, "keys", KEYS)?;

    // And off again.
    let marks_off = event_marks(ns, "example")?;
    let seen_off = switch(ns, &access, TLS_OFF, false, hold_off, &mut Hook::none(), &marks_off)?;
    let stats = follower.finish();
    report("turning TLS off", &since(&stats, &on), &seen_off);
    let mut phases = vec!["MovingPeerURLsToHttp", "RemovingCertificates"];
    if hold_off {
        phases.push("ServingBoth");
    }
    for phase in phases {
        ensure!(
            seen_off.iter().any(|c| c.starts_with(&format!("{phase}:"))),
            "phase {phase} never shown: {seen_off:#?}"
        );
    }
    let urls =
        wait_until(Duration::from_secs(30), "the member list in plaintext", || Ok(peer_urls(&access, false).ok()))?;
    ensure!(urls.len() == 3 && urls.iter().all(|u| u.starts_with("http://")), "{urls:?}");
    ensure!(access.put(true, true, "tls/gone").is_err(), "TLS still served after it was turned off");
    check_keys(&plain, "keys", KEYS)?;
    let c = cluster(ns, "example")?;
    ensure!(
        c["metadata"]["annotations"].get("etcd.database.coreos.com/tls-leaving").is_none(),
        "the leaving mark outlived the transition"
    );

    // Every write the follower got acknowledged is there.
    let stored = wait_until(Duration::from_secs(30), "the follower's keys", || Ok(access.read(false, "follow/").ok()))?;
    let missing: Vec<u64> =
        stats.acked.iter().copied().filter(|i| !stored.contains_key(&format!("follow/{i:08}"))).collect();
    ensure!(missing.is_empty(), "{} of {} acknowledged writes missing: {missing:?}", missing.len(), stats.acked.len());
    ensure!(
        stats.by_scheme.get("https").copied().unwrap_or(0) > 0 && stats.by_scheme.get("http").copied().unwrap_or(0) > 0,
        "the follower wrote over both schemes: {:?}",
        stats.by_scheme
    );
    eprintln!(
        "in all: {} acknowledged, {} failed writes (keys no attempt over either scheme got acknowledged), {} needed a retry",
        stats.acked.len(),
        stats.failed.len(),
        stats.retried
    );
    Ok(())
}

/// Members on volumes: each restarts on its own data twice each way. On the way on the client
/// port is held at both schemes until the annotation goes, and the operator (a process) is
/// restarted half-way; on the way off nothing holds the port.
#[test]
fn a_running_plaintext_pvc_cluster_is_switched_to_tls_and_back_keeping_every_key() -> Result<()> {
    let restart = matches!(mode()?, Mode::Process);
    with_operator("e2e-tlsswitch", |ns, op| scenario(ns, op, PVC, true, false, restart, false))
}

/// Members on emptyDir hold their data only in their pod: each is replaced (a learner with the
/// new URL first) instead of restarted. Held at both schemes on the way off.
#[test]
fn a_running_plaintext_emptydir_cluster_is_switched_to_tls_and_back_keeping_every_key() -> Result<()> {
    with_operator("e2e-tlsswitch-ed", |ns, op| scenario(ns, op, "", false, true, false, false))
}

/// `spec.TLS.auto` switches the same way: the Secrets the policy names are the operator's.
#[test]
fn a_running_plaintext_cluster_is_switched_to_auto_tls_and_back_keeping_every_key() -> Result<()> {
    with_operator("e2e-tlsswitch-auto", |ns, op| scenario(ns, op, PVC, false, false, false, true))
}

fn check_keys_in(got: &BTreeMap<String, String>, prefix: &str, n: usize) -> Result<()> {
    for i in 0..n {
        let k = format!("{prefix}/{i}");
        let v = got.get(&k).with_context(|| format!("key {k} missing"))?;
        ensure!(*v == format!("value-{i}"), "key {k}: {v}");
    }
    Ok(())
}
