//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas exactly one
//! acts. kube-rs has none built in.
//!
//! Timings (defaults): lease 15 s, renew every 2 s, give up leadership when no renewal has
//! succeeded for 10 s. A leader that cannot renew stops (the process exits) at most 12 s after
//! its last successful renewal; a candidate takes over only once it has seen the same lease
//! unrenewed for 15 s *on its own clock* (timestamps from other machines are not trusted), so
//! the old leader has stopped at least 3 s before a new one starts: no split brain. A killed
//! leader is replaced within about 15–17 s; a leader shut down cleanly releases the lease and is
//! replaced within one retry period (2 s).
//!
//! Several Leases (a cluster-wide install: its own and the shared one, `take_all`) are won in a
//! fixed order, so that two replicas never each hold one and wait forever for the other; each
//! is renewed from the moment it is won, so one won first never expires while the next is
//! awaited (which took as long as another install held the shared Lease, and then cost the
//! leadership at once).

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// The three calls leader election makes on one namespace's Leases (`Api<Lease>`; tests use an
/// in-memory store).
pub trait LeaseApi {
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<Lease>, kube::Error>> + Send;
    /// Fails with 409 when it exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Fails with 409 when its resourceVersion is not the stored one.
    fn replace(&self, name: &str, lease: &Lease) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

impl LeaseApi for Api<Lease> {
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<Lease>, kube::Error>> + Send {
        self.get_opt(name)
    }
    async fn create(&self, lease: &Lease) -> Result<(), kube::Error> {
        Api::create(self, &PostParams::default(), lease).await.map(drop)
    }
    async fn replace(&self, name: &str, lease: &Lease) -> Result<(), kube::Error> {
        Api::replace(self, name, &PostParams::default(), lease).await.map(drop)
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// The Lease every cluster-wide operator of a Kubernetes cluster shares.
pub const CLUSTER_WIDE_LEASE: &str = "etcd-operator-cluster-wide";

impl Config {
    pub fn new(namespace: &str, name: &str, identity: &str) -> Config {
        Config {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate remembers of the lease it last saw: its holder and version, and when (on the
/// local clock) that version was first seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub holder: String,
    pub resource_version: String,
    pub since: Instant,
}

/// What to do with the lease now.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// No lease exists: create it holding it.
    Create,
    /// Write it with us as holder (renewal, or takeover of an expired or released lease).
    Take { takeover: bool },
    /// Someone else holds it and it has not expired by our clock.
    Wait,
}

/// Pure: decide from the current lease and what was seen before.
pub fn decide(lease: Option<&Lease>, seen: Option<&Seen>, me: &str, now: Instant, duration: Duration) -> Decision {
    let Some(lease) = lease else { return Decision::Create };
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    if holder == me {
        return Decision::Take { takeover: false };
    }
    if holder.is_empty() {
        return Decision::Take { takeover: true }; // released
    }
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    match seen {
        Some(s) if s.holder == holder && s.resource_version == rv && now.duration_since(s.since) >= duration => {
            Decision::Take { takeover: true }
        }
        _ => Decision::Wait,
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn spec_for(cfg: &Config, previous: Option<&LeaseSpec>, takeover: bool) -> LeaseSpec {
    let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs() as i32),
        acquire_time: if takeover || previous.is_none() {
            Some(now_micro())
        } else {
            previous.and_then(|s| s.acquire_time.clone())
        },
        renew_time: Some(now_micro()),
        lease_transitions: Some(if takeover { transitions + 1 } else { transitions }),
        ..Default::default()
    }
}

/// One attempt to hold the lease; `Ok(true)` when we hold it now. Writes use the lease's
/// resourceVersion, so two candidates cannot both win a takeover.
async fn try_hold<A: LeaseApi>(api: &A, cfg: &Config, seen: &mut Option<Seen>) -> Result<bool, kube::Error> {
    let current = api.get(&cfg.name).await?;
    let now = Instant::now();
    let decision = decide(current.as_ref(), seen.as_ref(), &cfg.identity, now, cfg.lease_duration);
    match (decision, current) {
        (Decision::Create, _) => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(cfg.name.clone()), ..Default::default() },
                spec: Some(spec_for(cfg, None, true)),
            };
            match api.create(&lease).await {
                Ok(()) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        (Decision::Take { takeover }, Some(mut lease)) => {
            lease.spec = Some(spec_for(cfg, lease.spec.as_ref(), takeover));
            match api.replace(&cfg.name, &lease).await {
                Ok(()) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        (_, current) => {
            let holder = current
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default();
            let rv = current.as_ref().and_then(|l| l.metadata.resource_version.clone()).unwrap_or_default();
            if seen.as_ref().is_none_or(|s| s.holder != holder || s.resource_version != rv) {
                *seen = Some(Seen { holder, resource_version: rv, since: now });
            }
            Ok(false)
        }
    }
}

/// Block until this replica holds the lease. Returns when the winning write was *sent*: the
/// lease counts as renewed from then, never from when the answer came back.
pub async fn acquire<A: LeaseApi>(api: &A, cfg: &Config) -> Result<Instant, kube::Error> {
    let mut seen = None;
    let mut logged = false;
    loop {
        let sent = Instant::now();
        match try_hold(api, cfg, &mut seen).await {
            Ok(true) => {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                return Ok(sent);
            }
            Ok(false) => {
                if !logged {
                    let holder = seen.as_ref().map(|s| s.holder.clone()).unwrap_or_default();
                    tracing::info!(lease = %cfg.name, %holder, "another replica leads; waiting");
                    logged = true;
                }
            }
            Err(kube::Error::Api(s)) if s.code == 403 => return Err(kube::Error::Api(s)),
            Err(e) => tracing::warn!(error = %e, "leader election: lease not readable; retrying"),
        }
        tokio::time::sleep(cfg.retry_period).await;
    }
}

/// A lease this replica holds: renewed by [`Holding::keep`].
pub struct Holding<A> {
    api: A,
    pub cfg: Config,
    /// When the last successful renewal (or the winning write) was sent.
    last_ok: Instant,
    seen: Option<Seen>,
}

impl<A: LeaseApi> Holding<A> {
    pub fn new(api: A, cfg: Config, held_since: Instant) -> Holding<A> {
        Holding { api, cfg, last_ok: held_since, seen: None }
    }

    /// Renew the lease until that fails for longer than the renew deadline; then return (the
    /// caller must stop acting at once). May be dropped and called again: it resumes from the
    /// last successful renewal.
    ///
    /// Every deadline counts from when a successful renewal was *sent*: the apiserver may have
    /// stored it at any moment up to the answer, and a standby's clock starts no earlier than
    /// that. So a leader stops at most `renew_deadline` + `retry_period` (12 s) after it sent its
    /// last successful renewal, while a standby takes over no sooner than `lease_duration` (15 s)
    /// after it first saw that renewal, itself no sooner than it was sent.
    pub async fn keep(&mut self) {
        let cfg = &self.cfg;
        loop {
            tokio::time::sleep(cfg.retry_period).await;
            // Stop at most one retry period after the deadline, and never let one attempt run
            // past it.
            let remaining = cfg.renew_deadline.saturating_sub(self.last_ok.elapsed());
            if remaining.is_zero() {
                tracing::error!(lease = %cfg.name, deadline = ?cfg.renew_deadline, "could not renew the lease in time");
                return;
            }
            let sent = Instant::now();
            match tokio::time::timeout(remaining, try_hold(&self.api, cfg, &mut self.seen)).await {
                Ok(Ok(true)) => self.last_ok = sent,
                Ok(Ok(false)) => {
                    tracing::error!(lease = %cfg.name, "the lease was taken by another replica");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "could not renew the lease"),
                Err(_) => tracing::warn!("renewing the lease timed out"),
            }
        }
    }

    /// Give the lease up on a clean shutdown so another replica takes over at once.
    pub async fn release(&self) {
        let cfg = &self.cfg;
        if let Ok(Some(mut lease)) = self.api.get(&cfg.name).await
            && let Some(spec) = lease.spec.as_mut().filter(|s| s.holder_identity.as_deref() == Some(&cfg.identity))
        {
            spec.holder_identity = Some(String::new());
            if self.api.replace(&cfg.name, &lease).await.is_ok() {
                tracing::info!(lease = %cfg.name, "lease released");
            }
        }
    }
}

/// Renews every lease of `held`; resolves with the index of the first one lost (never while
/// none is held).
pub async fn keep_all<A: LeaseApi>(held: &mut [Holding<A>]) -> usize {
    if held.is_empty() {
        return std::future::pending().await;
    }
    futures::future::select_all(held.iter_mut().map(|h| Box::pin(h.keep()))).await.1
}

/// Why leadership over several leases could not be won.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[error("leader election on Lease {0}: {1}")]
    Refused(String, kube::Error),
    #[error("Lease {0} was lost while the next one was awaited")]
    Lost(String),
}

/// Win every lease of `leases`, one after the other in their order, renewing each from the
/// moment it is won; returns them all held. Fails when the apiserver refuses one (403) or one
/// already won is lost meanwhile.
pub async fn take_all<A: LeaseApi>(leases: Vec<(A, Config)>) -> Result<Vec<Holding<A>>, TakeError> {
    let mut held: Vec<Holding<A>> = Vec::new();
    for (api, cfg) in leases {
        let outcome = tokio::select! {
            r = acquire(&api, &cfg) => Ok(r),
            i = keep_all(&mut held) => Err(i),
        };
        let since = match outcome {
            Ok(r) => r.map_err(|e| TakeError::Refused(format!("{}/{}", cfg.namespace, cfg.name), e))?,
            Err(i) => return Err(TakeError::Lost(format!("{}/{}", held[i].cfg.namespace, held[i].cfg.name))),
        };
        held.push(Holding::new(api, cfg, since));
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta { resource_version: Some(rv.into()), ..Default::default() },
            spec: Some(LeaseSpec { holder_identity: Some(holder.into()), ..Default::default() }),
        }
    }

    const D: Duration = Duration::from_secs(15);

    #[test]
    fn no_lease_is_created() {
        assert_eq!(decide(None, None, "a", Instant::now(), D), Decision::Create);
    }

    #[test]
    fn our_own_lease_is_renewed() {
        assert_eq!(decide(Some(&lease("a", "1")), None, "a", Instant::now(), D), Decision::Take { takeover: false });
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        assert_eq!(decide(Some(&lease("", "1")), None, "b", Instant::now(), D), Decision::Take { takeover: true });
    }

    #[test]
    fn another_holders_lease_is_taken_only_after_a_full_duration_unchanged_on_our_clock() {
        let t0 = Instant::now();
        let l = lease("a", "7");
        assert_eq!(decide(Some(&l), None, "b", t0, D), Decision::Wait);
        let seen = Seen { holder: "a".into(), resource_version: "7".into(), since: t0 };
        assert_eq!(decide(Some(&l), Some(&seen), "b", t0 + Duration::from_secs(14), D), Decision::Wait);
        assert_eq!(decide(Some(&l), Some(&seen), "b", t0 + D, D), Decision::Take { takeover: true });
        // A renewal (new resourceVersion) restarts the wait.
        assert_eq!(decide(Some(&lease("a", "8")), Some(&seen), "b", t0 + D, D), Decision::Wait);
    }

    /// One namespace's Leases in memory, with the apiserver's optimistic concurrency.
    #[derive(Clone, Default)]
    struct Store(std::sync::Arc<std::sync::Mutex<(std::collections::BTreeMap<String, Lease>, u64)>>);

    fn conflict() -> kube::Error {
        kube::Error::Api(kube::core::Status::failure("conflict", "Conflict").with_code(409).boxed())
    }

    impl Store {
        fn write(&self, name: &str, mut lease: Lease, expect_rv: Option<&str>) -> Result<(), kube::Error> {
            let mut g = self.0.lock().unwrap();
            let stored = g.0.get(name).and_then(|l| l.metadata.resource_version.clone());
            if stored.as_deref() != expect_rv {
                return Err(conflict());
            }
            g.1 += 1;
            lease.metadata.name = Some(name.into());
            lease.metadata.resource_version = Some(g.1.to_string());
            g.0.insert(name.into(), lease);
            Ok(())
        }

        fn holder(&self, name: &str) -> Option<String> {
            let g = self.0.lock().unwrap();
            g.0.get(name).and_then(|l| l.spec.as_ref()?.holder_identity.clone())
        }

        fn version(&self, name: &str) -> u64 {
            let g = self.0.lock().unwrap();
            g.0.get(name).and_then(|l| l.metadata.resource_version.as_ref()?.parse().ok()).unwrap_or(0)
        }

        /// Someone else writes the lease as holder `who` (a renewal of theirs, or a takeover).
        fn force(&self, name: &str, who: &str) {
            let rv = self.0.lock().unwrap().0.get(name).and_then(|l| l.metadata.resource_version.clone());
            let spec = LeaseSpec { holder_identity: Some(who.into()), ..Default::default() };
            self.write(name, Lease { metadata: ObjectMeta::default(), spec: Some(spec) }, rv.as_deref()).unwrap();
        }
    }

    impl LeaseApi for Store {
        async fn get(&self, name: &str) -> Result<Option<Lease>, kube::Error> {
            Ok(self.0.lock().unwrap().0.get(name).cloned())
        }
        async fn create(&self, lease: &Lease) -> Result<(), kube::Error> {
            let name = lease.metadata.name.clone().unwrap_or_default();
            if self.0.lock().unwrap().0.contains_key(&name) {
                return Err(conflict());
            }
            self.write(&name, lease.clone(), None)
        }
        async fn replace(&self, name: &str, lease: &Lease) -> Result<(), kube::Error> {
            self.write(name, lease.clone(), lease.metadata.resource_version.as_deref())
        }
    }

    /// Short timings with the production ratios (renew deadline + retry < duration).
    fn quick(name: &str, me: &str) -> Config {
        Config {
            lease_duration: Duration::from_millis(600),
            renew_deadline: Duration::from_millis(350),
            retry_period: Duration::from_millis(100),
            ..Config::new("ns", name, me)
        }
    }

    /// The shared Lease is held by another install for a while: the install's own Lease, won
    /// first, is renewed all that time (a standby replica of this install never takes it over),
    /// and once the shared one is won too, both are kept: the leadership is not lost at once.
    #[tokio::test]
    async fn a_lease_won_first_is_renewed_while_the_next_is_awaited() {
        let store = Store::default();
        store.force("shared", "other-install");
        let renewing = {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..15 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    store.force("shared", "other-install");
                }
            })
        };
        let leases = vec![(store.clone(), quick("own", "me")), (store.clone(), quick("shared", "me"))];
        let taking = tokio::spawn(take_all(leases));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(store.holder("own").as_deref(), Some("me"));
        assert_eq!(store.holder("shared").as_deref(), Some("other-install"), "still waiting");
        // Renewed while waiting: its version moves every retry period.
        // (Polled for a while rather than after one fixed sleep: on a loaded machine a retry
        // period can come late, which is not what this test is about.)
        let v = store.version("own");
        let mut renewed = false;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if store.version("own") > v && store.holder("shared").as_deref() == Some("other-install") {
                renewed = true;
                break;
            }
        }
        assert!(renewed, "the lease won first is not renewed while the next is awaited");
        renewing.await.unwrap();
        let mut held = tokio::time::timeout(Duration::from_secs(3), taking).await.expect("won").unwrap().unwrap();
        assert_eq!(store.holder("shared").as_deref(), Some("me"));
        // Both kept well past a renew deadline.
        let kept = tokio::time::timeout(Duration::from_millis(1000), keep_all(&mut held)).await;
        assert!(kept.is_err(), "a lease was lost right after both were won: {kept:?}");
    }

    /// A lease won first and taken by someone else while the next is awaited ends the attempt.
    #[tokio::test]
    async fn losing_a_lease_won_first_ends_the_wait_for_the_next() {
        let store = Store::default();
        store.force("shared", "other-install");
        let leases = vec![(store.clone(), quick("own", "me")), (store.clone(), quick("shared", "me"))];
        let taking = tokio::spawn(take_all(leases));
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.force("shared", "other-install");
        store.force("own", "intruder");
        store.force("shared", "other-install");
        let r = tokio::time::timeout(Duration::from_secs(2), taking).await.expect("ended").unwrap();
        assert!(matches!(&r, Err(TakeError::Lost(name)) if name == "ns/own"), "{:?}", r.err());
    }

    #[test]
    fn the_old_leader_stops_before_a_new_one_can_start() {
        let c = Config::new("ns", "etcd-operator", "a");
        // `hold` gives up at most one retry period after the renew deadline.
        assert!(c.renew_deadline + c.retry_period < c.lease_duration, "{c:?}");
    }
}
