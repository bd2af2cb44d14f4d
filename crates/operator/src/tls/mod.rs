//! TLS for a cluster's peers and clients (`spec.TLS.static`, CoreOS semantics), as data: which
//! Secrets, which keys, where member pods mount them, which etcd flags use them, the URL
//! schemes. Pure; the member pod builder calls [`secure_member`] and [`member_flags`], the
//! certificate checks are in [`check`], reading the Secrets in [`material`], turning TLS on or
//! off for a running cluster (and which `spec.TLS` changes it accepts) in [`transition`].
//!
//! CoreOS semantics, kept verbatim: peers speak TLS when `member.peerSecret` is set, clients
//! when `operatorSecret` (with `member.serverSecret`) is set; either side requires client
//! certificates (`--peer-client-cert-auth`, `--client-cert-auth`). The mount paths and key
//! names are CoreOS'. One difference: member pods do not mount the operator's Secret (CoreOS
//! did, for an `etcdctl` probe); the readiness probe reads `/health` from etcd's plain-HTTP
//! metrics listener instead, which serves no keys.

pub mod auto;
pub mod cert_manager;
pub mod check;
pub mod connector;
pub mod material;
#[cfg(test)]
mod test_certs;
pub mod transition;
pub mod trust;

use etcd_operator_api::cluster::TlsPolicy;
use k8s_openapi::api::core::v1::{Container, ContainerPort, SecretVolumeSource, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Keys of `member.peerSecret`.
pub const PEER_KEYS: Keys = Keys { cert: "peer.crt", key: "peer.key", ca: "peer-ca.crt" };
/// Keys of `member.serverSecret`.
pub const SERVER_KEYS: Keys = Keys { cert: "server.crt", key: "server.key", ca: "server-ca.crt" };
/// Keys of `operatorSecret` and of EtcdBackup/EtcdRestore `clientTLSSecret`.
pub const CLIENT_KEYS: Keys = Keys { cert: "etcd-client.crt", key: "etcd-client.key", ca: "etcd-client-ca.crt" };

/// Where member pods mount the peer Secret (CoreOS' path).
pub const PEER_DIR: &str = "/etc/etcdtls/member/peer-tls";
/// Where member pods mount the server Secret (CoreOS' path).
pub const SERVER_DIR: &str = "/etc/etcdtls/member/server-tls";
/// Where backup pods mount the client Secret (CoreOS' operator path).
pub const CLIENT_DIR: &str = "/etc/etcdtls/operator/etcd-tls";
const PEER_VOLUME: &str = "member-peer-tls";
const SERVER_VOLUME: &str = "member-server-tls";
pub const CLIENT_VOLUME: &str = "etcd-client-tls";

/// etcd's plain-HTTP listener for `/metrics` and `/health` on members whose clients speak TLS
/// with client certificates: the kubelet's readiness probe has no certificate.
pub const METRICS_PORT: i32 = 2381;

/// The three file names of one Secret: certificate, key, and the CA that checks the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys {
    pub cert: &'static str,
    pub key: &'static str,
    pub ca: &'static str,
}

/// What `spec.TLS` asks for, checked (validation refuses half of the client pair).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Policy {
    /// `member.peerSecret`: peer URLs are https, peers present and require certificates.
    pub peer_secret: Option<String>,
    /// `member.serverSecret` and `operatorSecret`: client URLs are https, clients need a
    /// certificate from the server Secret's CA.
    pub client: Option<ClientSecrets>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClientSecrets {
    pub server_secret: String,
    pub operator_secret: String,
}

impl Policy {
    /// The policy of a spec; `Err` names what is wrong (half of the client pair).
    pub fn of(spec: Option<&TlsPolicy>) -> Result<Policy, String> {
        let Some(s) = spec.and_then(|t| t.r#static.as_ref()) else { return Ok(Policy::default()) };
        let peer = s.member.as_ref().map(|m| m.peer_secret.clone()).filter(|p| !p.is_empty());
        let server = s.member.as_ref().map(|m| m.server_secret.clone()).filter(|p| !p.is_empty());
        let client = match (server, s.operator_secret.is_empty()) {
            (None, true) => None,
            (Some(server_secret), false) => {
                Some(ClientSecrets { server_secret, operator_secret: s.operator_secret.clone() })
            }
            (None, false) => return Err("spec.TLS.static: operatorSecret is set but member.serverSecret is not".into()),
            (Some(_), true) => {
                return Err("spec.TLS.static: member.serverSecret is set but operatorSecret is not".into());
            }
        };
        Ok(Policy { peer_secret: peer, client })
    }

    pub fn is_off(&self) -> bool {
        self.peer_secret.is_none() && self.client.is_none()
    }

    pub fn peer_scheme(&self) -> &'static str {
        scheme(self.peer_secret.is_some())
    }

    pub fn client_scheme(&self) -> &'static str {
        scheme(self.client.is_some())
    }

    /// Every Secret the member pods and the operator use, with its keys.
    pub fn secrets(&self) -> Vec<(&str, Keys, Use)> {
        let mut v = vec![];
        if let Some(p) = &self.peer_secret {
            v.push((p.as_str(), PEER_KEYS, Use::Peer));
        }
        if let Some(c) = &self.client {
            v.push((c.server_secret.as_str(), SERVER_KEYS, Use::Server));
            v.push((c.operator_secret.as_str(), CLIENT_KEYS, Use::Client));
        }
        v
    }
}

/// What a certificate is for: which names and key usages it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Serves peers and connects to them: member names, server and client auth.
    Peer,
    /// Serves clients: member names and the client Service, server auth.
    Server,
    /// A client of the cluster: client auth, no names.
    Client,
}

pub fn scheme(secure: bool) -> &'static str {
    if secure { "https" } else { "http" }
}

/// The DNS names a cluster's certificates must cover: the members' (a wildcard under the peer
/// Service, as member names are random) and, for serving clients, the client Service's.
pub fn required_names(u: Use, cluster: &str, namespace: &str, cluster_domain: &str) -> Vec<String> {
    let member = crate::naming::member_host("*", cluster, namespace, cluster_domain);
    match u {
        Use::Peer => vec![member],
        Use::Server => vec![member, format!("{}.{namespace}.svc", crate::naming::client_service(cluster))],
        Use::Client => vec![],
    }
}

/// The name the operator (and backup pods) check the members' server certificate against when
/// they connect by pod IP: the client Service's, which every server certificate must cover.
pub fn server_name(cluster: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", crate::naming::client_service(cluster))
}

/// The etcd flags of a member (CoreOS' flags and paths), after the listen URLs.
pub fn member_flags(p: &Policy) -> Vec<String> {
    let mut f = vec![];
    if p.peer_secret.is_some() {
        f.push("--peer-client-cert-auth=true".into());
        f.push(format!("--peer-trusted-ca-file={PEER_DIR}/{}", PEER_KEYS.ca));
        f.push(format!("--peer-cert-file={PEER_DIR}/{}", PEER_KEYS.cert));
        f.push(format!("--peer-key-file={PEER_DIR}/{}", PEER_KEYS.key));
    }
    if p.client.is_some() {
        f.push("--client-cert-auth=true".into());
        f.push(format!("--trusted-ca-file={SERVER_DIR}/{}", SERVER_KEYS.ca));
        f.push(format!("--cert-file={SERVER_DIR}/{}", SERVER_KEYS.cert));
        f.push(format!("--key-file={SERVER_DIR}/{}", SERVER_KEYS.key));
        f.push(format!("--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"));
    }
    f
}

/// `etcdEnv` names that would set what the TLS flags set (etcd refuses a setting given both
/// ways), as refusal reasons. Derived from [`member_flags`]: `--peer-cert-file` is
/// `ETCD_PEER_CERT_FILE`.
pub fn env_conflicts(p: &Policy, env: &[k8s_openapi::api::core::v1::EnvVar]) -> Vec<String> {
    let owned: Vec<String> = member_flags(p)
        .iter()
        .filter_map(|f| f.strip_prefix("--")?.split('=').next())
        .map(|n| format!("ETCD_{}", n.to_ascii_uppercase().replace('-', "_")))
        .collect();
    env.iter()
        .filter(|e| owned.contains(&e.name))
        .map(|e| format!("spec.pod.etcdEnv: {} is set by the operator from spec.TLS and cannot be set", e.name))
        .collect()
}

/// The member's etcd container and the pod's volumes, secured: the Secrets mounted read-only,
/// the readiness probe moved to the metrics listener when clients need certificates. A cluster
/// without TLS is left exactly as it was.
pub fn secure_member(p: &Policy, mode: i32, etcd: &mut Container, volumes: &mut Vec<Volume>) {
    let mut mount = |volume: &str, secret: &str, dir: &str| {
        volumes.push(secret_volume_with_mode(volume, secret, mode));
        etcd.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
            name: volume.into(),
            mount_path: dir.into(),
            read_only: Some(true),
            ..Default::default()
        });
    };
    if let Some(peer) = &p.peer_secret {
        mount(PEER_VOLUME, peer, PEER_DIR);
    }
    if let Some(c) = &p.client {
        mount(SERVER_VOLUME, &c.server_secret, SERVER_DIR);
        if let Some(get) = etcd.readiness_probe.as_mut().and_then(|r| r.http_get.as_mut()) {
            get.port = IntOrString::Int(METRICS_PORT);
        }
        etcd.ports.get_or_insert_with(Vec::new).push(ContainerPort {
            name: Some("metrics".into()),
            container_port: METRICS_PORT,
            ..Default::default()
        });
    }
}

/// What a recovery's seed container needs to stream from a survivor when clients speak TLS:
/// the operator's Secret (mounted into that init container only) and the server name.
pub fn seed_tls(p: &Policy, cluster: &str, namespace: &str) -> Option<(String, String)> {
    p.client.as_ref().map(|c| (c.operator_secret.clone(), server_name(cluster, namespace)))
}

/// A Secret as a read-only volume (owner- and group-readable: with a pod `fsGroup` a non-root etcd reads them; no one else).
pub fn secret_volume(volume: &str, secret: &str) -> Volume {
    secret_volume_with_mode(volume, secret, 0o440)
}

/// A Secret as a read-only volume whose files have `mode` (`pod_security::Profile::secret_mode`).
pub fn secret_volume_with_mode(volume: &str, secret: &str, mode: i32) -> Volume {
    Volume {
        name: volume.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            default_mode: Some(mode),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::cluster::{MemberSecret, StaticTls};

    fn spec(peer: &str, server: &str, operator: &str) -> TlsPolicy {
        TlsPolicy {
            r#static: Some(StaticTls {
                member: Some(MemberSecret { peer_secret: peer.into(), server_secret: server.into() }),
                operator_secret: operator.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn coreos_semantics_peer_and_client_sides_are_independent() {
        let p = Policy::of(Some(&spec("p", "s", "o"))).unwrap();
        assert_eq!((p.peer_scheme(), p.client_scheme()), ("https", "https"));
        let p = Policy::of(Some(&spec("p", "", ""))).unwrap();
        assert_eq!((p.peer_scheme(), p.client_scheme()), ("https", "http"));
        let p = Policy::of(Some(&spec("", "s", "o"))).unwrap();
        assert_eq!((p.peer_scheme(), p.client_scheme()), ("http", "https"));
        assert!(Policy::of(None).unwrap().is_off());
        assert!(Policy::of(Some(&spec("", "s", ""))).unwrap_err().contains("operatorSecret is not"));
        assert!(Policy::of(Some(&spec("", "", "o"))).unwrap_err().contains("serverSecret is not"));
    }

    #[test]
    fn flags_and_mounts_are_coreos() {
        let p = Policy::of(Some(&spec("p", "s", "o"))).unwrap();
        let f = member_flags(&p);
        assert!(f.contains(&"--peer-client-cert-auth=true".to_string()));
        assert!(f.contains(&"--peer-trusted-ca-file=/etc/etcdtls/member/peer-tls/peer-ca.crt".to_string()));
        assert!(f.contains(&"--client-cert-auth=true".to_string()));
        assert!(f.contains(&"--cert-file=/etc/etcdtls/member/server-tls/server.crt".to_string()));
        assert!(f.contains(&"--trusted-ca-file=/etc/etcdtls/member/server-tls/server-ca.crt".to_string()));
        assert!(member_flags(&Policy::default()).is_empty());
        assert_eq!(p.secrets().iter().map(|s| s.0).collect::<Vec<_>>(), ["p", "s", "o"]);
    }

    #[test]
    fn a_secured_member_mounts_the_secrets_and_probes_the_metrics_listener() {
        use k8s_openapi::api::core::v1::{HTTPGetAction, Probe};
        let probe = Probe {
            http_get: Some(HTTPGetAction { port: IntOrString::Int(2379), ..Default::default() }),
            ..Default::default()
        };
        let plain = Container { readiness_probe: Some(probe), ..Default::default() };
        let (mut c, mut v) = (plain.clone(), vec![]);
        secure_member(&Policy::default(), 0o440, &mut c, &mut v);
        assert_eq!((c, v.len()), (plain.clone(), 0), "a plaintext member is left as it was");
        let (mut c, mut v) = (plain, vec![]);
        secure_member(&Policy::of(Some(&spec("p", "s", "o"))).unwrap(), 0o440, &mut c, &mut v);
        let secrets: Vec<_> = v.iter().filter_map(|v| v.secret.as_ref()?.secret_name.clone()).collect();
        assert_eq!(secrets, ["p", "s"], "never the operator's Secret");
        let dirs: Vec<_> = c.volume_mounts.unwrap().iter().map(|m| m.mount_path.clone()).collect();
        assert_eq!(dirs, [PEER_DIR, SERVER_DIR]);
        let port = &c.readiness_probe.unwrap().http_get.unwrap().port;
        assert_eq!(port, &IntOrString::Int(METRICS_PORT));
    }

    #[test]
    fn etcd_env_cannot_set_what_the_tls_flags_set() {
        use k8s_openapi::api::core::v1::EnvVar;
        let env = |n: &str| EnvVar { name: n.into(), value: Some("x".into()), ..Default::default() };
        let env = [env("ETCD_PEER_CERT_FILE"), env("ETCD_CLIENT_CERT_AUTH"), env("ETCD_HEARTBEAT_INTERVAL")];
        let p = Policy::of(Some(&spec("p", "s", "o"))).unwrap();
        let e = env_conflicts(&p, &env);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("ETCD_PEER_CERT_FILE"));
        assert!(env_conflicts(&Policy::default(), &env).is_empty(), "without TLS they are the user's");
    }

    #[test]
    fn names_follow_the_cluster_domain() {
        assert_eq!(required_names(Use::Peer, "ex", "ns", ""), ["*.ex.ns.svc"]);
        assert_eq!(
            required_names(Use::Server, "ex", "ns", "cluster.local"),
            ["*.ex.ns.svc.cluster.local", "ex-client.ns.svc"]
        );
        assert!(required_names(Use::Client, "ex", "ns", "").is_empty());
    }
}
