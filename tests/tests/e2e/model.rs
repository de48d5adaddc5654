//! The scripted model the end-to-end tests talk to, on its own runtime.

use cordon_scripted_llm::{Script, ScriptedCall, ScriptedServer, Step};
use serde_json::Value;

/// A scripted model running on its own runtime for the whole test.
pub struct Model {
    pub server: ScriptedServer,
    _rt: tokio::runtime::Runtime,
}

impl Model {
    pub fn new(steps: Vec<Step>) -> Model {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let server = rt
            .block_on(ScriptedServer::start(Script::new(steps)))
            .expect("start the scripted model");
        Model { server, _rt: rt }
    }

    /// A model that asks for one tool call, then answers with `answer`.
    pub fn one_call(id: &str, tool: &str, arguments: Value, answer: &str) -> Model {
        Model::new(vec![
            Step::tool_calls(vec![call(id, tool, arguments)]),
            Step::text(answer),
        ])
    }

    pub fn url(&self) -> String {
        self.server.base_url()
    }

    /// The messages of request `n` (0-based).
    pub fn messages(&self, n: usize) -> Vec<Value> {
        let requests = self.server.requests();
        assert!(
            n < requests.len(),
            "the model received {} request(s), wanted request {n}",
            requests.len()
        );
        requests[n].messages()
    }

    /// What the model was told of the call `id` in request `n` (0-based).
    #[track_caller]
    pub fn result(&self, n: usize, id: &str) -> String {
        self.tool_messages(n)
            .iter()
            .find(|m| m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("request {n} holds no result for {id}"))["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The tool messages of request `n` (0-based), i.e. what the model was told.
    pub fn tool_messages(&self, n: usize) -> Vec<Value> {
        self.messages(n)
            .into_iter()
            .filter(|m| m["role"] == "tool")
            .collect()
    }
}

pub fn call(id: &str, name: &str, arguments: Value) -> ScriptedCall {
    ScriptedCall::with_id(id, name, arguments)
}
