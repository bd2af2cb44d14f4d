//! The status screen for people: a verdict line first, then a table of members and the rest.
//! ANSI colour only when `colour` (stdout is a terminal). Pure.

use std::fmt::Write;

use super::model::*;

const RED: &str = "\x1b[31;1m";
const YELLOW: &str = "\x1b[33;1m";
const GREEN: &str = "\x1b[32;1m";
const RESET: &str = "\x1b[0m";

/// Bytes for people: 1.5 MiB.
pub fn bytes(n: i64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", units[u]) }
}

/// A duration for people: 3d4h, 5m, 42s.
pub fn age(secs: i64) -> String {
    let (neg, s) = (secs < 0, secs.unsigned_abs());
    let t = match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    };
    if neg { format!("-{t}") } else { t }
}

fn paint(s: &str, colour: Option<&str>, on: bool) -> String {
    match colour {
        Some(c) if on => format!("{c}{s}{RESET}"),
        _ => s.to_string(),
    }
}

pub fn text(s: &Status, colour: bool, _now: i64) -> String {
    let mut o = String::new();
    let c = &s.cluster;
    let vc = match s.verdict.health {
        Health::Healthy => GREEN,
        Health::Degraded => YELLOW,
        Health::QuorumLost | Health::Unknown => RED,
    };
    let _ = writeln!(o, "{}", paint(&format!("Verdict: {}", s.verdict.message), Some(vc), colour));
    let _ = writeln!(
        o,
        "Cluster: {}/{}  size {}  version {} (running {})  phase {}  TLS {}  auth {}{}",
        c.namespace,
        c.name,
        c.size,
        c.version,
        if c.current_version.is_empty() { "?" } else { &c.current_version },
        if c.phase.is_empty() { "?" } else { &c.phase },
        c.tls,
        if c.auth { "on" } else { "off" },
        if c.paused { "  PAUSED" } else { "" }
    );
    let _ = writeln!(o);
    let header =
        ["MEMBER", "NODE", "ID", "ROLE", "VERSION", "RAFT INDEX", "LAG", "DB SIZE", "IN USE", "ALARMS", "READY"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let dash = || "-".to_string();
    for m in &s.members {
        let role = match (m.reachable, m.role) {
            (false, _) => "unreachable".into(),
            (true, Some(Role::Leader)) => "leader".into(),
            (true, Some(Role::Follower)) => "follower".into(),
            (true, Some(Role::Learner)) => "learner".into(),
            (true, None) => "no leader".into(),
        };
        rows.push(vec![
            m.pod.clone(),
            m.node.clone().unwrap_or_else(dash),
            m.member_id.clone().unwrap_or_else(dash),
            role,
            m.version.clone().unwrap_or_else(dash),
            m.raft_index.map_or_else(dash, |v| v.to_string()),
            m.raft_lag.map_or_else(dash, |v| v.to_string()),
            m.db_size.map_or_else(dash, bytes),
            m.db_size_in_use.map_or_else(dash, bytes),
            if m.alarms.is_empty() { dash() } else { m.alarms.join(",") },
            if m.ready { "yes".into() } else { format!("no ({})", m.phase) },
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for (n, r) in rows.iter().enumerate() {
        let line: Vec<String> = r.iter().zip(&widths).map(|(v, w)| format!("{v:<w$}")).collect();
        let line = line.join("  ").trim_end().to_string();
        let bad = n > 0 && !s.members[n - 1].reachable;
        let _ = writeln!(o, "{}", paint(&line, bad.then_some(RED), colour));
    }
    for m in s.members.iter().filter(|m| m.error.is_some()) {
        let _ = writeln!(o, "  {}: {}", m.pod, m.error.as_deref().unwrap_or(""));
    }
    let _ = writeln!(o);
    if !s.conditions.is_empty() {
        let _ = writeln!(o, "Conditions:");
        for cd in &s.conditions {
            let _ = writeln!(o, "  {}={}  {}  {}", cd.type_, cd.status, cd.reason, cd.message);
        }
    }
    if !s.waiting_for.is_empty() {
        let _ = writeln!(o, "Operator:");
        for w in &s.waiting_for {
            let _ = writeln!(o, "  {w}");
        }
    }
    match &s.last_backup {
        Some(b) => {
            let _ = writeln!(
                o,
                "Last backup: {} ago ({}), {} {}, {} [EtcdBackup {}]",
                b.age_seconds.map_or_else(|| "?".into(), age),
                b.time,
                b.storage_type,
                b.path,
                bytes(b.size),
                b.name
            );
        }
        None => {
            let _ = writeln!(o, "Last backup: none succeeded");
        }
    }
    for cert in &s.certificates {
        let left = cert.expires_in_seconds;
        let col = if left < 0 {
            Some(RED)
        } else if left < 14 * 86400 {
            Some(YELLOW)
        } else {
            None
        };
        let line = format!("Certificate {}/{}: expires in {} ({})", cert.secret, cert.key, age(left), cert.not_after);
        let _ = writeln!(o, "{}", paint(&line, col, colour));
    }
    if let Some(p) = &s.disruption_budget {
        let _ = writeln!(
            o,
            "Disruption budget: {} allowed ({} healthy, {} needed, minAvailable {})",
            p.disruptions_allowed,
            p.current_healthy,
            p.desired_healthy,
            p.min_available.as_deref().unwrap_or("-")
        );
    }
    for u in &s.unseen {
        let _ = writeln!(o, "{}", paint(&format!("Not seen: {u}"), Some(YELLOW), colour));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Status {
        let m = |pod: &str, role, reachable| Member {
            pod: pod.into(),
            reachable,
            ready: reachable,
            role,
            raft_index: reachable.then_some(10),
            error: (!reachable).then(|| "status: no answer within 3s".into()),
            ..Default::default()
        };
        let members =
            vec![m("ex-a", Some(Role::Leader), true), m("ex-b", Some(Role::Follower), true), m("ex-c", None, false)];
        let verdict = verdict(&members, 3, Some("ex-a"));
        Status { schema: SCHEMA.into(), members, verdict, leader: Some("ex-a".into()), ..Default::default() }
    }

    #[test]
    fn plain_text_has_the_verdict_first_and_a_row_per_member() {
        let t = text(&sample(), false, 0);
        assert!(t.lines().next().unwrap().starts_with("Verdict: DEGRADED"), "{t}");
        assert!(!t.contains('\x1b'), "no colour off a terminal: {t}");
        for (pod, role) in [("ex-a", "leader"), ("ex-b", "follower"), ("ex-c", "unreachable")] {
            assert!(t.lines().any(|l| l.starts_with(pod) && l.contains(role)), "{pod} {role}: {t}");
        }
        assert!(t.contains("ex-c: status: no answer within 3s"), "{t}");
    }

    #[test]
    fn colour_on_a_terminal() {
        assert!(text(&sample(), true, 0).starts_with(YELLOW));
    }

    #[test]
    fn sizes_and_ages() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(age(42), "42s");
        assert_eq!(age(90 * 86400 + 3600), "90d1h");
        assert_eq!(age(-120), "-2m");
    }
}
