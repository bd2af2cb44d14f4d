//! Warning before static TLS certificates expire: the `CertificatesExpiring` condition (a
//! Warning Event when it turns on or moves to a nearer threshold) at 30 and 7 days before the
//! first certificate in use (or a CA that issued one) stops being valid, and the metric
//! `etcd_operator_cluster_certificate_expiry_timestamp_seconds` (`metrics`). `spec.TLS.auto`
//! renews its own certificates and says so in `CertificatesReady`: no warning for those. Pure.

use etcd_operator_api::condition::{self, Condition};

use crate::observed::Observed;
use crate::tls::material::Expiry;

pub const CERTIFICATES_EXPIRING: &str = "CertificatesExpiring";
const DAY: i64 = 24 * 3600;
/// The warning thresholds, in days, farthest first.
pub const WARN_DAYS: [i64; 2] = [30, 7];

/// The reason and message for `expiries` at `now` (seconds since the epoch): `None` when
/// nothing expires within the first threshold. The message names every certificate within the
/// threshold of the reason, with its date (it changes only when a threshold is crossed).
pub fn warning(expiries: &[Expiry], now: i64) -> Option<(bool, &'static str, String)> {
    let mut soon: Vec<&Expiry> = expiries.iter().collect();
    soon.sort_by_key(|e| (e.not_after, e.secret.clone(), e.key.clone()));
    let first = soon.first()?;
    let left = first.not_after - now;
    let (reason, within) = if left <= 0 {
        ("Expired", 0)
    } else if left <= WARN_DAYS[1] * DAY {
        ("ExpiresWithin7Days", WARN_DAYS[1])
    } else if left <= WARN_DAYS[0] * DAY {
        ("ExpiresWithin30Days", WARN_DAYS[0])
    } else {
        let msg = format!("the first certificate to expire is {} at {}", what(first), date(first.not_after));
        return Some((false, "Valid", msg));
    };
    let limit = if within == 0 { now } else { now + within * DAY };
    let named: Vec<String> =
        soon.iter().filter(|e| e.not_after <= limit).map(|e| format!("{} at {}", what(e), date(e.not_after))).collect();
    let msg = if within == 0 {
        format!("expired: {}; put a renewed certificate into its Secret", named.join(", "))
    } else {
        format!(
            "expiring within {within} days: {}; put a renewed certificate into its Secret (etcd reads certificate files at each connection: no restart), or rotate the CA (docs: CA rotation)",
            named.join(", ")
        )
    };
    Some((true, reason, msg))
}

fn what(e: &Expiry) -> String {
    format!("Secret {} key {} ({})", e.secret, e.key, e.subject)
}

fn date(t: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(t).map(|t| t.to_string()).unwrap_or_else(|_| t.to_string())
}

/// The earliest end of validity of the certificates in use, for the metric; `None` without
/// static TLS.
pub fn earliest(o: &Observed) -> Option<i64> {
    applies(o).then(|| o.tls_material.expiries.iter().map(|e| e.not_after).min()).flatten()
}

/// Static TLS material was read (auto TLS renews its own).
fn applies(o: &Observed) -> bool {
    o.certificates.is_none() && o.desired.is_ok()
}

/// How long after its renewal was due a managed certificate may still be in use: the copy into
/// the cluster's Secret, a reconcile or two. A quarter of `renewBefore`, from one to ten minutes.
pub fn renewal_grace(renew_before: i64) -> i64 {
    (renew_before / 4).clamp(60, 600)
}

/// A certificate something renews for the cluster, as its Secret holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub leaf: crate::tls::auto::Leaf,
    pub subject: String,
    pub not_before: i64,
    pub not_after: i64,
}

impl Held {
    /// When it is due for renewal: `renew_before` before it expires, or (as cert-manager does when
    /// `renewBefore` is not shorter than the certificate's lifetime, e.g. an issuer that caps
    /// lifetimes) at two thirds of its lifetime.
    pub fn due(&self, renew_before: i64) -> i64 {
        let lifetime = self.not_after - self.not_before;
        let before = if renew_before >= lifetime { lifetime / 3 } else { renew_before };
        self.not_after - before
    }
}

/// The certificate still in use longest past [`renewal_grace`] after its renewal was due, and
/// when it was due.
pub fn overdue(held: &[Held], renew_before: i64, now: i64) -> Option<(&Held, i64)> {
    held.iter()
        .map(|h| (h, h.due(renew_before)))
        .filter(|(h, due)| now > due + renewal_grace(h.not_after - due))
        .min_by_key(|(h, due)| (*due, h.leaf))
}

/// The certificates renewed for the cluster (`spec.TLS.auto`, `spec.TLS.certManager`, also while
/// either is being turned off), their `renewBefore`, and whether cert-manager issues them. `None`:
/// static TLS or none. Empty while a CA rotation is under way: renewed certificates are then
/// held back on purpose (`CertificatesReady` says where the rotation is).
fn managed(o: &Observed) -> Option<(Vec<Held>, i64, bool)> {
    use crate::tls::auto::state::{Found, Phase};
    let c = o.certificates.as_ref()?;
    let cert_manager = c.cert_manager.is_some() || o.desired.as_ref().is_ok_and(|d| d.tls_cert_manager.is_some());
    if matches!(&c.ca, Found::Present(ca) if ca.phase != Phase::Steady) {
        return Some((vec![], c.settings.renew_before, cert_manager));
    }
    let held = c
        .leaves
        .iter()
        .filter_map(|(leaf, f)| match f {
            Found::Present(l) => l.cert.as_ref().map(|cert| Held {
                leaf: *leaf,
                subject: cert.subject.clone(),
                not_before: cert.not_before,
                not_after: cert.not_after,
            }),
            _ => None,
        })
        .collect();
    Some((held, c.settings.renew_before, cert_manager))
}

/// Whether a managed certificate's renewal is overdue now, for the metric; `None` for static
/// TLS or none.
pub fn renewal_overdue(o: &Observed, now: i64) -> Option<bool> {
    let (held, renew_before, _) = managed(o)?;
    Some(overdue(&held, renew_before, now).is_some())
}

fn overdue_message(o: &Observed, late: &Held, due: i64, cert_manager: bool, now: i64) -> String {
    let expired = if late.not_after <= now { "expired" } else { "expires" };
    let who = if cert_manager {
        format!(
            "cert-manager has not issued its renewal: see `kubectl describe certificate {}` and its issuer",
            crate::tls::cert_manager::name(&o.name, late.leaf)
        )
    } else {
        "the operator has not renewed it: see CertificatesReady and the operator's log".to_string()
    };
    format!(
        "not renewed in time: the certificate of Secret {} ({}) was due for renewal at {} and {expired} at {}; {who}",
        late.leaf.secret(&o.name),
        late.subject,
        date(due),
        date(late.not_after)
    )
}

/// Sets or removes `CertificatesExpiring`; `now` is RFC 3339.
pub fn update_condition(cs: &mut Vec<Condition>, o: &Observed, now: &str) {
    let at = now.parse::<k8s_openapi::jiff::Timestamp>().map(|t| t.as_second()).unwrap_or_default();
    if let Some((held, renew_before, cert_manager)) = managed(o) {
        match overdue(&held, renew_before, at) {
            Some((late, due)) => condition::upsert(
                cs,
                Condition {
                    type_: CERTIFICATES_EXPIRING.into(),
                    status: "True".into(),
                    reason: "RenewalOverdue".into(),
                    message: overdue_message(o, late, due, cert_manager, at),
                    ..Default::default()
                },
                now,
            ),
            None => condition::remove(cs, CERTIFICATES_EXPIRING),
        }
        return;
    }
    match warning(&o.tls_material.expiries, at).filter(|_| applies(o)) {
        Some((on, reason, message)) => condition::upsert(
            cs,
            Condition {
                type_: CERTIFICATES_EXPIRING.into(),
                status: if on { "True" } else { "False" }.into(),
                reason: reason.into(),
                message,
                ..Default::default()
            },
            now,
        ),
        None => condition::remove(cs, CERTIFICATES_EXPIRING),
    }
}

/// A person must act: something expires within a threshold.
pub fn is_warning(c: &Condition) -> bool {
    c.type_ == CERTIFICATES_EXPIRING && c.status == "True"
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_900_000_000;

    fn cert(secret: &str, key: &str, days: i64) -> Expiry {
        Expiry { secret: secret.into(), key: key.into(), subject: format!("CN={key}"), not_after: NOW + days * DAY }
    }

    /// One row per moment before the first certificate expires: the reason the condition
    /// shows (status True: a warning) and which certificates its message names.
    #[test]
    fn warnings_at_30_and_7_days_before_the_first_certificate_expires() {
        let certs =
            [cert("srv", "server.crt", 40), cert("op", "etcd-client-ca.crt", 400), cert("peer", "peer.crt", 45)];
        // (days from now, status, reason, names in the message)
        let rows: [(i64, bool, &str, &[&str]); 7] = [
            (0, false, "Valid", &["server.crt"]),
            (9, false, "Valid", &["server.crt"]),
            (10, true, "ExpiresWithin30Days", &["server.crt"]),
            (16, true, "ExpiresWithin30Days", &["server.crt", "peer.crt"]),
            (33, true, "ExpiresWithin7Days", &["server.crt"]),
            (39, true, "ExpiresWithin7Days", &["server.crt", "peer.crt"]),
            (41, true, "Expired", &["server.crt"]),
        ];
        for (days, on, reason, named) in rows {
            let (s, r, msg) = warning(&certs, NOW + days * DAY).unwrap();
            assert_eq!((s, r), (on, reason), "day {days}: {msg}");
            for n in named {
                assert!(msg.contains(n), "day {days}: {msg} should name {n}");
            }
            if on {
                assert!(!msg.contains("etcd-client-ca.crt"), "day {days}: far from expiry: {msg}");
            }
        }
        assert!(warning(&[], NOW).is_none(), "no certificates: no condition");
    }

    /// Certificates the operator or cert-manager renews: one is overdue once it is still in use
    /// a grace after its renewal was due (`renewBefore` before it expires, or at two thirds of a
    /// lifetime shorter than `renewBefore`). Rows: seconds from NOW, overdue.
    #[test]
    fn a_managed_certificate_is_overdue_a_grace_after_its_renewal_was_due() {
        use crate::tls::auto::Leaf;
        const H: i64 = 3600;
        let held = |leaf: Leaf, lifetime: i64, left: i64| Held {
            leaf,
            subject: format!("CN={}", leaf.as_str()),
            not_before: NOW + left - lifetime,
            not_after: NOW + left,
        };
        // Renewed 20 minutes before expiry: due at NOW + 40m (server) and NOW + 100m (peer).
        let renew_before = 20 * 60;
        let certs = [held(Leaf::Server, 2 * H, H), held(Leaf::Peer, 2 * H, 2 * H)];
        let grace = renewal_grace(renew_before);
        assert_eq!(grace, 5 * 60, "a quarter of renewBefore");
        let rows: [(i64, bool); 5] =
            [(0, false), (40 * 60, false), (40 * 60 + grace, false), (40 * 60 + grace + 1, true), (2 * H, true)];
        for (t, late) in rows {
            let got = overdue(&certs, renew_before, NOW + t);
            assert_eq!(got.is_some(), late, "at +{t}s: {got:?}");
            if let Some((h, due)) = got {
                assert_eq!((h.leaf, due), (Leaf::Server, NOW + 40 * 60), "the first one due");
            }
        }
        assert_eq!(renewal_grace(2 * 60), 60, "at least a minute");
        assert_eq!(renewal_grace(30 * 24 * H), 10 * 60, "at most ten minutes");
        assert!(overdue(&[], renew_before, NOW + 10 * H).is_none());
        // An issuer that capped the lifetime at 1h while renewBefore asks 2h: due at 2/3 of the
        // hour (cert-manager's rule), not at once.
        let capped = [held(Leaf::Operator, H, H)];
        assert!(overdue(&capped, 2 * H, NOW).is_none(), "just issued: not overdue");
        assert_eq!(capped[0].due(2 * H), NOW + 2 * H / 3);
        assert!(overdue(&capped, 2 * H, NOW + 2 * H / 3 + renewal_grace(H / 3)).is_none());
        assert!(overdue(&capped, 2 * H, NOW + 2 * H / 3 + renewal_grace(H / 3) + 1).is_some());
    }

    #[test]
    fn the_message_changes_only_when_a_threshold_is_crossed() {
        let certs = [cert("srv", "server.crt", 20)];
        let at = |d: i64| warning(&certs, NOW + d * DAY).unwrap();
        assert_eq!(at(0), at(12), "the same Event-worthy text for days");
        assert_ne!(at(12).1, at(14).1);
        assert!(at(0).2.contains("2030-04-06T17:46:40Z"), "the date itself: {}", at(0).2);
    }
}
