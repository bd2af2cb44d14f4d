//! What the pods the operator starts run: `wait-dns` (member init container), `check-data`
//! (PVC members' first init container), and the backup and restore commands, whose result goes
//! to the container's termination message.

use std::time::Duration;

use clap::Args;
use etcd_operator::backup::contract::PodError;

#[derive(Args, Debug)]
pub struct WaitDnsArgs {
    /// The name to resolve.
    #[arg(long)]
    pub host: String,
    /// Give up after this many seconds; 0 waits forever.
    #[arg(long, default_value_t = 0)]
    pub timeout_secs: u64,
}

/// Resolve `host` until it has an address: etcd exits at start when its own peer name does not
/// resolve yet, and cluster DNS publishes a pod's name only after the pod has an IP.
pub fn wait_dns(host: &str, timeout_secs: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let start = std::time::Instant::now();
        let mut last_err = String::new();
        loop {
            match tokio::net::lookup_host((host, 0)).await {
                Ok(mut addrs) => {
                    if let Some(a) = addrs.next() {
                        println!("{host} resolves to {} after {:?}", a.ip(), start.elapsed());
                        return Ok(());
                    }
                }
                Err(e) => last_err = e.to_string(),
            }
            if timeout_secs > 0 && start.elapsed() > Duration::from_secs(timeout_secs) {
                anyhow::bail!("{host} did not resolve within {timeout_secs}s: {last_err}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Run a command of a pod the operator creates: its result (a JSON report, or the error as
/// `PodError` says it: refused or not) goes to stdout and to the container's termination message,
/// where the operator reads it; a failure exits with 1.
pub fn pod_command<F, Fut>(f: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<String, PodError>>,
{
    // object_store's HTTP clients use rustls: one crypto provider for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(super::run::WORKER_STACK_BYTES)
        .enable_all()
        .build()?;
    let result = rt.block_on(f());
    let text = match &result {
        Ok(s) => s.clone(),
        Err(e) => e.to_string(),
    };
    println!("{text}");
    // Absent outside a pod; the operator falls back to the log when it cannot be written.
    let _ = std::fs::write("/dev/termination-log", text.as_bytes());
    result.map(|_| ()).map_err(|e| anyhow::anyhow!(e))
}

/// `check-data`: its verdict's exit code (a refusal, data the pod's user cannot use) and the
/// message the kubelet shows as the init container's termination message.
pub fn check_data(a: &etcd_operator::pod::member_volume::CheckArgs) -> anyhow::Result<()> {
    match etcd_operator::pod::member_volume::check(a) {
        Ok(msg) => {
            println!("{msg}");
            Ok(())
        }
        Err((code, msg)) => {
            eprintln!("{msg}");
            // The kubelet shows this as the init container's termination message.
            let _ = std::fs::write("/dev/termination-log", msg.as_bytes());
            std::process::exit(code);
        }
    }
}
