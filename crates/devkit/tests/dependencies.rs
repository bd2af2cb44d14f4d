//! Rules for the workspace's dependency graph (`Cargo.lock`), which no linter here checks.

/// The package names in `Cargo.lock`.
fn locked_packages() -> Vec<String> {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).expect("Cargo.lock");
    let names: Vec<String> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .map(str::to_string)
        .collect();
    assert!(names.len() > 100, "parsed the lock file");
    names
}

/// One crypto provider: ring, which kube, etcd-client, rustls, rcgen and the process default
/// use. object_store's batteries-included `aws`/`azure`/`gcp` features would add aws-lc-rs (and
/// its C build) beside it; the operator takes their `*-base` features with `ring` instead.
#[test]
fn ring_is_the_only_crypto_provider() {
    let names = locked_packages();
    assert!(names.iter().any(|n| n == "ring"), "ring is locked");
    let other: Vec<&String> =
        names.iter().filter(|n| n.starts_with("aws-lc") || *n == "openssl-sys" || *n == "boring-sys").collect();
    assert!(other.is_empty(), "a second crypto provider is locked: {other:?} (see `cargo tree -i <name>`)");
}
