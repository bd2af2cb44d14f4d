//! Turning TLS on and off for a running cluster. Three kinds of tests:
//! - single situations (a table row each, here): what the planner does next, and what it never
//!   does;
//! - whole transitions played through (`tests_tls_transition_played`): every step the planner
//!   picks is carried out on the observation (pods are built by the real pod builder and read
//!   back as observation reads them; the stage is derived from them as `observe` derives it),
//!   the safety rules are checked after every step, and the sequence of steps is the one an etcd
//!   engineer would run by hand;
//! - properties over generated transition states (`tests_tls_transition_generated`).
//!
//! Fixtures as in `tests.rs`: `running(n, size)` is `n` healthy voters `ex-m1..`, `ex-m1`
//! leading; member URLs start as `http://ex-mN.ex.ns.svc:2380`.

use super::tests::{NAME, add_pvc, m, running, unhealthy, wait_reason};
use super::tests_tls_transition_played::built;
use super::*;
use crate::tls::transition::{Leaving, PodTls, Serves, Stage, stage};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

pub(super) const BOTH: &str =
    r#"{"static":{"member":{"peerSecret":"peer-tls","serverSecret":"server-tls"},"operatorSecret":"client-tls"}}"#;
pub(super) const PEERS: &str = r#"{"static":{"member":{"peerSecret":"peer-tls"}}}"#;
pub(super) const CLIENTS: &str = r#"{"static":{"member":{"serverSecret":"server-tls"},"operatorSecret":"client-tls"}}"#;

/// The spec with `spec.TLS` = `tls` (JSON), or without TLS.
pub(super) fn desired_tls(size: i32, tls: Option<&str>) -> Desired {
    let mut spec = EtcdClusterSpec { size, version: "3.5.1".into(), ..Default::default() };
    spec.tls = tls.map(|t| serde_json::from_str(t).unwrap());
    validate(NAME, &spec).unwrap()
}

/// Derive the stage from the pods as `observe` does; `leaving`: the Secrets of sides being
/// turned off (the mark, or the last valid spec).
pub(super) fn observe_stage(o: &mut Observed, leaving: &[Leaving]) {
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let on_volume = o.pvcs.values().any(|v| v.peer_url.as_deref().is_some_and(|u| u.starts_with("https://")));
    let d = o.desired.as_ref().unwrap();
    let s = stage(&d.tls, &Leaving::find(&d.tls, leaving), &pods, on_volume, !o.pvcs.is_empty(), false).unwrap();
    o.desired.as_mut().unwrap().tls_stage = s;
}

/// Every pod made from the current spec (no `spec.pod` rollout in these tests).
pub(super) fn current_hash(o: &mut Observed) {
    let h = o.desired.as_ref().unwrap().pod_hash();
    for p in o.pods.values_mut() {
        p.spec_hash = Some(h.clone());
    }
}

pub(super) fn set_tls(o: &mut Observed, pod: &str, tls: PodTls) {
    o.pods.get_mut(pod).unwrap().tls = tls;
}

/// A pod with the certificates, peers still on http, the client port serving both.
pub(super) fn certs_http() -> PodTls {
    PodTls {
        peer_secret: Some("peer-tls".into()),
        peer_https: false,
        server_secret: Some("server-tls".into()),
        client: Serves::Both,
    }
}

/// Member `id`'s URL moved to https (and its volume's record, written first, if it has one).
pub(super) fn https_url(o: &mut Observed, id: u64) {
    let u = m(o, id).peer_urls[0].replace("http://", "https://");
    m(o, id).peer_urls = vec![u.clone()];
    let pod = m(o, id).pod.clone();
    if let Some(v) = o.pvcs.get_mut(&pod) {
        v.peer_url = Some(u);
    }
}

/// A 3-member PVC cluster, plaintext, now asked for `tls`.
pub(super) fn pvc_cluster_asked_for(tls: &str) -> Observed {
    let mut o = running(3, 3);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, p);
    }
    o.desired = Ok(desired_tls(3, Some(tls)));
    current_hash(&mut o);
    observe_stage(&mut o, &[]);
    o
}

// ---- single situations -----------------------------------------------------------------------

#[test]
fn a_steady_cluster_with_or_without_tls_has_nothing_to_move() {
    let mut o = running(3, 3);
    current_hash(&mut o);
    observe_stage(&mut o, &[]);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    assert!(tls_transition::progress(&o, &plan(&o)).is_none());
    // A TLS cluster made by an earlier operator version reads back exactly as the spec asks.
    o.desired = Ok(desired_tls(3, Some(BOTH)));
    current_hash(&mut o);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        let secure = o.desired.as_ref().unwrap().tls_stage.pod(true);
        set_tls(&mut o, p, secure);
    }
    for id in 1..=3 {
        https_url(&mut o, id);
    }
    observe_stage(&mut o, &[]);
    assert_eq!(o.desired.as_ref().unwrap().tls_stage, Stage::steady(&o.desired.as_ref().unwrap().tls));
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable, "an operator upgrade restarts nothing");
}

#[test]
fn certificates_come_first_no_peer_url_moves_while_a_pod_lacks_them() {
    let mut o = pvc_cluster_asked_for(BOTH);
    set_tls(&mut o, "ex-m2", certs_http());
    set_tls(&mut o, "ex-m3", certs_http());
    observe_stage(&mut o, &[]);
    // ex-m1 (the leader) lacks them: its pod is made again (leadership handed away first); no
    // member update, which would make a URL some member cannot dial.
    assert!(matches!(plan(&o), Step::MoveLeader { from_pod, purpose: Purpose::Rollout, .. } if from_pod == "ex-m1"));
    let (reason, msg) = tls_transition::progress(&o, &plan(&o)).unwrap();
    assert_eq!(reason, "AddingCertificates");
    assert!(msg.contains("2 of 3 members done") && msg.contains("member ex-m1 now"), "{msg}");
}

#[test]
fn with_every_pod_certified_the_followers_urls_move_first_and_the_leaders_last() {
    let mut o = pvc_cluster_asked_for(BOTH);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    observe_stage(&mut o, &[]);
    assert_eq!(
        plan(&o),
        Step::UpdatePeerUrls { id: 2, pod: "ex-m2".into(), urls: vec!["https://ex-m2.ex.ns.svc:2380".into()] }
    );
    https_url(&mut o, 2);
    https_url(&mut o, 3);
    let secure = o.desired.as_ref().unwrap().tls_stage.pod(true);
    set_tls(&mut o, "ex-m3", secure.clone());
    // ex-m2 moved but its pod still listens on http: it is made again before anything else.
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() });
    let (reason, msg) = tls_transition::progress(&o, &plan(&o)).unwrap();
    assert_eq!(reason, "MovingPeerURLsToHttps");
    assert!(msg.contains("1 of 3 members done") && msg.contains("member ex-m2 now"), "{msg}");
    set_tls(&mut o, "ex-m2", secure);
    assert!(matches!(plan(&o), Step::UpdatePeerUrls { pod, .. } if pod == "ex-m1"), "the leader's URL last");
}

#[test]
fn a_moved_member_is_made_again_before_a_scale_up_an_upgrade_or_authentication() {
    // ex-m2's URL moved to https; its pod still listens on http. Whatever else the spec asks at
    // the same time waits until it listens as its URL says.
    for (size, version) in [(4, "3.5.1"), (2, "3.5.1"), (3, "3.5.2")] {
        let mut o = pvc_cluster_asked_for(BOTH);
        for p in ["ex-m1", "ex-m2", "ex-m3"] {
            set_tls(&mut o, p, certs_http());
        }
        https_url(&mut o, 2);
        o.pvcs.get_mut("ex-m2").unwrap().peer_url = Some("https://ex-m2.ex.ns.svc:2380".into());
        let d = o.desired.as_mut().unwrap();
        d.size = size;
        d.version = crate::version::Version::parse(version).unwrap();
        observe_stage(&mut o, &[]);
        assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() }, "size {size}, version {version}");
    }
}

#[test]
fn no_url_moves_and_no_pod_restarts_while_a_voter_is_unhealthy() {
    let mut o = pvc_cluster_asked_for(BOTH);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    observe_stage(&mut o, &[]);
    unhealthy(&mut o, 3);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
    // Nor when the moved member itself has not come back healthy.
    let mut o = pvc_cluster_asked_for(BOTH);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    https_url(&mut o, 2);
    observe_stage(&mut o, &[]);
    unhealthy(&mut o, 2);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
}

#[test]
fn a_restart_without_quorum_takes_the_listener_scheme_from_the_volume_record() {
    // Every pod is gone (a power cut) half-way: ex-m2's URL had moved to https and its volume's
    // record says so; the restarted member listens on https, the others on http.
    let mut o = pvc_cluster_asked_for(BOTH);
    o.pods.clear();
    o.etcd = None;
    o.pvcs.get_mut("ex-m2").unwrap().peer_url = Some("https://ex-m2.ex.ns.svc:2380".into());
    observe_stage(&mut o, &[]);
    let Step::CreatePod(nm) = plan(&o) else { panic!("{:?}", plan(&o)) };
    let made = built(&o, &nm);
    let own = nm.initial_cluster.iter().find(|(n, _)| *n == nm.name).unwrap().1.clone();
    assert_eq!(made.tls.peer_https, own.starts_with("https://"), "{} listens as its URL says ({own})", nm.name);
}

#[test]
fn a_volume_record_ahead_of_the_membership_is_set_back_unless_its_move_is_under_way() {
    let rec = |o: &mut Observed, url: &str| o.pvcs.get_mut("ex-m2").unwrap().peer_url = Some(url.into());
    let (http, https) = ("http://ex-m2.ex.ns.svc:2380", "https://ex-m2.ex.ns.svc:2380");
    // Peers asked to go https, every pod certified: ex-m2's record says https, the membership
    // http (its member update failed): a move under way, planned again, record left alone.
    let mut o = pvc_cluster_asked_for(BOTH);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    rec(&mut o, https);
    observe_stage(&mut o, &[]);
    assert!(matches!(plan(&o), Step::UpdatePeerUrls { pod, .. } if pod == "ex-m2"), "{:?}", plan(&o));
    // Its pod gone meanwhile, the move cannot go on: the record follows the membership before
    // the member restarts on its volume (its listener then matches what its peers dial).
    o.pods.remove("ex-m2");
    unhealthy(&mut o, 2);
    assert_eq!(plan(&o), Step::RecordPeerUrl { pod: "ex-m2".into(), url: http.into() });
    rec(&mut o, http);
    let Step::CreatePod(nm) = plan(&o) else { panic!("{:?}", plan(&o)) };
    assert_eq!(nm.initial_cluster.iter().find(|(n, _)| n == "ex-m2").unwrap().1, http);
    // spec.TLS set back to plaintext meanwhile: no move is due, the membership is the truth.
    let mut o = running(3, 3);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, p);
    }
    current_hash(&mut o);
    rec(&mut o, https);
    observe_stage(&mut o, &[Leaving::of_policy(&desired_tls(3, Some(BOTH)).tls)]);
    assert_eq!(plan(&o), Step::RecordPeerUrl { pod: "ex-m2".into(), url: http.into() });
    // The other way: turning off, ex-m2's record went to http, its update failed, and TLS is
    // asked for again: the https membership is kept, the record follows it.
    let mut o = pvc_cluster_asked_for(BOTH);
    let secure = o.desired.as_ref().unwrap().tls_stage.clone();
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, Stage::steady(&secure.secrets).pod(true));
    }
    for id in 1..=3 {
        https_url(&mut o, id);
        let name = format!("ex-m{id}");
        o.pvcs.get_mut(&name).unwrap().peer_url = Some(format!("https://{name}.ex.ns.svc:2380"));
    }
    rec(&mut o, http);
    observe_stage(&mut o, &[]);
    assert_eq!(plan(&o), Step::RecordPeerUrl { pod: "ex-m2".into(), url: https.into() });
    // Without an answer from etcd nothing is rewritten: the record is all there is.
    o.etcd = None;
    o.pods.clear();
    assert!(!matches!(plan(&o), Step::RecordPeerUrl { .. }));
}

#[test]
fn emptydir_members_are_replaced_not_updated() {
    let mut o = running(3, 3);
    o.desired = Ok(desired_tls(3, Some(PEERS)));
    current_hash(&mut o);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, PodTls { peer_secret: Some("peer-tls".into()), ..Default::default() });
    }
    observe_stage(&mut o, &[]);
    let Step::AddLearner(nm) = plan(&o) else { panic!("{:?}", plan(&o)) };
    let own = &nm.initial_cluster.iter().find(|(n, _)| *n == nm.name).unwrap().1;
    assert!(own.starts_with("https://"), "the replacement joins with an https URL: {own}");
}

#[test]
fn turning_off_moves_urls_back_before_removing_certificates() {
    let mut o = pvc_cluster_asked_for(BOTH);
    let on = o.desired.as_ref().unwrap().tls.clone();
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, Stage::steady(&on).pod(true));
    }
    for id in 1..=3 {
        https_url(&mut o, id);
    }
    o.desired = Ok(desired_tls(3, None));
    current_hash(&mut o);
    let before = [Leaving::of_policy(&on)];
    observe_stage(&mut o, &before);
    let s = o.desired.as_ref().unwrap().tls_stage.clone();
    assert!(s.secrets.peer_secret.is_some() && s.operator_https, "certificates kept, the operator on https");
    assert_eq!(
        plan(&o),
        Step::UpdatePeerUrls { id: 2, pod: "ex-m2".into(), urls: vec!["http://ex-m2.ex.ns.svc:2380".into()] }
    );
}

#[test]
fn a_member_update_reads_in_events_and_status_as_what_it_is() {
    let s = Step::UpdatePeerUrls { id: 2, pod: "ex-m2".into(), urls: vec![] };
    assert_eq!((s.name(), s.member()), ("UpdatePeerUrls", Some("ex-m2")));
}

#[test]
fn switching_the_secrets_of_a_side_that_stays_on_is_refused() {
    let mut o = pvc_cluster_asked_for(BOTH);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let other = desired_tls(3, Some(r#"{"static":{"member":{"peerSecret":"other-peer-tls"}}}"#)).tls;
    assert!(crate::tls::transition::check_change(&Policy::default(), &other, &pods).is_err());
}

use crate::tls::Policy;

#[test]
fn serve_both_holds_the_client_port_at_both_schemes_and_says_so() {
    // Peers move on as usual; the client port keeps plaintext until the annotation goes.
    let mut o = pvc_cluster_asked_for(BOTH);
    let d = o.desired.as_ref().unwrap().clone();
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, Stage { client_http_too: true, ..Stage::steady(&d.tls) }.pod(true));
    }
    for id in 1..=3 {
        https_url(&mut o, id);
    }
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let held = stage(&d.tls, &Leaving::default(), &pods, false, true, true).unwrap();
    o.desired.as_mut().unwrap().tls_stage = held;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable, "nothing to do while held");
    let (reason, msg) = tls_transition::progress(&o, &plan(&o)).unwrap();
    assert_eq!(reason, "ServingBoth");
    assert!(msg.contains("tls-serve-both"), "{msg}");
    // Removed: the client port goes https only, one member at a time.
    observe_stage(&mut o, &[]);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() });
    assert_eq!(tls_transition::progress(&o, &plan(&o)).unwrap().0, "DroppingPlaintextClients");
}

#[test]
fn serve_both_on_the_way_off_says_so_only_once_the_peer_certificates_are_gone() {
    // TLS off with the client port held at both schemes: every peer URL is back on http and no
    // pod listens on https for peers, so the peer certificate goes (a restart each, or a
    // replacement on emptyDir). Until it has gone, members still move: the condition names
    // that, not the hold (seen in CI: "ServingBoth" shown while an emptyDir member was being
    // replaced, and a client took the cluster for held).
    let on = desired_tls(3, Some(BOTH)).tls;
    let mut o = running(3, 3);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, p);
    }
    o.desired = Ok(desired_tls(3, None));
    current_hash(&mut o);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    let d = o.desired.as_ref().unwrap().clone();
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let held = stage(&d.tls, &Leaving::of_policy(&on), &pods, false, true, true).unwrap();
    assert_eq!(held.secrets.peer_secret, None, "no pod listens on https for peers any more");
    o.desired.as_mut().unwrap().tls_stage = held.clone();
    let step = plan(&o);
    assert!(!matches!(step, Step::Wait(_)), "the peer certificate goes: {step:?}");
    let (reason, _) = tls_transition::progress(&o, &step).unwrap();
    assert_eq!(reason, "RemovingCertificates", "members still move");
    // Once every pod is made without it, the hold says so, and nothing moves.
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, held.pod(false));
    }
    let step = plan(&o);
    assert_eq!(wait_reason(&step), WaitReason::Stable, "{step:?}");
    assert_eq!(tls_transition::progress(&o, &step).unwrap().0, "ServingBoth");
}

#[test]
fn serve_both_on_the_way_off_is_not_shown_while_a_leaving_pod_still_listens_on_https() {
    // TLS off on emptyDir, held at both schemes: the last member with an https URL was replaced
    // and removed, but its pod is still terminating and listens on https for peers, so pods are
    // still made with the peer certificate. The certificate has not gone from the members yet:
    // the hold is not reached (seen in CI: "ServingBoth" shown, then a second replacement
    // began a second later when the old pod was gone).
    let on = desired_tls(3, Some(BOTH)).tls;
    let mut o = running(3, 3);
    o.desired = Ok(desired_tls(3, None));
    current_hash(&mut o);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    let mut leaving = o.pods["ex-m3"].clone();
    leaving.name = "ex-m0".into();
    leaving.deleting = true;
    leaving.tls = PodTls { peer_https: true, ..certs_http() };
    o.pods.insert("ex-m0".into(), leaving);
    let d = o.desired.as_ref().unwrap().clone();
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let held = stage(&d.tls, &Leaving::of_policy(&on), &pods, false, false, true).unwrap();
    assert!(held.secrets.peer_secret.is_some(), "a pod still listens on https for peers");
    o.desired.as_mut().unwrap().tls_stage = held;
    let step = plan(&o);
    let (reason, _) = tls_transition::progress(&o, &step).unwrap();
    assert_eq!(reason, "RemovingCertificates", "members still hold the peer certificate ({step:?})");
}
