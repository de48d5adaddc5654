//! Where a component comes from: a local file, an `https://` URL pinned by its digest, or an
//! `oci://` reference to a registry.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;
use reqwest::redirect::Policy;

use crate::error::HomeError;
use crate::fsutil::{MAX_COMPONENT_BYTES, io_err, sha256_digest};
use crate::oci::{self, OciReference};
use crate::registry::{error_chain, is_loopback};

/// Where to get the component bytes from, with the digest they must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallSource {
    /// A component file on this machine. An expected digest is optional here because the user
    /// already has the bytes; when given it is still checked.
    File {
        /// The path as the user gave it.
        path: PathBuf,
        /// `sha256:<hex>` the file must have, if the user pinned it.
        sha256: Option<String>,
    },
    /// A component served over HTTPS (or HTTP on a loopback address, for tests and local
    /// mirrors). The digest is mandatory: a URL alone says nothing about what it will serve.
    Url {
        /// The parsed URL.
        url: Url,
        /// `sha256:<hex>` the downloaded bytes must have.
        sha256: String,
    },
    /// A component artifact in an OCI registry, by tag or by digest (HTTP only for a
    /// registry on a loopback address).
    Oci(OciReference),
}

/// The bytes of a component and where exactly they came from.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component.
    pub bytes: Vec<u8>,
    /// For a registry source, the digest of the manifest read.
    pub oci_manifest: Option<String>,
}

impl InstallSource {
    /// Interprets the `install` argument: anything with a URL scheme is a URL, a bare name a
    /// bundled tool ([`crate::bundled`]), everything else a path. `sha256` is the `--sha256` value, with or without the `sha256:` prefix.
    pub fn parse(arg: &str, sha256: Option<&str>) -> Result<InstallSource, HomeError> {
        let sha256 = sha256.map(normalise_digest).transpose()?;
        if arg.starts_with("oci://") {
            if sha256.is_some() {
                return Err(HomeError::BadUrl {
                    url: arg.to_string(),
                    reason: "an oci:// reference is pinned by its own digest (…@sha256:HEX), not \
                             --sha256"
                        .into(),
                });
            }
            return Ok(InstallSource::Oci(OciReference::parse(arg)?));
        }
        if let Some((scheme, _)) = arg.split_once("://") {
            let url = Url::parse(arg).map_err(|e| HomeError::BadUrl {
                url: arg.to_string(),
                reason: e.to_string(),
            })?;
            match scheme.to_ascii_lowercase().as_str() {
                "https" => {}
                "http" if is_loopback(&url) => {}
                "http" => {
                    return Err(HomeError::BadUrl {
                        url: arg.to_string(),
                        reason: "plain http:// is only allowed for loopback hosts (localhost, \
                                 127.0.0.1, [::1]); use https://"
                            .into(),
                    });
                }
                other => {
                    return Err(HomeError::BadUrl {
                        url: arg.to_string(),
                        reason: format!(
                            "the `{other}` scheme is not supported; give a local file path, an \
                             https:// URL or an oci:// reference"
                        ),
                    });
                }
            }
            let sha256 = sha256.ok_or_else(|| HomeError::DigestRequired {
                url: arg.to_string(),
            })?;
            Ok(InstallSource::Url { url, sha256 })
        } else if crate::bundled::is_bare_name(arg) {
            Ok(InstallSource::File {
                path: crate::bundled::find(arg, &crate::bundled::dirs())?,
                sha256,
            })
        } else {
            Ok(InstallSource::File {
                path: PathBuf::from(arg),
                sha256,
            })
        }
    }

    /// How the source is recorded in the lock file: an absolute path or the URL.
    pub fn describe(&self) -> String {
        match self {
            InstallSource::File { path, .. } => std::path::absolute(path)
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string(),
            InstallSource::Url { url, .. } => url.to_string(),
            InstallSource::Oci(reference) => reference.describe(),
        }
    }

    /// A plugin name derived from the file or URL name (`probe.wasm` → `probe`), if that is a
    /// valid plugin name.
    pub fn default_name(&self) -> Option<String> {
        let last = match self {
            InstallSource::File { path, .. } => path.file_name()?.to_str()?.to_string(),
            InstallSource::Url { url, .. } => url.path_segments()?.next_back()?.to_string(),
            InstallSource::Oci(reference) => reference.name_hint().to_string(),
        };
        let stem = last
            .strip_suffix(".wasm")
            .unwrap_or(&last)
            .replace('.', "-");
        crate::validate_plugin_name(&stem).ok().map(|_| stem)
    }

    /// Reads or downloads the bytes and checks the pinned digest before anything else sees
    /// them.
    pub async fn fetch(&self) -> Result<Fetched, HomeError> {
        let (bytes, expected) = match self {
            InstallSource::File { path, sha256 } => (read_file(path)?, sha256.as_deref()),
            InstallSource::Url { url, sha256 } => (
                download(url, MAX_COMPONENT_BYTES).await?,
                Some(sha256.as_str()),
            ),
            // Every digest of the artifact is checked against the bytes received in `pull`.
            InstallSource::Oci(reference) => {
                let pulled = oci::pull(reference).await?;
                return Ok(Fetched {
                    bytes: pulled.bytes,
                    oci_manifest: Some(pulled.manifest_digest),
                });
            }
        };
        if let Some(expected) = expected {
            let actual = sha256_digest(&bytes);
            if actual != expected {
                return Err(HomeError::DigestMismatch {
                    source_name: self.describe(),
                    expected: expected.to_string(),
                    actual,
                });
            }
        }
        Ok(Fetched {
            bytes,
            oci_manifest: None,
        })
    }
}

/// The metadata of a file the user named, or the error saying it is not there.
pub(crate) fn metadata_of(path: &std::path::Path) -> Result<std::fs::Metadata, HomeError> {
    std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => HomeError::SourceNotFound {
            path: path.to_path_buf(),
        },
        _ => io_err("read", path)(e),
    })
}

fn read_file(path: &std::path::Path) -> Result<Vec<u8>, HomeError> {
    let meta = metadata_of(path)?;
    if !meta.is_file() {
        return Err(HomeError::NotAComponentFile {
            path: path.to_path_buf(),
            reason: "it is not a regular file".into(),
        });
    }
    if meta.len() > MAX_COMPONENT_BYTES as u64 {
        return Err(HomeError::NotAComponentFile {
            path: path.to_path_buf(),
            reason: format!(
                "it is {} bytes, more than the {MAX_COMPONENT_BYTES}-byte limit for a component",
                meta.len()
            ),
        });
    }
    std::fs::read(path).map_err(io_err("read", path))
}

/// Accepts `HEX` or `sha256:HEX` (64 hex digits, any case) and returns `sha256:<lowercase>`.
pub fn normalise_digest(text: &str) -> Result<String, HomeError> {
    let hex = crate::digest_hex(text);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(HomeError::BadDigest {
            given: text.to_string(),
        });
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// Downloads `url`, refusing a body of more than `max_bytes`.
pub(crate) async fn download(url: &Url, max_bytes: usize) -> Result<Vec<u8>, HomeError> {
    let fail = |reason: String| HomeError::Download {
        url: url.to_string(),
        reason,
    };
    // Redirects may not downgrade to plain HTTP on a non-loopback host: the digest would still
    // catch a swapped body, but the user asked for https and should get it.
    let policy = Policy::custom(|attempt| {
        if attempt.previous().len() >= 5 {
            attempt.error("more than 5 redirects")
        } else if attempt.url().scheme() == "https" || is_loopback(attempt.url()) {
            attempt.follow()
        } else {
            attempt.error("redirect to a plain http:// URL refused")
        }
    });
    // reqwest is built without a TLS crypto provider of its own (see the workspace Cargo.toml):
    // make ring the process default unless one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(policy)
        .connect_timeout(Duration::from_secs(15))
        .timeout(Duration::from_secs(300))
        .user_agent(concat!("cordon/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| fail(format!("could not set up the HTTP client: {e}")))?;
    let mut response = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| fail(error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(fail(format!(
            "the server answered {status}{}",
            if status == reqwest::StatusCode::NOT_FOUND {
                "; check the URL"
            } else {
                ""
            }
        )));
    }
    if response
        .content_length()
        .is_some_and(|n| n > max_bytes as u64)
    {
        return Err(fail(format!(
            "the server announces more than the {max_bytes}-byte limit"
        )));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| fail(format!("the download broke off: {}", error_chain(&e))))?
    {
        if bytes.len() + chunk.len() > max_bytes {
            return Err(fail(format!(
                "the body is larger than the {max_bytes}-byte limit"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn urls_need_a_digest_and_https_unless_loopback() {
        assert!(matches!(
            InstallSource::parse("https://example.com/p.wasm", None),
            Err(HomeError::DigestRequired { .. })
        ));
        assert!(matches!(
            InstallSource::parse("http://example.com/p.wasm", Some(HEX)),
            Err(HomeError::BadUrl { .. })
        ));
        assert!(matches!(
            InstallSource::parse("ftp://example.com/p.wasm", Some(HEX)),
            Err(HomeError::BadUrl { .. })
        ));
        for ok in [
            "http://127.0.0.1:8080/p.wasm",
            "http://localhost/p.wasm",
            "http://[::1]:9/p.wasm",
            "https://example.com/p.wasm",
        ] {
            let src = InstallSource::parse(ok, Some(HEX)).unwrap();
            assert_eq!(src.default_name().as_deref(), Some("p"), "{ok}");
        }
    }

    #[test]
    fn digests_are_normalised_and_checked() {
        assert_eq!(
            normalise_digest(&HEX.to_uppercase()).unwrap(),
            format!("sha256:{HEX}")
        );
        assert_eq!(
            normalise_digest(&format!("sha256:{HEX}")).unwrap(),
            format!("sha256:{HEX}")
        );
        assert!(normalise_digest("abc").is_err());
        assert!(normalise_digest(&format!("{}g", &HEX[1..])).is_err());
    }

    #[tokio::test]
    async fn missing_file_and_wrong_digest_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.wasm");
        let src = InstallSource::parse(missing.to_str().unwrap(), None).unwrap();
        assert!(matches!(
            src.fetch().await,
            Err(HomeError::SourceNotFound { .. })
        ));
        let file = dir.path().join("x.wasm");
        std::fs::write(&file, b"xyz").unwrap();
        let src = InstallSource::parse(file.to_str().unwrap(), Some(HEX)).unwrap();
        assert!(matches!(
            src.fetch().await,
            Err(HomeError::DigestMismatch { .. })
        ));
    }
}
