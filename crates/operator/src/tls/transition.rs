//! Turning TLS on or off for a cluster that runs, as data: how each member pod speaks
//! ([`PodTls`], read back from the pod itself), the [`Stage`] pods are made at now on the way
//! from what the members run to what `spec.TLS` asks, and which `spec.TLS` changes a formed
//! cluster accepts ([`check_change`]). Pure. The steps (member update, restarts) are
//! `planner::tls_transition`'s.
//!
//! What etcd allows, tried with etcd 3.5 and 3.6 binaries (and read in `embed/etcd.go`):
//! - **clients**: one client port serves http and https at once when `--listen-client-urls`
//!   lists both schemes on it (etcd tells the connections apart by their first bytes);
//!   `--client-cert-auth` applies to the https side only, plaintext clients keep working;
//! - **peers**: every `--listen-peer-urls` entry is its own listener, so http and https cannot
//!   share port 2380 (`bind: address already in use`). A member with its peer certificate
//!   configured dials http and https peers alike, and its http listener ignores the
//!   certificate flags (`--peer-client-cert-auth` included). A member's peer URL changes with
//!   `member update`; raft connections open at that moment stay up, new ones dial the new URL;
//!   a member listening on the other scheme than its URL is reached only over the connections
//!   it opens itself, which keeps it in the cluster but is no state to stay in.
//!
//! Hence the stages, for each side on its own (CoreOS: peers and clients are independent):
//!
//! | side    | off          | on the way                                              | on            |
//! |---------|--------------|---------------------------------------------------------|---------------|
//! | peers   | http, no certificate | certificate configured, http listener and URL; then, one member at a time, URL moved by `member update` and the member restarted on the new scheme | https |
//! | clients | http         | certificate configured, the port serves http **and** https | https only |
//!
//! Turning a side off walks the same stages back. Every pod made while a side moves is made at
//! the current stage; pods of an earlier stage are rolled one at a time like any spec change.

use serde::{Deserialize, Serialize};

use super::{ClientSecrets, PEER_VOLUME, Policy, SERVER_VOLUME, scheme};

/// What a member's client port serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Serves {
    #[default]
    Http,
    /// http and https on the same port (while clients move).
    Both,
    Https,
}

impl Serves {
    pub fn http(self) -> bool {
        self != Serves::Https
    }

    pub fn https(self) -> bool {
        self != Serves::Http
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Serves::Http => "http",
            Serves::Both => "http and https",
            Serves::Https => "https",
        }
    }
}

/// How one member pod speaks, as it was made: read back from its etcd command line and its
/// volumes (what etcd really runs with; pods of earlier operator versions included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodTls {
    /// The Secret mounted as its peer certificate volume (`member-peer-tls`, which its
    /// `--peer-cert-file` points into), if any.
    pub peer_secret: Option<String>,
    /// Its peer listener is https (`--listen-peer-urls`).
    pub peer_https: bool,
    /// The Secret mounted as its server certificate volume (`member-server-tls`), if any.
    pub server_secret: Option<String>,
    /// What its client port serves (`--listen-client-urls`).
    pub client: Serves,
}

impl PodTls {
    /// Read from a pod: the etcd container's command line and the pod's Secret volumes.
    pub fn of(command: &[String], volumes: &[k8s_openapi::api::core::v1::Volume]) -> PodTls {
        let flag = |name: &str| {
            command.iter().find_map(|a| a.strip_prefix(name).and_then(|v| v.strip_prefix('='))).unwrap_or_default()
        };
        let secret = |volume: &str| {
            volumes.iter().find(|v| v.name == volume).and_then(|v| v.secret.as_ref()?.secret_name.clone())
        };
        let client = flag("--listen-client-urls");
        let (http, https) = (client.contains("http://"), client.contains("https://"));
        PodTls {
            peer_secret: secret(PEER_VOLUME),
            peer_https: flag("--listen-peer-urls").contains("https://"),
            server_secret: secret(SERVER_VOLUME),
            client: match (http, https) {
                (true, true) => Serves::Both,
                (false, true) => Serves::Https,
                _ => Serves::Http,
            },
        }
    }
}

/// The Secrets of a side `spec.TLS` no longer names while members still use it: kept on the
/// EtcdCluster (the `tls-leaving` annotation) until no member does, so that pods made meanwhile
/// mount them and the operator keeps its client certificate while members serve https only.
/// Also whether plaintext clients are being left (clients turned on, some member still serves
/// http): what pods made while no member pod exists serve, so that no phase is skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Leaving {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_secret: Option<String>,
    /// `spec.TLS` turns clients on and member pods are still made serving http beside https.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plaintext_clients: bool,
}

impl Leaving {
    pub fn is_empty(&self) -> bool {
        *self == Leaving::default()
    }

    /// For each side `target` turns off: the first source that names its Secrets (the mark,
    /// then the last valid spec, then the member pods' volumes: the operator's own Secret is in
    /// no pod).
    pub fn find(target: &Policy, sources: &[Leaving]) -> Leaving {
        let first = |f: fn(&Leaving) -> &Option<String>| sources.iter().find_map(|s| f(s).clone());
        let mut l = Leaving::default();
        if target.peer_secret.is_none() {
            l.peer_secret = first(|s| &s.peer_secret);
        }
        if target.client.is_none() {
            l.server_secret = first(|s| &s.server_secret);
            l.operator_secret = first(|s| &s.operator_secret);
        } else {
            l.plaintext_clients = sources.iter().any(|s| s.plaintext_clients);
        }
        l
    }

    /// The Secrets of a policy (a last valid spec's).
    pub fn of_policy(p: &Policy) -> Leaving {
        Leaving {
            peer_secret: p.peer_secret.clone(),
            server_secret: p.client.as_ref().map(|c| c.server_secret.clone()),
            operator_secret: p.client.as_ref().map(|c| c.operator_secret.clone()),
            plaintext_clients: false,
        }
    }

    /// The Secrets member pods mount (their volumes).
    pub fn of_pods<'a>(pods: impl Iterator<Item = &'a PodTls> + Clone) -> Leaving {
        Leaving {
            peer_secret: pods.clone().find_map(|p| p.peer_secret.clone()),
            server_secret: pods.clone().find_map(|p| p.server_secret.clone()),
            operator_secret: None,
            plaintext_clients: false,
        }
    }
}

/// How member pods are made now: `spec.TLS` itself when nothing moves, else a stage on the way
/// to it (see the module's table).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stage {
    /// The Secrets pods mount and configure: `spec.TLS`'s for a side it turns on, the ones being
    /// left for a side it turns off (until no member listens with them).
    pub secrets: Policy,
    /// New members' peer URLs are https: every pod has the peer certificate and can dial them.
    pub peer_https: bool,
    /// With the server certificate configured: the client port serves http too.
    pub client_http_too: bool,
    /// The operator (and a recovery's seed) connects over https: every pod serves it, and the
    /// operator's client certificate is known.
    pub operator_https: bool,
}

impl Stage {
    /// Nothing moves: exactly what `p` asks for.
    pub fn steady(p: &Policy) -> Stage {
        Stage {
            secrets: p.clone(),
            peer_https: p.peer_secret.is_some(),
            client_http_too: false,
            operator_https: p.client.is_some(),
        }
    }

    /// What the client port of a pod made now serves.
    pub fn serves(&self) -> Serves {
        match (&self.secrets.client, self.client_http_too) {
            (None, _) => Serves::Http,
            (Some(_), true) => Serves::Both,
            (Some(_), false) => Serves::Https,
        }
    }

    /// The scheme of new members' peer URLs.
    pub fn peer_scheme(&self) -> &'static str {
        scheme(self.peer_https)
    }

    /// The scheme the operator connects with.
    pub fn operator_scheme(&self) -> &'static str {
        scheme(self.operator_https)
    }

    /// The pod made now for a member whose peer URL is https (`peer_https`) or not: its peer
    /// listener follows its URL.
    pub fn pod(&self, peer_https: bool) -> PodTls {
        PodTls {
            peer_secret: self.secrets.peer_secret.clone(),
            peer_https,
            server_secret: self.secrets.client.as_ref().map(|c| c.server_secret.clone()),
            client: self.serves(),
        }
    }

    /// The etcd flags of a member whose own peer URL is `peer_url` (its listener takes that
    /// URL's scheme), on `host`: listen and advertise URLs.
    pub fn url_flags(&self, peer_url: &str, host: &str) -> Vec<String> {
        use crate::naming::{CLIENT_PORT, PEER_PORT, client_url};
        let peer = if peer_url.starts_with("https://") { "https" } else { "http" };
        let listen_client = match self.serves() {
            Serves::Http => format!("http://0.0.0.0:{CLIENT_PORT}"),
            Serves::Both => format!("http://0.0.0.0:{CLIENT_PORT},https://0.0.0.0:{CLIENT_PORT}"),
            Serves::Https => format!("https://0.0.0.0:{CLIENT_PORT}"),
        };
        // While both are served, the plaintext URL is advertised: every client that worked
        // before still does with it.
        let advertise = scheme(self.serves() == Serves::Https);
        vec![
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--listen-peer-urls={peer}://0.0.0.0:{PEER_PORT}"),
            format!("--listen-client-urls={listen_client}"),
            format!("--advertise-client-urls={}", client_url(advertise, host)),
        ]
    }
}

/// The stage pods are made at now, from what `spec.TLS` asks (`target`), the Secrets of sides
/// it turns off ([`Leaving::find`]), how the member pods speak, whether some member's peer
/// URL is https as its volume records it (`https_url_on_volume`: a member whose pod is gone
/// comes back listening on it), and whether members come back on volumes (`on_volumes`).
/// `Err`: a side members still use whose Secret is unknown (nothing can be made that talks to
/// them).
///
/// - Peers on: the peer certificate on every pod first; once every pod has it, new members'
///   URLs are https (and `planner::tls_transition` moves the members' URLs).
/// - Peers off: the certificate stays on pods made now while any pod still listens on https
///   (or a volume's member has an https URL).
/// - Clients on: the port serves both while any pod serves http only, then https only; the
///   operator switches to https once every pod serves it.
/// - Clients off: the port serves both while any pod serves https only, then http only.
/// - `serve_both` (the user's `tls-serve-both` annotation): the port keeps serving both
///   schemes, whichever way clients move, until it is removed (time for clients to move).
///
/// A cluster without pods and volumes (a new one, a restore) is made as `target` says. Members
/// coming back on their volumes with https URLs keep the peer certificate; a cluster still
/// forming moves like any other: its next members must speak as the ones already started.
/// With no pod at all but members on volumes (every pod lost half-way), "every pod" proves
/// nothing: the client port's phase comes from the `tls-leaving` mark (plaintext clients being
/// left: http and https; the server Secrets being left: http and https), never a jump to the
/// end.
pub fn stage(
    target: &Policy,
    leaving: &Leaving,
    pods: &[&PodTls],
    https_url_on_volume: bool,
    on_volumes: bool,
    serve_both: bool,
) -> Result<Stage, String> {
    let unknown = |what: &str| {
        format!(
            "member pods still use {what} while spec.TLS turns it off, and the Secret they use is not known any more \
             (the tls-leaving annotation was removed); put the previous spec.TLS back"
        )
    };
    let (peer_secret, peer_https) = match &target.peer_secret {
        Some(s) => (Some(s.clone()), pods.iter().all(|p| p.peer_secret.as_ref() == Some(s))),
        None if https_url_on_volume || pods.iter().any(|p| p.peer_https) => match &leaving.peer_secret {
            Some(s) => (Some(s.clone()), false),
            None => return Err(unknown("peer TLS")),
        },
        None => (None, false),
    };
    let every_pod_serves_https = pods.iter().all(|p| p.client.https());
    let keeps_https = |p: &&PodTls| p.client == Serves::Https || (serve_both && p.client.https());
    // Every pod lost while members wait on their volumes: the mark says where clients were.
    let unseen = pods.is_empty() && on_volumes;
    let (client, client_http_too) = match &target.client {
        Some(c) => (Some(c.clone()), serve_both || !every_pod_serves_https || (unseen && leaving.plaintext_clients)),
        None if unseen && leaving.server_secret.is_some() && leaving.operator_secret.is_some() => (
            leaving
                .server_secret
                .clone()
                .zip(leaving.operator_secret.clone())
                .map(|(s, o)| ClientSecrets { server_secret: s, operator_secret: o }),
            true,
        ),
        None if pods.iter().any(keeps_https) => match (&leaving.server_secret, &leaving.operator_secret) {
            (Some(server_secret), Some(operator_secret)) => (
                Some(ClientSecrets { server_secret: server_secret.clone(), operator_secret: operator_secret.clone() }),
                true,
            ),
            _ => return Err(unknown("client TLS")),
        },
        None => (None, false),
    };
    let operator_https = client.is_some() && every_pod_serves_https;
    Ok(Stage { secrets: Policy { peer_secret, client }, peer_https, client_http_too, operator_https })
}

/// What the `tls-leaving` mark holds for stage `s` under `target`: the Secrets of sides the
/// target turns off that pods are still made with, and whether pods are still made serving
/// plaintext clients while the target turns clients on.
pub fn leaving_of(target: &Policy, s: &Stage) -> Leaving {
    let mut l = Leaving::default();
    if target.peer_secret.is_none() {
        l.peer_secret = s.secrets.peer_secret.clone();
    }
    if let (None, Some(c)) = (&target.client, &s.secrets.client) {
        l.server_secret = Some(c.server_secret.clone());
        l.operator_secret = Some(c.operator_secret.clone());
    }
    l.plaintext_clients = target.client.is_some() && s.client_http_too;
    l
}

/// Which `spec.TLS` changes a formed cluster accepts, against the policy it last ran under
/// (`before`) and the Secrets its pods mount: a side may be turned on or off (the members move
/// one at a time), and the operator's own Secret may change. A side that stays on keeps its
/// Secret: swapping it while members run would leave members trusting different CAs (rotate the
/// certificates inside the same Secret instead, or turn the side off and on again).
pub fn check_change(before: &Policy, now: &Policy, pods: &[&PodTls]) -> Result<(), String> {
    let mut errs = vec![];
    let mut side = |what: &str, field: &str, was: Option<&String>, mounted: Vec<&String>, now: Option<&String>| {
        let Some(now) = now else { return };
        let other = was.filter(|w| *w != now).or_else(|| mounted.into_iter().find(|m| *m != now));
        if let Some(other) = other {
            errs.push(format!(
                "spec.TLS ({field}): the members use Secret {other} for {what}; a running cluster cannot switch to \
                 Secret {now} (turn {what} TLS off, let the members move, then on with the new Secret; or put new \
                 certificates into {other})"
            ));
        }
    };
    side(
        "peers",
        "the peer Secret",
        before.peer_secret.as_ref(),
        pods.iter().filter_map(|p| p.peer_secret.as_ref()).collect(),
        now.peer_secret.as_ref(),
    );
    side(
        "clients",
        "the server Secret",
        before.client.as_ref().map(|c| &c.server_secret),
        pods.iter().filter_map(|p| p.server_secret.as_ref()).collect(),
        now.client.as_ref().map(|c| &c.server_secret),
    );
    if errs.is_empty() { Ok(()) } else { Err(errs.join("; ")) }
}

#[cfg(test)]
#[path = "transition_tests.rs"]
mod tests;
