//! Table tests: a defragmentation whose call failed or timed out may still run inside etcd (it
//! rewrites the database file whatever the client does), and a member defragmenting serves
//! nothing meanwhile. Until that member is seen defragmented again (a second call waits for the
//! first inside etcd, so it is the one member that may be called), or the guard time passed, no
//! other member is defragmented: by the policy, nor by a NOSPACE recovery, which then starts
//! with that member and waits while it does not answer. Fixtures of `tests.rs`: `running(n,
//! size)` is `n` healthy voters `ex-m1..`, `ex-m1` leading.

use super::tests::{etcd, m, running, wait_message, wait_reason};
use super::*;
use crate::observed::{Alarm, AlarmKind};

const MIB: i64 = 1 << 20;

fn fragmented(o: &mut Observed) {
    for mem in &mut etcd(o).members {
        let st = mem.status.as_mut().unwrap();
        st.db_size = 400 * MIB;
        st.db_size_in_use = 100 * MIB;
    }
}

/// `pod`'s last defragmentation started `secs` ago and was not seen to end.
fn unfinished(o: &mut Observed, pod: &str, secs: i64) {
    o.pods.get_mut(pod).unwrap().defrag_unfinished_secs = Some(secs);
}

#[test]
fn no_other_member_is_defragmented_while_one_may_still_be() {
    let mut o = running(3, 3);
    fragmented(&mut o);
    assert_eq!(plan(&o), Step::Defragment { pod: "ex-m2".into(), free_bytes: 300 * MIB });
    // ex-m3's call timed out half a minute ago: ex-m2 (first in order) must not start beside it;
    // ex-m3 itself may be called again (that call waits for the first inside etcd).
    unfinished(&mut o, "ex-m3", 30);
    assert_eq!(plan(&o), Step::Defragment { pod: "ex-m3".into(), free_bytes: 300 * MIB }, "only ex-m3");
    // ex-m3 is not due any more (its defragmentation did end, unseen): nothing else either.
    m(&mut o, 3).status.as_mut().unwrap().db_size = 100 * MIB;
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::MaintenanceDeferred, "{s:?}");
    assert!(wait_message(&s).contains("ex-m3") && wait_message(&s).contains("may still"), "{s:?}");
    // After the guard time the others go on.
    unfinished(&mut o, "ex-m3", maintenance::DEFRAG_GUARD_SECS);
    assert_eq!(plan(&o), Step::Defragment { pod: "ex-m2".into(), free_bytes: 300 * MIB });
}

#[test]
fn a_nospace_recovery_starts_with_the_member_that_may_still_defragment() {
    let mut o = running(3, 3);
    etcd(&mut o).alarms.push(Alarm { member_id: 2, kind: AlarmKind::NoSpace });
    unfinished(&mut o, "ex-m3", 60);
    let Step::RecoverSpace(r) = plan(&o) else { panic!("expected RecoverSpace, got {:?}", plan(&o)) };
    assert_eq!(r.members, ["ex-m3", "ex-m2", "ex-m1"], "ex-m3 first: a second call waits for its first");
    // ex-m3 does not answer (busy rewriting its database): nothing is defragmented.
    m(&mut o, 3).status = None;
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoSpace, "{s:?}");
    assert!(wait_message(&s).contains("ex-m3"), "{s:?}");
}
