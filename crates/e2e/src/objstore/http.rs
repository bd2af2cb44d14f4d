//! The HTTP side of the object-store clients: a blocking ureq agent that sends exactly the
//! headers it is given (the signature covers them), URI encoding, and just enough XML for
//! listings and errors.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use anyhow::{Context, Result, bail};

#[derive(Clone)]
pub(super) struct Http(ureq::Agent);

impl Http {
    pub(super) fn new() -> Http {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .timeout_connect(Some(Duration::from_secs(5)))
            .build();
        Http(ureq::Agent::new_with_config(config))
    }

    /// Sends the request with exactly `headers` (plus what HTTP itself needs) and returns the
    /// status, the response headers (names lower-cased) and the whole body.
    pub(super) fn send(
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

pub(super) fn user_metadata(headers: &BTreeMap<String, String>, prefix: &str) -> BTreeMap<String, String> {
    headers.iter().filter_map(|(k, v)| k.strip_prefix(prefix).map(|n| (n.to_string(), v.clone()))).collect()
}

/// RFC 3986 percent-encoding of everything but unreserved characters (and `/` unless
/// `encode_slash`), as both S3 SigV4 and Azure expect.
pub(super) fn uri_encode(s: &str, encode_slash: bool) -> String {
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
pub(super) fn query_string(query: &[(&str, &str)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let parts: Vec<String> =
        query.iter().map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true))).collect();
    format!("?{}", parts.join("&"))
}

/// The contents of every `<tag>...</tag>` in `xml` (not nested in themselves).
pub(super) fn xml_elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
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
pub(super) fn xml_text(xml: &str, tag: &str) -> Option<String> {
    xml_elements(xml, tag).first().map(|t| {
        t.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
    })
}

pub(super) fn ensure_status(what: &str, status: u16, ok: &[u16], body: &[u8]) -> Result<()> {
    if ok.contains(&status) {
        return Ok(());
    }
    bail!("{what}: {status} {}", String::from_utf8_lossy(body))
}

pub(super) fn error_code(body: &[u8]) -> String {
    xml_text(&String::from_utf8_lossy(body), "Code").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_listing() {
        let xml = "<R><Contents><Key>a&amp;b</Key><Size>3</Size></Contents><Contents><Key>c</Key></Contents>\
                   <IsTruncated>false</IsTruncated></R>";
        let keys: Vec<_> = xml_elements(xml, "Contents").iter().map(|c| xml_text(c, "Key").unwrap()).collect();
        assert_eq!(keys, ["a&b", "c"]);
        assert_eq!(xml_text(xml, "IsTruncated").as_deref(), Some("false"));
    }
}
