//! The auth RPCs the operator makes (I/O), each idempotent so that a step repeated after an
//! operator restart (or a lost answer) does no harm: `user add` of an existing root user and
//! `role add` of an existing root role count as done, `auth enable` of an enabled cluster is a
//! no-op in etcd.

use etcd_client::Client;

use super::{Access, Error, change_client, with_deadline};
use crate::auth::{ROOT, RootUser};

/// Time for one auth change; etcd commits it through raft (and hashes a password with bcrypt).
const AUTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// What etcd has of the root user (asked while authentication is off).
pub async fn root_user(client: &mut Client) -> Result<RootUser, Error> {
    match with_deadline("user get root", AUTH_TIMEOUT, client.user_get(ROOT)).await {
        Ok(u) if u.roles().iter().any(|r| r == ROOT) => Ok(RootUser::WithRootRole),
        Ok(_) => Ok(RootUser::WithoutRootRole),
        Err(e) if e.to_string().contains("user name not found") => Ok(RootUser::Missing),
        Err(e) => Err(e),
    }
}

/// `user add root` with `password` (an existing root user is left as it is: its password is
/// set when authentication is turned on).
pub async fn add_root_user(endpoints: &[String], access: Access<'_>, password: &str) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    match with_deadline("user add root", AUTH_TIMEOUT, c.user_add(ROOT, password, None)).await {
        Err(e) if e.to_string().contains("user name already exists") => Ok(()),
        r => r.map(|_| ()),
    }
}

/// `role add root` (unless it exists) and `user grant-role root root`.
pub async fn grant_root_role(endpoints: &[String], access: Access<'_>) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    match with_deadline("role add root", AUTH_TIMEOUT, c.role_add(ROOT)).await {
        Err(e) if e.to_string().contains("role name already exists") => {}
        r => r.map(|_| ())?,
    }
    with_deadline("user grant-role root root", AUTH_TIMEOUT, c.user_grant_role(ROOT, ROOT)).await.map(|_| ())
}

/// Sets the root password (the root user may have existed before with another one) and turns
/// authentication on.
pub async fn enable(endpoints: &[String], access: Access<'_>, password: &str) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("user passwd root", AUTH_TIMEOUT, c.user_change_password(ROOT, password)).await?;
    with_deadline("auth enable", AUTH_TIMEOUT, c.auth_enable()).await.map(|_| ())
}

/// `user passwd root`, logged in as root with the old password.
pub async fn change_root_password(endpoints: &[String], access: Access<'_>, password: &str) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("user passwd root", AUTH_TIMEOUT, c.user_change_password(ROOT, password)).await.map(|_| ())
}

/// `auth disable`, logged in as root (the root user and role stay).
pub async fn disable(endpoints: &[String], access: Access<'_>) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("auth disable", AUTH_TIMEOUT, c.auth_disable()).await.map(|_| ())
}
