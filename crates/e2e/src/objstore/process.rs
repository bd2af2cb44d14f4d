//! Starting and stopping a server: `hack/objstore.sh` on a free port, in its own directory, as
//! a [`Supervised`] child (own process group, tied to the test process by `PR_SET_PDEATHSIG`),
//! stopped and cleaned up on drop.

use std::fs::{self, File};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};

use crate::process::Supervised;

const START_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A server started through `hack/objstore.sh`, in its own process group, with its own directory.
pub struct ServerProcess {
    name: &'static str,
    proc: Supervised,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    /// Leave `dir` in place on drop.
    keep_dir: bool,
}

fn objstore_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/objstore.sh")
}

/// `hack/objstore.sh install`, once per process (a quick no-op when installed).
fn ensure_installed() -> Result<()> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            crate::run(Command::new("bash").arg(objstore_script()).arg("install"))
                .map(drop)
                .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(|e| anyhow!("hack/objstore.sh install failed: {e}"))
}

/// A free TCP port on all addresses (the kernel's choice; free again when this returns).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("0.0.0.0:0").context("binding a free port")?.local_addr()?.port())
}

fn new_server_dir(name: &str) -> Result<PathBuf> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let dir = std::env::temp_dir().join(format!(
        "e2e-{name}-{}-{}-{nanos:x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

impl ServerProcess {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Starts `hack/objstore.sh <args(port, dir)>` on a free port and waits until `ready(port)`
    /// succeeds. A port taken between choosing and binding it is retried with another one.
    pub(super) fn start(
        name: &'static str,
        args: impl Fn(u16, &Path) -> Vec<String>,
        ready: impl Fn(u16) -> Result<()>,
    ) -> Result<ServerProcess> {
        ensure_installed()?;
        let dir = new_server_dir(name)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            let mut server = Self::spawn(name, &args(port, &dir), port, dir.clone())?;
            let Err(e) = server.wait_ready(&ready) else { return Ok(server) };
            let log = server.log_tail(30);
            // Dropping stops it; the directory stays for the next attempt or for reading the log.
            server.keep_dir = true;
            drop(server);
            if attempt < 3 && (log.contains("in use") || log.contains("EADDRINUSE")) {
                continue;
            }
            return Err(e.context(format!("{name} did not start; last lines of {}/server.log:\n{log}", dir.display())));
        }
    }

    fn spawn(name: &'static str, args: &[String], port: u16, dir: PathBuf) -> Result<ServerProcess> {
        let log = dir.join("server.log");
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut cmd = Command::new("bash");
        cmd.arg(objstore_script())
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let proc = Supervised::spawn(cmd, &format!("{name} ({})", objstore_script().display()), STOP_GRACE)?;
        Ok(ServerProcess { name, proc, port, dir, log, keep_dir: false })
    }

    fn wait_ready(&mut self, ready: &impl Fn(u16) -> Result<()>) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last: Option<anyhow::Error> = None;
        loop {
            if let Some(status) = self.proc.try_wait()? {
                bail!("{} exited ({status}) before answering", self.name);
            }
            // Only ask once something listens: keeps connection errors out of the way.
            if TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(1)).is_ok() {
                match ready(self.port) {
                    Ok(()) => return Ok(()),
                    Err(e) => last = Some(e),
                }
            }
            if Instant::now() >= deadline {
                let e = last.unwrap_or_else(|| anyhow!("nothing listens on port {}", self.port));
                return Err(e.context(format!("{} not ready after {START_TIMEOUT:?}", self.name)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM to the process group, SIGKILL after `STOP_GRACE`, and the child reaped.
    pub fn stop(&mut self) {
        self.proc.stop();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "{} (port {}) stopped; its directory is kept: {}\nlast lines of server.log:\n{}",
                self.name,
                self.port,
                self.dir.display(),
                self.log_tail(30)
            );
        }
        let keep = self.keep_dir || panicking || std::env::var_os("E2E_KEEP_OBJSTORE").is_some_and(|v| !v.is_empty());
        if !keep {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
