//! cordon-agent: the conversation engine.
//!
//! It talks to any OpenAI-compatible chat endpoint, streams answers, and runs tool calls
//! through a [`ToolHost`] with per-tool approval, inside a context window. The logic is a
//! sans-IO state machine ([`machine`]) driven by a tokio [`Agent`]; the crate does not depend
//! on the sandbox runtime, so it builds and tests without wasmtime.
//!
//! Vocabulary, used with one meaning throughout:
//!
//! - **tool**: one function exported by a plugin (a sandboxed WebAssembly component); its
//!   identity is `plugin.tool`, which approval rules and `always`/`never` answers bind to.
//! - **tool spec** ([`ToolSpec`]): what the engine knows of a tool: the name the model calls
//!   it by, its description, input schema and grants, and whether it can change anything.
//! - **tool host** ([`ToolHost`]): the interface the engine lists and calls tools through. The
//!   CLI implements it over the home's *toolbox* (`cordon_home::Toolbox`, the installed tools
//!   verified against the lock file); tests implement it in memory.
//! - **tool catalog** ([`machine::ToolCatalog`]): the tool specs of one turn with their
//!   compiled input schemas and the user's approval rules; it decides which tools the model is
//!   offered and whether a call may run, and with whose approval.
//! - **tool call** ([`ToolCall`]): one call as the model wrote it. Cordon gives each its own id
//!   (`c1`, `c2`, …) and addresses it by that, never by the model's id.
//! - **text tool calls** ([`text_tool_calls`]): calls a model writes into its answer text (the
//!   Hermes format) instead of sending them as native tool calls.
//! - **turn limits** ([`machine::TurnLimits`]): how many model answers, repeated calls and
//!   retries one turn may take; unrelated to a sandbox's resource limits (`cordon_core::Limits`).
//!
//! Embedding:
//!
//! ```no_run
//! # async fn demo(tools: std::sync::Arc<dyn cordon_agent::ToolHost>) -> Result<(), cordon_agent::AgentError> {
//! use cordon_agent::{Agent, AgentConfig, AgentEvent, ApprovalAnswer, Conversation, TurnInput};
//! let agent = std::sync::Arc::new(Agent::new(AgentConfig::default(), tools)?);
//! let mut turn = agent.start_turn(Conversation::new(), TurnInput::Message("How many rows?".into()));
//! while let Some(event) = turn.next_event().await {
//!     if let AgentEvent::ApprovalNeeded { request } = &event {
//!         turn.answer(&request.call_id, ApprovalAnswer::Yes);
//!     }
//! }
//! let (conversation, outcome) = turn.finish().await?;
//! let saved = conversation.to_json();
//! let fork = Conversation::from_json(&saved)?.fork(0)?;
//! # let _ = (outcome, fork); Ok(()) }
//! ```

pub mod approval;
pub mod config;
pub mod context;
pub mod conversation;
pub mod driver;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod grant_requests;
pub mod journal;
pub mod llm;
pub mod machine;
pub mod messages;
pub mod offer;
pub mod pages;
pub mod parameters;
pub mod policy;
pub mod selection;
pub mod serve_limits;
pub mod serve_sign_in;
pub mod spill;
pub mod stream_lines;
pub mod telemetry;
pub mod text_tool_calls;
pub mod tool_host;
pub mod tools;

pub use approval::{
    ApprovalAnswer, ApprovalConfig, Decision, GivenAnswer, Policy, Standing, StandingAnswer,
};
pub use async_trait::async_trait;
pub use config::{
    AgentConfig, AuditConfig, ConfigError, ContextConfig, GatewayConfig, GatewayParameters,
    LlmConfig, LoopConfig, MAX_WAIT_SECS, MaxTokensField, PruneStrategy, RetryConfig, ServeConfig,
    SessionSettings, StoreConfig, ToolFormat,
};
pub use conversation::{CallApproval, Conversation, ConversationError, TurnOutcome};
pub use cordon_policy;
pub use driver::{
    Agent, AgentError, AuditContext, Driven, Frontend, TurnHandle, TurnInput, TurnIo, TurnRequest,
};
pub use journal::{Cause, Journal, JournalError, NoJournal};
pub use machine::{
    Action, AgentEvent, ApprovalRequest, Event, RequestedCall, State, ToolOutcome, ToolRun,
};
pub use messages::{KeptResult, Message, ModelResponse, ToolCall, Usage};
pub use parameters::{ToolChoice, TurnParameters};
pub use serve_limits::ServeLimits;
pub use tokio_util::sync::CancellationToken;
pub use tool_host::{SelectedTools, ToolHost, ToolSource};
pub use tools::{Content, ToolFailure, ToolFailureKind, ToolHints, ToolSpec, reach_of};
