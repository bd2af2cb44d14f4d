//! `spec.TLS`: the certificates of members and the operator, in the shape of CoreOS'
//! `TLSPolicy` (`static`), and the operator-managed ones (`auto`, additive).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// TLS policy in the CoreOS shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsPolicy {
    /// Certificates made by the user and stored in Secrets, in CoreOS' layout: member peer and
    /// server Secrets (peer and client URLs become https with client certificate checks) and
    /// the operator's client Secret (also used by its backup pods). Mirrors CoreOS
    /// `spec.TLS.static`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#static: Option<StaticTls>,
    /// Additive: certificates made and rotated by the operator (`auto: {}` for the defaults),
    /// instead of `static`; not both. The operator keeps a CA per cluster in Secret
    /// `<name>-tls-ca` and issues into Secrets it owns, in the key layout of `static`: peers
    /// (`<name>-tls-peer`), members serving clients (`<name>-tls-server`), its own client
    /// certificate (`<name>-tls-operator`) and one for your applications (`<name>-tls-client`:
    /// `etcd-client.crt`, `etcd-client.key`, `etcd-client-ca.crt`; usable as an EtcdBackup's
    /// `clientTLSSecret`). Certificates are renewed before they expire without restarting
    /// members (etcd reads its certificate files at every new connection); a new CA is
    /// introduced beside the old one and every member restarts once to trust both, once more
    /// to drop the old one. The annotation `etcd.database.coreos.com/rotate-ca` with a new
    /// value starts a CA rotation now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoTls>,
    /// Additive: certificates issued by cert-manager, instead of `static` or `auto`; one of
    /// the three. The operator keeps four cert-manager Certificates (`<name>-cm-peer`,
    /// `-cm-server`, `-cm-operator`, `-cm-client`, issued into Secrets of the same names) with
    /// the names and key usages members need, and copies what cert-manager issues into the
    /// Secrets `auto` uses (`<name>-tls-peer`, `-server`, `-operator`, `-client`, CoreOS' key
    /// layout), with the trust bundle it keeps in `<name>-tls-ca` (the issuer's CA, no key). A
    /// renewal is copied without restarting members; a certificate from a new CA (the issuer's
    /// CA was rotated) starts a CA rotation with `auto`'s steps: members restart to trust both
    /// CAs, the certificates of the new CA are copied (the operator asks cert-manager to renew
    /// the ones still from the old CA), members restart to drop the old CA. The issuer must
    /// sign the peer and server certificates with one CA and put it in the Secrets' `ca.crt`
    /// (cert-manager's CA issuer does; a SelfSigned issuer does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerTls>,
}

/// Certificates from cert-manager (additive).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerTls {
    /// The cert-manager issuer that signs the certificates. Additive.
    pub issuer_ref: IssuerRef,
    /// Lifetime asked of each certificate (the Certificates' `duration`), a Go duration, 1h
    /// (cert-manager's minimum) to 87600h; default cert-manager's 2160h. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub duration: String,
    /// How long before the end cert-manager renews (the Certificates' `renewBefore`), at
    /// least 5m and at least 1m less than `duration`; default a third of `duration`. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub renew_before: String,
}

/// A cert-manager issuer, as a Certificate's `spec.issuerRef` names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    /// The Issuer (in the EtcdCluster's namespace) or ClusterIssuer. Additive.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Issuer` (the default) or `ClusterIssuer`, or the kind of an external issuer. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 63))]
    pub kind: String,
    /// The issuer's API group; default `cert-manager.io`. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub group: String,
}

/// Operator-managed certificates (additive). Durations are Go durations as Kubernetes writes
/// them: `2160h`, `90m`, `1h30m`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoTls {
    /// Lifetime of the peer, server and client certificates, 10m to 87600h (10 years);
    /// default 2160h (90 days). Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub validity: String,
    /// How long before a certificate expires its successor is issued, at least 5m and at
    /// least 1m less than `validity`; default a third of `validity` (renewal at 2/3 of the
    /// lifetime: 30 days before the end of 90). Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub renew_before: String,
    /// Lifetime of the cluster's CA, 1h to 876000h (100 years) and at least `validity`;
    /// default 43800h (5 years). A new CA is introduced at 2/3 of the lifetime. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub ca_validity: String,
}

/// Certificates the user made and stored in Secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticTls {
    /// Secrets every member pod mounts. Mirrors CoreOS `spec.TLS.static.member`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberSecret>,
    /// Name of a Secret with the client certificate the operator uses to talk to members
    /// (`etcd-client.crt`, `etcd-client.key`, `etcd-client-ca.crt`); set together with
    /// `member.serverSecret`. Mirrors CoreOS `spec.TLS.static.operatorSecret`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operator_secret: String,
}

/// Secrets each member pod mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSecret {
    /// Name of a Secret with the peer certificate (`peer.crt`, `peer.key`, `peer-ca.crt`).
    /// Mirrors CoreOS `spec.TLS.static.member.peerSecret`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub peer_secret: String,
    /// Name of a Secret with the client-facing server certificate (`server.crt`,
    /// `server.key`, `server-ca.crt`). Mirrors CoreOS `spec.TLS.static.member.serverSecret`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_secret: String,
}
