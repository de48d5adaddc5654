//! The SDK carries its own copy of the WIT contract (`wit/`), so that a copy of the SDK taken
//! out of this repository still builds. Inside the repository that copy must equal the
//! contract in the top-level `wit/`: this test fails when one changes without the other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn wit_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn vendored_wit_matches_the_contract() {
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tree = sdk.join("../..");
    let contract = tree.join("wit");
    // A copy of the SDK outside the Cordon tree has only its own WIT, which is the point.
    if !tree.join("host").is_dir() || !contract.is_dir() {
        eprintln!("not inside the Cordon tree: no contract to compare the vendored WIT with");
        return;
    }
    let vendored = wit_files(&sdk.join("wit"));
    let expected = wit_files(&contract);
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&vendored),
        names(&expected),
        "sdk/rust/wit must hold the same files as wit/; copy them: cp -r wit/. sdk/rust/wit/"
    );
    for (name, bytes) in &expected {
        assert!(
            vendored[name] == *bytes,
            "sdk/rust/wit/{name} differs from wit/{name}; copy it: cp -r wit/. sdk/rust/wit/"
        );
    }
}
