//! Starting and stopping a server: `hack/objstore.sh` on a free port, in its own process group
//! and directory, tied to the test process (`PR_SET_PDEATHSIG`), stopped and cleaned up on drop.

use std::fs::{self, File};
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};

const START_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A server started through `hack/objstore.sh`, in its own process group, with its own directory.
pub struct ServerProcess {
    name: &'static str,
    child: Option<Child>,
    pid: u32,
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

/// Spawns `cmd` from a thread that lives as long as the process, so that `PR_SET_PDEATHSIG`
/// (which fires when the *thread* that forked the child exits) fires only when the test
/// process itself is gone, not when the test's own thread ends.
fn spawn_tied_to_process(cmd: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("objstore-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the objstore spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = spawner.lock().unwrap_or_else(|e| e.into_inner()).send((cmd, reply_tx));
    sent.map_err(|_| io::Error::other("objstore spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| io::Error::other("objstore spawner thread is gone"))?
}

impl ServerProcess {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
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
            .stderr(out)
            .process_group(0);
        // SAFETY: prctl(2) is async-signal-safe, which is all a pre_exec hook may call.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child =
            spawn_tied_to_process(cmd).with_context(|| format!("starting {name} ({})", objstore_script().display()))?;
        Ok(ServerProcess { name, pid: child.id(), child: Some(child), port, dir, log, keep_dir: false })
    }

    fn wait_ready(&mut self, ready: &impl Fn(u16) -> Result<()>) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last: Option<anyhow::Error> = None;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
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
        let Some(mut child) = self.child.take() else { return };
        let pgid = -(self.pid as libc::pid_t);
        // SAFETY: kill(2) on the process group of our own child, which we have not reaped yet.
        unsafe { libc::kill(pgid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever is left of the group: the leader after the grace period, or anything it started.
        // SAFETY: as above.
        unsafe { libc::kill(pgid, libc::SIGKILL) };
        let _ = child.wait();
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
