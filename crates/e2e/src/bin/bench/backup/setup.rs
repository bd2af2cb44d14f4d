//! The backup bench's set-up: the claim, EtcdBackup and etcdctl pod manifests, and the data.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use e2e::ETCD_IMAGE_3_5_1;
use e2e::objstore::{MotoServer, ObjectServer};
use etcd_client::{Client, ConnectOptions};

use super::{BUCKET, CLAIM, ETCDCTL_LABEL, VALUE_BYTES};
use crate::scenarios::{CLUSTER, Ctx};

/// A member as the set-up found it.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub(super) pod: String,
    pub(super) ip: String,
    pub(super) db_size: i64,
}

pub(super) fn pvc_manifest(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {CLAIM}, namespace: {ns}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 2Gi}}}}\n"
    )
}

pub(super) fn backup_manifest(ns: &str, name: &str, storage_type: &str, storage: &str, timeout_secs: u64) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  clusterName: {CLUSTER}\n  storageType: {storage_type}\n  backupPolicy: {{timeoutInSecond: {timeout_secs}}}\n  {storage}\n"
    )
}

/// The baseline pod: the etcd image's own etcdctl, no shell, the snapshot into an emptyDir.
pub(super) fn etcdctl_pod(ns: &str, name: &str, endpoint: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{ name: {name}, namespace: {ns}, labels: {{ app: {ETCDCTL_LABEL} }} }}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  enableServiceLinks: false
  automountServiceAccountToken: false
  containers:
  - name: etcdctl
    image: {ETCD_IMAGE_3_5_1}
    imagePullPolicy: IfNotPresent
    command: ["/usr/local/bin/etcdctl", "--endpoints={endpoint}", "snapshot", "save", "/backup/snapshot.db"]
    volumeMounts:
    - {{ name: backup, mountPath: /backup }}
  volumes:
  - name: backup
    emptyDir: {{}}
"#
    )
}

/// Deterministic incompressible bytes (xorshift64*), different for every `seed`.
pub(super) fn random_value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

pub(super) fn connect_opts(timeout: Duration) -> Option<ConnectOptions> {
    Some(ConnectOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(timeout))
}

/// Writes `n` values of 1 MiB under `bench-data/` through `endpoint`.
pub(super) fn fill(ctx: &Ctx, endpoint: &str, n: usize) -> Result<()> {
    ctx.rt.block_on(async {
        let mut c = Client::connect([endpoint], connect_opts(Duration::from_secs(60))).await?;
        for i in 0..n {
            let v = random_value(i as u64 + 1, VALUE_BYTES);
            c.put(format!("bench-data/{i:05}"), v, None).await.with_context(|| format!("put {i} of {n}"))?;
        }
        Ok(())
    })
}

/// dbSize of one member.
pub(super) fn db_size(ctx: &Ctx, ip: &str) -> Result<i64> {
    ctx.rt.block_on(async {
        let mut c = Client::connect([format!("http://{ip}:2379")], connect_opts(Duration::from_secs(10))).await?;
        Ok(c.status().await?.db_size())
    })
}

/// One PUT of `len` random bytes to moto from this host: (seconds in all, seconds of them spent
/// hashing the body, which the client's SigV4 signature needs). The object is deleted again.
pub(super) fn moto_put_probe(moto: &MotoServer, key: &str, len: usize) -> Result<(f64, f64)> {
    let data = random_value(0xB0B, len);
    let t = Instant::now();
    let _ = ring::digest::digest(&ring::digest::SHA256, &data);
    let sha_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    moto.put_object(BUCKET, key, &data)?;
    let put_s = t.elapsed().as_secs_f64();
    moto.delete_object(BUCKET, key)?;
    Ok((put_s, sha_s))
}
