//! `cordon plugin config PLUGIN KEY`: the value a plugin reads through `wasi:config/store`.
//!
//! The value never appears on the command line (where shell history and `ps` would keep it):
//! it is read from stdin, or asked for on a terminal without echo.

use std::io::{IsTerminal, Read};

use anyhow::Context;
use clap::Args;
use cordon_home::{Home, MAX_CONFIG_VALUE_BYTES};

use crate::records::Records;
use crate::term::outln;

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The plugin that reads it.
    plugin: String,
    /// The key it reads (letters, digits, `_`, `-`, `.`).
    key: String,
    /// Remove the value instead of setting it.
    #[arg(long)]
    unset: bool,
}

/// The value from stdin (its last line break dropped), or asked for on a terminal.
fn read_value(key: &str) -> anyhow::Result<String> {
    let mut value = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("Value of `{key}` (not shown): "))
            .context("the value could not be read from the terminal")?
    } else {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_CONFIG_VALUE_BYTES as u64 + 2)
            .read_to_end(&mut bytes)
            .context("the value could not be read from stdin")?;
        String::from_utf8(bytes).context("the value on stdin is not UTF-8 text")?
    };
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        anyhow::bail!(
            "no value was given for `{key}`: pipe it in (e.g. `cordon plugin config PLUGIN {key} < FILE`), \
             or use --unset to remove one"
        );
    }
    Ok(value)
}

pub async fn run(home: &Home, records: Option<&Records>, args: ConfigArgs) -> anyhow::Result<()> {
    // What can be checked is checked before a secret is asked for.
    home.read()?.plugin(&args.plugin)?;
    cordon_home::check_config_key(&args.key)?;
    let value = if args.unset {
        None
    } else {
        Some(zeroize::Zeroizing::new(read_value(&args.key)?))
    };
    let granted = home.set_config_value(
        &args.plugin,
        &args.key,
        value.as_deref().map(String::as_str),
    )?;
    let (plugin, key) = (&args.plugin, &args.key);
    if args.unset {
        outln!("Removed the value of `{key}` for plugin `{plugin}`.");
    } else {
        outln!("Set the value of `{key}` for plugin `{plugin}` (kept in the home, never shown).");
        if !granted {
            outln!(
                "`{plugin}` is not granted `config:{key}`, so it cannot read it yet: cordon grant {plugin} config:{key}"
            );
        }
    }
    if let Some(records) = records {
        let digest = home.read()?.plugin(plugin)?.digest.clone();
        let what = if args.unset { "removed" } else { "set" };
        crate::audit::home_change(
            &records.store,
            "config",
            plugin,
            &digest,
            vec![format!("- value of config key `{key}` {what}")],
        )
        .await?;
    }
    Ok(())
}
