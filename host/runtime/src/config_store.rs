//! `wasi:config/store`, as components built against its drafts import it (`0.2.0-draft`, as
//! jco/componentize-js projects and Wassette's examples do, and `0.2.0-rc.1`, wasmtime's and
//! Spin's). Both versions have the same two functions; a prerelease version links only under
//! its exact name, so each is bound on its own and both answer from the same place.
//!
//! Deny by default, as every capability: a key is readable only under a `config:KEY` grant,
//! and its value comes from the home (the caller puts the plugin's values in
//! [`Sandbox::config`](crate::Sandbox::config)), never from the host's environment. Reading a
//! key that is not granted answers "no such key", exactly as for a key without a value, so a
//! component learns nothing of what is kept for it; the call's report notes the refusal and
//! the grant that would lift it, which a grant request can offer.

use wasmtime::component::{HasSelf, Linker};

use crate::sandbox::HostState;

mod draft {
    wasmtime::component::bindgen!({
        inline: "
            package wasi:config@0.2.0-draft;

            interface store {
                variant error {
                    upstream(string),
                    io(string),
                }
                get: func(key: string) -> result<option<string>, error>;
                get-all: func() -> result<list<tuple<string, string>>, error>;
            }

            world imports {
                import store;
            }
        ",
        world: "imports",
    });
}

mod rc1 {
    wasmtime::component::bindgen!({
        inline: "
            package wasi:config@0.2.0-rc.1;

            interface store {
                variant error {
                    upstream(string),
                    io(string),
                }
                get: func(key: string) -> result<option<string>, error>;
                get-all: func() -> result<list<tuple<string, string>>, error>;
            }

            world imports {
                import store;
            }
        ",
        world: "imports",
    });
}

use draft::wasi::config::store as draft_store;
use rc1::wasi::config::store as rc1_store;

impl HostState {
    fn config_get(&mut self, key: &str) -> Option<String> {
        if self.config().is_granted(key) {
            return self.config().value(key);
        }
        // The grant is built, never parsed from what the guest chose: a key such as
        // `KEY:public` would otherwise carry a mark only a person may set. A key no grant
        // could name (`a/b`) is refused without a grant to offer.
        if cordon_core::valid_config_key(key) {
            let wanted = cordon_core::Grant::Config(key.to_string(), Default::default());
            self.refused_mut().want(wanted.to_string());
        }
        let shown: String = key.chars().take(128).collect();
        self.refused_mut()
            .refuse(format!("config: key `{shown}` (not granted)"));
        None
    }

    fn config_all(&self) -> Vec<(String, String)> {
        self.config().all()
    }
}

/// The same answers under each version's bindings.
macro_rules! store_host {
    ($store:ident) => {
        impl $store::Host for HostState {
            fn get(&mut self, key: String) -> Result<Option<String>, $store::Error> {
                Ok(self.config_get(&key))
            }

            fn get_all(&mut self) -> Result<Vec<(String, String)>, $store::Error> {
                Ok(self.config_all())
            }
        }
    };
}

store_host!(draft_store);
store_host!(rc1_store);

/// Links both versions of `wasi:config/store` into `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    draft_store::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    rc1_store::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}
