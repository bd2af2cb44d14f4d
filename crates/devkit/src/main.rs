//! `devkit`: helpers for the project's local Kubernetes cluster (see hack/cluster.sh): cluster DNS
//! records for dnsmasq and /etc/hosts (`dns-sync`), a host-directory volume provisioner (`provision`).

mod dnsquery;
mod hostsfile;
mod provision;
mod provisioner;
mod records;
mod sync;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "devkit", about = "Helpers for the local Kubernetes cluster of hack/cluster.sh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch Pods and Services and write their cluster DNS records to a hosts file for dnsmasq.
    DnsSync {
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The file dnsmasq reads with --addn-hosts.
        #[arg(long)]
        hosts_file: PathBuf,
        /// dnsmasq's pidfile: it gets SIGHUP after each change.
        #[arg(long)]
        pidfile: PathBuf,
        /// Also keep a marked block of /etc/hosts in step (removed again on exit).
        #[arg(long)]
        etc_hosts: bool,
        /// The hosts file that --etc-hosts edits.
        #[arg(long, default_value = "/etc/hosts")]
        etc_hosts_path: PathBuf,
        #[arg(long, default_value = "cluster.local")]
        domain: String,
        /// When a pod with hostname+subdomain gets its record. The default is CoreDNS' rule, so
        /// that an operator relying on a record a real cluster would not publish fails here too.
        #[arg(long, value_enum, default_value = "endpoints")]
        pod_records: records::PodRecordPolicy,
    },
    /// Provision host directories (mode 0777) as PersistentVolumes for the claims of the
    /// StorageClasses naming PROVISIONER, and remove them again when their claims are gone.
    Provision {
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The directory holding one directory per volume (created if missing).
        #[arg(long)]
        root: PathBuf,
        /// The provisioner name the StorageClasses give.
        #[arg(long, default_value = "dev.etcd-operator/host-path")]
        provisioner: String,
        /// Several nodes: a volume is ROOT/NODE/UID on the node selected for its claim, with a
        /// node affinity for that node (the classes must bind WaitForFirstConsumer).
        #[arg(long)]
        per_node: bool,
    },
    /// Resolve NAME (A records) at a DNS server; exit status 1 unless it answers with an address.
    DnsQuery {
        #[arg(long, default_value = "10.244.0.1:53")]
        server: SocketAddr,
        /// Keep asking until the name resolves or this many seconds passed.
        #[arg(long, default_value_t = 0.0)]
        wait: f64,
        name: String,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("devkit: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::DnsSync { kubeconfig, hosts_file, pidfile, etc_hosts, etc_hosts_path, domain, pod_records } => {
            let opts = sync::Options {
                kubeconfig,
                hosts_file,
                pidfile,
                etc_hosts: etc_hosts.then_some(etc_hosts_path),
                domain,
                pod_records,
            };
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
            rt.block_on(sync::run(opts))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Provision { kubeconfig, root, provisioner, per_node } => {
            let layout = if per_node { provision::Layout::PerNode } else { provision::Layout::Flat };
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
            rt.block_on(provisioner::run(provisioner::Options { kubeconfig, root, provisioner, layout }))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::DnsQuery { server, wait, name } => {
            let answer = if wait > 0.0 {
                sync::wait_resolves(server, &name, Duration::from_secs_f64(wait))
            } else {
                dnsquery::query(server, &name, Duration::from_secs(2))
            };
            match answer {
                Ok(a) if a.rcode == 0 && !a.addresses.is_empty() => {
                    for ip in a.addresses {
                        println!("{ip}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Ok(a) => {
                    eprintln!("{name}: {}", dnsquery::rcode_name(a.rcode));
                    Ok(ExitCode::FAILURE)
                }
                Err(e) => {
                    eprintln!("{name}: {e:#}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}
