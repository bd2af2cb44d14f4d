//! Properties over generated TLS transition states: every step planned keeps the planner's
//! general rules (`proptests_safety::check`) and the transition's own (the operator's scheme
//! served, a new pod listening as its URL says and able to dial its https peers, no URL moved
//! beside an unhealthy member). Fixtures in `tests_tls_transition`.

use super::tests::{NAME, NS, add_pvc, drained, etcd, running, unhealthy};
use super::tests_tls_transition::{BOTH, CLIENTS, PEERS, current_hash, desired_tls, https_url, set_tls};
use super::tests_tls_transition_played::built;
use super::*;
use crate::tls::Policy;
use crate::tls::transition::{Leaving, PodTls, Stage, stage};

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
                p.drained_ms = Some(0);
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
            super::proptests_safety::check(&o, &step)?;
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
