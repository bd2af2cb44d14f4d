//! Azurite's blob service and a Blob service client for it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

use super::http::{Http, ensure_status, query_string, uri_encode, user_metadata, xml_elements, xml_text};
use super::signing::{azure_authorization, azure_string_to_sign, http_date};
use super::{
    AZURE_API_VERSION, AZURITE_ACCOUNT, AZURITE_KEY, ObjectInfo, ObjectServer, ServerProcess, StoredObject,
    abs_secret_manifest, host_address,
};

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
        let client = AbsClient::new(&host, proc.port());
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
    fn process(&self) -> &ServerProcess {
        &self.proc
    }
    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.proc
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
}
