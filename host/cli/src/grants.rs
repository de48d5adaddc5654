//! `cordon grant | revoke | limit`: change what a plugin may reach and use.

use clap::Args;
use cordon_core::LimitKind;
use cordon_home::Home;

use crate::audit;
use crate::records::Records;
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

pub async fn grant(home: &Home, records: &Records, args: GrantArgs) -> anyhow::Result<()> {
    let changes = home.grant(&args.plugin, &args.grants)?;
    let details = changes
        .iter()
        .map(|c| match &c.replaced {
            Some(old) => format!("+ {} (replaces {old})", c.granted),
            None => format!("+ {}", c.granted),
        })
        .collect();
    for change in changes {
        match change.replaced {
            Some(old) => outln!(
                "Granted {} to `{}` (replaces {old}).",
                change.granted,
                args.plugin
            ),
            None => outln!("Granted {} to `{}`.", change.granted, args.plugin),
        }
    }
    record(home, records, "grant", &args.plugin, details).await
}

pub async fn revoke(home: &Home, records: &Records, args: RevokeArgs) -> anyhow::Result<()> {
    let revoked = home.revoke(&args.plugin, &args.grants)?;
    for g in &revoked {
        outln!("Revoked {g} from `{}`.", args.plugin);
    }
    let details = revoked.iter().map(|g| format!("- {g}")).collect();
    record(home, records, "revoke", &args.plugin, details).await
}

pub async fn limit(home: &Home, records: &Records, args: LimitArgs) -> anyhow::Result<()> {
    let limits = home.set_limits(&args.plugin, &args.limits)?;
    let shown: Vec<String> = LimitKind::ALL
        .into_iter()
        .map(|k| format!("{}={}", k.key(), limits.describe(k)))
        .collect();
    outln!("Limits of `{}`: {}", args.plugin, shown.join(" "));
    record(home, records, "limit", &args.plugin, args.limits.clone()).await
}

/// Puts a change of `plugin` in the audit log, with its component's digest.
async fn record(
    home: &Home,
    records: &Records,
    action: &str,
    plugin: &str,
    details: Vec<String>,
) -> anyhow::Result<()> {
    let digest = home
        .read()
        .ok()
        .and_then(|lock| lock.plugins.get(plugin).map(|r| r.digest.clone()))
        .unwrap_or_default();
    audit::home_change(&records.store, action, plugin, &digest, details).await
}
