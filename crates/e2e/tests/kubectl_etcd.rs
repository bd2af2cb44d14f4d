//! The `kubectl etcd` plugin (crates/kubectl-etcd) on the real local cluster: one 3-member
//! cluster with auto TLS and authentication, seen healthy, with one member frozen (SIGSTOP:
//! degraded, that member unreachable) and with two frozen (quorum lost: status still answers
//! within its time limit). The leader it names is the one the members name themselves; the
//! screen is read in a terminal (tmux); `report` of the quorum-lost cluster holds the members'
//! logs and no Secret value. Needs `target/debug/kubectl-etcd` (`cargo build -p kubectl-etcd`;
//! hack/test.sh builds the workspace) or `$KUBECTL_ETCD_BIN`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::backups::{claim_manifest, wait_backup_succeeded};
use common::*;
use e2e::{TestNamespace, wait_until};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const CREATE: Duration = Duration::from_secs(180);
/// What `status` may take at most with members that do not answer (its member timeout is 5 s;
/// three calls each, in parallel, plus the API server's round trips).
const STATUS_LIMIT: Duration = Duration::from_secs(30);

/// Runs the plugin; its stdout and how long it took.
fn plugin(ns: &TestNamespace, args: &[&str]) -> Result<(String, Duration)> {
    let bin = plugin_bin();
    ensure!(bin.exists(), "{} is missing: cargo build -p kubectl-etcd", bin.display());
    let start = Instant::now();
    let out = e2e::run(Command::new(&bin).env("KUBECONFIG", kubeconfig()).args(["-n", &ns.name]).args(args))?;
    Ok((out, start.elapsed()))
}

fn status(ns: &TestNamespace) -> Result<(Value, Duration)> {
    let (out, took) = plugin(ns, &["status", "kx", "-o", "json"])?;
    let v: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    ensure!(v["schema"] == "kubectl-etcd/status/v1", "{v}");
    Ok((v, took))
}

fn member<'a>(s: &'a Value, pod: &str) -> Result<&'a Value> {
    s["members"].as_array().into_iter().flatten().find(|m| m["pod"] == pod).with_context(|| format!("{pod} in {s}"))
}

/// `(pod, member ID hex, leader ID hex)` as each member answers itself, straight to its pod IP
/// with the application client certificate (what `etcdctl endpoint status` prints).
fn members_own_answers(ns: &TestNamespace) -> Result<Vec<(String, String, String)>> {
    let d = secret_data(ns, "kx-tls-client")?;
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(&d["etcd-client-ca.crt"]))
        .identity(Identity::from_pem(&d["etcd-client.crt"], &d["etcd-client.key"]))
        .domain_name(format!("kx-client.{}.svc", ns.name));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut out = vec![];
    for (pod, url) in member_endpoints(ns, "kx")? {
        let url = url.replace("http://", "https://");
        let opts = ConnectOptions::new()
            .with_tls(tls.clone())
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(5));
        let s = rt.block_on(async { Client::connect([url.as_str()], Some(opts)).await?.status().await })?;
        let id = s.header().map_or(0, |h| h.member_id());
        out.push((pod, format!("{id:x}"), format!("{:x}", s.leader())));
    }
    Ok(out)
}

/// The plain text of the screen `kubectl etcd status` shows in a terminal, and with colours.
fn screen(ns: &TestNamespace) -> Result<(String, String)> {
    let sock = format!("kubectl-etcd-e2e-{}", std::process::id());
    let tmux = |args: &[&str]| e2e::run(Command::new("tmux").args(["-L", &sock]).args(args));
    let cmd = format!(
        "env KUBECONFIG={} {} -n {} status kx; echo '<<done>>'; sleep 60",
        kubeconfig(),
        plugin_bin().display(),
        ns.name
    );
    tmux(&["new-session", "-d", "-x", "220", "-y", "50", &cmd])?;
    let shown = wait_until(STATUS_LIMIT, "the status screen", || {
        let t = tmux(&["capture-pane", "-p"])?;
        Ok(t.contains("<<done>>").then_some(t))
    });
    let coloured = tmux(&["capture-pane", "-p", "-e"]);
    let _ = tmux(&["kill-server"]);
    Ok((shown?, coloured?))
}

#[test]
fn status_and_report_of_a_healthy_degraded_and_quorum_lost_cluster() -> Result<()> {
    with_operator("e2e-kubectl-etcd", |ns, op| {
        // A Secret value that must never leave in a report, also written on the cluster object.
        let canary = format!(
            "canary-{}-{:x}",
            e2e::unique_name("v"),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos()
        );
        ns.run(&["create", "secret", "generic", "canary", &format!("--from-literal=value={canary}")])?;
        let spec = "  TLS:\n    auto: {}\n  auth:\n    enabled: true\n";
        ns.apply(&cluster_manifest(&ns.name, "kx", 3, VERSION, spec))?;
        ns.run(&["annotate", "etcdcluster", "kx", &format!("note={canary}")])?;
        let started = Instant::now();
        wait_healthy(ns, "kx", 3, CREATE)?;
        wait_until(CREATE, "authentication on", || {
            Ok((cond_str(&cluster(ns, "kx")?, "Authentication", "status") == "True").then_some(()))
        })?;
        eprintln!("cluster ready after {:?}", started.elapsed());

        // Healthy: the leader the members name, every member with its own ID.
        let (s, took) = status(ns)?;
        eprintln!("status (healthy) took {took:?}");
        ensure!(s["verdict"]["health"] == "Healthy", "{s}");
        let own = members_own_answers(ns)?;
        let leader_id = &own[0].2;
        ensure!(own.iter().all(|(_, _, l)| l == leader_id), "members disagree on the leader: {own:?}");
        let leader_pod =
            own.iter().find(|(_, id, _)| id == leader_id).map(|(p, _, _)| p.clone()).context("leader pod")?;
        ensure!(s["leader"] == leader_pod.as_str(), "plugin leader {} vs members' {leader_pod}: {s}", s["leader"]);
        for (pod, id, _) in &own {
            let m = member(&s, pod)?;
            ensure!(m["reachable"] == true && m["memberId"] == id.as_str() && m["ready"] == true, "{m}");
            let role = if pod == &leader_pod { "leader" } else { "follower" };
            ensure!(m["role"] == role && m["raftLag"].is_u64() && m["dbSize"].as_i64() > Some(0), "{m}");
            ensure!(m["version"] == VERSION, "{m}");
        }
        ensure!(s["cluster"]["tls"] == "auto" && s["cluster"]["auth"] == true, "{}", s["cluster"]);
        let certs = s["certificates"].as_array().context("certificates")?;
        ensure!(
            certs.iter().any(|c| c["secret"] == "kx-tls-server" && c["expiresInSeconds"].as_i64() > Some(86400)),
            "{certs:?}"
        );
        ensure!(s["disruptionBudget"]["disruptionsAllowed"] == 1, "{}", s["disruptionBudget"]);

        // A one-shot backup through the plugin (over TLS, logged in as root): status shows it.
        ns.apply(&claim_manifest(&ns.name, "backups"))?;
        plugin(ns, &["backup", "kx", "--to", "pvc:backups/kx/etcd.db", "--backup-name", "once"])?;
        let b = wait_backup_succeeded(ns, "once")?;
        ensure!(b["spec"]["clientTLSSecret"] == "kx-tls-client" && b["spec"]["storageType"] == "PVC", "{}", b["spec"]);
        let (s, _) = status(ns)?;
        let last = &s["lastBackup"];
        ensure!(
            last["name"] == "once" && last["path"] == b["status"]["path"] && last["storageType"] == "PVC",
            "{last}"
        );
        ensure!(last["size"] == b["status"]["size"] && last["size"].as_i64() > Some(0), "{last}");
        ensure!(last["ageSeconds"].as_i64().is_some_and(|a| (0..300).contains(&a)), "{last}");

        // The screen, as a person reads it in a terminal.
        let (shown, coloured) = screen(ns)?;
        eprintln!("the status screen:\n{shown}");
        ensure!(shown.lines().any(|l| l.starts_with("Verdict: healthy: 3/3 members answer")), "{shown}");
        for (pod, _, _) in &own {
            let role = if pod == &leader_pod { "leader" } else { "follower" };
            ensure!(
                shown.lines().any(|l| l.starts_with(pod.as_str()) && l.contains(role) && l.contains(VERSION)),
                "{pod}: {shown}"
            );
        }
        ensure!(shown.lines().any(|l| l.starts_with("Last backup: ") && l.contains("[EtcdBackup once]")), "{shown}");
        ensure!(coloured.contains("\x1b[32"), "green verdict on a terminal: {coloured}");

        // The operator keeps its hands off the frozen members.
        plugin(ns, &["pause", "kx"])?;
        wait_until(Duration::from_secs(60), "status.controlPaused", || {
            Ok((cluster(ns, "kx")?["status"]["controlPaused"] == true).then_some(()))
        })?;

        // Degraded: a follower frozen.
        let followers: Vec<String> = own.iter().map(|(p, _, _)| p.clone()).filter(|p| *p != leader_pod).collect();
        signal_container(&ns.pod(&followers[0])?, "etcd", "SIGSTOP")?;
        let (s, took) = status(ns)?;
        eprintln!("status (one member frozen) took {took:?}: {}", s["verdict"]["message"]);
        ensure!(took < STATUS_LIMIT, "status took {took:?}");
        ensure!(s["verdict"]["health"] == "Degraded", "{s}");
        ensure!(
            s["verdict"]["message"].as_str().unwrap_or("").contains(&format!("unreachable: {}", followers[0])),
            "{s}"
        );
        let m = member(&s, &followers[0])?;
        ensure!(
            m["reachable"] == false && m["error"].as_str().is_some_and(|e| !e.is_empty()) && m["raftIndex"].is_null(),
            "{m}"
        );
        ensure!(s["leader"] == leader_pod.as_str() && member(&s, &followers[1])?["reachable"] == true, "{s}");

        // Quorum lost: the leader frozen too.
        signal_container(&ns.pod(&leader_pod)?, "etcd", "SIGSTOP")?;
        let (s, took) = status(ns)?;
        eprintln!("status (two members frozen) took {took:?}: {}", s["verdict"]["message"]);
        ensure!(took < STATUS_LIMIT, "status took {took:?}");
        ensure!(s["verdict"]["health"] == "QuorumLost", "{s}");
        let unreachable: Vec<&str> = s["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["reachable"] == false)
            .filter_map(|m| m["pod"].as_str())
            .collect();
        ensure!(unreachable.len() == 2 && unreachable.contains(&leader_pod.as_str()), "{s}");
        let (shown, coloured) = screen(ns)?;
        eprintln!("the status screen:\n{shown}");
        ensure!(
            shown
                .lines()
                .any(|l| l.starts_with("Verdict: QUORUM LOST: ")
                    && l.contains("of 3 voting members answer with a leader")),
            "{shown}"
        );
        for pod in &unreachable {
            ensure!(shown.lines().any(|l| l.starts_with(pod) && l.contains("unreachable")), "{pod}: {shown}");
            ensure!(
                shown.lines().any(|l| l.trim_start().starts_with(&format!("{pod}: status: "))),
                "{pod}'s error: {shown}"
            );
        }
        ensure!(coloured.contains("\x1b[31"), "red verdict on a terminal: {coloured}");

        // The report of the quorum-lost cluster: members' logs, no Secret value.
        let dir = std::env::temp_dir().join(format!("kubectl-etcd-e2e-{}", ns.name));
        std::fs::create_dir_all(&dir)?;
        let bundle = dir.join("report.tar.gz");
        let (_, took) = plugin(ns, &["report", "kx", "-o", bundle.to_str().unwrap()])?;
        eprintln!("report took {took:?}");
        e2e::run(Command::new("tar").arg("-xzf").arg(&bundle).arg("-C").arg(&dir))?;
        let root = dir.join("report-kx");
        for (pod, _, _) in &own {
            let log = std::fs::read_to_string(root.join(format!("logs/{pod}/etcd.log")))
                .with_context(|| format!("{pod}'s log"))?;
            ensure!(!log.is_empty(), "{pod}'s log is empty");
        }
        // An operator installed in the namespace (E2E_OPERATOR=in-cluster): its logs are there too.
        if let Some(installed) = op.in_cluster() {
            for p in installed.pods()? {
                let pod = p["metadata"]["name"].as_str().unwrap_or("");
                let dir = root.join(format!("logs/operator/{}/{pod}", ns.name));
                ensure!(
                    dir.join("operator.log").exists() || std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()),
                    "no log of operator pod {pod}"
                );
            }
        }
        let status_in: Value = serde_json::from_str(&std::fs::read_to_string(root.join("status.json"))?)?;
        ensure!(status_in["verdict"]["health"] == "QuorumLost", "{status_in}");
        let mut secrets = vec![canary.clone()];
        for name in ["kx-etcd-root", "kx-tls-client", "kx-tls-operator", "kx-tls-ca"] {
            for (k, v) in secret_data(ns, name)? {
                if k.ends_with(".key") || k == "password" {
                    // The body of a PEM key: its base64 lines.
                    secrets.extend(v.lines().filter(|l| l.len() >= 16 && !l.starts_with("-----")).map(str::to_string));
                }
            }
        }
        ensure!(secrets.len() > 4, "the values to look for: {}", secrets.len());
        let text = String::from_utf8_lossy(
            &e2e::run(Command::new("sh").arg("-c").arg(format!("cat $(find {} -type f)", root.display())))?
                .into_bytes(),
        )
        .to_string();
        ensure!(text.contains("[REDACTED]"), "the canary on the cluster object was scrubbed");
        for v in &secrets {
            ensure!(!text.contains(v.as_str()), "a Secret value is in the report");
        }
        let raw = std::fs::read(&bundle)?;
        ensure!(!String::from_utf8_lossy(&raw).contains(&canary), "canary in the compressed bundle");
        std::fs::remove_dir_all(&dir)?;

        // Back to health for the namespace's deletion.
        for p in [&leader_pod, &followers[0]] {
            signal_container(&ns.pod(p)?, "etcd", "SIGCONT")?;
        }
        plugin(ns, &["unpause", "kx"])?;
        ensure!(cluster(ns, "kx")?["spec"]["paused"] == false, "unpaused");
        Ok(())
    })
}

/// kubectl finds the plugin on PATH (as hack/up.sh installs it) and runs it as `kubectl etcd`;
/// every command has `--help`. Whatever else the machine has installed.
#[test]
fn kubectl_finds_the_plugin_and_every_command_has_help() -> Result<()> {
    let kubectl = e2e::default_kubectl().context("no kubectl")?;
    let bin = plugin_bin();
    ensure!(bin.exists(), "{} is missing: cargo build -p kubectl-etcd", bin.display());
    let dir = std::env::temp_dir().join(format!("kubectl-etcd-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("kubectl-etcd");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&bin, &link)?;
    // The plugin's directory alone: another kubectl-etcd on the machine's PATH (hack/up.sh
    // installs one in /usr/local/bin) makes `kubectl plugin list` warn and exit 1.
    let path = dir.display().to_string();
    let list = e2e::run(Command::new(&kubectl).env("PATH", &path).args(["plugin", "list"]))?;
    ensure!(list.lines().any(|l| l.trim() == link.display().to_string()), "{list}");
    let help = e2e::run(Command::new(&kubectl).env("PATH", &path).args(["etcd", "--help"]))?;
    let commands = [
        "status",
        "report",
        "pause",
        "unpause",
        "backup",
        "restore",
        "switchover",
        "fence",
        "unfence",
        "hibernate",
        "resume",
    ];
    for c in commands {
        ensure!(help.lines().any(|l| l.trim_start().starts_with(c)), "{c} in {help}");
        let h = e2e::run(Command::new(&kubectl).env("PATH", &path).args(["etcd", c, "--help"]))?;
        ensure!(h.contains("Usage: kubectl etcd") && h.contains("NAME"), "{c} --help: {h}");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Runs the plugin and returns its exit code, stdout and stderr (a refusal is exit code 1).
fn plugin_code(ns: &TestNamespace, args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(plugin_bin()).env("KUBECONFIG", kubeconfig()).args(["-n", &ns.name]).args(args).output()?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr)))
}

/// The member that leads, as the members say themselves (`etcdctl endpoint status` by pod IP).
fn leader_of(ns: &TestNamespace, name: &str) -> Result<String> {
    let mut leaders = vec![];
    for (pod, ep) in member_endpoints(ns, name)? {
        if common::day2::db_status(&ep)?.2 {
            leaders.push(pod);
        }
    }
    ensure!(leaders.len() == 1, "leaders: {leaders:?}");
    Ok(leaders.remove(0))
}

/// The pod IPs the client Service routes to (its EndpointSlices' ready addresses).
fn service_addresses(ns: &TestNamespace, name: &str) -> Result<Vec<String>> {
    let selector = format!("kubernetes.io/service-name={name}-client");
    let slices = ns.json(&["get", "endpointslices", "-l", &selector])?;
    let mut out = vec![];
    for s in slices["items"].as_array().into_iter().flatten() {
        for e in s["endpoints"].as_array().into_iter().flatten() {
            if e["conditions"]["ready"] != false {
                out.extend(
                    e["addresses"].as_array().into_iter().flatten().filter_map(|a| a.as_str().map(str::to_string)),
                );
            }
        }
    }
    Ok(out)
}

fn pod_ip(ns: &TestNamespace, pod: &str) -> Result<String> {
    ns.json(&["get", "pod", pod])?["status"]["podIP"].as_str().map(str::to_string).context("pod IP")
}

/// `switchover`, `fence` and `unfence` (issue 30) on a plaintext 3-member cluster with a writer
/// through the client Service: leadership moves to the member asked for with no failed write;
/// a fenced member leaves the client Service's endpoints and stays a voter; a second fence
/// (which would leave one of three serving) is refused with a Warning and changes nothing; a
/// switchover to the fenced member is refused; unfenced, it serves again; a hibernation of
/// this emptyDir cluster is refused and changes no pod; `defrag` defragments each member once.
#[test]
fn switchover_and_fencing_keep_every_write_and_a_quorum_serving() -> Result<()> {
    with_operator("e2e-kubectl-etcd-actions", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "sw", 3, VERSION, ""))?;
        wait_healthy(ns, "sw", 3, CREATE)?;
        let ep = client_endpoint(ns, "sw")?;
        let writer = common::writer::Writer::through_service(&ep, "w")?;
        std::thread::sleep(Duration::from_secs(2));

        // Switchover to a follower named by the user.
        let leader = leader_of(ns, "sw")?;
        let pods: Vec<String> = member_endpoints(ns, "sw")?.into_iter().map(|(p, _)| p).collect();
        let target = pods.iter().find(|p| **p != leader).context("a follower")?.clone();
        let (code, out, err) = plugin_code(ns, &["switchover", "sw", "--to", &target])?;
        eprintln!("switchover: {code} {out} {err}");
        ensure!(code == 0 && out.contains("LeaderMoved"), "switchover: {code}\n{out}\n{err}");
        ensure!(leader_of(ns, "sw")? == target, "leader after the switchover is not {target}");
        let c = cluster(ns, "sw")?;
        ensure!(c["metadata"]["annotations"].get("etcd.database.coreos.com/switchover").is_none(), "request left");
        ensure!(cond_str(&c, "Switchover", "reason") == "LeaderMoved", "{}", c["status"]);

        // Without a name: the leader moves to another member.
        let (code, out, err) = plugin_code(ns, &["switchover", "sw"])?;
        ensure!(code == 0 && out.contains("LeaderMoved"), "switchover (any): {code}\n{out}\n{err}");
        let second = leader_of(ns, "sw")?;
        ensure!(second != target, "the leader stayed {target}");

        // Fence a follower: out of the Service's endpoints, still a voter.
        let fenced = pods.iter().find(|p| **p != second).context("a follower")?.clone();
        let other = pods.iter().find(|p| **p != second && **p != fenced).context("the third")?.clone();
        let (code, out, err) = plugin_code(ns, &["fence", "sw", &fenced])?;
        ensure!(code == 0, "fence: {code}\n{out}\n{err}");
        let ip = pod_ip(ns, &fenced)?;
        wait_until(Duration::from_secs(30), "the fenced member out of the client Service", || {
            Ok((!service_addresses(ns, "sw")?.contains(&ip)).then_some(()))
        })?;
        let voters = member_list(&ep)?;
        ensure!(voters.len() == 3 && voters.iter().all(|m| m.last().is_some_and(|l| l == "false")), "{voters:?}");
        let c = cluster(ns, "sw")?;
        ensure!(cond_str(&c, "Fenced", "reason") == "MembersFenced", "{}", c["status"]);

        // A second fence would leave one of three serving: refused, nothing changes.
        let marks = event_marks(ns, "sw")?;
        let (code, out, err) = plugin_code(ns, &["fence", "sw", &other])?;
        eprintln!("second fence: {code} {out} {err}");
        ensure!(code == 1 && err.contains("fewer than a quorum"), "second fence: {code}\n{out}\n{err}");
        let warned = wait_until(Duration::from_secs(30), "a FenceRefused Warning", || {
            let evs = events_since(ns, "sw", &marks)?;
            Ok(evs.into_iter().find(|e| e.type_ == "Warning" && e.reason == "FenceRefused"))
        })?;
        eprintln!("warning: {} {}", warned.reason, warned.note);
        let addresses = service_addresses(ns, "sw")?;
        ensure!(addresses.contains(&pod_ip(ns, &other)?) && !addresses.contains(&ip), "{addresses:?}");
        let c = cluster(ns, "sw")?;
        let asked = c["metadata"]["annotations"]["etcd.database.coreos.com/fenced-members"].as_str().unwrap_or("");
        ensure!(!asked.contains(&other), "the refused name stayed asked for: {asked}");

        // The fenced member cannot lead.
        let (code, out, err) = plugin_code(ns, &["switchover", "sw", "--to", &fenced])?;
        ensure!(code == 1 && out.contains("SwitchoverRefused"), "switchover to the fenced: {code}\n{out}\n{err}");
        ensure!(leader_of(ns, "sw")? == second, "the leader changed");

        // Unfenced: back in the Service.
        let (code, out, err) = plugin_code(ns, &["unfence", "sw", &fenced])?;
        ensure!(code == 0, "unfence: {code}\n{out}\n{err}");
        wait_until(Duration::from_secs(30), "the member back in the client Service", || {
            Ok(service_addresses(ns, "sw")?.contains(&ip).then_some(()))
        })?;
        let c = cluster(ns, "sw")?;
        ensure!(common::condition(&c, "Fenced").is_none(), "{}", c["status"]);

        // A one-shot defragmentation of every member: each once, the leader last, under the
        // writer; a name that is no member is refused.
        let marks = event_marks(ns, "sw")?;
        let (code, out, err) = plugin_code(ns, &["defrag", "sw", "--wait", "120"])?;
        eprintln!("defrag: {code} {out} {err}");
        ensure!(code == 0 && out.contains("Defragmented"), "defrag: {code}\n{out}\n{err}");
        let done: Vec<String> = events_since(ns, "sw", &marks)?
            .into_iter()
            .filter(|e| e.reason == "MemberDefragmented")
            .map(|e| e.related)
            .collect();
        let leader = leader_of(ns, "sw")?;
        ensure!(done.len() == 3 && done.iter().collect::<std::collections::BTreeSet<_>>().len() == 3, "{done:?}");
        let moved = events_since(ns, "sw", &marks)?
            .into_iter()
            .any(|e| e.reason == "LeaderMoved" && e.note.contains("defragmentation"));
        ensure!(
            moved || done[2] != leader,
            "the leader {leader} was defragmented without handing leadership away: {done:?}"
        );
        let (code, out, err) = plugin_code(ns, &["defrag", "sw", "--member", "sw-nope", "--wait", "60"])?;
        ensure!(code == 1 && out.contains("DefragmentRefused"), "defrag of no member: {code}\n{out}\n{err}");

        // An emptyDir cluster cannot hibernate (its data would go with its pods): refused,
        // the request taken back, every pod kept.
        let uids = |ns: &TestNamespace| -> Result<Vec<String>> {
            Ok(member_pods(ns, "sw")?
                .iter()
                .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
                .collect())
        };
        let before = uids(ns)?;
        let (code, out, err) = plugin_code(ns, &["hibernate", "sw", "--wait", "60"])?;
        ensure!(code == 1 && err.contains("emptyDir"), "hibernate of an emptyDir cluster: {code}\n{out}\n{err}");
        let c = cluster(ns, "sw")?;
        ensure!(c["metadata"]["annotations"].get("etcd.database.coreos.com/hibernation").is_none(), "request left");
        ensure!(cond_str(&c, "Hibernated", "reason") == "HibernationRefused", "{}", c["status"]);
        ensure!(uids(ns)? == before, "pods changed: {before:?}");

        std::thread::sleep(Duration::from_secs(2));
        let stats = writer.finish()?;
        eprintln!(
            "writer: {} acknowledged, {} retried, {} re-sent during an election, {} failed",
            stats.acked.len(),
            stats.retried,
            stats.leader_waits,
            stats.failed.len()
        );
        ensure!(stats.failed.is_empty(), "failed writes: {:?}", stats.errors);
        common::writer::check_acked(std::slice::from_ref(&ep), "w", &stats)?;
        Ok(())
    })
}

/// `hibernate` and `resume` (issue 30) of a 3-member PVC cluster: every member pod stops, the
/// claims stay, no Warning is published for the quorum it no longer has; resumed, the same
/// members (IDs) come back on their claims with every key.
#[test]
fn hibernate_and_resume_keep_every_key_and_member_id() -> Result<()> {
    const PVC_SPEC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
    with_operator("e2e-kubectl-etcd-hibernate", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "hb", 3, VERSION, PVC_SPEC))?;
        wait_healthy(ns, "hb", 3, CREATE)?;
        let ep = client_endpoint(ns, "hb")?;
        write_keys(&ep, "k", 200)?;
        let ids = |ns: &TestNamespace| -> Result<Vec<String>> {
            let mut v: Vec<String> =
                member_list(&client_endpoint(ns, "hb")?)?.into_iter().map(|m| m[0].clone()).collect();
            v.sort();
            Ok(v)
        };
        let before = ids(ns)?;
        let claims = |ns: &TestNamespace| -> Result<usize> {
            let v = ns.json(&["get", "pvc", "-l", "etcd_cluster=hb"])?;
            Ok(v["items"]
                .as_array()
                .map_or(0, |a| a.iter().filter(|c| c["metadata"]["deletionTimestamp"].is_null()).count()))
        };
        ensure!(claims(ns)? == 3, "claims before: {}", claims(ns)?);

        let marks = event_marks(ns, "hb")?;
        let t0 = Instant::now();
        let (code, out, err) = plugin_code(ns, &["hibernate", "hb", "--wait", "180"])?;
        eprintln!("hibernate: {code} {out} {err} ({:?})", t0.elapsed());
        ensure!(code == 0 && out.contains("Hibernated"), "hibernate: {code}\n{out}\n{err}");
        ensure!(member_pods(ns, "hb")?.is_empty(), "member pods left");
        ensure!(claims(ns)? == 3, "claims while hibernated: {}", claims(ns)?);
        // Still hibernated a while later: nothing heals or recovers it.
        std::thread::sleep(Duration::from_secs(5));
        ensure!(member_pods(ns, "hb")?.is_empty(), "a member pod came back while hibernated");
        let c = cluster(ns, "hb")?;
        ensure!(cond_str(&c, "Available", "reason") == "Hibernated", "{}", c["status"]);
        let warnings: Vec<_> = events_since(ns, "hb", &marks)?.into_iter().filter(|e| e.type_ == "Warning").collect();
        ensure!(warnings.is_empty(), "Warnings while hibernating: {warnings:?}");

        let t1 = Instant::now();
        let (code, out, err) = plugin_code(ns, &["resume", "hb", "--wait", "180"])?;
        eprintln!("resume: {code} {out} {err} ({:?})", t1.elapsed());
        ensure!(code == 0, "resume: {code}\n{out}\n{err}");
        wait_healthy(ns, "hb", 3, CREATE)?;
        ensure!(ids(ns)? == before, "member IDs changed: {before:?} → {:?}", ids(ns)?);
        check_keys(&client_endpoint(ns, "hb")?, "k", 200)?;
        let c = cluster(ns, "hb")?;
        ensure!(cond_str(&c, "Hibernated", "reason") == "Resumed", "{}", c["status"]);
        Ok(())
    })
}

/// A fenced PVC member whose pod is deleted is made again on its volume out of the client
/// Service from its first moment: a `kubectl get --watch` of the pods that carry the serving
/// label never sees the new pod, it comes back as the same voter, the request stays as asked
/// (no refusal while the pod is gone) and `unfence` serves it again.
#[test]
fn a_fenced_pvc_member_made_again_never_serves() -> Result<()> {
    const PVC_SPEC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
    with_operator("e2e-kubectl-etcd-refence", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "fx", 3, VERSION, PVC_SPEC))?;
        wait_healthy(ns, "fx", 3, CREATE)?;
        let leader = leader_of(ns, "fx")?;
        let pods: Vec<String> = member_endpoints(ns, "fx")?.into_iter().map(|(p, _)| p).collect();
        let fenced = pods.iter().find(|p| **p != leader).context("a follower")?.clone();
        let (code, out, err) = plugin_code(ns, &["fence", "fx", &fenced])?;
        ensure!(code == 0, "fence: {code}\n{out}\n{err}");
        let old_uid = ns.json(&["get", "pod", &fenced])?["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let ids_before = member_list(&client_endpoint(ns, "fx")?)?;

        // Every pod version with the serving label on, from now on, name and UID.
        let selector = "etcd_cluster=fx,etcd.database.coreos.com/serving=true";
        let mut cmd = Command::new(&ns.kubectl.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&ns.kubectl.kubeconfig)
            .args(["-n", &ns.name, "get", "pods", "-l", selector, "--watch", "--no-headers"])
            .args(["-o", "custom-columns=N:.metadata.name,U:.metadata.uid"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut watch = e2e::process::Supervised::spawn(cmd, "kubectl --watch", Duration::ZERO)?;
        let out = watch.child_mut().and_then(|c| c.stdout.take()).context("kubectl stdout")?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                seen2.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        wait_until(Duration::from_secs(20), "the watch listing the serving pods", || {
            Ok((seen.lock().unwrap_or_else(|e| e.into_inner()).len() >= 2).then_some(()))
        })?;

        let marks = event_marks(ns, "fx")?;
        ns.kubectl.run(&["-n", &ns.name, "delete", "pod", &fenced, "--wait=false"])?;
        let new_uid = wait_until(Duration::from_secs(120), "the fenced member's pod made again and Ready", || {
            let p = ns.json(&["get", "pod", &fenced]).ok();
            Ok(p.filter(|p| p["metadata"]["uid"].as_str().is_some_and(|u| u != old_uid))
                .filter(|p| {
                    p["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                })
                .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_string()))
        })?;
        // A few reconciles later: still never seen serving, still out of the Service.
        std::thread::sleep(Duration::from_secs(5));
        let lines = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        eprintln!("serving pods seen: {lines:?}");
        ensure!(!lines.iter().any(|l| l.contains(&new_uid)), "the re-made fenced pod served: {lines:?}");
        ensure!(!service_addresses(ns, "fx")?.contains(&pod_ip(ns, &fenced)?), "the re-made pod is in the Service");
        let ids_after = member_list(&client_endpoint(ns, "fx")?)?;
        ensure!(ids_after == ids_before, "membership changed: {ids_before:?} → {ids_after:?}");
        let refusals: Vec<_> =
            events_since(ns, "fx", &marks)?.into_iter().filter(|e| e.reason == "FenceRefused").collect();
        ensure!(refusals.is_empty(), "refused while the pod was gone: {refusals:?}");
        let c = cluster(ns, "fx")?;
        let asked = c["metadata"]["annotations"]["etcd.database.coreos.com/fenced-members"].as_str().unwrap_or("");
        ensure!(asked.contains(&fenced), "the request changed: {asked}");

        let (code, out, err) = plugin_code(ns, &["unfence", "fx", &fenced])?;
        ensure!(code == 0, "unfence: {code}\n{out}\n{err}");
        let ip = pod_ip(ns, &fenced)?;
        wait_until(Duration::from_secs(30), "the member back in the client Service", || {
            Ok(service_addresses(ns, "fx")?.contains(&ip).then_some(()))
        })?;
        Ok(())
    })
}
