//! The harness itself (`e2e::harness`): an operator process started by a test cannot outlive
//! the test process, even when that process is SIGKILLed and no Drop runs.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::process::process_group_gone;
use e2e::{Kubectl, TestNamespace, wait_until};

const CHILD_ENV: &str = "E2E_HARNESS_KILLED_CHILD";

/// Run by `the_operator_dies_with_a_sigkilled_test_process` in a child process: starts an
/// operator process for a fresh namespace, prints its pid and the namespace, and waits to be
/// killed.
#[test]
#[ignore = "helper: only meaningful when run by the_operator_dies_with_a_sigkilled_test_process"]
fn start_an_operator_and_wait_to_be_killed() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let ns = TestNamespace::create("e2e-harness-kill").expect("namespace");
    let op = Operator::start_process(&ns).expect("the operator starts");
    println!("OPERATOR {} {}", op.pid().expect("a process"), ns.name);
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn the_operator_dies_with_a_sigkilled_test_process() -> Result<()> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--exact", "start_an_operator_and_wait_to_be_killed", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("child stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print on the same line.
            if let Some((_, rest)) = line.split_once("OPERATOR ") {
                let _ = tx.send(rest.to_string());
            }
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(120));
    let parsed = line.as_deref().ok().and_then(|l| {
        let (pid, ns) = l.split_once(' ')?;
        Some((pid.parse::<u32>().ok()?, ns.trim().to_string()))
    });
    let Some((pid, ns)) = parsed else {
        let _ = child.kill();
        let _ = child.wait();
        anyhow::bail!("the child test did not report an operator: {line:?}");
    };
    let outcome = (|| -> Result<()> {
        ensure!(!process_group_gone(pid), "operator {pid} is not running before the kill");
        // SIGKILL: no Drop, no unwinding, no atexit in the child.
        child.kill()?;
        child.wait()?;
        wait_until(Duration::from_secs(10), &format!("operator {pid} to die with its test process"), || {
            Ok(process_group_gone(pid).then_some(()))
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    if outcome.is_err() {
        // Do not leave the survivor running against the namespace.
        // The process group the child test started.
        let _ = e2e::process::kill_group(pid, libc::SIGKILL);
    }
    // The child's namespace: its Drop never ran.
    Kubectl::from_env()?.run(&["delete", "namespace", &ns, "--wait=false"])?;
    outcome
}
