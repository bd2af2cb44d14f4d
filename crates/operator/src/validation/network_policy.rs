//! `spec.networkPolicy`: on unless `enabled: false`; `clients` (unset: the default the cluster's
//! `network-policy-default` mark says, `network_policy::DefaultClients`) checked the way the API server
//! checks NetworkPolicy peers (so the operator's apply cannot be refused later) and normalised
//! (empty selector parts dropped, so the object read back equals the one applied). Pure.

use etcd_operator_api::cluster::NetworkAccessPolicy;
use etcd_operator_api::validation_rules::MAX_NETWORK_CLIENTS;
use k8s_openapi::api::networking::v1::{IPBlock, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::pod_policy::{check_label_value, check_qualified_name};

/// A validated `spec.networkPolicy` that is on.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkAccess {
    /// Who may reach the client port besides members, operator and backup pods; `None`: unset,
    /// the default the cluster's mark says (`network_policy::DefaultClients`).
    pub clients: Option<Vec<NetworkPolicyPeer>>,
}

/// The default `clients` of a cluster made with the policy: every pod of the cluster's namespace.
pub fn same_namespace() -> Vec<NetworkPolicyPeer> {
    vec![NetworkPolicyPeer { pod_selector: Some(LabelSelector::default()), ..Default::default() }]
}

/// `None` when the user turned the policy off.
pub(super) fn network_access(np: Option<&NetworkAccessPolicy>, errs: &mut Vec<String>) -> Option<NetworkAccess> {
    let np = np.cloned().unwrap_or_default();
    let clients = np.clients.map(|list| {
        if list.len() as i64 > MAX_NETWORK_CLIENTS {
            errs.push(format!(
                "spec.networkPolicy.clients has {} entries; at most {MAX_NETWORK_CLIENTS} are allowed",
                list.len()
            ));
        }
        list.into_iter().enumerate().map(|(i, p)| peer(p, &format!("spec.networkPolicy.clients[{i}]"), errs)).collect()
    });
    if np.enabled == Some(false) { None } else { Some(NetworkAccess { clients }) }
}

fn peer(mut p: NetworkPolicyPeer, at: &str, errs: &mut Vec<String>) -> NetworkPolicyPeer {
    match (&p.ip_block, &p.pod_selector, &p.namespace_selector) {
        (Some(_), None, None) | (None, Some(_), _) | (None, None, Some(_)) => {}
        (Some(_), _, _) => {
            errs.push(format!("{at}: an ipBlock cannot be combined with a podSelector or namespaceSelector"))
        }
        (None, None, None) => {
            errs.push(format!("{at} is empty: give a podSelector, a namespaceSelector, both, or an ipBlock"))
        }
    }
    p.pod_selector = p.pod_selector.map(|s| selector(s, &format!("{at}.podSelector"), errs));
    p.namespace_selector = p.namespace_selector.map(|s| selector(s, &format!("{at}.namespaceSelector"), errs));
    if let Some(b) = p.ip_block.as_mut() {
        ip_block(b, &format!("{at}.ipBlock"), errs);
    }
    p
}

fn selector(mut s: LabelSelector, at: &str, errs: &mut Vec<String>) -> LabelSelector {
    for (k, v) in s.match_labels.iter().flatten() {
        if let Err(why) = check_qualified_name(k).and_then(|_| check_label_value(v)) {
            errs.push(format!("{at}.matchLabels: {k:?}: {why}"));
        }
    }
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let at = format!("{at}.matchExpressions[{i}]");
        if let Err(why) = check_qualified_name(&e.key) {
            errs.push(format!("{at}.key {:?}: {why}", e.key));
        }
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(format!("{at}: operator {} needs values", e.operator)),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                errs.push(format!("{at}: operator {} takes no values", e.operator))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(format!("{at}: operator {other:?} is not one of In, NotIn, Exists, DoesNotExist")),
        }
        for v in values {
            if let Err(why) = check_label_value(v) {
                errs.push(format!("{at}.values: {why}"));
            }
        }
    }
    // The API server stores an empty map or list as absent: drop them so that the policy read
    // back compares equal to the one applied.
    if s.match_labels.as_ref().is_some_and(|m| m.is_empty()) {
        s.match_labels = None;
    }
    if s.match_expressions.as_ref().is_some_and(|m| m.is_empty()) {
        s.match_expressions = None;
    }
    for e in s.match_expressions.iter_mut().flatten() {
        if e.values.as_ref().is_some_and(|v| v.is_empty()) {
            e.values = None;
        }
    }
    s
}

/// A CIDR as (address bits as u128, an IPv4 address in the top 32; prefix length; IPv4?).
fn cidr(s: &str) -> Option<(u128, u32, bool)> {
    let (addr, len) = s.split_once('/')?;
    let len: u32 = len.parse().ok()?;
    match addr.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(a) if len <= 32 => Some((u128::from(u32::from(a)) << 96, len, true)),
        std::net::IpAddr::V6(a) if len <= 128 => Some((u128::from(a), len, false)),
        _ => None,
    }
}

fn network_of(bits: u128, len: u32) -> u128 {
    if len == 0 { 0 } else { bits & (u128::MAX << (128 - len)) }
}

fn ip_block(b: &mut IPBlock, at: &str, errs: &mut Vec<String>) {
    let Some((net, len, v4)) = cidr(&b.cidr) else {
        errs.push(format!("{at}.cidr {:?} is not a CIDR such as 10.0.0.0/8 or fd00::/64", b.cidr));
        return;
    };
    for e in b.except.iter().flatten() {
        match cidr(e) {
            Some((ebits, elen, ev4)) if ev4 == v4 => {
                if elen <= len || network_of(ebits, len) != network_of(net, len) {
                    errs.push(format!("{at}.except {e:?} must lie strictly inside cidr {:?}", b.cidr));
                }
            }
            _ => errs.push(format!("{at}.except {e:?} is not a CIDR of the same family as {:?}", b.cidr)),
        }
    }
    if b.except.as_ref().is_some_and(|e| e.is_empty()) {
        b.except = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use std::collections::BTreeMap;

    fn check(np: NetworkAccessPolicy) -> (Option<NetworkAccess>, Vec<String>) {
        let mut errs = vec![];
        let a = network_access(Some(&np), &mut errs);
        (a, errs)
    }

    fn pods(labels: &[(&str, &str)]) -> NetworkPolicyPeer {
        let m: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        NetworkPolicyPeer {
            pod_selector: Some(LabelSelector { match_labels: Some(m), ..Default::default() }),
            ..Default::default()
        }
    }

    fn block(cidr: &str, except: &[&str]) -> NetworkPolicyPeer {
        NetworkPolicyPeer {
            ip_block: Some(IPBlock { cidr: cidr.into(), except: Some(except.iter().map(|s| s.to_string()).collect()) }),
            ..Default::default()
        }
    }

    proptest::proptest! {
        /// Any CIDR text (prefix lengths 0 to 255, both families) is checked without a panic.
        #[test]
        fn cidr_checks_never_panic(a in "[0-9a-f:.]{0,20}", la in 0u32..256, b in "[0-9a-f:.]{0,20}", lb in 0u32..256) {
            let mut errs = vec![];
            let mut ip = IPBlock { cidr: format!("{a}/{la}"), except: Some(vec![format!("{b}/{lb}"), format!("{a}/{lb}")]) };
            ip_block(&mut ip, "x", &mut errs);
        }
    }

    #[test]
    fn ip_blocks_of_both_families_and_edge_lengths() {
        for (cidr, except, ok) in [
            ("0.0.0.0/0", "10.0.0.0/8", true),
            ("10.0.0.0/8", "10.255.255.255/32", true),
            ("::/0", "fd00::/8", true),
            ("fd00::/8", "fd00::1/128", true),
            ("fd00::/8", "fe00::/16", false),
            ("10.0.0.0/32", "10.0.0.0/32", false),
        ] {
            let mut errs = vec![];
            ip_block(&mut IPBlock { cidr: cidr.into(), except: Some(vec![except.into()]) }, "x", &mut errs);
            assert_eq!(errs.is_empty(), ok, "{cidr} except {except}: {errs:?}");
        }
    }

    #[test]
    fn on_by_default_with_the_marks_clients_and_off_only_when_asked() {
        let mut errs = vec![];
        assert_eq!(network_access(None, &mut errs), Some(NetworkAccess { clients: None }), "unset: the mark's default");
        let (a, errs) = check(NetworkAccessPolicy { enabled: Some(true), ..Default::default() });
        assert_eq!(a.unwrap().clients, None);
        assert!(errs.is_empty());
        let (a, _) = check(NetworkAccessPolicy { enabled: Some(false), ..Default::default() });
        assert_eq!(a, None);
        let (a, errs) = check(NetworkAccessPolicy { clients: Some(vec![]), ..Default::default() });
        assert_eq!(a.unwrap().clients, Some(vec![]), "[]: nobody besides members, operator and backups");
        assert!(errs.is_empty());
    }

    #[test]
    fn accepts_what_the_api_server_accepts_and_normalises_empty_parts() {
        let ns_and_pods = NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("kubernetes.io/metadata.name".into(), "monitoring".into())])),
                match_expressions: Some(vec![]),
            }),
            pod_selector: Some(LabelSelector { match_labels: Some(BTreeMap::new()), ..Default::default() }),
            ..Default::default()
        };
        let (a, errs) = check(NetworkAccessPolicy {
            clients: Some(vec![
                pods(&[("app", "api")]),
                ns_and_pods,
                block("10.0.0.0/8", &[]),
                block("fd00::/64", &["fd00::/96"]),
            ]),
            ..Default::default()
        });
        assert!(errs.is_empty(), "{errs:?}");
        let c = a.unwrap().clients.unwrap();
        assert_eq!(c[1].pod_selector, Some(LabelSelector::default()), "empty matchLabels dropped");
        assert_eq!(c[1].namespace_selector.as_ref().unwrap().match_expressions, None);
        assert_eq!(c[2].ip_block.as_ref().unwrap().except, None, "empty except dropped");
    }

    #[test]
    fn refuses_peers_the_api_server_would_refuse_naming_the_entry() {
        let bad_expr = NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_expressions: Some(vec![
                    LabelSelectorRequirement { key: "tier".into(), operator: "In".into(), values: None },
                    LabelSelectorRequirement {
                        key: "tier".into(),
                        operator: "Exists".into(),
                        values: Some(vec!["x".into()]),
                    },
                    LabelSelectorRequirement { key: "tier".into(), operator: "Equals".into(), values: None },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mixed = NetworkPolicyPeer { pod_selector: Some(LabelSelector::default()), ..block("10.0.0.0/8", &[]) };
        let cases: Vec<(NetworkPolicyPeer, &[&str])> = vec![
            (NetworkPolicyPeer::default(), &["clients[0] is empty"]),
            (mixed, &["clients[0]: an ipBlock cannot be combined"]),
            (pods(&[("bad key!", "x")]), &["clients[0].podSelector.matchLabels: \"bad key!\""]),
            (pods(&[("app", "-x")]), &["clients[0].podSelector.matchLabels: \"app\""]),
            (
                bad_expr,
                &[
                    "matchExpressions[0]: operator In needs values",
                    "matchExpressions[1]: operator Exists takes no values",
                    "matchExpressions[2]: operator \"Equals\"",
                ],
            ),
            (block("10.0.0.0", &[]), &["ipBlock.cidr \"10.0.0.0\" is not a CIDR"]),
            (block("10.0.0.0/33", &[]), &["is not a CIDR"]),
            (block("10.0.0.0/8", &["11.0.0.0/16"]), &["must lie strictly inside"]),
            (block("10.0.0.0/8", &["10.0.0.0/8"]), &["must lie strictly inside"]),
            (block("10.0.0.0/8", &["fd00::/64"]), &["same family"]),
        ];
        for (p, wants) in cases {
            let (_, errs) = check(NetworkAccessPolicy { clients: Some(vec![p.clone()]), ..Default::default() });
            for want in wants {
                assert!(errs.iter().any(|e| e.contains(want)), "{p:?}: want {want:?} in {errs:?}");
            }
        }
        let many = vec![pods(&[]); MAX_NETWORK_CLIENTS as usize + 1];
        let (_, errs) = check(NetworkAccessPolicy { clients: Some(many), ..Default::default() });
        assert!(errs.iter().any(|e| e.contains("at most 32")), "{errs:?}");
    }
}
