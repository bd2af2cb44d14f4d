//! `etcd-restore-step`: the middle init container of a restored etcd member. It runs inside the
//! member's own etcd image (whose `etcdutl`/`etcdctl` must do the restore: its version writes the
//! data directory the member's etcd reads), copied there by the `restore-fetch` init container
//! onto the member's data volume. etcd images have no shell, so this small static program is what
//! makes the step idempotent:
//!
//! - the member already holds data (its init containers run again on a new pod sandbox, or after
//!   a restart of the pod on its volume): nothing is restored, the data is kept;
//! - otherwise the scratch output of an earlier attempt that died half-way (the kubelet re-runs
//!   only the failed init container, and etcdutl refuses a non-empty target) is cleared first,
//!   then the tool runs.
//!
//! Usage: `etcd-restore-step --data-dir DIR --output-dir DIR -- TOOL ARGS...`
//!
//! Second use, in a point-in-time restore's verify pod: `etcd-restore-step --copy-into DIR
//! FILE...` copies the etcd image's own binaries (`etcd`, `etcdutl`) onto the pod's scratch
//! volume, where the operator's image runs them to replay the archive (the etcd image has no
//! `cp`).
//!
//! Test hook: with `ETCD_RESTORE_STEP_FAILPOINT=kill-once` the first run kills the tool with
//! SIGKILL as soon as it has written part of its output, and fails (the end-to-end suite's way of
//! dying half-way); later runs on the same volume behave normally.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// The environment variable of the test hook.
const FAILPOINT_ENV: &str = "ETCD_RESTORE_STEP_FAILPOINT";

#[derive(Debug, PartialEq)]
struct Args {
    data_dir: PathBuf,
    output_dir: PathBuf,
    tool: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let (mut data_dir, mut output_dir) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<Option<PathBuf>, String> {
            if let Some(v) = a.strip_prefix(&format!("{flag}=")) {
                return Ok(Some(v.into()));
            }
            if a == flag {
                return it.next().map(|v| Some(v.into())).ok_or_else(|| format!("{flag} needs a value"));
            }
            Ok(None)
        };
        if let Some(v) = value("--data-dir")? {
            data_dir = Some(v);
        } else if let Some(v) = value("--output-dir")? {
            output_dir = Some(v);
        } else if a == "--" {
            let tool: Vec<String> = it.cloned().collect();
            if tool.is_empty() {
                return Err("no restore command after --".into());
            }
            return Ok(Args {
                data_dir: data_dir.ok_or("--data-dir is required")?,
                output_dir: output_dir.ok_or("--output-dir is required")?,
                tool,
            });
        } else {
            return Err(format!("unknown argument {a:?}"));
        }
    }
    Err("usage: etcd-restore-step --data-dir DIR --output-dir DIR -- TOOL ARGS...".into())
}

/// What the step does, decided from the volume alone.
#[derive(Debug, PartialEq)]
enum Plan {
    /// The member has its data: restore nothing.
    Keep,
    /// Clear the output of an earlier attempt (if any), then run the tool.
    Restore { clear_first: bool },
}

fn has_member_data(dir: &Path) -> bool {
    dir.join("member").is_dir()
}

fn plan(a: &Args) -> Plan {
    if has_member_data(&a.data_dir) { Plan::Keep } else { Plan::Restore { clear_first: a.output_dir.exists() } }
}

fn run(a: &Args) -> Result<String, String> {
    match plan(a) {
        Plan::Keep => {
            return Ok(format!("{} already holds this member's data; nothing restored", a.data_dir.display()));
        }
        Plan::Restore { clear_first: true } => {
            std::fs::remove_dir_all(&a.output_dir)
                .map_err(|e| format!("clear the output of an earlier attempt {}: {e}", a.output_dir.display()))?;
            eprintln!("cleared {} (an earlier attempt ended half-way)", a.output_dir.display());
        }
        Plan::Restore { clear_first: false } => {}
    }
    let mut child =
        Command::new(&a.tool[0]).args(&a.tool[1..]).spawn().map_err(|e| format!("start {}: {e}", a.tool[0]))?;
    if std::env::var(FAILPOINT_ENV).as_deref() == Ok("kill-once") {
        let fired = a.output_dir.with_extension("failpoint-fired");
        if !fired.exists() {
            std::fs::write(&fired, b"").map_err(|e| format!("failpoint mark {}: {e}", fired.display()))?;
            let started = Instant::now();
            while !a.output_dir.join("member").exists() && started.elapsed() < Duration::from_secs(60) {
                if child.try_wait().map_err(|e| e.to_string())?.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("failpoint {FAILPOINT_ENV}=kill-once: killed {} half-way", a.tool[0]));
        }
    }
    let status = child.wait().map_err(|e| format!("wait for {}: {e}", a.tool[0]))?;
    if !status.success() {
        return Err(format!("{} failed: {status}", a.tool.join(" ")));
    }
    Ok(format!("restored into {}", a.output_dir.display()))
}

/// `--copy-into DIR FILE...`: each file into DIR, executable, under its own name.
fn copy_into(args: &[String]) -> Option<Result<String, String>> {
    let dir = args.first()?.strip_prefix("--copy-into=")?;
    let files = &args[1..];
    if files.is_empty() {
        return Some(Err("--copy-into needs files to copy".into()));
    }
    Some(files.iter().try_fold(String::new(), |mut done, f| {
        let name = Path::new(f).file_name().ok_or_else(|| format!("{f} names no file"))?;
        let to = Path::new(dir).join(name);
        std::fs::copy(f, &to).map_err(|e| format!("copy {f} to {}: {e}", to.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {}: {e}", to.display()))?;
        done.push_str(&format!("copied {f} to {}\n", to.display()));
        Ok(done)
    }))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = copy_into(&args).unwrap_or_else(|| parse(&args).and_then(|a| run(&a)));
    match result {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("etcd-restore-step: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("restore-step-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn args(root: &Path, tool: &[&str]) -> Args {
        Args {
            data_dir: root.join("data"),
            output_dir: root.join("restore/data"),
            tool: tool.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn flags_parse_in_both_forms_and_the_tool_follows_the_separator() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = parse(&v(&["--data-dir=/d", "--output-dir", "/o", "--", "etcdutl", "snapshot", "restore"])).unwrap();
        assert_eq!((a.data_dir, a.output_dir), (PathBuf::from("/d"), PathBuf::from("/o")));
        assert_eq!(a.tool, ["etcdutl", "snapshot", "restore"]);
        assert!(parse(&v(&["--data-dir=/d", "--", "x"])).unwrap_err().contains("--output-dir"));
        assert!(parse(&v(&["--data-dir=/d", "--output-dir=/o", "--"])).unwrap_err().contains("no restore command"));
        assert!(parse(&v(&["--bogus"])).unwrap_err().contains("--bogus"));
    }

    /// The defect this program exists for: a restore that died half-way left output behind and
    /// the tool (which refuses a non-empty target) crash-looped on every retry.
    #[test]
    fn the_output_of_an_attempt_that_died_half_way_is_cleared_before_the_tool_runs_again() {
        let root = tmp("half");
        let out = root.join("restore/data");
        // Like etcdutl: refuses an existing target.
        let script =
            format!("test ! -e {0} && mkdir -p {0}/member/snap && echo ok > {0}/member/snap/db", out.display());
        let a = args(&root, &["/bin/sh", "-c", &script]);
        std::fs::create_dir_all(a.output_dir.join("member/wal")).unwrap(); // half-way output
        assert_eq!(plan(&a), Plan::Restore { clear_first: true });
        run(&a).unwrap();
        assert_eq!(std::fs::read_to_string(a.output_dir.join("member/snap/db")).unwrap(), "ok\n");
        assert!(!a.output_dir.join("member/wal").exists(), "the old output is gone");
    }

    /// The other defect: a member that has its data does not restore again (it used to copy its
    /// whole database to feed a restore that was then thrown away: twice the disk).
    #[test]
    fn a_member_with_data_restores_nothing() {
        let root = tmp("kept");
        let a = args(&root, &["/bin/false"]);
        std::fs::create_dir_all(a.data_dir.join("member/snap")).unwrap();
        assert_eq!(plan(&a), Plan::Keep);
        assert!(run(&a).unwrap().contains("nothing restored"));
    }

    #[test]
    fn copy_into_copies_each_file_executable_under_its_name() {
        let root = tmp("copy");
        let src = root.join("etcd");
        std::fs::write(&src, b"binary").unwrap();
        let dir = root.join("work");
        std::fs::create_dir_all(&dir).unwrap();
        let args = vec![format!("--copy-into={}", dir.display()), src.display().to_string()];
        copy_into(&args).unwrap().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let copied = std::fs::metadata(dir.join("etcd")).unwrap();
        assert_eq!(
            (std::fs::read(dir.join("etcd")).unwrap(), copied.permissions().mode() & 0o777),
            (b"binary".to_vec(), 0o755)
        );
        assert!(copy_into(&[format!("--copy-into={}", dir.display())]).unwrap().is_err(), "nothing to copy");
        let missing = vec![format!("--copy-into={}", dir.display()), root.join("nope").display().to_string()];
        assert!(copy_into(&missing).unwrap().unwrap_err().contains("nope"));
        assert!(copy_into(&["--data-dir=/d".to_string()]).is_none(), "the restore use");
    }

    #[test]
    fn a_failing_tool_fails_the_step() {
        let root = tmp("fail");
        let a = args(&root, &["/bin/false"]);
        assert!(run(&a).unwrap_err().contains("/bin/false failed"));
    }
}
