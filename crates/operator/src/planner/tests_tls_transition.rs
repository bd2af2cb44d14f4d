//! Turning TLS on and off for a running cluster. Two kinds of tests:
//! - single situations (a table row each): what the planner does next, and what it never does;
//! - whole transitions played through: every step the planner picks is carried out on the
//!   observation (pods are built by the real pod builder and read back as observation reads
//!   them; the stage is derived from them as `observe` derives it), the safety rules are
//!   checked after every step, and the sequence of steps is the one an etcd engineer would run
//!   by hand.
//!
//! Fixtures as in `tests.rs`: `running(n, size)` is `n` healthy voters `ex-m1..`, `ex-m1`
//! leading; member URLs start as `http://ex-mN.ex.ns.svc:2380`.

use super::tests::{NAME, NS, add_pvc, drained, etcd, m, pod, running, unhealthy, wait_reason};
use super::*;
use crate::observed::PodState;
use crate::tls::transition::{Leaving, PodTls, Serves, Stage, leaving_of, stage};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

const BOTH: &str =
    r#"{"static":{"member":{"peerSecret":"peer-tls","serverSecret":"server-tls"},"operatorSecret":"client-tls"}}"#;
const PEERS: &str = r#"{"static":{"member":{"peerSecret":"peer-tls"}}}"#;
const CLIENTS: &str = r#"{"static":{"member":{"serverSecret":"server-tls"},"operatorSecret":"client-tls"}}"#;

/// The spec with `spec.TLS` = `tls` (JSON), or without TLS.
fn desired_tls(size: i32, tls: Option<&str>) -> Desired {
    let mut spec = EtcdClusterSpec { size, version: "3.5.1".into(), ..Default::default() };
    spec.tls = tls.map(|t| serde_json::from_str(t).unwrap());
    validate(NAME, &spec).unwrap()
}

/// Derive the stage from the pods as `observe` does; `leaving`: the Secrets of sides being
/// turned off (the mark, or the last valid spec).
fn observe_stage(o: &mut Observed, leaving: &[Leaving]) {
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let on_volume = o.pvcs.values().any(|v| v.peer_url.as_deref().is_some_and(|u| u.starts_with("https://")));
    let d = o.desired.as_ref().unwrap();
    let s = stage(&d.tls, &Leaving::find(&d.tls, leaving), &pods, on_volume, !o.pvcs.is_empty(), false).unwrap();
    o.desired.as_mut().unwrap().tls_stage = s;
}

/// Every pod made from the current spec (no `spec.pod` rollout in these tests).
fn current_hash(o: &mut Observed) {
    let h = o.desired.as_ref().unwrap().pod_hash();
    for p in o.pods.values_mut() {
        p.spec_hash = Some(h.clone());
    }
}

fn set_tls(o: &mut Observed, pod: &str, tls: PodTls) {
    o.pods.get_mut(pod).unwrap().tls = tls;
}

/// A pod with the certificates, peers still on http, the client port serving both.
fn certs_http() -> PodTls {
    PodTls {
        peer_secret: Some("peer-tls".into()),
        peer_https: false,
        server_secret: Some("server-tls".into()),
        client: Serves::Both,
    }
}

/// Member `id`'s URL moved to https (and its volume's record, written first, if it has one).
fn https_url(o: &mut Observed, id: u64) {
    let u = m(o, id).peer_urls[0].replace("http://", "https://");
    m(o, id).peer_urls = vec![u.clone()];
    let pod = m(o, id).pod.clone();
    if let Some(v) = o.pvcs.get_mut(&pod) {
        v.peer_url = Some(u);
    }
}

/// A 3-member PVC cluster, plaintext, now asked for `tls`.
fn pvc_cluster_asked_for(tls: &str) -> Observed {
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

// ---- whole transitions played through --------------------------------------------------------

/// The pod `nm` as the pod builder makes it, read back as observation reads it.
fn built(o: &Observed, nm: &NewMember) -> PodState {
    let d = o.desired.as_ref().unwrap();
    let mut c = etcd_operator_api::EtcdCluster::new(NAME, EtcdClusterSpec::default());
    c.metadata.namespace = Some(NS.into());
    c.metadata.uid = Some("uid-1".into());
    let made = crate::pod_spec::member_pod(&c, d, nm, "op:1");
    let spec = made.spec.unwrap();
    let etcd = spec.containers.iter().find(|c| c.name == "etcd").unwrap();
    let mut p = pod(&nm.name);
    p.uses_pvc = nm.pvc;
    p.spec_hash = Some(d.pod_hash());
    p.tls = PodTls::of(etcd.command.as_deref().unwrap(), spec.volumes.as_deref().unwrap_or_default());
    p
}

/// Carry out `step` on the observation, as the actor and then the next observation would see
/// it (instantly: pods start healthy, drains are long enough). The leaving mark is kept as
/// `marks` would write it.
fn apply(o: &mut Observed, step: &Step, serial: &mut u32) {
    match step {
        Step::Drain { pod } => drained(o, pod),
        Step::MoveLeader { to, .. } => {
            etcd(o).leader = Some(*to);
            for mm in &mut etcd(o).members {
                mm.status.as_mut().unwrap().leader = *to;
            }
        }
        Step::DeletePod { pod, keep_volume, .. } => {
            assert!(*keep_volume, "a healthy member's data is kept");
            o.pods.remove(pod);
        }
        Step::CreatePod(nm) => {
            let p = built(o, nm);
            o.pods.insert(nm.name.clone(), p);
        }
        Step::UpdatePeerUrls { id, pod, urls } => {
            o.pvcs.get_mut(pod).unwrap().peer_url = Some(urls[0].clone());
            m(o, *id).peer_urls = urls.clone();
        }
        Step::AddLearner(nm) => {
            let leader = etcd(o).leader.unwrap();
            let id = 100 + u64::from(*serial);
            let mut l = super::tests::member(id, &nm.name, leader, 1000);
            l.peer_urls = vec![nm.initial_cluster.iter().find(|(n, _)| *n == nm.name).unwrap().1.clone()];
            l.is_learner = true;
            etcd(o).members.push(l);
            let p = built(o, nm);
            o.pods.insert(nm.name.clone(), p);
        }
        Step::Promote { id, .. } => m(o, *id).is_learner = false,
        Step::RemoveMember { id, pod, .. } => {
            etcd(o).members.retain(|mm| mm.id != *id);
            o.pods.remove(pod);
        }
        other => panic!("unexpected step in a TLS transition: {other:?}"),
    }
    *serial += 1;
    o.new_member_suffix = format!("n{:04}", *serial);
}

/// The safety rules of a transition, checked on every state it passes through.
fn check_invariants(o: &Observed, when: &str) {
    let e = o.etcd.as_ref().unwrap();
    let pods: Vec<&PodState> = o.pods.values().collect();
    // 1. Every member can dial every other: an https peer URL only once every pod has the peer
    //    certificate.
    for mm in &e.members {
        if tls_transition::url_https(mm) {
            assert!(
                pods.iter().all(|p| p.tls.peer_secret.is_some()),
                "{when}: {} is https but a pod cannot dial it",
                mm.pod
            );
        }
    }
    // 2. One scheme serves every member (the operator, and any client, can reach them all).
    let https_only = pods.iter().any(|p| p.tls.client == Serves::Https);
    let http_only = pods.iter().any(|p| p.tls.client == Serves::Http);
    assert!(!(https_only && http_only), "{when}: members serve clients on no common scheme");
    let s = &o.desired.as_ref().unwrap().tls_stage;
    assert!(
        pods.iter().all(|p| if s.operator_https { p.tls.client.https() } else { p.tls.client.http() }),
        "{when}: the operator's scheme is not served by every member"
    );
    // 3. At most one member's listener differs from its URL (the one just moved).
    let moved = e
        .members
        .iter()
        .filter(|mm| o.pods.get(&mm.pod).is_some_and(|p| p.tls.peer_https != tls_transition::url_https(mm)))
        .count();
    assert!(moved <= 1, "{when}: {moved} members listen on another scheme than their URL");
    // 4. Never fewer voters than the spec asks.
    assert!(e.voters().count() >= 3, "{when}: a voter short");
}

/// Plays the transition to `o`'s spec through; returns the steps as `"<Step> <member>"`.
fn play(mut o: Observed, previous: &Policy) -> (Vec<String>, Observed) {
    let mut steps = vec![];
    let mut serial = 0;
    let mut mark = Leaving::default();
    for _ in 0..200 {
        let target = o.desired.as_ref().unwrap().tls.clone();
        observe_stage(&mut o, &[mark.clone(), Leaving::of_policy(previous)]);
        mark = leaving_of(&target, &o.desired.as_ref().unwrap().tls_stage);
        let step = plan(&o);
        if let Step::Wait(w) = &step {
            assert_eq!(w.reason, WaitReason::Stable, "{}", w.message);
            assert!(tls_transition::progress(&o, &step).is_none(), "done, but the condition says otherwise");
            assert!(mark.is_empty(), "the leaving mark outlived the transition: {mark:?}");
            return (steps, o);
        }
        // (The last member's pod, made again at the end, is made as the spec says: done.)
        assert!(
            tls_transition::progress(&o, &step).is_some() || matches!(step, Step::CreatePod(_)),
            "a step without the TLSTransition condition: {step:?} after {steps:?}"
        );
        let name = format!("{} {}", step.name(), step.member().unwrap_or(""));
        apply(&mut o, &step, &mut serial);
        check_invariants(&o, &name);
        steps.push(name);
    }
    panic!("no end after 200 steps: {steps:?}");
}

fn restart(member: &str) -> [String; 3] {
    [format!("Drain {member}"), format!("DeletePod {member}"), format!("CreatePod {member}")]
}

fn update(member: &str) -> String {
    format!("UpdatePeerUrls {member}")
}

fn hand_over(from: &str) -> String {
    format!("MoveLeader {from}")
}

/// What a steady cluster under `tls` looks like (pods, URLs).
fn steady_under(o: &Observed, tls: &Policy) {
    let s = Stage::steady(tls);
    for mm in &o.etcd.as_ref().unwrap().members {
        assert_eq!(tls_transition::url_https(mm), tls.peer_secret.is_some(), "{}'s URL", mm.pod);
        assert_eq!(o.pods[&mm.pod].tls, s.pod(tls.peer_secret.is_some()), "{}'s pod", mm.pod);
    }
}

#[test]
fn a_pvc_cluster_turns_tls_on_in_two_restarts_per_member_and_back() {
    let o = pvc_cluster_asked_for(BOTH);
    let (steps, o) = play(o, &Policy::default());
    #[rustfmt::skip]
    let want: Vec<String> = <[&[String]]>::concat(&[
        // 1. Certificates on every member (peer URLs stay http, the client port serves both):
        //    one restart each on its volume, followers first, the leader after handing over.
        &restart("ex-m2")[..], &restart("ex-m3"), &[hand_over("ex-m1")], &restart("ex-m1"),
        // 2. Each member's peer URL moves to https (member update), then it restarts listening
        //    on https, its client port https only; ex-m2 leads now, so it goes last.
        &[update("ex-m1")], &restart("ex-m1"),
        &[update("ex-m3")], &restart("ex-m3"),
        &[update("ex-m2")], &[hand_over("ex-m2")], &restart("ex-m2"),
    ]);
    assert_eq!(steps, want);
    let on = o.desired.as_ref().unwrap().tls.clone();
    steady_under(&o, &on);

    // And back: the same stages in reverse, with the Secrets being left (ex-m1 leads now).
    let mut o = o;
    o.desired = Ok(desired_tls(3, None));
    current_hash(&mut o);
    let (steps, o) = play(o, &on);
    #[rustfmt::skip]
    let want: Vec<String> = <[&[String]]>::concat(&[
        // 1. Each URL back to http and a restart listening on http (certificates kept while a
        //    member still listens on https; the client port serves both again).
        &[update("ex-m2")], &restart("ex-m2"),
        &[update("ex-m3")], &restart("ex-m3"),
        &[update("ex-m1")], &[hand_over("ex-m1")],
        // ... the last one is made without them: no member listens on https any more.
        &restart("ex-m1"),
        // 2. Certificates removed, the client port plaintext only.
        &restart("ex-m3"), &[hand_over("ex-m2")], &restart("ex-m2"),
    ]);
    assert_eq!(steps, want);
    steady_under(&o, &Policy::default());
}

#[test]
fn each_side_on_its_own_and_emptydir_clusters_keep_every_rule() {
    for (tls, pvc) in [(PEERS, true), (CLIENTS, true), (BOTH, false), (PEERS, false)] {
        eprintln!("{tls} on {}", if pvc { "volumes" } else { "emptyDir" });
        let mut o = running(3, 3);
        if pvc {
            for p in ["ex-m1", "ex-m2", "ex-m3"] {
                add_pvc(&mut o, p);
            }
        }
        o.desired = Ok(desired_tls(3, Some(tls)));
        current_hash(&mut o);
        let (on_steps, o) = play(o, &Policy::default());
        let on = o.desired.as_ref().unwrap().tls.clone();
        steady_under(&o, &on);
        let mut o = o;
        o.desired = Ok(desired_tls(3, None));
        current_hash(&mut o);
        let (off_steps, o) = play(o, &on);
        steady_under(&o, &Policy::default());
        for steps in [on_steps, off_steps] {
            let kinds: Vec<&str> = steps.iter().filter_map(|s| s.split(' ').next()).collect();
            if pvc {
                assert!(!kinds.contains(&"AddLearner") && !kinds.contains(&"RemoveMember"), "{steps:?}");
            } else {
                // No data in the pod: replaced (a learner first), never restarted or updated.
                assert!(kinds.contains(&"AddLearner") && !kinds.contains(&"UpdatePeerUrls"), "{steps:?}");
                assert!(!kinds.contains(&"DeletePod"), "{steps:?}");
            }
        }
    }
}

#[test]
fn an_operator_restarted_half_way_goes_on_from_the_pods_and_the_member_list() {
    // Played step by step, with the stage derived afresh each time (no memory): stopping after
    // any number of steps and going on gives the same end as an uninterrupted run. Here: a
    // member's URL moved, its pod not yet made again, and a fresh observation.
    let mut o = pvc_cluster_asked_for(BOTH);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        set_tls(&mut o, p, certs_http());
    }
    https_url(&mut o, 3);
    o.pvcs.get_mut("ex-m3").unwrap().peer_url = Some("https://ex-m3.ex.ns.svc:2380".into());
    let (steps, o) = play(o, &Policy::default());
    assert_eq!(steps[..3], restart("ex-m3"), "the moved member is made again first");
    steady_under(&o, &o.desired.as_ref().unwrap().tls.clone());
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

// ---- properties over generated transitions ---------------------------------------------------

/// One generated situation of a cluster turning TLS on or off: per voter its pod's stage
/// (0 plain, 1 certificates with http peers and both client schemes, 2 TLS only), whether its
/// URL was just moved (PVC members only: URL and listener differ), its pod present, healthy,
/// drained; the target, the leader, volumes, the hold, a size and a version change asked for
/// at the same time. Only situations the operator can reach:
/// a pod's listener is its URL's scheme unless moved, and no pod is without the peer certificate
/// while any URL or listener is https.
#[derive(Clone, Debug)]
struct TlsGen {
    target: u8,
    members: Vec<(u8, bool, bool, bool, u8)>,
    leader: usize,
    pvc: bool,
    serve_both: bool,
    size_delta: i32,
    /// `spec.version` one patch release up: an upgrade is due.
    upgrade: bool,
    /// This voter's volume records the other scheme than its membership URL (a member update
    /// that failed after its record was written).
    record_ahead: Option<usize>,
}

fn tls_situations() -> impl proptest::strategy::Strategy<Value = TlsGen> {
    use proptest::prelude::*;
    (1usize..=5).prop_flat_map(|n| {
        (
            0u8..4,
            proptest::collection::vec(
                (
                    0u8..3,
                    any::<bool>(),
                    prop::bool::weighted(0.9),
                    prop::bool::weighted(0.85),
                    prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
                ),
                n,
            ),
            0..n,
            any::<bool>(),
            prop::bool::weighted(0.2),
            prop_oneof![4 => Just(0i32), 1 => Just(1i32), 1 => Just(-1i32)],
            prop::bool::weighted(0.25),
            proptest::option::weighted(0.2, 0..n),
        )
            .prop_map(|(target, members, leader, pvc, serve_both, size_delta, upgrade, record_ahead)| TlsGen {
                target,
                members,
                leader,
                pvc,
                serve_both,
                size_delta,
                upgrade,
                record_ahead,
            })
    })
}

fn tls_observed(g: &TlsGen) -> Observed {
    let n = g.members.len();
    let size = (n as i32 + g.size_delta).max(1);
    // The leader is a healthy member with its pod (as etcd would report), if any.
    let leader = (0..n)
        .map(|k| (g.leader + k) % n)
        .find(|&i| g.members[i].2 && g.members[i].3)
        .map(|i| i as u64 + 1)
        .unwrap_or(0);
    let mut o = running(n as u64, size);
    let both = Policy::of(Some(&serde_json::from_str(BOTH).unwrap())).unwrap();
    let target = [Some(BOTH), Some(PEERS), Some(CLIENTS), None][g.target as usize];
    o.desired = Ok(desired_tls(size, target));
    if g.upgrade {
        o.desired.as_mut().unwrap().version = crate::version::Version::parse("3.5.2").unwrap();
    }
    current_hash(&mut o);
    let moved = |stage_of_pod: u8, moved: bool| g.pvc && moved && stage_of_pod > 0;
    let any_https = g.members.iter().any(|(st, mv, ..)| *st == 2 || moved(*st, *mv));
    for (i, (stage_of_pod, moved_url, present, healthy, drain)) in g.members.iter().enumerate() {
        let name = format!("ex-m{}", i + 1);
        let stage_of_pod = &if any_https { (*stage_of_pod).max(1) } else { *stage_of_pod };
        let https = &((*stage_of_pod == 2) != moved(*stage_of_pod, *moved_url));
        if g.pvc {
            add_pvc(&mut o, &name);
        }
        let certified = Stage { client_http_too: true, ..Stage::steady(&both) };
        let tls = match stage_of_pod {
            0 => PodTls::default(),
            1 => certified.pod(false),
            _ => Stage::steady(&both).pod(true),
        };
        set_tls(&mut o, &name, tls);
        if *https {
            https_url(&mut o, i as u64 + 1);
            if let Some(v) = o.pvcs.get_mut(&name) {
                v.peer_url = Some(format!("https://{name}.{NAME}.{NS}.svc:2380"));
            }
        }
        match drain {
            1 => {
                let p = o.pods.get_mut(&name).unwrap();
                p.serving = Some(false);
                p.drained_secs = Some(0);
            }
            2 => drained(&mut o, &name),
            _ => {}
        }
        if !healthy {
            unhealthy(&mut o, i as u64 + 1);
        }
        if !present {
            o.pods.remove(&name);
        }
    }
    // (Never on a member just moved: no other move of it is tried before it is made again.)
    let effective = |st: u8| if any_https { st.max(1) } else { st };
    let ahead = g.record_ahead.filter(|i| !moved(effective(g.members[*i].0), g.members[*i].1));
    if let Some(v) = ahead.and_then(|i| o.pvcs.get_mut(&format!("ex-m{}", i + 1))) {
        let u = v.peer_url.clone().unwrap_or_default();
        v.peer_url = Some(match u.strip_prefix("https://") {
            Some(rest) => format!("http://{rest}"),
            None => u.replacen("http://", "https://", 1),
        });
    }
    etcd(&mut o).leader = Some(leader).filter(|l| *l != 0);
    for mm in &mut etcd(&mut o).members {
        if let Some(s) = mm.status.as_mut() {
            s.leader = leader;
        }
    }
    // The stage, derived as `observe` derives it (the Secrets being left: the last valid spec's).
    let pods: Vec<&PodTls> = o.pods.values().map(|p| &p.tls).collect();
    let on_volume = o.pvcs.values().any(|v| v.peer_url.as_deref().is_some_and(|u| u.starts_with("https://")));
    let d = o.desired.as_ref().unwrap();
    match stage(&d.tls, &Leaving::find(&d.tls, &[Leaving::of_policy(&both)]), &pods, on_volume, g.pvc, g.serve_both) {
        Ok(s) => o.desired.as_mut().unwrap().tls_stage = s,
        Err(e) => o.desired = Err(vec![e]),
    }
    o
}

#[test]
fn every_step_of_a_generated_transition_keeps_the_rules() {
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let n = super::proptests::cases();
    let config = Config { cases: n, failure_persistence: None, ..Config::default() };
    let mut runner = if std::env::var_os("PROPTEST_RANDOM").is_some() {
        TestRunner::new(config)
    } else {
        TestRunner::new_with_rng(
            config,
            proptest::test_runner::TestRng::deterministic_rng(super::proptests::config_rng()),
        )
    };
    let kinds: std::cell::RefCell<std::collections::BTreeMap<&'static str, usize>> = Default::default();
    runner
        .run(&tls_situations(), |g| {
            let o = tls_observed(&g);
            let step = plan(&o);
            *kinds.borrow_mut().entry(step.name()).or_default() += 1;
            // The planner's general rules (quorum, one change at a time, drains, volumes).
            super::proptests::check(&o, &step)?;
            let Ok(d) = o.desired.as_ref() else { return Ok(()) };
            // The operator's scheme is served by every pod.
            if d.tls_stage.operator_https {
                proptest::prop_assert!(o.pods.values().all(|p| p.tls.client.https()), "https for the operator");
            }
            // A pod made now listens as its URL says and can dial every https URL.
            if let Step::CreatePod(nm) | Step::AddLearner(nm) = &step {
                let p = built(&o, nm);
                let own = nm.initial_cluster.iter().find(|(n, _)| *n == nm.name).map(|(_, u)| u.clone());
                let own_https = own.as_deref().is_some_and(|u| u.starts_with("https://"));
                proptest::prop_assert_eq!(
                    p.tls.peer_https,
                    own_https,
                    "{} listens on another scheme than its URL",
                    nm.name
                );
                let https_peers = nm.initial_cluster.iter().any(|(_, u)| u.starts_with("https://"));
                proptest::prop_assert!(
                    !https_peers || p.tls.peer_secret.is_some(),
                    "{} cannot dial its https peers",
                    nm.name
                );
            }
            // Only moved members' restarts, member updates, drains and hand-overs restart or
            // move anything while every voter is healthy; an unhealthy voter stops them all.
            let all_healthy = o.etcd.as_ref().unwrap().voters().all(|m| m.is_healthy())
                && o.etcd.as_ref().unwrap().voters().all(|m| o.pods.contains_key(&m.pod));
            if matches!(step, Step::UpdatePeerUrls { .. }) {
                proptest::prop_assert!(all_healthy, "a URL moved beside an unhealthy member");
            }
            // A record that differs from the membership with no move due is set back to it
            // first once a quorum answers (nothing about the record is decided without one).
            let e = o.etcd.as_ref().unwrap();
            let quorum =
                e.voters().filter(|m| m.is_healthy() && o.pods.contains_key(&m.pod)).count() * 2 > e.voters().count();
            let stale = e.members.iter().find(|m| {
                let url = m.peer_urls[0].as_str();
                let moving = tls_transition::url_https(m) != d.tls.peer_secret.is_some();
                o.pvcs.get(&m.pod).and_then(|v| v.peer_url.as_deref()).is_some_and(|r| r != url && !moving)
            });
            let pods_back = o.pvcs.keys().all(|n| o.pods.contains_key(n));
            if let (Some(m), true, true) = (stale, quorum, pods_back) {
                proptest::prop_assert_eq!(
                    &step,
                    &Step::RecordPeerUrl { pod: m.pod.clone(), url: m.peer_urls[0].clone() },
                    "a stale record of {} not set back",
                    m.pod
                );
            }
            // A member whose listener differs from its URL (just moved) is made again before
            // anything else: no upgrade, learner, removal or other member's move meanwhile.
            let e = o.etcd.as_ref().unwrap();
            let moved: Vec<&str> = e
                .voters()
                .filter(|m| o.pods.get(&m.pod).is_some_and(|p| p.tls.peer_https != tls_transition::url_https(m)))
                .map(|m| m.pod.as_str())
                .collect();
            if all_healthy && !moved.is_empty() {
                let on_moved = match &step {
                    Step::Wait(_) | Step::RecordPeerUrl { .. } => true,
                    Step::Drain { pod } | Step::DeletePod { pod, .. } => moved.contains(&pod.as_str()),
                    Step::MoveLeader { from_pod, .. } => moved.contains(&from_pod.as_str()),
                    _ => false,
                };
                proptest::prop_assert!(on_moved, "{:?} planned while {:?} listen on another scheme", step, moved);
            }
            Ok::<(), TestCaseError>(())
        })
        .unwrap();
    let kinds = kinds.into_inner();
    println!("TLS transition properties: {n} cases passed; steps planned: {kinds:?}");
    for k in ["UpdatePeerUrls", "RecordPeerUrl", "Drain", "DeletePod", "CreatePod", "AddLearner", "MoveLeader"] {
        assert!(kinds.get(k).is_some_and(|c| *c > 0) || n < 500, "no {k} in {n} cases: {kinds:?}");
    }
}
