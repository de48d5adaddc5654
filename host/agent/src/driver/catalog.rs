//! What a turn offers the model: the tools as they run for this conversation (its session's
//! grants applied, the built-in pager added, the policy as `cordon.toml` says now) and the
//! system prompt that goes with them.

use cordon_core::Requester;

use super::{Agent, BASE_PROMPT};
use crate::approval::Standing;
use crate::config::ToolFormat;
use crate::conversation::Conversation;
use crate::grant_requests::{Applying, SessionGrants};
use crate::machine::ToolCatalog;
use crate::text_tool_calls;
use crate::tools::ToolSpec;

impl Agent {
    /// The tools the model would be offered now in `conv` (installed, enabled, not denied).
    pub fn offered_tools(&self, conv: &Conversation) -> Vec<ToolSpec> {
        self.with_standing(conv, |catalog, standing| {
            catalog.offered(standing).into_iter().cloned().collect()
        })
    }

    /// The approval policy that applies to each installed tool in `conv`, for `/tools`.
    pub fn tool_policies(&self, conv: &Conversation) -> Vec<(ToolSpec, crate::approval::Decision)> {
        self.with_standing(conv, |catalog, standing| {
            self.tools
                .tools()
                .into_iter()
                .map(|s| {
                    let d = catalog.decision(&s, standing);
                    (s, d)
                })
                .collect()
        })
    }

    /// `decide` given `conv`'s catalog now and where the conversation stands (its answers,
    /// moved to the catalog's identities, its requester and labels), leaving `conv` as it is.
    fn with_standing<T>(
        &self,
        conv: &Conversation,
        decide: impl FnOnce(&ToolCatalog, Standing<'_>) -> T,
    ) -> T {
        let catalog = self.catalog(&conv.grants, conv.requester());
        let mut session = conv.session_approvals.clone();
        catalog.upgrade_session(&mut session);
        let standing = Standing {
            answers: &session,
            requester: conv.requester(),
            labels: &conv.labels,
        };
        decide(&catalog, standing)
    }

    /// The catalog of a turn of a conversation that was given `grants` for itself: each tool
    /// as it runs with them (see [`ToolSpec::widened`]).
    pub(super) fn catalog(
        &self,
        grants: &SessionGrants,
        requester: Option<&Requester>,
    ) -> ToolCatalog {
        let now_ms = cordon_core::now_ms();
        let mut specs: Vec<ToolSpec> = self
            .tools
            .tools()
            .into_iter()
            .map(|s| {
                let extra = grants.of(Applying {
                    plugin: &s.plugin,
                    digest: &s.digest,
                    requester,
                    now_ms,
                });
                if extra.is_empty() {
                    s
                } else {
                    s.widened(&extra)
                }
            })
            .collect();
        // The built-in pager (offered only once a result was too long to send whole), under
        // a name no other tool has; before the policy loads, so rules can name it.
        let free = |name: &str| !specs.iter().any(|s| s.name == name);
        let name = std::iter::once(crate::spill::TOOL.to_string())
            .chain((0..).map(|n| {
                format!(
                    "cordon__read_result{}",
                    if n == 0 {
                        String::new()
                    } else {
                        format!("_{n}")
                    }
                )
            }))
            .find(|n| free(n))
            .unwrap_or_default();
        specs.push(crate::spill::tool_spec(&name));
        // The `[policy]` as cordon.toml says now, so an edit takes effect without a restart.
        let config = crate::policy::reread(&self.config.policy);
        let policy = crate::policy::load_or_last(&config, &specs);
        ToolCatalog::with_policy(specs, self.config.approval.clone(), policy)
    }

    /// The system prompt: the base prompt plus what is actually available.
    pub fn system_prompt(&self, tools: &[&ToolSpec], final_pass: bool) -> String {
        let mut p = self
            .config
            .agent
            .system_prompt
            .clone()
            .unwrap_or_else(|| BASE_PROMPT.to_string());
        if final_pass {
            p.push_str("\n\nTools are no longer available for this request.");
        } else if tools.is_empty() {
            p.push_str(
                "\n\nNo tools are available in this conversation: answer from what you know, and say so when you cannot.",
            );
        } else {
            // The tools themselves are described once: in the request's `tools`, or for text
            // tool calls in the list below.
            p.push_str(
                "\n\nTools run in a sandbox reaching only what the user granted: if a call is \
refused or declined, tell the user; do not work around it.",
            );
            if self.config.llm.tool_format == ToolFormat::Hermes {
                p.push_str("\n\n");
                p.push_str(&text_tool_calls::tools_section(
                    &tools.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
                ));
            }
        }
        p
    }
}
