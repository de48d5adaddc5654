//! cordon-agent: the conversation engine.
//!
//! It talks to any OpenAI-compatible chat endpoint, streams answers, and runs tool calls
//! through a [`ToolHost`] with per-tool approval, inside a context window. The logic is a
//! sans-IO state machine ([`machine`]) driven by a tokio [`Agent`]; the crate does not depend
//! on the sandbox runtime, so it builds and tests without wasmtime.
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
pub mod hermes;
pub mod llm;
pub mod machine;
pub mod tools;
pub mod types;

pub use approval::{ApprovalAnswer, ApprovalConfig, Decision, Policy};
pub use async_trait::async_trait;
pub use config::{
    AgentConfig, ConfigError, ContextConfig, LlmConfig, LoopConfig, PruneStrategy, RetryConfig,
    ToolFormat,
};
pub use conversation::{Conversation, ConversationError, TurnOutcome};
pub use driver::{Agent, AgentError, Frontend, TurnHandle, TurnInput};
pub use machine::{
    Action, AgentEvent, ApprovalRequest, Event, RequestedCall, State, ToolOutcome, ToolRun,
};
pub use tokio_util::sync::CancellationToken;
pub use tools::{Content, ToolFailure, ToolFailureKind, ToolHints, ToolHost, ToolSpec};
pub use types::{Message, ModelResponse, ToolCall, Usage};
