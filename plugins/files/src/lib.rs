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
            "Lists a directory: names, types and sizes.",
            Hints::READ_ONLY,
            |a: ListDirArgs| list::run(&GrantedDirs::from_env(), a),
        )
        .structured_tool(
            "find_files",
            "Finds files by name pattern (glob) under a directory, skipping hidden and \
             .gitignore'd files unless asked.",
            Hints::READ_ONLY,
            |a: FindFilesArgs| find::run(&GrantedDirs::from_env(), a),
        )
        .tool(
            "search_text",
            "Searches file contents like ripgrep; prints `path:line:text` per match.",
            Hints::READ_ONLY,
            |a: SearchTextArgs| search::run(&GrantedDirs::from_env(), a),
        )
        .tool(
            "read_file",
            "Reads a text file, or lines `start_line`..`end_line` of it; says \
             `next_start_line` when there is more.",
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
