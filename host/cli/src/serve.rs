//! `cordon serve`: the resident host, over this home's installed tools.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use cordon_core::ReservedKind;
use cordon_home::Home;
use cordon_serve::{HostOptions, ServeOptions, Tokens};

use crate::chat::{ModelArgs, load_config};
use crate::records::Records;
use crate::term::errln;
use crate::toolbox_host::HomeTools;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (default: [serve] listen, else 127.0.0.1:8420).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// The file of accepted bearer tokens, one per line (`TOKEN` or `NAME TOKEN`). Default:
    /// $CORDON_HOME/serve-token, created with a random token on first start.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Seconds a tool call waits for an approval before it is denied.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(..=cordon_agent::MAX_WAIT_SECS))]
    approval_timeout: Option<u64>,
    /// Seconds running tool calls get to finish on SIGTERM.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(..=cordon_agent::MAX_WAIT_SECS))]
    shutdown_grace: Option<u64>,
    /// Model and configuration.
    #[command(flatten)]
    model: ModelArgs,
}

impl ServeArgs {
    /// The config file named on the command line.
    pub fn config(&self) -> Option<&std::path::Path> {
        self.model.config.as_deref()
    }
}

/// Resolves when the process is asked to stop (SIGTERM, or Ctrl-C).
pub(crate) async fn stop_requested() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// `cordon serve`.
pub async fn run(home: &Home, records: Records, args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(&args.model, &Default::default())?;
    let listen = match args.listen {
        Some(addr) => addr,
        None => config
            .serve
            .listen
            .parse()
            .context("[serve] listen is not an address")?,
    };
    let default_token = home.root().join("serve-token");
    let token_file = args.token_file.clone().unwrap_or(default_token);
    // No grant may read the tokens; nor may any reach the home, the config or the store,
    // which a host does not start beside.
    let home = home
        .clone()
        .protecting(&token_file, ReservedKind::TokenFile);
    home.check_recorded_grants()?;
    let (tokens, created) = Tokens::load_or_create(&token_file, args.token_file.is_none())?;
    if created {
        errln!("Wrote a new token to {} (mode 0600).", token_file.display());
    }
    // Who may do what, so a token file's mistake shows at start rather than at a 403.
    for (name, scopes) in tokens.describe() {
        tracing::info!(token = %name, scopes = %scopes.join(","), "token");
    }
    let options = ServeOptions {
        listen,
        tokens,
        host: HostOptions {
            approval_timeout: Duration::from_secs(
                args.approval_timeout
                    .unwrap_or(config.serve.approval_timeout_secs)
                    .max(1),
            ),
            shutdown_grace: Duration::from_secs(
                args.shutdown_grace
                    .unwrap_or(config.serve.shutdown_grace_secs),
            ),
            config,
        },
    };
    let recorded_in = home.clone();
    let source = Arc::new(HomeTools::new(home));
    let store_url = records.store.url().to_string();
    let served = cordon_serve::serve(records.store, source, options, stop_requested(), |addr| {
        // So `cordon approve` finds this server without being told where. Recorded before the
        // line below, so whoever waits for that line finds the record in place.
        if let Err(e) = crate::serving::record(&recorded_in, addr, &token_file) {
            errln!(
                "cordon serve: cannot record this server's address in {} ({e}); `cordon approve` \
                 needs --url {} to find it",
                recorded_in.root().display(),
                crate::serving::local_url(addr)
            );
        }
        errln!(
            "cordon serve: listening on http://{addr} (console: http://{addr}/); sessions in {store_url}; token in {}",
            token_file.display()
        );
    })
    .await;
    crate::serving::forget(&recorded_in);
    served?;
    errln!("cordon serve: stopped.");
    Ok(())
}
