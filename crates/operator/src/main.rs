//! `etcd-operator`: the operator binary. With no subcommand it runs the controller, as the
//! CoreOS Deployment (`command: etcd-operator`) expects. The subcommands live in `cli/`: `run`
//! (the controller), `install` (`crds`, `manifests`, `bundle`), `pod_commands` (what the pods the
//! operator starts run).

use clap::{Parser, Subcommand};

mod cli;

use cli::install::{BundleArgs, CrdArgs, ManifestArgs};
use cli::pod_commands::{WaitDnsArgs, check_data, pod_command, wait_dns};
use cli::run::RunArgs;

#[derive(Parser, Debug)]
#[command(name = "etcd-operator", version, about = "Kubernetes operator for etcd (etcd.database.coreos.com/v1beta2)")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default).
    Run(RunArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crds(CrdArgs),
    /// Print everything to apply to install the operator (CRDs, ServiceAccount, RBAC, Deployment;
    /// with `--monitoring` also PodMonitors, a PrometheusRule and a Grafana dashboard).
    Manifests(ManifestArgs),
    /// Write the OLM bundle (ClusterServiceVersion, CRDs, metadata/annotations.yaml).
    Bundle(BundleArgs),
    /// Wait until a host name resolves (the init container of every etcd member pod).
    WaitDns(WaitDnsArgs),
    /// Take a snapshot and store it with its checksum (what backup pods run).
    BackupSave(etcd_operator::backup::save::SaveArgs),
    /// Follow a cluster's changes into segments next to its snapshots (the continuous archive of
    /// point-in-time restores: what an EtcdBackup's archiver pod runs).
    ArchiveFollow(etcd_operator::backup::archiver::ArchiveArgs),
    /// Check a stored backup against its checksum (what restore verify pods run).
    BackupVerify(etcd_operator::backup::fetch::VerifyArgs),
    /// Replay a continuous archive to a revision or a moment into a new snapshot (the verify
    /// pod of a point-in-time restore).
    RestorePoint(etcd_operator::pod_commands::restore_point::RestorePointArgs),
    /// Restore the newest restorable point into a throw-away etcd and compare its key space with
    /// the live cluster's at that revision (the pod of a restore drill).
    RestoreDrill(etcd_operator::pod_commands::restore_drill::RestoreDrillArgs),
    /// Copy the static restore step into a work directory (init container).
    StageRestoreStep(etcd_operator::backup::fetch::StageArgs),
    /// Fetch and check a backup into a restoring member's volume (its first init container).
    RestorePrepare(etcd_operator::backup::fetch::PrepareArgs),
    /// Move a restored member's data into place (its last restore init container).
    RestoreFinish(etcd_operator::backup::fetch::FinishArgs),
    /// Stream a snapshot from a surviving member to seed a recovered cluster (init container).
    SeedFromMember(etcd_operator::backup::fetch::SeedArgs),
    /// Check that a PVC holds this member's data before it restarts on it (init container).
    CheckData(etcd_operator::pod::member_volume::CheckArgs),
}

/// Go's flag package accepts `-cluster-wide`; CoreOS manifests use that spelling. Turn
/// single-dash long options into double-dash ones before clap sees them.
fn normalize_go_flags(args: impl Iterator<Item = String>) -> Vec<String> {
    args.enumerate()
        .map(|(i, a)| {
            let b = a.as_bytes();
            if i > 0 && b.len() > 2 && b[0] == b'-' && b[1] != b'-' && b[1].is_ascii_alphabetic() {
                format!("-{a}")
            } else {
                a
            }
        })
        .collect()
}

fn main() {
    let parsed = Cli::parse_from(normalize_go_flags(std::env::args()));
    let result = match parsed.command {
        Some(Command::Crds(c)) => cli::install::crds(&c),
        Some(Command::Manifests(m)) => cli::install::manifests(m),
        Some(Command::Bundle(b)) => cli::install::bundle(b),
        Some(Command::Run(args)) => cli::run::run(args),
        Some(Command::WaitDns(a)) => wait_dns(&a.host, a.timeout_secs),
        Some(Command::BackupSave(a)) => pod_command(|| async {
            etcd_operator::backup::save::run(a).await.map(etcd_operator::backup::contract::report_json)
        }),
        Some(Command::ArchiveFollow(a)) => pod_command(|| etcd_operator::backup::archiver::run(a)),
        Some(Command::BackupVerify(a)) => pod_command(|| async {
            etcd_operator::backup::fetch::verify(a).await.and_then(|m| {
                serde_json::to_string(&m).map_err(|e| etcd_operator::backup::contract::PodError::from(e.to_string()))
            })
        }),
        Some(Command::RestorePoint(a)) => pod_command(|| async {
            etcd_operator::pod_commands::restore_point::run(a).await.and_then(|m| {
                serde_json::to_string(&m).map_err(|e| etcd_operator::backup::contract::PodError::from(e.to_string()))
            })
        }),
        Some(Command::RestoreDrill(a)) => pod_command(|| async {
            // The report either way; a failed drill exits with 1.
            let report = etcd_operator::pod_commands::restore_drill::run(a).await;
            let passed = report.succeeded;
            let json = etcd_operator::backup::contract::drill_report_json(report);
            if passed { Ok(json) } else { Err(etcd_operator::backup::contract::PodError::Transient(json)) }
        }),
        Some(Command::StageRestoreStep(a)) => pod_command(|| async { etcd_operator::backup::fetch::stage_step(a) }),
        Some(Command::RestorePrepare(a)) => pod_command(|| etcd_operator::backup::fetch::prepare(a)),
        Some(Command::SeedFromMember(a)) => pod_command(|| etcd_operator::backup::fetch::seed_from_member(a)),
        Some(Command::CheckData(a)) => check_data(&a),
        Some(Command::RestoreFinish(a)) => pod_command(|| async { etcd_operator::backup::fetch::finish(a) }),
        None => cli::run::run(parsed.run),
    };
    if let Err(e) = result {
        // One line, no backtrace: the chain joined with ": ".
        eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_flags_are_accepted() {
        let v = normalize_go_flags(
            ["etcd-operator", "-cluster-wide", "-create-crd=false", "-h"].map(String::from).into_iter(),
        );
        assert_eq!(v, ["etcd-operator", "--cluster-wide", "--create-crd=false", "-h"]);
        let cli = Cli::parse_from(v.into_iter().take(3));
        assert!(cli.run.cluster_wide);
        assert!(!cli.run.create_crd);
    }
}
