//! The certificate planner: from what the Secrets hold, what members serve and how the
//! cluster is doing, the one next write (or why there is none). Pure; asked once per
//! observation by `decide`, whose plan the controller writes (`controller::certificates`) and
//! whose status says where it stands.
//!
//! The rules, in the order they are applied:
//! - a Secret the EtcdCluster does not own is never overwritten (a person must move it);
//! - `spec.TLS.auto` turned off while members still use its certificates (the TLS stage on the
//!   way off): only certificates are written (renewed, issued again, as below) by the CA that
//!   signs; no CA is created, replaced or rotated;
//! - no CA Secret: a new CA when the member pods seen mount no certificate, or no cluster
//!   exists yet (no pod, no volume, never formed); else the lost CA is replaced by a rotation
//!   that keeps trusting what the members trust now (the bundles of the certificate Secrets);
//!   with nothing to keep, a new CA only while no member pod exists (the API server's list is
//!   asked first: `nothing_trusts_a_ca`), else a person must look;
//! - a certificate Secret that is missing, refused by the checks, not issued by the signing CA,
//!   due (`renewBefore`), or longer-lived than `validity` now allows, is issued again; one
//!   whose bundle is not the CAs members must trust gets the bundle (its certificate kept).
//!   Neither restarts anything: etcd reads certificate files at every new connection;
//! - a CA rotation moves on only when members allow it: from `introducing` once every member
//!   runs from the current pod spec (its bundle) and every voter is healthy; from `reissuing`
//!   once every member serves certificates of the new CA on its client and peer port; from
//!   `dropping` (finished) once every member restarted again. The restarts themselves are the
//!   rollout planner's (the bundle is part of the pod-spec hash): one member at a time, never
//!   past an unhealthy one;
//! - a new CA rotation starts when the CA is due (a third of its lifetime left, or it outlives
//!   `caValidity`, or it has no key: a CA cert-manager's issuer held) or `rotate-ca` names a
//!   value not handled yet, only while no rotation or restart is under way and the cluster is
//!   not paused.
//!
//! With `spec.TLS.certManager` the same rules hold, with cert-manager as the signer
//! (`tls::cert_manager`): the four Certificates are made (or put back to what the spec asks)
//! first; nothing is issued while the API server serves no cert-manager Certificates; the CA
//! Secret holds the issuer's CA without its key (created once cert-manager issued the peer and
//! server certificates from one CA); "issue a certificate" is copying cert-manager's from its
//! Secret, only when the CA that signed it is one the certificate may come from now, and a
//! certificate cert-manager renewed is copied the same way; where the certificate of the new
//! CA is needed (`reissuing`) and cert-manager still holds one of the old CA, it is asked to
//! renew it; a certificate cert-manager issued from a CA members do not trust starts a CA
//! rotation (the issuer's CA changed); `rotate-ca` has no effect (rotate the issuer's CA).

use std::collections::BTreeSet;

use crate::observed::Observed;
use crate::tls::auto::decision::{Decision, LeafWrite};
use crate::tls::auto::state::{CaState, CertId, CertInfo, Found, Observation, Phase};
use crate::tls::auto::{Leaf, ROTATE_CA_ANNOTATION, ca_secret, show};

/// Slack when comparing a certificate's remaining lifetime with the configured one.
const LIFETIME_SLACK_SECS: i64 = 60;

fn wait(reason: &'static str, message: impl Into<String>) -> Decision {
    Decision::Wait { reason, message: message.into() }
}

#[cfg(test)]
thread_local! {
    /// How many times [`plan`] ran on this thread (tests count what one reconcile asks).
    pub static PLANS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Decide the next write for the cluster's certificates.
pub fn plan(o: &Observed) -> Decision {
    #[cfg(test)]
    PLANS.with(|n| n.set(n.get() + 1));
    let Some(c) = &o.certificates else { return Decision::Off };
    if let Some(e) = &c.read_error {
        return wait("Unreadable", e.clone());
    }
    let mut not_ours = vec![];
    if let Found::NotOurs(why) = &c.ca {
        not_ours.push(why.clone());
    }
    not_ours.extend(c.leaves.values().filter_map(|l| match l {
        Found::NotOurs(why) => Some(why.clone()),
        _ => None,
    }));
    if !not_ours.is_empty() {
        return Decision::Blocked(format!(
            "{}: the operator never overwrites a Secret it does not own; delete or rename it",
            not_ours.join("; ")
        ));
    }
    if c.leaving {
        return leaving(c);
    }
    if let Some(cm) = &c.cert_manager
        && let Some(d) = cert_manager_first(cm, &c.cluster)
    {
        return d;
    }
    let ca = match &c.ca {
        Found::Present(ca) => ca,
        Found::Invalid(errs) => {
            return Decision::Blocked(format!(
                "{}; fix the Secret, or delete it and the operator introduces a new CA (members restart twice)",
                errs.join("; ")
            ));
        }
        Found::Missing | Found::NotOurs(_) => return lost_ca(o, c),
    };
    if c.cert_manager.is_none()
        && ca.phase != Phase::Steady
        && [&ca.signing, &ca.next].into_iter().flatten().any(|a| a.key.is_none())
    {
        return Decision::Blocked(format!(
            "Secret {} is in CA rotation phase {} with a CA whose key it does not hold (cert-manager's issuer's CA, or a deleted key): spec.TLS.auto cannot sign with it; set spec.TLS.certManager again to finish the rotation, or restore the key",
            ca_secret(&c.cluster),
            ca.phase.as_str()
        ));
    }
    let writes = leaf_writes(c, ca);
    if !writes.is_empty() {
        return Decision::WriteLeaves(writes);
    }
    match ca.phase {
        Phase::Introducing => match rolled(o, c) {
            Ok(()) if o.paused => wait("CARotation", "CA rotation 1/3 waits: spec.paused is true"),
            Ok(()) => Decision::PromoteNextCa,
            Err(why) => wait(
                "CARotation",
                format!("CA rotation 1/3: members restart one at a time to trust the new CA beside the old one: {why}"),
            ),
        },
        Phase::Reissuing => match leaves_from_signing_ca(c, ca).and_then(|()| serving_signing_ca(o, c, ca)) {
            Ok(()) if o.paused => wait("CARotation", "CA rotation 2/3 waits: spec.paused is true"),
            Ok(()) => Decision::DropPreviousCa,
            Err(why) => wait(
                "CARotation",
                format!(
                    "CA rotation 2/3: certificates of the new CA were issued; the old CA stays trusted until every member serves them: {why}"
                ),
            ),
        },
        Phase::Dropping => match rolled(o, c) {
            Ok(()) => Decision::FinishCaRotation,
            Err(why) => wait(
                "CARotation",
                format!(
                    "CA rotation 3/3: the old CA left the bundles; members restart one at a time to stop trusting it: {why}"
                ),
            ),
        },
        Phase::Steady => match ca_due(c, ca) {
            None => settled(o, c, ca),
            Some(why) => match rolled(o, c) {
                Ok(()) if o.paused => wait("CARotationDue", format!("{why}; the rotation waits: spec.paused is true")),
                Ok(()) => Decision::StartCaRotation { why },
                Err(e) => wait("CARotationDue", format!("{why}; the rotation starts once {e}")),
            },
        },
    }
}

/// `spec.TLS.auto` was turned off while members still use its certificates: they are renewed
/// (by the CA that signs now) until no member does; no CA is created, replaced or rotated.
fn leaving(c: &Observation) -> Decision {
    let soonest = Leaf::ALL.iter().filter_map(|l| c.leaf(*l)?.cert.as_ref()).map(|x| x.not_after).min();
    let Some(ca) = c.ca.present().filter(|ca| ca.signing.as_ref().is_some_and(|a| a.key.is_some())) else {
        let due = soonest.is_some_and(|t| c.now >= t - c.settings.renew_before);
        let why = format!(
            "spec.TLS.auto is off and members still use its certificates, but Secret {} holds no CA that can sign: they are not renewed",
            ca_secret(&c.cluster)
        );
        return match soonest {
            Some(t) if due => Decision::Blocked(format!(
                "{why}, and one expires at {}; restore the CA Secret, or set spec.TLS.auto again",
                crate::tls::auto::state::at(t)
            )),
            _ => wait("TurningOff", format!("{why}; members are moving off TLS")),
        };
    };
    let writes = leaf_writes(c, ca);
    if !writes.is_empty() {
        return Decision::WriteLeaves(writes);
    }
    wait(
        "TurningOff",
        format!(
            "spec.TLS.auto is off: members are moving off TLS; until none uses the certificates they are renewed (the next renewal is due at {}); no CA rotation",
            crate::tls::auto::state::at(soonest.unwrap_or(0) - c.settings.renew_before)
        ),
    )
}

/// No member pod mounts a certificate Secret: no member trusts any CA. Also asked of the API
/// server's own pod list right before a CA is created (`controller::certificates`), since the
/// watch cache may lag.
pub fn nothing_trusts_a_ca<'a>(pods: impl IntoIterator<Item = &'a crate::tls::transition::PodTls>) -> bool {
    pods.into_iter().all(|p| p.peer_secret.is_none() && p.server_secret.is_none())
}

/// No CA Secret. With cert-manager, a CA can only be taken once cert-manager issued from one.
fn lost_ca(o: &Observed, c: &Observation) -> Decision {
    let d = lost_ca_of(o, c);
    match (&c.cert_manager, &d) {
        (Some(cm), Decision::CreateCa | Decision::ReplaceLostCa { .. }) if cm.issuing_ca().is_none() => wait(
            "Issuing",
            format!(
                "waiting for cert-manager to issue the peer and server certificates from one CA: {}",
                cm.different_cas().unwrap_or_else(|| cm.waiting_for())
            ),
        ),
        _ => d,
    }
}

fn lost_ca_of(o: &Observed, c: &Observation) -> Decision {
    // Nothing trusts any CA yet: the member pods seen mount no certificate (a plaintext cluster
    // turning auto TLS on; its members get the certificates one at a time, `tls::transition`),
    // or there is no cluster yet (no pod, no volume, never formed: what a bootstrap asks). A
    // cache showing no pod of a cluster that has volumes or formed proves nothing.
    let seen = !o.pods.is_empty();
    let new_cluster = !seen && o.pvcs.is_empty() && !o.ever_bootstrapped;
    if nothing_trusts_a_ca(o.pods.values().map(|p| &p.tls)) && (seen || new_cluster) {
        return Decision::CreateCa;
    }
    let mut trusted: Vec<CertInfo> = vec![];
    for l in c.leaves.values().filter_map(Found::present) {
        for t in &l.trust {
            if !trusted.iter().any(|x| x.id == t.id) {
                trusted.push(t.clone());
            }
        }
    }
    if !trusted.is_empty() {
        // A rotation beside what the members trust: safe whether or not they run now.
        return Decision::ReplaceLostCa { trusted };
    }
    if !seen {
        // Every Secret gone and no member pod in sight (members wait on their volumes): they
        // start with a new CA. The API server's pod list is asked first (a stale cache).
        return Decision::CreateCa;
    }
    Decision::Blocked(format!(
        "Secret {} (the cluster's CA) and every certificate Secret are gone while members run: the operator cannot know which CA they trust, and a new one would cut them off from each other; restore the Secrets (or delete the member pods of a cluster whose data is on volumes: its members then start with a new CA)",
        ca_secret(&c.cluster)
    ))
}

/// Certificate Secrets to write, in `Leaf::ALL` order.
fn leaf_writes(c: &Observation, ca: &CaState) -> Vec<LeafWrite> {
    if let Some(cm) = &c.cert_manager {
        return copies(c, cm, ca);
    }
    let trust = ca.trust_ids();
    let signing: Option<&CertId> = ca.signing.as_ref().filter(|a| a.key.is_some()).map(|a| &a.cert.id);
    let acceptable = acceptable_issuers(ca, signing);
    let (now, s) = (c.now, &c.settings);
    let mut out = vec![];
    for leaf in Leaf::ALL {
        let secret = leaf.secret(&c.cluster);
        let why = match c.leaves.get(&leaf).unwrap_or(&Found::Missing) {
            Found::Missing => Some(format!("Secret {secret} does not exist")),
            Found::NotOurs(_) | Found::Invalid(_) => None,
            Found::Present(l) => match &l.cert {
                _ if !l.problems.is_empty() => Some(l.problems.join("; ")),
                None => Some(format!("Secret {secret} holds no certificate")),
                Some(_) if !l.issuer.as_ref().is_some_and(|i| acceptable.contains(i)) => Some(match ca.phase {
                    Phase::Reissuing => "issued again by the new CA".to_string(),
                    _ => format!("Secret {secret}: not issued by the cluster's CA"),
                }),
                Some(cert) if now >= cert.not_after - s.renew_before => Some(format!(
                    "renewal: Secret {secret} expires at {} (renewed {} before)",
                    cert.expires(),
                    show(s.renew_before)
                )),
                Some(cert) if cert.not_after - now > s.validity + LIFETIME_SLACK_SECS => Some(format!(
                    "Secret {secret} is valid until {}, longer than spec.TLS.auto.validity {} allows from now",
                    cert.expires(),
                    show(s.validity)
                )),
                Some(_) => None,
            },
        };
        match (why, c.leaves.get(&leaf).and_then(Found::present)) {
            // Without a signing CA (a lost CA being replaced) nothing can be issued until the
            // new one signs; the members keep what they have.
            (Some(why), _) if signing.is_some() => out.push(LeafWrite::Issue { leaf, why }),
            (None, Some(l)) if l.trust_ids() != trust => out.push(LeafWrite::Retrust { leaf }),
            _ => {}
        }
    }
    out
}

/// The CAs a certificate may come from now: while a new CA is introduced, any CA members trust
/// already (not the new one: they do not trust it yet); otherwise only `signing`.
fn acceptable_issuers(ca: &CaState, signing: Option<&CertId>) -> BTreeSet<CertId> {
    match ca.phase {
        Phase::Introducing => {
            let next = ca.next.as_ref().map(|n| &n.cert.id);
            ca.trust_ids().into_iter().filter(|id| Some(id) != next).collect()
        }
        _ => signing.into_iter().cloned().collect(),
    }
}

/// Why a new CA is due, if it is.
fn ca_due(c: &Observation, ca: &CaState) -> Option<String> {
    if let Some(cm) = &c.cert_manager {
        return cm.untrusted_ca(&ca.trust_ids()).map(|(leaf, new)| {
            format!(
                "cert-manager issued Secret {} from a CA the members do not trust yet ({}, valid until {}): the issuer's CA changed",
                crate::tls::cert_manager::name(&c.cluster, leaf),
                new.subject,
                new.expires()
            )
        });
    }
    let a = ca.signing.as_ref()?;
    if a.key.is_none() {
        return Some(format!(
            "the CA in Secret {} has no key (it was cert-manager's issuer's): a CA of the operator's own is introduced",
            ca_secret(&c.cluster)
        ));
    }
    if let Some(token) = &c.rotate_ca
        && ca.rotated_for.as_ref() != Some(token)
    {
        return Some(format!("CA rotation asked for by annotation {ROTATE_CA_ANNOTATION}={token}"));
    }
    let s = &c.settings;
    if c.now >= a.cert.not_after - s.ca_renew_before() {
        return Some(format!("the CA expires at {} (renewed with a third of its lifetime left)", a.cert.expires()));
    }
    if a.cert.not_after - c.now > s.ca_validity + LIFETIME_SLACK_SECS {
        return Some(format!(
            "the CA is valid until {}, longer than spec.TLS.auto.caValidity {} allows from now",
            a.cert.expires(),
            show(s.ca_validity)
        ));
    }
    None
}

/// Every member runs from the current pod spec (bundle included), every voter is healthy and
/// membership is what the spec asks: the gate of each restart-bound phase.
pub fn rolled(o: &Observed, c: &Observation) -> Result<(), String> {
    let d = o.desired.as_ref().map_err(|_| "the spec or its TLS material is refused".to_string())?;
    let mut d = d.clone();
    d.tls_trust = c.trust_fingerprint();
    // As the rollout planner expects it: members kept as root for their data hash differently.
    let (hash, root_hash) = (d.pod_hash_for(false), d.pod_hash_for(true));
    let etcd = o.etcd.as_ref().ok_or_else(|| "no member answers".to_string())?;
    if let Some(l) = etcd.learners().next() {
        return Err(format!("learner {} is joining", l.pod));
    }
    let voters: Vec<_> = etcd.voters().collect();
    if voters.len() != d.size {
        return Err(format!("{} voting members, the spec asks for {}", voters.len(), d.size));
    }
    let expected = |pod: &str| if crate::planner::root_data(o, pod) { root_hash.as_str() } else { hash.as_str() };
    let mut pending = vec![];
    for m in &voters {
        if !m.is_healthy() {
            return Err(format!("member {} is not healthy", m.pod));
        }
        match o.pods.get(&m.pod) {
            None => return Err(format!("member {} has no pod", m.pod)),
            Some(p) if p.deleting => return Err(format!("member {} is restarting", m.pod)),
            Some(p) if p.spec_hash.as_deref() != Some(expected(&m.pod)) => pending.push(m.pod.clone()),
            Some(_) => {}
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    pending.sort();
    Err(format!(
        "{} of {} members restarted; still to go: {}",
        voters.len() - pending.len(),
        voters.len(),
        pending.join(", ")
    ))
}

/// Every certificate Secret (members', the operator's, the applications') holds a certificate
/// of the signing CA: only then may the old CA leave the bundles. (With cert-manager a
/// certificate may still be of the old CA while its renewal is pending or failing.)
fn leaves_from_signing_ca(c: &Observation, ca: &CaState) -> Result<(), String> {
    let signing = ca.signing.as_ref().map(|a| &a.cert.id).ok_or("no CA signs")?;
    let behind: Vec<String> = Leaf::ALL
        .into_iter()
        .filter(|l| c.leaf(*l).and_then(|s| s.issuer.as_ref()) != Some(signing))
        .map(|l| l.secret(&c.cluster))
        .collect();
    if behind.is_empty() {
        return Ok(());
    }
    let waiting =
        c.cert_manager.as_ref().map(|cm| format!(" (cert-manager: {})", cm.waiting_for())).unwrap_or_default();
    Err(format!("{} still hold(s) a certificate of the old CA{waiting}", behind.join(", ")))
}

/// Every member serves, on its client and on its peer port, a certificate of the signing CA.
fn serving_signing_ca(o: &Observed, c: &Observation, ca: &CaState) -> Result<(), String> {
    let signing = ca.signing.as_ref().map(|a| &a.cert.id).ok_or("no CA signs")?;
    let etcd = o.etcd.as_ref().ok_or_else(|| "no member answers".to_string())?;
    let mut behind = vec![];
    for m in &etcd.members {
        if !m.is_learner && !m.is_healthy() {
            return Err(format!("member {} is not healthy", m.pod));
        }
        let Some(s) = c.served.get(&m.pod) else {
            behind.push(format!("{} (not checked yet)", m.pod));
            continue;
        };
        for (port, r) in [("client", &s.client), ("peer", &s.peer)] {
            match r {
                Ok(sc) if sc.issuer.as_ref() == Some(signing) => {}
                Ok(_) => behind.push(format!("{} ({port} port: a certificate of the old CA)", m.pod)),
                Err(e) => behind.push(format!("{} ({port} port: {e})", m.pod)),
            }
        }
    }
    if behind.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "not yet {} (the kubelet updates mounted Secrets within about a minute; etcd reads them at the next connection)",
            behind.join(", ")
        ))
    }
}

/// Steady state: do members serve what the Secrets hold?
fn settled(o: &Observed, c: &Observation, ca: &CaState) -> Decision {
    let (Some(peer), Some(server)) =
        (c.leaf(Leaf::Peer).and_then(|l| l.cert.as_ref()), c.leaf(Leaf::Server).and_then(|l| l.cert.as_ref()))
    else {
        return wait("Issuing", "the member certificates are being issued");
    };
    let Some(etcd) = &o.etcd else {
        return wait("Checking", "no member answers yet: what members serve is not checked");
    };
    let mut behind = vec![];
    for m in &etcd.members {
        match c.served.get(&m.pod) {
            None => behind.push(format!("{} (not checked)", m.pod)),
            Some(s) => {
                for (port, r, want) in [("client", &s.client, server), ("peer", &s.peer, peer)] {
                    match r {
                        Ok(sc) if sc.cert.id == want.id => {}
                        Ok(sc) => behind.push(format!("{} ({port} port: serial {})", m.pod, sc.cert.serial)),
                        Err(e) => behind.push(format!("{} ({port} port: {e})", m.pod)),
                    }
                }
            }
        }
    }
    if !behind.is_empty() {
        return wait(
            "Renewing",
            format!(
                "members still serving other certificates than their Secrets hold: {} (the kubelet updates mounted Secrets within about a minute; etcd reads them at the next connection)",
                behind.join(", ")
            ),
        );
    }
    let soonest = Leaf::ALL.iter().filter_map(|l| c.leaf(*l)?.cert.as_ref()).map(|x| x.not_after).min().unwrap_or(0);
    let ca_end = ca.signing.as_ref().map(|a| a.cert.expires()).unwrap_or_default();
    Decision::Settled {
        message: format!(
            "every member serves the current certificates; the next renewal is due at {} ({} before the first expiry); the CA is valid until {ca_end}",
            crate::tls::auto::state::at(soonest - c.settings.renew_before),
            show(c.settings.renew_before)
        ),
    }
}

/// cert-manager's side, before anything about the CA: its API served, the Certificates as
/// the spec asks. `None`: nothing to do there.
fn cert_manager_first(cm: &crate::tls::cert_manager::Observed, cluster: &str) -> Option<Decision> {
    use crate::tls::cert_manager::{GROUP, VERSION, name};
    if let Err(e) = &cm.api {
        return Some(Decision::Blocked(format!(
            "spec.TLS.certManager: {e}; install cert-manager ({GROUP}/{VERSION}), or use spec.TLS.auto or static; nothing was changed"
        )));
    }
    let not_ours: Vec<String> = Leaf::ALL
        .iter()
        .filter(|l| cm.certificates.get(l).and_then(Option::as_ref).is_some_and(|c| !c.ours))
        .map(|l| format!("Certificate {} exists and is not owned by the EtcdCluster", name(cluster, *l)))
        .collect();
    if !not_ours.is_empty() {
        return Some(Decision::Blocked(format!(
            "{}: the operator never overwrites a Certificate it does not own; delete or rename it",
            not_ours.join("; ")
        )));
    }
    let apply: Vec<Leaf> = Leaf::ALL
        .into_iter()
        .filter(|l| cm.certificates.get(l).and_then(Option::as_ref).is_none_or(|c| !c.spec_current))
        .collect();
    if !apply.is_empty() {
        return Some(Decision::ApplyCertificates(apply));
    }
    (!cm.unowned_secrets.is_empty()).then(|| Decision::OwnIssuedSecrets(cm.unowned_secrets.clone()))
}

/// With cert-manager: which of its certificates to copy (or ask it to renew), and which
/// bundles to write.
fn copies(c: &Observation, cm: &crate::tls::cert_manager::Observed, ca: &CaState) -> Vec<LeafWrite> {
    let trust = ca.trust_ids();
    // cert-manager signs: the signing CA needs no key here.
    let acceptable = acceptable_issuers(ca, ca.signing.as_ref().map(|a| &a.cert.id));
    let mut out = vec![];
    for leaf in Leaf::ALL {
        let secret = leaf.secret(&c.cluster);
        let ours = c.leaves.get(&leaf).unwrap_or(&Found::Missing);
        let source = cm.issued(leaf).filter(|i| i.usable());
        let from_acceptable = source.filter(|i| i.issuer().is_some_and(|id| acceptable.contains(id)));
        let why = match ours {
            Found::Missing => Some(format!("Secret {secret} does not exist")),
            Found::NotOurs(_) | Found::Invalid(_) => None,
            Found::Present(l) => match &l.cert {
                _ if !l.problems.is_empty() => Some(l.problems.join("; ")),
                None => Some(format!("Secret {secret} holds no certificate")),
                Some(_) if !l.issuer.as_ref().is_some_and(|i| acceptable.contains(i)) => Some(match ca.phase {
                    Phase::Reissuing => "the certificate of the new CA".to_string(),
                    _ => format!("Secret {secret}: not issued by the CA cert-manager issues from"),
                }),
                Some(cert) if from_acceptable.is_some_and(|i| i.cert.id != cert.id) => Some(format!(
                    "cert-manager issued a new certificate (serial {})",
                    from_acceptable.map(|i| i.cert.serial.clone()).unwrap_or_default()
                )),
                Some(_) => None,
            },
        };
        let present = c.leaves.get(&leaf).and_then(Found::present);
        match (why, from_acceptable) {
            (Some(why), Some(_)) => out.push(LeafWrite::Issue { leaf, why }),
            // The certificate of the new CA is needed and cert-manager holds one of another CA:
            // ask it to issue again (once: not while it is issuing).
            // (Only one of a CA being left: one of yet another CA means the issuer moved again,
            // which a renewal would not mend. Never while cert-manager issues it, nor after a
            // failed issue: cert-manager's own backoff decides when it tries again.)
            (Some(_), None)
                if ca.phase == Phase::Reissuing
                    && source.is_some_and(|i| i.issuer().is_some_and(|id| ca.previous.iter().any(|p| &p.id == id)))
                    && !cm.certificates.get(&leaf).and_then(Option::as_ref).is_some_and(|s| s.issuing || s.failed) =>
            {
                out.push(LeafWrite::Renew { leaf })
            }
            (None, _) if present.is_some_and(|l| l.trust_ids() != trust) => out.push(LeafWrite::Retrust { leaf }),
            _ => {}
        }
    }
    out
}
