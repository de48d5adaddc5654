//! `cordon.toml`: the model endpoint, the loop limits, the context window and approval rules.
//!
//! Every field has a default so an empty file works; unknown keys are errors so a typo never
//! silently falls back to a default. The API key is never stored: the config names the
//! environment variable that holds it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::approval::ApprovalConfig;

/// Errors in the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error reading it.
        source: std::io::Error,
    },
    /// The file is not valid TOML for the config.
    #[error("the config file {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The TOML error, naming the key and line.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid setting `{field}`: {message}")]
    Invalid {
        /// The key, e.g. `llm.url`.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The model endpoint.
    #[serde(default)]
    pub llm: LlmConfig,
    /// Loop limits.
    #[serde(default)]
    pub agent: LoopConfig,
    /// Context window management.
    #[serde(default)]
    pub context: ContextConfig,
    /// Approval rules.
    #[serde(default)]
    pub approval: ApprovalConfig,
    /// Where sessions and the audit log are kept.
    #[serde(default)]
    pub store: StoreConfig,
    /// What the audit log keeps.
    #[serde(default)]
    pub audit: AuditConfig,
    /// `cordon serve`.
    #[serde(default)]
    pub serve: ServeConfig,
    /// `cordon serve`'s OpenAI-compatible gateway (`/v1/chat/completions`).
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// Per-call policy rules (see `cordon-policy`).
    #[serde(default)]
    pub policy: cordon_policy::PolicyConfig,
    /// Traces over OTLP (off unless an endpoint is set).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetryConfig,
}

/// What one conversation uses instead of the configuration's defaults: what a session records,
/// and what a replay changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSettings {
    /// The model, when not the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The system prompt, replacing the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Only these tools are offered (by the name the model sees, `plugin.tool`, or a plugin's
    /// name); every installed tool when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
}

impl SessionSettings {
    /// The configuration with these settings applied.
    pub fn apply(&self, config: &mut AgentConfig) {
        if let Some(model) = &self.model {
            config.llm.model = model.clone();
        }
        if let Some(prompt) = &self.system_prompt {
            config.agent.system_prompt = Some(prompt.clone());
        }
    }

    /// The tools a conversation with these settings is offered.
    pub fn tools(
        &self,
        installed: std::sync::Arc<dyn crate::ToolHost>,
    ) -> std::sync::Arc<dyn crate::ToolHost> {
        match &self.tools {
            Some(names) => std::sync::Arc::new(crate::tool_host::SelectedTools::new(
                installed,
                names.iter().cloned(),
            )),
            None => installed,
        }
    }
}

/// The longest any `*_secs` setting (and the flags standing for them) may be: a year. More than
/// any wait needs, and small enough that every deadline counted from it fits (milliseconds in
/// an `i64`, an instant of the system's clock), so no setting can make that arithmetic overflow.
pub const MAX_WAIT_SECS: u64 = 365 * 86_400;

/// Where sessions and the audit log are kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite:PATH` or `postgres://USER@HOST/DB`; unset: `sessions.db` in the Cordon home.
    pub url: Option<String>,
    /// Seconds a host's lease on a session lasts without renewal: how long another host
    /// sharing the store waits before taking over a session whose host died.
    pub lease_secs: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            lease_secs: 30,
        }
    }
}

/// What the audit log keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Keep each call's arguments, not only their sha256. Off by default: arguments can hold
    /// what should not sit in a log (queries with personal data, file contents).
    pub keep_arguments: bool,
}

/// `cordon serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// The address to listen on.
    pub listen: String,
    /// Seconds a tool call waits for an approval before it is denied.
    pub approval_timeout_secs: u64,
    /// Seconds running tool calls get to finish when the host is asked to stop.
    pub shutdown_grace_secs: u64,
    /// The largest request body `/mcp` takes, in bytes. Each body is held and parsed whole
    /// before anything is refused, so this bounds the memory a token holder can tie up.
    pub mcp_max_message_bytes: usize,
    /// How much is taken on at once, and how long a client is waited for.
    pub limits: crate::serve_limits::ServeLimits,
    /// The identity provider whose access tokens are taken besides the token file's.
    pub oidc: Option<crate::serve_sign_in::OidcConfig>,
    /// The URL clients reach the host at (`https://cordon.example.com`), for what it tells
    /// them about itself (the `/mcp` resource metadata); unset: `http://` and the `Host`
    /// the request came with. A host listening on a loopback address answers requests with
    /// this URL's `Host` too (a load balancer or TLS terminator on the same machine passes
    /// them on so).
    pub public_url: Option<String>,
    /// The URL the other hosts on a shared store reach this one at
    /// (`http://10.0.0.5:8420`), to pass it a request only it can answer (the results of a
    /// gateway client's own tools, which its turn waits for); unset: `http://` and the
    /// listening address, unless that is every address (`0.0.0.0`).
    pub internal_url: Option<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8420".to_string(),
            approval_timeout_secs: 300,
            shutdown_grace_secs: 30,
            mcp_max_message_bytes: 1 << 20,
            limits: crate::serve_limits::ServeLimits::default(),
            oidc: None,
            public_url: None,
            internal_url: None,
        }
    }
}

/// `cordon serve`'s OpenAI-compatible gateway.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// The models clients may name, each with the upstream model it stands for
    /// (`"gpt-4o" = "qwen2.5-7b-instruct"`). Empty: the configured model (`llm.model`), under
    /// its own name.
    pub models: std::collections::BTreeMap<String, String>,
    /// Bounds on the sampling and output parameters clients send.
    pub parameters: GatewayParameters,
}

/// Bounds on what gateway clients set for their turns' model requests. By default every
/// parameter a client sends goes to the model server as sent; refusing is the operator's
/// choice, made here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayParameters {
    /// The largest answer-length limit a client may set (`max_tokens` or
    /// `max_completion_tokens`): a larger one is lowered to it.
    pub max_tokens: Option<u32>,
    /// The range a client's `temperature` is kept in (`[low, high]`): a value outside is
    /// moved to the nearer end.
    pub temperature: Option<[f64; 2]>,
    /// Parameters taken from clients but not sent to the model server.
    pub drop: Vec<String>,
    /// Parameters refused with a 400 that names them.
    pub refuse: Vec<String>,
    /// A model server's own parameters (`top_k`, `min_p`, …) sent as clients give them; any
    /// parameter that is neither standard nor listed here is refused.
    pub allow: Vec<String>,
    /// Whether image and file parts may name http(s) URLs, which the model server fetches
    /// from its own network; otherwise they must carry their data (`data:` URLs).
    pub remote_media: bool,
}

impl GatewayConfig {
    /// The model names clients may use, each with the upstream model it stands for.
    pub fn offered(&self, configured: &str) -> Vec<(String, String)> {
        if self.models.is_empty() {
            vec![(configured.to_string(), configured.to_string())]
        } else {
            self.models
                .iter()
                .map(|(name, upstream)| (name.clone(), upstream.clone()))
                .collect()
        }
    }
}

/// The name of the answer-length limit in requests to the model server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// The field's name.
    pub fn as_str(self) -> &'static str {
        match self {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

impl GatewayParameters {
    /// A client's answer-length limit, lowered to the ceiling if there is one.
    pub fn max_tokens_within(&self, asked: u64) -> u64 {
        self.max_tokens
            .map_or(asked, |ceiling| asked.min(u64::from(ceiling)))
    }

    /// A client's temperature, moved into the range if there is one.
    pub fn temperature_within(&self, asked: f64) -> f64 {
        self.temperature
            .map_or(asked, |[low, high]| asked.clamp(low, high))
    }
}

/// How tool calls travel between host and model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolFormat {
    /// OpenAI `tools` / `tool_calls` / `role: "tool"` messages.
    #[default]
    Native,
    /// For models without native tool calling: tools described in the system prompt, calls as
    /// `<tool_call>{…}</tool_call>` in the text, results in a user message.
    Hermes,
}

/// The model endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// Base URL of an OpenAI-compatible API, ending in `/v1`.
    pub url: String,
    /// The model name.
    pub model: String,
    /// Name of the environment variable holding the API key (none: no `Authorization`).
    pub api_key_env: Option<String>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Maximum tokens in an answer.
    pub max_tokens: Option<u32>,
    /// How the model server spells the answer-length limit: `max_tokens` (llama.cpp, Ollama,
    /// vLLM) or `max_completion_tokens` (OpenAI's newer models). A client's limit, in either
    /// spelling, is sent in this one.
    pub max_tokens_field: MaxTokensField,
    /// Seconds to wait for a connection.
    pub connect_timeout_secs: u64,
    /// Seconds to wait for the response to start, and between streamed chunks.
    pub read_timeout_secs: u64,
    /// Stream answers (Server-Sent Events) or wait for the whole answer.
    pub stream: bool,
    /// Ask the server to report usage at the end of a stream (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Wire format for tool calls.
    pub tool_format: ToolFormat,
    /// Retries of transient failures.
    pub retry: RetryConfig,
    /// llama.cpp's server only: how many slots it runs (its `--parallel`). When set, each
    /// request asks for `cache_prompt` and for one slot (`id_slot`) chosen from the
    /// conversation's first messages, so a session keeps its prefix cached in its slot while
    /// others run. 0 (the default) sends neither.
    pub llama_cpp_slots: u32,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            url: "http://localhost:11434/v1".to_string(),
            model: "qwen2.5".to_string(),
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            max_tokens_field: MaxTokensField::default(),
            connect_timeout_secs: 10,
            read_timeout_secs: 300,
            stream: true,
            stream_usage: true,
            tool_format: ToolFormat::Native,
            retry: RetryConfig::default(),
            llama_cpp_slots: 0,
        }
    }
}

/// Exponential backoff with jitter for transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// Delay before the first retry, in milliseconds; doubles each retry.
    pub initial_backoff_ms: u64,
    /// Upper bound of one delay, in milliseconds (a server's `Retry-After` may exceed it up to
    /// `max_retry_after_ms`).
    pub max_backoff_ms: u64,
    /// The longest `Retry-After` honoured; longer ones fail the turn instead of hanging.
    pub max_retry_after_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 4,
            initial_backoff_ms: 500,
            max_backoff_ms: 20_000,
            max_retry_after_ms: 120_000,
        }
    }
}

/// Limits of the agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// Model requests with tools per turn; then one last request without tools asks for the
    /// final answer.
    pub max_iterations: u32,
    /// How many times the same tool with the same arguments may be requested in one turn
    /// before the loop stops for lack of progress.
    pub max_repeats: u32,
    /// Tool calls of one response run at most this many at a time.
    pub max_parallel_tools: usize,
    /// When more tools are offered than this, a request offers only this many: those the
    /// turn names or the conversation called, then those matching the question (see
    /// [`crate::selection`]). 0 offers every tool.
    pub max_offered_tools: usize,
    /// A small model, at `[llm] url`, that picks the tools a turn needs before the model
    /// answers, when more tools are offered than `max_offered_tools`: its picks are offered
    /// first (see [`crate::selection`]). Asked once a turn; `None`: selection alone.
    pub router_model: Option<String>,
    /// Replaces the built-in base system prompt.
    pub system_prompt: Option<String>,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_iterations: 8,
            max_repeats: 2,
            max_parallel_tools: 4,
            max_offered_tools: 12,
            router_model: None,
            system_prompt: None,
        }
    }
}

/// How to shrink the history when it does not fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PruneStrategy {
    /// Drop the oldest messages first.
    #[default]
    OldestFirst,
    /// Keep the first user message (the task) and the newest turns; drop from the middle.
    MiddleOut,
    /// Keep only the last `keep_last_turns` turns (then oldest-first if still too big).
    KeepLastTurns,
}

/// Context window management.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    /// The model's context size in tokens.
    pub window_tokens: usize,
    /// Tokens kept free for the answer.
    pub reserve_tokens: usize,
    /// The pruning strategy.
    pub strategy: PruneStrategy,
    /// Newest turns that are never pruned (at least 1: the current turn), and the number kept
    /// by `keep-last-turns`.
    pub keep_last_turns: usize,
    /// Summarise what is pruned with one model call and send the summary instead.
    pub summarize: bool,
    /// `auto` (the model's tokenizer when known, an estimate otherwise), `estimate`,
    /// `cl100k_base` or `o200k_base`.
    pub tokenizer: String,
    /// A tool result longer than this (in tokens, estimated at four bytes each) is sent as
    /// a preview the model pages with `read_result` (see [`crate::spill`]); 0: always whole.
    pub result_budget_tokens: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            window_tokens: 32_768,
            reserve_tokens: 2_048,
            strategy: PruneStrategy::OldestFirst,
            keep_last_turns: 2,
            summarize: false,
            tokenizer: "auto".to_string(),
            result_budget_tokens: 8_000,
        }
    }
}

impl AgentConfig {
    /// Parses TOML text; `origin` names the source in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let mut config: AgentConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        // Rules are named by file and line, and Cedar files are found beside the config.
        config.policy.source = Some(cordon_policy::ConfigSource {
            path: origin.into(),
            text: text.into(),
        });
        config.validate()?;
        Ok(config)
    }

    /// Reads `path`; a missing file gives the defaults only when `required` is false.
    pub fn load(path: &Path, required: bool) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::from_toml(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(Self::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            field: field.to_string(),
            message,
        };
        let url = url::Url::parse(&self.llm.url).map_err(|e| {
            invalid(
                "llm.url",
                format!(
                    "`{}` is not a URL ({e}); use e.g. http://localhost:11434/v1",
                    self.llm.url
                ),
            )
        })?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(invalid(
                "llm.url",
                format!("`{}` must start with http:// or https://", self.llm.url),
            ));
        }
        if self.llm.model.trim().is_empty() {
            return Err(invalid(
                "llm.model",
                "is empty; name the model, e.g. `qwen2.5`".into(),
            ));
        }
        if let Some(t) = self.llm.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(invalid(
                "llm.temperature",
                format!("{t} is outside 0.0–2.0"),
            ));
        }
        if self.llm.connect_timeout_secs == 0 || self.llm.read_timeout_secs == 0 {
            return Err(invalid(
                "llm.*_timeout_secs",
                "timeouts must be at least 1 second".into(),
            ));
        }
        if self.agent.max_iterations == 0 {
            return Err(invalid("agent.max_iterations", "must be at least 1".into()));
        }
        if self.agent.max_repeats == 0 {
            return Err(invalid("agent.max_repeats", "must be at least 1".into()));
        }
        if self.agent.max_parallel_tools == 0 {
            return Err(invalid(
                "agent.max_parallel_tools",
                "must be at least 1".into(),
            ));
        }
        if self.context.reserve_tokens >= self.context.window_tokens {
            return Err(invalid(
                "context.reserve_tokens",
                format!(
                    "{} leaves no room for the prompt in a window of {} tokens",
                    self.context.reserve_tokens, self.context.window_tokens
                ),
            ));
        }
        if self.context.keep_last_turns == 0 {
            return Err(invalid(
                "context.keep_last_turns",
                "must be at least 1 (the current turn)".into(),
            ));
        }
        if self.store.lease_secs < 2 {
            return Err(invalid(
                "store.lease_secs",
                "must be at least 2 seconds (the lease is renewed every third of it)".into(),
            ));
        }
        if let Some(url) = &self.store.url
            && !(url.starts_with("sqlite:")
                || url.starts_with("postgres://")
                || url.starts_with("postgresql://"))
        {
            return Err(invalid(
                "store.url",
                "must be `sqlite:PATH` or `postgres://USER@HOST/DB`".into(),
            ));
        }
        if self.serve.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "serve.listen",
                format!(
                    "`{}` is not an address and port, e.g. 127.0.0.1:8420",
                    self.serve.listen
                ),
            ));
        }
        if let Some((name, _)) = self
            .gateway
            .models
            .iter()
            .find(|(name, upstream)| name.trim().is_empty() || upstream.trim().is_empty())
        {
            return Err(invalid(
                "gateway.models",
                format!(
                    "`{name}`: a model name and the upstream model it stands for must not be empty"
                ),
            ));
        }
        let bounds = &self.gateway.parameters;
        if let Some([low, high]) = bounds.temperature
            && !(0.0 <= low && low <= high && high <= 2.0)
        {
            return Err(invalid(
                "gateway.parameters.temperature",
                format!("[{low}, {high}] is not a range within 0.0–2.0, e.g. [0.0, 1.0]"),
            ));
        }
        if bounds.max_tokens == Some(0) {
            return Err(invalid(
                "gateway.parameters.max_tokens",
                "must be at least 1".into(),
            ));
        }
        let essential = ["model", "messages", "input"];
        if let Some(name) = bounds
            .drop
            .iter()
            .chain(&bounds.refuse)
            .find(|n| essential.contains(&n.as_str()))
        {
            return Err(invalid(
                "gateway.parameters",
                format!("`{name}` is part of every request; it cannot be dropped or refused"),
            ));
        }
        if let Some(name) = bounds
            .allow
            .iter()
            .find(|n| crate::parameters::RESERVED.contains(&n.as_str()))
        {
            return Err(invalid(
                "gateway.parameters.allow",
                format!("`{name}` is Cordon's to set in every model request; it cannot be allowed"),
            ));
        }
        if self.serve.approval_timeout_secs == 0 {
            return Err(invalid(
                "serve.approval_timeout_secs",
                "must be at least 1 second".into(),
            ));
        }
        if self.serve.mcp_max_message_bytes < 1024 {
            return Err(invalid(
                "serve.mcp_max_message_bytes",
                format!(
                    "{} bytes cannot hold an MCP message; use at least 1024 (the default is 1048576, 1 MiB)",
                    self.serve.mcp_max_message_bytes
                ),
            ));
        }
        self.serve
            .limits
            .validate()
            .map_err(|e| invalid(&e.field, e.message))?;
        self.telemetry
            .validate()
            .map_err(|e| invalid(&e.field, e.message))?;
        for (field, secs) in [
            ("llm.connect_timeout_secs", self.llm.connect_timeout_secs),
            ("llm.read_timeout_secs", self.llm.read_timeout_secs),
            ("store.lease_secs", self.store.lease_secs),
            (
                "serve.approval_timeout_secs",
                self.serve.approval_timeout_secs,
            ),
            ("serve.shutdown_grace_secs", self.serve.shutdown_grace_secs),
        ] {
            if secs > MAX_WAIT_SECS {
                return Err(invalid(
                    field,
                    format!("{secs} is more than a year ({MAX_WAIT_SECS} seconds)"),
                ));
            }
        }
        match self.context.tokenizer.as_str() {
            "auto" | "estimate" | "cl100k_base" | "o200k_base" => {}
            other => {
                return Err(invalid(
                    "context.tokenizer",
                    format!("`{other}` is not one of auto, estimate, cl100k_base, o200k_base"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(
            AgentConfig::from_toml("", "t").unwrap(),
            AgentConfig::default()
        );
    }

    #[test]
    fn parses_all_sections() {
        let c = AgentConfig::from_toml(
            r#"
            [llm]
            url = "http://h:1/v1"
            model = "m"
            api_key_env = "KEY"
            tool_format = "hermes"
            [llm.retry]
            max_retries = 1
            [agent]
            max_iterations = 3
            [context]
            strategy = "middle-out"
            [approval.tools]
            sql_query = "auto"
            "#,
            "t",
        )
        .unwrap();
        assert_eq!(c.llm.tool_format, ToolFormat::Hermes);
        assert_eq!(c.llm.retry.max_retries, 1);
        assert_eq!(c.llm.retry.initial_backoff_ms, 500);
        assert_eq!(c.agent.max_iterations, 3);
        assert_eq!(c.context.strategy, PruneStrategy::MiddleOut);
        assert_eq!(c.approval.tools["sql_query"], crate::approval::Policy::Auto);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = AgentConfig::from_toml("[llm]\nmodle = \"x\"", "cordon.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cordon.toml") && e.contains("modle"), "{e}");
        let e = AgentConfig::from_toml("[llm]\nurl = \"nope\"", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("llm.url"), "{e}");
        let e = AgentConfig::from_toml("[approval.tools]\nx = \"sometimes\"", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sometimes"), "{e}");
        let e = AgentConfig::from_toml("[context]\nwindow_tokens = 100\nreserve_tokens = 200", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("reserve_tokens"), "{e}");
        let e = AgentConfig::from_toml("[serve]\nmcp_max_message_bytes = 10", "c")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("serve.mcp_max_message_bytes") && e.contains("1024"),
            "{e}"
        );
        let e = AgentConfig::load(Path::new("/nonexistent/cordon.toml"), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/cordon.toml"), "{e}");
        assert!(AgentConfig::load(Path::new("/nonexistent/cordon.toml"), false).is_ok());
    }

    /// Deadlines are counted from these: a value that would overflow that arithmetic is
    /// refused when the file is read, naming the setting.
    #[test]
    fn waits_longer_than_a_year_are_refused() {
        for (section, key) in [
            ("llm", "connect_timeout_secs"),
            ("llm", "read_timeout_secs"),
            ("store", "lease_secs"),
            ("serve", "approval_timeout_secs"),
            ("serve", "shutdown_grace_secs"),
        ] {
            for huge in [MAX_WAIT_SECS + 1, i64::MAX as u64] {
                let text = format!("[{section}]\n{key} = {huge}");
                let e = AgentConfig::from_toml(&text, "c").unwrap_err().to_string();
                assert!(
                    e.contains(&format!("{section}.{key}")) && e.contains("more than a year"),
                    "{text}: {e}"
                );
            }
            let text = format!("[{section}]\n{key} = {MAX_WAIT_SECS}");
            AgentConfig::from_toml(&text, "c").unwrap();
        }
        // Negative numbers are not seconds at all.
        assert!(AgentConfig::from_toml("[store]\nlease_secs = -1", "c").is_err());
    }

    /// The README's `cordon.toml` reference is the one users copy from: as written it must be
    /// the defaults, every commented example must be a real key, and every key must be there.
    #[test]
    fn readme_reference_is_the_defaults_and_names_every_key() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("## `cordon.toml`").expect("section")..];
        let start = section.find("```toml\n").expect("toml block") + "```toml\n".len();
        let block = &section[start..start + section[start..].find("```").expect("block end")];
        assert_eq!(
            AgentConfig::from_toml(block, "README").unwrap(),
            AgentConfig::default()
        );
        let examples: String = block
            .lines()
            .map(|l| {
                // A commented key, or a commented table whose keys are all examples.
                let example = l
                    .strip_prefix("# ")
                    .filter(|r| r.contains(" = ") || r.starts_with('['));
                format!("{}\n", example.unwrap_or(l))
            })
            .collect();
        let all = AgentConfig::from_toml(&examples, "README examples").unwrap();
        assert!(all.llm.api_key_env.is_some() && all.llm.temperature.is_some());
        assert!(all.llm.max_tokens.is_some() && all.agent.system_prompt.is_some());
        assert!(!all.approval.tools.is_empty() && !all.approval.plugins.is_empty());
        assert!(all.store.url.is_some() && !all.gateway.models.is_empty());
        fn keys(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, v) in t {
                    out.push(format!("{prefix}{k}"));
                    keys(&format!("{prefix}{k}."), v, out);
                }
            }
        }
        let mut every = Vec::new();
        keys("", &toml::Value::try_from(&all).unwrap(), &mut every);
        for key in every {
            let leaf = key.rsplit('.').next().unwrap();
            let is_rule = key.starts_with("approval.tools.")
                || key.starts_with("approval.plugins.")
                || key.starts_with("gateway.models.")
                || key.starts_with("telemetry.headers.");
            assert!(
                is_rule
                    || block.contains(&format!("{leaf} = "))
                    || block.contains(&format!("[{key}")),
                "README's cordon.toml reference lacks `{key}`"
            );
        }
    }
}
