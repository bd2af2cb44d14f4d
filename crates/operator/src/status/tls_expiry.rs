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

/// Sets or removes `CertificatesExpiring`; `now` is RFC 3339.
pub fn update_condition(cs: &mut Vec<Condition>, o: &Observed, now: &str) {
    let at = now.parse::<k8s_openapi::jiff::Timestamp>().map(|t| t.as_second()).unwrap_or_default();
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

    #[test]
    fn the_message_changes_only_when_a_threshold_is_crossed() {
        let certs = [cert("srv", "server.crt", 20)];
        let at = |d: i64| warning(&certs, NOW + d * DAY).unwrap();
        assert_eq!(at(0), at(12), "the same Event-worthy text for days");
        assert_ne!(at(12).1, at(14).1);
        assert!(at(0).2.contains("2030-04-06T17:46:40Z"), "the date itself: {}", at(0).2);
    }
}
