//! Processes the tests and the bench start (the operator, moto, Azurite, `kubectl --watch`)
//! that must not outlive them, whatever ends them: a panic, `std::process::exit`, an abort, or a
//! SIGKILL of the test process.
//!
//! One mechanism for all of them ([`spawn_tied`]): the child gets its own process group (so a
//! stop reaches whatever it started, and a terminal's Ctrl-C reaches only the test process) and
//! `PR_SET_PDEATHSIG` = SIGKILL, which the kernel delivers when the thread that forked it exits.
//! That thread is one spawner thread that lives as long as the process, so the signal comes
//! when the test process itself is gone, not when the test's own thread ends. [`Supervised`]
//! wraps such a child: stopped (group SIGTERM, grace, SIGKILL, reaped) when dropped.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Spawns `cmd` in its own process group, killed (SIGKILL) by the kernel when this process
/// ends. Stdio and everything else are as `cmd` says.
pub fn spawn_tied(mut cmd: Command) -> io::Result<Child> {
    cmd.process_group(0);
    // SAFETY: prctl(2) is async-signal-safe, which is all a pre_exec hook may call.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("e2e-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the e2e spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = spawner.lock().unwrap_or_else(|e| e.into_inner()).send((cmd, reply_tx));
    sent.map_err(|_| io::Error::other("the e2e spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| io::Error::other("the e2e spawner thread is gone"))?
}

/// A child started by [`spawn_tied`], stopped with its whole process group when dropped.
pub struct Supervised {
    child: Option<Child>,
    pid: u32,
    /// What `Drop` gives the group between SIGTERM and SIGKILL (zero: SIGKILL at once).
    grace: Duration,
}

impl Supervised {
    /// Spawns `cmd` (see [`spawn_tied`]); `what` names it in the error.
    pub fn spawn(cmd: Command, what: &str, grace: Duration) -> Result<Supervised> {
        let child = spawn_tied(cmd).with_context(|| format!("cannot start {what}"))?;
        Ok(Supervised { pid: child.id(), child: Some(child), grace })
    }

    /// The process id, also its process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child, while it has not been stopped (to take its stdout, say).
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// How it exited, once it has (and after [`Supervised::stop`]: `None`).
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => c.try_wait(),
            None => Ok(None),
        }
    }

    /// Not stopped and has not exited.
    pub fn running(&mut self) -> bool {
        self.child.is_some() && matches!(self.try_wait(), Ok(None))
    }

    /// SIGTERM to the process group, SIGKILL after `grace` (at once when zero) to whatever is
    /// left of it, and the child reaped. Idempotent.
    pub fn stop_within(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        let pgid = self.pid;
        if !grace.is_zero() {
            // The group of our own child, which we have not reaped yet.
            let _ = kill_group(pgid, libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Whatever is left of the group: the leader after the grace period, or anything it started.
        // As above; the leader is reaped only below.
        let _ = kill_group(pgid, libc::SIGKILL);
        let _ = child.wait();
    }

    /// [`Supervised::stop_within`] the grace given at spawn.
    pub fn stop(&mut self) {
        self.stop_within(self.grace);
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The process group `pgid` has no member left (its leader was reaped, nothing it started runs).
pub fn process_group_gone(pgid: u32) -> bool {
    // Signal 0 only checks for existence.
    kill_group(pgid, 0).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH))
}

/// kill(2) of the process group `pgid` with `signal` (0: only whether it exists).
pub fn kill_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes no pointers and changes no memory of this process; a signal to a
    // group is what the callers, which started that group, ask for.
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(-(pgid as libc::pid_t), signal) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Whether `signal` is ignored in this process (as `nohup` leaves SIGHUP): a handler installed
/// over it would change what the caller asked for.
pub fn signal_ignored(signal: libc::c_int) -> bool {
    // SAFETY: sigaction(2) with a null new action only reads the current one into `old`, a
    // zeroed struct of this process's stack.
    #[allow(unsafe_code)]
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Ends this process by `signal` itself, with its default action (after a handler did its
/// cleanup), so that a parent sees it killed by that signal (bash stops a loop on Ctrl-C only
/// then).
pub fn die_by(signal: libc::c_int) -> ! {
    // SAFETY: signal(2) resets this process's disposition and raise(3) sends the signal to it;
    // no memory is touched.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// kill(2) of the one process `pid` with `signal`.
pub fn kill_process(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: as `kill_group`, for one process the caller started.
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(pid as libc::pid_t, signal) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_child_leaves_no_process_in_its_group() {
        let mut cmd = Command::new("sh");
        // The shell starts a grandchild in the same group and waits: a stop must reach both.
        cmd.args(["-c", "sleep 600 & wait"]);
        let mut p = Supervised::spawn(cmd, "sh", Duration::from_secs(2)).unwrap();
        let pid = p.pid();
        assert!(p.running());
        assert!(!process_group_gone(pid));
        p.stop();
        assert!(!p.running());
        // The grandchild, killed with the group, is reaped by init a moment later (until then
        // it is a zombie still counted in the group): poll rather than race it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !process_group_gone(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(process_group_gone(pid), "process group {pid} still has members 5 s after the stop");
    }

    #[test]
    fn a_child_started_from_a_short_lived_thread_outlives_that_thread() {
        let mut p = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("600");
            Supervised::spawn(cmd, "sleep", Duration::ZERO).unwrap()
        })
        .join()
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(p.running(), "PR_SET_PDEATHSIG fired when the spawning test thread ended");
        let pid = p.pid();
        drop(p);
        assert!(process_group_gone(pid));
    }
}
