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

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

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
async fn try_hold(api: &Api<Lease>, cfg: &Config, seen: &mut Option<Seen>) -> Result<bool, kube::Error> {
    let current = api.get_opt(&cfg.name).await?;
    let now = Instant::now();
    let decision = decide(current.as_ref(), seen.as_ref(), &cfg.identity, now, cfg.lease_duration);
    match (decision, current) {
        (Decision::Create, _) => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(cfg.name.clone()), ..Default::default() },
                spec: Some(spec_for(cfg, None, true)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        (Decision::Take { takeover }, Some(mut lease)) => {
            lease.spec = Some(spec_for(cfg, lease.spec.as_ref(), takeover));
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
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
pub async fn acquire(client: kube::Client, cfg: &Config) -> Result<Instant, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut seen = None;
    let mut logged = false;
    loop {
        let sent = Instant::now();
        match try_hold(&api, cfg, &mut seen).await {
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

/// Renew the lease until that fails for longer than the renew deadline; then return (the caller
/// must stop acting at once). `held_since` is when the write that won the lease was sent.
///
/// Every deadline counts from when a successful renewal was *sent*: the apiserver may have
/// stored it at any moment up to the answer, and a standby's clock starts no earlier than that.
/// So a leader stops at most `renew_deadline` + `retry_period` (12 s) after it sent its last
/// successful renewal, while a standby takes over no sooner than `lease_duration` (15 s) after it
/// first saw that renewal, itself no sooner than it was sent.
pub async fn hold(client: kube::Client, cfg: &Config, held_since: Instant) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut last_ok = held_since;
    let mut seen = None;
    loop {
        tokio::time::sleep(cfg.retry_period).await;
        // Stop at most one retry period after the deadline, and never let one attempt run past it.
        let remaining = cfg.renew_deadline.saturating_sub(last_ok.elapsed());
        if remaining.is_zero() {
            tracing::error!(lease = %cfg.name, deadline = ?cfg.renew_deadline, "could not renew the lease in time");
            return;
        }
        let sent = Instant::now();
        match tokio::time::timeout(remaining, try_hold(&api, cfg, &mut seen)).await {
            Ok(Ok(true)) => last_ok = sent,
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
pub async fn release(client: kube::Client, cfg: &Config) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    if let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await
        && let Some(spec) = lease.spec.as_mut().filter(|s| s.holder_identity.as_deref() == Some(&cfg.identity))
    {
        spec.holder_identity = Some(String::new());
        if api.replace(&cfg.name, &PostParams::default(), &lease).await.is_ok() {
            tracing::info!(lease = %cfg.name, "lease released");
        }
    }
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

    #[test]
    fn the_old_leader_stops_before_a_new_one_can_start() {
        let c = Config::new("ns", "etcd-operator", "a");
        // `hold` gives up at most one retry period after the renew deadline.
        assert!(c.renew_deadline + c.retry_period < c.lease_duration, "{c:?}");
    }
}
