//! (tests) The Pod Security Standard `restricted` (its `latest` version, which includes
//! `baseline`), as a pure check of a pod spec: what Pod Security Admission would refuse, from
//! <https://kubernetes.io/docs/concepts/security/pod-security-standards/>. The builders' tests run
//! every pod the operator makes through it; the e2e tests show real admission agrees.

use k8s_openapi::api::core::v1::{Container, PodSpec, SELinuxOptions, SeccompProfile, SecurityContext};

/// Capabilities `baseline` lets a container add; `restricted` only `NET_BIND_SERVICE`.
const RESTRICTED_ADD: &[&str] = &["NET_BIND_SERVICE"];
/// Volume types `restricted` allows.
const VOLUME_TYPES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
/// Sysctls `baseline` allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SELINUX_TYPES: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

/// An SELinux setting `baseline` refuses: another type than the container ones, a user or role.
fn selinux_refused(se: &SELinuxOptions) -> bool {
    !SELINUX_TYPES.contains(&se.type_.as_deref().unwrap_or_default()) || se.user.is_some() || se.role.is_some()
}

fn seccomp_ok(p: &SeccompProfile) -> bool {
    p.type_ == "RuntimeDefault" || p.type_ == "Localhost"
}

/// Every rule the pod breaks, named after the standard's controls; empty: admitted.
pub fn violations(spec: &PodSpec) -> Vec<String> {
    let mut v = Vec::new();
    let pod = spec.security_context.clone().unwrap_or_default();
    // baseline: host namespaces, hostPath, sysctls, pod-level SELinux and seccomp.
    for (field, on) in [("hostNetwork", spec.host_network), ("hostPID", spec.host_pid), ("hostIPC", spec.host_ipc)] {
        if on == Some(true) {
            v.push(format!("Host Namespaces: {field}"));
        }
    }
    if pod.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
        v.push("HostProcess: pod".into());
    }
    for s in pod.sysctls.iter().flatten() {
        if !SAFE_SYSCTLS.contains(&s.name.as_str()) {
            v.push(format!("Sysctls: {}", s.name));
        }
    }
    if pod.se_linux_options.as_ref().is_some_and(selinux_refused) {
        v.push("SELinux: pod".into());
    }
    // restricted: volume types (hostPath is also baseline's).
    for vol in spec.volumes.iter().flatten() {
        let json = serde_json::to_value(vol).unwrap_or_default();
        for kind in json.as_object().into_iter().flat_map(|o| o.keys()).filter(|k| *k != "name") {
            if !VOLUME_TYPES.contains(&kind.as_str()) {
                v.push(format!("Volume Types: volume {} is {kind}", vol.name));
            }
        }
    }
    // restricted: runAsNonRoot, runAsUser != 0 and seccomp, at pod level or in every container.
    if pod.run_as_user == Some(0) {
        v.push("Running as Non-root user: pod runAsUser 0".into());
    }
    let pod_non_root = pod.run_as_non_root == Some(true);
    let pod_seccomp = pod.seccomp_profile.as_ref().map(seccomp_ok);
    if pod_seccomp == Some(false) {
        v.push(format!("Seccomp: pod profile {}", pod.seccomp_profile.as_ref().unwrap().type_));
    }
    let containers = spec.init_containers.iter().flatten().chain(spec.containers.iter());
    for c in containers {
        container_violations(c, pod_non_root, pod_seccomp == Some(true), &mut v);
    }
    v
}

fn container_violations(c: &Container, pod_non_root: bool, pod_seccomp: bool, v: &mut Vec<String>) {
    let name = &c.name;
    let sc: SecurityContext = c.security_context.clone().unwrap_or_default();
    if sc.privileged == Some(true) {
        v.push(format!("Privileged Containers: {name}"));
    }
    if sc.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
        v.push(format!("HostProcess: {name}"));
    }
    for p in c.ports.iter().flatten() {
        if p.host_port.is_some_and(|h| h != 0) {
            v.push(format!("Host Ports: {name}"));
        }
    }
    if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
        v.push(format!("/proc Mount Type: {name}"));
    }
    if sc.se_linux_options.as_ref().is_some_and(selinux_refused) {
        v.push(format!("SELinux: {name}"));
    }
    if sc.app_armor_profile.as_ref().is_some_and(|a| a.type_ != "RuntimeDefault" && a.type_ != "Localhost") {
        v.push(format!("AppArmor: {name}"));
    }
    if sc.allow_privilege_escalation != Some(false) {
        v.push(format!("Privilege Escalation: {name} must set allowPrivilegeEscalation=false"));
    }
    match sc.run_as_non_root {
        Some(false) => v.push(format!("Running as Non-root: {name} sets runAsNonRoot=false")),
        None if !pod_non_root => v.push(format!("Running as Non-root: {name} (and the pod) leave runAsNonRoot unset")),
        _ => {}
    }
    if sc.run_as_user == Some(0) {
        v.push(format!("Running as Non-root user: {name} runAsUser 0"));
    }
    match sc.seccomp_profile.as_ref().map(seccomp_ok) {
        Some(false) => v.push(format!("Seccomp: {name} profile {}", sc.seccomp_profile.as_ref().unwrap().type_)),
        None if !pod_seccomp => v.push(format!("Seccomp: {name} (and the pod) set no RuntimeDefault/Localhost")),
        _ => {}
    }
    let caps = sc.capabilities.clone().unwrap_or_default();
    if !caps.drop.iter().flatten().any(|c| c == "ALL") {
        v.push(format!("Capabilities: {name} must drop ALL"));
    }
    for add in caps.add.iter().flatten() {
        if !RESTRICTED_ADD.contains(&add.as_str()) {
            v.push(format!("Capabilities: {name} adds {add}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Capabilities, HostPathVolumeSource, PodSecurityContext, Volume};

    fn good() -> PodSpec {
        PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "c".into(),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The checker itself: each control, broken once, is named.
    #[test]
    fn each_control_broken_once_is_named() {
        assert_eq!(violations(&good()), Vec::<String>::new());
        type Breaks = Box<dyn Fn(&mut PodSpec)>;
        let broken: Vec<(&str, Breaks)> = vec![
            ("Host Namespaces", Box::new(|s| s.host_network = Some(true))),
            (
                "Volume Types",
                Box::new(|s| {
                    s.volumes = Some(vec![Volume {
                        name: "h".into(),
                        host_path: Some(HostPathVolumeSource { path: "/".into(), type_: None }),
                        ..Default::default()
                    }])
                }),
            ),
            ("Running as Non-root user", Box::new(|s| s.security_context.as_mut().unwrap().run_as_user = Some(0))),
            ("Running as Non-root:", Box::new(|s| s.security_context.as_mut().unwrap().run_as_non_root = None)),
            ("Seccomp", Box::new(|s| s.security_context.as_mut().unwrap().seccomp_profile = None)),
            (
                "Privilege Escalation",
                Box::new(|s| s.containers[0].security_context.as_mut().unwrap().allow_privilege_escalation = None),
            ),
            ("Capabilities", Box::new(|s| s.containers[0].security_context.as_mut().unwrap().capabilities = None)),
            (
                "Capabilities",
                Box::new(|s| {
                    s.containers[0].security_context.as_mut().unwrap().capabilities.as_mut().unwrap().add =
                        Some(vec!["NET_ADMIN".into()])
                }),
            ),
            ("Privileged", Box::new(|s| s.containers[0].security_context.as_mut().unwrap().privileged = Some(true))),
            (
                "Running as Non-root:",
                Box::new(|s| {
                    let mut init = s.containers[0].clone();
                    init.security_context.as_mut().unwrap().run_as_non_root = Some(false);
                    s.init_containers = Some(vec![init]);
                }),
            ),
        ];
        for (control, breaks) in broken {
            let mut s = good();
            breaks(&mut s);
            let v = violations(&s);
            assert!(v.iter().any(|x| x.starts_with(control)), "{control}: {v:?}");
        }
    }
}
