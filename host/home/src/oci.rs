//! Plugins in OCI registries: a component is an artifact with one layer of media type
//! `application/wasm` and a config of `application/vnd.wasm.config.v0+json` (the layout
//! wasm-pkg-tools and Wassette use). Cordon reads the manifest itself and computes every digest
//! it relies on from the bytes it received, so a registry cannot hand over something other than
//! what a digest names.

use std::path::Path;
use std::str::FromStr;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::Deserialize;

use crate::error::HomeError;
use crate::fsutil::{MAX_COMPONENT_BYTES, sha256_digest};
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
const MAX_MANIFEST_BYTES: usize = 4 << 20;
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

    fn is_loopback(&self) -> bool {
        let registry = self.registry();
        let host = match registry.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => registry.rsplit_once(':').map_or(registry, |(h, _)| h),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    fn client(&self) -> Result<Client, HomeError> {
        // reqwest is built without a TLS crypto provider of its own: ring is the process's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Plain HTTP only for a registry on this machine, as for URL installs.
        let protocol = if self.is_loopback() {
            ClientProtocol::HttpsExcept(vec![self.registry().to_string()])
        } else {
            ClientProtocol::Https
        };
        Client::try_from(ClientConfig {
            protocol,
            platform_resolver: None,
            // A registry that stops answering fails the command instead of hanging it.
            connect_timeout: Some(std::time::Duration::from_secs(15)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            ..ClientConfig::default()
        })
        .map_err(|e| self.failed(format!("cannot set up the registry client: {e}")))
    }

    /// Credentials for the registry: `CORDON_REGISTRY_USERNAME` and `CORDON_REGISTRY_PASSWORD`
    /// when `CORDON_REGISTRY` names this registry (`host[:port]`), else the Docker config
    /// (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, with its credential helpers),
    /// else none. Never stored by Cordon. The variables name their registry so that `plugin
    /// update --all`, which contacts every registry plugins came from, sends them to that
    /// registry only.
    fn auth(&self) -> RegistryAuth {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let (Some(user), Some(password)) = (
            env("CORDON_REGISTRY_USERNAME"),
            env("CORDON_REGISTRY_PASSWORD"),
        ) {
            match env("CORDON_REGISTRY") {
                Some(registry) if registry.eq_ignore_ascii_case(self.registry()) => {
                    return RegistryAuth::Basic(user, password);
                }
                Some(_) => {}
                None => tracing::warn!(
                    "CORDON_REGISTRY_USERNAME is set but CORDON_REGISTRY is not: set it to the \
                     registry (host[:port]) these credentials are for; they were not sent to {}",
                    self.registry()
                ),
            }
        }
        match docker_credential::get_credential(self.registry()) {
            Ok(docker_credential::DockerCredential::UsernamePassword(user, password)) => {
                RegistryAuth::Basic(user, password)
            }
            Ok(docker_credential::DockerCredential::IdentityToken(token)) => {
                RegistryAuth::Bearer(token)
            }
            Err(_) => RegistryAuth::Anonymous,
        }
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

/// Whether a registry error says the manifest asked for does not exist.
fn is_not_found(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
    match e {
        E::ImageManifestNotFoundError(_) => true,
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, C::ManifestUnknown | C::NotFound | C::NameUnknown)),
        E::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// What a registry error means to the user.
fn registry_error(e: &oci_client::errors::OciDistributionError) -> String {
    let text = e.to_string();
    let chain = std::error::Error::source(e)
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    format!("{text}{chain}")
}

/// The manifest at `reference`, its bytes and digest (computed here).
async fn manifest(
    client: &Client,
    reference: &OciReference,
    auth: &RegistryAuth,
) -> Result<(Manifest, String), HomeError> {
    manifest_if_any(client, reference, auth)
        .await?
        .ok_or_else(|| reference.failed("the registry has no manifest by that name".into()))
}

/// The manifest at `reference`, or `None` if the registry has none by that name.
async fn manifest_if_any(
    client: &Client,
    reference: &OciReference,
    auth: &RegistryAuth,
) -> Result<Option<(Manifest, String)>, HomeError> {
    let bytes = match client
        .pull_manifest_raw(
            &reference.reference,
            auth,
            &[OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST],
        )
        .await
    {
        Ok((bytes, _claimed)) => bytes,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(reference.failed(registry_error(&e))),
    };
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(reference.not_wasm(format!(
            "its manifest is {} bytes, more than Cordon reads",
            bytes.len()
        )));
    }
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

/// Pulls the component at `reference`: its manifest must be an image manifest with exactly
/// one `application/wasm` layer, whose bytes must have the layer's digest.
pub async fn pull(reference: &OciReference) -> Result<Pulled, HomeError> {
    let client = reference.client()?;
    let auth = reference.auth();
    let (manifest, manifest_digest) = manifest(&client, reference, &auth).await?;
    let layer = component_layer(reference, &manifest)?;
    if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES as u64 {
        return Err(reference.not_wasm(format!(
            "its component layer is {} bytes; at most {MAX_COMPONENT_BYTES} are accepted",
            layer.size
        )));
    }
    let bytes = blob(&client, reference, layer, "the component layer").await?;
    Ok(Pulled {
        bytes,
        manifest_digest,
    })
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
    client: &Client,
    reference: &OciReference,
    layer: &Descriptor,
    what: &str,
) -> Result<Vec<u8>, HomeError> {
    let mismatch = |expected: String, actual: String| HomeError::DigestMismatch {
        source_name: format!("{what} of {}", reference.describe()),
        expected,
        actual,
    };
    // The manifest says how big the blob is: a registry sending more is cut off there, so a
    // hostile one cannot make Cordon buffer without end.
    let mut sink = CappedBuffer {
        bytes: Vec::with_capacity(layer.size.max(0) as usize),
        cap: layer.size.max(0) as usize,
    };
    client
        .pull_blob(&reference.reference, layer.digest.as_str(), &mut sink)
        .await
        .map_err(|e| match e {
            oci_client::errors::OciDistributionError::DigestError(
                oci_client::errors::DigestError::VerificationError { expected, actual },
            ) => mismatch(expected, actual),
            oci_client::errors::OciDistributionError::IoError(e)
                if e.kind() == std::io::ErrorKind::FileTooLarge =>
            {
                reference.failed(format!(
                    "the registry sent more than the {} bytes the manifest gives {what}",
                    layer.size
                ))
            }
            e => reference.failed(registry_error(&e)),
        })?;
    let bytes = sink.bytes;
    let actual = sha256_digest(&bytes);
    if actual != layer.digest || bytes.len() as i64 != layer.size {
        return Err(mismatch(layer.digest.clone(), actual));
    }
    Ok(bytes)
}

/// A write target that takes at most `cap` bytes and fails on more.
struct CappedBuffer {
    bytes: Vec<u8>,
    cap: usize,
}

impl tokio::io::AsyncWrite for CappedBuffer {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.cap {
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "more bytes than the manifest gives",
            )));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The digest of the manifest `reference` names now: for a tag, what it points to.
pub async fn resolve(reference: &OciReference) -> Result<String, HomeError> {
    let client = reference.client()?;
    let (manifest, digest) = manifest(&client, reference, &reference.auth()).await?;
    component_layer(reference, &manifest)?;
    Ok(digest)
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
    let client = reference.client()?;
    let auth = reference.auth();
    let at = reference.at_tag(&signature_tag(manifest_digest));
    let Some((manifest, _)) = manifest_if_any(&client, &at, &auth).await? else {
        return Ok(None);
    };
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
        match blob(&client, &at, layer, "a signature payload").await {
            Ok(payload) => attached.signatures.push(AttachedSignature {
                payload,
                signature: signature.clone(),
            }),
            Err(e) => attached.unreadable.push(e.to_string()),
        }
    }
    Ok(Some(attached))
}

/// Signs the component artifact `reference` names with `key` and stores the signature under
/// cosign's tag beside it, keeping the signatures already there. Returns the manifest digest
/// signed, the component's digest in it (for the publisher to compare with what they pushed)
/// and whether the signature is new (signing twice with one key adds nothing).
pub async fn attach_signature(
    reference: &OciReference,
    key: &PrivateKey,
) -> Result<Signed, HomeError> {
    let client = reference.client()?;
    let auth = reference.auth();
    let (manifest, digest) = manifest(&client, reference, &auth).await?;
    let component = component_layer(reference, &manifest)?.digest.clone();
    let at = reference.at_tag(&signature_tag(&digest));
    let mut layers: Vec<serde_json::Value> = Vec::new();
    let existing = manifest_if_any(&client, &at, &auth).await?;
    let public = key.public();
    if let Some((existing, _)) = &existing {
        for layer in &existing.layers {
            if layer.media_type == SIMPLE_SIGNING && layer.size <= MAX_PAYLOAD_BYTES {
                let payload = blob(&client, &at, layer, "a signature payload").await?;
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
    upload(&client, &at, &auth, vec![payload, config], signatures).await?;
    Ok(Signed {
        manifest: digest,
        component,
        new: true,
    })
}

/// Uploads `blobs`, then `manifest` (an OCI image manifest naming them) to `reference`.
async fn upload(
    client: &Client,
    reference: &OciReference,
    auth: &RegistryAuth,
    blobs: Vec<Vec<u8>>,
    manifest: Vec<u8>,
) -> Result<(), HomeError> {
    let fail = |e: oci_client::errors::OciDistributionError| reference.failed(registry_error(&e));
    client
        .auth(
            &reference.reference,
            auth,
            oci_client::RegistryOperation::Push,
        )
        .await
        .map_err(fail)?;
    for blob in blobs {
        let digest = sha256_digest(&blob);
        client
            .push_blob(&reference.reference, blob, &digest)
            .await
            .map_err(fail)?;
    }
    client
        .push_manifest_raw(
            &reference.reference,
            manifest,
            reqwest::header::HeaderValue::from_static(OCI_MANIFEST),
        )
        .await
        .map_err(fail)?;
    Ok(())
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
    let component = component.as_slice();
    let client = reference.client()?;
    let auth = reference.auth();
    let layer_digest = sha256_digest(component);
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
    upload(
        &client,
        reference,
        &auth,
        vec![config, component.to_vec()],
        manifest,
    )
    .await?;
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
        assert!(r.is_loopback());
        assert_eq!(r.describe(), "oci://127.0.0.1:5000/plugins/echo:1.0");
        let d = format!("oci://ghcr.io/o/p@sha256:{}", "a".repeat(64));
        let r = OciReference::parse(&d).unwrap();
        assert_eq!(
            r.pinned_digest(),
            Some(format!("sha256:{}", "a".repeat(64)).as_str())
        );
        assert!(!r.is_loopback());
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
