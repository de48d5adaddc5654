//! `cordon grant | revoke | limit`: change what a plugin may reach and use.

use clap::Args;
use cordon_core::LimitKind;
use cordon_home::Home;

use crate::term::outln;

#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The plugin name.
    plugin: String,
    /// One or more grants: fs:<dir>[:<guest>][:ro|rw] (read-only unless :rw), env:NAME,
    /// net:https://host[:port], net:tcp://ip:port.
    #[arg(required = true, value_name = "GRANT")]
    grants: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The plugin name.
    plugin: String,
    /// One or more grants to remove; `fs:<dir>` removes that directory whatever its mode.
    #[arg(required = true, value_name = "GRANT")]
    grants: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The plugin name.
    plugin: String,
    /// One or more overrides: memory=64MiB, time=5s, output=256KiB, args=1MiB, log=64KiB.
    #[arg(required = true, value_name = "KEY=VALUE")]
    limits: Vec<String>,
}

pub fn grant(home: &Home, args: GrantArgs) -> anyhow::Result<()> {
    for change in home.grant(&args.plugin, &args.grants)? {
        match change.replaced {
            Some(old) => outln!(
                "Granted {} to `{}` (replaces {old}).",
                change.granted,
                args.plugin
            ),
            None => outln!("Granted {} to `{}`.", change.granted, args.plugin),
        }
    }
    Ok(())
}

pub fn revoke(home: &Home, args: RevokeArgs) -> anyhow::Result<()> {
    for g in home.revoke(&args.plugin, &args.grants)? {
        outln!("Revoked {g} from `{}`.", args.plugin);
    }
    Ok(())
}

pub fn limit(home: &Home, args: LimitArgs) -> anyhow::Result<()> {
    let limits = home.set_limits(&args.plugin, &args.limits)?;
    let shown: Vec<String> = LimitKind::ALL
        .into_iter()
        .map(|k| format!("{}={}", k.key(), limits.describe(k)))
        .collect();
    outln!("Limits of `{}`: {}", args.plugin, shown.join(" "));
    Ok(())
}
