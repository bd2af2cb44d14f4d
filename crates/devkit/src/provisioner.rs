//! `devkit provision`: an external provisioner of host directories for the local cluster. It
//! watches claims, volumes and StorageClasses; every change (and a 10 s tick, which retries
//! failures) runs one pass over what the watches hold: claims of its classes get a directory and
//! a pre-bound PersistentVolume (the PV controller binds them), Released volumes of its own with
//! policy Delete lose their directory and then their object. The decisions are in `provision.rs`.
//!
//! A pass only acts on what the API holds, so a restart (which re-lists) picks up whatever was
//! missed; creating a volume that exists already and deleting one that is gone both count as done.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use crate::provision::{self, ClaimDecision, Layout, VOLUME_DIR_MODE, VolumeDecision};

pub struct Options {
    pub kubeconfig: PathBuf,
    pub root: PathBuf,
    pub provisioner: String,
    pub layout: Layout,
}

/// Which watch completed a (re)list.
enum Listed {
    Claims,
    Volumes,
    Classes,
    No,
}

fn listed<K>(ev: &Event<K>, which: Listed) -> Listed {
    if matches!(ev, Event::InitDone) { which } else { Listed::No }
}

pub async fn run(opts: Options) -> Result<()> {
    ensure!(
        opts.root.is_absolute()
            && opts.root.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "--root {} must be an absolute path without . or ..",
        opts.root.display()
    );
    std::fs::create_dir_all(&opts.root).with_context(|| format!("create {}", opts.root.display()))?;
    let client = crate::sync::client(&opts.kubeconfig).await?;
    let (claims, claim_writer) = reflector::store::<PersistentVolumeClaim>();
    let (volumes, volume_writer) = reflector::store::<PersistentVolume>();
    let (classes, class_writer) = reflector::store::<StorageClass>();
    let cfg = watcher::Config::default;
    // The watchers retry with backoff while the apiserver is not up yet or restarts.
    let claim_events = reflector::reflector(claim_writer, watcher::watcher(Api::all(client.clone()), cfg()))
        .default_backoff()
        .map(|e| e.map(|ev| listed(&ev, Listed::Claims)));
    let volume_events = reflector::reflector(volume_writer, watcher::watcher(Api::all(client.clone()), cfg()))
        .default_backoff()
        .map(|e| e.map(|ev| listed(&ev, Listed::Volumes)));
    let class_events = reflector::reflector(class_writer, watcher::watcher(Api::all(client.clone()), cfg()))
        .default_backoff()
        .map(|e| e.map(|ev| listed(&ev, Listed::Classes)));
    let mut events = std::pin::pin!(stream::select(stream::select(claim_events, volume_events), class_events));

    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    let mut ready = [false; 3];
    let mut p = Provisioner {
        recorder: Recorder::new(client.clone(), Reporter::from(opts.provisioner.as_str())),
        volume_api: Api::all(client),
        opts,
        warned: HashSet::new(),
    };
    info!(root = %p.opts.root.display(), provisioner = %p.opts.provisioner, "provisioner started");
    loop {
        tokio::select! {
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
            _ = tick.tick() => {}
            ev = events.next() => match ev {
                None => anyhow::bail!("watch streams ended"),
                Some(Err(e)) => { warn!("watch error (retrying): {e}"); continue }
                Some(Ok(l)) => match l {
                    Listed::Claims => ready[0] = true,
                    Listed::Volumes => ready[1] = true,
                    Listed::Classes => ready[2] = true,
                    Listed::No => {}
                },
            }
        }
        // Until all three lists are complete a pass could take a missing volume for a missing one.
        if ready.iter().all(|r| *r) {
            p.pass(&claims, &volumes, &classes).await;
        }
    }
}

struct Provisioner {
    opts: Options,
    volume_api: Api<PersistentVolume>,
    recorder: Recorder,
    /// (object UID, reason) of the Warnings already published: once per object and reason.
    warned: HashSet<(String, String)>,
}

impl Provisioner {
    async fn pass(
        &mut self,
        claims: &Store<PersistentVolumeClaim>,
        volumes: &Store<PersistentVolume>,
        classes: &Store<StorageClass>,
    ) {
        let classes: HashMap<String, _> = classes.state().into_iter().map(|c| (c.name_any(), c)).collect();
        let existing: HashSet<String> = volumes.state().iter().map(|v| v.name_any()).collect();
        for pvc in claims.state() {
            let class = provision::claim_class(&pvc).and_then(|n| classes.get(n)).map(|c| c.as_ref());
            match provision::decide_claim(&pvc, class, &self.opts.provisioner, &self.opts.root, self.opts.layout) {
                ClaimDecision::Provision(p) => {
                    let made = existing.contains(&p.volume.name_any());
                    self.provision(&pvc, *p, made).await;
                }
                ClaimDecision::Refuse(why) => self.warn_once(&*pvc, "ProvisioningFailed", why).await,
                ClaimDecision::WaitForConsumer | ClaimDecision::Ignore => {}
            }
        }
        for pv in volumes.state() {
            match provision::decide_volume(&pv, &self.opts.provisioner, &self.opts.root, self.opts.layout) {
                VolumeDecision::Reclaim { dir } => self.reclaim(&pv, &dir).await,
                VolumeDecision::Refuse(why) => self.warn_once(&*pv, "VolumeFailedDelete", why).await,
                VolumeDecision::Ignore => {}
            }
        }
    }

    /// `made`: the volume exists already (the claim stays Pending until the PV controller binds
    /// the two); its directory is still made sure of, in case a failed attempt removed it.
    async fn provision(&mut self, pvc: &PersistentVolumeClaim, p: provision::Provision, made: bool) {
        let claim = format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any());
        let pv_name = p.volume.name_any();
        if let Err(e) = make_volume_dir(&p.dir) {
            return self.warn_once(pvc, "ProvisioningFailed", format!("{e:#}")).await;
        }
        if made {
            return;
        }
        match self.volume_api.create(&PostParams::default(), &p.volume).await {
            Ok(_) => {}
            // A pass before the watch showed our own creation.
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => {
                // Nothing was written into it yet: leave no directory without a volume behind
                // (should the volume exist after all, the next pass makes the directory again).
                let _ = std::fs::remove_dir(&p.dir);
                return self.warn_once(pvc, "ProvisioningFailed", format!("creating volume {pv_name}: {e}")).await;
            }
        }
        info!(claim, volume = pv_name, dir = %p.dir.display(), "provisioned");
        let note = format!("Successfully provisioned volume {pv_name} (host directory {})", p.dir.display());
        self.publish(pvc, EventType::Normal, "ProvisioningSucceeded", note).await;
    }

    async fn reclaim(&mut self, pv: &PersistentVolume, dir: &Path) {
        let name = pv.name_any();
        // The directory first: a volume whose data could not be removed stays visible (Released).
        if let Err(e) = std::fs::remove_dir_all(dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return self.warn_once(pv, "VolumeFailedDelete", format!("removing {}: {e}", dir.display())).await;
        }
        let uid_only = DeleteParams {
            preconditions: Some(Preconditions { uid: pv.uid(), resource_version: None }),
            ..Default::default()
        };
        match self.volume_api.delete(&name, &uid_only).await {
            Ok(_) => info!(volume = name, dir = %dir.display(), "reclaimed"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => self.warn_once(pv, "VolumeFailedDelete", format!("deleting volume {name}: {e}")).await,
        }
    }

    async fn warn_once<K: Resource<DynamicType = ()>>(&mut self, obj: &K, reason: &str, note: String) {
        let key = (obj.meta().uid.clone().unwrap_or_default(), format!("{reason}: {note}"));
        if self.warned.insert(key) {
            warn!(object = obj.meta().name.as_deref().unwrap_or(""), reason, "{note}");
            self.publish(obj, EventType::Warning, reason, note).await;
        }
    }

    async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, type_: EventType, reason: &str, note: String) {
        let ev = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: if reason.starts_with("Provisioning") { "Provision" } else { "Delete" }.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!("publishing event {reason}: {e}");
        }
    }
}

/// The volume's directory, mode 0777 whatever the umask (see `provision.rs` for why).
fn make_volume_dir(dir: &Path) -> Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(VOLUME_DIR_MODE))
        .with_context(|| format!("chmod {VOLUME_DIR_MODE:o} {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_dir_is_world_writable_whatever_the_umask() {
        let base = std::env::temp_dir().join(format!("devkit-provision-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let dir = base.join("uid-1");
        make_volume_dir(&dir).unwrap();
        make_volume_dir(&dir).unwrap(); // a second pass finds it made
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(mode, 0o777);
    }
}
