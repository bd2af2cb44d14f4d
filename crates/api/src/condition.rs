//! Status conditions in the CoreOS shape (`type/status/reason/message/lastTransitionTime`, plus
//! CoreOS' `lastUpdateTime`), shared by every kind.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One observed condition of an object. Times are RFC 3339 strings, as CoreOS wrote them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of condition, e.g. `Available`, `Scaling`, `Upgrading`, `SpecValid`; one entry per
    /// type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// RFC 3339 time the condition last changed (status, reason or message).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_update_time: String,
    /// RFC 3339 time the condition's status last changed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
    /// One CamelCase word saying why, e.g. `QuorumHealthy`, `NoQuorum`, `InvalidSpec`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What happened, for a person: names the members, values and limits involved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Find a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Insert or update `new` in `conditions`, keeping `lastTransitionTime` when the status did not
/// change, and leaving the list untouched (times included) when nothing changed at all.
/// `now` is passed in so that this stays pure and testable.
pub fn upsert(conditions: &mut Vec<Condition>, mut new: Condition, now: &str) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status && old.reason == new.reason && old.message == new.message {
                return;
            }
            new.last_transition_time =
                if old.status == new.status { old.last_transition_time.clone() } else { now.to_string() };
            new.last_update_time = now.to_string();
            *old = new;
        }
        None => {
            new.last_transition_time = now.to_string();
            new.last_update_time = now.to_string();
            conditions.push(new);
        }
    }
}

/// Remove the condition of `type_`, if present.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(t: &str, s: &str, r: &str) -> Condition {
        Condition { type_: t.into(), status: s.into(), reason: r.into(), ..Default::default() }
    }

    #[test]
    fn new_condition_gets_both_times() {
        let mut cs = vec![];
        upsert(&mut cs, cond("Available", "True", "Ready"), "t1");
        assert_eq!(cs[0].last_transition_time, "t1");
        assert_eq!(cs[0].last_update_time, "t1");
    }

    #[test]
    fn unchanged_condition_keeps_its_times() {
        let mut cs = vec![];
        upsert(&mut cs, cond("Available", "True", "Ready"), "t1");
        upsert(&mut cs, cond("Available", "True", "Ready"), "t2");
        assert_eq!(cs[0].last_update_time, "t1");
    }

    #[test]
    fn same_status_new_reason_keeps_transition_time() {
        let mut cs = vec![];
        upsert(&mut cs, cond("Scaling", "True", "ScalingUp"), "t1");
        upsert(&mut cs, cond("Scaling", "True", "ScalingDown"), "t2");
        assert_eq!(cs[0].last_transition_time, "t1");
        assert_eq!(cs[0].last_update_time, "t2");
        assert_eq!(cs[0].reason, "ScalingDown");
    }

    #[test]
    fn status_flip_moves_transition_time() {
        let mut cs = vec![];
        upsert(&mut cs, cond("Available", "True", "Ready"), "t1");
        upsert(&mut cs, cond("Available", "False", "NoQuorum"), "t2");
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].last_transition_time, "t2");
        remove(&mut cs, "Available");
        assert!(cs.is_empty());
    }
}
