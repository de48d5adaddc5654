//! Write [Cordon](https://example.invalid/cordon) tool plugins as typed Rust functions.
//!
//! A Cordon plugin is a WASI Preview 2 component implementing the `plugin-with-outputs` world of
//! `wit/tool.wit`. This crate hides the WIT glue: you declare each tool as a function taking
//! a `Deserialize + JsonSchema` argument struct, and the SDK
//!
//! - derives the tool's input schema from the struct (field doc comments become descriptions;
//!   the struct's own doc comment does not, the tool's description says what it is for),
//! - for a [`Plugin::structured_tool`], derives the output schema from the result type too,
//!   so clients know the shape of the result before calling,
//! - parses the host's JSON arguments into it, turning serde errors into `invalid-arguments`
//!   that name the offending field,
//! - maps your error type to the WIT `tool-error` variants (through [`ToolError`]),
//! - and exports the component with [`export_plugin!`].
//!
//! # Example: a plugin with two tools
//!
//! ```
//! use cordon_sdk::{Hints, Json, Plugin, ToolError, export_plugin};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Arguments of `greet`.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Greet {
//!     /// Who to greet.
//!     name: String,
//!     /// How many exclamation marks to add (0-10).
//!     #[serde(default)]
//!     excitement: u8,
//! }
//!
//! /// Arguments of `add`.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Add {
//!     /// The numbers to add up.
//!     numbers: Vec<f64>,
//! }
//!
//! fn plugin() -> Plugin {
//!     Plugin::new()
//!         .tool("greet", "Greets someone by name.", Hints::READ_ONLY, |a: Greet| {
//!             if a.excitement > 10 {
//!                 return Err(ToolError::invalid("excitement must be at most 10"));
//!             }
//!             Ok(format!("Hello, {}{}", a.name, "!".repeat(a.excitement.into())))
//!         })
//!         .tool("add", "Adds numbers exactly as given.", Hints::READ_ONLY, |a: Add| {
//!             Ok::<_, ToolError>(Json(serde_json::json!({ "sum": a.numbers.iter().sum::<f64>() })))
//!         })
//! }
//!
//! export_plugin!(plugin);
//! # fn main() {
//! #     plugin().check().unwrap();
//! #     let out = plugin().call("greet", r#"{"name": "Ada", "excitement": 2}"#).unwrap();
//! #     assert_eq!(out, vec![cordon_sdk::Content::text("Hello, Ada!!")]);
//! # }
//! ```
//!
//! Build it as a `cdylib` with `cargo build --release --target wasm32-wasip2`; the `.wasm`
//! is already a component. The same plugin is in `examples/two_tools.rs`.

#![deny(missing_docs)]

extern crate self as cordon_sdk;

pub mod bindings;
pub mod bulk_read;
mod content;
mod error;
pub mod grants;
pub mod log;
pub mod paths;
mod schema;
pub mod written;

use std::fmt;

pub use content::{Content, IntoContents, Json};
pub use error::ToolError;
pub use schema::{input_schema, output_schema};

/// Re-exported so plugins need not pin their own versions of what the SDK is built on.
pub use schemars;
pub use serde;
pub use serde_json;

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}

/// Behaviour hints for a tool, shown to users and models.
///
/// They are the author's claims, not guarantees: the host decides approval from the grants
/// it gave. Set them truthfully anyway — a tool that says it is read-only and is not will be
/// refused writes by a read-only grant and confuse everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hints {
    /// The tool only reads; it never changes anything it can reach.
    pub read_only: bool,
    /// The tool may delete or overwrite data. Hosts ask before running it.
    pub destructive: bool,
    /// Calling the tool twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool talks to things outside the granted paths (e.g. network hosts).
    pub open_world: bool,
}

impl Hints {
    /// A tool that only reads: read-only and therefore idempotent.
    pub const READ_ONLY: Hints = Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };

    /// A tool that writes and may overwrite or delete data.
    pub const DESTRUCTIVE: Hints = Hints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: false,
    };

    /// A tool that writes but only adds (not destructive, not idempotent).
    pub const WRITES: Hints = Hints {
        read_only: false,
        destructive: false,
        idempotent: false,
        open_world: false,
    };

    /// The same hints, marked idempotent.
    pub const fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// The same hints, marked as reaching beyond the granted paths (e.g. the network).
    pub const fn open_world(mut self) -> Self {
        self.open_world = true;
        self
    }
}

/// A tool's description as sent to the host in `list-tools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDescriptor {
    /// Unique within the plugin: lowercase letters, digits and `_`, starting with a letter.
    pub name: String,
    /// What the tool does and when to use it, written for a language model.
    pub description: String,
    /// JSON Schema (draft 2020-12) of the arguments, as JSON text.
    pub input_schema: String,
    /// Behaviour hints.
    pub hints: Hints,
    /// JSON Schema (draft 2020-12) of the result, as JSON text, for a tool added with
    /// [`Plugin::structured_tool`]; sent to the host in `output-schemas`.
    pub output_schema: Option<String>,
}

type Handler = Box<dyn Fn(&str) -> Result<Vec<Content>, ToolError> + Send + Sync>;

struct Entry {
    name: String,
    description: String,
    hints: Hints,
    /// Generating a schema costs more than many calls do, and every call runs in a fresh
    /// instance, so the schema is only derived when the tool list is asked for.
    make_schema: fn() -> Result<serde_json::Value, String>,
    schema: std::sync::OnceLock<(String, Option<String>)>,
    /// The output schema of a structured tool, derived like the input schema: only when asked.
    make_output_schema: Option<fn() -> Result<serde_json::Value, String>>,
    output_schema: std::sync::OnceLock<Option<(String, Option<String>)>>,
    handler: Handler,
}

impl Entry {
    /// The schema as JSON text, and why it is unusable if it is.
    fn schema(&self) -> &(String, Option<String>) {
        self.schema.get_or_init(|| match (self.make_schema)() {
            Ok(schema) => (schema.to_string(), None),
            Err(e) => (r#"{"type":"object"}"#.to_owned(), Some(e)),
        })
    }

    /// The output schema as JSON text and why it is unusable if it is; `None` for a tool
    /// without one.
    fn output_schema(&self) -> Option<&(String, Option<String>)> {
        self.output_schema
            .get_or_init(|| {
                self.make_output_schema.map(|make| match make() {
                    Ok(schema) => (schema.to_string(), None),
                    Err(e) => (r#"{"type":"object"}"#.to_owned(), Some(e)),
                })
            })
            .as_ref()
    }

    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.schema().0.clone(),
            hints: self.hints,
            output_schema: self.output_schema().map(|(schema, _)| schema.clone()),
        }
    }
}

/// The set of tools a plugin offers, built once per instance and exported by
/// [`export_plugin!`].
///
/// Construction never fails, so that a plugin always loads; mistakes such as a bad tool name
/// or an argument type that is not a struct are collected and reported by
/// [`Plugin::check`] — call it from a unit test.
#[derive(Default)]
pub struct Plugin {
    entries: Vec<Entry>,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field(
                "tools",
                &self.entries.iter().map(|e| &e.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Plugin {
    /// An empty plugin; add tools with [`Plugin::tool`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds tool `name`, implemented by `f`, whose argument type `A` defines the schema.
    ///
    /// `f` receives the parsed arguments and returns anything that converts into content
    /// ([`IntoContents`]) or an error that converts into [`ToolError`].
    pub fn tool<A, R, E, F>(self, name: &str, description: &str, hints: Hints, f: F) -> Self
    where
        A: serde::de::DeserializeOwned + schemars::JsonSchema + 'static,
        R: IntoContents,
        E: Into<ToolError>,
        F: Fn(A) -> Result<R, E> + Send + Sync + 'static,
    {
        let tool_name = name.to_owned();
        let handler: Handler = Box::new(move |arguments: &str| {
            let args: A = parse_arguments(&tool_name, arguments)?;
            f(args).map_err(Into::into)?.into_contents()
        });
        self.push(name, description, hints, input_schema::<A>, None, handler)
    }

    /// Adds tool `name` whose every result is one JSON object of type `O`: its output schema
    /// is derived from `O` (as the input schema is from `A`), so clients learn the shape of the
    /// result before calling (MCP's `outputSchema`) and get it as structured data. The host
    /// checks each result against that schema.
    ///
    /// `O` must serialise to a JSON object: a struct with named fields, or a map.
    pub fn structured_tool<A, O, E, F>(
        self,
        name: &str,
        description: &str,
        hints: Hints,
        f: F,
    ) -> Self
    where
        A: serde::de::DeserializeOwned + schemars::JsonSchema + 'static,
        O: serde::Serialize + schemars::JsonSchema + 'static,
        E: Into<ToolError>,
        F: Fn(A) -> Result<O, E> + Send + Sync + 'static,
    {
        let tool_name = name.to_owned();
        let handler: Handler = Box::new(move |arguments: &str| {
            let args: A = parse_arguments(&tool_name, arguments)?;
            let result = f(args).map_err(Into::into)?;
            Ok(vec![Content::json(&result)?])
        });
        self.push_structured::<A, O>(name, description, hints, handler)
    }

    /// Adds tool `name` whose every result is one JSON object of type `O`, like
    /// [`Plugin::structured_tool`], but written as it is made into a [`written::JsonWriter`]
    /// rather than returned whole: for results that can be large (rows of a query), which
    /// neither the plugin nor the host then holds whole in memory. `f` writes the object's
    /// JSON (e.g. with `serde_json::to_writer`, one row at a time) and returns `Ok(())`; it
    /// should stop writing once a write fails (the host refused more: the output limit).
    ///
    /// Needs a host of WIT 0.1.4 or later (Cordon hosts since `result-stream`).
    pub fn written_tool<A, O, E, F>(self, name: &str, description: &str, hints: Hints, f: F) -> Self
    where
        A: serde::de::DeserializeOwned + schemars::JsonSchema + 'static,
        O: schemars::JsonSchema + 'static,
        E: Into<ToolError>,
        F: Fn(A, &mut written::JsonWriter<O>) -> Result<(), E> + Send + Sync + 'static,
    {
        let tool_name = name.to_owned();
        let handler: Handler = Box::new(move |arguments: &str| {
            let args: A = parse_arguments(&tool_name, arguments)?;
            let mut out = written::JsonWriter::new();
            f(args, &mut out).map_err(Into::into)?;
            out.finish()
        });
        self.push_structured::<A, O>(name, description, hints, handler)
    }

    /// Adds a tool whose schemas come from `A` (arguments) and `O` (its result object).
    fn push_structured<A: schemars::JsonSchema + 'static, O: schemars::JsonSchema + 'static>(
        self,
        name: &str,
        description: &str,
        hints: Hints,
        handler: Handler,
    ) -> Self {
        self.push(
            name,
            description,
            hints,
            input_schema::<A>,
            Some(output_schema::<O>),
            handler,
        )
    }

    fn push(
        mut self,
        name: &str,
        description: &str,
        hints: Hints,
        make_schema: fn() -> Result<serde_json::Value, String>,
        make_output_schema: Option<fn() -> Result<serde_json::Value, String>>,
        handler: Handler,
    ) -> Self {
        self.entries.push(Entry {
            name: name.to_owned(),
            description: description.to_owned(),
            hints,
            make_schema,
            schema: std::sync::OnceLock::new(),
            make_output_schema,
            output_schema: std::sync::OnceLock::new(),
            handler,
        });
        self
    }

    /// The tools in the order they were added.
    pub fn descriptors(&self) -> Vec<ToolDescriptor> {
        self.entries.iter().map(Entry::descriptor).collect()
    }

    /// Runs tool `name` with `arguments` (a JSON object as text).
    ///
    /// An unknown name is `not-found` listing the tools that do exist; arguments that do not
    /// parse are `invalid-arguments` naming the field.
    pub fn call(&self, name: &str, arguments: &str) -> Result<Vec<Content>, ToolError> {
        match self.entries.iter().find(|e| e.name == name) {
            Some(entry) => (entry.handler)(arguments),
            None => {
                let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
                Err(ToolError::NotFound(format!(
                    "this plugin has no tool named `{name}`; it offers: {}",
                    names.join(", ")
                )))
            }
        }
    }

    /// Reports every mistake in the tool list: invalid or duplicate names, empty
    /// descriptions, argument types whose schema is not an object, and contradictory hints.
    ///
    /// Returns all problems at once, one per line, so a unit test shows everything to fix.
    pub fn check(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.entries.is_empty() {
            problems.push("the plugin offers no tools".to_owned());
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if !valid_name(&entry.name) {
                problems.push(format!(
                    "tool name `{}` is invalid: use lowercase letters, digits and `_`, starting with a letter",
                    entry.name
                ));
            }
            if self.entries[..i].iter().any(|e| e.name == entry.name) {
                problems.push(format!("tool name `{}` is used twice", entry.name));
            }
            if entry.description.trim().is_empty() {
                problems.push(format!("tool `{}` has no description", entry.name));
            }
            if let Some(err) = &entry.schema().1 {
                problems.push(format!("tool `{}`: {err}", entry.name));
            }
            if let Some((_, Some(err))) = entry.output_schema() {
                problems.push(format!("tool `{}`: {err}", entry.name));
            }
            if entry.hints.read_only && entry.hints.destructive {
                problems.push(format!(
                    "tool `{}` claims to be both read-only and destructive",
                    entry.name
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Parses `arguments` into `A`, naming the field at fault when it does not fit.
///
/// Public so plugins that dispatch by hand get the same error messages.
pub fn parse_arguments<A: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: &str,
) -> Result<A, ToolError> {
    // An absent argument object is the same as an empty one.
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return not_json(tool, &inner);
        }
        let message = without_position(&inner);
        if path == "." || path.is_empty() {
            ToolError::InvalidArguments(format!("`{tool}`: {message}; see the tool's input schema"))
        } else {
            ToolError::InvalidArguments(format!(
                "`{tool}`: field `{path}`: {message}; see the tool's input schema"
            ))
        }
    })?;
    de.end().map_err(|err| not_json(tool, &err))?;
    Ok(value)
}

fn not_json(tool: &str, err: &serde_json::Error) -> ToolError {
    ToolError::InvalidArguments(format!(
        "the arguments of `{tool}` are not valid JSON ({}); send a JSON object",
        without_position(err)
    ))
}

/// serde_json appends " at line L column C"; for a one-line object that is noise.
fn without_position(err: &serde_json::Error) -> String {
    let mut message = err.to_string();
    if let Some(pos) = message.rfind(" at line ") {
        message.truncate(pos);
    }
    message
}

/// Exports a plugin from a `cdylib` crate: `export_plugin!(build)` where `build` is a
/// `fn() -> Plugin`.
///
/// The plugin is built once per instance, on first use; the host creates a fresh instance
/// for every call, so it holds no state between calls.
///
/// Only wasm builds export anything: the WIT export symbols cannot be linked into a native
/// shared library, and native builds exist for unit tests, which call [`Plugin::call`].
#[macro_export]
macro_rules! export_plugin {
    ($build:path) => {
        // Keeps `build` used in native builds, where nothing is exported.
        const _: fn() -> $crate::Plugin = $build;

        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        struct __CordonPluginExport;

        #[cfg(target_arch = "wasm32")]
        impl __CordonPluginExport {
            fn plugin() -> &'static $crate::Plugin {
                static PLUGIN: ::std::sync::OnceLock<$crate::Plugin> =
                    ::std::sync::OnceLock::new();
                PLUGIN.get_or_init($build)
            }
        }

        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::exports::cordon::tool::tools::Guest for __CordonPluginExport {
            fn list_tools(
            ) -> ::std::vec::Vec<$crate::bindings::cordon::tool::types::ToolDescriptor> {
                $crate::__wit_descriptors(Self::plugin())
            }

            fn call_tool(
                name: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::bindings::cordon::tool::types::Content>,
                $crate::bindings::cordon::tool::types::ToolError,
            > {
                $crate::__wit_call(Self::plugin(), &name, &arguments)
            }
        }

        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::exports::cordon::tool::tool_outputs::Guest for __CordonPluginExport {
            fn output_schemas() -> ::std::vec::Vec<
                $crate::bindings::exports::cordon::tool::tool_outputs::OutputSchema,
            > {
                $crate::__wit_output_schemas(Self::plugin())
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!(__CordonPluginExport with_types_in $crate::bindings);
    };
}

#[doc(hidden)]
pub fn __wit_descriptors(plugin: &Plugin) -> Vec<bindings::cordon::tool::types::ToolDescriptor> {
    use bindings::cordon::tool::types as wit;
    plugin
        .descriptors()
        .into_iter()
        .map(|d| wit::ToolDescriptor {
            name: d.name,
            description: d.description,
            input_schema: d.input_schema,
            hints: wit::ToolHints {
                read_only: d.hints.read_only,
                destructive: d.hints.destructive,
                idempotent: d.hints.idempotent,
                open_world: d.hints.open_world,
            },
        })
        .collect()
}

#[doc(hidden)]
pub fn __wit_output_schemas(
    plugin: &Plugin,
) -> Vec<bindings::exports::cordon::tool::tool_outputs::OutputSchema> {
    plugin
        .descriptors()
        .into_iter()
        .filter_map(|d| {
            d.output_schema.map(|schema| {
                bindings::exports::cordon::tool::tool_outputs::OutputSchema {
                    tool: d.name,
                    schema,
                }
            })
        })
        .collect()
}

#[doc(hidden)]
pub fn __wit_call(
    plugin: &Plugin,
    name: &str,
    arguments: &str,
) -> Result<Vec<bindings::cordon::tool::types::Content>, bindings::cordon::tool::types::ToolError> {
    plugin
        .call(name, arguments)
        .map(|contents| contents.into_iter().map(Into::into).collect())
        .map_err(Into::into)
}
