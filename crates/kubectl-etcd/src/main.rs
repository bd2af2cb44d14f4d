//! `kubectl etcd`: a kubectl plugin for the clusters of this operator. It talks to the API server
//! with the user's kubeconfig and reaches etcd members through port-forwards (`connect`), as the
//! user `kubectl port-forward` would, with the operator's client certificate and root login.

mod actions;
mod certs;
mod check_perf;
mod cli;
mod connect;
mod redact;
mod report;
mod requests;
mod status;

use anyhow::Result;
use clap::Parser;

use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let code = match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    // Port-forward tasks of unreachable members may still wait on the API server.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    std::process::exit(code);
}

async fn run(cli: Cli) -> Result<i32> {
    let (client, default_ns) = cli::kube_client(&cli.global).await?;
    let ns = cli.global.namespace.clone().unwrap_or(default_ns);
    match cli.command {
        Command::Status(a) => status::run(&client, &ns, &a).await,
        Command::Report(a) => report::run(&client, &ns, &a).await,
        Command::Pause(a) => actions::pause(&client, &ns, &a.name, true).await,
        Command::Unpause(a) => actions::pause(&client, &ns, &a.name, false).await,
        Command::Backup(a) => actions::backup(&client, &ns, &a).await,
        Command::Restore(a) => actions::restore(&client, &ns, &a).await,
        Command::Switchover(a) => requests::switchover(&client, &ns, &a).await,
        Command::Fence(a) => requests::fence(&client, &ns, &a, true).await,
        Command::Unfence(a) => requests::fence(&client, &ns, &a, false).await,
        Command::Hibernate(a) => requests::hibernate(&client, &ns, &a, true).await,
        Command::Resume(a) => requests::hibernate(&client, &ns, &a, false).await,
        Command::Defrag(a) => requests::defrag(&client, &ns, &a).await,
        Command::CheckPerf(a) => check_perf::run(&client, &ns, &a).await,
    }
}
