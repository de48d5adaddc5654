//! The tools a gateway client defines and runs itself: offered to the model beside Cordon's,
//! and a call of one waits for the result the client sends with its next request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_agent::{
    CancellationToken, Content as ToolContent, ToolFailure, ToolFailureKind, ToolHost, ToolSpec,
    async_trait,
};
use cordon_core::CallReport;
use serde_json::Value;
use tokio::sync::oneshot;

use super::GatewayState;
use super::request::{ClientTool, WireCall};
use crate::host::ToolsForTurn;

/// The calls of clients' own tools that turns wait on, by session: each waits for the result
/// the client sends with its next request.
#[derive(Default)]
pub(crate) struct ClientCalls {
    pub(super) sessions: Mutex<HashMap<String, Vec<Expected>>>,
}

/// One call of a client's tool that the client was asked to run.
pub(super) struct Expected {
    pub(super) call: WireCall,
    pub(super) arguments: Value,
    /// Whether the engine's call of the tool was matched to it.
    pub(super) claimed: bool,
    /// Whether the client sent its result.
    pub(super) answered: bool,
    pub(super) result: Option<String>,
    pub(super) waiter: Option<oneshot::Sender<String>>,
}

impl ClientCalls {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Expected>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client is asked to run `calls` of session `session`. The engine may already be
    /// waiting for some of them (it runs a call as soon as the model made it, while the
    /// response telling the client is still on its way): those are matched by tool and
    /// arguments.
    pub(super) fn expect(&self, session: &str, calls: &[WireCall]) {
        let mut sessions = self.lock();
        let expected = sessions.entry(session.to_string()).or_default();
        for call in calls {
            let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
            match expected.iter_mut().find(|e| {
                e.call.id.is_empty() && e.call.name == call.name && e.arguments == arguments
            }) {
                Some(waiting) => waiting.call.id = call.id.clone(),
                None => expected.push(Expected {
                    call: call.clone(),
                    arguments,
                    claimed: false,
                    answered: false,
                    result: None,
                    waiter: None,
                }),
            }
        }
    }

    /// The result of the engine's call of client tool `name` with `arguments`, once the client
    /// sends it: matched to the first call of that tool with those arguments not yet matched,
    /// or waiting for the client to be asked for it (see [`ClientCalls::expect`]).
    pub(super) fn result_of(
        &self,
        session: &str,
        name: &str,
        arguments: &Value,
    ) -> oneshot::Receiver<String> {
        let mut sessions = self.lock();
        let expected = sessions.entry(session.to_string()).or_default();
        let (tx, rx) = oneshot::channel();
        match expected
            .iter_mut()
            .find(|e| !e.claimed && e.call.name == name && e.arguments == *arguments)
        {
            Some(e) => {
                e.claimed = true;
                match e.result.take() {
                    Some(result) => {
                        let _ = tx.send(result);
                    }
                    None => e.waiter = Some(tx),
                }
            }
            None => expected.push(Expected {
                call: WireCall {
                    id: String::new(),
                    name: name.to_string(),
                    arguments: String::new(),
                },
                arguments: arguments.clone(),
                claimed: true,
                answered: false,
                result: None,
                waiter: Some(tx),
            }),
        }
        rx
    }

    /// The client's results; every id must be a call it was asked to run and has not answered.
    /// Whether a turn of `session` on this host waits for results of the client's tools.
    pub(super) fn waits(&self, session: &str) -> bool {
        self.lock().contains_key(session)
    }

    pub(super) fn supply(&self, session: &str, results: &[(String, String)]) -> Result<(), String> {
        let mut sessions = self.lock();
        let Some(expected) = sessions.get_mut(session) else {
            return Err(format!(
                "session `{session}` waits for no results of your tools (its turn ended, or \
                 the host restarted since it asked); send the next user message instead"
            ));
        };
        for (id, _) in results {
            if id.is_empty() || !expected.iter().any(|e| e.call.id == *id && !e.answered) {
                return Err(format!(
                    "session `{session}` does not wait for a result of the call `{id}`"
                ));
            }
        }
        for (id, result) in results {
            if let Some(e) = expected
                .iter_mut()
                .find(|e| e.call.id == *id && !e.answered)
            {
                e.answered = true;
                match e.waiter.take() {
                    Some(waiter) => {
                        let _ = waiter.send(result.clone());
                    }
                    None => e.result = Some(result.clone()),
                }
            }
        }
        Ok(())
    }

    /// The engine is done with its call of `name` with `arguments` (it has the result, gave up
    /// waiting, or was cancelled): its entry goes, so a turn the client never came back to
    /// leaves nothing behind.
    pub(super) fn done(&self, session: &str, name: &str, arguments: &Value) {
        let mut sessions = self.lock();
        if let Some(expected) = sessions.get_mut(session) {
            if let Some(i) = expected
                .iter()
                .position(|e| e.claimed && e.call.name == name && e.arguments == *arguments)
            {
                expected.remove(i);
            }
            if expected.is_empty() {
                sessions.remove(session);
            }
        }
    }

    /// Forgets a session's calls (its turn ended).
    pub(super) fn forget(&self, session: &str) {
        self.lock().remove(session);
    }
}

/// The tools plugin `client` stands for in approval rules and the audit log: the ones the
/// gateway's client defines and runs itself.
pub const CLIENT_PLUGIN: &str = cordon_agent::selection::CLIENT_PLUGIN;

/// A session's tools with the client's own added: a call of one of those waits for the
/// result the client sends (up to the approval timeout).
pub(super) struct WithClientTools {
    pub(super) inner: Arc<dyn ToolHost>,
    pub(super) client: Vec<ToolSpec>,
    pub(super) calls: Arc<ClientCalls>,
    pub(super) session: String,
    pub(super) timeout: Duration,
}

#[async_trait]
impl ToolHost for WithClientTools {
    fn tools(&self) -> Vec<ToolSpec> {
        let mut tools = self.inner.tools();
        tools.extend(self.client.iter().cloned());
        tools
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<Vec<ToolContent>, ToolFailure> {
        self.call_reported(name, arguments, cancel).await.0
    }

    async fn call_reported(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> (Result<Vec<ToolContent>, ToolFailure>, Option<CallReport>) {
        self.call_granted(name, arguments, &[], cancel).await
    }

    /// Cordon's own tools run in the inner host, with what grant requests gave them; the
    /// client's tools run in the client, where no grant reaches.
    async fn call_granted(
        &self,
        name: &str,
        arguments: Value,
        grants: &[String],
        cancel: CancellationToken,
    ) -> (Result<Vec<ToolContent>, ToolFailure>, Option<CallReport>) {
        if !self.client.iter().any(|s| s.name == name) {
            return self
                .inner
                .call_granted(name, arguments, grants, cancel)
                .await;
        }
        let result = self.calls.result_of(&self.session, name, &arguments);
        let outcome = tokio::select! {
            result = result => result.map(|r| vec![ToolContent::Text(r)]).map_err(|_| {
                ToolFailure::new(ToolFailureKind::Failed, "the client's result was lost")
            }),
            () = cancel.cancelled() => Err(ToolFailure::new(
                ToolFailureKind::Cancelled,
                "cancelled while waiting for the client's result",
            )),
            () = tokio::time::sleep(self.timeout) => Err(ToolFailure::new(
                ToolFailureKind::Failed,
                format!(
                    "the client did not send the result of `{name}` within {} s",
                    self.timeout.as_secs()
                ),
            )),
        };
        self.calls.done(&self.session, name, &arguments);
        (outcome, None)
    }

    fn requestable(&self, name: &str, wanted: &[String]) -> Vec<String> {
        if self.client.iter().any(|s| s.name == name) {
            return Vec::new();
        }
        self.inner.requestable(name, wanted)
    }

    async fn grant_for(
        &self,
        name: &str,
        grants: &[String],
        minutes: Option<u64>,
        by: &str,
    ) -> Result<Vec<String>, String> {
        if self.client.iter().any(|s| s.name == name) {
            return Err(format!(
                "`{name}` runs in the client, where no grant reaches"
            ));
        }
        self.inner.grant_for(name, grants, minutes, by).await
    }

    fn lock_grants(&self, name: &str) -> Option<Vec<String>> {
        self.inner.lock_grants(name)
    }

    fn take_expired(&self) -> Vec<(String, String)> {
        self.inner.take_expired()
    }
}

/// How a session's tools change for a request that defines its own.
pub(super) fn with_client_tools(
    state: &GatewayState,
    session: &str,
    tools: &[ClientTool],
) -> Option<ToolsForTurn> {
    if tools.is_empty() {
        return None;
    }
    let specs: Vec<ToolSpec> = tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.clone(),
            tool: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.parameters.clone(),
            output_schema: None,
            hints: Default::default(),
            plugin: CLIENT_PLUGIN.to_string(),
            grants: vec!["none: the client runs it".to_string()],
            can_change_anything: false,
            digest: String::new(),
            proven: Default::default(),
            reach: Default::default(),
            // What a client's own tool reads or sends is the client's to know, not Cordon's:
            // its results carry no label, and it is taken to be able to send data out, so
            // the Rule of Two holds it back like any other.
            exposure: cordon_core::Exposure {
                egress: vec!["a tool the client runs (what it sends is not known)".to_string()],
                ..Default::default()
            },
        })
        .collect();
    let calls = state.client_calls.clone();
    let session = session.to_string();
    let timeout = state.host.options.approval_timeout;
    Some(Arc::new(move |inner: Arc<dyn ToolHost>| {
        Arc::new(WithClientTools {
            inner,
            client: specs.clone(),
            calls: calls.clone(),
            session: session.clone(),
            timeout,
        }) as Arc<dyn ToolHost>
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Cordon's own tools, as the inner host sees them: what grants reached a call, and which
    /// grants a request was checked for.
    #[derive(Default)]
    struct Inner {
        granted: Mutex<Vec<Vec<String>>>,
    }

    #[async_trait]
    impl ToolHost for Inner {
        fn tools(&self) -> Vec<ToolSpec> {
            Vec::new()
        }

        async fn call(
            &self,
            _: &str,
            _: Value,
            _: CancellationToken,
        ) -> Result<Vec<ToolContent>, ToolFailure> {
            Ok(Vec::new())
        }

        async fn call_granted(
            &self,
            _: &str,
            _: Value,
            grants: &[String],
            _: CancellationToken,
        ) -> (Result<Vec<ToolContent>, ToolFailure>, Option<CallReport>) {
            self.granted.lock().unwrap().push(grants.to_vec());
            (Ok(Vec::new()), None)
        }

        fn requestable(&self, _: &str, wanted: &[String]) -> Vec<String> {
            wanted.to_vec()
        }
    }

    /// Before, a request that defined tools of its own refused every grant a grant request
    /// gave Cordon's tools (the trait's default) and offered none.
    #[tokio::test]
    async fn cordon_tools_keep_their_grants_beside_the_clients_tools() {
        let inner = Arc::new(Inner::default());
        let client = vec![ToolSpec {
            name: "client_fn".into(),
            tool: "client_fn".into(),
            description: "The client's own.".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            hints: Default::default(),
            plugin: "client".into(),
            grants: Vec::new(),
            can_change_anything: false,
            digest: String::new(),
            proven: Default::default(),
            reach: Default::default(),
            exposure: Default::default(),
        }];
        let host = WithClientTools {
            inner: inner.clone(),
            client,
            calls: Arc::new(ClientCalls::default()),
            session: "s".into(),
            timeout: Duration::from_secs(1),
        };
        let given = vec!["net:https://a.example".to_string()];
        let (result, _) = host
            .call_granted("files.read", json!({}), &given, CancellationToken::new())
            .await;
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            inner.granted.lock().unwrap().as_slice(),
            std::slice::from_ref(&given)
        );
        assert_eq!(host.requestable("files.read", &given), given);
        // The client's own tool runs where no grant reaches.
        assert!(host.requestable("client_fn", &given).is_empty());
        assert!(
            host.grant_for("client_fn", &given, None, "ann")
                .await
                .is_err()
        );
    }

    #[test]
    fn client_results_reach_the_call_they_answer_whichever_comes_first() {
        let calls = ClientCalls::default();
        let call = |id: &str, args: &str| WireCall {
            id: id.into(),
            name: "f".into(),
            arguments: args.into(),
        };
        calls.expect("s", &[call("1", r#"{"a":1}"#), call("2", r#"{"a":2}"#)]);
        // The result of call 2 comes before the engine runs it.
        calls.supply("s", &[("2".into(), "two".into())]).unwrap();
        let mut two = calls.result_of("s", "f", &json!({"a": 2}));
        assert_eq!(two.try_recv().unwrap(), "two");
        let mut one = calls.result_of("s", "f", &json!({"a": 1}));
        assert!(one.try_recv().is_err());
        calls.supply("s", &[("1".into(), "one".into())]).unwrap();
        assert_eq!(one.try_recv().unwrap(), "one");
        // Each call is answered once, and only calls that were asked for.
        assert!(calls.supply("s", &[("1".into(), "again".into())]).is_err());
        assert!(calls.supply("s", &[("9".into(), "x".into())]).is_err());
        // The engine may run a call before the client is asked for it.
        let mut three = calls.result_of("s", "f", &json!({"a": 3}));
        assert!(calls.supply("s", &[("3".into(), "x".into())]).is_err());
        calls.expect("s", &[call("3", r#"{"a": 3}"#)]);
        calls.supply("s", &[("3".into(), "three".into())]).unwrap();
        assert_eq!(three.try_recv().unwrap(), "three");
        calls.forget("s");
        assert!(calls.supply("s", &[("1".into(), "x".into())]).is_err());
        // The engine's finished calls leave nothing behind.
        calls.expect("t", &[call("1", "{}")]);
        let _one = calls.result_of("t", "f", &json!({}));
        calls.done("t", "f", &json!({}));
        assert!(calls.lock().is_empty());
    }
}
