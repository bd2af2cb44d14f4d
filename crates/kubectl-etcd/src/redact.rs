//! Redaction for the support bundle. Two layers: fields that hold secrets by their name
//! (`password`, `token`, keys; environment variables so named) are replaced in every object,
//! and every value of every Secret of the namespace (read into memory only, never written) is
//! scrubbed from every file, logs included. Pure.

use serde_json::Value;

pub const REDACTED: &str = "[REDACTED]";

/// A field or environment variable name that holds a secret, not a reference to one
/// (`passwordSecret`, `rootSecret`, `authSecret` name Secrets and are kept).
pub fn secret_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace(['-', '_', '.'], "");
    let names_a_secret =
        k.ends_with("secret") || k.ends_with("secretname") || k.ends_with("ref") || k.ends_with("file");
    if names_a_secret {
        return false;
    }
    ["password", "passwd", "token", "apikey", "privatekey", "secretkey", "accesskey", "credential", "clientkey"]
        .iter()
        .any(|w| k.contains(w))
        || k.ends_with("clientkey")
        || k.ends_with("keydata")
}

/// Replaces secret fields of `v`, drops `managedFields` and the last-applied annotation (a
/// copy of what was applied, literal values included).
pub fn object(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("managedFields");
            if let Some(Value::Object(a)) = map.get_mut("annotations") {
                a.remove("kubectl.kubernetes.io/last-applied-configuration");
            }
            // An environment variable {name, value}.
            let env_secret =
                map.get("name").and_then(Value::as_str).is_some_and(secret_name) && map.contains_key("value");
            if env_secret {
                map.insert("value".into(), Value::String(REDACTED.into()));
            }
            // A Secret's data never leaves, whoever asked for it.
            if map.get("kind").and_then(Value::as_str) == Some("Secret") {
                map.remove("data");
                map.remove("stringData");
            }
            for (k, val) in map.iter_mut() {
                if secret_name(k) && (val.is_string() || val.is_number()) {
                    *val = Value::String(REDACTED.into());
                } else {
                    object(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(object),
        _ => {}
    }
}

/// The pieces of Secret values to scrub from text: each value, and each line of a multi-line
/// value (PEM), when long enough not to match ordinary words (6+ bytes).
pub fn needles(values: &[Vec<u8>]) -> Vec<String> {
    let mut out = vec![];
    for v in values {
        let Ok(s) = std::str::from_utf8(v) else { continue };
        for piece in std::iter::once(s.trim()).chain(s.lines().map(str::trim)) {
            if piece.len() >= 6 && !piece.starts_with("-----") {
                out.push(piece.to_string());
            }
        }
    }
    // Longest first: a value containing another is replaced whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// `text` with every needle replaced.
pub fn scrub(text: &str, needles: &[String]) -> String {
    let mut t = text.to_string();
    for n in needles {
        if t.contains(n.as_str()) {
            t = t.replace(n.as_str(), REDACTED);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_fields_are_redacted_and_references_kept() {
        let mut v = json!({
            "kind": "EtcdBackup",
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"password\":\"p\"}", "a": "b"}, "managedFields": [{}]},
            "spec": {"authSecret": "root", "clientTLSSecret": "tls", "s3": {"awsSecret": "aws", "path": "b/k"}, "password": "hunter22", "token": "t0k3n-xyz"},
            "env": [{"name": "ETCD_ROOT_PASSWORD", "value": "hunter22"}, {"name": "ETCD_NAME", "value": "m1"},
                    {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}],
        });
        object(&mut v);
        let text = v.to_string();
        assert!(!text.contains("hunter22") && !text.contains("t0k3n"), "{text}");
        assert!(!text.contains("managedFields") && !text.contains("last-applied"), "{text}");
        for kept in [
            "\"authSecret\":\"root\"",
            "\"clientTLSSecret\":\"tls\"",
            "\"awsSecret\":\"aws\"",
            "\"value\":\"m1\"",
            "\"a\":\"b\"",
        ] {
            assert!(text.contains(kept), "{kept} in {text}");
        }
        // A secretKeyRef names a Secret and its key: kept.
        assert!(text.contains(r#""secretKeyRef":{"key":"token","name":"s"}"#), "{text}");
    }

    #[test]
    fn secret_objects_lose_their_data() {
        let mut v = json!({"items": [{"kind": "Secret", "data": {"password": "aHVudGVy"}, "stringData": {"x": "y"}}]});
        object(&mut v);
        assert_eq!(v, json!({"items": [{"kind": "Secret"}]}));
    }

    #[test]
    fn every_secret_value_is_scrubbed_from_text() {
        let password = b"Zq8-ui3-Lp0".to_vec();
        let pem = b"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n".to_vec();
        let short = b"abc".to_vec();
        let n = needles(&[password, pem, short]);
        let log = "login root:Zq8-ui3-Lp0 ok\nkey MIIEvQIBADANBgkqhkiG9w0BAQEFAASC and BKcwggSjAgEAAoIBAQC7\nabc stays";
        let out = scrub(log, &n);
        for leaked in ["Zq8-ui3-Lp0", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "BKcwggSjAgEAAoIBAQC7"] {
            assert!(!out.contains(leaked), "{leaked} left in {out}");
        }
        assert!(out.contains("abc stays"), "short values are not scrubbed: {out}");
        assert_eq!(out.matches(REDACTED).count(), 3, "{out}");
    }

    #[test]
    fn names() {
        for s in ["password", "rootPassword", "token", "ETCD_ROOT_PASSWORD", "privateKey", "AWS_SECRET_ACCESS_KEY"] {
            assert!(secret_name(s), "{s}");
        }
        for s in ["passwordSecret", "rootSecret", "authSecret", "name", "claimName", "secretKeyRef", "keyFile", "key"] {
            assert!(!secret_name(s), "{s}");
        }
    }
}
