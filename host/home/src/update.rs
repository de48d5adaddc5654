//! Updates of registry plugins: which installed plugins' tags now name another manifest, and
//! the install request that replaces one, through the same checks, diff and consent as any
//! install.

use crate::Home;
use crate::error::HomeError;
use crate::install::InstallRequest;
use crate::oci::{self, OciReference};
use crate::source::InstallSource;

/// Where an installed registry plugin stands against its registry.
#[derive(Debug)]
pub enum Availability {
    /// The tag still names the installed manifest.
    UpToDate,
    /// The tag now names another manifest.
    NewManifest(String),
    /// The tag now names a manifest the plugin had before, this many versions ago: a
    /// rollback, which an update refuses unless asked to allow it.
    PreviousManifest(String, usize),
    /// Installed by digest: there is nothing newer to follow.
    PinnedByDigest,
    /// The registry could not be asked, did not answer, or answered with something that is
    /// not a component artifact; nothing was changed.
    Unknown(HomeError),
}

/// One registry plugin and what its registry says now.
#[derive(Debug)]
pub struct RegistryPlugin {
    /// The plugin name.
    pub name: String,
    /// Where it was installed from.
    pub reference: OciReference,
    /// The manifest digest installed.
    pub installed_manifest: String,
    /// What the registry says now.
    pub availability: Availability,
}

impl Home {
    /// The installed plugins that came from a registry (all, or those in `names`, each of
    /// which must be one), each with what its registry says now. Reads the registries and
    /// changes nothing; one registry that cannot be reached does not stop the others.
    pub async fn outdated(&self, names: &[String]) -> Result<Vec<RegistryPlugin>, HomeError> {
        let lock = self.read()?;
        let mut selected = Vec::new();
        for name in names {
            let record = lock.plugin(name)?;
            if record.oci_manifest.is_none() {
                return Err(HomeError::NotFromRegistry {
                    name: name.clone(),
                    source_name: record.source.clone(),
                });
            }
        }
        for (name, record) in &lock.plugins {
            let Some(installed) = &record.oci_manifest else {
                continue;
            };
            if !names.is_empty() && !names.contains(name) {
                continue;
            }
            let reference = match OciReference::parse(&record.source) {
                Ok(reference) => reference,
                // A lock entry edited by hand: reported, the others still listed.
                Err(e) => {
                    tracing::warn!("`{name}`: its source cannot be followed: {e}");
                    continue;
                }
            };
            let availability = if !reference.is_tag() {
                Availability::PinnedByDigest
            } else {
                match oci::resolve(&reference).await {
                    Ok(now) if &now == installed => Availability::UpToDate,
                    Ok(now) => match record.versions_back(&now) {
                        Some(back) => Availability::PreviousManifest(now, back),
                        None => Availability::NewManifest(now),
                    },
                    Err(e) => Availability::Unknown(e),
                }
            };
            selected.push(RegistryPlugin {
                name: name.clone(),
                reference,
                installed_manifest: installed.clone(),
                availability,
            });
        }
        Ok(selected)
    }
}

impl RegistryPlugin {
    /// The request that installs this plugin anew from its tag, keeping its grants and limits
    /// (the install's diff drops grants the new ceiling forbids). Nothing is waived: a version
    /// without a trusted signature, a rollback and a new signer are refused unless the caller
    /// sets the request's `allow_…` fields.
    pub fn update_request(&self) -> InstallRequest {
        InstallRequest {
            source: InstallSource::Oci(self.reference.clone()),
            name: Some(self.name.clone()),
            grants: Vec::new(),
            limits: Vec::new(),
            allow_unsigned: false,
            signature: None,
            allow_rollback: false,
            allow_new_signer: false,
            describe: None,
            hide: Vec::new(),
            wassette_policy: None,
        }
    }

    /// Whether the tag names another manifest than the one installed.
    pub fn has_news(&self) -> bool {
        matches!(
            self.availability,
            Availability::NewManifest(_) | Availability::PreviousManifest(..)
        )
    }
}
