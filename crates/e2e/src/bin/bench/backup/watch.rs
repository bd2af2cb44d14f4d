//! `kubectl get --watch` in the background, for the backup bench's end-to-end times.

use std::io::BufReader;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::TestNamespace;
use e2e::process::Supervised;
use serde_json::Value;

/// `kubectl get <what> --watch -o json` in the background: every object version the API sends,
/// with the moment it arrived. Finer than polling, and it sees short-lived states (a backup pod
/// terminated and deleted by the operator a moment later).
pub(super) struct Watch {
    child: Supervised,
    seen: Arc<Mutex<Vec<(Instant, Value)>>>,
    reader: Option<JoinHandle<()>>,
    what: String,
}

impl Watch {
    pub(super) fn start(ns: &TestNamespace, what: &[&str]) -> Result<Watch> {
        // Not Kubectl::command(): its --request-timeout would end the watch.
        let mut cmd = Command::new(&ns.kubectl.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&ns.kubectl.kubeconfig)
            .args(["-n", &ns.name, "get"])
            .args(what)
            .args(["--watch", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = Supervised::spawn(cmd, "kubectl --watch", Duration::ZERO)?;
        let out = child.child_mut().and_then(|c| c.stdout.take()).context("kubectl stdout")?;
        let seen: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
        let seen2 = seen.clone();
        let reader = std::thread::spawn(move || {
            for v in serde_json::Deserializer::from_reader(BufReader::new(out)).into_iter::<Value>() {
                match v {
                    Ok(v) => seen2.lock().unwrap_or_else(|e| e.into_inner()).push((Instant::now(), v)),
                    Err(_) => break,
                }
            }
        });
        Ok(Watch { child, seen, reader: Some(reader), what: what.join(" ") })
    }

    pub(super) fn events(&self) -> Vec<(Instant, Value)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until an object version satisfies `done` (an error from `done` ends the wait).
    pub(super) fn until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&Value) -> Result<bool>,
    ) -> Result<(Instant, Value)> {
        let deadline = Instant::now() + timeout;
        let mut checked = 0;
        loop {
            let evs = self.events();
            for (t, v) in &evs[checked..] {
                if done(v)? {
                    return Ok((*t, v.clone()));
                }
            }
            checked = evs.len();
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("kubectl get {} --watch exited ({status}) while waiting for {what}", self.what);
            }
            if Instant::now() >= deadline {
                let last = evs.last().map(|(_, v)| v["status"].to_string()).unwrap_or_else(|| "nothing seen".into());
                bail!("timed out after {timeout:?} waiting for {what}; last status: {last}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn stop(mut self) -> Vec<(Instant, Value)> {
        self.kill();
        self.events()
    }

    pub(super) fn kill(&mut self) {
        self.child.stop();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.kill();
    }
}
