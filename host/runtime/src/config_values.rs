//! The `wasi:config/store` values one call may read, as the sandbox puts them in its store
//! (see `config_store`, which answers from them).

use std::collections::{BTreeMap, BTreeSet};

/// What one call may read: the granted keys, and the values of those that are set. Its
/// `Debug` shows the keys only: the values are secrets.
#[derive(Default)]
pub(crate) struct ConfigValues {
    granted: BTreeSet<String>,
    values: BTreeMap<String, String>,
}

impl std::fmt::Debug for ConfigValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigValues")
            .field("granted", &self.granted)
            .field("set", &self.values.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ConfigValues {
    /// The `granted` keys, with their values from `kept`.
    pub(crate) fn granted<'a>(
        granted: impl Iterator<Item = &'a str>,
        kept: &BTreeMap<String, String>,
    ) -> ConfigValues {
        let granted: BTreeSet<String> = granted.map(str::to_string).collect();
        let values = granted
            .iter()
            .filter_map(|k| kept.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        ConfigValues { granted, values }
    }

    /// Whether `key` is granted.
    pub(crate) fn is_granted(&self, key: &str) -> bool {
        self.granted.contains(key)
    }

    /// The value of a granted `key`, if it has one.
    pub(crate) fn value(&self, key: &str) -> Option<String> {
        self.values.get(key).cloned()
    }

    /// Every granted key that has a value, with it.
    pub(crate) fn all(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_granted_keys_with_values_are_passed_on() {
        let kept: BTreeMap<String, String> = [("a", "1"), ("b", "2"), ("c", "3")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let values = ConfigValues::granted(["a", "c", "unset"].into_iter(), &kept);
        let keys: Vec<&str> = values.values.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a", "c"]);
        assert!(values.granted.contains("unset"));
        assert!(!values.granted.contains("b"));
    }
}
