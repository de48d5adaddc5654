//! Components without Cordon's contract: every function a component exports (at the top of
//! its world or in an exported interface) whose types have a JSON form becomes a tool, named
//! `interface_function` (`function` for a world-level one), its input schema derived from the
//! parameter types ([`schema`]) and its description from the WIT's doc comments when the
//! component carries them ([`docs`]). A call converts the JSON arguments to component values,
//! calls the function through wasmtime's dynamic API in the same sandbox as every plugin, and
//! converts the result back ([`json`]); a `result` error becomes a tool error.

mod docs;
mod json;
mod lift;
mod schema;

use std::collections::HashSet;

use cordon_core::{Content, ToolDescriptor, ToolError, ToolErrorKind, ToolHints};
use serde_json::Value;
use wasmtime::component::types::{ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex, Instance, Val};
use wasmtime::{Engine, Store};

pub(crate) use docs::Docs;

use crate::error::CallError;
use crate::sandbox::HostState;

/// An exported function that is not offered as a tool, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The function as the component exports it (`ns:pkg/iface@1.0.0#name`, or `name`).
    pub function: String,
    /// Why it cannot be a tool.
    pub reason: String,
}

/// The tools of a component without the contract, and the functions that could not be tools.
pub(crate) struct TypedExports {
    pub(crate) functions: Vec<TypedFunction>,
    pub(crate) unavailable: Vec<Unavailable>,
}

/// One exported function offered as a tool.
pub(crate) struct TypedFunction {
    pub(crate) descriptor: ToolDescriptor,
    /// The guest memory limit its calls are held to, when its result could otherwise make
    /// the host allocate more than [`lift::HOST_LIFT_BUDGET`] (see [`lift`]).
    pub(crate) memory_cap: Option<u64>,
    index: ComponentExportIndex,
    params: Vec<(String, Type)>,
    result: Option<Type>,
}

/// How the description of a function without a doc comment ends: installers are told to
/// describe such tools (see `cordon_core::ToolEdits`).
pub const NO_DOC_COMMENT: &str = " (its WIT has no doc comment for it).";

/// Why an export is one a toolchain adds for its own use rather than one the author wrote,
/// recognised by name and parameters: such a function is no tool, and calling it could break
/// the component's runtime.
fn toolchain_internal(
    interface: Option<&str>,
    name: &str,
    param_names: &[&str],
) -> Option<&'static str> {
    match (interface, name) {
        // componentize-py's `componentize-py:init` world: the interface it exports to be
        // initialised with the app's symbols while the component is built (older versions
        // leave it in the component).
        (Some("exports"), "init") if param_names.first() == Some(&"app-name") => Some(
            "componentize-py adds it to set up its Python runtime while the component is \
             built; it is not the author's function",
        ),
        // A command's entry point (`wasi:cli/run`), which a toolchain exports for `main`.
        (Some(i), "run") if i.starts_with("wasi:cli/run@") || i == "wasi:cli/run" => Some(
            "it is a command's entry point (`wasi:cli/run`), which toolchains export for \
             `main`; it takes no arguments a model could give",
        ),
        _ => None,
    }
}

/// The part of an export name a tool name is made of: `ns:pkg/calc@1.0.0` → `calc`.
fn interface_short_name(export: &str) -> &str {
    let name = export.rsplit_once('/').map_or(export, |(_, name)| name);
    name.split_once('@').map_or(name, |(name, _)| name)
}

/// A WIT name as a tool name: `get-HTTP` → `get_http`.
fn tool_word(wit: &str) -> String {
    wit.replace('-', "_").to_ascii_lowercase()
}

impl TypedExports {
    /// The exported functions of `component`, as tools where their types allow.
    pub(crate) fn discover(component: &Component, engine: &Engine, docs: &Docs) -> TypedExports {
        let mut found = Vec::new();
        let ty = component.component_type();
        for (export, item) in ty.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(func) => {
                    if let Some(index) = component.get_export_index(None, export) {
                        found.push((None, export.to_string(), func, index));
                    }
                }
                ComponentItem::ComponentInstance(instance) => {
                    let Some(parent) = component.get_export_index(None, export) else {
                        continue;
                    };
                    for (name, item) in instance.exports(engine) {
                        if let ComponentItem::ComponentFunc(func) = item.ty
                            && let Some(index) = component.get_export_index(Some(&parent), name)
                        {
                            found.push((Some(export.to_string()), name.to_string(), func, index));
                        }
                    }
                }
                _ => {}
            }
        }
        let mut exports = TypedExports {
            functions: Vec::new(),
            unavailable: Vec::new(),
        };
        let mut names = HashSet::new();
        for (interface, name, func, index) in found {
            let shown = match &interface {
                Some(i) => format!("{i}#{name}"),
                None => name.clone(),
            };
            let refuse = |reason: String| Unavailable {
                function: shown.clone(),
                reason,
            };
            if name.starts_with('[') {
                exports.unavailable.push(refuse(
                    "it is a resource's constructor, method or static function; resources have \
                     no JSON form"
                        .into(),
                ));
                continue;
            }
            if func.async_() {
                exports.unavailable.push(refuse(
                    "it is an `async` function, which Cordon does not call yet".into(),
                ));
                continue;
            }
            let params: Vec<(String, Type)> =
                func.params().map(|(n, t)| (n.to_string(), t)).collect();
            let param_names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
            if let Some(toolchain) = toolchain_internal(interface.as_deref(), &name, &param_names) {
                exports.unavailable.push(refuse(toolchain.into()));
                continue;
            }
            let result = func.results().next();
            let why_not = params
                .iter()
                .find_map(|(n, t)| {
                    schema::unsupported(t).map(|why| format!("its parameter `{n}`: {why}"))
                })
                .or_else(|| {
                    result
                        .as_ref()
                        .and_then(schema::unsupported)
                        .map(|why| format!("its result: {why}"))
                });
            if let Some(why) = why_not {
                exports.unavailable.push(refuse(why));
                continue;
            }
            let Some(ratio) = result.as_ref().map_or(Some(1.0), lift::amplification) else {
                exports.unavailable.push(refuse(
                    "its result holds a list of values that take no memory in the component, \
                     which could stand for billions of values"
                        .into(),
                ));
                continue;
            };
            let tool = match &interface {
                Some(i) => format!(
                    "{}_{}",
                    tool_word(interface_short_name(i)),
                    tool_word(&name)
                ),
                None => tool_word(&name),
            };
            if let Err(why) = ToolDescriptor::check_name(&tool) {
                exports.unavailable.push(refuse(why));
                continue;
            }
            if !names.insert(tool.clone()) {
                exports.unavailable.push(refuse(format!(
                    "its tool name `{tool}` is already another exported function's"
                )));
                continue;
            }
            let mut input_schema =
                schema::object(params.iter().map(|(n, t)| (n.as_str(), t.clone())));
            let description = docs
                .function(interface.as_deref(), &name)
                .unwrap_or_else(|| format!("Calls `{shown}` of the component{NO_DOC_COMMENT}"));
            if let Some(about) = docs.interface(interface.as_deref()) {
                input_schema["description"] = Value::from(about);
            }
            // A record result (or a `result` whose ok value is one) is a structured result.
            let output_schema = match &result {
                Some(Type::Record(r)) => Some(schema::object(r.fields().map(|f| (f.name, f.ty)))),
                Some(Type::Result(r)) => match r.ok() {
                    Some(Type::Record(rec)) => {
                        Some(schema::object(rec.fields().map(|f| (f.name, f.ty))))
                    }
                    _ => None,
                },
                _ => None,
            };
            exports.functions.push(TypedFunction {
                descriptor: ToolDescriptor {
                    name: tool,
                    description,
                    input_schema,
                    hints: ToolHints::default(),
                    output_schema,
                },
                memory_cap: (ratio > 1.0).then(|| lift::memory_cap(ratio)),
                index,
                params,
                result,
            });
        }
        exports
    }

    /// The function offered as `tool`.
    pub(crate) fn find(&self, tool: &str) -> Option<&TypedFunction> {
        self.functions.iter().find(|f| f.descriptor.name == tool)
    }
}

impl TypedFunction {
    /// The arguments (JSON text) as the function's parameters, or why they are not.
    pub(crate) fn arguments(&self, arguments: &str) -> Result<Vec<Val>, CallError> {
        let invalid = |message: String| {
            CallError::Tool(ToolError {
                kind: ToolErrorKind::InvalidArguments,
                message,
            })
        };
        let value: Value = serde_json::from_str(arguments)
            .map_err(|e| invalid(format!("the arguments are not JSON: {e}")))?;
        let fields =
            json::fields(&self.params, &value, &mut json::Path::default()).map_err(|m| {
                invalid(format!(
                    "the arguments do not fit `{}`: {m}",
                    self.descriptor.name
                ))
            })?;
        Ok(fields.into_iter().map(|(_, v)| v).collect())
    }

    /// Calls the function in `instance`.
    pub(crate) async fn call(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
        params: Vec<Val>,
    ) -> wasmtime::Result<Vec<Val>> {
        let func = instance
            .get_func(&mut *store, self.index)
            .ok_or_else(|| wasmtime::format_err!("the component no longer exports the function"))?;
        let mut results = vec![Val::Bool(false); usize::from(self.result.is_some())];
        func.call_async(&mut *store, &params, &mut results).await?;
        Ok(results)
    }

    /// What the function returned, as the tool's result: its value as one JSON piece (none
    /// for a function without a result); a top-level `result` error is the tool's error.
    pub(crate) fn output(&self, results: Vec<Val>) -> Result<Vec<Content>, CallError> {
        let (Some(ty), Some(val)) = (&self.result, results.into_iter().next()) else {
            return Ok(Vec::new());
        };
        let malformed = |e: json::NotJson| {
            CallError::Malformed(format!(
                "`{}` returned a value JSON cannot carry: {}",
                self.descriptor.name, e.0
            ))
        };
        let mut path = json::Path::default();
        match (ty, &val) {
            (Type::Result(r), Val::Result(Ok(ok))) => match (r.ok(), ok) {
                (Some(ty), Some(v)) => Ok(vec![Content::Json(
                    json::to_json(&ty, v, &mut path).map_err(malformed)?,
                )]),
                _ => Ok(Vec::new()),
            },
            (Type::Result(r), Val::Result(Err(err))) => {
                let message = match (r.err(), err) {
                    (Some(ty), Some(v)) => {
                        match json::to_json(&ty, v, &mut path).map_err(malformed)? {
                            Value::String(s) => s,
                            other => other.to_string(),
                        }
                    }
                    _ => "the function returned an error without a value".to_string(),
                };
                Err(CallError::Tool(ToolError {
                    kind: ToolErrorKind::Failed,
                    message,
                }))
            }
            _ => Ok(vec![Content::Json(
                json::to_json(ty, &val, &mut path).map_err(malformed)?,
            )]),
        }
    }
}

/// The fuzz targets' way in: the typed exports of one component, whose functions' arguments
/// are read from fuzzed JSON.
#[cfg(feature = "fuzzing")]
pub struct Fuzzed {
    exports: TypedExports,
    schemas: Vec<cordon_core::CompiledSchema>,
}

#[cfg(feature = "fuzzing")]
impl Fuzzed {
    /// The typed exports of `wasm` (compiled once, by a plain engine).
    pub fn load(wasm: &[u8]) -> Fuzzed {
        let engine = Engine::default();
        let component = Component::new(&engine, wasm).expect("the fuzz component compiles");
        let exports = TypedExports::discover(&component, &engine, &Docs::read(wasm));
        assert!(
            !exports.functions.is_empty(),
            "the fuzz component has typed exports"
        );
        let schemas = exports
            .functions
            .iter()
            .map(|f| {
                cordon_core::CompiledSchema::compile(&f.descriptor.input_schema)
                    .expect("a derived schema compiles")
            })
            .collect();
        Fuzzed { exports, schemas }
    }

    /// `data`'s first byte picks a function, the rest are its arguments. What the arguments
    /// become goes back to the same JSON-able value, and arguments taken are arguments the
    /// function's schema (what the model is shown) allows.
    pub fn arguments(&self, data: &[u8]) {
        let Some((pick, text)) = data.split_first() else {
            return;
        };
        let at = usize::from(*pick) % self.exports.functions.len();
        let function = &self.exports.functions[at];
        let Ok(text) = std::str::from_utf8(text) else {
            return;
        };
        let Ok(vals) = function.arguments(text) else {
            return;
        };
        let value: Value = serde_json::from_str(text).expect("taken arguments are JSON");
        if let Err(e) = self.schemas[at].check(&value) {
            panic!(
                "`{}` took {text} which its schema refuses: {:?}",
                function.descriptor.name,
                e.violations()
            );
        }
        for ((name, ty), val) in function.params.iter().zip(&vals) {
            let mut path = json::Path::default();
            let back = json::to_json(ty, val, &mut path)
                .unwrap_or_else(|e| panic!("`{name}` taken but not given back: {}", e.0));
            let again = json::to_val(ty, &back, &mut path)
                .unwrap_or_else(|e| panic!("`{name}` given back as {back} but not taken: {e:?}"));
            assert_eq!(
                &again, val,
                "`{name}` changed on its way back through {back}"
            );
        }
    }
}

/// `data` as the WIT a component carries for its doc comments.
#[cfg(feature = "fuzzing")]
pub fn fuzz_docs(data: &[u8]) {
    let docs = Docs::read(data);
    let _ = docs.interface(None);
    let _ = docs.function(None, "f");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_come_from_the_interface_and_the_function() {
        assert_eq!(interface_short_name("fixture:typed/calc@0.1.0"), "calc");
        assert_eq!(interface_short_name("wasi:cli/run@0.2.6"), "run");
        assert_eq!(interface_short_name("local"), "local");
        assert_eq!(tool_word("echo-HTTP-point"), "echo_http_point");
    }

    #[test]
    fn toolchain_exports_are_recognised_by_name_and_parameters() {
        let init = ["app-name", "symbols"];
        assert!(toolchain_internal(Some("exports"), "init", &init).is_some());
        // An author's own `init` (another interface, or other parameters) stays a tool.
        assert!(toolchain_internal(Some("exports"), "init", &["config"]).is_none());
        assert!(toolchain_internal(Some("local:app/setup"), "init", &init).is_none());
        assert!(toolchain_internal(Some("wasi:cli/run@0.2.6"), "run", &[]).is_some());
        assert!(toolchain_internal(None, "run", &[]).is_none());
    }
}
