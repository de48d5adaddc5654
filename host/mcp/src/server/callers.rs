//! Whose standing answers and session labels a call uses: a stdio connection's, or, over
//! HTTP, those of the caller the request can be tied to.

use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;

use super::{Answers, CallFacts, Caller, Holding, MAX_STATELESS_CLIENTS, McpServer};

impl McpServer {
    /// Where the `always` answers of the client behind `context` are kept, and for how long
    /// they hold (for the question's text): this MCP connection's (a stdio process, an HTTP
    /// session), or, for a client on 2026-07-28 over HTTP (no session), its TCP
    /// connection's (see [`Caller`]). An HTTP request whose transport did not say which
    /// connection it came over keeps none.
    pub(super) fn answers_for(
        &self,
        context: &RequestContext<RoleServer>,
        facts: &CallFacts<'_>,
    ) -> (Answers, &'static str) {
        let http = context.extensions.get::<http::request::Parts>();
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let Some(http) = http.filter(|_| modern) else {
            return (self.answers.clone(), "until the client disconnects");
        };
        let Some(crate::Connection(connection)) = http.extensions.get::<crate::Connection>() else {
            return (
                Answers::default(),
                "(not kept here: this server cannot tell this client's requests from another \
                 program's, so only this call runs)",
            );
        };
        let mut kept = self
            .host
            .stateless_answers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let caller = Caller {
            connection: *connection,
            token: facts.token.map(str::to_string),
            client: facts.client.to_string(),
        };
        let answers = match kept.iter().find(|(who, _)| *who == caller) {
            Some((_, answers)) => answers.clone(),
            None => {
                if kept.len() >= MAX_STATELESS_CLIENTS {
                    kept.remove(0);
                }
                let answers = Answers::default();
                kept.push((caller, answers.clone()));
                answers
            }
        };
        (
            answers,
            "over this client's connection to cordon serve, while it stays open",
        )
    }

    /// The labels of the session the call in `context` belongs to: its connection's over
    /// stdio; over HTTP, whatever the protocol version or MCP session, those of its token and
    /// client name (`name`, without version).
    pub(super) fn labels_for(
        &self,
        context: &RequestContext<RoleServer>,
        token: Option<&str>,
        name: &str,
    ) -> Holding {
        if context.extensions.get::<http::request::Parts>().is_none() {
            return self.labels.clone();
        }
        let who = (token.map(str::to_string), name.to_string());
        let mut kept = self
            .host
            .http_labels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let labels = match kept.iter().position(|(w, _)| *w == who) {
            Some(at) => kept.remove(at).1,
            None => {
                // The least recently used client's go first: a client still calling keeps its.
                if kept.len() >= MAX_STATELESS_CLIENTS {
                    kept.remove(0);
                }
                Holding::default()
            }
        };
        kept.push((who, labels.clone()));
        labels
    }
}
