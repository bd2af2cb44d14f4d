//! moto's S3 server and a path-style S3 client for it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

use super::http::{Http, ensure_status, error_code, query_string, uri_encode, user_metadata, xml_elements, xml_text};
use super::signing::sigv4_authorization;
use super::{
    ObjectInfo, ObjectServer, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, ServerProcess, StoredObject, host_address,
    s3_secret_manifest,
};

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
        let client = S3Client::new(&host, proc.port());
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
    fn process(&self) -> &ServerProcess {
        &self.proc
    }
    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.proc
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
}
