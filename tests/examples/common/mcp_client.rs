//! The MCP client the benchmarks time calls with: rmcp over a child process's stdio.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;

pub type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// Starts the MCP server `cmd` (its stderr dropped) and connects to it.
pub async fn connect(mut cmd: tokio::process::Command) -> Client {
    cmd.stderr(Stdio::null());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("start the MCP server");
    ().serve(transport)
        .await
        .expect("connect to the MCP server")
}

/// `n` sequential no-op calls; the time of each.
pub async fn calls(client: &Client, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let result = client
            .call_tool(CallToolRequestParams::new("noop"))
            .await
            .expect("tools/call");
        assert_ne!(result.is_error, Some(true), "{result:?}");
        times.push(start.elapsed());
    }
    times
}
