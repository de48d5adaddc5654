//! Cordon's bundled `files` tool: list, find, search and read files inside the directories
//! granted to the plugin.
//!
//! Every path is a guest path (`/data/...` as granted) and every path printed is one too, so
//! nothing of the host's layout leaks. Walks honour .gitignore/.ignore (even outside a git
//! repository), skip hidden entries unless asked, and never follow links; the sandbox refuses
//! any link that would lead outside a grant.

mod args;
mod find;
mod list;
mod read;
mod search;

use cordon_sdk::{Hints, Plugin, export_plugin};

pub use args::{FindFilesArgs, ListDirArgs, ReadFileArgs, SearchTextArgs};
pub use cordon_sdk::paths::GrantedDirs;

/// The four tools over the granted directories of this instance.
pub fn plugin() -> Plugin {
    Plugin::new()
        .structured_tool(
            "list_dir",
            "Lists one directory: names, types (file, dir, symlink) and file sizes. `/` shows \
             the granted directories. Use find_files to look for files by name across a tree.",
            Hints::READ_ONLY,
            |a: ListDirArgs| list::run(&GrantedDirs::from_env(), a),
        )
        .structured_tool(
            "find_files",
            "Finds files by glob pattern (e.g. `*.rs`, `src/**/test_*.py`, `{README,LICENSE}*`) \
             under a directory, skipping hidden files and anything excluded by .gitignore or \
             .ignore unless asked. Returns matching paths, sorted.",
            Hints::READ_ONLY,
            |a: FindFilesArgs| find::run(&GrantedDirs::from_env(), a),
        )
        .tool(
            "search_text",
            "Searches file contents for a regular expression or literal text, like ripgrep: \
             prints `path:line:text` for each matching line (context lines as \
             `path-line-text`). Skips binary files, hidden files and .gitignore'd files \
             unless asked. Capped per file and in total; the last line summarises what was \
             searched and whether the output was cut.",
            Hints::READ_ONLY,
            |a: SearchTextArgs| search::run(&GrantedDirs::from_env(), a),
        )
        .tool(
            "read_file",
            "Reads a text file, optionally only lines `start_line`..`end_line` (counting from \
             1). Returns the text, then JSON with `total_lines`, the range returned and \
             `next_start_line` when there is more, so long files can be read in pages.",
            Hints::READ_ONLY,
            |a: ReadFileArgs| read::run(&GrantedDirs::from_env(), a),
        )
}

export_plugin!(plugin);

/// The tools' logic with an explicit view of the grants, for tests of grant handling.
pub mod logic {
    pub use crate::find::run as find_files;
    pub use crate::list::run as list_dir;
    pub use crate::read::run as read_file;
    pub use crate::search::run as search_text;
}
