//! Manifests the tests and the bench apply: EtcdClusters, one-shot pods, etcd without the
//! operator (a single member, or a static cluster as a user would write it by hand), Services.
//! Built as YAML text; lists are JSON flow sequences (valid YAML), so any string is quoted right.

use serde_json::Value;

use crate::CLUSTER_DOMAIN;

/// An EtcdCluster; `extra_spec` is more YAML under `spec:` (lines indented by two spaces) or "".
pub fn cluster_manifest(ns: &str, name: &str, size: usize, version: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: {size}\n  version: \"{version}\"\n{extra_spec}"
    )
}

fn yaml_list<S: AsRef<str>>(items: &[S]) -> String {
    // JSON strings are valid YAML flow scalars.
    let quoted: Vec<String> = items.iter().map(|s| Value::from(s.as_ref()).to_string()).collect();
    format!("[{}]", quoted.join(", "))
}

/// A pod that runs `cmd` once (restartPolicy Never) from a local image.
pub fn one_shot_pod(namespace: &str, name: &str, image: &str, cmd: &[&str]) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{ name: {name}, namespace: {namespace} }}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    imagePullPolicy: IfNotPresent
    command: {cmd}
"#,
        cmd = yaml_list(cmd)
    )
}

/// A headless Service `service` (publishing not-ready addresses, as etcd peers need) selecting
/// `app: <service>`.
pub fn headless_service(namespace: &str, service: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{ name: {service}, namespace: {namespace} }}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{ app: {service} }}
  ports:
  - {{ name: client, port: 2379 }}
  - {{ name: peer, port: 2380 }}
"#
    )
}

/// A ClusterIP Service `name` on port 2379 in front of the pods with `app: <app>`.
pub fn cluster_ip_service(namespace: &str, name: &str, app: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{ name: {name}, namespace: {namespace} }}
spec:
  selector: {{ app: {app} }}
  ports:
  - {{ name: client, port: 2379, targetPort: 2379 }}
"#
    )
}

/// A single-member etcd pod `name` with hostname `name` under the headless Service `service`
/// (label `app: <service>`), its data in `data_volume` (a YAML volume source such as
/// `emptyDir: {}` or `persistentVolumeClaim: { claimName: data }`).
pub fn etcd_pod(namespace: &str, name: &str, service: &str, image: &str, data_volume: &str) -> String {
    let peer = format!("http://{name}.{service}.{namespace}.svc.{CLUSTER_DOMAIN}:2380");
    let client = format!("http://{name}.{service}.{namespace}.svc.{CLUSTER_DOMAIN}:2379");
    let cmd = [
        "/usr/local/bin/etcd".to_string(),
        format!("--name={name}"),
        "--data-dir=/var/lib/etcd/data".to_string(),
        "--listen-client-urls=http://0.0.0.0:2379".to_string(),
        format!("--advertise-client-urls={client}"),
        "--listen-peer-urls=http://0.0.0.0:2380".to_string(),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={name}={peer}"),
    ];
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{ app: {service} }}
spec:
  hostname: {name}
  subdomain: {service}
  terminationGracePeriodSeconds: 1
  containers:
  - name: etcd
    image: {image}
    imagePullPolicy: IfNotPresent
    command: {cmd}
    ports:
    - {{ name: client, containerPort: 2379 }}
    - {{ name: peer, containerPort: 2380 }}
    readinessProbe:
      httpGet: {{ path: /health, port: 2379 }}
      periodSeconds: 1
      failureThreshold: 3
    volumeMounts:
    - {{ name: data, mountPath: /var/lib/etcd }}
  volumes:
  - name: data
    {data_volume}
"#,
        cmd = yaml_list(&cmd)
    )
}

/// What a user would write by hand for a 3-member etcd without an operator: a headless Service
/// that publishes not-ready addresses and `size` pods with a static `--initial-cluster`, data in
/// emptyDir, the same readiness probe as the operator's members. No DNS wait: etcd exits when
/// its peers' names do not resolve yet and the kubelet restarts it, which is part of the time.
pub fn static_cluster_manifest(ns: &str, service: &str, size: usize, image: &str) -> String {
    let host = |i: usize| format!("{service}-{i}.{service}.{ns}.svc.{CLUSTER_DOMAIN}");
    let initial: Vec<String> = (0..size).map(|i| format!("{service}-{i}=http://{}:2380", host(i))).collect();
    let mut out = headless_service(ns, service);
    for i in 0..size {
        let name = format!("{service}-{i}");
        let cmd = vec![
            "/usr/local/bin/etcd".to_string(),
            format!("--name={name}"),
            "--data-dir=/var/lib/etcd/data".to_string(),
            "--listen-client-urls=http://0.0.0.0:2379".to_string(),
            format!("--advertise-client-urls=http://{}:2379", host(i)),
            "--listen-peer-urls=http://0.0.0.0:2380".to_string(),
            format!("--initial-advertise-peer-urls=http://{}:2380", host(i)),
            format!("--initial-cluster={}", initial.join(",")),
            "--initial-cluster-state=new".to_string(),
            format!("--initial-cluster-token={ns}"),
        ];
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{ app: {service} }}
spec:
  hostname: {name}
  subdomain: {service}
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: etcd
    image: {image}
    imagePullPolicy: IfNotPresent
    command: {cmd}
    ports:
    - {{ name: client, containerPort: 2379 }}
    - {{ name: peer, containerPort: 2380 }}
    readinessProbe:
      httpGet: {{ path: /health, port: 2379 }}
      periodSeconds: 5
      timeoutSeconds: 5
      failureThreshold: 3
    volumeMounts:
    - {{ name: data, mountPath: /var/lib/etcd }}
  volumes:
  - name: data
    emptyDir: {{}}
"#,
            cmd = yaml_list(&cmd)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ETCD_IMAGE_3_5_1;

    #[test]
    fn manifests_are_valid_json_lists_in_yaml() {
        let pod = one_shot_pod("ns", "p", ETCD_IMAGE_3_5_1, &["/usr/local/bin/etcdctl", "get", "a \"b\""]);
        assert!(pod.contains(r#"command: ["/usr/local/bin/etcdctl", "get", "a \"b\""]"#), "{pod}");
        let etcd = etcd_pod("ns", "etcd-0", "etcd", ETCD_IMAGE_3_5_1, "emptyDir: {}");
        assert!(etcd.contains("--initial-cluster=etcd-0=http://etcd-0.etcd.ns.svc.cluster.local:2380"), "{etcd}");
        let static3 = static_cluster_manifest("ns", "static", 3, ETCD_IMAGE_3_5_1);
        assert_eq!(static3.matches("\nkind: Pod\n").count(), 3, "{static3}");
        assert!(static3.contains("static-2=http://static-2.static.ns.svc.cluster.local:2380\""), "{static3}");
    }

    #[test]
    fn cluster_manifest_takes_extra_spec() {
        let m = cluster_manifest("ns", "ex", 3, "3.5.1", "  paused: true\n");
        assert!(m.ends_with("spec:\n  size: 3\n  version: \"3.5.1\"\n  paused: true\n"), "{m}");
    }
}
