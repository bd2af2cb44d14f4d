//! Reading the operator's sources into import edges between top-level modules: a small Rust
//! lexer (comments, strings and `#[cfg(test)]` items dropped), `use` trees expanded, inline
//! `crate::` paths, `super::` resolved.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One `crate::` path named by a file.
#[derive(Clone, Debug)]
pub struct Edge {
    pub file: String,
    pub line: usize,
    pub from: String,
    pub to: String,
}

/// `file` (relative to `src`) to its module path: `a/b.rs` → [a, b], `a/mod.rs` → [a],
/// `lib.rs` → [], `main.rs` → [main].
fn module_path(rel: &str) -> Vec<String> {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The top-level module a path names: its first segment, or the first two for a path into
/// a group folder (`install`, `runtime`, …) whose children are layered on their own.
fn top(segments: &[String], groups: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    let first = segments.first()?;
    if let (Some(children), Some(second)) = (groups.get(first), segments.get(1))
        && children.contains(second)
    {
        return Some(format!("{first}::{second}"));
    }
    Some(first.clone())
}

/// Source text with comments, strings and char literals blanked (newlines kept).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (c.get(i + 1) == Some(&'"') || c.get(i + 1) == Some(&'#'))
            && (i == 0 || !c[i - 1].is_alphanumeric() && c[i - 1] != '_')
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let rest: String = c[j + 1..].iter().collect();
            let end = rest.find(&close).map_or(c.len(), |k| j + 1 + rest[..k].chars().count() + close.len());
            for &ch in &c[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            let mut j = i + 1;
            if c[j] == '\\' {
                j += 2;
            }
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            for &ch in &c[i..=j.min(c.len() - 1)] {
                blank(&mut out, ch);
            }
            i = j + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Drops `#[cfg(test)]` items from the tokens (a test module, a test-only `use` or helper)
/// and returns the names of test-only module files declared here (`#[cfg(test)] mod tests;`).
fn without_tests(toks: Vec<(String, usize)>) -> (Vec<(String, usize)>, Vec<String>) {
    let attr = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = vec![];
    let mut test_files = vec![];
    let mut i = 0;
    while i < toks.len() {
        if i + attr.len() <= toks.len() && toks[i..i + attr.len()].iter().map(|t| t.0.as_str()).eq(attr) {
            i += attr.len();
            // Further attributes, then the item up to its `;` or its closing brace.
            let mut depth = 0i32;
            let mut item = vec![];
            while i < toks.len() {
                let t = toks[i].0.as_str();
                item.push(t.to_string());
                i += 1;
                match t {
                    "{" | "[" | "(" => depth += 1,
                    "}" | "]" | ")" => {
                        depth -= 1;
                        if depth == 0 && t == "}" {
                            break;
                        }
                    }
                    ";" if depth == 0 => break,
                    _ => {}
                }
            }
            if let Some(k) = item.iter().position(|t| t == "mod")
                && item.last().is_some_and(|t| t == ";")
            {
                test_files.push(item[k + 1].clone());
            }
        } else {
            out.push(toks[i].clone());
            i += 1;
        }
    }
    (out, test_files)
}

/// Tokens (identifiers, `::` and single punctuation) with their line numbers.
fn tokens(code: &str) -> Vec<(String, usize)> {
    let mut out = vec![];
    for (n, line) in code.lines().enumerate() {
        let c: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < c.len() {
            if c[i].is_alphanumeric() || c[i] == '_' {
                let s = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                out.push((c[s..i].iter().collect(), n + 1));
            } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
                out.push(("::".into(), n + 1));
                i += 2;
            } else if !c[i].is_whitespace() {
                out.push((c[i].to_string(), n + 1));
                i += 1;
            } else {
                i += 1;
            }
        }
    }
    out
}

/// Expands a `use` tree starting at `toks[*i]` into full paths (segments), prefixed.
fn use_tree(toks: &[(String, usize)], i: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, usize)>) {
    let mut path = prefix;
    while *i < toks.len() {
        let (t, line) = (&toks[*i].0, toks[*i].1);
        match t.as_str() {
            "{" => {
                *i += 1;
                while *i < toks.len() && toks[*i].0 != "}" {
                    use_tree(toks, i, path.clone(), out);
                    if *i < toks.len() && toks[*i].0 == "," {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "::" => *i += 1,
            "*" => {
                *i += 1;
                out.push((path, line));
                return;
            }
            "as" => {
                *i += 2;
                out.push((path, line));
                return;
            }
            "," | "}" | ";" => {
                out.push((path, line));
                return;
            }
            _ => {
                path.push(t.clone());
                *i += 1;
            }
        }
    }
}

/// Resolves `crate`, `super`, `self` and (in the binary) `etcd_operator` at the head of a
/// path to a path from the crate root; `None` for paths into other crates.
fn resolve(path: &[String], module: &[String], in_binary: bool) -> Option<Vec<String>> {
    let head = path.first()?.as_str();
    match head {
        "crate" => Some(path[1..].to_vec()),
        "etcd_operator" if in_binary => Some(path[1..].to_vec()),
        "super" | "self" => {
            let mut base = module.to_vec();
            let mut k = 0;
            while k < path.len() && (path[k] == "super" || path[k] == "self") {
                if path[k] == "super" {
                    base.pop()?;
                }
                k += 1;
            }
            base.extend_from_slice(&path[k..]);
            Some(base)
        }
        _ => None,
    }
}

/// Every `.rs` under `root` with its path relative to `root`.
fn sources(root: &Path) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("a readable directory").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
                out.push((rel, std::fs::read_to_string(&p).expect("a source file is text")));
            }
        }
    }
    out.sort();
    out
}

/// The edges between top-level modules of the crate under `root` (`src`), and the group
/// folders (a directory whose `mod.rs` only declares modules, listed in `groups`).
pub fn edges(root: &Path, group_names: &[&str]) -> Vec<Edge> {
    let files = sources(root);
    let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, _) in &files {
        let m = module_path(rel);
        if m.len() >= 2 && group_names.contains(&m[0].as_str()) {
            groups.entry(m[0].clone()).or_default().insert(m[1].clone());
        }
    }
    let binary_modules: BTreeSet<String> = files
        .iter()
        .filter(|(rel, _)| rel == "main.rs")
        .flat_map(|(_, text)| {
            tokens(&code_only(text)).windows(2).filter(|w| w[0].0 == "mod").map(|w| w[1].0.clone()).collect::<Vec<_>>()
        })
        .collect();
    // Test-only module files: `#[cfg(test)] mod x;` in a file declares its child `x`.
    let mut test_modules: BTreeSet<Vec<String>> = BTreeSet::new();
    for (rel, text) in &files {
        let (_, tests) = without_tests(tokens(&code_only(text)));
        let m = if rel == "main.rs" { vec![] } else { module_path(rel) };
        for t in tests {
            let mut child = m.clone();
            child.push(t);
            test_modules.insert(child);
        }
    }
    let mut out = vec![];
    for (rel, text) in &files {
        let mut module = module_path(rel);
        if (1..=module.len()).any(|k| test_modules.contains(&module[..k])) {
            continue;
        }
        let in_binary = rel == "main.rs" || module.first().is_some_and(|m| binary_modules.contains(m));
        if rel == "main.rs" {
            module = vec![];
        }
        let Some(from) =
            (if rel == "main.rs" { Some("main".to_string()) } else { top(&module, &groups).or(Some("lib".into())) })
        else {
            continue;
        };
        let (toks, _) = without_tests(tokens(&code_only(text)));
        let mut paths: Vec<(Vec<String>, usize)> = vec![];
        let mut i = 0;
        while i < toks.len() {
            if toks[i].0 == "use" {
                i += 1;
                let mut found = vec![];
                use_tree(&toks, &mut i, vec![], &mut found);
                paths.extend(found);
            } else if matches!(toks[i].0.as_str(), "crate" | "super" | "self" | "etcd_operator")
                && toks.get(i + 1).is_some_and(|t| t.0 == "::")
                && (i == 0 || toks[i - 1].0 != "::")
            {
                let line = toks[i].1;
                let mut p = vec![toks[i].0.clone()];
                i += 1;
                while i + 1 < toks.len()
                    && toks[i].0 == "::"
                    && toks[i + 1].0.chars().all(|c| c.is_alphanumeric() || c == '_')
                {
                    p.push(toks[i + 1].0.clone());
                    i += 2;
                }
                paths.push((p, line));
            } else {
                i += 1;
            }
        }
        for (p, line) in paths {
            let Some(full) = resolve(&p, &module, in_binary) else { continue };
            let to = top(&full, &groups);
            // A name defined in lib.rs itself (`crate::OPERATOR_NAME`) is the leaf `lib`.
            let to = match to {
                Some(t)
                    if t.chars().next().is_some_and(|c| c.is_uppercase())
                        || !files.iter().any(|(r, _)| {
                            module_path(r).first() == Some(&t.split("::").next().unwrap_or_default().to_string())
                        }) =>
                {
                    "lib".to_string()
                }
                Some(t) => t,
                None => continue,
            };
            if to != from {
                out.push(Edge { file: rel.clone(), line, from: from.clone(), to });
            }
        }
    }
    out
}

/// Whether a path (a `use` or an inline one) names a Kubernetes API client or etcd's client:
/// `kube::Api`, `kube::api::Api`, `kube::Client`, `kube::client::Client`, `etcd_client::…`.
fn names_io(p: &[String]) -> Option<String> {
    let s: Vec<&str> = p.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["etcd_client", ..] => Some("etcd_client".into()),
        ["kube", "Api" | "Client", ..] | ["kube", "api", "Api", ..] | ["kube", "client", "Client", ..] => {
            Some(s[..s.len().min(3)].join("::"))
        }
        _ => None,
    }
}

/// Every name of a Kubernetes API client or etcd's client (`names_io`) in the crate under
/// `root`, test code left out: `Edge::to` is the name, `Edge::from` the top-level module.
pub fn io_uses(root: &Path, group_names: &[&str]) -> Vec<Edge> {
    let files = sources(root);
    let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, _) in &files {
        let m = module_path(rel);
        if m.len() >= 2 && group_names.contains(&m[0].as_str()) {
            groups.entry(m[0].clone()).or_default().insert(m[1].clone());
        }
    }
    let mut test_modules: BTreeSet<Vec<String>> = BTreeSet::new();
    for (rel, text) in &files {
        let (_, tests) = without_tests(tokens(&code_only(text)));
        for t in tests {
            let mut child = module_path(rel);
            child.push(t);
            test_modules.insert(child);
        }
    }
    let mut out = vec![];
    for (rel, text) in &files {
        let module = module_path(rel);
        if rel == "main.rs" || (1..=module.len()).any(|k| test_modules.contains(&module[..k])) {
            continue;
        }
        let from = top(&module, &groups).unwrap_or_else(|| "lib".into());
        let (toks, _) = without_tests(tokens(&code_only(text)));
        let mut paths: Vec<(Vec<String>, usize)> = vec![];
        let mut i = 0;
        while i < toks.len() {
            if toks[i].0 == "use" {
                i += 1;
                use_tree(&toks, &mut i, vec![], &mut paths);
            } else if matches!(toks[i].0.as_str(), "kube" | "etcd_client") && (i == 0 || toks[i - 1].0 != "::") {
                let line = toks[i].1;
                let mut p = vec![toks[i].0.clone()];
                i += 1;
                while i + 1 < toks.len() && toks[i].0 == "::" {
                    p.push(toks[i + 1].0.clone());
                    i += 2;
                }
                paths.push((p, line));
            } else {
                i += 1;
            }
        }
        for (p, line) in paths {
            if let Some(to) = names_io(&p) {
                out.push(Edge { file: rel.clone(), line, from: from.clone(), to });
            }
        }
    }
    out
}
