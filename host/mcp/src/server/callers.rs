//! Whose standing answers and session labels a call uses: a stdio connection's, or, over
//! HTTP, those of the caller the request can be tied to.

use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;

use super::{Answers, CallFacts, Caller, Holding, MAX_STATELESS_CLIENTS, McpServer};

impl McpServer {
    /// Keys this connection's counters by the MCP session the request in `context` names
    /// (`Mcp-Session-Id`), which is the same on every host the session reaches.
    pub(super) fn adopt_session(&self, context: &RequestContext<RoleServer>) {
        let named = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        if let Some(id) = named {
            *self.session.lock().unwrap_or_else(|e| e.into_inner()) = format!("mcp-{id}");
        }
    }

    /// The store the labels of a client over HTTP are shared through: a PostgreSQL store,
    /// which several hosts may share (one SQLite file is one machine's).
    fn label_store(&self, context: &RequestContext<RoleServer>) -> Option<&cordon_store::Store> {
        context.extensions.get::<http::request::Parts>()?;
        self.host.store.as_ref().filter(|s| s.is_shared())
    }

    /// Adds to `labels` those other hosts recorded for the same client (token and name):
    /// what its model was given there counts here. `Err` says why the call cannot be decided:
    /// labels that cannot be read could hide one that holds the call back.
    pub(super) async fn labels_from_store(
        &self,
        labels: &Holding,
        context: &RequestContext<RoleServer>,
        token: Option<&str>,
        name: &str,
    ) -> Result<(), String> {
        let Some(store) = self.label_store(context) else {
            return Ok(());
        };
        let sources = store
            .mcp_labels(token.unwrap_or_default(), name)
            .await
            .map_err(|e| {
                format!(
                    "the call was not run: the labels other hosts recorded for this client could \
                     not be read ({e}); try again when the store is back"
                )
            })?;
        labels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .labels
            .merge(&sources);
        Ok(())
    }

    /// The client's model is about to be given a result of `tool`, which carries
    /// `exposure`'s labels: the session holds them, and other hosts learn of those it did
    /// not hold. `Err` says why the result must be withheld: other hosts could not learn of
    /// its labels, and would run calls this result should hold back.
    pub(super) async fn saw(
        &self,
        held: &Holding,
        tool: &str,
        exposure: &cordon_core::Exposure,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), String> {
        let added = {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            let before = held.labels.sources.len();
            held.labels.saw(tool, exposure);
            held.labels.sources[before..].to_vec()
        };
        let Some(store) = self.label_store(context).filter(|_| !added.is_empty()) else {
            return Ok(());
        };
        let token = token(context);
        let name = introduced_name(context);
        store
            .add_mcp_labels(token.as_deref().unwrap_or_default(), &name, &added)
            .await
            .map_err(|e| {
                format!(
                    "the call ran, but its result is withheld: the labels it carries could not \
                     be recorded for the other hosts ({e}); try again when the store is back"
                )
            })
    }

    /// This connection's key for `within = "session"` counters.
    pub(super) fn counting_session(&self) -> String {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

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

/// The name the client gives itself, without its version: what rules name it by, and what
/// its labels and kept results are kept under.
pub(super) fn introduced_name(context: &RequestContext<RoleServer>) -> String {
    context
        .client_info()
        .map(|info| {
            info.name
                .chars()
                .filter(|c| !c.is_control())
                .take(120)
                .collect()
        })
        .unwrap_or_default()
}

/// The name of the token the request behind `context` authenticated with (over HTTP).
pub(super) fn token(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::Authenticated>())
        .map(|crate::Authenticated(name)| name.clone())
}

/// Who the client says it is (`name version`), and the token it authenticated with over
/// HTTP, for approvals and the audit log.
pub(super) fn client_name(context: &RequestContext<RoleServer>) -> String {
    let named: String = match context.client_info() {
        Some(info) => format!("{} {}", info.name, info.version)
            .chars()
            .filter(|c| !c.is_control())
            .take(120)
            .collect(),
        None => "unnamed client".to_string(),
    };
    match token(context) {
        Some(name) => format!("{named} (token `{name}`)"),
        None => named,
    }
}
