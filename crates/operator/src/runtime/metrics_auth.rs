//! Who may read `/metrics` (`--metrics-auth`). `none`: anyone who reaches the port (the
//! binary's default, so that an image upgrade under an old Deployment and its RBAC changes
//! nothing). `kubernetes` (what `manifests` and the Helm chart install): a bearer token that the
//! API server authenticates (TokenReview) and allows `get` on the non-resource URL `/metrics`
//! (SubjectAccessReview), the check kube-rbac-proxy and controller-runtime's metrics filter
//! make; Prometheus sends such a token from a Secret (the PodMonitor's `authorization`).
//! `/healthz` and `/readyz` stay open (the kubelet's probes carry no token).
//!
//! Answers are cached by the token's sha256 (allowed for a minute, refused for 10 s), so a
//! scrape every 30 s costs the API server two reviews a minute at most; a failed review is
//! never cached. I/O: the two review APIs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

/// `--metrics-auth`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Anyone who reaches the port.
    #[default]
    None,
    /// A bearer token the API server authenticates and allows `get` on `/metrics`.
    Kubernetes,
}

/// The path whose `get` a reader must be allowed (a non-resource URL, as for the API server's
/// own metrics: the `system:monitoring` ClusterRole and Prometheus' usual RBAC grant it).
pub const PATH: &str = "/metrics";
const ALLOWED_FOR: Duration = Duration::from_secs(60);
const REFUSED_FOR: Duration = Duration::from_secs(10);
const CACHE_LIMIT: usize = 1024;

/// What the reviews said of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Not a token the API server knows (401).
    Unauthenticated,
    /// Known, but not allowed to `get /metrics` (403); the user, for the log.
    Forbidden(String),
}

/// How a request for `/metrics` is answered before the metrics: `Ok` serves them, `Err` is the
/// status and body.
pub type Answer = Result<(), (u16, String)>;

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The answer for a verdict (or for a review that could not be made).
pub fn answer(verdict: Result<Verdict, String>) -> Answer {
    match verdict {
        Ok(Verdict::Allowed) => Ok(()),
        Ok(Verdict::Unauthenticated) => Err((401, "a bearer token the API server authenticates is needed\n".into())),
        Ok(Verdict::Forbidden(user)) => Err((403, format!("{user} may not get {PATH}\n"))),
        Err(e) => Err((503, format!("the token could not be reviewed: {e}\n"))),
    }
}

/// Reviews tokens with the API server, remembering recent verdicts.
pub struct Reviewer {
    client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
}

impl Reviewer {
    pub fn new(client: kube::Client) -> Reviewer {
        Reviewer { client, cache: Mutex::new(HashMap::new()) }
    }

    /// The answer for a request with this `Authorization` header.
    pub async fn check(&self, header: Option<&str>) -> Answer {
        let Some(token) = bearer(header) else { return answer(Ok(Verdict::Unauthenticated)) };
        let key: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into();
        let cached = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        if let Some((v, _)) = cached.filter(|(_, until)| *until > Instant::now()) {
            return answer(Ok(v));
        }
        let verdict = self.review(token).await;
        if let Ok(v) = &verdict {
            let ttl = if *v == Verdict::Allowed { ALLOWED_FOR } else { REFUSED_FOR };
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_LIMIT {
                let now = Instant::now();
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= CACHE_LIMIT {
                    cache.clear();
                }
            }
            cache.insert(key, (v.clone(), Instant::now() + ttl));
        }
        if let Ok(Verdict::Forbidden(user)) = &verdict {
            tracing::info!(%user, "refused a /metrics request: not allowed to get {PATH}");
        }
        answer(verdict)
    }

    async fn review(&self, token: &str) -> Result<Verdict, String> {
        let tr = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
            ..Default::default()
        };
        let tr = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &tr)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let Some(st) = tr.status.filter(|s| s.authenticated == Some(true)) else {
            return Ok(Verdict::Unauthenticated);
        };
        let user = st.user.unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(PATH.into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let sar = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        Ok(if sar.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden(user.username.unwrap_or_default())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_taken() {
        assert_eq!(bearer(Some("Bearer abc.def")), Some("abc.def"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic dXNlcjpwYXNz")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("abc")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn verdicts_become_401_403_and_503() {
        assert_eq!(answer(Ok(Verdict::Allowed)), Ok(()));
        assert_eq!(answer(Ok(Verdict::Unauthenticated)).unwrap_err().0, 401);
        let (code, body) = answer(Ok(Verdict::Forbidden("system:serviceaccount:ns:x".into()))).unwrap_err();
        assert_eq!(code, 403);
        assert!(body.contains("system:serviceaccount:ns:x may not get /metrics"), "{body}");
        assert_eq!(answer(Err("timeout".into())).unwrap_err().0, 503);
    }
}
