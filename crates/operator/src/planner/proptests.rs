//! Property tests: `plan` over generated observations — voters and a learner in every state
//! (healthy, not answering, pod gone, pod dead, pod terminating, volume refused, data its
//! non-root user cannot use), PVC (some marked as root's data) and
//! emptyDir members with and without their volumes, an orphan pod, upgrades in progress, paused
//! and invalid specs, unreachable etcd, clusters that did or did not form, each recovery policy;
//! day 2: pods made from an older pod spec (rollouts), fragmented databases, NOSPACE and CORRUPT
//! alarms, members drained or being drained from the client Service, a running backup.
//! Each property is checked on the Step itself, against etcd's own definition of a quorum
//! (a majority of voters), not against the planner's helpers.
//!
//! `PROPTEST_CASES=N` runs N cases per property (default 2000, under a second), the same ones
//! every run; `PROPTEST_RANDOM=1` draws new ones. The number run is printed. A longer run:
//! `PROPTEST_RANDOM=1 PROPTEST_CASES=200000 cargo test -p etcd-operator --lib proptests -- --nocapture`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;
use crate::observed::{AlarmKind, MemberState, MemberStatus, PodState, PvcState, QuorumLossPolicy};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pod {
    Healthy,
    NotAnswering,
    Gone,
    Dead,
    Terminating,
    VolumeRefused,
    CrashLooping,
    /// Its data check found data its (non-root) user cannot use.
    DataInaccessible,
}

#[derive(Clone, Debug)]
struct Gen {
    pods: Vec<Pod>,
    pvc: bool,
    volumes: Vec<(bool, bool)>, // (present, deleting) per voter
    leader: Option<usize>,
    learner: Option<(Pod, bool, u64)>, // (state, started, raft index)
    orphan: Option<bool>,              // an old pod of no member (dead or not)
    size: i32,
    old_version: Vec<bool>,
    etcd_answers: bool,
    formed: bool,
    paused: bool,
    invalid: bool,
    policy: u8,
    lost_for: Option<i64>,
    /// Per voter: its pod was made from an older pod spec.
    outdated: Vec<bool>,
    /// Per voter: 0 serving, 1 drained a moment ago, 2 drained long enough to leave.
    drained: Vec<u8>,
    /// Every member's database file mostly free space.
    fragmented: bool,
    /// 0 none, 1 NOSPACE, 2 CORRUPT (raised by member 1).
    alarm: u8,
    backup_running: bool,
    /// Per voter: its volume is marked as holding root's data.
    root_data: Vec<bool>,
}

fn pod_state() -> impl Strategy<Value = Pod> {
    prop_oneof![
        4 => Just(Pod::Healthy),
        1 => Just(Pod::NotAnswering),
        1 => Just(Pod::Gone),
        1 => Just(Pod::Dead),
        1 => Just(Pod::Terminating),
        1 => Just(Pod::VolumeRefused),
        1 => Just(Pod::CrashLooping),
        1 => Just(Pod::DataInaccessible),
    ]
}

fn observations() -> impl Strategy<Value = Gen> {
    (1usize..=5).prop_flat_map(|n| {
        (
            (
                proptest::collection::vec(pod_state(), n),
                any::<bool>(),
                proptest::collection::vec((prop::bool::weighted(0.8), prop::bool::weighted(0.1)), n),
                proptest::option::weighted(0.8, 0..n),
                proptest::option::weighted(0.3, (pod_state(), any::<bool>(), 0u64..1200)),
                proptest::option::weighted(0.15, any::<bool>()),
            ),
            (
                1i32..=7,
                proptest::collection::vec(prop::bool::weighted(0.15), n),
                prop::bool::weighted(0.9),
                prop::bool::weighted(0.9),
                prop::bool::weighted(0.05),
                prop::bool::weighted(0.05),
                0u8..3,
                proptest::option::of(0i64..200),
            ),
            (
                proptest::collection::vec(prop::bool::weighted(0.2), n),
                proptest::collection::vec(prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)], n),
                prop::bool::weighted(0.2),
                prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
                prop::bool::weighted(0.1),
                proptest::collection::vec(prop::bool::weighted(0.2), n),
            ),
        )
            .prop_map(
                |(
                    (pods, pvc, volumes, leader, learner, orphan),
                    (size, old_version, etcd_answers, formed, paused, invalid, policy, lost_for),
                    (outdated, drained, fragmented, alarm, backup_running, root_data),
                )| Gen {
                    root_data,
                    outdated,
                    drained,
                    fragmented,
                    alarm,
                    backup_running,
                    pods,
                    pvc,
                    volumes,
                    leader,
                    learner,
                    orphan,
                    size,
                    old_version,
                    etcd_answers,
                    formed,
                    paused,
                    invalid,
                    policy,
                    lost_for,
                },
            )
    })
}

fn name(i: usize) -> String {
    format!("ex-m{i}")
}

fn observed(g: &Gen) -> Observed {
    let spec =
        EtcdClusterSpec { size: if g.invalid { 0 } else { g.size }, version: "3.5.1".into(), ..Default::default() };
    let mut desired = validate("ex", &spec);
    if let Ok(d) = desired.as_mut() {
        d.recovery.after_secs = 60;
        d.recovery.quorum_loss = match g.policy {
            0 => QuorumLossPolicy::Wait,
            1 => QuorumLossPolicy::FromSurvivor,
            _ => QuorumLossPolicy::FromBackup { backup: "b".into() },
        };
    }
    let mut o = Observed {
        name: "ex".into(),
        namespace: "ns".into(),
        desired,
        paused: g.paused,
        services_ready: true,
        ever_bootstrapped: g.formed,
        quorum_lost_secs: g.lost_for,
        new_member_suffix: "zzzzz".into(),
        ..Default::default()
    };
    let hash = o.desired.as_ref().map(|d| d.pod_hash()).unwrap_or_default();
    let root_hash = o.desired.as_ref().map(|d| d.pod_hash_for(true)).unwrap_or_default();
    o.backup_running = g.backup_running.then(|| "a-backup".to_string());
    let leader_id = g.leader.filter(|&l| g.pods[l] == Pod::Healthy).map(|l| l as u64 + 1);
    let mut members = vec![];
    let mut add =
        |o: &mut Observed, i: usize, id: u64, state: Pod, learner: bool, started: bool, index: u64, old: bool| {
            let n = name(i);
            let version = if old { "3.5.0" } else { "3.5.1" };
            let (outdated, drained) = if learner { (false, 0) } else { (g.outdated[i], g.drained[i]) };
            let root_data = !learner && g.pvc && g.root_data[i];
            if !matches!(state, Pod::Gone) {
                o.pods.insert(
                    n.clone(),
                    PodState {
                        name: n.clone(),
                        ip: Some(format!("10.0.0.{i}")),
                        phase: if state == Pod::Dead { "Failed" } else { "Running" }.into(),
                        ready: state == Pod::Healthy,
                        deleting: state == Pod::Terminating,
                        version: version.into(),
                        image: format!("quay.io/coreos/etcd:v{version}"),
                        problem: matches!(state, Pod::CrashLooping | Pod::VolumeRefused | Pod::DataInaccessible)
                            .then(|| ("CrashLoopBackOff".to_string(), "back-off".to_string())),
                        age_secs: 600,
                        uses_pvc: g.pvc,
                        volume_refused: (state == Pod::VolumeRefused).then(|| "emptied".to_string()),
                        data_inaccessible: (state == Pod::DataInaccessible).then(|| "owner 0:0".to_string()),
                        spec_hash: Some(match (outdated, root_data) {
                            (true, _) => "older-spec".to_string(),
                            (false, true) => root_hash.clone(),
                            (false, false) => hash.clone(),
                        }),
                        serving: Some(drained == 0),
                        drained_secs: match drained {
                            0 => None,
                            1 => Some(0),
                            _ => Some(DRAIN_SECS),
                        },
                        ..Default::default()
                    },
                );
            }
            let answers = matches!(state, Pod::Healthy);
            members.push(MemberState {
                id,
                name: if started { n.clone() } else { String::new() },
                pod: n.clone(),
                peer_urls: vec![format!("http://{n}.ex.ns.svc:2380")],
                is_learner: learner,
                status: answers.then(|| MemberStatus {
                    version: version.into(),
                    raft_index: index,
                    leader: leader_id.unwrap_or(0),
                    db_size: if g.fragmented { 400 << 20 } else { 100 << 20 },
                    db_size_in_use: 100 << 20,
                    ..Default::default()
                }),
            });
        };
    for (i, &state) in g.pods.iter().enumerate() {
        add(&mut o, i, i as u64 + 1, state, false, true, 1000, g.old_version[i]);
        let (present, deleting) = g.volumes[i];
        if g.pvc && present {
            o.pvcs.insert(
                name(i),
                PvcState {
                    name: format!("{}-data", name(i)),
                    member: name(i),
                    deleting,
                    root_data: g.root_data[i],
                    ..Default::default()
                },
            );
        }
    }
    if let Some((state, started, index)) = g.learner {
        add(&mut o, 9, 10, state, true, started, index, false);
    }
    if let Some(dead) = g.orphan {
        o.pods.insert(
            "ex-orphan".into(),
            PodState {
                name: "ex-orphan".into(),
                phase: if dead { "Failed" } else { "Running" }.into(),
                age_secs: 600,
                version: "3.5.1".into(),
                ..Default::default()
            },
        );
    }
    if g.etcd_answers && members.iter().any(|m| m.status.is_some()) {
        let alarms = match g.alarm {
            1 => vec![crate::observed::Alarm { member_id: 1, kind: AlarmKind::NoSpace }],
            2 => vec![crate::observed::Alarm { member_id: 1, kind: AlarmKind::Corrupt }],
            _ => vec![],
        };
        o.etcd = Some(EtcdState { cluster_id: 7, leader: leader_id, members, alarms, ..Default::default() });
    } else {
        o.etcd_error = Some("no member answers".into());
    }
    o
}

/// Voters etcd counts as healthy: answering with a leader, on a pod that stays.
fn healthy_voters(o: &Observed) -> Vec<u64> {
    let Some(e) = &o.etcd else { return vec![] };
    e.members
        .iter()
        .filter(|m| !m.is_learner)
        .filter(|m| m.status.as_ref().is_some_and(|s| s.leader != 0 && s.errors.is_empty()))
        .filter(|m| o.pods.get(&m.pod).is_some_and(|p| !p.deleting && p.phase == "Running"))
        .map(|m| m.id)
        .collect()
}

fn voters(o: &Observed) -> Vec<u64> {
    o.etcd.as_ref().map(|e| e.members.iter().filter(|m| !m.is_learner).map(|m| m.id).collect()).unwrap_or_default()
}

/// A majority of `n` voters.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

fn member_of_pod_id(o: &Observed, id: u64) -> Option<&MemberState> {
    o.etcd.as_ref()?.members.iter().find(|m| m.id == id)
}

fn member_of_pod<'a>(o: &'a Observed, pod: &str) -> Option<&'a MemberState> {
    o.etcd.as_ref()?.members.iter().find(|m| m.pod == pod)
}

pub(super) fn check(o: &Observed, step: &Step) -> Result<(), TestCaseError> {
    let healthy = healthy_voters(o);
    let voters = voters(o);
    let had_quorum = !voters.is_empty() && healthy.len() >= majority(voters.len());
    if o.paused || o.desired.is_err() {
        prop_assert!(matches!(step, Step::Wait(_)), "paused or invalid must change nothing: {step:?}");
    }
    let corrupt = o.etcd.as_ref().is_some_and(|e| e.has_alarm(AlarmKind::Corrupt));
    if corrupt && had_quorum {
        // Only restarting a member that is down on its own volume (no change to anything; as
        // root when its data is root's) may still happen; nothing else is touched while a
        // person must look.
        prop_assert!(
            matches!(step, Step::Wait(_) | Step::RestartAsRoot { .. })
                || matches!(step, Step::CreatePod(m) if m.restart)
                || matches!(step, Step::DeletePod { pod, keep_volume: true, .. } if o.pods.get(pod).is_some_and(|p| p.is_dead())),
            "acted under a CORRUPT alarm: {step:?}"
        );
    }
    let drained_long = |pod: &str| {
        o.pods.get(pod).is_some_and(|p| p.serving == Some(false) && p.drained_secs.is_some_and(|s| s >= DRAIN_SECS))
    };
    match step {
        Step::Bootstrap(_) => {
            prop_assert!(!o.ever_bootstrapped, "bootstrapped a cluster that formed");
            prop_assert!(o.pods.is_empty() && o.pvcs.is_empty(), "bootstrapped over existing pods or volumes");
        }
        Step::AddLearner(_) | Step::Promote { .. } | Step::MoveLeader { .. } => {
            prop_assert!(had_quorum, "membership change without a quorum: {step:?}");
            if matches!(step, Step::AddLearner(_)) {
                let learners = o.etcd.as_ref().map(|e| e.members.iter().filter(|m| m.is_learner).count()).unwrap_or(0);
                prop_assert_eq!(learners, 0, "a second learner while one exists");
            }
        }
        Step::RemoveMember { id, .. } => {
            prop_assert!(had_quorum, "removed a member without a quorum: {step:?}");
            let is_voter = voters.contains(id);
            let after_healthy = healthy.iter().filter(|h| *h != id).count();
            let after_voters = voters.len() - usize::from(is_voter);
            prop_assert!(
                after_voters == 0 || after_healthy >= majority(after_voters),
                "removal leaves {after_healthy} healthy of {after_voters} voters"
            );
            let leader = o.etcd.as_ref().and_then(|e| e.leader);
            if Some(*id) == leader {
                prop_assert!(voters.len() == 1, "removed the leader while another voter could go");
            }
            // A healthy voter leaves on purpose only after it left the client Service.
            if healthy.contains(id) {
                let pod = member_of_pod_id(o, *id).map(|m| m.pod.clone()).unwrap_or_default();
                let serving_pod = o.pods.get(&pod).is_some_and(|p| !p.deleting && p.volume_refused.is_none());
                prop_assert!(!serving_pod || drained_long(&pod), "removed healthy voter {pod} before draining it");
            }
        }
        Step::Defragment { pod, .. } => {
            prop_assert!(had_quorum, "defragmented without a quorum");
            let e = o.etcd.as_ref().expect("etcd answered");
            prop_assert!(healthy.len() == voters.len(), "defragmented beside an unhealthy voter");
            prop_assert!(e.members.iter().all(|m| !m.is_learner), "defragmented beside a learner");
            prop_assert!(o.backup_running.is_none(), "defragmented while a backup runs");
            let m = member_of_pod(o, pod).expect("a member");
            prop_assert!(
                Some(m.id) != e.leader || voters.len() == 1,
                "defragmented the leader before handing leadership away"
            );
        }
        Step::RecoverSpace(_) => {
            prop_assert!(had_quorum, "NOSPACE recovery without a quorum");
            prop_assert!(
                o.etcd.as_ref().is_some_and(|e| e.has_alarm(AlarmKind::NoSpace)),
                "space recovery without NOSPACE"
            );
        }
        Step::Drain { pod } => {
            prop_assert!(o.pods.get(pod).is_some_and(|p| !p.deleting), "drained a pod that is going anyway");
        }
        Step::UpgradeMember { pod, .. } => {
            // Restarting a healthy voter must leave a quorum among the others. Clusters of one or
            // two voters cannot have that (a majority of 2 is 2): their upgrade is a short outage
            // by etcd's arithmetic, which README states.
            if let Some(m) = member_of_pod(o, pod).filter(|m| healthy.contains(&m.id) && voters.len() > 2) {
                let others = healthy.iter().filter(|h| **h != m.id).count();
                prop_assert!(others >= majority(voters.len()), "upgrade restart of {pod} drops the quorum");
            }
        }
        Step::DeletePod { pod, keep_volume, .. } => {
            if let Some(m) = member_of_pod(o, pod).filter(|m| healthy.contains(&m.id)) {
                // Only a rollout restarts a healthy voter: on its volume, drained first, with a
                // quorum among the others (clusters of one or two voters excepted, as upgrades).
                prop_assert!(*keep_volume && o.pvcs.contains_key(pod), "deleted healthy voter {pod} and its data");
                prop_assert!(drained_long(pod), "deleted healthy voter {pod} before draining it");
                if voters.len() > 2 {
                    let others = healthy.iter().filter(|h| **h != m.id).count();
                    prop_assert!(others >= majority(voters.len()), "restart of {pod} drops the quorum");
                }
            }
            let live_volume = o.pvcs.get(pod).is_some_and(|v| !v.deleting);
            if live_volume && !keep_volume {
                // A volume goes only with a member that is not one (any more), or before the
                // cluster formed.
                prop_assert!(
                    !o.ever_bootstrapped || member_of_pod(o, pod).is_none() && o.etcd.is_some(),
                    "deleted the volume of {pod}, which may hold the only copy of its data"
                );
            }
        }
        Step::CreatePod(m) if m.restart => {
            prop_assert!(
                o.pvcs.get(&m.name).is_some_and(|v| !v.deleting),
                "restarted {} on a volume that is not there",
                m.name
            );
        }
        Step::RestartAsRoot { pod, .. } => {
            let p = o.pods.get(pod);
            prop_assert!(
                p.is_some_and(|p| p.data_inaccessible.is_some() && !p.deleting),
                "{pod}: nothing inaccessible"
            );
            prop_assert!(o.pvcs.get(pod).is_some_and(|v| !v.deleting), "{pod} restarted as root without its volume");
            let default_hash = o.desired.as_ref().map(|d| d.pod_hash()).ok();
            prop_assert!(p.unwrap().spec_hash == default_hash, "{pod} was not made with the default profile");
        }
        Step::UpdatePeerUrls { urls, .. } => {
            prop_assert!(had_quorum && healthy.len() == voters.len(), "a peer URL moved beside an unhealthy voter");
            if urls.iter().any(|u| u.starts_with("https://")) {
                prop_assert!(
                    o.pods.values().all(|p| p.tls.peer_secret.is_some()),
                    "an https peer URL while a pod has no peer certificate to dial it"
                );
            }
        }
        Step::RecordPeerUrl { pod, url } => {
            // Only etcd's own member list, with a quorum answering, overrides a volume's record.
            let leader = o.etcd.as_ref().and_then(|e| e.leader);
            prop_assert!(had_quorum || leader.is_some(), "a peer-URL record rewritten without a leader's member list");
            let m = member_of_pod(o, pod).expect("a member");
            prop_assert_eq!(m.peer_urls.first(), Some(url), "the record is not the membership's");
        }
        Step::Recover(_) => {
            prop_assert!(!had_quorum, "disaster recovery with a healthy quorum");
            let d = o.desired.as_ref().expect("valid");
            prop_assert!(d.recovery.quorum_loss != QuorumLossPolicy::Wait, "recovered without the user opting in");
            prop_assert!(o.quorum_lost_secs.unwrap_or(0) >= d.recovery.after_secs, "recovered before afterSeconds");
        }
        _ => {}
    }
    // Data the non-root user cannot use is answered first, whatever else is going on: by
    // restarting that member as root on its volume (never by a membership change).
    let as_root_due = o.desired.as_ref().is_ok_and(|d| {
        o.pods.values().any(|p| {
            !p.deleting
                && p.data_inaccessible.is_some()
                && p.spec_hash.as_ref() == Some(&d.pod_hash())
                && o.pvcs.get(&p.name).is_some_and(|v| !v.deleting)
        })
    });
    if as_root_due && !o.paused {
        prop_assert!(matches!(step, Step::RestartAsRoot { .. }), "inaccessible data answered by {step:?}");
    }
    // Members on volumes marked as root's run as root, the others as the default.
    if let Step::CreatePod(m) | Step::AddLearner(m) = step {
        prop_assert_eq!(m.root_data, o.pvcs.get(&m.name).is_some_and(|v| v.root_data), "{}", m.name);
    }
    // A new member's https peer URL is dialable by every pod.
    if let Step::AddLearner(m) = step {
        let own = m.initial_cluster.iter().find(|(n, _)| *n == m.name).map(|(_, u)| u.as_str()).unwrap_or("");
        if own.starts_with("https://") {
            prop_assert!(o.pods.values().all(|p| p.tls.peer_secret.is_some()), "an https learner some pod cannot dial");
        }
    }
    // A refused volume never restarts its member.
    if let Step::CreatePod(m) = step {
        prop_assert!(o.pods.get(&m.name).is_none(), "created a pod that exists: {}", m.name);
    }
    Ok(())
}

pub(super) fn config_rng() -> proptest::test_runner::RngAlgorithm {
    proptest::test_runner::RngAlgorithm::ChaCha
}

pub(super) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

#[test]
fn every_planned_step_keeps_the_safety_rules() {
    let n = cases();
    let config = Config { cases: n, failure_persistence: None, ..Config::default() };
    // The same cases every run unless PROPTEST_RANDOM is set (long exploratory runs).
    let mut runner = if std::env::var_os("PROPTEST_RANDOM").is_some() {
        TestRunner::new(config)
    } else {
        TestRunner::new_with_rng(config, proptest::test_runner::TestRng::deterministic_rng(config_rng()))
    };
    let kinds: std::cell::RefCell<BTreeMap<&'static str, usize>> = Default::default();
    runner
        .run(&observations(), |g| {
            let o = observed(&g);
            let step = plan(&o);
            let kind = step.name();
            *kinds.borrow_mut().entry(kind).or_default() += 1;
            check(&o, &step)
        })
        .unwrap();
    let kinds = kinds.into_inner();
    println!("planner properties: {n} cases passed; steps planned: {kinds:?}");
    // The generator reaches the interesting steps (else the properties prove little).
    for k in [
        "RemoveMember",
        "CreatePod",
        "DeletePod",
        "AddLearner",
        "Recover",
        "Promote",
        "UpgradeMember",
        "Drain",
        "Defragment",
        "RecoverSpace",
        "MoveLeader",
        "RestartAsRoot",
    ] {
        assert!(kinds.get(k).is_some_and(|c| *c > 0) || n < 500, "no {k} in {n} cases: {kinds:?}");
    }
}
