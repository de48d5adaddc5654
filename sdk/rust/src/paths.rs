//! Guest paths: which directories are granted, and turning a path argument into a path
//! inside one of them.
//!
//! The sandbox (the host's preopens) is what actually confines a plugin; these checks exist
//! to give a clear error naming the granted directories instead of a bare "not found" or
//! "operation not permitted", to resolve relative paths against the grant, and to keep every
//! path a tool prints in the guest's terms.

use std::io;
use std::path::Path;

use crate::ToolError;

/// The directories this instance may reach, as guest paths.
///
/// Build it with [`GrantedDirs::from_env`] in a tool, or [`GrantedDirs::with_roots`] in a
/// test that checks grant handling.
#[derive(Debug, Clone)]
pub struct GrantedDirs {
    roots: Vec<String>,
    /// Per root: granted read-only. A write there fails with the same "not permitted" as an
    /// escape through a link, so only this tells the two apart in an error message.
    read_only: Vec<bool>,
}

impl GrantedDirs {
    /// The granted directories: the component's preopens (`wasi:filesystem/preopens`), each
    /// read-only unless its descriptor may mutate the directory. A native build (unit tests)
    /// has no sandbox and is given `/`, writable.
    pub fn from_env() -> Self {
        #[cfg(target_arch = "wasm32")]
        let (roots, read_only) = wasip2::filesystem::preopens::get_directories()
            .into_iter()
            .map(|(dir, path)| {
                use wasip2::filesystem::types::DescriptorFlags;
                let writable = dir
                    .get_flags()
                    .is_ok_and(|f| f.contains(DescriptorFlags::MUTATE_DIRECTORY));
                (normalize(&path), !writable)
            })
            .unzip();
        #[cfg(not(target_arch = "wasm32"))]
        let (roots, read_only) = (vec!["/".to_owned()], vec![false]);
        Self { roots, read_only }
    }

    /// A view with the given roots, all writable, for tests of grant handling.
    pub fn with_roots(roots: &[&str]) -> Self {
        Self {
            roots: roots.iter().map(|r| normalize(r)).collect(),
            read_only: vec![false; roots.len()],
        }
    }

    /// The same view with `root` marked as granted read-only, for tests of error messages.
    pub fn with_read_only(mut self, root: &str) -> Self {
        let root = normalize(root);
        for (r, ro) in self.roots.iter().zip(self.read_only.iter_mut()) {
            if *r == root {
                *ro = true;
            }
        }
        self
    }

    /// The granted directories.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }

    fn roots_text(&self) -> String {
        if self.roots.is_empty() {
            "none".to_owned()
        } else {
            self.roots.join(", ")
        }
    }

    /// Whether `path` (normalised, absolute) lies inside a granted directory.
    pub fn is_granted(&self, path: &str) -> bool {
        self.roots.iter().any(|r| within(path, r))
    }

    /// The granted directory `path` (normalised, absolute) lies in: the innermost one when
    /// grants nest.
    pub fn grant_of(&self, path: &str) -> Option<&str> {
        self.roots
            .iter()
            .filter(|r| within(path, r))
            .max_by_key(|r| r.len())
            .map(String::as_str)
    }

    /// Whether `path` lies in a directory granted read-only.
    pub fn is_read_only(&self, path: &str) -> bool {
        let grant = self.grant_of(path);
        self.roots
            .iter()
            .zip(&self.read_only)
            .any(|(r, ro)| *ro && Some(r.as_str()) == grant)
    }

    /// Whether `path` is an ancestor of some granted directory (e.g. `/` above `/data`).
    pub fn is_above_grants(&self, path: &str) -> bool {
        self.roots.iter().any(|r| within(r, path) && r != path)
    }

    /// Resolves a `path` argument naming a file to a normalised guest path inside a grant.
    ///
    /// Relative paths are taken relative to the granted directory that contains them (the
    /// only one, or the first where the path exists). An absolute path outside every grant is
    /// refused, and the host is told the call lacked the file's directory read-only (see
    /// [`crate::grants`]): a person may be asked for it.
    pub fn resolve(&self, arg: &str, field: &str) -> Result<String, ToolError> {
        self.resolve_wanting(arg, field, Wanted::Parent)
    }

    /// As [`GrantedDirs::resolve`], for an argument naming a directory: the host is told the
    /// call lacked that directory itself.
    pub fn resolve_dir(&self, arg: &str, field: &str) -> Result<String, ToolError> {
        self.resolve_wanting(arg, field, Wanted::Itself)
    }

    /// As [`GrantedDirs::resolve`], for a file the tool writes: the host is told the call
    /// lacked the file's directory read-write, so a person is asked once, not first for
    /// reading and then again for writing.
    pub fn resolve_to_write(&self, arg: &str, field: &str) -> Result<String, ToolError> {
        self.resolve_wanting(arg, field, Wanted::ParentWritable)
    }

    fn resolve_wanting(&self, arg: &str, field: &str, wanted: Wanted) -> Result<String, ToolError> {
        if arg.trim().is_empty() {
            return Err(ToolError::invalid(format!(
                "`{field}` is empty; pass a path inside a granted directory ({})",
                self.roots_text()
            )));
        }
        if arg.contains('\0') {
            return Err(ToolError::invalid(format!(
                "`{field}` contains a NUL character"
            )));
        }
        if arg.starts_with('/') {
            let path = normalize(arg);
            if self.is_granted(&path) || self.is_above_grants(&path) {
                return Ok(path);
            }
            return Err(self.outside_wanting(arg, &path, wanted));
        }
        let candidates: Vec<String> = self
            .roots
            .iter()
            .map(|r| normalize(&format!("{r}/{arg}")))
            .filter(|p| self.is_granted(p))
            .collect();
        if let Some(found) = candidates.iter().find(|p| Path::new(p.as_str()).exists()) {
            return Ok(found.clone());
        }
        match candidates.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(self.outside(arg)),
            _ => Err(ToolError::not_found(format!(
                "{arg} does not exist in any granted directory ({})",
                self.roots_text()
            ))),
        }
    }

    /// The paths to search when `path` is optional: the argument, or every grant.
    pub fn resolve_or_roots(
        &self,
        arg: Option<&str>,
        field: &str,
    ) -> Result<Vec<String>, ToolError> {
        match arg {
            Some(a) => {
                let path = self.resolve_dir(a, field)?;
                if self.is_granted(&path) {
                    Ok(vec![path])
                } else {
                    // Above the grants (e.g. `/`): search the grants below it.
                    Ok(self
                        .roots
                        .iter()
                        .filter(|r| within(r, &path))
                        .cloned()
                        .collect())
                }
            }
            None if self.roots.is_empty() => Err(ToolError::denied(
                "no directories are granted to this tool; ask the user to grant one",
            )),
            None => Ok(self.roots.clone()),
        }
    }

    fn outside(&self, arg: &str) -> ToolError {
        ToolError::denied(format!(
            "{arg} is outside the directories granted to this tool ({}); use a path inside one of them",
            self.roots_text()
        ))
    }

    /// [`GrantedDirs::outside`] for the absolute, normalised `path`, after telling the host
    /// the call lacked its directory (or itself) read-only.
    fn outside_wanting(&self, arg: &str, path: &str, wanted: Wanted) -> ToolError {
        let dir = match wanted {
            Wanted::Itself => path,
            Wanted::Parent | Wanted::ParentWritable => match path.rfind('/') {
                Some(0) | None => "/",
                Some(i) => &path[..i],
            },
        };
        let mode = match wanted {
            Wanted::ParentWritable => "rw",
            Wanted::Itself | Wanted::Parent => "ro",
        };
        let grant = format!("fs:{dir}:{mode}");
        // `/` itself is never granted (it holds Cordon's own state), and a path with `:` has
        // no grant syntax: then nobody can be asked.
        if dir == "/" || dir.contains(':') || crate::grants::want(&grant).is_err() {
            return self.outside(arg);
        }
        ToolError::denied(format!(
            "{arg} is outside the directories granted to this tool ({}); use a path inside one \
             of them, or the user may be asked to grant `{grant}`",
            self.roots_text()
        ))
    }

    /// Maps an I/O error on `path` to a tool error that names the grants where useful.
    ///
    /// The sandbox refuses a write under a read-only grant and a path that leaves the grants
    /// through a symbolic link with the same error, so the message says which is likely from
    /// the grant's mode.
    pub fn io_error(&self, path: &str, err: &io::Error) -> ToolError {
        match err.kind() {
            io::ErrorKind::NotFound => ToolError::not_found(format!(
                "{path} does not exist (granted directories: {})",
                self.roots_text()
            )),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                if self.is_read_only(path) =>
            {
                let grant = self.grant_of(path).unwrap_or("/");
                // A path that is missing or a plain entry cannot lead outside, so the refusal
                // was a write; through a link it may have been a read, which a read-write
                // grant would not fix.
                let may_be_link = match std::fs::symlink_metadata(path) {
                    Ok(meta) => meta.file_type().is_symlink(),
                    Err(e) => e.kind() != io::ErrorKind::NotFound,
                };
                if may_be_link {
                    ToolError::denied(format!(
                        "{path}: access refused ({err}); it may be a link leading outside the \
                         granted directories, and {grant} is granted read-only, so nothing in \
                         it can be created, changed or deleted"
                    ))
                } else {
                    ToolError::denied(format!(
                        "{path}: access refused ({err}): {grant} is granted read-only, so \
                         nothing in it can be created, changed or deleted; ask the user for a \
                         read-write grant to write there"
                    ))
                }
            }
            io::ErrorKind::PermissionDenied => ToolError::denied(format!(
                "{path}: access refused ({err}); it may be a link leading outside the granted directories"
            )),
            _ => ToolError::from_io(path, err),
        }
    }
}

/// Which directory a path argument outside the grants makes the host ask for.
#[derive(Debug, Clone, Copy)]
enum Wanted {
    /// The directory holding it: the argument names a file.
    Parent,
    /// The path itself: the argument names a directory.
    Itself,
    /// The directory holding it, read-write: the argument names a file the tool writes.
    ParentWritable,
}

/// Whether `path` is `root` or below it (both normalised).
pub fn within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Lexically normalises a guest path: no `.`, no `..`, no repeated or trailing `/`.
///
/// `..` is resolved textually, so `/data/../etc` is `/etc` (and then refused as outside the
/// grants) rather than being left for the filesystem to interpret.
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() && !absolute {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// Joins a display root and a path relative to it without doubling `/`.
pub fn join(root: &str, rel: &str) -> String {
    if rel.is_empty() {
        root.to_owned()
    } else if root.ends_with('/') {
        format!("{root}{rel}")
    } else {
        format!("{root}/{rel}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_dots_textually() {
        assert_eq!(normalize("/data/./a//b/"), "/data/a/b");
        assert_eq!(normalize("/data/../etc/passwd"), "/etc/passwd");
        assert_eq!(normalize("/../../x"), "/x");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("a/../.."), "..");
    }

    #[test]
    fn resolve_keeps_paths_inside_grants() {
        let fs = GrantedDirs::with_roots(&["/data", "/src/"]);
        assert_eq!(fs.resolve("/data/x/../y", "path").unwrap(), "/data/y");
        assert_eq!(fs.resolve("/", "path").unwrap(), "/");
        for bad in ["/etc/passwd", "/data/../etc", "/database", "../etc"] {
            let e = fs.resolve(bad, "path").unwrap_err();
            assert!(
                matches!(&e, ToolError::Denied(m) if m.contains("/data, /src")),
                "{bad}: {e:?}"
            );
        }
        let e = fs.resolve("", "path").unwrap_err();
        assert!(matches!(e, ToolError::InvalidArguments(_)));
        let e = fs.resolve("nowhere.txt", "path").unwrap_err();
        assert!(matches!(e, ToolError::NotFound(_)), "{e:?}");
        let one = GrantedDirs::with_roots(&["/data"]);
        assert_eq!(one.resolve("a/b.txt", "path").unwrap(), "/data/a/b.txt");
    }

    #[test]
    fn a_path_outside_the_grants_tells_the_host_which_directory_it_lacked() {
        let fs = GrantedDirs::with_roots(&["/data"]);
        crate::grants::take_said();
        let e = fs.resolve("/home/ann/notes/a.txt", "path").unwrap_err();
        assert!(
            matches!(&e, ToolError::Denied(m) if m.contains("`fs:/home/ann/notes:ro`")),
            "{e:?}"
        );
        fs.resolve_dir("/home/ann/notes", "path").unwrap_err();
        fs.resolve_to_write("/srv/db/shop.db", "database")
            .unwrap_err();
        fs.resolve_or_roots(Some("/srv/logs/"), "path").unwrap_err();
        // Nothing to ask for: a relative path, a file at the root, a path with `:`.
        for nothing in ["../x", "/x.txt", "/a:b/c"] {
            fs.resolve(nothing, "path").unwrap_err();
        }
        assert_eq!(
            crate::grants::take_said(),
            [
                "fs:/home/ann/notes:ro",
                "fs:/home/ann/notes:ro",
                "fs:/srv/db:rw",
                "fs:/srv/logs:ro"
            ]
        );
    }
}
