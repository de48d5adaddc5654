//! Filesystem grants attacked from inside the sandbox: every escape is refused, read-only means
//! read-only, and the host side is checked to be untouched.

use std::path::{Path, PathBuf};

use crate::common::*;
use cordon_runtime::Sandbox;

struct Layout {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    ro: PathBuf,
    rw: PathBuf,
}

fn layout() -> Layout {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let outside = root.join("outside");
    let ro = root.join("ro");
    let rw = root.join("rw");
    for d in [&outside, &ro, &rw] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::fs::write(ro.join("file.txt"), "ro-data").unwrap();
    std::fs::create_dir(ro.join("sub")).unwrap();
    std::fs::write(rw.join("file.txt"), "rw-data").unwrap();
    // Symlinks created on the host inside the grants, pointing out.
    let secret = outside.join("secret.txt");
    std::os::unix::fs::symlink(&secret, ro.join("link_abs")).unwrap();
    std::os::unix::fs::symlink("../outside/secret.txt", ro.join("link_rel")).unwrap();
    std::os::unix::fs::symlink("../outside", ro.join("dirlink")).unwrap();
    std::os::unix::fs::symlink(&outside, rw.join("dirlink_abs")).unwrap();
    std::os::unix::fs::symlink("../outside", rw.join("dirlink_rel")).unwrap();
    // A symlink that stays inside is fine to follow.
    std::os::unix::fs::symlink("file.txt", ro.join("link_inside")).unwrap();
    Layout {
        _tmp: tmp,
        root,
        outside,
        ro,
        rw,
    }
}

fn sb(l: &Layout) -> Sandbox {
    sandbox(&[
        format!("fs:{}:/ro:ro", l.ro.display()),
        format!("fs:{}:/rw:rw", l.rw.display()),
    ])
}

/// Every file under `dir` with its content (symlinks as their target), for before/after checks.
fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let content = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                "<dir>".into()
            } else {
                std::fs::read_to_string(&p).unwrap()
            };
            out.push((p, content));
        }
    }
    out.sort();
    out
}

async fn refused(sb: &Sandbox, op: &str, path: &str, target: Option<&str>) -> String {
    match fs(sb, op, path, target).await {
        Ok(v) => panic!("{op} {path} {target:?} should be refused but returned {v}"),
        Err(msg) => msg,
    }
}

#[tokio::test]
async fn reads_inside_work_and_escapes_are_refused() {
    let _process = shared();
    let l = layout();
    let sb = sb(&l);
    let outside_before = snapshot(&l.outside);

    // Positive controls.
    assert_eq!(
        fs(&sb, "read", "/ro/file.txt", None).await.unwrap(),
        "ro-data"
    );
    assert_eq!(
        fs(&sb, "read", "/ro/link_inside", None).await.unwrap(),
        "ro-data"
    );
    assert_eq!(
        fs(&sb, "read", "/ro/sub/../file.txt", None).await.unwrap(),
        "ro-data"
    );
    let listing = fs(&sb, "readdir", "/ro/", None).await.unwrap();
    assert!(
        listing.as_array().unwrap().iter().any(|n| n == "file.txt"),
        "{listing}"
    );

    let secret_abs = l.outside.join("secret.txt");
    let attacks: Vec<(&str, String)> = vec![
        ("read", "/ro/../outside/secret.txt".into()),
        ("read", "/rw/../outside/secret.txt".into()),
        ("read", "/ro/../../../../../../etc/passwd".into()),
        ("read", "/ro/sub/../../outside/secret.txt".into()),
        ("read", secret_abs.display().to_string()),
        ("read", "/etc/passwd".into()),
        ("read", "/ro/link_abs".into()),
        ("read", "/ro/link_rel".into()),
        ("read", "/ro/dirlink/secret.txt".into()),
        ("read", "/ro/dirlink/./secret.txt".into()),
        ("read", "/rw/dirlink_abs/secret.txt".into()),
        ("read", "/rw/dirlink_rel/secret.txt".into()),
        ("readdir", "/ro/..".into()),
        ("readdir", "/ro/../".into()),
        ("readdir", "/ro/dirlink/".into()),
        ("readdir", "/rw/dirlink_abs/".into()),
        ("readdir", "/".into()),
        ("stat", "/ro/link_abs".into()),
        ("stat", "/ro/dirlink/".into()),
        ("read", "/ro/file.txt/".into()),
    ];
    for (op, path) in &attacks {
        let msg = refused(&sb, op, path, None).await;
        assert!(!msg.contains("secret"), "{op} {path}: {msg}");
    }
    assert_eq!(snapshot(&l.outside), outside_before);
    still_serves().await;
}

#[tokio::test]
async fn read_only_grant_refuses_every_change() {
    let _process = shared();
    let l = layout();
    let sb = sb(&l);
    let ro_before = snapshot(&l.ro);
    let outside_before = snapshot(&l.outside);

    for (op, path, target) in [
        ("write", "/ro/file.txt", None),
        ("write", "/ro/new.txt", None),
        ("append", "/ro/file.txt", None),
        ("truncate", "/ro/file.txt", None),
        ("create", "/ro/created.txt", None),
        ("mkdir", "/ro/newdir", None),
        ("remove", "/ro/file.txt", None),
        ("remove", "/ro/sub", None),
        ("remove", "/ro/link_abs", None),
        ("rename", "/ro/file.txt", Some("/ro/moved.txt")),
        // Moving a file out of the read-only grant into the writable one.
        ("rename", "/ro/file.txt", Some("/rw/stolen.txt")),
        // Hard-linking a read-only file into the writable grant would make it writable.
        ("hardlink", "/ro/file.txt", Some("/rw/ro_link.txt")),
        ("symlink", "/ro/evil", Some("../outside")),
        // Writes through host symlinks pointing out of a writable grant.
        ("write", "/rw/dirlink_abs/pwned.txt", None),
        ("write", "/rw/dirlink_rel/pwned.txt", None),
        ("create", "/rw/dirlink_rel/pwned.txt", None),
        ("mkdir", "/rw/dirlink_abs/pwned", None),
    ] {
        refused(&sb, op, path, target).await;
    }
    assert_eq!(snapshot(&l.ro), ro_before, "read-only grant changed");
    assert_eq!(snapshot(&l.outside), outside_before, "outside changed");
    assert!(!l.rw.join("stolen.txt").exists() && !l.rw.join("ro_link.txt").exists());
    still_serves().await;
}

#[tokio::test]
async fn writable_grant_cannot_move_or_link_data_out() {
    let _process = shared();
    let l = layout();
    let sb = sb(&l);
    let outside_before = snapshot(&l.outside);
    let secret_abs = l.outside.join("secret.txt").display().to_string();

    // Positive controls: a writable grant really is writable.
    assert_eq!(
        fs(&sb, "write", "/rw/new.txt", None).await.unwrap(),
        "written"
    );
    assert_eq!(
        std::fs::read_to_string(l.rw.join("new.txt")).unwrap(),
        "probe"
    );
    assert_eq!(fs(&sb, "mkdir", "/rw/d", None).await.unwrap(), "made");
    assert_eq!(
        fs(&sb, "rename", "/rw/new.txt", Some("/rw/d/moved.txt"))
            .await
            .unwrap(),
        "renamed"
    );
    assert!(l.rw.join("d/moved.txt").exists());
    assert_eq!(
        fs(&sb, "hardlink", "/rw/file.txt", Some("/rw/d/hl.txt"))
            .await
            .unwrap(),
        "linked"
    );

    for (op, path, target) in [
        ("rename", "/rw/file.txt", Some("/rw/../outside/moved.txt")),
        ("rename", "/rw/file.txt", Some("/ro/moved.txt")),
        ("rename", "/rw/file.txt", Some(secret_abs.as_str())),
        ("rename", "/rw/file.txt", Some("/rw/dirlink_rel/moved.txt")),
        ("hardlink", "/rw/file.txt", Some("/rw/../outside/hl.txt")),
        ("hardlink", "/rw/file.txt", Some("/rw/dirlink_abs/hl.txt")),
        ("hardlink", "/rw/file.txt", Some("/ro/hl.txt")),
        // Hard-linking a file from outside into the grant (via a symlinked directory).
        (
            "hardlink",
            "/rw/dirlink_rel/secret.txt",
            Some("/rw/secret_copy.txt"),
        ),
        (
            "rename",
            "/rw/dirlink_abs/secret.txt",
            Some("/rw/secret_moved.txt"),
        ),
        ("write", "/rw/../outside/secret.txt", None),
        ("truncate", "/rw/dirlink_abs/secret.txt", None),
        ("remove", "/rw/dirlink_rel/secret.txt", None),
    ] {
        refused(&sb, op, path, target).await;
    }
    assert_eq!(snapshot(&l.outside), outside_before, "outside changed");
    assert!(!l.rw.join("secret_copy.txt").exists() && !l.rw.join("secret_moved.txt").exists());
    assert!(!l.root.join("moved.txt").exists() && !l.root.join("hl.txt").exists());
    still_serves().await;
}

#[tokio::test]
async fn symlinks_created_by_the_guest_cannot_be_followed_out() {
    let _process = shared();
    let l = layout();
    let sb = sb(&l);
    let outside_before = snapshot(&l.outside);
    let outside_abs = l.outside.display().to_string();
    let secret_abs = l.outside.join("secret.txt").display().to_string();

    // Creating the links may or may not be allowed; following them must never work.
    for (link, target) in [
        ("/rw/evil_rel", "../outside"),
        ("/rw/evil_abs", outside_abs.as_str()),
        ("/rw/evil_file", secret_abs.as_str()),
        ("/rw/evil_up", "../../../../../../.."),
        ("/rw/evil_ro", "../ro"),
    ] {
        let _ = fs(&sb, "symlink", link, Some(target)).await;
    }
    let mut created = Vec::new();
    for link in ["evil_rel", "evil_abs", "evil_file", "evil_up", "evil_ro"] {
        if std::fs::symlink_metadata(l.rw.join(link)).is_ok_and(|m| m.file_type().is_symlink()) {
            created.push(link);
        }
    }
    // Relative links can be created (wasi allows it); they are still not followed out.
    assert!(created.contains(&"evil_rel"), "created: {created:?}");
    for (op, path) in [
        ("read", "/rw/evil_rel/secret.txt"),
        ("read", "/rw/evil_abs/secret.txt"),
        ("read", "/rw/evil_file"),
        ("readdir", "/rw/evil_up/"),
        ("read", "/rw/evil_up/etc/passwd"),
        ("readdir", "/rw/evil_ro/"),
        ("write", "/rw/evil_rel/pwned.txt"),
        ("write", "/rw/evil_abs/pwned.txt"),
        ("write", "/rw/evil_ro/file.txt"),
    ] {
        refused(&sb, op, path, None).await;
    }
    // Writing to a link path: refused if the link exists; if its creation was refused, the
    // write just creates a plain file inside the grant.
    for link in ["evil_file", "evil_abs"] {
        let path = format!("/rw/{link}");
        if created.contains(&link) {
            refused(&sb, "write", &path, None).await;
            refused(&sb, "truncate", &path, None).await;
        }
    }
    eprintln!("guest-created symlinks: {created:?}");
    assert_eq!(snapshot(&l.outside), outside_before, "outside changed");
    assert_eq!(
        std::fs::read_to_string(l.ro.join("file.txt")).unwrap(),
        "ro-data"
    );
    still_serves().await;
}

#[tokio::test]
async fn no_grant_means_no_filesystem() {
    let _process = shared();
    let l = layout();
    let sb = Sandbox::default();
    for path in [
        "/",
        "/ro/file.txt",
        &l.ro.join("file.txt").display().to_string(),
        "/etc/passwd",
        ".",
    ] {
        refused(&sb, "read", path, None).await;
        refused(&sb, "readdir", path, None).await;
    }
}

#[tokio::test]
async fn a_grant_whose_directory_was_swapped_is_refused() {
    let _process = shared();
    let l = layout();
    let sb = sb(&l);
    // Replace the granted directory by a symlink to somewhere else after granting.
    std::fs::rename(&l.ro, l.root.join("ro_old")).unwrap();
    std::os::unix::fs::symlink(&l.outside, &l.ro).unwrap();
    let err = call(
        probe(),
        &sb,
        "fs",
        serde_json::json!({"op": "read", "path": "/ro/secret.txt"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, cordon_runtime::CallError::Denied(d) if d.to_string().contains("now resolves to")),
        "{err}"
    );
}
