//! Publishing Events. kube's `Recorder` folds Events with the same type, reason, action,
//! regarding and related object into one series that keeps the *first* note. Repeats of the same
//! Event should fold, but a second `MemberUpgraded` of the same member (3.5.0 → 3.5.1 after
//! 3.4.23 → 3.5.0), or a condition whose message changes under the same reason, would be shown
//! with the old note. This recorder keeps kube's folding for Events that repeat with the same
//! note and starts a new Event when the note differs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Reporter};

/// kube's recorder forgets a series 6 minutes after it was last seen; so does this one.
const IDLE: Duration = Duration::from_secs(6 * 60);

/// Same interface as `kube::runtime::events::Recorder`.
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    /// Per fold key: the kube recorder whose series holds the last note published under it.
    series: Mutex<HashMap<String, Series>>,
}

struct Series {
    note: Option<String>,
    recorder: kube::runtime::events::Recorder,
    used: Instant,
}

/// What kube's recorder folds on.
fn fold_key(ev: &Event, regarding: &ObjectReference) -> String {
    let obj =
        |r: &ObjectReference| format!("{:?}/{:?}/{:?}/{:?}/{:?}", r.api_version, r.kind, r.namespace, r.name, r.uid);
    format!(
        "{:?}|{}|{}|{}|{}",
        ev.type_,
        ev.reason,
        ev.action,
        obj(regarding),
        ev.secondary.as_ref().map(obj).unwrap_or_default()
    )
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder { client, reporter, series: Mutex::default() }
    }

    /// Publish `ev` about `regarding`: folded into the previous Event when that one had the same
    /// fold key and the same note, a new Event otherwise.
    /// Notes longer than the apiserver accepts (1 KiB) are shortened, never refused.
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let ev = Event {
            type_: ev.type_,
            reason: ev.reason.clone(),
            note: ev.note.clone().map(bounded_note),
            action: ev.action.clone(),
            secondary: ev.secondary.clone(),
        };
        let (recorder, _) = self.series_for(&ev, regarding);
        recorder.publish(&ev, regarding).await
    }

    /// The kube recorder to publish `ev` with, and whether it starts a new Event.
    fn series_for(&self, ev: &Event, regarding: &ObjectReference) -> (kube::runtime::events::Recorder, bool) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        series.retain(|_, s| now.duration_since(s.used) < IDLE);
        let fresh = || kube::runtime::events::Recorder::new(self.client.clone(), self.reporter.clone());
        let key = fold_key(ev, regarding);
        let new = match series.get_mut(&key) {
            Some(s) if s.note == ev.note => false,
            Some(s) => {
                // A fresh kube recorder has no series for this key: it creates a new Event.
                s.recorder = fresh();
                s.note = ev.note.clone();
                true
            }
            None => {
                series.insert(key.clone(), Series { note: ev.note.clone(), recorder: fresh(), used: now });
                true
            }
        };
        let s = series.get_mut(&key).expect("just inserted");
        s.used = now;
        (s.recorder.clone(), new)
    }
}

/// `note` cut to what the apiserver accepts for an Event note (1 KiB), marked with "...".
pub fn bounded_note(mut note: String) -> String {
    const LIMIT: usize = 1000;
    if note.len() > LIMIT {
        let cut = (0..=LIMIT - 3).rev().find(|i| note.is_char_boundary(*i)).unwrap_or(0);
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;

    #[test]
    fn notes_fit_the_apiserver_limit() {
        assert_eq!(bounded_note("short".into()), "short");
        let long = bounded_note("é".repeat(900));
        assert!(long.len() <= 1000 && long.ends_with("..."), "{}", long.len());
    }

    fn recorder() -> Recorder {
        // ring is the one rustls provider linked (kube, etcd-client and object_store alike);
        // install it as main() does.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Never contacted: only which series an Event goes to is tested.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Recorder::new(client, Reporter { controller: "test".into(), instance: None })
    }

    fn ev(reason: &str, member: Option<&str>) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some("n".into()),
            action: reason.into(),
            secondary: member.map(|m| ObjectReference { name: Some(m.into()), ..Default::default() }),
        }
    }

    #[test]
    fn fold_key_is_what_kube_folds_on_and_ignores_the_note() {
        let c = ObjectReference { name: Some("ex".into()), uid: Some("u1".into()), ..Default::default() };
        let mut other_note = ev("MemberUpgraded", Some("ex-a"));
        other_note.note = Some("other".into());
        assert_eq!(fold_key(&ev("MemberUpgraded", Some("ex-a")), &c), fold_key(&other_note, &c));
        assert_ne!(
            fold_key(&ev("MemberUpgraded", Some("ex-a")), &c),
            fold_key(&ev("MemberUpgraded", Some("ex-b")), &c)
        );
        assert_ne!(fold_key(&ev("MemberUpgraded", None), &c), fold_key(&ev("LeaderMoved", None), &c));
        let c2 = ObjectReference { uid: Some("u2".into()), ..c.clone() };
        assert_ne!(fold_key(&ev("MemberUpgraded", None), &c), fold_key(&ev("MemberUpgraded", None), &c2));
    }

    #[tokio::test]
    async fn same_note_folds_a_changed_note_starts_a_new_event() {
        let r = recorder();
        let c = ObjectReference { name: Some("ex".into()), uid: Some("u1".into()), ..Default::default() };
        let mut e = ev("MemberUpgraded", Some("ex-a"));
        e.note = Some("member ex-a: 3.4.23 → 3.5.0".into());
        assert!(r.series_for(&e, &c).1, "first Event");
        assert!(!r.series_for(&e, &c).1, "a repeat folds");
        let mut next = ev("MemberUpgraded", Some("ex-a"));
        next.note = Some("member ex-a: 3.5.0 → 3.5.1".into());
        assert!(r.series_for(&next, &c).1, "a new note is a new Event");
        assert!(!r.series_for(&next, &c).1);
        assert!(r.series_for(&ev("MemberUpgraded", Some("ex-b")), &c).1, "another member");
    }
}
