//! Membership changes, each through the cluster's quorum: add a learner, promote it, remove a
//! member, update a member's peer URLs, hand leadership over.

use etcd_client::MemberAddOptions;

use super::{Access, CHANGE_TIMEOUT, Error, change_client, with_deadline};

/// Register a learner with the given peer URL; returns its member ID.
pub async fn add_learner(endpoints: &[String], access: Access<'_>, peer_url: &str) -> Result<u64, Error> {
    let mut c = change_client(endpoints, access).await?;
    let r = with_deadline(
        "member add",
        CHANGE_TIMEOUT,
        c.member_add([peer_url], Some(MemberAddOptions::new().with_is_learner())),
    )
    .await?;
    Ok(r.member().map(|m| m.id()).unwrap_or_default())
}

pub async fn promote(endpoints: &[String], access: Access<'_>, id: u64) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("member promote", CHANGE_TIMEOUT, c.member_promote(id)).await.map(|_| ())
}

pub async fn remove(endpoints: &[String], access: Access<'_>, id: u64) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("member remove", CHANGE_TIMEOUT, c.member_remove(id)).await.map(|_| ())
}

/// Change a member's peer URLs (etcd's member update); through the cluster's quorum like any
/// membership change.
pub async fn update_peer_urls(endpoints: &[String], access: Access<'_>, id: u64, urls: &[String]) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("member update", CHANGE_TIMEOUT, c.member_update(id, urls.to_vec())).await.map(|_| ())
}

/// Hand leadership to `to`; must be sent to the current leader.
pub async fn move_leader(leader_endpoint: &str, access: Access<'_>, to: u64) -> Result<(), Error> {
    let mut c = change_client(&[leader_endpoint.to_string()], access).await?;
    with_deadline(leader_endpoint, CHANGE_TIMEOUT, c.move_leader(to)).await.map(|_| ())
}
