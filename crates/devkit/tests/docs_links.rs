//! The documentation's links and the code paths it names: `README.md`, `ARCHITECTURE.md` and
//! the mdBook book under `docs/src/` (built by `hack/test.sh` with `hack/build-mdbook.sh`).
//! mdBook checks neither. Rules:
//! - a relative link `[text](path#anchor)` points at an existing file, and at a heading of it
//!   (ids as mdBook and GitHub make them); links inside the book stay inside the book (its
//!   HTML has no other files: name repository files as code, `crates/...`, instead);
//! - a path named as code (`crates/operator/src/tls/mod.rs`, `hack/test.sh`,
//!   `tests/auth.rs`, `rbac.rs`) exists in the repository;
//! - every page of the book is in `SUMMARY.md`; every record in `docs/src/results/` is named
//!   `<date>-<what>.md` and states commit, command, seed and verdict;
//! - `README.md` stays within 10 KB, `ARCHITECTURE.md` within 15 KB (issue 26).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

/// Every file of the repository (relative, `/`-separated), without build output and VCS data.
fn repo_files(root: &Path) -> BTreeSet<String> {
    let skip = ["target", ".git", "node_modules", "book"];
    let mut out = BTreeSet::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("a readable directory").flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if !skip.contains(&name.as_str()) {
                    dirs.push(p);
                }
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out
}

/// The documents checked: README.md, ARCHITECTURE.md and every `.md` under docs/src.
fn documents(files: &BTreeSet<String>) -> Vec<String> {
    let mut docs: Vec<String> = vec!["README.md".into(), "ARCHITECTURE.md".into()];
    docs.extend(files.iter().filter(|f| f.starts_with("docs/src/") && f.ends_with(".md")).cloned());
    docs
}

/// A document split into its prose (code spans blanked, fenced blocks dropped) and its code
/// (spans and fenced blocks), and its headings.
struct Parsed {
    prose: String,
    code: Vec<String>,
    headings: Vec<String>,
}

fn parse(text: &str) -> Parsed {
    let (mut prose, mut code, mut headings) = (String::new(), vec![], vec![]);
    let mut in_fence = false;
    let mut outside = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            code.push(line.to_string());
            continue;
        }
        if line.starts_with('#') {
            headings.push(line.trim_start_matches('#').trim().to_string());
        }
        outside.push_str(line);
        outside.push('\n');
    }
    let mut span: Option<String> = None;
    for ch in outside.chars() {
        match (&mut span, ch) {
            (None, '`') => span = Some(String::new()),
            (Some(s), '`') => {
                code.push(std::mem::take(s));
                span = None;
                prose.push(' ');
            }
            (Some(s), c) => s.push(if c == '\n' { ' ' } else { c }),
            (None, c) => prose.push(c),
        }
    }
    Parsed { prose, code, headings }
}

/// A heading's id, as mdBook (`normalize_id`) and GitHub make it.
fn heading_id(heading: &str) -> String {
    // A link in a heading counts by its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        let end = rest[i..].find(')').map(|j| i + j + 1).unwrap_or(rest.len());
        text.push_str(&rest[..i]);
        rest = &rest[end..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a document's headings, repeats numbered as mdBook and GitHub number them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for h in parse(text).headings {
        let id = heading_id(&h);
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` in prose.
fn link_targets(prose: &str) -> Vec<String> {
    prose
        .match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &prose[i + 2..];
            let end = rest.find(')')?;
            let target = rest[..end].trim();
            (!target.contains(char::is_whitespace)).then(|| target.to_string())
        })
        .collect()
}

/// `a/b/../c` → `a/c`; `None` when it climbs out of the repository.
fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = vec![];
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

fn link_errors(files: &BTreeSet<String>, doc: &str, text: &str) -> Vec<String> {
    let root = repo();
    let dir = doc.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let mut errors = vec![];
    for target in link_targets(&parse(text).prose) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let resolved = if path.is_empty() { Some(doc.to_string()) } else { normalize(&format!("{dir}/{path}")) };
        let Some(resolved) = resolved else {
            errors.push(format!("{doc}: ({target}) leaves the repository"));
            continue;
        };
        if doc.starts_with("docs/src/") && !resolved.starts_with("docs/src/") {
            errors.push(format!(
                "{doc}: ({target}) leaves the book, where its HTML has no such file: name the path as code instead"
            ));
            continue;
        }
        let is_dir = root.join(&resolved).is_dir();
        if !files.contains(&resolved) && !is_dir {
            errors.push(format!("{doc}: ({target}): no file {resolved}"));
            continue;
        }
        if !anchor.is_empty() {
            if !resolved.ends_with(".md") {
                errors.push(format!("{doc}: ({target}): an anchor into a file that is not Markdown"));
                continue;
            }
            let ids = anchors(&std::fs::read_to_string(root.join(&resolved)).expect("a readable page"));
            if !ids.contains(anchor) {
                errors.push(format!("{doc}: ({target}): {resolved} has no heading #{anchor} (it has: {ids:?})"));
            }
        }
    }
    errors
}

/// Where paths named as code begin: these are checked whatever their extension.
const ROOTS: [&str; 8] = ["crates/", "hack/", "examples/", "charts/", "bundle/", "docs/", ".ci/", "Dockerfile"];
/// A name with one of these extensions is a file of this repository, found by its tail
/// (`tests/auth.rs`, `rbac.rs`), unless it starts with a root (then it is the whole path).
const EXTENSIONS: [&str; 8] = [".rs", ".sh", ".md", ".yaml", ".yml", ".toml", ".mod", ".sum"];

fn code_path_errors(files: &BTreeSet<String>, doc: &str, text: &str) -> Vec<String> {
    let root = repo();
    let mut errors = vec![];
    for code in parse(text).code {
        let tokens = code.split(|c: char| !(c.is_ascii_alphanumeric() || "_.-/*<>{}$~".contains(c)));
        for token in tokens {
            let token = token.trim_end_matches(['.', ':']);
            if token.is_empty() || token.contains(['*', '<', '>', '{', '}', '$', '~']) || token.starts_with('/') {
                continue;
            }
            let rooted = ROOTS.iter().any(|r| token.starts_with(r));
            let named_file = EXTENSIONS.iter().any(|e| token.ends_with(e));
            if rooted {
                let path = token.trim_end_matches('/');
                if !files.contains(path) && !root.join(path).is_dir() {
                    errors.push(format!("{doc}: `{token}` does not exist"));
                }
            } else if named_file && token.contains(|c: char| c.is_ascii_alphabetic()) {
                let tail = format!("/{token}");
                if !files.iter().any(|f| f == token || f.ends_with(&tail)) {
                    errors.push(format!("{doc}: `{token}`: no such file in the repository"));
                }
            }
        }
    }
    errors
}

#[test]
fn links_point_at_existing_files_and_headings() {
    let files = repo_files(&repo());
    let mut errors = vec![];
    for doc in documents(&files) {
        let text = std::fs::read_to_string(repo().join(&doc)).expect("a readable document");
        errors.extend(link_errors(&files, &doc, &text));
    }
    assert!(errors.is_empty(), "broken links:\n{}", errors.join("\n"));
}

#[test]
fn code_paths_named_in_the_docs_exist() {
    let files = repo_files(&repo());
    let mut errors = vec![];
    for doc in documents(&files) {
        let text = std::fs::read_to_string(repo().join(&doc)).expect("a readable document");
        errors.extend(code_path_errors(&files, &doc, &text));
    }
    assert!(errors.is_empty(), "paths named in the docs that do not exist:\n{}", errors.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let files = repo_files(&repo());
    let summary = std::fs::read_to_string(repo().join("docs/src/SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let listed: BTreeSet<String> =
        link_targets(&parse(&summary).prose).into_iter().map(|t| format!("docs/src/{t}")).collect();
    let orphans: Vec<&String> = files
        .iter()
        .filter(|f| f.starts_with("docs/src/") && f.ends_with(".md") && *f != "docs/src/SUMMARY.md")
        .filter(|f| !listed.contains(*f))
        .collect();
    assert!(orphans.is_empty(), "pages the book does not show (add them to docs/src/SUMMARY.md): {orphans:?}");
}

#[test]
fn every_result_is_dated_and_states_commit_command_seed_and_verdict() {
    let files = repo_files(&repo());
    let mut errors = vec![];
    for f in files.iter().filter(|f| f.starts_with("docs/src/results/") && f.ends_with(".md")) {
        let name = f.trim_start_matches("docs/src/results/");
        if name == "index.md" {
            continue;
        }
        let dated = name.len() > 11
            && name[..10]
                .chars()
                .enumerate()
                .all(|(i, c)| if i == 4 || i == 7 { c == '-' } else { c.is_ascii_digit() })
            && name.as_bytes()[10] == b'-';
        if !dated {
            errors.push(format!("{f}: not named <YYYY-MM-DD>-<what>.md"));
        }
        let text = std::fs::read_to_string(repo().join(f)).expect("a readable record");
        for field in ["commit", "command", "seed", "verdict"] {
            if !text.lines().any(|l| l.starts_with(&format!("| {field} |"))) {
                errors.push(format!("{f}: no `| {field} |` row (write \"not recorded\" if it is not known)"));
            }
        }
        if !std::fs::read_to_string(repo().join("docs/src/results/index.md")).unwrap_or_default().contains(name) {
            errors.push(format!("{f}: not listed in docs/src/results/index.md"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn readme_and_architecture_stay_short() {
    for (file, limit) in [("README.md", 10 * 1024), ("ARCHITECTURE.md", 15 * 1024)] {
        let len = std::fs::metadata(repo().join(file)).expect(file).len();
        assert!(len <= limit, "{file} is {len} bytes, over {limit}: move the detail to a page of docs/src/");
    }
}

#[test]
fn heading_ids_follow_mdbook() {
    assert_eq!(
        heading_id("Space: quota, compaction, defragmentation, alarms"),
        "space-quota-compaction-defragmentation-alarms"
    );
    assert_eq!(heading_id("The operator's metrics"), "the-operators-metrics");
    assert_eq!(
        heading_id("Pod security: members pass `restricted` by default"),
        "pod-security-members-pass-restricted-by-default"
    );
    assert_eq!(heading_id("Turning [TLS](x.md) on"), "turning-tls-on");
    let ids = anchors("# A\n## B\n```\n# not a heading\n```\n## B\n");
    assert_eq!(ids, ["a", "b", "b-1"].into_iter().map(String::from).collect());
}

#[test]
fn the_checks_find_what_is_broken() {
    let files: BTreeSet<String> = ["docs/src/a.md", "docs/src/b.md", "crates/x/src/lib.rs"].map(String::from).into();
    let page = "See [b](b.md), [gone](c.md), [out](../../README.md) and `crates/x/src/lib.rs`, `crates/x/src/gone.rs`, `lib.rs`, `nothing.rs`.\n```sh\nhack/none.sh\n```\n";
    let links = link_errors(&files, "docs/src/a.md", page);
    assert_eq!(links.len(), 2, "{links:?}");
    assert!(links[0].contains("no file docs/src/c.md") && links[1].contains("leaves the book"), "{links:?}");
    // Anchors are read from the repository's own pages.
    let real = repo_files(&repo());
    let anchored = link_errors(
        &real,
        "README.md",
        "[ok](docs/src/operations.md#when-things-fail) [no](docs/src/operations.md#nope)",
    );
    assert_eq!(anchored.len(), 1, "{anchored:?}");
    assert!(anchored[0].contains("has no heading #nope"), "{anchored:?}");
    let paths = code_path_errors(&files, "docs/src/a.md", page);
    assert_eq!(paths.len(), 3, "{paths:?}");
    assert!(paths.iter().any(|e| e.contains("gone.rs")) && paths.iter().any(|e| e.contains("nothing.rs")));
    assert!(paths.iter().any(|e| e.contains("hack/none.sh")), "{paths:?}");
}
