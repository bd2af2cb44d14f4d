//! The placement rule of ARCHITECTURE.md, enforced over the operator's imports (issue 26).
//!
//! Every `.rs` file under `crates/operator/src` is read; every `crate::…` path it names (in
//! `use` lines and inline, `super::` resolved, `etcd_operator::…` in the binary) is an edge
//! from the file's top-level module to the path's top-level module (a group folder such as
//! `install/` counts its children: `install::manifests`). Two rules:
//! - no import cycle between top-level modules;
//! - an edge runs only down the layers of [`LAYERS`] or inside one layer;
//! - a feature folder names no Kubernetes API client and no etcd client (`kube::Api`,
//!   `kube::Client`, `etcd_client`): its I/O lives in a layer, but for [`FEATURE_IO_LEFT`].
//!
//! Test code (`#[cfg(test)]` modules, files and items) is not read: a test may build its
//! fixtures with whatever the crate has (`validation::validate` in a feature's tests).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top first. A module may import modules of its own layer or of a lower one.
/// A module not in the table is an error (name it here when you add it).
const LAYERS: &[(&str, &[&str])] = &[
    ("binary: start-up and subcommands", &["main", "cli"]),
    ("install artefacts", &["install"]),
    ("runtime: the controllers and the process' plumbing", &["controller", "runtime", "backup_controllers"]),
    ("execute and observe: I/O around the pure layer", &["act", "observe", "etcd", "pod_spec", "pod_commands"]),
    (
        "decide: pure functions of the whole observation",
        &[
            "decide",
            "planner",
            "status",
            "marks",
            "network_policy",
            "disruption_budget",
            "fencing",
            "volume_size",
            "backup::backup_planner",
            "backup::restore_planner",
            "backup::series_owner",
        ],
    ),
    ("the observation and the desired state", &["observed", "validation", "progress"]),
    (
        "features: each one's data and pure functions over it",
        &["tls", "auth", "pod_security", "coreos", "etcd_flags", "nodes", "backup", "pod"],
    ),
    ("leaves: names and version facts", &["naming", "version", "failpoints", "lib"]),
];

#[path = "import_rules/parse.rs"]
mod parse;

use parse::{Edge, edges, io_uses};

/// Files of feature folders that still do I/O, until they move to a layer (ARCHITECTURE.md
/// names them). A file that no longer does must leave the list.
const FEATURE_IO_LEFT: &[&str] =
    &["auth/connect.rs", "tls/connector.rs", "backup/save.rs", "backup/fetch.rs", "backup/archiver.rs"];

/// The broken feature rule, one line each: `file:line: module names io`.
fn check_features(uses: &[Edge]) -> Vec<String> {
    let features = LAYERS.iter().position(|(_, ms)| ms.contains(&"tls")).expect("a feature layer");
    let in_features: Vec<&Edge> = uses.iter().filter(|e| layer_of(&e.from) == Some(features)).collect();
    let mut bad: Vec<String> = in_features
        .iter()
        .filter(|e| !FEATURE_IO_LEFT.contains(&e.file.as_str()))
        .map(|e| {
            format!(
                "{}:{}: {} names {}: a feature folder does no I/O; move it to observe/, act/, etcd/ or runtime/",
                e.file, e.line, e.from, e.to
            )
        })
        .collect();
    for left in FEATURE_IO_LEFT {
        if !in_features.iter().any(|e| e.file == *left) {
            bad.push(format!("{left} does no I/O any more: take it off FEATURE_IO_LEFT"));
        }
    }
    bad
}

fn layer_of(module: &str) -> Option<usize> {
    // `backup::identity` falls back to `backup` when it has no row of its own.
    let parent = module.split("::").next().unwrap_or(module);
    LAYERS
        .iter()
        .position(|(_, ms)| ms.contains(&module))
        .or_else(|| LAYERS.iter().position(|(_, ms)| ms.contains(&parent)))
}

/// The broken rules, one line each: `file:line: from -> to: rule`.
fn check(edges: &[Edge]) -> Vec<String> {
    let mut bad = vec![];
    for e in edges {
        match (layer_of(&e.from), layer_of(&e.to)) {
            (Some(f), Some(t)) if t < f => bad.push(format!(
                "{}:{}: {} -> {}: imports upward, from layer \"{}\" into layer \"{}\"",
                e.file, e.line, e.from, e.to, LAYERS[f].0, LAYERS[t].0
            )),
            (None, _) => bad.push(format!("{}:{}: module {} is in no layer of LAYERS", e.file, e.line, e.from)),
            (_, None) => bad.push(format!("{}:{}: module {} is in no layer of LAYERS", e.file, e.line, e.to)),
            _ => {}
        }
    }
    // Cycles: strongly connected components of the module graph (Tarjan's, small graph).
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    for comp in components(&graph) {
        if comp.len() < 2 {
            continue;
        }
        let inside: BTreeSet<&str> = comp.iter().copied().collect();
        let ties: Vec<String> = edges
            .iter()
            .filter(|e| inside.contains(e.from.as_str()) && inside.contains(e.to.as_str()))
            .map(|e| format!("  {}:{}: {} -> {}", e.file, e.line, e.from, e.to))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        bad.push(format!("import cycle between top-level modules {{{}}}:\n{}", comp.join(", "), ties.join("\n")));
    }
    bad
}

/// The strongly connected components of `graph`.
fn components<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    // Reachability closure is fine for a few dozen modules.
    let reach = |start: &'a str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        while let Some(n) = todo.pop() {
            for &m in &graph[n] {
                if seen.insert(m) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = graph.keys().map(|&n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = vec![];
    for &n in graph.keys() {
        if done.contains(n) {
            continue;
        }
        let mut comp = vec![n];
        for &m in graph.keys() {
            if m != n && reaches[n].contains(m) && reaches[m].contains(n) {
                comp.push(m);
            }
        }
        done.extend(comp.iter().copied());
        out.push(comp);
    }
    out
}

/// The group folders of the operator: folders that hold several top-level modules.
const GROUPS: &[&str] = &["install", "runtime", "pod", "backup"];

fn operator_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/src")
}

#[test]
fn operator_imports_follow_the_layers() {
    let edges = edges(&operator_src(), GROUPS);
    assert!(edges.len() > 100, "found the imports ({})", edges.len());
    if std::env::var_os("IMPORT_RULES_GRAPH").is_some() {
        let set: BTreeSet<(String, String)> = edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
        for (f, t) in set {
            eprintln!("{f} -> {t}");
        }
        for e in &edges {
            eprintln!("EDGE {} -> {} {}:{}", e.from, e.to, e.file, e.line);
        }
    }
    let bad = check(&edges);
    assert!(
        bad.is_empty(),
        "the placement rule of ARCHITECTURE.md is broken ({} times):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn feature_folders_do_no_io() {
    let uses = io_uses(&operator_src(), GROUPS);
    assert!(uses.iter().any(|e| e.from == "etcd" && e.to == "etcd_client"), "found the I/O names: {uses:?}");
    let bad = check_features(&uses);
    assert!(bad.is_empty(), "the placement rule of ARCHITECTURE.md is broken:\n{}", bad.join("\n"));
}

/// A feature file naming the Kubernetes API (in a `use` tree and inline) is found, with file
/// and line; test code and comments are not read.
#[test]
fn the_checker_finds_io_in_a_feature_folder() {
    let dir = std::env::temp_dir().join(format!("import-rules-io-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write("lib.rs", "pub mod tls;\npub mod observe;\n");
    write("observe/mod.rs", "use kube::{Api, ResourceExt};\n");
    write("tls/mod.rs", "// kube::Api in a comment\nuse kube::ResourceExt;\n#[cfg(test)]\nuse kube::Client;\n");
    write("tls/material.rs", "use kube::{ResourceExt, api::{Api, Patch}};\nfn f(c: &kube::Client) {}\n");
    let bad = check_features(&io_uses(&dir, GROUPS));
    std::fs::remove_dir_all(&dir).ok();
    let about = |file: &str| bad.iter().filter(|b| b.starts_with(file)).cloned().collect::<Vec<_>>();
    assert_eq!(about("tls/material.rs:").len(), 2, "{bad:?}");
    assert!(about("tls/material.rs:1: tls names kube::api::Api").len() == 1, "{bad:?}");
    assert!(about("tls/material.rs:2: tls names kube::Client").len() == 1, "{bad:?}");
    assert!(about("tls/mod.rs").is_empty() && about("observe").is_empty(), "{bad:?}");
}

/// A small tree: the checker finds an upward import, an inline path, a `super::` path and a
/// cycle, with file and line, and accepts the same tree once they are gone.
#[test]
fn the_checker_finds_upward_imports_and_cycles() {
    let dir = std::env::temp_dir().join(format!("import-rules-{}", std::process::id()));
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write("lib.rs", "pub mod naming;\npub mod planner;\npub mod observed;\npub mod controller;\n");
    write("naming.rs", "// use crate::planner; in a comment is no import\nconst S: &str = \"crate::planner::x\";\n");
    write("observed.rs", "use crate::naming;\n");
    write(
        "planner/mod.rs",
        "mod step;\n#[cfg(test)]\nmod tests;\nuse crate::{naming, observed::Observed};\n#[cfg(test)]\nuse crate::controller::x;\n",
    );
    write("planner/tests.rs", "use crate::controller::y;\n");
    write("planner/step.rs", "use super::super::naming::x;\n");
    write("controller/mod.rs", "fn f() { crate::planner::plan(); }\n");
    let clean = edges(&dir, GROUPS);
    assert!(check(&clean).is_empty(), "{:?}", check(&clean));
    assert!(clean.iter().any(|e| e.file == "planner/step.rs" && e.to == "naming"), "super:: resolved: {clean:?}");
    assert!(
        clean.iter().any(|e| e.file == "controller/mod.rs" && e.line == 1 && e.to == "planner"),
        "inline path: {clean:?}"
    );
    assert!(!clean.iter().any(|e| e.file == "naming.rs"), "comments and strings are no imports: {clean:?}");
    assert!(!clean.iter().any(|e| e.to == "controller"), "test code is not read: {clean:?}");

    // An upward import: a leaf naming the planner, and with it a cycle.
    write("naming.rs", "\n\npub fn f() { let _ = crate::planner::plan; }\n");
    let broken = check(&edges(&dir, GROUPS));
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        broken.iter().any(|b| b.starts_with("naming.rs:3: naming -> planner: imports upward")),
        "names file, line and rule: {broken:?}"
    );
    assert!(
        broken.iter().any(|b| b.starts_with("import cycle between top-level modules {naming, observed, planner}")),
        "{broken:?}"
    );
}
