//! End-to-end tests of the built `cordon` binary, in one test binary (one link, one process
//! pool), one module per command or bundled tool.

mod chat_terminal;
mod cli_call;
mod cli_grants;
mod cli_install;
mod cli_new;
mod cli_oci;
mod cli_oci_hostile;
mod cli_oci_provenance;
mod cli_reserved;
mod cli_upgrade;
mod config_store;
mod crash;
mod doctor;
mod grant_requests;
mod init;
mod large_results;
mod metrics;
mod model;
mod oidc;
mod policy_cli;
mod policy_doors;
mod rule_of_two;
mod run_conversation;
mod scopes;
mod serve;
mod serve_admission;
mod sessions;
mod team;
mod telemetry;
mod tools_files;
mod tools_js;
mod tools_python;
mod tools_sql;
