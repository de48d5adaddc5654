//! Entry points for the fuzz targets in `tests/fuzz`: what a registry, a publisher or a user
//! gives `cordon plugin install`, read by the code that reads it. Built only with the
//! `fuzzing` feature.

use std::path::Path;
use std::sync::OnceLock;

use crate::{InstallSource, OciReference, PublicKey, RepositoryPattern};

/// A manifest as a registry serves it.
pub fn manifest(data: &[u8]) {
    crate::oci::read_manifest(data);
}

/// A signature: `data` up to its first `\n` is the signature text (base64), the rest the
/// payload it signs; the payload is checked against a manifest and repository, the signature
/// against a key. A PEM key file is read from the whole.
pub fn signature(data: &[u8]) {
    static KEY: OnceLock<PublicKey> = OnceLock::new();
    let key = KEY.get_or_init(|| {
        PublicKey::from_pem(
            "-----BEGIN PUBLIC KEY-----\n\
             MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErHMfP4+lnSbBVabJHEG/LOekFBj1\n\
             lGVzka1XeQXQLjAyS/UGTQk2c6mmwADnwqWO2GHL6dVjxLChm5zB1CSn7w==\n\
             -----END PUBLIC KEY-----\n",
            Path::new("fuzz.pub"),
        )
        .expect("the fuzz key reads")
    });
    let (signature, payload) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let _ = crate::signing::check_payload(
        payload,
        "localhost:5000/tools/fuzz",
        "sha256:0000000000000000000000000000000000000000000000000000000000000000",
    );
    if let Ok(signature) = std::str::from_utf8(signature) {
        // Nobody holds the fuzz key's private half: nothing the fuzzer makes may verify.
        assert!(!key.verifies(payload, signature));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = PublicKey::from_pem(text, Path::new("fuzz.pub"));
    }
}

/// What a user names a plugin by: an install source, an OCI reference, a repository pattern
/// for trust.
pub fn references(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = InstallSource::parse(text, None);
    let _ = InstallSource::parse("https://example.com/x.wasm", Some(text));
    if let Ok(reference) = OciReference::parse(text) {
        let _ = reference.describe();
        let _ = reference.repository_path();
    }
    let _ = RepositoryPattern::parse(text);
}
