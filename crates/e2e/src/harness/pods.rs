//! Reading pods: conditions, and containers that will not start without help.

use serde_json::Value;

/// Whether the object's status has condition `type_` with status "True".
pub fn condition_true(obj: &Value, type_: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

/// Waiting reasons no amount of waiting fixes: the image is missing or the spec is wrong.
const HOPELESS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Why a container of the pod (init containers included) cannot start, or, with `crash_loop`,
/// keeps crashing (`CrashLoopBackOff`; leave it out where a crash loop is expected for a while,
/// as for static etcd members whose peers' names do not resolve yet):
/// `container <name>: <reason> <message>`.
pub fn stuck_container(pod: &Value, crash_loop: bool) -> Option<String> {
    let all = ["initContainerStatuses", "containerStatuses"];
    all.iter().flat_map(|k| pod["status"][k].as_array().cloned().unwrap_or_default()).find_map(|s| {
        let reason = s["state"]["waiting"]["reason"].as_str()?;
        (HOPELESS.contains(&reason) || (crash_loop && reason == "CrashLoopBackOff")).then(|| {
            format!(
                "container {}: {reason} {}",
                s["name"].as_str().unwrap_or("?"),
                s["state"]["waiting"]["message"].as_str().unwrap_or("")
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stuck_containers() {
        let pod = |key: &str, reason: &str| json!({"status": {key: [{"name": "c", "state": {"waiting": {"reason": reason, "message": "m"}}}]}});
        assert_eq!(
            stuck_container(&pod("initContainerStatuses", "ErrImageNeverPull"), false).as_deref(),
            Some("container c: ErrImageNeverPull m")
        );
        assert!(stuck_container(&pod("containerStatuses", "CrashLoopBackOff"), false).is_none());
        assert!(stuck_container(&pod("containerStatuses", "CrashLoopBackOff"), true).is_some());
        assert!(stuck_container(&pod("containerStatuses", "ContainerCreating"), true).is_none());
    }
}
