//! Property tests: `plan` over generated observations — voters and a learner in every state
//! (healthy, not answering, pod gone, pod dead, pod terminating, volume refused, data its
//! non-root user cannot use, crash-looping briefly or for long), PVC (some marked as root's data) and
//! emptyDir members with and without their volumes, an orphan pod, upgrades in progress, paused
//! and invalid specs, unreachable etcd, clusters that did or did not form, each recovery policy;
//! day 2: pods made from an older pod spec (rollouts), fragmented databases, NOSPACE and CORRUPT
//! alarms, members drained or being drained from the client Service, a running backup.
//! Each property is checked on the Step itself, against etcd's own definition of a quorum
//! (a majority of voters), not against the planner's helpers.
//!
//! The rules themselves are in `proptests_safety` (`check`).
//!
//! `PROPTEST_CASES=N` runs N cases per property (default 2000, under a second), the same ones
//! every run; `PROPTEST_RANDOM=1` draws new ones. The number run is printed. A longer run:
//! `PROPTEST_RANDOM=1 PROPTEST_CASES=200000 cargo test -p etcd-operator --lib proptests -- --nocapture`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;
use crate::observed::{AlarmKind, ClientEndpoints, MemberState, MemberStatus, PodState, PvcState};
use crate::validation::QuorumLossPolicy;
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
    /// Its container cannot run: for long (many restarts, not ready for ten minutes) on the
    /// voters of even index, briefly (one restart, half a minute) on the others and learners.
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
    /// Per voter: 0 serving, 1 drained a moment ago, 2 drained long enough to leave without
    /// endpoints to go by (`DRAIN_SECS`); where the client Service's endpoints are known (any
    /// voter drawn 3 to 5): 3 drained 2.5 s ago and gone from them for `PROXY_SYNC_MS`, 4
    /// drained 5 s ago and still listed, 5 drained 2.5 s ago and gone since before (a stale
    /// cache). With endpoints known, 1 is still listed and 2 gone for only 0.5 s.
    drained: Vec<u8>,
    /// Every member's database file mostly free space.
    fragmented: bool,
    /// 0 none, 1 NOSPACE, 2 CORRUPT (raised by member 1).
    alarm: u8,
    backup_running: bool,
    /// Per voter: its volume is marked as holding root's data.
    root_data: Vec<bool>,
}

impl Gen {
    /// Looks taken while the quorum is lost (`survivors`), per voter the applied index (and
    /// revision) it was seen holding in them if it was, and the revision of the newest backup
    /// `FromBackup` names: derived from `lost_for` (not drawn: the other draws, and so the steps
    /// the cases reach, stay as they were).
    fn looks(&self) -> (u32, Vec<Option<u64>>, i64) {
        let l = self.lost_for.unwrap_or(0) as u64;
        let looks = if l.is_multiple_of(5) { 2 } else { 3 };
        let seen = (0..self.pods.len() as u64)
            .map(|i| (!(l + i).is_multiple_of(4)).then_some(950 + (l + 31 * i) % 100))
            .collect();
        (looks, seen, 950 + (l as i64 * 7) % 100)
    }

    /// The node of voter `i` (`n<i>`, recorded for gone pods too) as read: for a pod that is not
    /// healthy, 0 Ready, 1 not Ready for 30 s, 2 not Ready for 900 s, 3 not Ready for 900 s and
    /// declared out of service; derived from `lost_for` like the looks.
    fn node_of(&self, i: usize) -> crate::nodes::NodeState {
        let mode = if self.pods[i] == Pod::Healthy { 0 } else { (self.lost_for.unwrap_or(0) as usize / 7 + i) % 4 };
        crate::nodes::NodeState {
            exists: true,
            ready: mode == 0,
            not_ready_secs: match mode {
                0 => None,
                1 => Some(30),
                _ => Some(900),
            },
            out_of_service: mode == 3,
        }
    }

    /// Members with a volume are replaced after their node's loss (`volumeMembers: Replace`).
    fn replace_volume_members(&self) -> bool {
        self.lost_for.unwrap_or(0) % 3 == 0
    }
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
                proptest::collection::vec(
                    prop_oneof![12 => Just(0u8), 2 => Just(1u8), 2 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8), 1 => Just(5u8)],
                    n,
                ),
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
        // afterSeconds 0 in some cases (derived, like the looks): recoveries early in a loss.
        d.recovery.after_secs = if g.lost_for.unwrap_or(0) % 4 == 1 { 0 } else { 60 };
        d.recovery.node_loss.volume_after_secs = g.replace_volume_members().then_some(600);
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
            let long_crash = !learner && i.is_multiple_of(2);
            if !matches!(state, Pod::Gone) {
                o.pods.insert(
                    n.clone(),
                    PodState {
                        name: n.clone(),
                        ip: Some(format!("10.0.0.{i}")),
                        node: Some(format!("n{i}")),
                        phase: if state == Pod::Dead { "Failed" } else { "Running" }.into(),
                        ready: state == Pod::Healthy,
                        deleting: state == Pod::Terminating,
                        version: version.into(),
                        image: format!("quay.io/coreos/etcd:v{version}"),
                        problem: matches!(state, Pod::CrashLooping | Pod::VolumeRefused | Pod::DataInaccessible)
                            .then(|| ("CrashLoopBackOff".to_string(), "back-off".to_string())),
                        restarts: match state {
                            Pod::CrashLooping if long_crash => 10,
                            Pod::CrashLooping | Pod::VolumeRefused | Pod::DataInaccessible => 1,
                            _ => 0,
                        },
                        unready_secs: match state {
                            Pod::Healthy => None,
                            Pod::CrashLooping if long_crash => Some(600),
                            _ => Some(30),
                        },
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
                        drained_ms: match drained {
                            0 => None,
                            1 => Some(0),
                            2 => Some(DRAIN_SECS * 1000),
                            4 => Some(5_000),
                            _ => Some(2_500),
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
                    raft_applied_index: index,
                    revision: index as i64,
                    leader: leader_id.unwrap_or(0),
                    db_size: if g.fragmented { 400 << 20 } else { 100 << 20 },
                    db_size_in_use: 100 << 20,
                    ..Default::default()
                }),
            });
        };
    let (looks, seen, backup_revision) = g.looks();
    o.survivor_looks.looks = looks;
    if g.drained.iter().any(|d| *d >= 3) {
        let mut ep = ClientEndpoints { watch_ms: 600_000, ..Default::default() };
        for (i, d) in g.drained.iter().enumerate() {
            match d {
                0 | 1 | 4 => drop(ep.listed.insert(name(i))),
                2 => drop(ep.unlisted_ms.insert(name(i), 500)),
                3 => drop(ep.unlisted_ms.insert(name(i), PROXY_SYNC_MS)),
                _ => drop(ep.unlisted_ms.insert(name(i), 60_000)),
            }
        }
        o.client_endpoints = Some(ep);
    }
    if let Ok(d) = &o.desired
        && let QuorumLossPolicy::FromBackup { .. } = d.recovery.quorum_loss
    {
        let point = crate::observed::BackupPoint {
            restore: crate::validation::Restore {
                location: crate::backup::location::Location {
                    kind: crate::backup::location::Kind::S3,
                    bucket: "b".into(),
                    key: "k".into(),
                },
                source: Default::default(),
                sha256: "ab".repeat(32),
                root_volume: false,
            },
            revision: backup_revision,
            cluster_name: "ex".into(),
            endpoints: vec![],
        };
        o.recovery_backup = Some(Ok(point));
    }
    for (i, &state) in g.pods.iter().enumerate() {
        if let Some(applied) = seen[i] {
            let seen = super::survivors::Seen { id: i as u64 + 1, applied, revision: applied as i64 };
            o.survivor_looks.members.insert(name(i), seen);
        }
        add(&mut o, i, i as u64 + 1, state, false, true, 1000, g.old_version[i]);
        o.member_nodes.insert(name(i), format!("n{i}"));
        o.nodes.insert(format!("n{i}"), g.node_of(i));
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
            super::proptests_safety::check(&o, &step)
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
