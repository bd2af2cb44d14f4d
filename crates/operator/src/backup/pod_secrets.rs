//! What a pod command reads from the Secrets mounted into it (I/O, pod side): the etcd login
//! ([`AuthArgs`]: `spec.auth`'s applied Secret, EtcdBackup `authSecret`) and the etcd client
//! certificate ([`ClientTlsArgs`]: `clientTLSSecret`). Where they are mounted and how that is said
//! on the command line is the contract's (`contract`, pure); the object store's credentials are
//! read by `store`.

use std::collections::BTreeMap;
use std::path::Path;

use super::contract::{AuthArgs, ClientTlsArgs, PodError};
use crate::auth::Credentials;
use crate::tls::material::ClientTls;

/// The credentials from the mounted files, or None without a login. A mounted Secret that does
/// not exist (an optional volume) leaves the directory empty: no login either.
pub fn login(args: &AuthArgs) -> Result<Option<Credentials>, PodError> {
    if args.auth_dir.is_empty() {
        return Ok(None);
    }
    let dir = Path::new(&args.auth_dir);
    let mut data = BTreeMap::new();
    for key in [crate::auth::USERNAME_KEY, crate::auth::PASSWORD_KEY] {
        match std::fs::read(dir.join(key)) {
            Ok(v) => {
                data.insert(key.to_string(), v);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}/{key}: {e}", args.auth_dir).into()),
        }
    }
    if data.is_empty() {
        return Ok(None);
    }
    Ok(crate::auth::login(&args.auth_dir, &data).map(Some)?)
}

/// The client identity from the mounted files, or None for plaintext.
pub fn client_tls(args: &ClientTlsArgs) -> Result<Option<ClientTls>, PodError> {
    if args.client_tls_dir.is_empty() {
        return Ok(None);
    }
    ClientTls::from_dir(&args.client_tls_dir, &args.client_tls_server_name)
        .map(Some)
        .map_err(|e| format!("client TLS files in {}: {e}", args.client_tls_dir).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_is_read_from_the_mounted_secret_files() {
        assert!(login(&AuthArgs::of(None)).unwrap().is_none());
        let dir = std::env::temp_dir().join(format!("auth-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = AuthArgs { auth_dir: dir.display().to_string() };
        assert!(login(&a).unwrap().is_none(), "an optional Secret that does not exist: no login");
        std::fs::write(dir.join("password"), "p").unwrap();
        let c = login(&a).unwrap().unwrap();
        assert_eq!((c.user.as_str(), c.secret_password()), ("root", Some("p")));
        std::fs::write(dir.join("password"), "p\n").unwrap();
        let e = login(&a).unwrap_err();
        assert!(matches!(&e, PodError::Transient(why) if why.contains("line break")), "{e:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_client_certificate_is_read_from_its_mount_or_none_for_plaintext() {
        assert!(client_tls(&ClientTlsArgs::of("")).unwrap().is_none());
        let e = client_tls(&ClientTlsArgs::of("s")).unwrap_err();
        assert!(e.to_string().contains("/etc/etcdtls/operator/etcd-tls"), "{e}");
    }
}
