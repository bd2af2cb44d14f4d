//! `spec.TLS.auto`: certificates the operator makes and rotates itself. Everything the static
//! pipeline does (mounts, flags, the operator's and backup pods' client, the material checks)
//! is reused: auto TLS is the operator filling, in the static key layout, the Secrets a static
//! policy would name ([`policy`]).
//!
//! The Secrets, all owned by the EtcdCluster (deleted with it):
//! - `<name>-tls-ca`: the cluster's CA (`ca.crt`, `ca.key`); during a CA rotation also the CA
//!   being introduced (`next-ca.crt`, `next-ca.key`) or the one being retired
//!   (`previous-ca.crt`), and the phase in the `ca-rotation` annotation;
//! - `<name>-tls-peer`, `<name>-tls-server`: what members mount (CoreOS keys);
//! - `<name>-tls-operator`: the operator's and backup pods' client certificate;
//! - `<name>-tls-client`: a client certificate for applications (`etcd-client.crt`,
//!   `etcd-client.key`, `etcd-client-ca.crt`; also an EtcdBackup's `clientTLSSecret`).
//!
//! What etcd reloads decides how things rotate (etcd's `client/pkg/transport/listener.go`):
//! the certificate and key files are read again at every TLS handshake (`GetCertificate`,
//! `GetClientCertificate`), the trusted CA files only when etcd starts (`ClientCAs`/`RootCAs`
//! are built once). So a certificate is renewed by writing its Secret: the kubelet updates the
//! mounted files (within about a minute) and etcd serves the new certificate at the next
//! connection, with no restart. A new CA needs restarts, one member at a time, gated on health
//! like any rolling change (the bundle's fingerprint is part of the pod-spec hash, so the
//! rollout planner rolls them), and an overlap in which every member trusts both CAs:
//! 1. `introducing`: the new CA is added to every `*-ca.crt`; members restart to load it;
//! 2. `reissuing`: once every member runs with the bundle, the new CA signs and every
//!    certificate is issued again from it (no restart);
//! 3. `dropping`: once every member serves certificates of the new CA (checked by connecting
//!    to each member's client and peer port), the old CA leaves the bundles and members
//!    restart once more; then the rotation is finished.
//!
//! Pure here and in `issuer`, `state`, `decision`, `secrets`; I/O in `read` (Secret GETs).
//! Over the whole observation, in the layers: the planner `planner::certificates`, the
//! condition `status::tls_auto`, the probe of what members serve `observe::tls_probe`; the
//! writes are `controller::certificates`.

pub mod decision;
pub mod issuer;
pub mod read;
pub mod secrets;
pub mod state;

use etcd_operator_api::cluster::AutoTls;

use super::{CLIENT_KEYS, ClientSecrets, Keys, PEER_KEYS, Policy, SERVER_KEYS, Use};

pub use state::Observation;

/// Default certificate lifetime: 90 days (cert-manager's and Let's Encrypt's).
pub const DEFAULT_VALIDITY_SECS: i64 = 90 * 24 * 3600;
/// Default CA lifetime: 5 years.
pub const DEFAULT_CA_VALIDITY_SECS: i64 = 5 * 365 * 24 * 3600;
/// Shortest certificate lifetime: long enough for the kubelet to bring a renewed certificate
/// to every member (about a minute) well before the previous one expires.
pub const MIN_VALIDITY_SECS: i64 = 10 * 60;
pub const MAX_VALIDITY_SECS: i64 = 10 * 365 * 24 * 3600;
/// Shortest renewal margin: a renewed certificate reaches members within about a minute.
pub const MIN_RENEW_BEFORE_SECS: i64 = 5 * 60;
/// Renewals at least this far apart (no renewal at every reconcile).
pub const MIN_RENEW_INTERVAL_SECS: i64 = 60;
/// Shortest CA lifetime: a CA rotation (two rolling restarts) fits in its last third.
pub const MIN_CA_VALIDITY_SECS: i64 = 3600;
pub const MAX_CA_VALIDITY_SECS: i64 = 100 * 365 * 24 * 3600;
/// Certificates are valid from this long before they are issued: members whose clocks are a
/// little behind the operator's still accept them.
pub const BACKDATE_SECS: i64 = 5 * 60;

/// EtcdCluster annotation: a new value starts a CA rotation now (the value handled last is
/// recorded on the CA Secret under the same name).
pub const ROTATE_CA_ANNOTATION: &str = "etcd.database.coreos.com/rotate-ca";
/// CA Secret annotation: the phase of a CA rotation under way (absent: none).
pub const CA_ROTATION_ANNOTATION: &str = "etcd.database.coreos.com/ca-rotation";

/// Keys of the CA Secret.
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const NEXT_CA_CERT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
pub const PREVIOUS_CA_CERT: &str = "previous-ca.crt";

/// `spec.TLS.auto`, checked, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Settings {
    pub validity: i64,
    pub renew_before: i64,
    pub ca_validity: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            validity: DEFAULT_VALIDITY_SECS,
            renew_before: DEFAULT_VALIDITY_SECS / 3,
            ca_validity: DEFAULT_CA_VALIDITY_SECS,
        }
    }
}

impl Settings {
    /// The CA is renewed with a third of its lifetime left, as certificates are by default.
    pub fn ca_renew_before(&self) -> i64 {
        self.ca_validity / 3
    }

    /// `spec.TLS.auto` checked; `Err` lists every problem.
    pub fn of(a: &AutoTls) -> Result<Settings, Vec<String>> {
        let mut errs = vec![];
        let mut field = |name: &str, raw: &str, default: i64, min: i64, max: i64| -> i64 {
            if raw.is_empty() {
                return default;
            }
            match parse_duration(raw) {
                Some(s) if (min..=max).contains(&s) => s,
                Some(_) => {
                    errs.push(format!("spec.TLS.auto.{name} {raw:?} is out of range: {} to {}", show(min), show(max)));
                    default
                }
                None => {
                    errs.push(format!("spec.TLS.auto.{name} {raw:?} is not a duration such as 2160h, 90m or 1h30m"));
                    default
                }
            }
        };
        let validity = field("validity", &a.validity, DEFAULT_VALIDITY_SECS, MIN_VALIDITY_SECS, MAX_VALIDITY_SECS);
        let renew_before =
            field("renewBefore", &a.renew_before, validity / 3, MIN_RENEW_BEFORE_SECS, MAX_VALIDITY_SECS);
        let ca_validity =
            field("caValidity", &a.ca_validity, DEFAULT_CA_VALIDITY_SECS, MIN_CA_VALIDITY_SECS, MAX_CA_VALIDITY_SECS);
        if errs.is_empty() && renew_before > validity - MIN_RENEW_INTERVAL_SECS {
            errs.push(format!(
                "spec.TLS.auto.renewBefore {} must be at least 1m shorter than validity {} (a certificate is renewed when that much of its lifetime is left)",
                show(renew_before),
                show(validity)
            ));
        }
        if errs.is_empty() && ca_validity < validity {
            errs.push(format!(
                "spec.TLS.auto.caValidity {} must be at least validity {}",
                show(ca_validity),
                show(validity)
            ));
        }
        if errs.is_empty() { Ok(Settings { validity, renew_before, ca_validity }) } else { Err(errs) }
    }
}

/// A Go duration (`2160h`, `90m`, `1h30m`, `45s`) in whole seconds; `None` if it is not one
/// (or is negative or too large).
pub fn parse_duration(s: &str) -> Option<i64> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, secs) = [("h", 3600.0), ("m", 60.0), ("s", 1.0)].into_iter().find(|(u, _)| rest.starts_with(u))?;
        // `ms` is not a unit here (nor anything below a second).
        if unit == "m" && rest.starts_with("ms") {
            return None;
        }
        rest = &rest[unit.len()..];
        total += n * secs;
    }
    (total.is_finite() && total < 1e12).then_some(total as i64)
}

/// Seconds as a Go duration (`2160h`, `10m`, `1h30m`).
pub fn show(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out += &format!("{h}h");
    }
    if m > 0 {
        out += &format!("{m}m");
    }
    if s > 0 || out.is_empty() {
        out += &format!("{s}s");
    }
    out
}

/// The four Secrets with certificates, by what they are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Leaf {
    /// Members to each other (`member.peerSecret` of a static policy).
    Peer,
    /// Members to clients (`member.serverSecret`).
    Server,
    /// The operator and its backup pods (`operatorSecret`).
    Operator,
    /// Applications: the Secret users connect with.
    Client,
}

impl Leaf {
    pub const ALL: [Leaf; 4] = [Leaf::Peer, Leaf::Server, Leaf::Operator, Leaf::Client];

    pub fn as_str(self) -> &'static str {
        match self {
            Leaf::Peer => "peer",
            Leaf::Server => "server",
            Leaf::Operator => "operator",
            Leaf::Client => "client",
        }
    }

    /// `<cluster>-tls-<peer|server|operator|client>`.
    pub fn secret(self, cluster: &str) -> String {
        format!("{cluster}-tls-{}", self.as_str())
    }

    pub fn keys(self) -> Keys {
        match self {
            Leaf::Peer => PEER_KEYS,
            Leaf::Server => SERVER_KEYS,
            Leaf::Operator | Leaf::Client => CLIENT_KEYS,
        }
    }

    pub fn usage(self) -> Use {
        match self {
            Leaf::Peer => Use::Peer,
            Leaf::Server => Use::Server,
            Leaf::Operator | Leaf::Client => Use::Client,
        }
    }

    /// The subject's common name. With etcd authentication on, a client certificate's CN is
    /// the etcd user it authenticates as.
    pub fn common_name(self) -> &'static str {
        match self {
            Leaf::Peer => "etcd-peer",
            Leaf::Server => "etcd-server",
            Leaf::Operator => "etcd-operator",
            Leaf::Client => "etcd-client",
        }
    }
}

/// The CA Secret: `<cluster>-tls-ca`.
pub fn ca_secret(cluster: &str) -> String {
    format!("{cluster}-tls-ca")
}

/// How a cluster uses the operator's certificates now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InUse {
    /// `spec.TLS.auto`, with its settings: everything (CA, certificates, rotations).
    Spec(Settings),
    /// `spec.TLS.auto` was turned off while member pods are still made with its Secrets (the
    /// TLS stage on the way off): the certificates are renewed until no member uses them; no
    /// CA is created, replaced or rotated (`planner::certificates::plan`).
    Leaving,
}

/// The static policy auto TLS amounts to: the operator's Secrets in the places of the user's.
pub fn policy(cluster: &str) -> Policy {
    Policy {
        peer_secret: Some(Leaf::Peer.secret(cluster)),
        client: Some(ClientSecrets {
            server_secret: Leaf::Server.secret(cluster),
            operator_secret: Leaf::Operator.secret(cluster),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(validity: &str, renew: &str, ca: &str) -> AutoTls {
        AutoTls { validity: validity.into(), renew_before: renew.into(), ca_validity: ca.into() }
    }

    #[test]
    fn defaults_renew_at_two_thirds() {
        let s = Settings::of(&AutoTls::default()).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!((s.validity, s.renew_before), (2160 * 3600, 720 * 3600), "90 days, renewed 30 days before the end");
        assert_eq!(s.ca_renew_before(), s.ca_validity / 3);
        let s = Settings::of(&auto("30m", "", "")).unwrap();
        assert_eq!(s.renew_before, 10 * 60, "a third of validity when renewBefore is unset");
    }

    #[test]
    fn durations_are_go_durations() {
        assert_eq!(parse_duration("2160h"), Some(2160 * 3600));
        assert_eq!(parse_duration("1h30m"), Some(5400));
        assert_eq!(parse_duration("90s"), Some(90));
        assert_eq!(parse_duration("1.5h"), Some(5400));
        for bad in ["", "90d", "10", "h", "5ms", "-1h", "1h 30m"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(show(2160 * 3600), "2160h");
        assert_eq!(show(5400), "1h30m");
        assert_eq!(show(0), "0s");
    }

    #[test]
    fn out_of_range_and_inconsistent_settings_are_refused_by_name() {
        let e = Settings::of(&auto("5m", "", "")).unwrap_err();
        assert!(e[0].starts_with("spec.TLS.auto.validity \"5m\" is out of range"), "{e:?}");
        let e = Settings::of(&auto("90 days", "", "")).unwrap_err();
        assert!(e[0].contains("is not a duration"), "{e:?}");
        let e = Settings::of(&auto("10m", "10m", "")).unwrap_err();
        assert!(e[0].contains("at least 1m shorter than validity"), "{e:?}");
        let e = Settings::of(&auto("2h", "", "1h")).unwrap_err();
        assert!(e[0].contains("caValidity 1h must be at least validity 2h"), "{e:?}");
        let ok = Settings::of(&auto("10m", "8m", "1h")).unwrap();
        assert_eq!((ok.validity, ok.renew_before, ok.ca_validity), (600, 480, 3600));
    }

    /// Turning `spec.TLS.auto` off keeps its certificates renewed while pods are still made
    /// with them (the stage on the way off), and only then lets go of them.
    #[test]
    fn the_certificates_stay_in_use_while_pods_are_made_with_them() {
        use crate::tls::transition::Stage;
        let spec = |tls: &str| -> etcd_operator_api::EtcdClusterSpec {
            serde_json::from_str(&format!(r#"{{"size":3,"TLS":{tls}}}"#)).unwrap()
        };
        let on = crate::validation::validate("ex", &spec(r#"{"auto":{"validity":"1h"}}"#)).unwrap();
        assert!(matches!(crate::validation::tls_auto_in_use(&on, "ex"), Some(InUse::Spec(s)) if s.validity == 3600));
        let mut off = crate::validation::validate("ex", &spec("null")).unwrap();
        off.tls_stage = Stage { client_http_too: true, ..Stage::steady(&policy("ex")) };
        assert_eq!(
            crate::validation::tls_auto_in_use(&off, "ex"),
            Some(InUse::Leaving),
            "pods are still made with the Secrets"
        );
        off.tls_stage =
            Stage { secrets: Policy { peer_secret: Some("ex-tls-peer".into()), client: None }, ..off.tls_stage };
        assert_eq!(crate::validation::tls_auto_in_use(&off, "ex"), Some(InUse::Leaving), "the peer side alone");
        off.tls_stage = Stage::default();
        assert_eq!(crate::validation::tls_auto_in_use(&off, "ex"), None, "no pod uses them any more");
        let static_tls = r#"{"static":{"member":{"peerSecret":"p","serverSecret":"s"},"operatorSecret":"o"}}"#;
        let mut d = crate::validation::validate("ex", &spec(static_tls)).unwrap();
        d.tls_stage = Stage::steady(&d.tls);
        assert_eq!(crate::validation::tls_auto_in_use(&d, "ex"), None, "the user's own Secrets");
    }

    #[test]
    fn the_secrets_are_the_ones_a_static_policy_would_name() {
        let p = policy("ex");
        let names: Vec<&str> = p.secrets().iter().map(|s| s.0).collect();
        assert_eq!(names, ["ex-tls-peer", "ex-tls-server", "ex-tls-operator"]);
        assert_eq!(Leaf::Client.secret("ex"), "ex-tls-client");
        assert_eq!(ca_secret("ex"), "ex-tls-ca");
        assert_eq!(Leaf::Client.keys(), CLIENT_KEYS, "usable as an EtcdBackup clientTLSSecret");
    }
}
