//! The capability ceiling: what a component could use at all, judged from its imports.
//!
//! A component that does not import `wasi:filesystem` cannot open a file whatever it is
//! granted, so giving it a path is a mistake (or a sign the user picked the wrong plugin).
//! Refusing such grants keeps the lock file honest: every grant shown is one that can matter.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::grant::Grant;

/// A class of capability that grants give and imports make reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Preopened directories (`wasi:filesystem/*`).
    Filesystem,
    /// Environment variables (`wasi:cli/environment`).
    Environment,
    /// Outgoing HTTP (`wasi:http/outgoing-handler`).
    Http,
    /// Raw TCP sockets (`wasi:sockets/tcp`, `wasi:sockets/tcp-create-socket`).
    Sockets,
    /// Configuration values (`wasi:config/store`).
    Config,
}

/// Which imports make which capability reachable: an interface name without its version, or
/// (ending in `/`) every interface of a package. A capability's first entry is how it is named
/// to users. This table is the only place these names are spelled.
pub const CAPABILITY_IMPORTS: &[(&str, Capability)] = &[
    ("wasi:filesystem/", Capability::Filesystem),
    // bulk-read reads below the same preopened directories.
    ("cordon:tool/bulk-read", Capability::Filesystem),
    ("wasi:cli/environment", Capability::Environment),
    ("wasi:http/outgoing-handler", Capability::Http),
    ("wasi:sockets/tcp", Capability::Sockets),
    ("wasi:sockets/tcp-create-socket", Capability::Sockets),
    ("wasi:config/store", Capability::Config),
];

impl Capability {
    /// Every capability class, in display order.
    pub const ALL: [Capability; 5] = [
        Capability::Filesystem,
        Capability::Environment,
        Capability::Http,
        Capability::Sockets,
        Capability::Config,
    ];

    /// The WASI interface family the capability needs, as shown to users: its first entry in
    /// [`CAPABILITY_IMPORTS`].
    pub fn interface(self) -> &'static str {
        CAPABILITY_IMPORTS
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("", |(name, _)| name.trim_end_matches('/'))
    }

    /// The capability an import (e.g. `wasi:filesystem/types@0.2.6`) makes reachable, if any.
    pub fn of_import(import: &str) -> Option<Capability> {
        let name = unversioned(import);
        CAPABILITY_IMPORTS.iter().find_map(|&(entry, c)| {
            let matches = if entry.ends_with('/') {
                name.starts_with(entry)
            } else {
                name == entry
            };
            matches.then_some(c)
        })
    }

    /// What a grant of this class gives, for messages ("a path").
    fn noun(self) -> &'static str {
        match self {
            Capability::Filesystem => "a path",
            Capability::Environment => "an environment variable",
            Capability::Http => "HTTP access",
            Capability::Sockets => "a TCP address",
            Capability::Config => "a configuration value",
        }
    }

    /// The class a grant belongs to.
    pub fn of(grant: &Grant) -> Capability {
        match grant {
            Grant::Fs(_) => Capability::Filesystem,
            Grant::Env(..) => Capability::Environment,
            Grant::Http(..) => Capability::Http,
            Grant::Tcp(..) => Capability::Sockets,
            Grant::Config(..) => Capability::Config,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}

/// A grant the component's imports make useless, so it is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} does not import {}, so it cannot be given {} (`{grant}`)",
    match plugin { Some(p) => format!("plugin `{p}`"), None => "the plugin".to_string() },
    capability.interface(), capability.noun())]
pub struct CeilingError {
    /// The plugin's name, when the caller knows it (see [`CeilingError::for_plugin`]).
    pub plugin: Option<String>,
    /// The capability class the plugin does not import.
    pub capability: Capability,
    /// The refused grant, in its text form.
    pub grant: String,
}

impl CeilingError {
    /// Names the plugin in the message.
    pub fn for_plugin(mut self, name: impl Into<String>) -> Self {
        self.plugin = Some(name.into());
        self
    }
}

/// Which capability classes a component imports.
///
/// Measured (Rust 1.95, wasm32-wasip2, wit-bindgen 0.63): a Rust component with `std` always
/// imports `wasi:cli/environment` (the standard library's start-up code reads it), so the
/// environment ceiling of Rust plugins is always open and grants, not the ceiling, protect
/// variables. Filesystem, HTTP and socket imports appear only when the code uses them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ceiling {
    /// Imports any `wasi:filesystem/*` interface.
    pub filesystem: bool,
    /// Imports `wasi:cli/environment`.
    pub environment: bool,
    /// Imports `wasi:http/outgoing-handler`.
    pub http: bool,
    /// Imports `wasi:sockets/tcp` or `wasi:sockets/tcp-create-socket`.
    pub sockets: bool,
    /// Imports `wasi:config/store`.
    #[serde(default)]
    pub config: bool,
}

/// Strips the `@version` from an interface name.
fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(n, _)| n)
}

impl Ceiling {
    /// Computes the ceiling from import names such as `wasi:filesystem/types@0.2.6`.
    pub fn from_imports<S: AsRef<str>>(imports: &[S]) -> Ceiling {
        let mut c = Ceiling::default();
        for capability in imports
            .iter()
            .filter_map(|i| Capability::of_import(i.as_ref()))
        {
            match capability {
                Capability::Filesystem => c.filesystem = true,
                Capability::Environment => c.environment = true,
                Capability::Http => c.http = true,
                Capability::Sockets => c.sockets = true,
                Capability::Config => c.config = true,
            }
        }
        c
    }

    /// Whether the component can use capabilities of this class at all.
    pub fn allows(&self, capability: Capability) -> bool {
        match capability {
            Capability::Filesystem => self.filesystem,
            Capability::Environment => self.environment,
            Capability::Http => self.http,
            Capability::Sockets => self.sockets,
            Capability::Config => self.config,
        }
    }

    /// Refuses a grant the component could never use.
    pub fn permits(&self, grant: &Grant) -> Result<(), CeilingError> {
        let capability = Capability::of(grant);
        if self.allows(capability) {
            Ok(())
        } else {
            Err(CeilingError {
                plugin: None,
                capability,
                grant: grant.to_string(),
            })
        }
    }

    /// Refuses the first grant the component could never use; every grant a plugin is given
    /// (at install, at `grant`, at call time) passes through here, so the rule is decided once.
    pub fn permit_all<'a>(
        &self,
        grants: impl IntoIterator<Item = &'a Grant>,
    ) -> Result<(), CeilingError> {
        grants.into_iter().try_for_each(|g| self.permits(g))
    }

    /// Splits grants into those the component can use and those it cannot (an upgrade keeps
    /// the first and drops the second).
    pub fn partition<'a>(
        &self,
        grants: impl IntoIterator<Item = &'a Grant>,
    ) -> (Vec<Grant>, Vec<Grant>) {
        grants
            .into_iter()
            .cloned()
            .partition(|g| self.permits(g).is_ok())
    }

    /// The classes the component imports, for display.
    pub fn capabilities(&self) -> Vec<Capability> {
        Capability::ALL
            .into_iter()
            .filter(|c| self.allows(*c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_map_to_classes() {
        let c = Ceiling::from_imports(&[
            "wasi:filesystem/preopens@0.2.6",
            "wasi:io/streams@0.2.6",
            "cordon:tool/log@0.1.0",
        ]);
        assert_eq!(
            c,
            Ceiling {
                filesystem: true,
                ..Ceiling::default()
            }
        );
        let c = Ceiling::from_imports(&[
            "wasi:cli/environment@0.2.0",
            "wasi:http/outgoing-handler@0.2.6",
            "wasi:sockets/tcp-create-socket@0.2.6",
            "wasi:config/store@0.2.0-draft",
        ]);
        assert_eq!(
            c,
            Ceiling {
                filesystem: false,
                environment: true,
                http: true,
                sockets: true,
                config: true,
            }
        );
        // wasi:http/types alone cannot send anything; wasi:sockets/udp is not tcp.
        let c = Ceiling::from_imports(&[
            "wasi:http/types@0.2.6",
            "wasi:sockets/udp@0.2.6",
            "wasi:cli/environments",
        ]);
        assert_eq!(c, Ceiling::default());
        assert!(c.capabilities().is_empty());
        // bulk-read reads granted directories like wasi:filesystem; log does not.
        let c = Ceiling::from_imports(&["cordon:tool/bulk-read@0.1.1", "cordon:tool/log@0.1.1"]);
        assert_eq!(
            c,
            Ceiling {
                filesystem: true,
                ..Ceiling::default()
            }
        );
    }

    #[test]
    fn capabilities_are_named_by_their_first_import() {
        let names: Vec<&str> = Capability::ALL.iter().map(|c| c.interface()).collect();
        assert_eq!(
            names,
            [
                "wasi:filesystem",
                "wasi:cli/environment",
                "wasi:http/outgoing-handler",
                "wasi:sockets/tcp",
                "wasi:config/store",
            ]
        );
    }

    #[test]
    fn permits_only_imported_classes() {
        let c = Ceiling::from_imports(&["wasi:filesystem/types@0.2.6"]);
        assert!(c.permits(&"fs:/data".parse().unwrap()).is_ok());
        let e = c.permits(&"env:TOKEN".parse().unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the plugin does not import wasi:cli/environment, so it cannot be given an environment variable (`env:TOKEN`)"
        );
        let e = Ceiling::default()
            .permits(&"fs:/data".parse().unwrap())
            .unwrap_err()
            .for_plugin("x");
        assert_eq!(
            e.to_string(),
            "plugin `x` does not import wasi:filesystem, so it cannot be given a path (`fs:/data:ro`)"
        );
        assert!(
            c.permits(&"net:https://a.example".parse().unwrap())
                .is_err()
        );
        assert!(c.permits(&"net:tcp://1.2.3.4:5".parse().unwrap()).is_err());
    }

    #[test]
    fn permit_all_refuses_the_first_unusable_grant() {
        let c = Ceiling::from_imports(&["wasi:filesystem/types@0.2.6"]);
        let grants: Vec<Grant> = ["fs:/data", "env:A", "env:B"]
            .iter()
            .map(|g| g.parse().unwrap())
            .collect();
        assert!(c.permit_all(&grants[..1]).is_ok());
        assert_eq!(c.permit_all(&grants).unwrap_err().grant, "env:A");
        let (kept, dropped) = c.partition(&grants);
        assert_eq!(kept, grants[..1]);
        assert_eq!(dropped, grants[1..]);
    }
}
