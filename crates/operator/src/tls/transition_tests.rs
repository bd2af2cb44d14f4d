//! The stages of turning TLS on and off, as tables: what pods look like (their command line
//! and volumes read back), and the stage pods are made at next.

use super::*;

const P: &str = "peer-tls";
const S: &str = "server-tls";
const O: &str = "operator-tls";

fn both_sides() -> Policy {
    Policy {
        peer_secret: Some(P.into()),
        client: Some(ClientSecrets { server_secret: S.into(), operator_secret: O.into() }),
    }
}

/// A pod as `(peer certificate, peer listener https, client port)`; the server certificate is
/// there exactly when the client port serves https.
fn pod(peer_cert: bool, peer_https: bool, client: Serves) -> PodTls {
    PodTls {
        peer_secret: peer_cert.then(|| P.to_string()),
        peer_https,
        server_secret: client.https().then(|| S.to_string()),
        client,
    }
}

fn plain() -> PodTls {
    pod(false, false, Serves::Http)
}

fn secure() -> PodTls {
    pod(true, true, Serves::Https)
}

fn leaving_all() -> Leaving {
    Leaving::of_policy(&both_sides())
}

fn stage_of(target: &Policy, leaving: &Leaving, pods: &[PodTls]) -> Stage {
    stage(target, leaving, &pods.iter().collect::<Vec<_>>(), false, false, false).unwrap()
}

/// `(peer certificate on new pods, new peer URLs https, client port, operator https)`.
type Summary = (bool, bool, Serves, bool);

/// A table row: the case, the pods, the stage expected.
type Row = (&'static str, Vec<PodTls>, Summary);

fn summary(s: &Stage) -> Summary {
    (s.secrets.peer_secret.is_some(), s.peer_https, s.serves(), s.operator_https)
}

#[test]
fn a_pod_is_read_back_from_its_command_line_and_volumes() {
    let s = Stage::steady(&both_sides());
    let cmd: Vec<String> = s
        .url_flags("https://ex-a.ex.ns.svc:2380", "ex-a.ex.ns.svc")
        .into_iter()
        .chain(crate::tls::member_flags(&s.secrets))
        .collect();
    let mut etcd = k8s_openapi::api::core::v1::Container::default();
    let mut volumes = vec![];
    crate::tls::secure_member(&s.secrets, 0o440, &mut etcd, &mut volumes);
    assert_eq!(PodTls::of(&cmd, &volumes), secure(), "what a pod is made as, it reads back as");

    // Both schemes on the client port; peer listener http with the certificate.
    let mid = Stage { client_http_too: true, peer_https: false, ..s };
    let cmd = mid.url_flags("http://ex-a.ex.ns.svc:2380", "ex-a.ex.ns.svc");
    assert!(cmd.contains(&"--listen-client-urls=http://0.0.0.0:2379,https://0.0.0.0:2379".to_string()), "{cmd:?}");
    assert!(
        cmd.contains(&"--advertise-client-urls=http://ex-a.ex.ns.svc:2379".to_string()),
        "the URL every client can use"
    );
    assert!(
        cmd.contains(&"--listen-peer-urls=http://0.0.0.0:2380".to_string()),
        "the listener follows the member's URL"
    );
    assert_eq!(PodTls::of(&cmd, &volumes), pod(true, false, Serves::Both));

    // A pod of an earlier operator version without TLS: nothing configured.
    let old = ["--listen-peer-urls=http://0.0.0.0:2380".to_string(), "--listen-client-urls=http://0.0.0.0:2379".into()];
    assert_eq!(PodTls::of(&old, &[]), plain());
}

/// Turning both sides on, pod by pod, as `rollout` and the member updates make them.
#[test]
fn turning_tls_on_walks_certificates_then_urls_then_https_only() {
    let on = both_sides();
    let none = Leaving::default();
    #[rustfmt::skip]
    let table: &[Row] = &[
        // what the pods are                          cert  https-URLs client        operator https
        ("nothing has the certificates yet",         vec![plain(), plain(), plain()],
                                                      (true, false, Serves::Both, false)),
        ("one pod has them: still both, still http", vec![pod(true, false, Serves::Both), plain(), plain()],
                                                      (true, false, Serves::Both, false)),
        ("every pod has them: URLs may move; https only next; the operator switches",
                                                      vec![pod(true, false, Serves::Both), pod(true, false, Serves::Both), pod(true, false, Serves::Both)],
                                                      (true, true, Serves::Https, true)),
        ("half-way through the URLs",                vec![secure(), pod(true, false, Serves::Both), pod(true, false, Serves::Both)],
                                                      (true, true, Serves::Https, true)),
        ("done: steady",                              vec![secure(), secure(), secure()],
                                                      (true, true, Serves::Https, true)),
    ];
    for (case, pods, want) in table {
        assert_eq!(summary(&stage_of(&on, &none, pods)), *want, "{case}");
    }
    assert_eq!(
        stage_of(&on, &none, &[secure(), secure()]),
        Stage::steady(&on),
        "a finished transition is the steady stage"
    );
}

#[test]
fn turning_tls_off_walks_the_same_stages_back_with_the_secrets_being_left() {
    let off = Policy::default();
    let leaving = leaving_all();
    #[rustfmt::skip]
    let table: &[Row] = &[
        ("all https: the port serves both first; certificates stay; the operator stays on https",
                                                      vec![secure(), secure(), secure()],
                                                      (true, false, Serves::Both, true)),
        ("one member moved back to http peers",      vec![pod(true, false, Serves::Both), secure(), secure()],
                                                      (true, false, Serves::Both, true)),
        ("no pod listens on https any more: certificates go, the operator uses http",
                                                      vec![pod(true, false, Serves::Both), pod(true, false, Serves::Both), pod(true, false, Serves::Both)],
                                                      (false, false, Serves::Http, false)),
        ("half-way through removing them",           vec![plain(), pod(true, false, Serves::Both), pod(true, false, Serves::Both)],
                                                      (false, false, Serves::Http, false)),
    ];
    for (case, pods, want) in table {
        let s = stage_of(&off, &leaving, pods);
        assert_eq!(summary(&s), *want, "{case}");
        if let Some(c) = &s.secrets.client {
            assert_eq!(c.operator_secret, O, "{case}: the operator's certificate is kept");
        }
    }
    assert_eq!(stage_of(&off, &leaving, &[plain(), plain()]), Stage::steady(&off));
    // A member whose pod is gone comes back on its volume with the URL recorded there: while
    // that is https, pods keep the peer certificate (and can dial it).
    let pods = [pod(true, false, Serves::Both), pod(true, false, Serves::Both)];
    let s = stage(&off, &leaving, &pods.iter().collect::<Vec<_>>(), true, true, false).unwrap();
    assert!(s.secrets.peer_secret.is_some(), "{s:?}");
    // Every pod gone (a power cut) just after peer TLS was turned off: the members come back on
    // their volumes with https URLs, so with the certificate.
    let s = stage(&off, &leaving, &[], true, true, false).unwrap();
    assert!(s.secrets.peer_secret.is_some(), "{s:?}");
}

#[test]
fn each_side_moves_on_its_own() {
    let peers_only = Policy { peer_secret: Some(P.into()), client: None };
    let clients_only = Policy { client: both_sides().client, peer_secret: None };
    let none = Leaving::default();
    assert_eq!(summary(&stage_of(&peers_only, &none, &[plain(), plain()])), (true, false, Serves::Http, false));
    assert_eq!(
        summary(&stage_of(&peers_only, &none, &[pod(true, false, Serves::Http), pod(true, false, Serves::Http)])),
        (true, true, Serves::Http, false)
    );
    assert_eq!(summary(&stage_of(&clients_only, &none, &[plain(), plain()])), (false, false, Serves::Both, false));
    // Clients move on while peers go back: peers keep the certificate while any pod listens on https.
    let s = stage_of(&clients_only, &leaving_all(), &[secure(), pod(true, false, Serves::Https)]);
    assert_eq!(summary(&s), (true, false, Serves::Https, true));
}

#[test]
fn a_side_being_left_needs_its_secrets_known() {
    let off = Policy::default();
    let pods = [secure()];
    let e = stage(&off, &Leaving::default(), &pods.iter().collect::<Vec<_>>(), false, false, false).unwrap_err();
    assert!(e.contains("peer TLS") && e.contains("put the previous spec.TLS back"), "{e}");
    // From the pods' volumes the peer and server Secrets are known, the operator's is not.
    let from_pods = Leaving::of_pods(pods.iter());
    assert_eq!(from_pods.peer_secret.as_deref(), Some(P));
    let e = stage(&off, &from_pods, &pods.iter().collect::<Vec<_>>(), false, false, false).unwrap_err();
    assert!(e.contains("client TLS"), "{e}");
    // No pod: what the spec says.
    assert_eq!(stage(&off, &Leaving::default(), &[], false, false, false), Ok(Stage::steady(&off)));
}

#[test]
fn with_every_pod_lost_half_way_the_mark_keeps_the_client_port_from_jumping_to_the_end() {
    let on = both_sides();
    let off = Policy::default();
    let no_pods = |target: &Policy, mark: &Leaving, on_volumes: bool| {
        summary(
            &stage(target, &Leaving::find(target, std::slice::from_ref(mark)), &[], false, on_volumes, false).unwrap(),
        )
    };
    // Turning clients on, some member still served http (the mark says so): pods come back
    // serving both, the roll to https only follows as it would have.
    let s = stage_of(&on, &Leaving::default(), &[plain(), pod(true, false, Serves::Both)]);
    let mark = leaving_of(&on, &s);
    assert!(mark.plaintext_clients && mark.server_secret.is_none(), "{mark:?}");
    assert_eq!(no_pods(&on, &mark, true), (true, true, Serves::Both, true));
    // A cluster already on https only that lost every pod never serves plaintext again.
    let s = stage_of(&on, &Leaving::default(), &[secure(), secure()]);
    assert!(leaving_of(&on, &s).is_empty());
    assert_eq!(no_pods(&on, &Leaving::default(), true), (true, true, Serves::Https, true));
    // Turning clients off, some member still served https only (the Secrets being left): both,
    // then http only; with the operator's certificate kept.
    let s = stage_of(&off, &leaving_all(), &[secure(), pod(true, false, Serves::Both)]);
    let mark = leaving_of(&off, &s);
    assert_eq!(mark, leaving_all());
    let st = stage(&off, &Leaving::find(&off, std::slice::from_ref(&mark)), &[], false, true, false).unwrap();
    assert_eq!(summary(&st), (false, false, Serves::Both, true));
    assert_eq!(st.secrets.client.as_ref().map(|c| c.operator_secret.as_str()), Some(O));
    assert_eq!(leaving_of(&off, &st).server_secret.as_deref(), Some(S), "the mark stays until pods are back");
    // No volume either (a new cluster, or an emptyDir one whose data is gone): as the spec says.
    assert_eq!(no_pods(&off, &mark, false), summary(&Stage::steady(&off)));
    assert_eq!(
        no_pods(&on, &Leaving { plaintext_clients: true, ..Default::default() }, false),
        summary(&Stage::steady(&on))
    );
}

#[test]
fn the_leaving_mark_names_what_pods_are_still_made_with() {
    let off = Policy::default();
    let sources = [Leaving::default(), leaving_all()];
    let found = Leaving::find(&off, &sources);
    assert_eq!(found, leaving_all(), "the first source that names a side");
    assert!(Leaving::find(&both_sides(), &sources).is_empty(), "sides turned on need no leaving Secrets");
    let s = stage_of(&off, &found, &[secure()]);
    assert_eq!(leaving_of(&off, &s), leaving_all());
    let s = stage_of(&off, &found, &[pod(true, false, Serves::Both)]);
    assert!(leaving_of(&off, &s).is_empty(), "no pod listens with them: the mark goes");
    let json = serde_json::to_string(&leaving_all()).unwrap();
    assert_eq!(json, r#"{"peerSecret":"peer-tls","serverSecret":"server-tls","operatorSecret":"operator-tls"}"#);
    assert_eq!(serde_json::from_str::<Leaving>(&json).unwrap(), leaving_all());
}

#[test]
fn a_formed_cluster_may_turn_sides_on_and_off_but_not_swap_their_secrets() {
    let on = both_sides();
    let off = Policy::default();
    let no_pods: [&PodTls; 0] = [];
    assert!(check_change(&off, &on, &no_pods).is_ok(), "turning on");
    assert!(check_change(&on, &off, &no_pods).is_ok(), "turning off");
    let mut other_operator = on.clone();
    other_operator.client.as_mut().unwrap().operator_secret = "another-operator-secret".into();
    assert!(check_change(&on, &other_operator, &no_pods).is_ok(), "the operator's own Secret may change");
    let mut other_peer = on.clone();
    other_peer.peer_secret = Some("another-peer-secret".into());
    let e = check_change(&on, &other_peer, &no_pods).unwrap_err();
    assert!(e.contains("the peer Secret") && e.contains("peer-tls") && e.contains("another-peer-secret"), "{e}");
    // Off and on again with another Secret while pods still mount the first: refused too.
    let still = secure();
    let e = check_change(&off, &other_peer, &[&still]).unwrap_err();
    assert!(e.contains("Secret peer-tls for peers"), "{e}");
    let mut other_server = on.clone();
    other_server.client.as_mut().unwrap().server_secret = "another-server-secret".into();
    assert!(check_change(&on, &other_server, &no_pods).unwrap_err().contains("the server Secret"));
}

#[test]
fn serve_both_keeps_plaintext_and_tls_clients_served_until_it_is_removed() {
    let on = both_sides();
    let off = Policy::default();
    let both = |target: &Policy, leaving: &Leaving, pods: &[PodTls]| {
        summary(&stage(target, leaving, &pods.iter().collect::<Vec<_>>(), false, false, true).unwrap())
    };
    let certified = [pod(true, false, Serves::Both), pod(true, false, Serves::Both)];
    // On: peers move on, the port keeps serving both; the operator uses https (all serve it).
    assert_eq!(both(&on, &Leaving::default(), &certified), (true, true, Serves::Both, true));
    // Off: members that serve https keep serving it (with the Secrets being left)...
    assert_eq!(
        both(&off, &leaving_all(), &[secure(), pod(true, false, Serves::Both)]),
        (true, false, Serves::Both, true)
    );
    assert_eq!(both(&off, &leaving_all(), &certified), (false, false, Serves::Both, true));
    // ... and plaintext-only pods are not made to serve https again.
    assert_eq!(both(&off, &leaving_all(), &[plain(), plain()]), (false, false, Serves::Http, false));
}
