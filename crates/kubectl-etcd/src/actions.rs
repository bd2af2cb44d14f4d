//! Conveniences that only create or patch objects (the operator carries them out):
//! `pause`/`unpause` (`spec.paused`, as in CoreOS), `backup` (a one-shot EtcdBackup) and
//! `restore` (an EtcdRestore, of one backup or of a point in time).

use anyhow::{Context, Result, bail};
use etcd_operator_api::backup::{AbsSource, BackupSource, EtcdBackup, EtcdBackupSpec, GcsSource, PvcSource, S3Source};
use etcd_operator_api::cluster::{AuthPolicy, EtcdCluster, EtcdClusterSpec};
use etcd_operator_api::restore::{EtcdClusterRef, EtcdRestore, EtcdRestoreSpec, PointInTime};
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::cli::{BackupArgs, RestoreArgs};

pub async fn pause(client: &kube::Client, ns: &str, name: &str, paused: bool) -> Result<i32> {
    let api: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"spec": {"paused": paused}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("EtcdCluster {ns}/{name}"))?;
    println!("etcdcluster {ns}/{name} {}", if paused { "paused" } else { "unpaused" });
    Ok(0)
}

/// `(storageType, source)` of `--to`.
pub fn destination(a: &BackupArgs) -> Result<(String, BackupSource)> {
    location("--to", &a.to, a.credentials_secret.as_deref(), a.endpoint.as_deref(), a.force_path_style)
}

/// `(storageType, source)` of a `KIND:WHERE` argument (`flag` names it in errors).
fn location(
    flag: &str,
    to: &str,
    credentials_secret: Option<&str>,
    endpoint: Option<&str>,
    force_path_style: bool,
) -> Result<(String, BackupSource)> {
    let (kind, rest) = to.split_once(':').with_context(|| format!("{flag} is KIND:WHERE (pvc:, s3:, abs:, gcs:)"))?;
    if rest.is_empty() {
        bail!("{flag} {to}: nothing after the colon");
    }
    let creds =
        || credentials_secret.map(str::to_string).with_context(|| format!("{flag} {kind}: needs --credentials-secret"));
    let mut src = BackupSource::default();
    let t = match kind.to_ascii_lowercase().as_str() {
        "pvc" => {
            let (claim, path) = rest.split_once('/').unwrap_or((rest, ""));
            src.pvc = Some(PvcSource { claim_name: claim.into(), path: path.into() });
            "PVC"
        }
        "s3" => {
            src.s3 = Some(S3Source {
                path: rest.into(),
                aws_secret: creds()?,
                endpoint: endpoint.unwrap_or_default().to_string(),
                force_path_style,
            });
            "S3"
        }
        "abs" => {
            src.abs = Some(AbsSource { path: rest.into(), abs_secret: creds()? });
            "ABS"
        }
        "gcs" => {
            src.gcs = Some(GcsSource { path: rest.into(), gcp_secret: creds()? });
            "GCS"
        }
        other => bail!("{flag} {other}:…: the kinds are pvc, s3, abs and gcs"),
    };
    Ok((t.into(), src))
}

pub async fn backup(client: &kube::Client, ns: &str, a: &BackupArgs) -> Result<i32> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let c = clusters.get(&a.name).await.with_context(|| format!("EtcdCluster {ns}/{}", a.name))?;
    let (storage_type, source) = destination(a)?;
    // The client certificate a backup pod uses: the static operator Secret (same keys), or the
    // application client Secret `spec.TLS.auto` makes.
    let client_tls_secret = match c.spec.tls.as_ref() {
        Some(t) if t.auto.is_some() => format!("{}-tls-client", a.name),
        _ => crate::connect::operator_tls_secret(&c).unwrap_or_default(),
    };
    let name = a.backup_name.clone().unwrap_or_else(|| format!("{}-{}", a.name, crate::status::now()));
    let spec =
        EtcdBackupSpec { cluster_name: a.name.clone(), storage_type, source, client_tls_secret, ..Default::default() };
    let b = EtcdBackup::new(&name, spec);
    let api: Api<EtcdBackup> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &b).await.with_context(|| format!("creating EtcdBackup {ns}/{name}"))?;
    println!("etcdbackup {ns}/{name} created (kubectl -n {ns} get etcdbackup {name} shows its progress)");
    Ok(0)
}

/// The EtcdRestore `restore` creates.
pub fn restore_object(a: &RestoreArgs) -> Result<EtcdRestore> {
    let (backup_storage_type, source) =
        location("--from", &a.from, a.credentials_secret.as_deref(), a.endpoint.as_deref(), a.force_path_style)?;
    let spec = (a.size.is_some() || a.version.is_some() || a.root_secret.is_some()).then(|| EtcdClusterSpec {
        size: a.size.unwrap_or(3),
        version: a.version.clone().unwrap_or_default(),
        auth: a.root_secret.as_ref().map(|s| AuthPolicy { enabled: true, root_secret: s.clone() }),
        ..Default::default()
    });
    let point_in_time = (a.revision.is_some() || a.time.is_some()).then(|| PointInTime {
        revision: a.revision,
        time: a.time.clone(),
        cluster_id: None,
    });
    let name = a.restore_name.clone().unwrap_or_else(|| a.name.clone());
    Ok(EtcdRestore::new(
        &name,
        EtcdRestoreSpec {
            backup_storage_type,
            source,
            etcd_cluster: EtcdClusterRef { name: a.name.clone(), spec },
            point_in_time,
        },
    ))
}

pub async fn restore(client: &kube::Client, ns: &str, a: &RestoreArgs) -> Result<i32> {
    let r = restore_object(a)?;
    let name = r.metadata.name.clone().unwrap_or_default();
    let api: Api<EtcdRestore> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &r).await.with_context(|| format!("creating EtcdRestore {ns}/{name}"))?;
    println!("etcdrestore {ns}/{name} created (kubectl -n {ns} get etcdrestore {name} shows its progress)");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(to: &str, creds: Option<&str>) -> BackupArgs {
        BackupArgs {
            name: "ex".into(),
            to: to.into(),
            credentials_secret: creds.map(str::to_string),
            endpoint: None,
            force_path_style: false,
            backup_name: None,
        }
    }

    #[test]
    fn destinations() {
        let (t, s) = destination(&args("pvc:backups/etcd/ex.db", None)).unwrap();
        assert_eq!(
            (t.as_str(), s.pvc.unwrap()),
            ("PVC", PvcSource { claim_name: "backups".into(), path: "etcd/ex.db".into() })
        );
        let (t, s) = destination(&args("s3:bucket/key", Some("aws"))).unwrap();
        assert_eq!((t.as_str(), s.s3.unwrap().aws_secret), ("S3", "aws".to_string()));
        assert!(destination(&args("s3:bucket/key", None)).unwrap_err().to_string().contains("--credentials-secret"));
        assert!(destination(&args("ftp:x", None)).is_err());
        assert!(destination(&args("pvc:", None)).is_err());
    }

    #[test]
    fn a_restore_of_a_point_names_the_series_and_the_point() {
        let a = RestoreArgs {
            name: "back".into(),
            from: "s3:bucket/etcd/ex".into(),
            revision: None,
            time: Some("2026-11-28T01:00:00Z".into()),
            credentials_secret: Some("aws".into()),
            endpoint: None,
            force_path_style: true,
            size: Some(1),
            version: None,
            restore_name: None,
            root_secret: None,
        };
        let r = restore_object(&a).unwrap();
        assert_eq!(r.metadata.name.as_deref(), Some("back"));
        assert_eq!(
            (r.spec.backup_storage_type.as_str(), r.spec.source.s3.as_ref().unwrap().path.as_str()),
            ("S3", "bucket/etcd/ex")
        );
        assert_eq!(r.spec.point_in_time.as_ref().unwrap().time.as_deref(), Some("2026-11-28T01:00:00Z"));
        assert_eq!(r.spec.etcd_cluster.spec.as_ref().map(|s| s.size), Some(1));
        assert_eq!(r.spec.etcd_cluster.spec.as_ref().and_then(|s| s.auth.clone()), None);
        let auth =
            restore_object(&RestoreArgs { size: None, root_secret: Some("ex-root".into()), ..a.clone() }).unwrap();
        let spec = auth.spec.etcd_cluster.spec.unwrap();
        assert_eq!(
            (spec.size, spec.version.as_str(), spec.auth),
            (3, "", Some(AuthPolicy { enabled: true, root_secret: "ex-root".into() })),
            "3 members of the backup's version, authentication on with the Secret named"
        );
        let one = restore_object(&RestoreArgs { time: None, size: None, ..a }).unwrap();
        assert_eq!(
            (one.spec.point_in_time, one.spec.etcd_cluster.spec),
            (None, None),
            "one backup, the default cluster"
        );
    }
}
