//! Conveniences that only create or patch objects (the operator carries them out):
//! `pause`/`unpause` (`spec.paused`, as in CoreOS) and `backup` (a one-shot EtcdBackup).

use anyhow::{Context, Result, bail};
use etcd_operator_api::backup::{AbsSource, BackupSource, EtcdBackup, EtcdBackupSpec, GcsSource, PvcSource, S3Source};
use etcd_operator_api::cluster::EtcdCluster;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::cli::BackupArgs;

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
    let (kind, rest) = a.to.split_once(':').context("--to is KIND:WHERE (pvc:, s3:, abs:, gcs:)")?;
    if rest.is_empty() {
        bail!("--to {}: nothing after the colon", a.to);
    }
    let creds = || a.credentials_secret.clone().with_context(|| format!("--to {kind}: needs --credentials-secret"));
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
                endpoint: a.endpoint.clone().unwrap_or_default(),
                force_path_style: a.force_path_style,
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
        other => bail!("--to {other}:…: the kinds are pvc, s3, abs and gcs"),
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
}
