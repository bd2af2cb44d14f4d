//! Connecting to etcd as root (I/O): every etcd client the operator and its pods make goes
//! through [`connect`] when credentials are known. It logs in with the first password etcd
//! accepts and falls back to connecting as nobody when etcd's authentication is off (etcd
//! refuses a login then), so the same code serves both states and the moves between them.
//!
//! A learner refuses logins (etcd serves it only Status and serializable reads), yet since etcd
//! 3.4.44/3.5.28/3.6 its Status needs a token: [`connect_member`] logs in through another member
//! and then sends that token to the learner, which knows it once it has applied the login (a
//! login is a raft entry).

use etcd_client::Client;

use crate::tls::connector::Dialer;

use super::Credentials;

/// How a connection was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Login {
    /// No credentials were given: connected as nobody.
    #[default]
    Anonymous,
    /// Credentials were given, but etcd's authentication is off: connected as nobody.
    NotEnabled,
    /// Logged in; `fallback`: with the password recorded as applied, etcd having refused the
    /// root Secret's.
    Root { fallback: bool },
}

/// etcd's answer to a login while authentication is off.
pub fn is_not_enabled(e: &etcd_client::Error) -> bool {
    e.to_string().contains("authentication is not enabled")
}

/// etcd refused the user name or password.
pub fn is_bad_password(e: &etcd_client::Error) -> bool {
    e.to_string().contains("authentication failed, invalid user ID or password")
}

/// A learner refused the call (a login, for one).
pub fn is_learner_refusal(e: &etcd_client::Error) -> bool {
    e.to_string().contains("rpc not supported for learner")
}

/// etcd refused the call for want of a (valid) login: authentication is on.
pub fn is_auth_refusal(text: &str) -> bool {
    [
        "user name is empty",
        "permission denied",
        "invalid auth token",
        "authentication failed, invalid user ID or password",
    ]
    .iter()
    .any(|m| text.contains(m))
}

/// Connect to `endpoints` with `base` options, logged in as `creds` when etcd's authentication
/// is on (each password in order; the last refusal is returned if none is accepted), as nobody
/// without credentials or when it is off.
///
/// Logged in, the client talks to one member (the first of `endpoints` that lets it log in): a
/// login is a raft entry, and a member that has not applied it yet refuses the token ("invalid
/// auth token"), so calls balanced across members right after a login fail at random.
pub async fn connect(
    endpoints: &[String],
    base: &Dialer,
    creds: Option<&Credentials>,
) -> Result<(Client, Login), etcd_client::Error> {
    let Some(creds) = creds else {
        return Box::pin(base.connect(endpoints)).await.map(|c| (c, Login::Anonymous));
    };
    let mut last = None;
    'members: for endpoint in endpoints {
        for (i, password) in creds.passwords().enumerate() {
            // A token lapses when its member restarts (or after 5 idle minutes): log in again then.
            let login = base.map(|o| o.with_user(creds.user.clone(), password.clone()).with_auto_token_refresh(true));
            // Boxed: a client's connect future is large, and a debug build's stack is not.
            match Box::pin(login.connect(std::slice::from_ref(endpoint))).await {
                Ok(c) => return Ok((c, Login::Root { fallback: creds.is_fallback(i) })),
                Err(e) if is_not_enabled(&e) => {
                    return Box::pin(base.connect(endpoints)).await.map(|c| (c, Login::NotEnabled));
                }
                // The password is the cluster's: another member would refuse it just the same.
                Err(e) if is_bad_password(&e) => last = Some(e),
                // This member cannot take a login now (down, a learner): the next one.
                Err(e) => {
                    last = Some(e);
                    continue 'members;
                }
            }
        }
        break;
    }
    Err(last.unwrap_or_else(|| etcd_client::Error::InvalidArgs("no endpoint or password to log in with".into())))
}

/// A client of the one member at `url`. A learner refuses logins: with credentials, the login
/// goes through one of `others` (other members' URLs) and the connection then moves to `url`
/// with its token.
pub async fn connect_member(
    url: &str,
    others: &[String],
    base: &Dialer,
    creds: Option<&Credentials>,
) -> Result<(Client, Login), etcd_client::Error> {
    let first = Box::pin(connect(&[url.to_string()], base, creds)).await;
    let refused = match first {
        Err(e) if creds.is_some() && is_learner_refusal(&e) => e,
        r => return r,
    };
    for other in others.iter().filter(|o| o.as_str() != url) {
        let Ok((c, login)) = Box::pin(connect(std::slice::from_ref(other), base, creds)).await else {
            continue;
        };
        c.add_endpoint(url).await?;
        c.remove_endpoint(other).await?;
        return Ok((c, login));
    }
    Err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (The client wraps etcd's gRPC status; only its message is matched.)
    fn grpc(msg: &str) -> etcd_client::Error {
        etcd_client::Error::InvalidArgs(msg.to_string())
    }

    /// etcd's own messages (api/v3rpc/rpctypes/error.go), as the client reports them.
    #[test]
    fn etcd_refusals_are_told_apart() {
        assert!(is_not_enabled(&grpc("etcdserver: authentication is not enabled")));
        assert!(is_bad_password(&grpc("etcdserver: authentication failed, invalid user ID or password")));
        assert!(is_learner_refusal(&grpc("etcdserver: rpc not supported for learner")));
        assert!(!is_not_enabled(&grpc("etcdserver: user name is empty")));
        for m in ["etcdserver: user name is empty", "etcdserver: permission denied", "etcdserver: invalid auth token"] {
            assert!(is_auth_refusal(&grpc(m).to_string()), "{m}");
        }
        assert!(!is_auth_refusal("etcdserver: no leader"));
    }
}
