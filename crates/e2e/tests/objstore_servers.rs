//! The object-storage servers the backup/restore tests use (`e2e::objstore`): moto (S3) and
//! Azurite (Azure Blob) start on a free port, store and return objects, let a test corrupt one,
//! are reachable from pods of the local cluster, and leave nothing behind when they stop, even
//! when the test panics or its process dies.
//!
//! The pod test needs the cluster (`hack/cluster.sh up`); the others only need
//! `hack/objstore.sh install` (which the first start runs when needed).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::objstore::{Azurite, MotoServer, ObjectInfo, ObjectServer};
use e2e::process::process_group_gone;
use e2e::{ETCD_IMAGE_3_5_1, TestNamespace, one_shot_pod, wait_until};

fn port_closed(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_err()
}

/// Bucket, round trip with metadata, listing, corrupt overwrite, delete; then a clean stop.
fn exercise(mut server: impl ObjectServer) -> Result<()> {
    let kind = server.storage_type();
    let endpoint = server.endpoint();
    ensure!(endpoint.starts_with("http://") && endpoint.contains(&format!(":{}", server.port())), "{endpoint}");
    ensure!(
        !endpoint.contains("127.0.0.1") && !endpoint.contains("localhost"),
        "{endpoint} is not reachable from pods"
    );
    // The advertised address answers from this host (the readiness probe used it too).
    TcpStream::connect_timeout(&endpoint_socket(&endpoint)?, Duration::from_secs(2))
        .with_context(|| format!("{kind}: connecting to {endpoint}"))?;

    server.create_bucket("backups")?;
    server.create_bucket("backups")?; // exists already: fine

    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    server.put_object_with_metadata(
        "backups",
        "cluster-a/v3.5.1_0000000000000001_etcd.backup",
        &data,
        &[("sha256", "abc123")],
    )?;
    server.put_object("backups", "cluster-a/second", b"two")?;
    server.put_object("backups", "other/x", b"")?;

    let got = server
        .get_object_with_metadata("backups", "cluster-a/v3.5.1_0000000000000001_etcd.backup")?
        .context("object missing")?;
    ensure!(got.data == data, "{kind}: the object came back different ({} bytes)", got.data.len());
    ensure!(got.metadata.get("sha256").map(String::as_str) == Some("abc123"), "{kind}: metadata {:?}", got.metadata);
    ensure!(server.get_object_with_metadata("backups", "cluster-a/missing")?.is_none(), "{kind}: missing object found");
    ensure!(server.get_object("backups", "other/x")?.is_empty(), "{kind}: empty object not empty");

    let listed = server.list_objects("backups", "cluster-a/")?;
    let expected = vec![
        ObjectInfo { key: "cluster-a/second".into(), size: 3 },
        ObjectInfo { key: "cluster-a/v3.5.1_0000000000000001_etcd.backup".into(), size: data.len() as u64 },
    ];
    ensure!(listed == expected, "{kind}: listed {listed:?}");
    ensure!(server.list_objects("backups", "")?.len() == 3, "{kind}: full listing");

    let corrupt = server.corrupt_object("backups", "cluster-a/v3.5.1_0000000000000001_etcd.backup")?;
    let after =
        server.get_object_with_metadata("backups", "cluster-a/v3.5.1_0000000000000001_etcd.backup")?.context("gone")?;
    ensure!(after.data == corrupt && after.data != data && after.data.len() == data.len(), "{kind}: corrupt overwrite");
    ensure!(after.metadata == got.metadata, "{kind}: corrupt overwrite lost the metadata: {:?}", after.metadata);

    server.delete_object("backups", "cluster-a/second")?;
    server.delete_object("backups", "cluster-a/second")?; // already gone: fine
    ensure!(!server.object_exists("backups", "cluster-a/second")?, "{kind}: deleted object still there");
    ensure!(server.list_objects("backups", "cluster-a/")?.len() == 1, "{kind}: listing after delete");

    let (pid, port) = (server.pid(), server.port());
    let dir: PathBuf = server.log_path().parent().context("log without a directory")?.to_path_buf();
    ensure!(dir.join("server.log").is_file(), "{kind}: no server.log in {}", dir.display());
    server.stop();
    ensure!(process_group_gone(pid), "{kind}: process group {pid} still has processes after stop");
    ensure!(port_closed(port), "{kind}: port {port} still open after stop");
    drop(server);
    ensure!(!dir.exists(), "{kind}: {} not removed on drop", dir.display());
    Ok(())
}

fn endpoint_socket(endpoint: &str) -> Result<std::net::SocketAddr> {
    let hostport = endpoint.trim_start_matches("http://").split('/').next().unwrap_or_default();
    hostport.parse().with_context(|| format!("{endpoint}: not http://ADDR:PORT"))
}

#[test]
fn moto_stores_lists_corrupts_and_stops() -> Result<()> {
    exercise(MotoServer::start()?)
}

#[test]
fn azurite_stores_lists_corrupts_and_stops() -> Result<()> {
    exercise(Azurite::start()?)
}

#[test]
fn servers_stop_when_the_test_panics() -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let joined = std::thread::spawn(move || {
        let moto = MotoServer::start().expect("moto starts");
        let azurite = Azurite::start().expect("azurite starts");
        let dir = |s: &dyn ObjectServer| s.log_path().parent().unwrap().to_path_buf();
        tx.send([(moto.pid(), moto.port(), dir(&moto)), (azurite.pid(), azurite.port(), dir(&azurite))]).unwrap();
        panic!("deliberate panic with both servers running");
    })
    .join();
    ensure!(joined.is_err(), "the thread was meant to panic");
    for (pid, port, dir) in rx.recv().context("the thread did not start the servers")? {
        ensure!(process_group_gone(pid), "process group {pid} survived the panic");
        ensure!(port_closed(port), "port {port} still open after the panic");
        // Kept for debugging, as after any panic; this one was deliberate.
        ensure!(dir.join("server.log").is_file(), "{} was not kept after the panic", dir.display());
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// Run by `servers_die_with_a_killed_test_process` in a child process: starts both servers,
/// prints their pids and ports, and aborts (no unwinding, no Drop).
#[test]
#[ignore = "helper: only meaningful when run by servers_die_with_a_killed_test_process"]
fn abort_with_servers_running() {
    if std::env::var_os("E2E_OBJSTORE_ABORT_HELPER").is_none() {
        return;
    }
    let moto = MotoServer::start().expect("moto starts");
    let azurite = Azurite::start().expect("azurite starts");
    for s in [&moto as &dyn ObjectServer, &azurite] {
        println!("SERVER {} {} {}", s.pid(), s.port(), s.log_path().parent().unwrap().display());
    }
    std::process::abort();
}

#[test]
fn servers_die_with_a_killed_test_process() -> Result<()> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--exact", "abort_with_servers_running", "--ignored", "--nocapture", "--test-threads=1"])
        .env("E2E_OBJSTORE_ABORT_HELPER", "1")
        .output()?;
    ensure!(!out.status.success(), "the helper was meant to abort: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let servers: Vec<(u32, u16, String)> = stdout
        .lines()
        .filter_map(|l| l.split_once("SERVER ").map(|(_, rest)| rest)) // libtest may print on the same line
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].to_string())
        })
        .collect();
    ensure!(
        servers.len() == 2,
        "the helper did not start both servers:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (pid, port, dir) in servers {
        // SIGKILL from PR_SET_PDEATHSIG arrives when the helper process is gone: at once.
        wait_until(Duration::from_secs(10), &format!("server pid {pid} to die with its test process"), || {
            Ok((process_group_gone(pid) && port_closed(port)).then_some(()))
        })?;
        let _ = std::fs::remove_dir_all(dir); // no Drop ran in the helper
    }
    Ok(())
}

/// A pod reaches both servers at their advertised endpoints. The etcd image has neither a
/// shell nor an HTTP client, but an etcd member told to join an existing cluster asks each peer
/// URL for `GET /members` over plain HTTP/1.1: pointing a peer URL at the server makes the pod
/// send one real request, which the server logs with the client's address. Seeing the pod's IP
/// in the server's log proves the path pod → endpoint → server (a wrong address would show
/// "connection refused" or a timeout in the pod's log instead).
#[test]
fn pods_reach_both_servers() -> Result<()> {
    let moto = MotoServer::start()?;
    let azurite = Azurite::start()?;
    let ns = TestNamespace::create("e2e-objstore")?;
    for (name, server) in [("moto", &moto as &dyn ObjectServer), ("azurite", &azurite)] {
        let peer = format!("http://{}", endpoint_socket(&server.endpoint())?);
        let initial_cluster = format!("--initial-cluster=probe=http://127.0.0.1:2380,objstore={peer}");
        let cmd = [
            "/usr/local/bin/etcd",
            "--name=probe",
            "--data-dir=/tmp/probe",
            "--initial-cluster-state=existing",
            initial_cluster.as_str(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
        ];
        let pod = format!("reach-{name}");
        ns.apply(&one_shot_pod(&ns.name, &pod, ETCD_IMAGE_3_5_1, &cmd))?;
        let pod_ip = wait_until(Duration::from_secs(90), &format!("pod {pod} to get an IP"), || {
            Ok(ns.pod(&pod)?["status"]["podIP"].as_str().filter(|ip| !ip.is_empty()).map(str::to_string))
        })?;
        let log = server.log_path().to_path_buf();
        wait_until(
            Duration::from_secs(60),
            &format!("{name}'s log to show GET /members from pod {pod} ({pod_ip})"),
            || {
                let text = std::fs::read_to_string(&log)?;
                Ok(text
                    .lines()
                    .any(|l| l.starts_with(&format!("{pod_ip} ")) && l.contains("GET /members"))
                    .then_some(()))
            },
        )
        .with_context(|| format!("pod {pod} log:\n{}", ns.logs(&pod).unwrap_or_default()))?;
    }
    Ok(())
}
