//! Plugins in OCI registries: a component is an artifact with one layer of media type
//! `application/wasm` and a config of `application/vnd.wasm.config.v0+json` (the layout
//! wasm-pkg-tools and Wassette use). Cordon reads the manifest itself and computes every digest
//! it relies on from the bytes it received, so a registry cannot hand over something other than
//! what a digest names.

use std::path::Path;
use std::str::FromStr;

use oci_spec::distribution::Reference;
use serde::Deserialize;

use crate::error::HomeError;
use crate::fsutil::{MAX_COMPONENT_BYTES, sha256_digest};
use crate::registry::{self, Limits, RegistryError, Session};
use crate::signing::{AttachedSignature, PrivateKey, simple_signing_payload};

/// The media type of the component layer.
pub const WASM_LAYER: &str = "application/wasm";
/// The media type of a Wasm artifact's config.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The largest manifest Cordon reads.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The layer media type of a cosign signature: the simple signing payload it signs.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a signature layer that holds the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The config media type of a signature manifest, as cosign writes it.
const IMAGE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// At most this many signatures of one artifact are read.
const MAX_SIGNATURES: usize = 64;
/// The largest signature payload read (cosign's are a few hundred bytes).
const MAX_PAYLOAD_BYTES: i64 = 64 * 1024;

/// An artifact in a registry: `oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:DIGEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference {
    reference: Reference,
}

impl OciReference {
    /// Parses `oci://…`. The registry must be named (a host with a dot or a port, or
    /// `localhost`), so a reference never silently means Docker Hub.
    pub fn parse(arg: &str) -> Result<OciReference, HomeError> {
        let bad = |reason: &str| HomeError::BadUrl {
            url: arg.to_string(),
            reason: reason.to_string(),
        };
        let rest = arg
            .strip_prefix("oci://")
            .ok_or_else(|| bad("an OCI reference starts with oci://"))?;
        let (registry, path) = rest.split_once('/').ok_or_else(|| {
            bad("name the registry and the repository: oci://ghcr.io/owner/plugin:1.0")
        })?;
        let host = registry.rsplit_once(':').map_or(registry, |(h, _)| h);
        if !(registry.contains('.') || registry.contains(':') || host == "localhost") {
            return Err(bad(
                "name the registry host first (ghcr.io, registry.example.com:5000, localhost:5000); \
                 Cordon does not assume Docker Hub",
            ));
        }
        if path.is_empty() {
            return Err(bad("the repository is missing after the registry"));
        }
        // Without one the parser would assume `latest`, which names nothing in particular.
        let last = path.rsplit('/').next().unwrap_or_default();
        if !last.contains(':') && !path.contains('@') {
            return Err(bad("name a tag (:1.0) or a digest (@sha256:…)"));
        }
        let reference = Reference::from_str(rest).map_err(|e| bad(&e.to_string()))?;
        Ok(OciReference { reference })
    }

    /// `oci://…` as the user would write it.
    pub fn describe(&self) -> String {
        format!("oci://{}", self.reference.whole())
    }

    /// The registry host (and port).
    pub fn registry(&self) -> &str {
        self.reference.resolve_registry()
    }

    /// The repository's last segment, a default plugin name.
    pub fn name_hint(&self) -> &str {
        self.reference
            .repository()
            .rsplit('/')
            .next()
            .unwrap_or_default()
    }

    /// The digest the reference pins, if it names one.
    pub fn pinned_digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The same repository at `digest`.
    pub fn at_digest(&self, digest: &str) -> OciReference {
        OciReference {
            reference: Reference::with_digest(
                self.reference.registry().to_string(),
                self.reference.repository().to_string(),
                digest.to_string(),
            ),
        }
    }

    /// The same repository at `tag`.
    fn at_tag(&self, tag: &str) -> OciReference {
        OciReference {
            reference: Reference::with_tag(
                self.reference.registry().to_string(),
                self.reference.repository().to_string(),
                tag.to_string(),
            ),
        }
    }

    /// Whether the reference names a tag (which can move), rather than a digest.
    pub fn is_tag(&self) -> bool {
        self.reference.digest().is_none()
    }

    /// `registry/repository`, as a signature payload names the artifact it signs.
    pub fn repository_path(&self) -> String {
        format!(
            "{}/{}",
            self.reference.registry(),
            self.reference.repository()
        )
    }

    /// The tag or digest this reference names in its repository.
    fn tag_or_digest(&self) -> &str {
        self.reference
            .digest()
            .or(self.reference.tag())
            .unwrap_or("latest")
    }

    /// A session with this reference's repository (`push`: to write it too), under the
    /// limits the environment sets.
    fn session(&self, push: bool) -> Result<Session, HomeError> {
        let limits = Limits::from_env()?;
        Session::new(
            self.registry(),
            self.reference.repository(),
            push,
            registry::credentials(self.registry()),
            limits,
        )
        .map_err(|e| self.registry_failed(e))
    }

    /// Runs `operation` under the `deadline` of its session: a registry that answers too
    /// slowly, or not at all, fails it rather than hanging the command.
    async fn within<T>(
        &self,
        deadline: std::time::Duration,
        operation: impl std::future::Future<Output = Result<T, HomeError>>,
    ) -> Result<T, HomeError> {
        tokio::time::timeout(deadline, operation)
            .await
            .unwrap_or_else(|_| {
                Err(self.registry_failed(RegistryError::Deadline {
                    registry: self.registry().to_string(),
                    deadline,
                }))
            })
    }

    fn registry_failed(&self, e: RegistryError) -> HomeError {
        self.failed(e.to_string())
    }

    fn failed(&self, reason: String) -> HomeError {
        HomeError::Registry {
            reference: self.describe(),
            reason,
        }
    }

    fn not_wasm(&self, reason: String) -> HomeError {
        HomeError::NotAWasmArtifact {
            reference: self.describe(),
            reason,
        }
    }
}

/// A component pulled from a registry.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component.
    pub bytes: Vec<u8>,
    /// `sha256:…` of the manifest Cordon read (computed from its bytes).
    pub manifest_digest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// The tag cosign stores the signatures of manifest `manifest_digest` under.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replace(':', "-"))
}

/// The manifest at `reference`, its bytes and digest (computed here).
async fn manifest(
    session: &mut Session,
    reference: &OciReference,
) -> Result<(Manifest, String), HomeError> {
    manifest_if_any(session, reference)
        .await?
        .ok_or_else(|| reference.failed("the registry has no manifest by that name".into()))
}

/// The manifest at `reference`, or `None` if the registry has none by that name.
async fn manifest_if_any(
    session: &mut Session,
    reference: &OciReference,
) -> Result<Option<(Manifest, String)>, HomeError> {
    let Some(bytes) = session
        .manifest(
            reference.tag_or_digest(),
            // Lists too, so that one is refused naming what it is.
            &[OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST],
            MAX_MANIFEST_BYTES,
        )
        .await
        .map_err(|e| reference.registry_failed(e))?
    else {
        return Ok(None);
    };
    let digest = sha256_digest(&bytes);
    if let Some(pinned) = reference.pinned_digest()
        && pinned != digest
    {
        return Err(HomeError::DigestMismatch {
            source_name: reference.describe(),
            expected: pinned.to_string(),
            actual: digest,
        });
    }
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| reference.not_wasm(format!("its manifest is not valid JSON: {e}")))?;
    Ok(Some((manifest, digest)))
}

/// The fuzz targets' way in: `data` as the manifest a registry served for a component, and,
/// if it is one, as a signature manifest.
#[cfg(feature = "fuzzing")]
pub(crate) fn read_manifest(data: &[u8]) {
    let Ok(manifest) = serde_json::from_slice::<Manifest>(data) else {
        return;
    };
    let reference = OciReference::parse("oci://localhost:5000/tools/fuzz:1").expect("a reference");
    if let Ok(layer) = component_layer(&reference, &manifest) {
        assert_eq!(layer.media_type, WASM_LAYER);
    }
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING)
    {
        let _ = layer.annotations.get(SIGNATURE_ANNOTATION);
    }
}

/// Pulls the component at `reference`: its manifest must be an image manifest with exactly
/// one `application/wasm` layer, whose bytes must have the layer's digest.
pub async fn pull(reference: &OciReference) -> Result<Pulled, HomeError> {
    let mut session = reference.session(false)?;
    let deadline = session.limits().deadline;
    let operation = async {
        let (manifest, manifest_digest) = manifest(&mut session, reference).await?;
        let layer = component_layer(reference, &manifest)?;
        if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES as u64 {
            return Err(reference.not_wasm(format!(
                "its component layer is {} bytes; at most {MAX_COMPONENT_BYTES} are accepted",
                layer.size
            )));
        }
        let bytes = blob(&mut session, reference, layer, "the component layer").await?;
        Ok(Pulled {
            bytes,
            manifest_digest,
        })
    };
    reference.within(deadline, operation).await
}

/// The one `application/wasm` layer of a component artifact's manifest.
fn component_layer<'m>(
    reference: &OciReference,
    manifest: &'m Manifest,
) -> Result<&'m Descriptor, HomeError> {
    if let Some(entries) = &manifest.manifests {
        return Err(reference.not_wasm(format!(
            "it is a manifest list ({} entries), not a Wasm component artifact; install one \
             entry by its digest (oci://{}@sha256:…) if it is one",
            entries.len(),
            reference.repository_path()
        )));
    }
    let wasm: Vec<&Descriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == WASM_LAYER)
        .collect();
    let [layer] = wasm.as_slice() else {
        let types: Vec<&str> = manifest
            .layers
            .iter()
            .map(|l| l.media_type.as_str())
            .collect();
        return Err(reference.not_wasm(format!(
            "a component artifact has exactly one `{WASM_LAYER}` layer; this one has {} \
             (layers: {}; manifest type {})",
            wasm.len(),
            if types.is_empty() {
                "none".to_string()
            } else {
                types.join(", ")
            },
            manifest.media_type.as_deref().unwrap_or("unstated")
        )));
    };
    Ok(layer)
}

/// The blob `layer` names, whose bytes must have its digest and size (`what` names it in
/// errors). The caller has checked the size is one it accepts.
async fn blob(
    session: &mut Session,
    reference: &OciReference,
    layer: &Descriptor,
    what: &str,
) -> Result<Vec<u8>, HomeError> {
    // The digest goes into a URL: only the one form the distribution spec gives a sha256.
    let hex = layer.digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(reference.not_wasm(format!(
            "{what} names its digest `{}`, not sha256:<64 lowercase hex digits>",
            layer.digest.escape_debug()
        )));
    }
    // The manifest says how big the blob is: a registry sending more is cut off there, so a
    // hostile one cannot make Cordon buffer without end.
    let bytes = session
        .blob(&layer.digest, layer.size.max(0) as u64, what)
        .await
        .map_err(|e| reference.registry_failed(e))?;
    let actual = sha256_digest(&bytes);
    if actual != layer.digest || bytes.len() as i64 != layer.size {
        return Err(HomeError::DigestMismatch {
            source_name: format!("{what} of {}", reference.describe()),
            expected: layer.digest.clone(),
            actual,
        });
    }
    Ok(bytes)
}

/// The digest of the manifest `reference` names now: for a tag, what it points to.
pub async fn resolve(reference: &OciReference) -> Result<String, HomeError> {
    let mut session = reference.session(false)?;
    let deadline = session.limits().deadline;
    let operation = async {
        let (manifest, digest) = manifest(&mut session, reference).await?;
        component_layer(reference, &manifest)?;
        Ok(digest)
    };
    reference.within(deadline, operation).await
}

/// The signatures stored beside a manifest, and why some layers there could not be read as
/// signatures.
#[derive(Debug, Default)]
pub struct Attached {
    /// The signatures read.
    pub signatures: Vec<AttachedSignature>,
    /// What was wrong with the layers that were passed over.
    pub unreadable: Vec<String>,
}

/// The signatures stored beside the manifest `manifest_digest` of `reference`'s repository
/// under cosign's tag, or `None` if there are none. Layers that are not simple signing
/// payloads with a signature annotation are not signatures and are passed over; one that
/// cannot be read is noted and does not hide the others.
pub async fn attached_signatures(
    reference: &OciReference,
    manifest_digest: &str,
) -> Result<Option<Attached>, HomeError> {
    let mut session = reference.session(false)?;
    let deadline = session.limits().deadline;
    let at = reference.at_tag(&signature_tag(manifest_digest));
    let operation = async {
        let Some((manifest, _)) = manifest_if_any(&mut session, &at).await? else {
            return Ok(None);
        };
        read_signatures(&mut session, &at, &manifest)
            .await
            .map(Some)
    };
    reference.within(deadline, operation).await
}

/// The signature layers of the signature manifest `manifest` (at `at`), read.
async fn read_signatures(
    session: &mut Session,
    at: &OciReference,
    manifest: &Manifest,
) -> Result<Attached, HomeError> {
    let mut attached = Attached::default();
    let layers: Vec<&Descriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING)
        .collect();
    if layers.len() > MAX_SIGNATURES {
        attached.unreadable.push(format!(
            "only the first {MAX_SIGNATURES} of {} signatures were read",
            layers.len()
        ));
    }
    for layer in layers.into_iter().take(MAX_SIGNATURES) {
        let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
            attached.unreadable.push(format!(
                "layer {} has no signature annotation",
                layer.digest
            ));
            continue;
        };
        if !(0..=MAX_PAYLOAD_BYTES).contains(&layer.size) {
            attached.unreadable.push(format!(
                "layer {} is {} bytes, not a signature payload",
                layer.digest, layer.size
            ));
            continue;
        }
        match blob(session, at, layer, "a signature payload").await {
            Ok(payload) => attached.signatures.push(AttachedSignature {
                payload,
                signature: signature.clone(),
            }),
            Err(e) => attached.unreadable.push(e.to_string()),
        }
    }
    Ok(attached)
}

/// Signs the component artifact `reference` names with `key` and stores the signature under
/// cosign's tag beside it, keeping the signatures already there. Returns the manifest digest
/// signed, the component's digest in it (for the publisher to compare with what they pushed)
/// and whether the signature is new (signing twice with one key adds nothing).
pub async fn attach_signature(
    reference: &OciReference,
    key: &PrivateKey,
) -> Result<Signed, HomeError> {
    let mut session = reference.session(true)?;
    let deadline = session.limits().deadline;
    let operation = sign_in(&mut session, reference, key);
    reference.within(deadline, operation).await
}

async fn sign_in(
    session: &mut Session,
    reference: &OciReference,
    key: &PrivateKey,
) -> Result<Signed, HomeError> {
    let (manifest, digest) = manifest(session, reference).await?;
    let component = component_layer(reference, &manifest)?.digest.clone();
    let at = reference.at_tag(&signature_tag(&digest));
    let mut layers: Vec<serde_json::Value> = Vec::new();
    let existing = manifest_if_any(session, &at).await?;
    let public = key.public();
    if let Some((existing, _)) = &existing {
        for layer in &existing.layers {
            if layer.media_type == SIMPLE_SIGNING && layer.size <= MAX_PAYLOAD_BYTES {
                let payload = blob(session, &at, layer, "a signature payload").await?;
                let already = layer
                    .annotations
                    .get(SIGNATURE_ANNOTATION)
                    .is_some_and(|s| public.verifies(&payload, s))
                    && crate::signing::check_payload(
                        &payload,
                        &reference.repository_path(),
                        &digest,
                    )
                    .is_ok();
                if already {
                    return Ok(Signed {
                        manifest: digest,
                        component,
                        new: false,
                    });
                }
            }
            layers.push(serde_json::json!({
                "mediaType": layer.media_type,
                "digest": layer.digest,
                "size": layer.size,
                "annotations": layer.annotations,
            }));
        }
    }
    let payload = simple_signing_payload(&reference.repository_path(), &digest);
    let payload_digest = sha256_digest(&payload);
    layers.push(serde_json::json!({
        "mediaType": SIMPLE_SIGNING,
        "digest": payload_digest,
        "size": payload.len(),
        "annotations": {SIGNATURE_ANNOTATION: key.sign(&payload)},
    }));
    let diff_ids: Vec<&serde_json::Value> = layers.iter().map(|l| &l["digest"]).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .expect("a JSON value serialises");
    let config_digest = sha256_digest(&config);
    let signatures = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": IMAGE_CONFIG, "digest": config_digest, "size": config.len()},
        "layers": layers,
    }))
    .expect("a JSON value serialises");
    upload(session, &at, vec![payload, config], signatures).await?;
    Ok(Signed {
        manifest: digest,
        component,
        new: true,
    })
}

/// Uploads `blobs`, then `manifest` (an OCI image manifest naming them) to `reference`'s tag.
async fn upload(
    session: &mut Session,
    reference: &OciReference,
    blobs: Vec<Vec<u8>>,
    manifest: Vec<u8>,
) -> Result<(), HomeError> {
    for blob in blobs {
        let digest = sha256_digest(&blob);
        session
            .push_blob(blob, &digest)
            .await
            .map_err(|e| reference.registry_failed(e))?;
    }
    session
        .push_manifest(
            reference
                .reference
                .tag()
                .unwrap_or(reference.tag_or_digest()),
            manifest,
            OCI_MANIFEST,
        )
        .await
        .map_err(|e| reference.registry_failed(e))
}

/// What `attach_signature` signed.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The manifest digest signed.
    pub manifest: String,
    /// The component layer's digest in that manifest.
    pub component: String,
    /// Whether the signature was added now (not already there).
    pub new: bool,
}

/// Publishes the component in file `path` at `reference` (a tag) as a Wasm artifact and
/// returns the manifest digest. Refuses a file that is not a WebAssembly component.
pub async fn push_component(path: &Path, reference: &OciReference) -> Result<String, HomeError> {
    if reference.reference.tag().is_none() {
        return Err(HomeError::BadUrl {
            url: reference.describe(),
            reason: "push to a tag (oci://registry/repo:1.0); the digest follows from the bytes"
                .into(),
        });
    }
    let not_pushable = |reason: String| HomeError::NotPushable {
        path: path.to_path_buf(),
        reason,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| not_pushable(e.to_string()))?
        .len();
    if size > MAX_COMPONENT_BYTES as u64 {
        return Err(not_pushable(format!(
            "it is {size} bytes; at most {MAX_COMPONENT_BYTES} are accepted"
        )));
    }
    let component = std::fs::read(path).map_err(|e| not_pushable(e.to_string()))?;
    cordon_runtime::check_component_header(&component)
        .map_err(|why| not_pushable(format!("it is not a WebAssembly component: {why}")))?;
    let layer_digest = sha256_digest(&component);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))
    .expect("a JSON value serialises");
    let config_digest = sha256_digest(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": WASM_CONFIG,
        "config": {"mediaType": WASM_CONFIG, "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": WASM_LAYER, "digest": layer_digest, "size": component.len()}],
    }))
    .expect("a JSON value serialises");
    let digest = sha256_digest(&manifest);
    let mut session = reference.session(true)?;
    let deadline = session.limits().deadline;
    let operation = upload(&mut session, reference, vec![config, component], manifest);
    reference.within(deadline, operation).await?;
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_their_registry_and_a_tag_or_digest() {
        let r = OciReference::parse("oci://127.0.0.1:5000/plugins/echo:1.0").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.name_hint(), "echo");
        assert_eq!(
            registry::base_url(r.registry()).unwrap().as_str(),
            "http://127.0.0.1:5000/"
        );
        assert_eq!(r.describe(), "oci://127.0.0.1:5000/plugins/echo:1.0");
        let d = format!("oci://ghcr.io/o/p@sha256:{}", "a".repeat(64));
        let r = OciReference::parse(&d).unwrap();
        assert_eq!(
            r.pinned_digest(),
            Some(format!("sha256:{}", "a".repeat(64)).as_str())
        );
        assert_eq!(
            registry::base_url(r.registry()).unwrap().as_str(),
            "https://ghcr.io/"
        );
        for (bad, why) in [
            ("oci://library/echo:1", "Cordon does not assume Docker Hub"),
            ("oci://ghcr.io", "name the registry and the repository"),
            ("oci://ghcr.io/o/p", "name a tag"),
            ("https://ghcr.io/o/p:1", "starts with oci://"),
        ] {
            let e = OciReference::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
