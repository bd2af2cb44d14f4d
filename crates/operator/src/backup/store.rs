//! Opening a backup location as an `object_store`, with credentials read from the Secret the
//! pod mounts. Runs inside backup and restore pods only: the operator process never reads
//! credentials or talks to storage.
//!
//! Secret keys, per storage type:
//! - S3 (`awsSecret`, as CoreOS): `credentials` (an AWS shared-credentials file) and `config`
//!   (an AWS config file); profile `default`; region from `config`, else `us-east-1`.
//! - ABS (`absSecret`, as CoreOS): `storage-account`, `storage-key`, optional `cloud`
//!   (`AzurePublicCloud`, `AzureChinaCloud`, `AzureUSGovernmentCloud`, `AzureGermanCloud`), and
//!   additive `endpoint` (full account URL, e.g. an emulator's `http://host:10000/account`).
//! - GCS (`gcpSecret`): `credentials-data` (or `credentials.json`: a service-account key JSON),
//!   or `access-token`.
//! - PVC: no Secret; the claim is mounted at [`PVC_MOUNT`].

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use super::contract::PodError;
use super::location::{Kind, Location};

pub use super::contract::{CREDENTIALS_MOUNT, PVC_MOUNT, S3Options};

/// The store holding `loc.bucket`, and `loc.key` as an object path. A Secret that lacks a key is
/// a transient failure, as every failure here: the Secret may be fixed before the next attempt.
pub fn open(loc: &Location, creds_dir: &FsPath, s3: &S3Options) -> Result<(Arc<dyn ObjectStore>, Path), PodError> {
    let path = Path::parse(&loc.key).map_err(|e| format!("object key {:?}: {e}", loc.key))?;
    // reqwest has no bundled provider here and panics at the first client without a process
    // default: ring, the one linked (a no-op when the process installed it already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store: Arc<dyn ObjectStore> = match loc.kind {
        Kind::S3 => {
            let creds = ini(&read(creds_dir, "credentials")?);
            let config = read(creds_dir, "config").map(|t| ini(&t)).unwrap_or_default();
            let profile = creds.get("default").ok_or("the AWS credentials file has no [default] profile")?;
            let key_id = profile.get("aws_access_key_id").ok_or("[default] has no aws_access_key_id")?;
            let secret = profile.get("aws_secret_access_key").ok_or("[default] has no aws_secret_access_key")?;
            let region = config
                .get("default")
                .or_else(|| config.get("profile default"))
                .and_then(|p| p.get("region"))
                .cloned()
                .unwrap_or_else(|| "us-east-1".into());
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(&loc.bucket)
                .with_region(region)
                .with_access_key_id(key_id)
                .with_secret_access_key(secret)
                .with_virtual_hosted_style_request(!s3.force_path_style && s3.endpoint.is_empty());
            if let Some(t) = profile.get("aws_session_token") {
                b = b.with_token(t);
            }
            if !s3.endpoint.is_empty() {
                b = b.with_endpoint(&s3.endpoint).with_allow_http(s3.endpoint.starts_with("http://"));
            }
            Arc::new(b.build().map_err(|e| format!("S3 client: {}", why(&e)))?)
        }
        Kind::Abs => {
            let account = read(creds_dir, "storage-account")?;
            let key = read(creds_dir, "storage-key")?;
            let endpoint = match read(creds_dir, "endpoint") {
                Ok(e) => e,
                Err(_) => azure_endpoint(&account, read(creds_dir, "cloud").ok().as_deref())?,
            };
            let b = MicrosoftAzureBuilder::new()
                .with_account(&account)
                .with_access_key(key)
                .with_container_name(&loc.bucket)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_endpoint(endpoint);
            Arc::new(b.build().map_err(|e| format!("Azure Blob client: {}", why(&e)))?)
        }
        Kind::Gcs => {
            let mut b = GoogleCloudStorageBuilder::new().with_bucket_name(&loc.bucket);
            if let Ok(key) = read(creds_dir, "credentials-data").or_else(|_| read(creds_dir, "credentials.json")) {
                b = b.with_service_account_key(key);
            } else if let Ok(token) = read(creds_dir, "access-token") {
                b = b.with_bearer_token(token);
            } else {
                return Err("the GCP Secret has neither credentials-data nor access-token".into());
            }
            Arc::new(b.build().map_err(|e| format!("GCS client: {}", why(&e)))?)
        }
        Kind::Pvc => Arc::new(
            LocalFileSystem::new_with_prefix(PVC_MOUNT)
                .map_err(|e| format!("volume at {PVC_MOUNT}: {}", why(&e)))?
                .with_automatic_cleanup(true)
                // A backup reported as written must be on the volume, not in the page cache.
                .with_fsync(true),
        ),
    };
    Ok((store, path))
}

/// An error with the chain of its causes, `a: b: c` (object_store and reqwest put the useful
/// part, such as "no CA certificates found", in a source, behind a generic "builder error").
pub fn why(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Account URL of a named Azure cloud.
fn azure_endpoint(account: &str, cloud: Option<&str>) -> Result<String, String> {
    let suffix = match cloud.unwrap_or("AzurePublicCloud") {
        "" | "AzurePublicCloud" => "blob.core.windows.net",
        "AzureChinaCloud" => "blob.core.chinacloudapi.cn",
        "AzureUSGovernmentCloud" => "blob.core.usgovcloudapi.net",
        "AzureGermanCloud" => "blob.core.cloudapi.de",
        other => return Err(format!("unknown Azure cloud {other:?}")),
    };
    Ok(format!("https://{account}.{suffix}"))
}

fn read(dir: &FsPath, key: &str) -> Result<String, String> {
    std::fs::read_to_string(dir.join(key))
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("credentials Secret key {key:?}: {e}"))
}

/// Sections of an INI file (AWS credentials/config), keys lower-cased.
fn ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim().to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone()).or_default().insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HTTPS client of a store is built on the one crypto provider linked (ring; reqwest
    /// has no bundled one) and reaches the TLS handshake: a peer that hangs up is an error, not
    /// a panic over a missing provider.
    #[tokio::test]
    async fn an_https_store_handshakes_with_the_linked_provider() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        // Never blocks the test run: gives up after 30 s without a connection.
        let accepted = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if listener.accept().is_ok() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            false
        });
        let dir = std::env::temp_dir().join(format!("store-https-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("credentials"), "[default]\naws_access_key_id = a\naws_secret_access_key = b\n")
            .unwrap();
        let loc = Location { kind: Kind::S3, bucket: "b".into(), key: "k".into() };
        let s3 = S3Options { endpoint: format!("https://127.0.0.1:{port}"), force_path_style: true };
        let (store, path) = open(&loc, &dir, &s3).unwrap();
        let err = object_store::ObjectStoreExt::head(&store, &path).await.unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(accepted.join().unwrap(), "the client connected: {}", why(&err));
    }

    #[test]
    fn errors_carry_their_causes() {
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("no CA certificates found")
            }
        }
        impl std::error::Error for Inner {}
        #[derive(Debug)]
        struct Outer(Inner);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("builder error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        assert_eq!(why(&Outer(Inner)), "builder error: no CA certificates found");
        assert_eq!(why(&Inner), "no CA certificates found");
    }

    #[test]
    fn aws_files_parse() {
        let c = ini("[default]\naws_access_key_id = AKIA\nAWS_SECRET_ACCESS_KEY=s3cr3t\n\n[other]\nx=y\n");
        assert_eq!(c["default"]["aws_access_key_id"], "AKIA");
        assert_eq!(c["default"]["aws_secret_access_key"], "s3cr3t");
        assert_eq!(c["other"]["x"], "y");
        let cfg = ini("# comment\n[profile default]\nregion = eu-west-1\n");
        assert_eq!(cfg["profile default"]["region"], "eu-west-1");
    }

    #[test]
    fn azure_clouds_have_their_endpoints() {
        assert_eq!(azure_endpoint("acct", None).unwrap(), "https://acct.blob.core.windows.net");
        assert_eq!(azure_endpoint("acct", Some("AzureChinaCloud")).unwrap(), "https://acct.blob.core.chinacloudapi.cn");
        assert!(azure_endpoint("acct", Some("Mars")).is_err());
    }

    /// A GCS service-account key is parsed (and will sign its token requests) with ring, the
    /// one provider linked: `build` reads the RSA key. The key was made for this test only
    /// (`openssl genpkey -algorithm RSA`) and grants nothing anywhere.
    #[test]
    fn a_gcs_service_account_key_is_read_with_the_linked_provider() {
        let pem = include_str!("testdata/gcs-test-only-rsa.pem");
        let key = serde_json::json!({
            "type": "service_account",
            "private_key": pem,
            "private_key_id": "test",
            "client_email": "backup@example.iam.gserviceaccount.com",
        });
        let dir = std::env::temp_dir().join(format!("store-gcs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("credentials-data"), key.to_string()).unwrap();
        let loc = Location { kind: Kind::Gcs, bucket: "b".into(), key: "k".into() };
        let opened = open(&loc, &dir, &S3Options::default()).map(|_| ());
        // A key ring cannot read is refused: the test tells the two apart.
        std::fs::write(dir.join("credentials-data"), key.to_string().replace("MII", "MIJ")).unwrap();
        let broken = open(&loc, &dir, &S3Options::default()).map(|_| ());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(opened, Ok(()));
        assert!(broken.is_err());
    }

    #[test]
    fn missing_secret_keys_are_named() {
        let dir = std::env::temp_dir().join(format!("eo-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let loc = Location { kind: Kind::S3, bucket: "b".into(), key: "k".into() };
        let err = open(&loc, &dir, &S3Options::default()).err().unwrap().to_string();
        assert!(err.contains("\"credentials\""), "{err}");
        std::fs::write(dir.join("credentials"), "[default]\naws_access_key_id=a\n").unwrap();
        let err = open(&loc, &dir, &S3Options::default()).err().unwrap().to_string();
        assert!(err.contains("aws_secret_access_key"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
