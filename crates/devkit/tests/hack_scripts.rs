//! Rules for the shell scripts under `hack/` that no shell linter here checks.

use std::path::Path;

/// Every `.sh` file under `hack/`, with its text.
fn scripts() -> Vec<(String, String)> {
    let mut out = vec![];
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("hack/ is readable").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "sh") {
                out.push((p.display().to_string(), std::fs::read_to_string(&p).expect("a script is text")));
            }
        }
    }
    assert!(out.len() > 5, "found the scripts");
    out
}

/// `producer | grep -q pattern` under `set -o pipefail`: grep exits at its first match, the
/// producer may then die of SIGPIPE, and the pipeline fails although the pattern was found.
/// This made `hack/cluster.sh restart kubelet` stop the kubelet with "Address already
/// assigned" in a chaos run (the bridge address check answered "absent"). Pipe into
/// `grep ... >/dev/null`, which reads to the end.
#[test]
fn no_pipe_into_grep_q() {
    let bad = piped_into(|mut words| {
        words.next() == Some("grep") && words.take_while(|w| w.starts_with('-')).any(|w| w.contains('q'))
    });
    assert!(bad.is_empty(), "pipes into `grep -q` (use `grep ... >/dev/null`):\n{}", bad.join("\n"));
}

/// Every code line (`path:line: code`) of a script that pipes into a command `stops_early`
/// says (given the words of the command after a `|`) reads only part of its input.
fn piped_into(stops_early: impl Fn(std::str::SplitWhitespace<'_>) -> bool) -> Vec<String> {
    let mut bad = vec![];
    for (path, text) in scripts() {
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with('#') && code.split('|').skip(1).any(|cmd| stops_early(cmd.split_whitespace())) {
                bad.push(format!("{path}:{}: {code}", i + 1));
            }
        }
    }
    bad
}

/// `producer | head -n N` under `set -o pipefail`: head exits after N lines and the producer,
/// still writing, dies of SIGPIPE; the pipeline fails and `set -e` ends the script. This ended a
/// CI run after every e2e test had passed: `hack/e2e-pool.sh` printed its slowest-tests table
/// with `sort | head -n 12` and never wrote the count `hack/test.sh` reads (26 KB of results:
/// 53 of 200 tries failed). Use `sed -n 1,Np` or `awk 'NR <= N'`, which read to the end.
#[test]
fn no_pipe_into_head() {
    let bad = piped_into(|mut words| words.next() == Some("head"));
    assert!(bad.is_empty(), "pipes into `head` (use `sed -n 1,Np`, which reads to the end):\n{}", bad.join("\n"));
}

/// `cluster.sh down` destroys kube-router's ipsets by the pattern `NETPOL_IPSETS`;
/// `test-cluster-down.sh` must look for leftovers with the same pattern, or a set `down` misses
/// would go unnoticed.
#[test]
fn down_and_its_check_agree_on_kube_routers_ipsets() {
    let hack = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack");
    let cluster = std::fs::read_to_string(hack.join("cluster.sh")).expect("cluster.sh");
    let check = std::fs::read_to_string(hack.join("test-cluster-down.sh")).expect("test-cluster-down.sh");
    let pattern = cluster
        .lines()
        .find_map(|l| l.strip_prefix("NETPOL_IPSETS="))
        .expect("cluster.sh sets NETPOL_IPSETS")
        .trim_matches('\'');
    assert!(check.contains(pattern), "test-cluster-down.sh does not look for ipsets matching {pattern}");
}
