//! Telling the host which grant a call lacked (`cordon:tool/grant-wanted`, WIT 0.1.5), so that
//! a person can be asked for it.
//!
//! The host sees most refusals itself and can turn them into a question to a person when the
//! call fails. Two it cannot see: a path outside every granted directory (the plugin's own C
//! library fails it before the host hears of it) and an environment variable that was not
//! granted (it is simply absent). [`GrantedDirs`](crate::paths::GrantedDirs) says the first
//! for you when a path argument lies outside the grants; [`env_var`] says the second.
//!
//! Saying so grants nothing: the host offers a grant only to a person, only when the call
//! fails, and only within the plugin's ceiling. When the plugin is compiled natively (unit
//! tests) there is no host: what is said is kept for [`take_said`].

use crate::ToolError;

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static SAID: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Says that this call lacked `grant` (grant syntax: `fs:/home/ann/docs:ro`, `env:API_KEY`):
/// the narrowest grant that would have let it do what it was asked. Then fail the call as it
/// would have failed anyway. Err, naming why, when the host refuses to note it (not a grant,
/// marks, a relative path, or more than 8 in one call).
pub fn want(grant: &str) -> Result<(), String> {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::cordon::tool::grant_wanted::want(grant)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        SAID.with(|said| said.borrow_mut().push(grant.to_owned()));
        Ok(())
    }
}

/// The grants this thread said it lacked since last asked, in order (native builds only: in
/// a component they went to the host).
#[cfg(not(target_arch = "wasm32"))]
pub fn take_said() -> Vec<String> {
    SAID.with(|said| std::mem::take(&mut *said.borrow_mut()))
}

/// The value of environment variable `name`, which the tool needs: when it is not set (not
/// granted, in a component), tells the host it lacked `env:NAME` and returns a `denied` error
/// saying so, for the call to fail with; a person may then be asked to grant it, and the call
/// runs again with it.
pub fn env_var(name: &str) -> Result<String, ToolError> {
    match std::env::var(name) {
        Ok(value) => Ok(value),
        Err(std::env::VarError::NotUnicode(_)) => Err(ToolError::failed(format!(
            "environment variable {name} is not valid UTF-8"
        ))),
        Err(std::env::VarError::NotPresent) => {
            let grant = format!("env:{name}");
            // A name that is no grant (empty, `=`) is the plugin's own mistake: say only that.
            let asked = match want(&grant) {
                Ok(()) => format!("; the user may be asked to grant `{grant}`"),
                Err(_) => String::new(),
            };
            Err(ToolError::denied(format!(
                "environment variable {name} is not granted to this tool{asked}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_variable_is_said_and_refused() {
        take_said();
        let e = env_var("CORDON_SDK_TEST_SURELY_UNSET").unwrap_err();
        assert!(
            matches!(&e, ToolError::Denied(m) if m.contains("`env:CORDON_SDK_TEST_SURELY_UNSET`")),
            "{e:?}"
        );
        assert_eq!(take_said(), ["env:CORDON_SDK_TEST_SURELY_UNSET"]);
        assert!(env_var("PATH").is_ok());
        assert!(take_said().is_empty());
    }
}
