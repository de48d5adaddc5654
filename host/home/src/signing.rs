//! Signatures on components, in cosign's key-pair scheme so keys and signatures work with
//! cosign too: ECDSA over P-256 with SHA-256, public keys as PEM `PUBLIC KEY` (SPKI),
//! signatures as base64 of their DER form.
//!
//! - A registry artifact is signed through a *simple signing payload*, a small JSON document
//!   naming the manifest digest; the payload is the signed message, and it is stored beside the
//!   artifact under the tag `sha256-<hex>.sig` (see `oci.rs`).
//! - A file or URL component is signed directly (`cosign sign-blob`): the signature is over
//!   the component's bytes and travels as a detached file.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use serde::Deserialize;

use crate::error::HomeError;
use crate::fsutil::sha256_digest;

/// What the simple signing payload says it is.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The largest signature text read (a P-256 DER signature is at most 72 bytes; base64 and
/// line breaks stay far below this).
pub(crate) const MAX_SIGNATURE_TEXT: usize = 4096;

/// A public key that signatures are checked against.
#[derive(Clone)]
pub struct PublicKey {
    key: VerifyingKey,
    fingerprint: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint)
    }
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (an ECDSA P-256 key, as `cosign generate-key-pair` and `cordon
    /// plugin keygen` write). `origin` names where the text came from, for errors.
    pub fn from_pem(text: &str, origin: &Path) -> Result<PublicKey, HomeError> {
        let bad = |reason: String| HomeError::BadKey {
            path: origin.to_path_buf(),
            reason,
        };
        if text.contains("PRIVATE KEY-----") {
            return Err(bad(
                "it is a private key; trust the public key (the .pub file) instead, and keep \
                 the private one to yourself"
                    .into(),
            ));
        }
        if !text.contains("-----BEGIN PUBLIC KEY-----") {
            return Err(bad(
                "it is not a PEM public key (-----BEGIN PUBLIC KEY-----)".into(),
            ));
        }
        let key = VerifyingKey::from_public_key_pem(text.trim()).map_err(|e| {
            bad(format!(
                "it is not an ECDSA P-256 public key, the kind cosign key pairs use ({e})"
            ))
        })?;
        Ok(PublicKey::from_key(key))
    }

    fn from_key(key: VerifyingKey) -> PublicKey {
        let der = key
            .to_public_key_der()
            .expect("a valid P-256 key encodes as SPKI");
        PublicKey {
            fingerprint: sha256_digest(der.as_bytes()),
            key,
        }
    }

    /// `sha256:<hex>` of the key's SPKI DER encoding: how a key is told apart in lists and
    /// in the lock file.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The key as PEM text.
    pub fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .expect("a valid P-256 key encodes as PEM")
    }

    /// Whether `signature` (base64 of DER, or of the 64-byte fixed form) signs `message`.
    pub fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Some(raw) = decode_signature(signature) else {
            return false;
        };
        let parsed = Signature::from_der(&raw)
            .ok()
            .or_else(|| Signature::from_slice(&raw).ok());
        parsed.is_some_and(|sig| self.key.verify(message, &sig).is_ok())
    }
}

fn decode_signature(text: &str) -> Option<Vec<u8>> {
    if text.len() > MAX_SIGNATURE_TEXT {
        return None;
    }
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    BASE64.decode(compact).ok()
}

/// The text of key file `path`: a regular file of key size. A private key must not be
/// readable by other users, as ssh requires, since anyone who can read it can sign as its owner.
pub(crate) fn read_key_file(
    path: &Path,
    private: bool,
) -> Result<zeroize::Zeroizing<String>, HomeError> {
    let bad = |reason: String| HomeError::BadKey {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(bad("it is not a regular file".into()));
    }
    if meta.len() > 64 * 1024 {
        return Err(bad("it is too large to be a key".into()));
    }
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "other users can read it (mode {:o}); make it private with `chmod 600 {}`",
                mode & 0o777,
                path.display()
            )));
        }
    }
    std::fs::read_to_string(path)
        .map(zeroize::Zeroizing::new)
        .map_err(|e| bad(format!("cannot read it: {e}")))
}

/// A private key that signs components.
pub struct PrivateKey {
    key: SigningKey,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({})", self.public().fingerprint)
    }
}

impl PrivateKey {
    /// A new random key.
    pub fn generate() -> PrivateKey {
        use p256::elliptic_curve::Generate;
        PrivateKey {
            key: SigningKey::generate(),
        }
    }

    /// Reads a PEM private key: PKCS#8 (`PRIVATE KEY`, as `cordon plugin keygen --no-password`
    /// and `openssl genpkey` write), encrypted PKCS#8 (`ENCRYPTED PRIVATE KEY`, as `cordon
    /// plugin keygen` writes; `password` is asked for only then) or SEC1 (`EC PRIVATE KEY`). A
    /// key readable by other users is refused.
    pub fn load(
        path: &Path,
        password: impl FnOnce() -> Result<zeroize::Zeroizing<String>, HomeError>,
    ) -> Result<PrivateKey, HomeError> {
        let bad = |reason: String| HomeError::BadKey {
            path: path.to_path_buf(),
            reason,
        };
        let text = read_key_file(path, true)?;
        let key = if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            let password = password()?;
            SigningKey::from_pkcs8_encrypted_pem(text.trim(), password.as_bytes()).map_err(|e| {
                bad(format!(
                    "it cannot be decrypted: the password is wrong, or it is not an ECDSA \
                         P-256 key ({e})"
                ))
            })?
        } else if text.contains("-----BEGIN PRIVATE KEY-----") {
            SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| {
                bad(format!(
                    "it is not an ECDSA P-256 private key in PKCS#8 ({e})"
                ))
            })?
        } else if text.contains("-----BEGIN EC PRIVATE KEY-----") {
            p256::SecretKey::from_sec1_pem(text.trim())
                .map(SigningKey::from)
                .map_err(|e| {
                    bad(format!(
                        "it is not an ECDSA P-256 private key in SEC1 ({e})"
                    ))
                })?
        } else if text.contains("SIGSTORE PRIVATE KEY") || text.contains("COSIGN PRIVATE KEY") {
            return Err(bad(
                "it is cosign's own key format; sign with `cosign sign --key` as the README \
                 shows, or use a key from `cordon plugin keygen`"
                    .into(),
            ));
        } else {
            return Err(bad(
                "it is not a PEM private key (-----BEGIN PRIVATE KEY-----)".into(),
            ));
        };
        Ok(PrivateKey { key })
    }

    /// The private key as PEM: PKCS#8, encrypted with `password` unless it is empty. Written
    /// to a file only its owner can read either way.
    pub fn to_pem(&self, password: &str) -> zeroize::Zeroizing<String> {
        if password.is_empty() {
            return self
                .key
                .to_pkcs8_pem(LineEnding::LF)
                .expect("a valid P-256 key encodes as PKCS#8");
        }
        self.key
            .to_pkcs8_encrypted_pem(password.as_bytes(), LineEnding::LF)
            .expect("a valid P-256 key encrypts as PKCS#8")
    }

    /// The matching public key.
    pub fn public(&self) -> PublicKey {
        PublicKey::from_key(*self.key.verifying_key())
    }

    /// A signature of `message`: base64 of its DER form, as cosign writes them.
    pub fn sign(&self, message: &[u8]) -> String {
        let signature: Signature = self.key.sign(message);
        BASE64.encode(signature.to_der().as_bytes())
    }
}

/// One signature of a registry artifact as stored beside it: the signed payload and the
/// signature text.
#[derive(Debug, Clone)]
pub struct AttachedSignature {
    /// The simple signing payload.
    pub payload: Vec<u8>,
    /// Base64 of the DER signature over `payload`.
    pub signature: String,
}

/// The simple signing payload for the manifest `manifest_digest` of `repository`
/// (`registry/path`): the message a registry artifact's signature signs.
pub fn simple_signing_payload(repository: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    }))
    .expect("a JSON value serialises")
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    identity: PayloadIdentity,
    image: PayloadImage,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PayloadIdentity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Deserialize)]
struct PayloadImage {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// Checks that a signed payload is about the manifest `manifest_digest` in `repository`
/// (`registry/path`): a valid signature naming another manifest says nothing about this one,
/// and one naming another repository was given for another plugin, which could otherwise be
/// served under this one's name.
pub fn check_payload(
    payload: &[u8],
    repository: &str,
    manifest_digest: &str,
) -> Result<(), String> {
    let parsed: Payload = serde_json::from_slice(payload)
        .map_err(|e| format!("its payload is not a simple signing document ({e})"))?;
    if parsed.critical.kind != PAYLOAD_TYPE {
        return Err(format!(
            "its payload is of type `{}`, not `{PAYLOAD_TYPE}`",
            parsed.critical.kind
        ));
    }
    if parsed.critical.image.docker_manifest_digest != manifest_digest {
        return Err(format!(
            "it signs manifest {}, not {manifest_digest}",
            parsed.critical.image.docker_manifest_digest
        ));
    }
    if parsed.critical.identity.docker_reference != repository {
        return Err(format!(
            "it was made for the repository `{}`, not `{repository}`",
            parsed.critical.identity.docker_reference
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_its_message_under_its_key() {
        let key = PrivateKey::generate();
        let other = PrivateKey::generate();
        let signature = key.sign(b"component bytes");
        assert!(key.public().verifies(b"component bytes", &signature));
        assert!(!key.public().verifies(b"component bytez", &signature));
        assert!(!other.public().verifies(b"component bytes", &signature));
        assert!(!key.public().verifies(b"component bytes", "not base64!"));
        assert!(!key.public().verifies(b"component bytes", ""));
        // With line breaks, as a file written by hand may have.
        let wrapped = format!("{}\n{}\n", &signature[..20], &signature[20..]);
        assert!(key.public().verifies(b"component bytes", &wrapped));
    }

    #[test]
    fn keys_round_trip_through_pem_and_keep_their_fingerprint() {
        let key = PrivateKey::generate();
        let public = key.public();
        let again = PublicKey::from_pem(&public.to_pem(), Path::new("k.pub")).unwrap();
        assert_eq!(again.fingerprint(), public.fingerprint());
        assert!(public.fingerprint().starts_with("sha256:"));
        let e = PublicKey::from_pem(&key.to_pem(""), Path::new("k.key")).unwrap_err();
        assert!(e.to_string().contains("it is a private key"), "{e}");
        let e = PublicKey::from_pem("hello", Path::new("k.pub")).unwrap_err();
        assert!(e.to_string().contains("not a PEM public key"), "{e}");
    }

    #[test]
    fn a_cosign_signature_verifies() {
        // Made by cosign (Go's crypto/ecdsa): the key and the signature are checked as another
        // implementation wrote them, not as this one would.
        let public = PublicKey::from_pem(COSIGN_PUB, Path::new("cosign.pub")).unwrap();
        assert!(public.verifies(COSIGN_PAYLOAD.as_bytes(), COSIGN_SIGNATURE));
        assert!(
            check_payload(
                COSIGN_PAYLOAD.as_bytes(),
                "registry-testing.svc.lan/busybox",
                COSIGN_DIGEST
            )
            .is_ok()
        );
        // The payload Cordon writes for the same artifact is byte for byte cosign's.
        assert_eq!(
            simple_signing_payload("registry-testing.svc.lan/busybox", COSIGN_DIGEST),
            COSIGN_PAYLOAD.as_bytes()
        );
        let edited = COSIGN_PAYLOAD.replace("busybox", "busyboy");
        assert!(!public.verifies(edited.as_bytes(), COSIGN_SIGNATURE));
    }

    #[test]
    fn an_encrypted_key_opens_only_with_its_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        let key = PrivateKey::generate();
        let pem = key.to_pem("correct horse");
        assert!(pem.contains("ENCRYPTED PRIVATE KEY"));
        let mut options = std::fs::OpenOptions::new();
        std::os::unix::fs::OpenOptionsExt::mode(options.write(true).create_new(true), 0o600);
        std::io::Write::write_all(&mut options.open(&path).unwrap(), pem.as_bytes()).unwrap();
        let opened = PrivateKey::load(&path, || {
            Ok(zeroize::Zeroizing::new("correct horse".into()))
        })
        .unwrap();
        assert_eq!(opened.public().fingerprint(), key.public().fingerprint());
        let e =
            PrivateKey::load(&path, || Ok(zeroize::Zeroizing::new("wrong".into()))).unwrap_err();
        assert!(e.to_string().contains("the password is wrong"), "{e}");
    }

    #[test]
    fn a_payload_must_name_the_manifest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let payload = simple_signing_payload("127.0.0.1:5000/p", &digest);
        assert!(check_payload(&payload, "127.0.0.1:5000/p", &digest).is_ok());
        let other = format!("sha256:{}", "b".repeat(64));
        let e = check_payload(&payload, "127.0.0.1:5000/p", &other).unwrap_err();
        assert!(e.contains("it signs manifest sha256:aaa"), "{e}");
        let e = check_payload(&payload, "127.0.0.1:5000/q", &digest).unwrap_err();
        assert!(
            e.contains("made for the repository `127.0.0.1:5000/p`"),
            "{e}"
        );
        assert!(check_payload(b"{}", "p", &digest).is_err());
        let wrong_type = br#"{"critical":{"identity":{"docker-reference":"p"},"image":{"docker-manifest-digest":"x"},"type":"other"}}"#;
        assert!(
            check_payload(wrong_type, "p", "x")
                .unwrap_err()
                .contains("of type `other`")
        );
    }

    // The key-pair fixture of sigstore-rs (src/cosign/signature_layers.rs), a signature cosign
    // made; checked independently with `openssl dgst -sha256 -verify`.
    const COSIGN_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu
OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==
-----END PUBLIC KEY-----
";
    const COSIGN_PAYLOAD: &str = r#"{"critical":{"identity":{"docker-reference":"registry-testing.svc.lan/busybox"},"image":{"docker-manifest-digest":"sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"},"type":"cosign container image signature"},"optional":null}"#;
    const COSIGN_SIGNATURE: &str = "MEUCIQD6q/COgzOyW0YH1Dk+CCYSt4uAhm3FDHUwvPI55zwnlwIgE0ZK58ZOWpZw8YVmBapJhBqCfdPekIknimuO0xH8Jh8=";
    const COSIGN_DIGEST: &str =
        "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";
}
