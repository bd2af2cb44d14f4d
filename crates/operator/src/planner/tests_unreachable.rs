//! Table tests of what the operator says when its own calls fail: members it cannot ask whose
//! pods are Ready (etcd's own `/health`, a read through the quorum, passes on them) are out of
//! its sight, not down. Such a cluster is reported `MembersUnreachable`, never `NoQuorum`, and
//! nothing is changed either way. Fixtures of `tests.rs`: `running(n, size)` is `n` healthy
//! voters `ex-m1..`, `ex-m1` leading, every pod Ready.

use super::tests::{m, running, wait_reason};
use super::*;
use crate::validation::QuorumLossPolicy;

const TIMEOUT: &str =
    "etcd at http://10.244.0.9:2379: grpc request error: status: Cancelled, message: \"Timeout expired\"";

/// Member `id` gave the operator no status (its call failed with `error`, which observation
/// records unless the member's host refused the connection); its pod stays Ready unless
/// `pod_ready` is false (the kubelet's probe failed too: the member is down).
fn no_answer(o: &mut Observed, id: u64, error: &str, pod_ready: bool) {
    let pod = m(o, id).pod.clone();
    m(o, id).status = None;
    if !error.contains("Connection refused") {
        o.unreached.insert(pod.clone(), error.into());
    }
    o.pods.get_mut(&pod).unwrap().ready = pod_ready;
}

const REFUSED: &str = "etcd at http://10.244.0.11:2379: tcp connect error: Connection refused (os error 111)";

fn message(s: &Step) -> String {
    match s {
        Step::Wait(w) => w.message.clone(),
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn members_out_of_the_operators_sight_are_not_a_lost_quorum() {
    // (which members gave no status, whether their pods are Ready) → the reason.
    let rows: &[(&[u64], bool, WaitReason)] = &[
        // Its client timed out on two of three: their pods are Ready, the cluster serves.
        (&[2, 3], true, WaitReason::MembersUnreachable),
        // Every member: the same.
        (&[1, 2, 3], true, WaitReason::MembersUnreachable),
        // The kubelet's probe fails on them too: they are down, the quorum is lost.
        (&[2, 3], false, WaitReason::NoQuorum),
        // One of three out of sight: a quorum answered; the member is waited for as any other.
        (&[3], true, WaitReason::MemberStarting),
    ];
    for (ids, ready, want) in rows {
        let mut o = running(3, 3);
        for id in *ids {
            no_answer(&mut o, *id, TIMEOUT, *ready);
        }
        if ids.contains(&1) {
            o.etcd.as_mut().unwrap().leader = None;
        }
        let s = plan(&o);
        assert_eq!(wait_reason(&s), *want, "{ids:?} ready {ready}: {s:?}");
    }
}

#[test]
fn the_wait_names_the_members_and_the_operators_own_error() {
    let mut o = running(3, 3);
    no_answer(&mut o, 2, TIMEOUT, true);
    no_answer(&mut o, 3, "etcd at http://10.244.0.10:2379: invalid peer certificate: UnknownIssuer", true);
    let msg = message(&plan(&o));
    assert!(msg.starts_with("operator cannot reach members ex-m2, ex-m3 (ex-m2: "), "{msg}");
    assert!(msg.contains("Timeout expired\"; ex-m3: etcd at") && msg.contains("UnknownIssuer"), "{msg}");
    assert!(msg.contains("1 of 3 voting members answered"), "{msg}");
    assert!(!WaitReason::MembersUnreachable.needs_attention(), "not Degraded: a person has nothing to fix in etcd");
}

#[test]
fn a_member_down_and_one_out_of_sight_still_make_no_quorum_loss_claim_when_a_quorum_is_ready() {
    // 1 answered + 1 out of sight (Ready) = 2 of 3: what is known is the operator's blindness.
    let mut o = running(3, 3);
    no_answer(&mut o, 2, TIMEOUT, true);
    no_answer(&mut o, 3, REFUSED, false);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MembersUnreachable);
    // Of five, 1 answered + 1 Ready out of sight < 3: a quorum loss, reported as such.
    let mut o = running(5, 5);
    no_answer(&mut o, 2, TIMEOUT, true);
    for id in [3, 4, 5] {
        no_answer(&mut o, id, REFUSED, false);
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

#[test]
fn a_refused_connection_is_the_members_answer_even_from_a_ready_pod() {
    // Nothing listens on their client port: etcd is down there, whatever the kubelet's last
    // probe said (it notices within a few periods).
    let mut o = running(3, 3);
    no_answer(&mut o, 2, REFUSED, true);
    no_answer(&mut o, 3, REFUSED, true);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

#[test]
fn a_pod_being_deleted_is_no_evidence_of_health() {
    let mut o = running(3, 3);
    no_answer(&mut o, 2, TIMEOUT, true);
    no_answer(&mut o, 3, TIMEOUT, true);
    for p in ["ex-m2", "ex-m3"] {
        o.pods.get_mut(p).unwrap().deleting = true;
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

/// No member answered at all (etcd: None), each call failing with `error`.
fn nobody_answers(ready: &[bool], error: &str) -> Observed {
    let mut o = running(ready.len() as u64, ready.len() as i32);
    o.etcd = None;
    o.etcd_error = Some(error.into());
    for (p, r) in o.pods.values_mut().zip(ready) {
        p.ready = *r;
        if !error.contains("Connection refused") {
            o.unreached.insert(p.name.clone(), error.into());
        }
    }
    o
}

#[test]
fn no_member_answering_the_operator_while_their_pods_are_ready_is_said_as_such() {
    let rows: &[(&[bool], &str, WaitReason)] = &[
        (&[true, true, true], TIMEOUT, WaitReason::MembersUnreachable),
        (&[true, true, false], TIMEOUT, WaitReason::MembersUnreachable),
        (&[true, false, false], TIMEOUT, WaitReason::NoQuorum),
        (&[false, false, false], TIMEOUT, WaitReason::NoQuorum),
        // Every member's host refused the connection: etcd is down on each.
        (&[true, true, true], REFUSED, WaitReason::NoQuorum),
    ];
    for (ready, error, want) in rows {
        let s = plan(&nobody_answers(ready, error));
        assert_eq!(wait_reason(&s), *want, "{ready:?} {error}: {s:?}");
    }
    let msg = message(&plan(&nobody_answers(&[true, true, true], TIMEOUT)));
    assert!(msg.starts_with("operator cannot reach members: ") && msg.contains("Timeout expired"), "{msg}");
    assert!(msg.contains("3 of 3 member pods are Ready"), "{msg}");
}

#[test]
fn a_refused_login_is_still_reported_as_refused() {
    let mut o = nobody_answers(&[true, true, true], TIMEOUT);
    o.auth.refused = Some("etcd refuses the operator's login as root".into());
    assert_eq!(wait_reason(&plan(&o)), WaitReason::AuthRefused);
}

#[test]
fn out_of_sight_never_starts_a_recovery() {
    // Opted into recovery, the clock long run out: members out of sight can come back, nothing
    // is recovered over them.
    for policy in [QuorumLossPolicy::FromSurvivor, QuorumLossPolicy::Wait] {
        let mut o = running(3, 3);
        if let Ok(d) = o.desired.as_mut() {
            d.recovery.quorum_loss = policy.clone();
            d.recovery.after_secs = 0;
        }
        o.quorum_lost_secs = Some(3600);
        no_answer(&mut o, 2, TIMEOUT, true);
        no_answer(&mut o, 3, TIMEOUT, true);
        assert_eq!(wait_reason(&plan(&o)), WaitReason::MembersUnreachable, "{policy:?}");
    }
}
