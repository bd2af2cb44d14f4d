//! Real object-storage servers for the backup/restore tests: moto's S3 server ([`MotoServer`]) and
//! Azurite's blob service ([`Azurite`]), each started by the test on a free port and stopped when
//! dropped.
//!
//! - Installed by `hack/objstore.sh install` (called by `hack/deps.sh`; the first `start` in a
//!   process runs it too, a no-op when installed) under `$CACHE_DIR/objstore`, from the pins in
//!   `hack/objstore/`. The servers run through `hack/objstore.sh moto|azurite`.
//! - Bound to 0.0.0.0; [`ObjectServer::endpoint`] uses [`host_address`], the machine's primary
//!   IPv4 address, which is the local cluster's node InternalIP: reachable from this host and from
//!   pods (the pod bridge routes to it). `E2E_OBJSTORE_HOST` overrides it.
//! - Each server has its own directory under the system temp dir: `server.log` (its stdout and
//!   stderr) and, for Azurite, its data. Dropping the server kills its process group and removes
//!   the directory, except while the thread is panicking: then the directory is kept and the log's
//!   last lines go to stderr (`E2E_KEEP_OBJSTORE=1` always keeps it).
//! - A server cannot outlive the test process: it is spawned with `PR_SET_PDEATHSIG` = SIGKILL by
//!   a thread that lives as long as the process, so even an aborted or killed test leaves no
//!   server behind.
//! - The client side here is a plain blocking HTTP client that signs its own requests (S3
//!   Signature V4, Azure Shared Key): nothing is shared with the operator's object-store code.
//!
//! Modules: this one holds what both servers share (the [`ObjectServer`] interface and its
//! accessors, credentials, the host address, the Secrets); `moto` and `azurite` the two
//! servers with their clients; `process` starting and stopping a server; `http` the HTTP client
//! and the little XML it reads; `signing` S3 SigV4 and Azure Shared Key.

mod azurite;
mod http;
mod moto;
mod process;
mod signing;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub use azurite::Azurite;
pub use moto::MotoServer;
pub use process::ServerProcess;

/// moto accepts any credentials; these are the ones the helpers sign with and put in Secrets.
pub const S3_ACCESS_KEY_ID: &str = "AKIAETCDOPERATORE2E0";
pub const S3_SECRET_ACCESS_KEY: &str = "etcd-operator-e2e/not-a-secret/moto-accepts-any-key";
pub const S3_REGION: &str = "us-east-1";
/// Azurite's well-known development account and its published key.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The x-ms-version the helpers send (Azurite runs with `--skipApiVersionCheck` anyway).
const AZURE_API_VERSION: &str = "2021-12-02";

// ---------------------------------------------------------------------------------------------
// The common interface

/// An object as stored: its bytes and its user metadata (`x-amz-meta-*` / `x-ms-meta-*`, names
/// lower-cased, prefix removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    pub data: Vec<u8>,
    pub metadata: BTreeMap<String, String>,
}

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
}

/// What a backup/restore test needs from a storage server, the same for S3 (moto) and ABS
/// (Azurite). "Bucket" is an S3 bucket or an Azure container; "key" an object key or blob name.
pub trait ObjectServer {
    /// `"S3"` or `"ABS"`, as in `EtcdBackup.spec.storageType`.
    fn storage_type(&self) -> &'static str;
    /// The URL a client (the operator, a pod, this host) uses: `http://<addr>:<port>` for moto,
    /// `http://<addr>:<port>/devstoreaccount1` for Azurite.
    fn endpoint(&self) -> String;
    /// The server's process: port, pid, log (the accessors below read it).
    fn process(&self) -> &ServerProcess;
    fn process_mut(&mut self) -> &mut ServerProcess;
    /// The credentials Secret the operator reads for this storage type, as a manifest for
    /// `kubectl apply`.
    fn secret_manifest(&self, namespace: &str, name: &str) -> String;

    fn create_bucket(&self, bucket: &str) -> Result<()>;
    fn put_object_with_metadata(&self, bucket: &str, key: &str, data: &[u8], metadata: &[(&str, &str)]) -> Result<()>;
    /// `None` when there is no such object.
    fn get_object_with_metadata(&self, bucket: &str, key: &str) -> Result<Option<StoredObject>>;
    /// Every object whose key starts with `prefix`, in key order.
    fn list_objects(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>>;
    /// Deleting a missing object is not an error.
    fn delete_object(&self, bucket: &str, key: &str) -> Result<()>;

    fn port(&self) -> u16 {
        self.process().port()
    }
    /// The server's process id (also its process group id).
    fn pid(&self) -> u32 {
        self.process().pid()
    }
    /// The server's stdout and stderr.
    fn log_path(&self) -> &Path {
        self.process().log_path()
    }
    /// Kills the server (idempotent; `Drop` does the same).
    fn stop(&mut self) {
        self.process_mut().stop();
    }

    fn put_object(&self, bucket: &str, key: &str, data: &[u8]) -> Result<()> {
        self.put_object_with_metadata(bucket, key, data, &[])
    }

    /// The object's bytes; an error when it does not exist.
    fn get_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        match self.get_object_with_metadata(bucket, key)? {
            Some(o) => Ok(o.data),
            None => bail!("{} object {bucket}/{key} does not exist", self.storage_type()),
        }
    }

    fn object_exists(&self, bucket: &str, key: &str) -> Result<bool> {
        Ok(self.get_object_with_metadata(bucket, key)?.is_some())
    }

    /// Overwrites the object with bytes of the same length that differ in one byte (the middle
    /// one; an empty object becomes one byte), keeping its user metadata: a checksum stored in
    /// the metadata still describes the original bytes, so a reader must find the mismatch.
    /// Returns the corrupt bytes.
    fn corrupt_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        let Some(obj) = self.get_object_with_metadata(bucket, key)? else {
            bail!("cannot corrupt {bucket}/{key}: no such {} object", self.storage_type());
        };
        let corrupt = corrupted(&obj.data);
        let metadata: Vec<(&str, &str)> = obj.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.put_object_with_metadata(bucket, key, &corrupt, &metadata)?;
        Ok(corrupt)
    }
}

/// `data` with its middle byte inverted (an empty input gives one byte).
pub fn corrupted(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    if out.is_empty() {
        out.push(0xff);
    } else {
        let mid = out.len() / 2;
        out[mid] ^= 0xff;
    }
    out
}

/// The address servers are advertised at: `$E2E_OBJSTORE_HOST`, or the machine's primary IPv4
/// address (the source address of the default route, the same rule `hack/cluster-env.sh`
/// `node_ip` uses for the local cluster's node InternalIP).
pub fn host_address() -> Result<String> {
    if let Ok(h) = std::env::var("E2E_OBJSTORE_HOST")
        && !h.is_empty()
    {
        return Ok(h);
    }
    // `ip route get` only looks the route up; nothing is sent.
    let out = crate::run(Command::new("ip").args(["-4", "route", "get", "1.1.1.1"]))?;
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "src" {
            return words.next().map(str::to_string).context("`ip -4 route get` printed `src` without an address");
        }
    }
    bail!("cannot find this machine's primary IPv4 address (no default route?); set E2E_OBJSTORE_HOST")
}

/// The CoreOS-shaped AWS Secret: `credentials` (shared-credentials file) and `config`, both with
/// a `[default]` profile.
pub fn s3_secret_manifest(namespace: &str, name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{ name: {name}, namespace: {namespace} }}
type: Opaque
stringData:
  credentials: |
    [default]
    aws_access_key_id = {S3_ACCESS_KEY_ID}
    aws_secret_access_key = {S3_SECRET_ACCESS_KEY}
  config: |
    [default]
    region = {S3_REGION}
"#
    )
}

/// The ABS Secret: `storage-account`, `storage-key` (CoreOS), and `endpoint` (additive: the
/// emulator's URL, `http://<addr>:<port>/devstoreaccount1`).
pub fn abs_secret_manifest(namespace: &str, name: &str, endpoint: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{ name: {name}, namespace: {namespace} }}
type: Opaque
stringData:
  storage-account: {AZURITE_ACCOUNT}
  storage-key: "{AZURITE_KEY}"
  endpoint: "{endpoint}"
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupted_differs_in_one_byte() {
        assert_eq!(corrupted(b""), vec![0xff]);
        let c = corrupted(b"abcde");
        assert_eq!(c.len(), 5);
        assert_eq!(c.iter().zip(b"abcde").filter(|(a, b)| a != b).count(), 1);
    }

    #[test]
    fn secrets_have_the_operator_keys() {
        let s3 = s3_secret_manifest("ns", "aws");
        assert!(s3.contains("credentials: |\n    [default]\n    aws_access_key_id = "), "{s3}");
        assert!(s3.contains("config: |\n    [default]\n    region = us-east-1\n"), "{s3}");
        let abs = abs_secret_manifest("ns", "abs", "http://192.0.2.2:1234/devstoreaccount1");
        for k in [
            "storage-account: devstoreaccount1",
            "storage-key: \"Eby8",
            "endpoint: \"http://192.0.2.2:1234/devstoreaccount1\"",
        ] {
            assert!(abs.contains(k), "{abs}");
        }
    }
}
