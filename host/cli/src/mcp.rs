//! `cordon mcp`: the installed tools, sandboxed, for an MCP client that starts Cordon as a
//! subprocess and speaks MCP over its stdin and stdout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use cordon_agent::AgentConfig;
use cordon_home::Home;
use cordon_mcp::{McpHost, McpOptions, StoreApprover};

use crate::records::Records;
use crate::term::errln;
use crate::toolbox_host::HomeTools;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Config file with the approval rules and [audit] (default: ./cordon.toml when it exists).
    #[arg(long, env = "CORDON_CONFIG")]
    pub config: Option<PathBuf>,
    /// Seconds a call that needs approval waits for an answer before it is denied (default:
    /// [serve] approval_timeout_secs).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(..=cordon_agent::MAX_WAIT_SECS))]
    approval_timeout: Option<u64>,
}

/// `cordon mcp`.
pub async fn run(home: &Home, records: Records, args: McpArgs) -> anyhow::Result<()> {
    home.check_recorded_grants()?;
    let config = match crate::chat::config_in_use(args.config.as_deref()) {
        Some(path) => AgentConfig::load(&path, true)?,
        None => AgentConfig::default(),
    };
    let notice = empty_home(home)?;
    if let Some(notice) = &notice {
        errln!("cordon mcp: {notice}");
    }
    let options = McpOptions {
        approval: config.approval.clone(),
        policy: config.policy.clone(),
        approval_timeout: Duration::from_secs(
            args.approval_timeout
                .unwrap_or(config.serve.approval_timeout_secs)
                .max(1),
        ),
        keep_arguments: records.keep_arguments,
        origin: "mcp".to_string(),
        notice,
        result_budget_tokens: config.context.result_budget_tokens,
        ..McpOptions::default()
    };
    let source = Arc::new(HomeTools::new(home.clone()));
    // A client that cannot ask its user leaves the question in the store, for cordon serve's
    // approvals API and console and for `cordon approve`.
    let approver = Arc::new(StoreApprover::new(records.store.clone()));
    let host = McpHost::new(source, Some(records.store), approver, options);
    // A client that stops its server with SIGTERM (or a Ctrl-C) still gets every audit record
    // of its calls written.
    tokio::select! {
        served = cordon_mcp::serve_stdio(&host) => served?,
        () = crate::serve::stop_requested() => host.finish().await,
    }
    Ok(())
}

/// What to say when `home` has no plugins: the server would offer no tools, and clients, which
/// start it with little of the user's environment (no `CORDON_HOME`), show an empty list and
/// nothing else. Names the home in use and how to point at the right one.
fn empty_home(home: &Home) -> anyhow::Result<Option<String>> {
    if !home.read()?.plugins.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "the Cordon home {} has no plugins installed, so no tools are offered. If your plugins \
         are in another home, start this server with `cordon mcp --home DIR` (MCP clients start \
         it without your environment, so CORDON_HOME set in your shell does not reach it); \
         otherwise install one with `cordon --home {} plugin install …`.",
        home.root().display(),
        home.root().display(),
    )))
}
