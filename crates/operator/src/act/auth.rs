//! Authentication steps (`spec.auth`): the auth RPCs through the healthy voters (logged in as
//! root once etcd requires it), with the password being set recorded (as pending) before and
//! the root password etcd has after. The password is
//! the root Secret's, read by `observe` into the endpoints' credentials; it never reaches a note,
//! an Event or a log.

use super::auth_secrets as secrets;
use super::{Done, Error, Target, done};
use crate::etcd::auth_calls as calls;
use crate::planner::auth::AuthStep;

impl Target<'_> {
    pub(super) async fn auth(&self, step: AuthStep) -> Result<Done, Error> {
        let endpoints = self.change_endpoints();
        let access = self.endpoints.access();
        let secret = self.desired().auth.root_secret().unwrap_or_default().to_string();
        let password = access
            .root
            .and_then(|r| r.secret_password())
            .ok_or_else(|| Error::Refused(format!("Secret {secret} holds no usable root password")));
        Ok(match step {
            AuthStep::AddRootUser => {
                calls::add_root_user(&endpoints, access, password?).await?;
                done("RootUserAdded", format!("etcd user root added with the password of Secret {secret}"))
            }
            AuthStep::GrantRootRole => {
                calls::grant_root_role(&endpoints, access).await?;
                done("RootRoleGranted", "etcd user root has the root role".into())
            }
            AuthStep::Enable => {
                let password = password?;
                self.record_pending(password).await?;
                calls::enable(&endpoints, access, password).await?;
                let note = self.record(password, "etcd authentication is on: clients must log in").await;
                done("AuthEnabled", note)
            }
            AuthStep::ChangeRootPassword => {
                let password = password?;
                self.record_pending(password).await?;
                calls::change_root_password(&endpoints, access, password).await?;
                let note = self.record(password, &format!("root password changed to the one of Secret {secret}")).await;
                done("RootPasswordChanged", note)
            }
            AuthStep::Disable => {
                calls::disable(&endpoints, access).await?;
                done("AuthDisabled", "etcd authentication is off (the root user is kept)".into())
            }
        })
    }

    /// Before a password is set in etcd: the record keeps the one recorded as applied and adds
    /// `password` as pending, so that an operator stopped before [`Target::record`] (or whose
    /// record then fails) logs in with either, whatever became of the root Secret meanwhile.
    /// Nothing is changed in etcd unless this is written.
    async fn record_pending(&self, password: &str) -> Result<(), Error> {
        let recorded = self.endpoints.access().root.and_then(|r| r.recorded_password());
        secrets::record_pending(self.client, self.cluster, recorded, password).await.map_err(|e| {
            Error::Refused(format!(
                "the password being set could not be recorded first in Secret {} ({e}); nothing was changed in etcd",
                crate::auth::applied_secret(&self.cluster.metadata.name.clone().unwrap_or_default())
            ))
        })
    }

    /// Records `password` as the one etcd has; a failure is said in the note and retried beside
    /// later steps (`planner::auth::upkeep`): etcd already has the password, which the root Secret holds.
    async fn record(&self, password: &str, note: &str) -> String {
        match secrets::record_applied(self.client, self.cluster, password).await {
            Ok(()) => note.to_string(),
            Err(e) => format!(
                "{note}; recording it in Secret {} failed ({e}), retried",
                crate::auth::applied_secret(&self.cluster.metadata.name.clone().unwrap_or_default())
            ),
        }
    }
}
