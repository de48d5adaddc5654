//! How a plugin is shown by `plugin install`, `update` and `inspect`: its imports and ceiling,
//! its grants, what an upgrade changes, and each tool with its schemas and hints.

use cordon_core::{Capability, Ceiling, Grants, ToolDescriptor};
use cordon_home::{ToolChange, UpgradeDiff};

use crate::term::{Stream, outln};
use crate::ui::short_digest;

pub(crate) fn print_imports(imports: &[String]) {
    if imports.is_empty() {
        outln!("  imports: nothing");
        return;
    }
    outln!("  imports:");
    for line in group_imports(imports) {
        outln!("    {line}");
    }
}

/// Groups `ns:pkg/iface@ver` names by package and version so a component's ~25 WASI imports
/// fit in a few lines: `wasi:cli@0.2.6: environment, exit, stdin`.
pub(crate) fn group_imports(imports: &[String]) -> Vec<String> {
    let mut groups: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    let mut lone = Vec::new();
    for import in imports {
        let (path, version) = match import.split_once('@') {
            Some((p, v)) => (p, Some(v)),
            None => (import.as_str(), None),
        };
        match path.split_once('/') {
            Some((package, iface)) => {
                let key = match version {
                    Some(v) => format!("{package}@{v}"),
                    None => package.to_string(),
                };
                groups.entry(key).or_default().push(iface);
            }
            None => lone.push(import.clone()),
        }
    }
    let mut lines: Vec<String> = groups
        .into_iter()
        .map(|(package, mut ifaces)| {
            ifaces.sort_unstable();
            format!("{package}: {}", ifaces.join(", "))
        })
        .collect();
    lines.extend(lone);
    lines
}

pub(crate) fn capability_label(c: Capability) -> &'static str {
    match c {
        Capability::Filesystem => "paths (fs:)",
        Capability::Environment => "environment variables (env:)",
        Capability::Http => "HTTP origins (net:https://)",
        Capability::Sockets => "TCP addresses (net:tcp://)",
        Capability::Config => "configuration values (config:)",
    }
}

pub(crate) fn print_ceiling(ceiling: &Ceiling) {
    let caps = ceiling.capabilities();
    if caps.is_empty() {
        outln!("  ceiling: nothing can be granted; it only sees its arguments");
    } else {
        let labels: Vec<&str> = caps.into_iter().map(capability_label).collect();
        outln!("  ceiling: may be granted {}", labels.join(", "));
    }
}

/// Grants given for a while through grant requests, with the time each has left.
pub(crate) fn print_expiring(expiring: &[cordon_home::ExpiringGrant]) {
    if expiring.is_empty() {
        return;
    }
    let now = cordon_core::now_ms();
    outln!("  for a while:");
    for e in expiring {
        outln!(
            "    {} ({}, until {}, given by {})",
            e.grant,
            e.time_left(now),
            e.until,
            e.by
        );
    }
}

pub(crate) fn print_grants(grants: &Grants) {
    if grants.is_empty() {
        outln!("  grants:  none (it can reach nothing but its arguments)");
    } else {
        outln!("  grants:");
        for g in grants.iter() {
            outln!("    {g}");
        }
    }
    // What the grants allow; whether a call asks is decided per tool (see the approval
    // lines), since a tool that declares itself destructive asks whatever its grants.
    outln!(
        "  effect:  {}",
        if grants.can_change_anything() {
            "its grants let it change or send things"
        } else {
            "its grants cannot change anything"
        }
    );
}

pub(crate) fn print_upgrade(name: &str, diff: &UpgradeDiff) {
    outln!();
    outln!(
        "`{name}` is installed with a different component: {} -> {}",
        short_digest(&diff.old_digest),
        short_digest(&diff.new_digest)
    );
    if !diff.capabilities_added.is_empty() {
        for c in &diff.capabilities_added {
            outln!(
                "  !!! WARNING: the new component can use {} ({}); the installed one could not.",
                capability_label(*c),
                c.interface()
            );
        }
    }
    for i in &diff.imports_added {
        outln!("  + import  {i}");
    }
    for i in &diff.imports_removed {
        outln!("  - import  {i}");
    }
    print_tool_changes(&diff.tools);
    if !diff.tools.exact {
        outln!("  (only tool names were compared: the installed tool list was not available)");
    }
    for g in &diff.grants_kept {
        outln!("  = grant   {g} (kept)");
    }
    for g in &diff.grants_dropped {
        outln!("  - grant   {g} (dropped: the new component cannot use it)");
    }
    if diff.is_empty() {
        outln!("  (same imports, tools and grants)");
    }
}

/// What changes in the tools a model is told of: each added, removed or changed tool, and a
/// changed description in full, before and after.
pub(crate) fn print_tool_changes(tools: &cordon_home::ToolDiff) {
    for change in &tools.changes {
        match change {
            ToolChange::Added(t) => outln!("  + tool    {t}"),
            ToolChange::Removed(t) => outln!("  - tool    {t}"),
            ToolChange::Changed {
                name,
                description,
                schema,
                output_schema,
                hints,
            } => {
                let what: Vec<&str> = [
                    (description.is_some(), "description"),
                    (*schema, "input schema"),
                    (*output_schema, "output schema"),
                    (*hints, "hints"),
                ]
                .into_iter()
                .filter_map(|(b, s)| b.then_some(s))
                .collect();
                outln!("  ~ tool    {name}: {} changed", what.join(", "));
                if let Some((before, after)) = description {
                    // What the model will read instead: the user sees both in full.
                    print_description("was", before);
                    print_description("now", after);
                }
            }
        }
    }
}

pub(crate) fn print_description(label: &str, text: &str) {
    let mut lines = text.lines();
    outln!(
        "              {label}: {}",
        Stream::Stdout.show(lines.next().unwrap_or_default())
    );
    for line in lines {
        outln!("                   {}", Stream::Stdout.show(line));
    }
}

/// The exported functions of a component without Cordon's contract that are not tools.
pub(crate) fn print_unavailable(functions: &[cordon_runtime::Unavailable]) {
    if functions.is_empty() {
        return;
    }
    outln!("  not offered as tools (their types have no JSON form):");
    for f in functions {
        outln!(
            "    {}: {}",
            Stream::Stdout.show(&f.function),
            Stream::Stdout.show(&f.reason)
        );
    }
}

pub(crate) fn print_tool(
    call_name: &str,
    tool: &ToolDescriptor,
    approval: &str,
    rules: Option<Vec<String>>,
) {
    outln!("  {call_name}");
    outln!("    approval: {approval}");
    match rules.as_deref() {
        None => {}
        Some([]) => outln!("    policy: no rule may apply; the approval above decides"),
        Some(rules) => {
            outln!("    policy: rules that may apply (a rule that applies decides instead):");
            for r in rules {
                outln!("      {r}");
            }
        }
    }
    for line in tool.description.lines() {
        outln!("    {line}");
    }
    let h = &tool.hints;
    let hints: Vec<&str> = [
        (h.read_only, "read-only"),
        (h.destructive, "destructive"),
        (h.idempotent, "idempotent"),
        (h.open_world, "open-world"),
    ]
    .into_iter()
    .filter_map(|(b, s)| b.then_some(s))
    .collect();
    if !hints.is_empty() {
        outln!(
            "    hints (claims, the author's or the installer's): {}",
            hints.join(", ")
        );
    }
    let schema =
        serde_json::to_string_pretty(&tool.input_schema).unwrap_or_else(|_| "?".to_string());
    // Still valid JSON on a terminal: what JSON leaves raw is written as \u escapes.
    let schema = Stream::Stdout.show_json(&schema);
    outln!("    input schema:");
    for line in schema.lines() {
        outln!("      {line}");
    }
}
