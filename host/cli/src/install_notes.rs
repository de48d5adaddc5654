//! What an install shows beyond the component itself: what the installer's tool edits did
//! and which tools still have no description a model can use (with the file that would give
//! them one), and what a Wassette policy became.

use cordon_home::{PreparedInstall, SIDECAR_SUFFIX};

use crate::term::outln;

/// Prints where the edits came from, the hidden tools, and the tools still described only by
/// Cordon's placeholder.
pub fn print_edits(p: &PreparedInstall) {
    let edits = &p.record().edits;
    if let Some(file) = p.edits_file() {
        let how = if file.sidecar {
            "found beside the component"
        } else {
            "given with --describe"
        };
        outln!(
            "  edits:   {} ({how}): {} tool(s) described, {} hidden",
            file.path.display(),
            file.edits.tools.len(),
            file.edits.hide.len()
        );
    } else if !edits.is_empty() {
        outln!(
            "  edits:   kept from the installed plugin: {} tool(s) described, {} hidden",
            edits.tools.len(),
            edits.hide.len()
        );
    }
    if !edits.hide.is_empty() {
        let hidden: Vec<&str> = edits.hide.iter().map(String::as_str).collect();
        outln!("  hidden:  {} (not offered to models)", hidden.join(", "));
    }
    let bare: Vec<&str> = p
        .tools()
        .iter()
        .filter(|t| t.description.ends_with(cordon_runtime::NO_DOC_COMMENT))
        .map(|t| t.name.as_str())
        .collect();
    if !bare.is_empty() {
        outln!(
            "  note: {} ha{} no description a model can use (the component carries no doc \
             comments); write them in a file such as {}{SIDECAR_SUFFIX} beside the component, \
             or give one with --describe FILE:",
            bare.join(", "),
            if bare.len() == 1 { "s" } else { "ve" },
            p.name()
        );
        outln!("    [tools.{}]", bare[0]);
        outln!("    description = \"What it does, for a model\"");
    }
}

/// Prints each entry of a Wassette policy with the grant or limit it became, and what was left
/// out and why.
pub fn print_translation(p: &PreparedInstall) {
    let Some(t) = p.translation() else {
        return;
    };
    outln!("  from the Wassette policy {}:", t.path.display());
    for (entry, became) in &t.translated {
        outln!("    {entry}  ->  {became}");
    }
    for left in &t.left_out {
        outln!("    not translated: {left}");
    }
    if t.translated.is_empty() {
        outln!("    nothing to grant");
    }
    let config: Vec<&str> = t
        .grants
        .iter()
        .filter_map(|g| g.strip_prefix("config:"))
        .collect();
    for key in config {
        outln!(
            "    set its value (never read from the environment): cordon plugin config {} {key}",
            p.name()
        );
    }
}
