use super::*;
use crate::tls::auto::issuer::{issue, new_ca};
use crate::tls::auto::secrets::authority;
use etcd_operator_api::cluster::IssuerRef;

const NOW: i64 = 1_900_000_000;
const N: Names = Names { cluster: "ex", namespace: "ns", domain: "cluster.local" };

fn request(name: &str, duration: &str, renew: &str) -> Result<Request, Vec<String>> {
    Request::of(&CertManagerTls {
        issuer_ref: IssuerRef { name: name.into(), ..Default::default() },
        duration: duration.into(),
        renew_before: renew.into(),
    })
}

#[test]
fn the_issuer_defaults_to_a_cert_manager_issuer_and_lifetimes_to_cert_managers() {
    let r = request("ca", "", "").unwrap();
    assert_eq!(r.issuer, Issuer { name: "ca".into(), kind: "Issuer".into(), group: "cert-manager.io".into() });
    assert_eq!(r.settings.validity, DEFAULT_DURATION_SECS, "cert-manager's 90 days");
    assert_eq!(r.settings.renew_before, DEFAULT_DURATION_SECS / 3);
    let r = Request::of(&CertManagerTls {
        issuer_ref: IssuerRef { name: "vault".into(), kind: "ClusterIssuer".into(), group: "example.io".into() },
        ..Default::default()
    })
    .unwrap();
    assert_eq!((r.issuer.kind.as_str(), r.issuer.group.as_str()), ("ClusterIssuer", "example.io"));
}

#[test]
fn bad_requests_are_refused_by_their_field_names() {
    let e = request("", "", "").unwrap_err();
    assert!(e[0].starts_with("spec.TLS.certManager.issuerRef.name is empty"), "{e:?}");
    let e = request("ca", "90 days", "").unwrap_err();
    assert!(e[0].starts_with("spec.TLS.certManager.duration \"90 days\" is not a duration"), "{e:?}");
    let e = request("ca", "10m", "10m").unwrap_err();
    assert!(
        e[0].contains("spec.TLS.certManager.renewBefore 10m must be at least 1m shorter than duration 10m"),
        "{e:?}"
    );
    assert!(!e.iter().any(|m| m.contains("auto")), "no word of auto: {e:?}");
    let e = request("ca", "30m", "").unwrap_err();
    assert!(e[0].contains("shorter than cert-manager's minimum of 1h"), "{e:?}");
    let long = request("ca", "87600h", "").unwrap();
    assert_eq!(long.settings.validity, 87600 * 3600, "no CA lifetime of the operator's stands in the way");
}

/// A certificate issued to the Certificate's spec passes the checks members' Secrets get: the
/// names every member and the client Service need, the key usages of its use.
#[test]
fn a_certificate_issued_to_the_spec_passes_the_member_checks() {
    let r = request("ca", "1h", "").unwrap();
    for leaf in Leaf::ALL {
        let spec = certificate_spec(leaf, &r, N);
        assert_eq!(spec["secretName"], name("ex", leaf));
        assert_eq!(spec["issuerRef"]["kind"], "Issuer");
        assert_eq!(spec["duration"], "1h");
        let dns: Vec<String> =
            serde_json::from_value(spec.get("dnsNames").cloned().unwrap_or(serde_json::json!([]))).unwrap();
        for required in required_names(leaf.usage(), "ex", "ns", "cluster.local") {
            assert!(check::covers(&dns, &required), "{leaf:?}: {required} not covered by {dns:?}");
        }
        let usages: Vec<String> = serde_json::from_value(spec["usages"].clone()).unwrap();
        assert_eq!(usages.contains(&"server auth".to_string()), leaf.usage() != crate::tls::Use::Client, "{leaf:?}");
        assert!(usages.contains(&"client auth".to_string()), "{leaf:?}");
    }
}

fn secret_data(leaf: Leaf, signer: &crate::tls::auto::state::Authority, ca_pem: &str) -> Data {
    let i = issue(leaf, N, signer, NOW, 3600).unwrap();
    BTreeMap::from([
        ("tls.crt".to_string(), i.cert_pem.into_bytes()),
        ("tls.key".to_string(), i.key.0.into_bytes()),
        ("ca.crt".to_string(), ca_pem.as_bytes().to_vec()),
    ])
}

#[test]
fn what_cert_manager_issued_is_usable_only_with_the_ca_that_signed_it() {
    let a = authority(&new_ca(N, NOW - 60, 7200).unwrap()).unwrap();
    let b = authority(&new_ca(N, NOW - 30, 7200).unwrap()).unwrap();
    let good = parse_issued(Leaf::Server, &secret_data(Leaf::Server, &a, &a.cert.pem()), N, NOW).unwrap();
    assert!(good.usable(), "{:?}", good.problems);
    assert_eq!(good.issuer(), Some(&a.cert.id));
    // Two CAs in ca.crt (an issuer mid-rotation): the one that signed is found.
    let both = format!("{}{}", b.cert.pem(), a.cert.pem());
    assert_eq!(
        parse_issued(Leaf::Peer, &secret_data(Leaf::Peer, &a, &both), N, NOW).unwrap().issuer(),
        Some(&a.cert.id)
    );
    let wrong = parse_issued(Leaf::Peer, &secret_data(Leaf::Peer, &a, &b.cert.pem()), N, NOW).unwrap();
    assert!(!wrong.usable());
    assert!(wrong.problems[0].contains("is not signed by a certificate of ca.crt"), "{:?}", wrong.problems);
    let mut no_ca = secret_data(Leaf::Client, &a, "");
    no_ca.remove("ca.crt");
    let p = parse_issued(Leaf::Client, &no_ca, N, NOW).unwrap();
    assert!(!p.usable() && p.problems.iter().any(|m| m.contains("lacks key ca.crt")), "{:?}", p.problems);
    assert_eq!(parse_issued(Leaf::Client, &BTreeMap::new(), N, NOW), None, "nothing issued yet");
}

#[test]
fn a_certificates_state_is_read_from_its_conditions_and_owner() {
    let r = request("ca", "1h", "").unwrap();
    let spec = certificate_spec(Leaf::Peer, &r, N);
    let obj = serde_json::json!({
        "metadata": {"ownerReferences": [{"uid": "u1"}], "resourceVersion": "7"},
        "spec": spec.clone(),
        "status": {"conditions": [
            {"type": "Ready", "status": "False", "message": "Issuer ca not found"},
            {"type": "Issuing", "status": "True"}]}
    });
    let s = certificate_state(&obj, &spec, "u1");
    assert!(s.spec_current && s.ours && s.issuing);
    assert_eq!(s.not_ready.as_deref(), Some("Issuer ca not found"));
    assert_eq!(s.resource_version.as_deref(), Some("7"));
    assert!(!certificate_state(&obj, &spec, "other").ours);
    let mut changed = obj.clone();
    changed["spec"]["issuerRef"]["name"] = serde_json::json!("other");
    assert!(!certificate_state(&changed, &spec, "u1").spec_current);
}
