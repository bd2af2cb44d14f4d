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

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::{digest, hmac};

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

const START_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(5);

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
    fn port(&self) -> u16;
    /// The server's process id (also its process group id).
    fn pid(&self) -> u32;
    /// The server's stdout and stderr.
    fn log_path(&self) -> &Path;
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
    /// Kills the server (idempotent; `Drop` does the same).
    fn stop(&mut self);

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

// ---------------------------------------------------------------------------------------------
// moto (S3)

/// moto's S3 server (`moto_server`), in memory: everything is gone when it stops.
pub struct MotoServer {
    proc: ServerProcess,
    client: S3Client,
}

impl MotoServer {
    pub fn start() -> Result<MotoServer> {
        let host = host_address()?;
        let proc = ServerProcess::start(
            "moto",
            |port, _dir| vec!["moto".into(), port.to_string()],
            |port| {
                let (status, _, body) = S3Client::new(&host, port).request("GET", "/", &[], &[], &[])?;
                ensure_status("S3 ListBuckets", status, &[200], &body)
            },
        )?;
        let client = S3Client::new(&host, proc.port);
        Ok(MotoServer { proc, client })
    }
}

/// A path-style S3 client signing with [`S3_ACCESS_KEY_ID`] (Signature V4, region us-east-1).
struct S3Client {
    host: String, // addr:port
    http: Http,
}

impl S3Client {
    fn new(addr: &str, port: u16) -> S3Client {
        S3Client { host: format!("{addr}:{port}"), http: Http::new() }
    }

    /// One signed request (path style: `/<bucket>/<key>`). `path` is not yet URI-encoded.
    fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, BTreeMap<String, String>, Vec<u8>)> {
        let mut hdrs: Vec<(String, String)> =
            headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string())).collect();
        if method == "PUT" {
            // Also keeps moto's web framework from reading the body as a form.
            hdrs.push(("content-type".into(), "application/octet-stream".into()));
        }
        let (auth, mut hdrs) = sigv4_authorization(
            method,
            &self.host,
            path,
            query,
            &hdrs,
            body,
            SystemTime::now(),
            S3_ACCESS_KEY_ID,
            S3_SECRET_ACCESS_KEY,
        );
        hdrs.push(("authorization".into(), auth));
        let url = format!("http://{}{}{}", self.host, uri_encode(path, false), query_string(query));
        self.http.send(method, &url, &hdrs, body)
    }

    fn object_path(bucket: &str, key: &str) -> String {
        format!("/{bucket}/{key}")
    }
}

impl ObjectServer for MotoServer {
    fn storage_type(&self) -> &'static str {
        "S3"
    }
    fn endpoint(&self) -> String {
        format!("http://{}", self.client.host)
    }
    fn port(&self) -> u16 {
        self.proc.port
    }
    fn pid(&self) -> u32 {
        self.proc.pid
    }
    fn log_path(&self) -> &Path {
        &self.proc.log
    }
    fn secret_manifest(&self, namespace: &str, name: &str) -> String {
        s3_secret_manifest(namespace, name)
    }

    fn create_bucket(&self, bucket: &str) -> Result<()> {
        let (status, _, body) = self.client.request("PUT", &format!("/{bucket}"), &[], &[], &[])?;
        if status == 200 || (status == 409 && error_code(&body) == "BucketAlreadyOwnedByYou") {
            return Ok(());
        }
        bail!("S3 CreateBucket {bucket}: {status} {}", String::from_utf8_lossy(&body))
    }

    fn put_object_with_metadata(&self, bucket: &str, key: &str, data: &[u8], metadata: &[(&str, &str)]) -> Result<()> {
        let meta: Vec<(String, String)> =
            metadata.iter().map(|(k, v)| (format!("x-amz-meta-{}", k.to_ascii_lowercase()), v.to_string())).collect();
        let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (status, _, body) = self.client.request("PUT", &S3Client::object_path(bucket, key), &[], &meta, data)?;
        if status != 200 {
            bail!("S3 PutObject {bucket}/{key}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    fn get_object_with_metadata(&self, bucket: &str, key: &str) -> Result<Option<StoredObject>> {
        let (status, headers, body) = self.client.request("GET", &S3Client::object_path(bucket, key), &[], &[], &[])?;
        match status {
            200 => Ok(Some(StoredObject { data: body, metadata: user_metadata(&headers, "x-amz-meta-") })),
            404 => Ok(None),
            _ => bail!("S3 GetObject {bucket}/{key}: {status} {}", String::from_utf8_lossy(&body)),
        }
    }

    fn list_objects(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("list-type", "2"), ("prefix", prefix)];
            if let Some(t) = &token {
                query.push(("continuation-token", t));
            }
            let (status, _, body) = self.client.request("GET", &format!("/{bucket}"), &query, &[], &[])?;
            let xml = String::from_utf8_lossy(&body);
            if status != 200 {
                bail!("S3 ListObjectsV2 {bucket} prefix {prefix:?}: {status} {xml}");
            }
            for c in xml_elements(&xml, "Contents") {
                let key = xml_text(c, "Key").context("ListObjectsV2: <Contents> without <Key>")?;
                let size = xml_text(c, "Size").and_then(|s| s.parse().ok()).unwrap_or(0);
                out.push(ObjectInfo { key, size });
            }
            token = match xml_text(&xml, "IsTruncated").as_deref() {
                Some("true") => {
                    Some(xml_text(&xml, "NextContinuationToken").context("truncated listing without a token")?)
                }
                _ => None,
            };
            if token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let (status, _, body) = self.client.request("DELETE", &S3Client::object_path(bucket, key), &[], &[], &[])?;
        if status != 204 && status != 200 {
            bail!("S3 DeleteObject {bucket}/{key}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    fn stop(&mut self) {
        self.proc.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Azurite (Azure Blob)

/// Azurite's blob service (`azurite-blob`), its data in the server's temp directory.
pub struct Azurite {
    proc: ServerProcess,
    client: AbsClient,
}

impl Azurite {
    pub fn start() -> Result<Azurite> {
        let host = host_address()?;
        let proc = ServerProcess::start(
            "azurite",
            |port, dir| vec!["azurite".into(), port.to_string(), dir.join("data").display().to_string()],
            |port| {
                let (status, _, body) =
                    AbsClient::new(&host, port).request("GET", "", &[("comp", "list")], &[], &[])?;
                ensure_status("ABS List Containers", status, &[200], &body)
            },
        )?;
        let client = AbsClient::new(&host, proc.port);
        Ok(Azurite { proc, client })
    }

    /// Azure names the bucket a container.
    pub fn create_container(&self, container: &str) -> Result<()> {
        self.create_bucket(container)
    }
}

/// A Blob service client for Azurite's path-style URLs, signing with the well-known account's
/// Shared Key.
struct AbsClient {
    host: String, // addr:port
    http: Http,
}

impl AbsClient {
    fn new(addr: &str, port: u16) -> AbsClient {
        AbsClient { host: format!("{addr}:{port}"), http: Http::new() }
    }

    /// One Shared Key-signed request to `/devstoreaccount1<path>`; `path` is not yet URI-encoded.
    fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, BTreeMap<String, String>, Vec<u8>)> {
        let encoded_path = format!("/{AZURITE_ACCOUNT}{}", uri_encode(path, false));
        let mut hdrs: Vec<(String, String)> = vec![
            ("host".into(), self.host.clone()),
            ("x-ms-date".into(), http_date(SystemTime::now())),
            ("x-ms-version".into(), AZURE_API_VERSION.into()),
        ];
        hdrs.extend(headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string())));
        if method == "PUT" {
            hdrs.push(("content-length".into(), body.len().to_string()));
            hdrs.push(("content-type".into(), "application/octet-stream".into()));
        }
        let to_sign = azure_string_to_sign(method, &hdrs, AZURITE_ACCOUNT, &encoded_path, query);
        hdrs.push(("authorization".into(), azure_authorization(AZURITE_ACCOUNT, AZURITE_KEY, &to_sign)?));
        let url = format!("http://{}{encoded_path}{}", self.host, query_string(query));
        self.http.send(method, &url, &hdrs, body)
    }

    fn blob_path(container: &str, blob: &str) -> String {
        format!("/{container}/{blob}")
    }
}

impl ObjectServer for Azurite {
    fn storage_type(&self) -> &'static str {
        "ABS"
    }
    fn endpoint(&self) -> String {
        format!("http://{}/{AZURITE_ACCOUNT}", self.client.host)
    }
    fn port(&self) -> u16 {
        self.proc.port
    }
    fn pid(&self) -> u32 {
        self.proc.pid
    }
    fn log_path(&self) -> &Path {
        &self.proc.log
    }
    fn secret_manifest(&self, namespace: &str, name: &str) -> String {
        abs_secret_manifest(namespace, name, &self.endpoint())
    }

    fn create_bucket(&self, container: &str) -> Result<()> {
        let (status, headers, body) =
            self.client.request("PUT", &format!("/{container}"), &[("restype", "container")], &[], &[])?;
        let code = headers.get("x-ms-error-code").map(String::as_str).unwrap_or_default();
        if status == 201 || (status == 409 && code == "ContainerAlreadyExists") {
            return Ok(());
        }
        bail!("ABS Create Container {container}: {status} {code} {}", String::from_utf8_lossy(&body))
    }

    fn put_object_with_metadata(
        &self,
        container: &str,
        blob: &str,
        data: &[u8],
        metadata: &[(&str, &str)],
    ) -> Result<()> {
        let mut hdrs: Vec<(String, String)> = vec![("x-ms-blob-type".into(), "BlockBlob".into())];
        hdrs.extend(metadata.iter().map(|(k, v)| (format!("x-ms-meta-{}", k.to_ascii_lowercase()), v.to_string())));
        let hdrs: Vec<(&str, &str)> = hdrs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (status, _, body) = self.client.request("PUT", &AbsClient::blob_path(container, blob), &[], &hdrs, data)?;
        if status != 201 {
            bail!("ABS Put Blob {container}/{blob}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    fn get_object_with_metadata(&self, container: &str, blob: &str) -> Result<Option<StoredObject>> {
        let (status, headers, body) =
            self.client.request("GET", &AbsClient::blob_path(container, blob), &[], &[], &[])?;
        match status {
            200 => Ok(Some(StoredObject { data: body, metadata: user_metadata(&headers, "x-ms-meta-") })),
            404 => Ok(None),
            _ => bail!("ABS Get Blob {container}/{blob}: {status} {}", String::from_utf8_lossy(&body)),
        }
    }

    fn list_objects(&self, container: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut query = vec![("restype", "container"), ("comp", "list")];
            if !prefix.is_empty() {
                query.push(("prefix", prefix));
            }
            if let Some(m) = &marker {
                query.push(("marker", m));
            }
            let (status, _, body) = self.client.request("GET", &format!("/{container}"), &query, &[], &[])?;
            let xml = String::from_utf8_lossy(&body);
            if status != 200 {
                bail!("ABS List Blobs {container} prefix {prefix:?}: {status} {xml}");
            }
            for b in xml_elements(&xml, "Blob") {
                let key = xml_text(b, "Name").context("List Blobs: <Blob> without <Name>")?;
                let size = xml_text(b, "Content-Length").and_then(|s| s.parse().ok()).unwrap_or(0);
                out.push(ObjectInfo { key, size });
            }
            marker = xml_text(&xml, "NextMarker").filter(|m| !m.is_empty());
            if marker.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn delete_object(&self, container: &str, blob: &str) -> Result<()> {
        let (status, _, body) = self.client.request("DELETE", &AbsClient::blob_path(container, blob), &[], &[], &[])?;
        if status != 202 && status != 404 {
            bail!("ABS Delete Blob {container}/{blob}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    fn stop(&mut self) {
        self.proc.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A server started through `hack/objstore.sh`, in its own process group, with its own directory.
struct ServerProcess {
    name: &'static str,
    child: Option<Child>,
    pid: u32,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    /// Leave `dir` in place on drop.
    keep_dir: bool,
}

fn objstore_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/objstore.sh")
}

/// `hack/objstore.sh install`, once per process (a quick no-op when installed).
fn ensure_installed() -> Result<()> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            crate::run(Command::new("bash").arg(objstore_script()).arg("install"))
                .map(drop)
                .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(|e| anyhow!("hack/objstore.sh install failed: {e}"))
}

/// A free TCP port on all addresses (the kernel's choice; free again when this returns).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("0.0.0.0:0").context("binding a free port")?.local_addr()?.port())
}

fn new_server_dir(name: &str) -> Result<PathBuf> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let dir = std::env::temp_dir().join(format!(
        "e2e-{name}-{}-{}-{nanos:x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Spawns `cmd` from a thread that lives as long as the process, so that `PR_SET_PDEATHSIG`
/// (which fires when the *thread* that forked the child exits) fires only when the test
/// process itself is gone, not when the test's own thread ends.
fn spawn_tied_to_process(cmd: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("objstore-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the objstore spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = spawner.lock().unwrap_or_else(|e| e.into_inner()).send((cmd, reply_tx));
    sent.map_err(|_| io::Error::other("objstore spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| io::Error::other("objstore spawner thread is gone"))?
}

impl ServerProcess {
    /// Starts `hack/objstore.sh <args(port, dir)>` on a free port and waits until `ready(port)`
    /// succeeds. A port taken between choosing and binding it is retried with another one.
    fn start(
        name: &'static str,
        args: impl Fn(u16, &Path) -> Vec<String>,
        ready: impl Fn(u16) -> Result<()>,
    ) -> Result<ServerProcess> {
        ensure_installed()?;
        let dir = new_server_dir(name)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port()?;
            let mut server = Self::spawn(name, &args(port, &dir), port, dir.clone())?;
            let Err(e) = server.wait_ready(&ready) else { return Ok(server) };
            let log = server.log_tail(30);
            // Dropping stops it; the directory stays for the next attempt or for reading the log.
            server.keep_dir = true;
            drop(server);
            if attempt < 3 && (log.contains("in use") || log.contains("EADDRINUSE")) {
                continue;
            }
            return Err(e.context(format!("{name} did not start; last lines of {}/server.log:\n{log}", dir.display())));
        }
    }

    fn spawn(name: &'static str, args: &[String], port: u16, dir: PathBuf) -> Result<ServerProcess> {
        let log = dir.join("server.log");
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut cmd = Command::new("bash");
        cmd.arg(objstore_script())
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: prctl(2) is async-signal-safe, which is all a pre_exec hook may call.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child =
            spawn_tied_to_process(cmd).with_context(|| format!("starting {name} ({})", objstore_script().display()))?;
        Ok(ServerProcess { name, pid: child.id(), child: Some(child), port, dir, log, keep_dir: false })
    }

    fn wait_ready(&mut self, ready: &impl Fn(u16) -> Result<()>) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last: Option<anyhow::Error> = None;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("{} exited ({status}) before answering", self.name);
            }
            // Only ask once something listens: keeps connection errors out of the way.
            if TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(1)).is_ok() {
                match ready(self.port) {
                    Ok(()) => return Ok(()),
                    Err(e) => last = Some(e),
                }
            }
            if Instant::now() >= deadline {
                let e = last.unwrap_or_else(|| anyhow!("nothing listens on port {}", self.port));
                return Err(e.context(format!("{} not ready after {START_TIMEOUT:?}", self.name)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM to the process group, SIGKILL after `STOP_GRACE`, and the child reaped.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pgid = -(self.pid as libc::pid_t);
        // SAFETY: kill(2) on the process group of our own child, which we have not reaped yet.
        unsafe { libc::kill(pgid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever is left of the group: the leader after the grace period, or anything it started.
        // SAFETY: as above.
        unsafe { libc::kill(pgid, libc::SIGKILL) };
        let _ = child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!(
                "{} (port {}) stopped; its directory is kept: {}\nlast lines of server.log:\n{}",
                self.name,
                self.port,
                self.dir.display(),
                self.log_tail(30)
            );
        }
        let keep = self.keep_dir || panicking || std::env::var_os("E2E_KEEP_OBJSTORE").is_some_and(|v| !v.is_empty());
        if !keep {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[derive(Clone)]
struct Http(ureq::Agent);

impl Http {
    fn new() -> Http {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .timeout_connect(Some(Duration::from_secs(5)))
            .build();
        Http(ureq::Agent::new_with_config(config))
    }

    /// Sends the request with exactly `headers` (plus what HTTP itself needs) and returns the
    /// status, the response headers (names lower-cased) and the whole body.
    fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<(u16, BTreeMap<String, String>, Vec<u8>)> {
        let mut req = ureq::http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp =
            if method == "PUT" || method == "POST" { self.0.run(req.body(body)?) } else { self.0.run(req.body(())?) }
                .with_context(|| format!("{method} {url}"))?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let mut data = Vec::new();
        resp.into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader()
            .read_to_end(&mut data)
            .with_context(|| format!("{method} {url}: reading the body"))?;
        Ok((status, headers, data))
    }
}

fn user_metadata(headers: &BTreeMap<String, String>, prefix: &str) -> BTreeMap<String, String> {
    headers.iter().filter_map(|(k, v)| k.strip_prefix(prefix).map(|n| (n.to_string(), v.clone()))).collect()
}

/// RFC 3986 percent-encoding of everything but unreserved characters (and `/` unless
/// `encode_slash`), as both S3 SigV4 and Azure expect.
fn uri_encode(s: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b'/' if !encode_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `?k=v&...` with keys and values encoded, in the order given (empty for no parameters).
fn query_string(query: &[(&str, &str)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let parts: Vec<String> =
        query.iter().map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true))).collect();
    format!("?{}", parts.join("&"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data).as_ref().to_vec()
}

/// (year, month, day, hour, minute, second, weekday with 0 = Sunday) in UTC.
fn utc(t: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = (days + 4).rem_euclid(7) as u32;
    (year, month, day, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32, weekday)
}

/// RFC 1123 date (`Sun, 22 Nov 2026 22:13:51 GMT`).
fn http_date(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (y, mo, d, h, mi, s, wd) = utc(t);
    format!("{}, {d:02} {} {y} {h:02}:{mi:02}:{s:02} GMT", DAYS[wd as usize], MONTHS[mo as usize - 1])
}

/// S3 Signature Version 4 for a path-style request. `headers` are lower-cased; returns the
/// `Authorization` value and the headers to send (the given ones plus host, x-amz-date and
/// x-amz-content-sha256, all signed).
#[allow(clippy::too_many_arguments)]
fn sigv4_authorization(
    method: &str,
    host: &str,
    path: &str,
    query: &[(&str, &str)],
    headers: &[(String, String)],
    body: &[u8],
    now: SystemTime,
    access_key: &str,
    secret_key: &str,
) -> (String, Vec<(String, String)>) {
    let (y, mo, d, h, mi, s, _) = utc(now);
    let date = format!("{y:04}{mo:02}{d:02}");
    let amz_date = format!("{date}T{h:02}{mi:02}{s:02}Z");
    let payload_hash = sha256_hex(body);
    let mut hdrs: Vec<(String, String)> = headers.to_vec();
    hdrs.push(("host".into(), host.into()));
    hdrs.push(("x-amz-content-sha256".into(), payload_hash.clone()));
    hdrs.push(("x-amz-date".into(), amz_date.clone()));
    hdrs.sort();
    let canonical_headers: String = hdrs.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed_headers = hdrs.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(";");
    let mut q: Vec<(String, String)> = query.iter().map(|(k, v)| (uri_encode(k, true), uri_encode(v, true))).collect();
    q.sort();
    let canonical_query = q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let canonical_request = format!(
        "{method}\n{}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{payload_hash}",
        uri_encode(path, false)
    );
    let scope = format!("{date}/{S3_REGION}/s3/aws4_request");
    let string_to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", sha256_hex(canonical_request.as_bytes()));
    let mut key = hmac_sha256(format!("AWS4{secret_key}").as_bytes(), date.as_bytes());
    for part in [S3_REGION, "s3", "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let signature = hex(&hmac_sha256(&key, string_to_sign.as_bytes()));
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
    );
    (auth, hdrs)
}

/// The Shared Key string-to-sign (Blob service, version 2015-02-21 and later: a zero
/// Content-Length is the empty string). `encoded_path` is the URL's path as sent, which for the
/// emulator starts with the account (`/devstoreaccount1/...`); the canonicalized resource puts the
/// account in front of it once more.
fn azure_string_to_sign(
    method: &str,
    headers: &[(String, String)],
    account: &str,
    encoded_path: &str,
    query: &[(&str, &str)],
) -> String {
    let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("");
    let length = match get("content-length") {
        "0" => "",
        l => l,
    };
    let mut ms: Vec<(&str, &str)> =
        headers.iter().filter(|(k, _)| k.starts_with("x-ms-")).map(|(k, v)| (k.as_str(), v.as_str())).collect();
    ms.sort();
    let canonical_headers: String = ms.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let mut q: Vec<(String, &str)> = query.iter().map(|(k, v)| (k.to_ascii_lowercase(), *v)).collect();
    q.sort();
    let canonical_query: String = q.iter().map(|(k, v)| format!("\n{k}:{v}")).collect();
    format!(
        "{method}\n{}\n{}\n{length}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{canonical_headers}/{account}{encoded_path}{canonical_query}",
        get("content-encoding"),
        get("content-language"),
        get("content-md5"),
        get("content-type"),
        get("date"),
        get("if-modified-since"),
        get("if-match"),
        get("if-none-match"),
        get("if-unmodified-since"),
        get("range"),
    )
}

fn azure_authorization(account: &str, key_b64: &str, string_to_sign: &str) -> Result<String> {
    let key = BASE64.decode(key_b64).context("the account key is not base64")?;
    Ok(format!("SharedKey {account}:{}", BASE64.encode(hmac_sha256(&key, string_to_sign.as_bytes()))))
}

// ---------------------------------------------------------------------------------------------
// Just enough XML for listings and errors

/// The contents of every `<tag>...</tag>` in `xml` (not nested in themselves).
fn xml_elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    out
}

/// The unescaped text of the first `<tag>...</tag>` in `xml`.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    xml_elements(xml, tag).first().map(|t| {
        t.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
    })
}

fn ensure_status(what: &str, status: u16, ok: &[u16], body: &[u8]) -> Result<()> {
    if ok.contains(&status) {
        return Ok(());
    }
    bail!("{what}: {status} {}", String::from_utf8_lossy(body))
}

fn error_code(body: &[u8]) -> String {
    xml_text(&String::from_utf8_lossy(body), "Code").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors computed with botocore's S3SigV4Auth (the signer of boto3, installed with moto) for
    // the same requests at 2026-11-22T22:13:51Z.
    const T: u64 = 1_795_385_631;

    #[test]
    fn sigv4_matches_botocore() {
        let now = UNIX_EPOCH + Duration::from_secs(T);
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        let (auth, _) = sigv4_authorization(
            "GET",
            "192.0.2.2:9000",
            "/bkt/dir/some key.db",
            &[("prefix", "a/b"), ("list-type", "2")],
            &[],
            b"",
            now,
            "AKIDEXAMPLE",
            secret,
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261122/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
             Signature=6404d9f655dd384604fac34551cbded7dfba9ef96977e058af823241588cb162"
        );
        let headers = [
            ("content-type".to_string(), "application/octet-stream".to_string()),
            ("x-amz-meta-sha256".into(), "abc".into()),
        ];
        let (auth, sent) =
            sigv4_authorization("PUT", "192.0.2.2:9000", "/bkt/x", &[], &headers, b"hello", now, "AKIDEXAMPLE", secret);
        assert!(
            auth.ends_with(
                "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-sha256, \
                 Signature=36ecfb7856085d1cdf15534b6004ffd650e619cbda87c930aef02b19f9d6d762"
            ),
            "{auth}"
        );
        assert!(sent.contains(&("x-amz-date".into(), "20261122T221351Z".into())), "{sent:?}");
    }

    #[test]
    fn dates() {
        let now = UNIX_EPOCH + Duration::from_secs(T);
        assert_eq!(http_date(now), "Sun, 22 Nov 2026 22:13:51 GMT");
        assert_eq!(http_date(UNIX_EPOCH + Duration::from_secs(951_782_400)), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn azure_string_to_sign_layout() {
        let headers = vec![
            ("x-ms-version".to_string(), AZURE_API_VERSION.to_string()),
            ("x-ms-date".into(), "Sun, 22 Nov 2026 22:13:51 GMT".into()),
            ("content-length".into(), "0".into()),
            ("x-ms-meta-sha256".into(), "abc".into()),
        ];
        let s = azure_string_to_sign(
            "PUT",
            &headers,
            "devstoreaccount1",
            "/devstoreaccount1/c1",
            &[("restype", "container"), ("Comp", "x")],
        );
        assert_eq!(
            s,
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:Sun, 22 Nov 2026 22:13:51 GMT\nx-ms-meta-sha256:abc\n\
             x-ms-version:2021-12-02\n/devstoreaccount1/devstoreaccount1/c1\ncomp:x\nrestype:container"
        );
    }

    #[test]
    fn corrupted_differs_in_one_byte() {
        assert_eq!(corrupted(b""), vec![0xff]);
        let c = corrupted(b"abcde");
        assert_eq!(c.len(), 5);
        assert_eq!(c.iter().zip(b"abcde").filter(|(a, b)| a != b).count(), 1);
    }

    #[test]
    fn xml_listing() {
        let xml = "<R><Contents><Key>a&amp;b</Key><Size>3</Size></Contents><Contents><Key>c</Key></Contents>\
                   <IsTruncated>false</IsTruncated></R>";
        let keys: Vec<_> = xml_elements(xml, "Contents").iter().map(|c| xml_text(c, "Key").unwrap()).collect();
        assert_eq!(keys, ["a&b", "c"]);
        assert_eq!(xml_text(xml, "IsTruncated").as_deref(), Some("false"));
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
