//! Doc comments of a component's WIT, when the component carries them: the `package-docs`
//! custom section that WIT tooling writes beside an encoded WIT package (read with
//! wit-parser). Components built by the common toolchains leave it out; a component without
//! it gets generated descriptions.

use std::collections::HashMap;

/// The doc comments found, by export.
#[derive(Debug, Default, Clone)]
pub(crate) struct Docs {
    /// By (interface export name, or none for the world's own functions; function name).
    functions: HashMap<(Option<String>, String), String>,
    /// By interface export name.
    interfaces: HashMap<String, String>,
}

/// The name of the custom section WIT tooling keeps doc comments in.
const SECTION: &str = "package-docs";

impl Docs {
    /// The docs in `wasm`, if it has a `package-docs` section; none otherwise, and none when
    /// the component's WIT cannot be decoded (descriptions are a courtesy, never a reason to
    /// refuse a component).
    ///
    /// `wasm` must be a valid component (one wasmtime compiled): wit-parser's decoder assumes
    /// so and panics on some that are not (fuzzing found one: `tests/fuzz/regressions`). A
    /// panic of the decoder on a valid component costs its descriptions, not the install.
    pub(crate) fn read(wasm: &[u8]) -> Docs {
        match std::panic::catch_unwind(|| Docs::decode(wasm)) {
            Ok(docs) => docs,
            Err(_) => {
                tracing::warn!(
                    "the component's WIT doc comments could not be read (wit-parser failed on \
                     them); its tools get generated descriptions"
                );
                Docs::default()
            }
        }
    }

    /// [`Docs::read`] without the net under the decoder.
    fn decode(wasm: &[u8]) -> Docs {
        if !has_docs_section(wasm) {
            return Docs::default();
        }
        match wit_parser::decoding::decode(wasm) {
            Ok(wit_parser::decoding::DecodedWasm::Component(resolve, world)) => {
                Docs::from_world(&resolve, world)
            }
            Ok(_) => Docs::default(),
            Err(e) => {
                tracing::debug!("cannot read the component's WIT docs: {e:#}");
                Docs::default()
            }
        }
    }

    fn from_world(resolve: &wit_parser::Resolve, world: wit_parser::WorldId) -> Docs {
        let mut docs = Docs::default();
        for (key, item) in &resolve.worlds[world].exports {
            match item {
                wit_parser::WorldItem::Function(f) => {
                    if let Some(text) = &f.docs.contents {
                        docs.functions.insert((None, f.name.clone()), clean(text));
                    }
                }
                wit_parser::WorldItem::Interface { id, .. } => {
                    let export = resolve.name_world_key(key);
                    let interface = &resolve.interfaces[*id];
                    if let Some(text) = &interface.docs.contents {
                        docs.interfaces.insert(export.clone(), clean(text));
                    }
                    for (name, f) in &interface.functions {
                        if let Some(text) = &f.docs.contents {
                            docs.functions
                                .insert((Some(export.clone()), name.clone()), clean(text));
                        }
                    }
                }
                wit_parser::WorldItem::Type { .. } => {}
            }
        }
        docs
    }

    /// The doc comment of function `name` of the exported interface (or of the world).
    pub(crate) fn function(&self, interface: Option<&str>, name: &str) -> Option<String> {
        self.functions
            .get(&(interface.map(str::to_string), name.to_string()))
            .cloned()
    }

    /// The doc comment of an exported interface.
    pub(crate) fn interface(&self, interface: Option<&str>) -> Option<String> {
        self.interfaces.get(interface?).cloned()
    }
}

fn clean(text: &str) -> String {
    text.trim().to_string()
}

/// Whether the component has a top-level `package-docs` section, found without validating or
/// decoding the rest (a large component is not decoded for nothing; function bodies are not
/// parsed).
fn has_docs_section(wasm: &[u8]) -> bool {
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload {
            Err(_) => return false,
            Ok(wasmparser::Payload::CustomSection(s)) if depth == 0 && s.name() == SECTION => {
                return true;
            }
            Ok(
                wasmparser::Payload::ModuleSection { .. }
                | wasmparser::Payload::ComponentSection { .. },
            ) => depth += 1,
            Ok(wasmparser::Payload::End(_)) => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Ok(_) => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component whose WIT wit-parser's decoder panics on (found by fuzzing): no docs, and
    /// no panic out of `read`.
    #[test]
    fn a_decoder_panic_costs_the_docs_only() {
        let wasm = include_bytes!(
            "../../../../tests/fuzz/regressions/component_docs/invalid-type-index.wasm"
        );
        assert!(std::panic::catch_unwind(|| Docs::decode(wasm)).is_err());
        let docs = Docs::read(wasm);
        assert!(docs.functions.is_empty() && docs.interfaces.is_empty());
    }
}
