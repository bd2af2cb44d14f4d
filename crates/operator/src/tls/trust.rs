//! Static CA bundles and what members loaded. etcd reads its trusted CA files only when it
//! starts (the certificate and key at every handshake), so the members' bundles (`peer-ca.crt`,
//! `server-ca.crt`) are part of the pod-spec hash (`tls::material::Verdict::trust`): a changed
//! bundle restarts members one at a time, gated on health, as any pod-spec change.
//!
//! The CA rotation this allows, bundle first (README: rotating a static CA):
//! 1. the new CA joins every bundle next to the old one; members restart with both;
//!    `CABundlesLoaded` turns `True` once every member runs with them;
//! 2. certificates issued by the new CA go into the Secrets (no restart: etcd reads them at the
//!    next handshake, the kubelet updates mounted Secrets within about a minute);
//! 3. the old CA leaves the bundles; members restart with the new one alone.
//!
//! The guard: while members are to restart for another bundle, the operator asks each running
//! member which peer certificate it serves ([`untrusted_peers`]); one that the bundle being
//! loaded does not trust (step 3 taken before the kubelet brought step 2's certificates to
//! every pod, or a bundle without the CA in use) is refused material: no member restarts into
//! a bundle that would cut it off from the others (`planner::tls_material`). Pure here; the
//! handshakes are `observe::tls`'s, the condition `status::tls_trust`'s.

/// The members (pod names) whose served peer certificate (DER, by pod) the peer bundle
/// `peer_ca` (PEM) does not trust, with the certificate's issuer.
pub fn untrusted_peers(served: &[(String, Vec<u8>)], peer_ca: &[u8]) -> Vec<(String, String)> {
    served
        .iter()
        .filter(|(_, der)| !super::check::der_issued_by(der, peer_ca))
        .map(|(pod, der)| (pod.clone(), super::check::issuer_of_der(der)))
        .collect()
}

/// The guard's verdict over the peer certificates read from the running members (`Err`: the
/// read failed, with why): each member serving one `peer_ca` does not trust, and each member
/// that answers etcd (`answering`) but whose certificate could not be read, as refusals
/// `(pod, message)` of Secret `secret`. Fails closed: an unread certificate of a live member may
/// be one the new bundle distrusts. A member answering nothing serves nothing to check.
pub fn judge_served(
    read: Vec<(String, Result<Vec<u8>, String>)>,
    answering: &std::collections::BTreeSet<String>,
    peer_ca: &[u8],
    secret: &str,
) -> Vec<(String, String)> {
    let mut served = vec![];
    let mut refused = vec![];
    for (pod, r) in read {
        match r {
            Ok(der) => served.push((pod, der)),
            Err(e) if answering.contains(&pod) => refused.push((
                pod.clone(),
                format!(
                    "could not read the peer certificate member {pod} serves ({e}): no member restarts into another CA bundle until it is known to trust it (the operator must reach the peer port)"
                ),
            )),
            Err(_) => {}
        }
    }
    for (pod, issuer) in untrusted_peers(&served, peer_ca) {
        let m = untrusted_message(secret, &pod, &issuer);
        refused.push((pod, m));
    }
    refused.sort();
    refused
}

/// The refusal for [`untrusted_peers`]' answer.
pub fn untrusted_message(secret: &str, pod: &str, issuer: &str) -> String {
    format!(
        "member {pod} serves a peer certificate issued by {issuer}, which Secret {secret} key {} does not trust: a member restarted now could not talk to it (new certificates reach pods within about a minute; a CA leaves the bundles only after every member serves certificates of the new one)",
        super::PEER_KEYS.ca
    )
}

#[cfg(test)]
mod tests {
    /// The guard fails closed: a member that answers etcd but whose peer certificate could not
    /// be read (a refused connection, a NetworkPolicy, a handshake error) is refused material,
    /// as one serving an untrusted certificate is; a member that answers nothing serves nothing.
    #[test]
    fn a_peer_certificate_that_could_not_be_read_from_a_live_member_holds_the_restart() {
        let (ca_, names) = (ca("ca"), ["*.ex.ns.svc".to_string()]);
        let eku = [Eku::ServerAuth, Eku::ClientAuth];
        let ok = der(&leaf(&ca_, &names, &eku).0);
        let read = vec![
            ("ex-a".to_string(), Ok(ok)),
            ("ex-b".to_string(), Err("connection refused".to_string())),
            ("ex-c".to_string(), Err("timed out".to_string())),
        ];
        let answering: std::collections::BTreeSet<String> = ["ex-a".to_string(), "ex-b".into()].into();
        let refused = judge_served(read, &answering, ca_.pem.as_bytes(), "peer");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].0, "ex-b");
        assert!(refused[0].1.contains("could not read") && refused[0].1.contains("connection refused"), "{refused:?}");
    }

    use super::*;
    use crate::tls::test_certs::{ca, leaf};
    use rcgen::ExtendedKeyUsagePurpose as Eku;

    fn der(pem: &str) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1.contents
    }

    /// Step 3 of a CA rotation taken too early: a member still serves the old CA's peer
    /// certificate; the bundle with the new CA alone would cut off whoever restarts with it.
    #[test]
    fn a_member_serving_a_certificate_the_new_bundle_does_not_trust_is_named() {
        let (old, new) = (ca("old"), ca("new"));
        let names = ["*.ex.ns.svc".to_string()];
        let eku = [Eku::ServerAuth, Eku::ClientAuth];
        let served = vec![
            ("ex-a".to_string(), der(&leaf(&new, &names, &eku).0)),
            ("ex-b".to_string(), der(&leaf(&old, &names, &eku).0)),
        ];
        let both = format!("{}{}", old.pem, new.pem);
        assert!(untrusted_peers(&served, both.as_bytes()).is_empty(), "step 1: both trusted");
        let left = untrusted_peers(&served, new.pem.as_bytes());
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, "ex-b");
        assert!(left[0].1.contains("old"), "{left:?}");
        assert!(untrusted_message("peer", &left[0].0, &left[0].1).contains("member ex-b serves a peer certificate"));
    }
}
