//! The history checker: per key, is there a linearizable order of the operations of a
//! single register (write, read, compare-and-set) consistent with every outcome and with real
//! time? A Wing–Gong search with Lowe's memoisation (the set of operations already placed plus
//! the register value), written here: the registry's search API was not reachable from this
//! machine; of the crates its documentation shows, todc-utils' WGLChecker documents only
//! complete call/response histories and the others are demos or "simplified" checks. Operations
//! whose outcome is unknown (a timeout, a connection lost mid-call) may have happened at any
//! time after their call, or never.
//!
//! On top of that, direct counts for the report: acknowledged writes of write-once keys missing
//! or changed in the final read ("lost"), and final values no operation ever wrote ("phantom").
//!
//! What it cannot catch: anything across keys (a transaction's atomicity over several keys,
//! the order of writes to different keys, revisions), stale serializable reads (the clients only
//! issue linearizable ones), watch streams, and a write that was reported failed yet happened
//! (every error counts as "unknown", never as "did not happen"). Per key it is exact up to its
//! search budget; a key whose search exceeds it is reported as undecided, not as passing.

use std::collections::{BTreeMap, HashMap, HashSet};

/// What an operation did to the register. Values are unique per run (client id and sequence
/// number), which keeps the search almost linear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum F {
    Write(String),
    /// The value read; None: the key did not exist.
    Read(Option<String>),
    /// Set `new` if the value is `expect` (None: the key does not exist); `ok` is the
    /// transaction's `succeeded`, None when the outcome is unknown.
    Cas {
        expect: Option<String>,
        new: String,
        ok: Option<bool>,
    },
}

/// One operation: `call` and `ret` in ns since the run started; `ret` None: outcome unknown.
#[derive(Clone, Debug)]
pub struct Op {
    pub client: u32,
    pub cluster: String,
    pub key: String,
    pub f: F,
    pub call: u64,
    pub ret: Option<u64>,
    pub via: String,
    pub err: Option<String>,
    /// (cluster ID, member ID) from the answer's header: which etcd answered (a pod IP can be
    /// held by a member of another cluster once its pod is gone).
    pub answered_by: Option<(u64, u64)>,
}

#[derive(Clone, Debug, Default)]
pub struct Verdict {
    pub keys: usize,
    pub ops: usize,
    pub acked_writes: usize,
    pub unknown_writes: usize,
    /// `cluster/key: why` for write-once keys.
    pub lost: Vec<String>,
    pub phantom: Vec<String>,
    /// Keys with no linearizable order, with the operations of the key.
    pub not_linearizable: Vec<String>,
    /// Keys whose search exceeded the budget.
    pub undecided: Vec<String>,
}

impl Verdict {
    pub fn pass(&self) -> bool {
        self.lost.is_empty() && self.phantom.is_empty() && self.not_linearizable.is_empty() && self.undecided.is_empty()
    }
}

/// Explored states per key before giving up.
const BUDGET: usize = 2_000_000;

/// Checks the history; `final_reads` (cluster, key) → value are the reads after every client
/// stopped, taken as reads that started after every other operation returned. `write_once`:
/// whether a key is only ever written once (the unique-key workload) for the lost count.
pub fn check(
    history: &[Op],
    final_reads: &BTreeMap<(String, String), Option<String>>,
    write_once: impl Fn(&str) -> bool,
) -> Verdict {
    let mut by_key: BTreeMap<(String, String), Vec<Op>> = BTreeMap::new();
    for op in history {
        by_key.entry((op.cluster.clone(), op.key.clone())).or_default().push(op.clone());
    }
    let end = history.iter().flat_map(|o| [Some(o.call), o.ret]).flatten().max().unwrap_or(0) + 1;
    let mut v = Verdict { ops: history.len(), ..Default::default() };
    for op in history {
        match &op.f {
            F::Write(_) | F::Cas { ok: Some(true), .. } if op.ret.is_some() => v.acked_writes += 1,
            F::Write(_) | F::Cas { ok: None, .. } => v.unknown_writes += 1,
            _ => {}
        }
    }
    for ((cluster, key), value) in final_reads {
        by_key.entry((cluster.clone(), key.clone())).or_default().push(Op {
            client: u32::MAX,
            cluster: cluster.clone(),
            key: key.clone(),
            f: F::Read(value.clone()),
            call: end,
            ret: Some(end),
            via: "final read".into(),
            err: None,
            answered_by: None,
        });
    }
    v.keys = by_key.len();
    for ((cluster, key), ops) in &by_key {
        let name = format!("{cluster}/{key}");
        let written: HashSet<&String> = ops
            .iter()
            .filter_map(|o| match &o.f {
                F::Write(w) | F::Cas { new: w, .. } => Some(w),
                F::Read(_) => None,
            })
            .collect();
        if let Some(Some(val)) = final_reads.get(&(cluster.clone(), key.clone()))
            && !written.contains(val)
        {
            v.phantom.push(format!("{name}: final value {val:?} was never written"));
        }
        if write_once(key) {
            for o in ops {
                if let (F::Write(w), Some(_)) = (&o.f, o.ret) {
                    let fin = final_reads.get(&(cluster.clone(), key.clone()));
                    if fin != Some(&Some(w.clone())) {
                        v.lost.push(format!(
                            "{name}: acknowledged write {w:?} (client {}), final read {fin:?}",
                            o.client
                        ));
                    }
                }
            }
        }
        match linearizable(ops) {
            Some(true) => {}
            Some(false) => v.not_linearizable.push(format!("{name}: {}", describe(ops))),
            None => v.undecided.push(name),
        }
    }
    v
}

fn describe(ops: &[Op]) -> String {
    let mut ops: Vec<&Op> = ops.iter().collect();
    ops.sort_by_key(|o| o.call);
    let s: Vec<String> = ops
        .iter()
        .map(|o| {
            let ret = o.ret.map(|r| format!("{:.3}", r as f64 / 1e9)).unwrap_or("?".into());
            let err = o.err.as_deref().map(|e| format!(" err: {e}")).unwrap_or_default();
            let by = o.answered_by.map(|(c, m)| format!(" (cluster {c:x} member {m:x})")).unwrap_or_default();
            format!("[c{} {:.3}..{} {:?} via {}{by}{err}]", o.client, o.call as f64 / 1e9, ret, o.f, o.via)
        })
        .collect();
    s.join(" ")
}

/// Whether the operations of one key have a linearizable order; None: search budget exceeded.
pub fn linearizable(ops: &[Op]) -> Option<bool> {
    // Reads of unknown outcome say nothing.
    let mut ops: Vec<&Op> = ops.iter().filter(|o| o.ret.is_some() || !matches!(o.f, F::Read(_))).collect();
    ops.sort_by_key(|o| o.call);
    // Values as small integers; 0 is "no key".
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut id = |s: &Option<String>| -> u32 {
        match s {
            None => 0,
            Some(s) => {
                let n = ids.len() as u32 + 1;
                *ids.entry(s.clone()).or_insert(n)
            }
        }
    };
    #[derive(Clone, Copy)]
    enum G {
        Write(u32),
        Read(u32),
        Cas(u32, u32, Option<bool>),
    }
    let g: Vec<G> = ops
        .iter()
        .map(|o| match &o.f {
            F::Write(w) => G::Write(id(&Some(w.clone()))),
            F::Read(r) => G::Read(id(r)),
            F::Cas { expect, new, ok } => G::Cas(id(expect), id(&Some(new.clone())), *ok),
        })
        .collect();
    let call: Vec<u64> = ops.iter().map(|o| o.call).collect();
    let ret: Vec<u64> = ops.iter().map(|o| o.ret.unwrap_or(u64::MAX)).collect();
    let required: Vec<bool> = ops.iter().map(|o| o.ret.is_some()).collect();
    let n = ops.len();
    let apply = |op: G, s: u32| -> Option<u32> {
        match op {
            G::Write(w) => Some(w),
            G::Read(r) => (r == s).then_some(s),
            G::Cas(e, w, Some(true)) | G::Cas(e, w, None) => (e == s).then_some(w),
            G::Cas(e, _, Some(false)) => (e != s).then_some(s),
        }
    };
    let words = n.div_ceil(64).max(1);
    let mut seen: HashSet<(Vec<u64>, u32)> = HashSet::new();
    // Depth-first over (placed set, value); an explicit stack of candidate positions.
    let mut placed = vec![0u64; words];
    let is_placed = |p: &[u64], i: usize| p[i / 64] >> (i % 64) & 1 == 1;
    let remaining_required = required.iter().filter(|r| **r).count();
    let mut stack: Vec<(usize, u32, usize)> = vec![]; // (op placed, value before, next candidate)
    let mut state = 0u32;
    let mut left = remaining_required;
    let mut next = 0usize;
    loop {
        if left == 0 {
            return Some(true);
        }
        // The earliest return among unplaced operations bounds which may go next.
        let min_ret = (0..n).filter(|i| !is_placed(&placed, *i)).map(|i| ret[i]).min().unwrap_or(u64::MAX);
        let mut advanced = false;
        let mut i = next;
        while i < n && call[i] <= min_ret {
            if !is_placed(&placed, i)
                && let Some(s2) = apply(g[i], state)
            {
                let mut p2 = placed.clone();
                p2[i / 64] |= 1 << (i % 64);
                if seen.insert((p2.clone(), s2)) {
                    if seen.len() > BUDGET {
                        return None;
                    }
                    stack.push((i, state, i + 1));
                    placed = p2;
                    state = s2;
                    if required[i] {
                        left -= 1;
                    }
                    next = 0;
                    advanced = true;
                    break;
                }
            }
            i += 1;
        }
        if advanced {
            continue;
        }
        // Backtrack.
        let Some((i, before, resume)) = stack.pop() else { return Some(false) };
        placed[i / 64] &= !(1 << (i % 64));
        state = before;
        if required[i] {
            left += 1;
        }
        next = resume;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: u32, key: &str, f: F, call: u64, ret: Option<u64>) -> Op {
        Op { client, cluster: "c".into(), key: key.into(), f, call, ret, via: "t".into(), err: None, answered_by: None }
    }
    fn w(v: &str) -> F {
        F::Write(v.into())
    }
    fn r(v: Option<&str>) -> F {
        F::Read(v.map(str::to_string))
    }
    fn cas(e: Option<&str>, n: &str, ok: Option<bool>) -> F {
        F::Cas { expect: e.map(str::to_string), new: n.into(), ok }
    }
    fn finals(kv: &[(&str, Option<&str>)]) -> BTreeMap<(String, String), Option<String>> {
        kv.iter().map(|(k, v)| (("c".to_string(), k.to_string()), v.map(str::to_string))).collect()
    }
    fn once(k: &str) -> bool {
        k.starts_with("u/")
    }

    #[test]
    fn histories_that_pass() {
        // Sequential write then read; a concurrent read may see either value.
        let h = vec![
            op(1, "u/1", w("a"), 0, Some(10)),
            op(2, "u/1", r(Some("a")), 11, Some(12)),
            op(3, "u/2", w("b"), 0, Some(10)),
            op(4, "u/2", r(None), 5, Some(6)),
        ];
        let v = check(&h, &finals(&[("u/1", Some("a")), ("u/2", Some("b"))]), once);
        assert!(v.pass(), "{v:?}");
        assert_eq!(v.acked_writes, 2);
        // An unknown write may have happened...
        let h = vec![op(1, "u/3", w("x"), 0, None)];
        assert!(check(&h, &finals(&[("u/3", Some("x"))]), once).pass());
        // ...or not.
        assert!(check(&h, &finals(&[("u/3", None)]), once).pass());
        // Read-modify-write chain with a failed CAS and an unknown one that did happen.
        let h = vec![
            op(1, "r/1", r(None), 0, Some(1)),
            op(1, "r/1", cas(None, "a", Some(true)), 2, Some(3)),
            op(2, "r/1", cas(None, "b", Some(false)), 2, Some(4)),
            op(2, "r/1", r(Some("a")), 5, Some(6)),
            op(2, "r/1", cas(Some("a"), "c", None), 7, None),
            op(1, "r/1", r(Some("c")), 20, Some(21)),
        ];
        let v = check(&h, &finals(&[("r/1", Some("c"))]), once);
        assert!(v.pass(), "{v:?}");
        // Overlapping writes may take effect in either order.
        let h = vec![
            op(1, "r/2", w("a"), 0, Some(10)),
            op(2, "r/2", w("b"), 1, Some(9)),
            op(3, "r/2", r(Some("b")), 2, Some(3)),
            op(3, "r/2", r(Some("a")), 11, Some(12)),
        ];
        assert!(check(&h, &finals(&[("r/2", Some("a"))]), once).pass());
    }

    #[test]
    fn histories_that_must_fail() {
        // An acknowledged write missing afterwards: lost.
        let h = vec![op(1, "u/1", w("a"), 0, Some(10))];
        let v = check(&h, &finals(&[("u/1", None)]), once);
        assert_eq!(v.lost.len(), 1, "{v:?}");
        assert!(!v.pass());
        // A value never written.
        let h = vec![op(1, "u/1", w("a"), 0, Some(10))];
        let v = check(&h, &finals(&[("u/1", Some("zzz"))]), once);
        assert_eq!(v.phantom.len(), 1);
        assert!(!v.pass());
        // A stale read: the write returned before the read started, yet the read misses it.
        let h = vec![op(1, "u/2", w("a"), 0, Some(10)), op(2, "u/2", r(None), 11, Some(12))];
        let v = check(&h, &finals(&[("u/2", Some("a"))]), once);
        assert_eq!(v.not_linearizable.len(), 1, "{v:?}");
        // Reads going back in time: a then None after a was seen.
        let h = vec![
            op(1, "u/3", w("a"), 0, None),
            op(2, "u/3", r(Some("a")), 1, Some(2)),
            op(2, "u/3", r(None), 3, Some(4)),
        ];
        assert!(!check(&h, &BTreeMap::new(), once).pass());
        // Two CASes from the same value both succeeding.
        let h = vec![
            op(1, "r/1", cas(None, "a", Some(true)), 0, Some(5)),
            op(2, "r/1", cas(None, "b", Some(true)), 0, Some(5)),
        ];
        assert!(!check(&h, &BTreeMap::new(), once).pass());
        // A CAS reported failed although the value was the expected one all along.
        let h = vec![
            op(1, "r/2", w("a"), 0, Some(1)),
            op(2, "r/2", cas(Some("a"), "b", Some(false)), 2, Some(3)),
            op(3, "r/2", r(Some("a")), 4, Some(5)),
        ];
        assert!(!check(&h, &BTreeMap::new(), once).pass());
        // An acknowledged CAS overwritten by nothing, yet the final read shows the old value.
        let h = vec![op(1, "r/3", w("a"), 0, Some(1)), op(1, "r/3", cas(Some("a"), "b", Some(true)), 2, Some(3))];
        assert!(!check(&h, &finals(&[("r/3", Some("a"))]), once).pass());
    }

    #[test]
    fn long_contended_histories_finish() {
        // 3 clients, 300 overlapping CAS/read pairs on one key, some unknown.
        let mut h = vec![];
        let mut cur: Option<String> = None;
        let mut t = 0;
        for i in 0..300u64 {
            let c = (i % 3) as u32;
            let new = format!("v{i}");
            h.push(op(c, "r/x", r(cur.as_deref()), t, Some(t + 5)));
            let unknown = i % 17 == 0;
            h.push(op(
                c,
                "r/x",
                cas(cur.as_deref(), &new, if unknown { None } else { Some(true) }),
                t + 6,
                if unknown { None } else { Some(t + 12) },
            ));
            cur = Some(new);
            t += 10;
        }
        let v = check(&h, &finals(&[("r/x", cur.as_deref())]), once);
        assert!(v.pass(), "{v:?}");
    }
}
