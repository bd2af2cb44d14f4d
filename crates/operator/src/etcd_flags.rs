//! etcd's experimental settings across versions: etcd 3.6 deprecated every `--experimental-*`
//! flag (renamed, or turned into a `--feature-gates` entry) and etcd 3.7 removed them all
//! (etcd#19959). The operator sets none itself; users set them as `ETCD_EXPERIMENTAL_*`
//! variables in `spec.pod.etcdEnv`, which etcd reads as the flags of the same name. Members of
//! 3.6 and later get them under their 3.6 names ([`member_env`]); what has no 3.7 equivalent
//! is refused before the first 3.7 member starts ([`untranslatable`]).
//!
//! The table follows the upstream guides (etcd-io/website `docs/v3.6/upgrades/upgrade_3_6.md`:
//! "Flags deprecated", "Equivalent flags of v3.5 feature gates"; `docs/v3.7/upgrades/
//! upgrade_3_7.md`: "Flags removed") and etcd 3.6's own mapping (`server/embed/config.go`
//! `experimentalFlagMigrationMap`, `server/features` `ExperimentalFlagToFeatureMap`). Pure.

use k8s_openapi::api::core::v1::EnvVar;

use crate::version::Version;

/// What became of an experimental flag (named without its `experimental-` prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The same setting under another flag name.
    Renamed(&'static str),
    /// A boolean flag that became a `--feature-gates` entry.
    Gate(&'static str),
    /// Without effect on a 3.6 member already: left out, for the reason given.
    Dropped(&'static str),
}

/// Every experimental etcd server flag the operator knows, by name without `experimental-`.
pub const EXPERIMENTAL: &[(&str, Fate)] = &[
    ("bootstrap-defrag-threshold-megabytes", Fate::Renamed("bootstrap-defrag-threshold-megabytes")),
    ("compact-hash-check-time", Fate::Renamed("compact-hash-check-time")),
    ("compaction-batch-limit", Fate::Renamed("compaction-batch-limit")),
    ("compaction-sleep-interval", Fate::Renamed("compaction-sleep-interval")),
    ("corrupt-check-time", Fate::Renamed("corrupt-check-time")),
    ("distributed-tracing-address", Fate::Renamed("distributed-tracing-address")),
    ("distributed-tracing-instance-id", Fate::Renamed("distributed-tracing-instance-id")),
    ("distributed-tracing-sampling-rate", Fate::Renamed("distributed-tracing-sampling-rate")),
    ("distributed-tracing-service-name", Fate::Renamed("distributed-tracing-service-name")),
    ("downgrade-check-time", Fate::Renamed("downgrade-check-time")),
    ("enable-distributed-tracing", Fate::Renamed("enable-distributed-tracing")),
    ("max-learners", Fate::Renamed("max-learners")),
    ("memory-mlock", Fate::Renamed("memory-mlock")),
    ("peer-skip-client-san-verification", Fate::Renamed("peer-skip-client-san-verification")),
    ("snapshot-catchup-entries", Fate::Renamed("snapshot-catchup-entries")),
    ("warning-apply-duration", Fate::Renamed("warning-apply-duration")),
    ("warning-unary-request-duration", Fate::Renamed("warning-unary-request-duration")),
    ("watch-progress-notify-interval", Fate::Renamed("watch-progress-notify-interval")),
    // etcd 3.5 renamed it (CHANGELOG-3.5); 3.6 knows only the new name.
    ("backend-bbolt-freelist-type", Fate::Renamed("backend-bbolt-freelist-type")),
    ("compact-hash-check-enabled", Fate::Gate("CompactHashCheck")),
    ("enable-lease-checkpoint", Fate::Gate("LeaseCheckpoint")),
    ("enable-lease-checkpoint-persist", Fate::Gate("LeaseCheckpointPersist")),
    ("initial-corrupt-check", Fate::Gate("InitialCorruptCheck")),
    ("stop-grpc-service-on-defrag", Fate::Gate("StopGRPCServiceOnDefrag")),
    ("txn-mode-write-with-shared-buffer", Fate::Gate("TxnModeWriteWithSharedBuffer")),
    ("enable-v2v3", Fate::Dropped("the v2 emulation was removed in etcd 3.6")),
    ("leasing-prefix", Fate::Dropped("a gRPC proxy flag: an etcd member never read it")),
    ("serializable-ordering", Fate::Dropped("a gRPC proxy flag: an etcd member never read it")),
    ("enable-grpc-logging", Fate::Dropped("a gRPC proxy flag: an etcd member never read it")),
];

const ENV_PREFIX: &str = "ETCD_";
const FEATURE_GATES_ENV: &str = "ETCD_FEATURE_GATES";

/// The flag an `ETCD_*` variable sets (etcd's own rule, inverted: `ETCD_SOME_FLAG` ↔
/// `some-flag`); `None` for other variables.
pub fn flag_of_env(name: &str) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    (!rest.is_empty()).then(|| rest.to_ascii_lowercase().replace('_', "-"))
}

/// The `ETCD_*` variable of `flag`.
pub fn env_of_flag(flag: &str) -> String {
    format!("{ENV_PREFIX}{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// The fate of an experimental flag (`experimental-…`); `None` for other flags, and for an
/// experimental flag the table does not know (nothing to translate it to: refused for 3.7).
pub fn fate(flag: &str) -> Option<Fate> {
    let rest = flag.strip_prefix("experimental-")?;
    EXPERIMENTAL.iter().find(|(f, _)| *f == rest).map(|(_, fate)| *fate)
}

/// Whether `flag` is an experimental one (3.7 has none).
pub fn is_experimental(flag: &str) -> bool {
    flag.starts_with("experimental-")
}

/// Go's `strconv.ParseBool`, which etcd's boolean flags and feature gates use.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Experimental settings in `env` that a 3.7 member could not be given, each with why: a name
/// the table does not know, a feature gate whose value is not a literal boolean (from a
/// ConfigMap, or not one of Go's booleans), or a gate to merge into an `ETCD_FEATURE_GATES` that
/// is not literal.
pub fn untranslatable(env: &[EnvVar]) -> Vec<String> {
    refusals(env).into_iter().map(|(_, why)| why).collect()
}

/// [`untranslatable`], with the variable each reason is about.
fn refusals(env: &[EnvVar]) -> Vec<(&str, String)> {
    let gates_literal = env.iter().find(|e| e.name == FEATURE_GATES_ENV).is_none_or(|e| e.value_from.is_none());
    env.iter()
        .filter_map(|e| {
            let flag = flag_of_env(&e.name).filter(|f| is_experimental(f))?;
            let value = e.value.as_deref().unwrap_or_default();
            let why = match fate(&flag) {
                None => format!("{} (--{flag}): etcd 3.7 has no such flag and no equivalent", e.name),
                Some(Fate::Gate(gate)) if e.value_from.is_some() => {
                    format!(
                        "{} is read from a reference: the feature gate {gate} needs its value written in etcdEnv",
                        e.name
                    )
                }
                Some(Fate::Gate(gate)) if !value.is_empty() && parse_bool(value).is_none() => {
                    format!("{}={value:?} is no boolean: the feature gate {gate} needs true or false", e.name)
                }
                Some(Fate::Gate(gate)) if !gates_literal => format!(
                    "{}: the feature gate {gate} would join ETCD_FEATURE_GATES, which is not written in etcdEnv",
                    e.name
                ),
                _ => return None,
            };
            Some((e.name.as_str(), why))
        })
        .collect()
}

/// `etcdEnv` as a member of `version` gets it, with what was translated (one note each). Before
/// 3.6 unchanged. From 3.6 on, every experimental setting the table knows is written under its
/// 3.6 name: a renamed flag's variable is renamed, a feature gate joins `ETCD_FEATURE_GATES`
/// (after the user's own gates), a dropped one is left out; a setting the user also wrote under
/// the new name (or as a gate) keeps the user's, the experimental one is left out. Settings
/// [`untranslatable`] names stay as they are (refused before 3.7 by the planner and validation).
pub fn member_env(env: &[EnvVar], version: &Version) -> (Vec<EnvVar>, Vec<String>) {
    if version.minor_line() < (3, 6) {
        return (env.to_vec(), vec![]);
    }
    let refused: Vec<&str> = refusals(env).into_iter().map(|(name, _)| name).collect();
    let is_refused = |e: &EnvVar| refused.contains(&e.name.as_str());
    let user_gates: Vec<String> = env
        .iter()
        .find(|e| e.name == FEATURE_GATES_ENV)
        .and_then(|e| e.value.clone())
        .map(|v| v.split(',').map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect())
        .unwrap_or_default();
    let user_sets_gate = |gate: &str| user_gates.iter().any(|g| g.split('=').next().map(str::trim) == Some(gate));
    let mut out: Vec<EnvVar> = vec![];
    let mut notes = vec![];
    let mut gates: Vec<String> = vec![];
    for e in env {
        let fate = flag_of_env(&e.name).filter(|f| is_experimental(f)).and_then(|f| fate(&f));
        let Some(fate) = fate.filter(|_| !is_refused(e)) else {
            out.push(e.clone());
            continue;
        };
        let shown = match &e.value {
            Some(v) => format!("{}={v}", e.name),
            None => e.name.clone(),
        };
        match fate {
            Fate::Renamed(to) => {
                let to_env = env_of_flag(to);
                if env.iter().any(|x| x.name == to_env) {
                    notes.push(format!("{shown} left out: etcdEnv sets {to_env} itself"));
                } else {
                    notes.push(format!("{shown} → {to_env}"));
                    out.push(EnvVar { name: to_env, ..e.clone() });
                }
            }
            Fate::Gate(gate) => {
                let value = e.value.as_deref().unwrap_or_default();
                if user_sets_gate(gate) {
                    notes.push(format!("{shown} left out: ETCD_FEATURE_GATES sets {gate} itself"));
                } else if let Some(b) = parse_bool(value) {
                    notes.push(format!("{shown} → ETCD_FEATURE_GATES={gate}={b}"));
                    gates.push(format!("{gate}={b}"));
                } else {
                    notes.push(format!("{shown} left out: empty, etcd ignores it"));
                }
            }
            Fate::Dropped(why) => notes.push(format!("{shown} left out: {why}")),
        }
    }
    if !gates.is_empty() {
        let all: Vec<String> = user_gates.iter().cloned().chain(gates).collect();
        let value = Some(all.join(","));
        match out.iter_mut().find(|e| e.name == FEATURE_GATES_ENV) {
            Some(e) => e.value = value,
            None => out.push(EnvVar { name: FEATURE_GATES_ENV.into(), value, ..Default::default() }),
        }
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<EnvVar> {
        pairs
            .iter()
            .map(|(n, v)| EnvVar { name: (*n).into(), value: Some((*v).into()), ..Default::default() })
            .collect()
    }

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn pairs(env: &[EnvVar]) -> Vec<(String, String)> {
        env.iter().map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())).collect()
    }

    #[test]
    fn variables_and_flags_map_as_etcd_maps_them() {
        assert_eq!(
            flag_of_env("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK").as_deref(),
            Some("experimental-initial-corrupt-check")
        );
        assert_eq!(flag_of_env("ETCD_SNAPSHOT_COUNT").as_deref(), Some("snapshot-count"));
        assert_eq!(flag_of_env("GOMAXPROCS"), None);
        assert_eq!(env_of_flag("corrupt-check-time"), "ETCD_CORRUPT_CHECK_TIME");
    }

    /// The upstream 3.6 guide's pairs, as members of 3.6 and 3.7 get them; 3.5 members keep the
    /// experimental names (they know no others).
    #[test]
    fn from_three_six_experimental_settings_get_their_new_names() {
        let e = env(&[
            ("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true"),
            ("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", "5m"),
            ("ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER", "false"),
            ("ETCD_SNAPSHOT_COUNT", "5000"),
        ]);
        assert_eq!(member_env(&e, &v("3.5.34")), (e.clone(), vec![]));
        for version in ["3.6.15", "3.7.2"] {
            let (out, notes) = member_env(&e, &v(version));
            assert_eq!(
                pairs(&out),
                [
                    ("ETCD_CORRUPT_CHECK_TIME".into(), "5m".into()),
                    ("ETCD_SNAPSHOT_COUNT".into(), "5000".into()),
                    ("ETCD_FEATURE_GATES".into(), "InitialCorruptCheck=true,TxnModeWriteWithSharedBuffer=false".into()),
                ],
                "{version}"
            );
            assert_eq!(
                notes,
                [
                    "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true → ETCD_FEATURE_GATES=InitialCorruptCheck=true",
                    "ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME=5m → ETCD_CORRUPT_CHECK_TIME",
                    "ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER=false → ETCD_FEATURE_GATES=TxnModeWriteWithSharedBuffer=false",
                ]
            );
        }
    }

    /// etcd 3.6 refuses to start with both a gate and its experimental flag: the user's own
    /// setting wins, the experimental one is left out (and said so).
    #[test]
    fn what_the_user_wrote_under_the_new_name_wins() {
        let e = env(&[
            ("ETCD_FEATURE_GATES", "InitialCorruptCheck=false,StopGRPCServiceOnDefrag=true"),
            ("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true"),
            ("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED", "1"),
            ("ETCD_CORRUPT_CHECK_TIME", "1m"),
            ("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", "5m"),
            ("ETCD_EXPERIMENTAL_ENABLE_V2V3", "/v2"),
        ]);
        let (out, notes) = member_env(&e, &v("3.7.2"));
        assert_eq!(
            pairs(&out),
            [
                (
                    "ETCD_FEATURE_GATES".into(),
                    "InitialCorruptCheck=false,StopGRPCServiceOnDefrag=true,CompactHashCheck=true".into()
                ),
                ("ETCD_CORRUPT_CHECK_TIME".into(), "1m".into()),
            ]
        );
        assert!(
            notes.iter().any(|n| n.contains(
                "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true left out: ETCD_FEATURE_GATES sets InitialCorruptCheck"
            )),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n
                .contains("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME=5m left out: etcdEnv sets ETCD_CORRUPT_CHECK_TIME")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("ETCD_EXPERIMENTAL_ENABLE_V2V3=/v2 left out: the v2 emulation was removed")),
            "{notes:?}"
        );
        assert!(untranslatable(&e).is_empty());
    }

    #[test]
    fn settings_without_a_three_seven_equivalent_are_named() {
        let mut e = env(&[
            ("ETCD_EXPERIMENTAL_NO_SUCH_THING", "1"),
            ("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "yes"),
            ("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", "5m"),
        ]);
        let why = untranslatable(&e);
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].starts_with("ETCD_EXPERIMENTAL_NO_SUCH_THING (--experimental-no-such-thing)"), "{why:?}");
        assert!(why[1].contains("InitialCorruptCheck needs true or false"), "{why:?}");
        // They stay as written (the upgrade is refused before any 3.7 member starts).
        let (out, _) = member_env(&e, &v("3.6.15"));
        assert!(out.iter().any(|x| x.name == "ETCD_EXPERIMENTAL_NO_SUCH_THING"));
        // A gate's value from a ConfigMap cannot be merged into ETCD_FEATURE_GATES.
        e = vec![EnvVar {
            name: "ETCD_EXPERIMENTAL_STOP_GRPC_SERVICE_ON_DEFRAG".into(),
            value_from: Some(Default::default()),
            ..Default::default()
        }];
        assert!(untranslatable(&e)[0].contains("needs its value written in etcdEnv"), "{:?}", untranslatable(&e));
    }

    /// A new spec for etcd 3.7 that names a setting 3.7 cannot be given is refused (nothing is
    /// made); for 3.6 the same spec is valid (3.6 still reads experimental flags).
    #[test]
    fn validation_refuses_what_three_seven_cannot_be_given() {
        let spec = |version: &str, name: &str| etcd_operator_api::EtcdClusterSpec {
            size: 3,
            version: version.into(),
            pod: Some(etcd_operator_api::cluster::PodPolicy { etcd_env: env(&[(name, "true")]), ..Default::default() }),
            ..Default::default()
        };
        let e = crate::validation::validate("ex", &spec("3.7.2", "ETCD_EXPERIMENTAL_NO_SUCH_THING")).unwrap_err();
        assert!(e[0].contains("ETCD_EXPERIMENTAL_NO_SUCH_THING") && e[0].contains("etcd 3.7.2"), "{e:?}");
        assert!(crate::validation::validate("ex", &spec("3.6.15", "ETCD_EXPERIMENTAL_NO_SUCH_THING")).is_ok());
        assert!(crate::validation::validate("ex", &spec("3.7.2", "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK")).is_ok());
    }
}
