//! Polling the cluster after an action: one snapshot (kubectl + etcd probes) about every 250 ms,
//! milestones recorded the first time they are seen, a bounded wait for the end condition.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, bail};
use tokio::runtime::Runtime;

use crate::etcd::{Member, Probe, probe_all};
use e2e::TestNamespace;

use crate::kube::{PodInfo, StatusInfo, get_view};

const POLL_PERIOD: Duration = Duration::from_millis(250);

/// What one poll saw. `at` is measured from the action's start.
pub struct Snap {
    pub at: Duration,
    pub pods: Vec<PodInfo>,
    pub status: Option<StatusInfo>,
    pub probes: BTreeMap<String, Probe>,
    pub members: Option<Vec<Member>>,
    /// Ready endpoint IPs of the observer's client Service (when it has one).
    pub client_ips: Option<Vec<String>>,
}

impl Snap {
    /// Pods that are not being deleted.
    pub fn live(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.iter().filter(|p| !p.deleting)
    }

    pub fn live_count(&self) -> usize {
        self.live().count()
    }

    pub fn answering(&self) -> usize {
        self.live().filter(|p| self.answers(&p.name)).count()
    }

    pub fn answers(&self, pod: &str) -> bool {
        self.probes.get(pod).is_some_and(|p| p.read_ok)
    }

    pub fn with_ip(&self) -> usize {
        self.live().filter(|p| p.ip.is_some()).count()
    }

    pub fn ready_pods(&self) -> usize {
        self.live().filter(|p| p.ready).count()
    }

    /// etcd's member list has exactly `n` voters, no learners, and every live pod is one.
    pub fn voters_are(&self, n: usize) -> bool {
        self.members.as_ref().is_some_and(|ms| {
            ms.len() == n && ms.iter().all(|m| !m.learner) && self.live().all(|p| ms.iter().any(|m| m.pod == p.name))
        })
    }

    pub fn learners(&self) -> usize {
        self.members.as_ref().map(|ms| ms.iter().filter(|m| m.learner).count()).unwrap_or(0)
    }

    /// Status lists `n` ready members, each a live pod, and no learners.
    pub fn status_ready(&self, n: usize) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.ready.len() == n && s.learners.is_empty() && s.ready.iter().all(|r| self.live().any(|p| p.name == *r))
        })
    }

    pub fn status_ready_count(&self) -> usize {
        self.status.as_ref().map(|s| s.ready.len()).unwrap_or(0)
    }

    pub fn members_reporting(&self, version: &str) -> usize {
        self.live().filter(|p| self.probes.get(&p.name).and_then(|x| x.version.as_deref()) == Some(version)).count()
    }

    /// One line per pod and the status, for error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for p in &self.pods {
            let probe = self.probes.get(&p.name);
            out.push_str(&format!(
                "  pod {} ip={} ready={} init={} restarts={} deleting={} image={} etcd={}\n",
                p.name,
                p.ip.as_deref().unwrap_or("-"),
                p.ready,
                p.initialized,
                p.restarts,
                p.deleting,
                p.image,
                match probe {
                    Some(x) if x.read_ok => format!(
                        "ok v{}{}",
                        x.version.as_deref().unwrap_or("?"),
                        if x.is_leader { " leader" } else { "" }
                    ),
                    Some(x) => format!("no ({})", x.err.as_deref().unwrap_or("?")),
                    None => "not probed".into(),
                }
            ));
        }
        if let Some(ms) = &self.members {
            let list: Vec<String> =
                ms.iter().map(|m| format!("{}{}", m.pod, if m.learner { " (learner)" } else { "" })).collect();
            out.push_str(&format!("  etcd members: {}\n", list.join(", ")));
        }
        if let Some(s) = &self.status {
            out.push_str(&format!(
                "  status: phase={} ready={:?} learners={:?} currentVersion={} leader={}\n",
                s.phase, s.ready, s.learners, s.current_version, s.leader
            ));
        }
        out
    }
}

/// Milestones, each recorded once, at the time of the snapshot that first showed it.
#[derive(Clone, Debug, Default)]
pub struct Marks(pub Vec<(String, Duration)>);

impl Marks {
    pub fn once(&mut self, name: impl Into<String>, cond: bool, at: Duration) {
        let name = name.into();
        if cond && !self.0.iter().any(|(n, _)| *n == name) {
            self.0.push((name, at));
        }
    }

    pub fn get(&self, name: &str) -> Option<Duration> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, d)| *d)
    }
}

/// Watches one namespace from the moment of an action.
pub struct Observer<'a> {
    pub ns: &'a TestNamespace,
    pub rt: &'a Runtime,
    pub selector: String,
    pub cluster: Option<String>,
    /// The Service whose ready endpoints each snapshot records (`<cluster>-client` by default).
    pub client_service: Option<String>,
    pub t0: Instant,
    pub t0_wall: SystemTime,
    pub marks: Marks,
    pub polls: usize,
}

impl<'a> Observer<'a> {
    pub fn new(ns: &'a TestNamespace, rt: &'a Runtime, selector: &str, cluster: Option<&str>) -> Self {
        Observer {
            ns,
            rt,
            selector: selector.to_string(),
            cluster: cluster.map(str::to_string),
            client_service: cluster.map(|c| format!("{c}-client")),
            t0: Instant::now(),
            t0_wall: SystemTime::now(),
            marks: Marks::default(),
            polls: 0,
        }
    }

    /// The clock starts now: call right before the action.
    pub fn start(&mut self) {
        self.t0 = Instant::now();
        self.t0_wall = SystemTime::now();
        self.marks = Marks::default();
        self.polls = 0;
    }

    pub fn snap(&mut self) -> Result<Snap> {
        let (pods, status, client_ips) =
            get_view(self.ns, &self.selector, self.cluster.as_deref(), self.client_service.as_deref())?;
        if let Some(why) = pods.iter().find_map(|p| p.hopeless()) {
            bail!("{why}");
        }
        let targets: Vec<(String, String)> =
            pods.iter().filter(|p| !p.deleting).filter_map(|p| Some((p.name.clone(), p.ip.clone()?))).collect();
        let (probes, members) = self.rt.block_on(probe_all(targets));
        self.polls += 1;
        Ok(Snap { at: self.t0.elapsed(), pods, status, probes, members, client_ips })
    }

    /// Poll until `done` (which also records milestones) says so; returns the time of the
    /// snapshot that satisfied it and that snapshot. Fails after `timeout` with the last view.
    pub fn until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&Snap, &mut Marks) -> bool,
    ) -> Result<(Duration, Snap)> {
        let deadline = Instant::now() + timeout;
        let mut last: Option<Snap> = None;
        let mut last_err = None;
        loop {
            let poll_start = Instant::now();
            match self.snap() {
                Ok(s) => {
                    if done(&s, &mut self.marks) {
                        return Ok((s.at, s));
                    }
                    last = Some(s);
                }
                // A missing image does not fix itself.
                Err(e) if format!("{e}").contains("are the images loaded") => return Err(e),
                // kubectl can fail transiently (apiserver busy): keep polling until the deadline.
                Err(e) => last_err = Some(e),
            }
            if Instant::now() >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; last view:\n{}{}",
                    last.map(|s| s.describe()).unwrap_or_else(|| "  (no successful poll)\n".into()),
                    last_err.map(|e| format!("  last poll error: {e:#}\n")).unwrap_or_default()
                );
            }
            if let Some(rest) = POLL_PERIOD.checked_sub(poll_start.elapsed()) {
                std::thread::sleep(rest);
            }
        }
    }
}
