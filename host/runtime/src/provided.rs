//! The interfaces the linker provides, as a table: the engine refuses a component importing
//! anything else, and the error refusing it names what is provided. Kept apart from the engine
//! so that the error type can word its message without depending on the engine (which uses it).

/// What the linker provides: each entry an import-name prefix, and how it is named in the
/// message refusing a component that imports anything else (`None` when an entry before it
/// already names it). Anything else is refused at load time with the offending names, rather
/// than failing later with a linker message.
const PROVIDED: &[(&str, Option<&str>)] = &[
    ("wasi:cli/", Some("wasi:cli")),
    ("wasi:clocks/", Some("wasi:clocks")),
    ("wasi:filesystem/", Some("wasi:filesystem")),
    ("wasi:io/", Some("wasi:io")),
    ("wasi:random/", Some("wasi:random")),
    ("wasi:sockets/", Some("wasi:sockets")),
    (
        "wasi:http/types@",
        Some("wasi:http (types, outgoing-handler)"),
    ),
    ("wasi:http/outgoing-handler@", None),
    ("cordon:tool/log@", Some("cordon:tool/log")),
    (
        "cordon:tool/bulk-read@",
        Some("cordon:tool/bulk-read (0.1.2: sifting readers)"),
    ),
    (
        "cordon:tool/result-stream@",
        Some("cordon:tool/result-stream"),
    ),
    (
        "cordon:tool/grant-wanted@",
        Some("cordon:tool/grant-wanted"),
    ),
    ("cordon:tool/types@", None),
    // Prerelease versions link only under their exact names (see `config_store`).
    (
        "wasi:config/store@0.2.0-draft",
        Some("wasi:config/store (0.2.0-draft, 0.2.0-rc.1)"),
    ),
    ("wasi:config/store@0.2.0-rc.1", None),
];

/// Whether the linker provides the interface `import`.
pub(crate) fn provided(import: &str) -> bool {
    PROVIDED
        .iter()
        .any(|(prefix, _)| import.starts_with(prefix))
}

/// What the linker provides, for messages: "a, b, … and z".
pub(crate) fn provided_list() -> String {
    let names: Vec<&str> = PROVIDED.iter().filter_map(|(_, name)| *name).collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every import that opens a capability (core's table, which grants are checked against)
    /// must be one the linker provides: otherwise a grant could be accepted for a component
    /// the engine then refuses to load.
    #[test]
    fn every_capability_import_is_provided() {
        for (import, capability) in cordon_core::CAPABILITY_IMPORTS {
            let versioned = if import.ends_with('/') {
                format!("{import}types@0.2.6")
            } else if import.starts_with("wasi:config/") {
                // Only drafts of it exist.
                format!("{import}@0.2.0-rc.1")
            } else {
                format!("{import}@0.2.6")
            };
            assert!(
                provided(&versioned),
                "{capability:?} is opened by `{import}`, which the linker does not provide"
            );
        }
    }

    #[test]
    fn the_list_names_each_family_once() {
        let list = provided_list();
        assert!(list.starts_with("wasi:cli, wasi:clocks, "), "{list}");
        assert!(
            list.ends_with(
                "cordon:tool/bulk-read (0.1.2: sifting readers), cordon:tool/result-stream, \
                 cordon:tool/grant-wanted and wasi:config/store (0.2.0-draft, 0.2.0-rc.1)"
            ),
            "{list}"
        );
        assert!(!provided("wasi:keyvalue/store@0.2.0"));
    }
}
