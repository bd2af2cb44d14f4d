//! Request signing, computed here from the specifications (nothing shared with the operator's
//! object-store code): S3 Signature Version 4 for moto, Azure Shared Key for Azurite, and the
//! dates both put in their headers.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::{digest, hmac};

use super::S3_REGION;
use super::http::uri_encode;

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
pub(super) fn http_date(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (y, mo, d, h, mi, s, wd) = utc(t);
    format!("{}, {d:02} {} {y} {h:02}:{mi:02}:{s:02} GMT", DAYS[wd as usize], MONTHS[mo as usize - 1])
}

/// S3 Signature Version 4 for a path-style request. `headers` are lower-cased; returns the
/// `Authorization` value and the headers to send (the given ones plus host, x-amz-date and
/// x-amz-content-sha256, all signed).
#[allow(clippy::too_many_arguments)]
pub(super) fn sigv4_authorization(
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
pub(super) fn azure_string_to_sign(
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

pub(super) fn azure_authorization(account: &str, key_b64: &str, string_to_sign: &str) -> Result<String> {
    let key = BASE64.decode(key_b64).context("the account key is not base64")?;
    Ok(format!("SharedKey {account}:{}", BASE64.encode(hmac_sha256(&key, string_to_sign.as_bytes()))))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::AZURE_API_VERSION;
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
}
