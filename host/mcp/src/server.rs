//! The MCP server: `tools/list` and `tools/call` over the installed tools, with approvals,
//! progress, cancellation, list-change notifications and the audit log.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cordon_agent::approval::{Standing, StandingAnswer, decide};
use cordon_agent::tools::render_failure;
use cordon_agent::{
    ApprovalAnswer, ApprovalConfig, ApprovalRequest, Content, GivenAnswer, Policy, ToolFailure,
    ToolFailureKind, ToolSource, ToolSpec,
};
use cordon_core::{
    AuditEntry, AuditRecord, CallOutcome, CallReport, SessionLabels, ToolCallAudit,
    arguments_sha256, now_ms,
};
use cordon_store::Store;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InputRequest, InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscriptionFilter, ToolsCapability,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tracing::Instrument;

use crate::asking::{
    APPROVAL_INPUT, Approver, Outstanding, Redeemed, can_elicit_form, elicit, question_form,
};
use crate::audit::AuditWriter;
use crate::catalog::{Catalog, Catalogs, Offered};

mod callers;
use callers::{client_name, introduced_name, token};
mod granting;
mod policy;
mod results;
mod spans;

/// How an MCP server behaves.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// The approval rules (`[approval]` of cordon.toml).
    pub approval: ApprovalConfig,
    /// The per-call policy (`[policy]` of cordon.toml).
    pub policy: cordon_agent::cordon_policy::PolicyConfig,
    /// How long a call waits for an answer before it is denied.
    pub approval_timeout: Duration,
    /// Whether audit records keep the arguments, not only their sha256.
    pub keep_arguments: bool,
    /// The door audit records name: `mcp` for stdio, `serve` for `/mcp`.
    pub origin: String,
    /// How often the installed tools are checked for changes to announce.
    pub watch_every: Duration,
    /// How often a long call, or one waiting for approval, reports progress to a client
    /// that asked for it; the first report comes after one interval.
    pub progress_every: Duration,
    /// What clients must know before anything else (`cordon mcp` on a home with no plugins),
    /// added to the instructions every client gets.
    pub notice: Option<String>,
    /// A result longer than this (in tokens, four bytes each) is sent as a preview and a
    /// link to read it whole (`[context] result_budget_tokens`); 0: always whole.
    pub result_budget_tokens: usize,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            approval: ApprovalConfig::default(),
            policy: Default::default(),
            approval_timeout: Duration::from_secs(300),
            keep_arguments: false,
            origin: "mcp".to_string(),
            watch_every: Duration::from_secs(1),
            progress_every: Duration::from_secs(1),
            notice: None,
            result_budget_tokens: cordon_agent::ContextConfig::default().result_budget_tokens,
        }
    }
}

/// What every connection of one MCP server shares: the tools, the audit log, the approver
/// and questions in flight.
pub struct McpHost {
    catalogs: Catalogs,
    audit: Option<AuditWriter>,
    /// Where policy counters are kept (none: nothing is counted).
    store: Option<Store>,
    approver: Arc<dyn Approver>,
    options: McpOptions,
    outstanding: Outstanding,
    /// `always` answers of clients on 2026-07-28 over HTTP, which have no MCP session to keep
    /// them in: by the TCP connection the answer came over (with its token and client name),
    /// in the order first answered.
    stateless_answers: Mutex<Vec<(Caller, Answers)>>,
    /// Results too long to send whole, kept for the clients that got them.
    kept: crate::kept::Kept,
    /// The session labels of clients over HTTP, by token and client name (without its
    /// version), least recently used first. Not by connection or MCP session: a client that
    /// reconnects, re-initialises after its session ended or upgrades must not start clean,
    /// and programs sharing a token and a name share labels, which only asks more.
    http_labels: Mutex<Vec<(HttpClient, Holding)>>,
    watching: std::sync::Once,
    /// Where calls run: apart from a single-threaded server's one thread.
    calls: crate::calls::CallPool,
    /// The policy of `cordon.toml` as edited since the server started.
    edited: policy::Edited,
}

/// What a session holds, shared by its calls: its labels (see [`cordon_core::labels`]) and
/// the grants given or refused for good in it through grant requests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Held {
    pub(crate) labels: SessionLabels,
    pub(crate) grants: cordon_agent::grant_requests::SessionGrants,
}

/// A session's [`Held`], shared by its calls.
type Holding = Arc<Mutex<Held>>;

/// A client over HTTP, as its labels are kept: its token and its name.
type HttpClient = (Option<String>, String);

impl McpHost {
    /// A server over `source`'s tools that records calls into `store` (none: no audit log,
    /// for tests and embedders) and asks `approver` when a client cannot ask its user.
    pub fn new(
        source: Arc<dyn ToolSource>,
        store: Option<Store>,
        approver: Arc<dyn Approver>,
        options: McpOptions,
    ) -> Arc<Self> {
        Arc::new(Self {
            catalogs: Catalogs::new(source, options.approval.clone(), options.policy.clone()),
            audit: store.clone().map(AuditWriter::new),
            store,
            approver,
            options,
            outstanding: Outstanding::default(),
            stateless_answers: Mutex::new(Vec::new()),
            kept: Default::default(),
            http_labels: Mutex::new(Vec::new()),
            watching: std::sync::Once::new(),
            calls: Default::default(),
            edited: Default::default(),
        })
    }

    /// The handler for one client connection.
    pub fn connection(self: &Arc<Self>) -> McpServer {
        self.watch();
        McpServer {
            host: self.clone(),
            answers: Arc::new(Mutex::new(BTreeMap::new())),
            approved: Arc::default(),
            labels: Arc::default(),
            session: Arc::new(Mutex::new(format!("mcp-{:016x}", rand::random::<u64>()))),
            plans: Arc::default(),
        }
    }

    /// The tools offered now.
    pub async fn catalog(&self) -> Result<Arc<Catalog>, ErrorData> {
        self.catalogs.current().await.map_err(|e| {
            ErrorData::internal_error(
                format!("the installed tools could not be loaded: {e}"),
                None,
            )
        })
    }

    /// Starts (once) the task that looks at the installed tools every `watch_every`, so a
    /// change is announced even when no client asks for the list.
    fn watch(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        let every = self.options.watch_every;
        self.watching.call_once(|| {
            tokio::spawn(async move {
                loop {
                    let Some(host) = weak.upgrade() else { break };
                    if let Err(e) = host.catalogs.current().await {
                        tracing::warn!("the installed tools could not be loaded: {e}");
                    }
                    drop(host);
                    tokio::time::sleep(every).await;
                }
            });
        });
    }

    async fn audit(&self, record: AuditRecord) {
        if let Some(audit) = &self.audit {
            audit.record(record).await;
        }
    }

    /// Writes the audit records still queued and gives back places reserved ahead on policy
    /// counters; for a server about to exit.
    pub async fn finish(&self) {
        if let Some(audit) = &self.audit {
            audit.finish().await;
        }
        if let Some(store) = &self.store {
            store.give_back_spare().await;
        }
    }
}

/// The tools a client's user answered `always` for, by identity.
type Answers = Arc<Mutex<BTreeMap<String, StandingAnswer>>>;

/// How many stateless clients' `always` answers a host keeps; past it the oldest client's
/// are forgotten (it is asked again).
const MAX_STATELESS_CLIENTS: usize = 1024;

/// One client connection: what its user answered `always` to.
#[derive(Clone)]
pub struct McpServer {
    host: Arc<McpHost>,
    answers: Answers,
    /// Tools a person approved a call of (`yes` or `always`) on this connection: what
    /// approval-before-action rules read.
    approved: Arc<Mutex<std::collections::BTreeSet<String>>>,
    /// What this connection's model was given results of (see [`cordon_core::labels`]).
    labels: Holding,
    /// This connection's key for `within = "session"` policy counters: random over stdio;
    /// over HTTP, named after the MCP session once a request names it, so that the session's
    /// calls count together on whichever host they run (see [`McpServer::adopt_session`]).
    session: Arc<Mutex<String>>,
    /// What calls of its tools count on (see [`policy::Plan`]).
    plans: Arc<policy::Plans>,
}

/// Whose `always` answers a stateless (2026-07-28) HTTP call may use: those given over the
/// same TCP connection, with the same token and client name.
///
/// Not the token and client name alone: every program started with the home's token shares
/// it, and many send their SDK's default name (`mcp 0.1.0`), so one program's `always` would
/// approve another's calls. A connection is one program's: the operating system gives its
/// socket to the process that opened it (and to what it hands it to), another program cannot
/// send on it, and `cordon serve` numbers connections from one counter, so a closed
/// connection's number is never reused (a port is). A client that reconnects is asked again.
#[derive(Clone, PartialEq, Eq)]
struct Caller {
    connection: u64,
    token: Option<String>,
    client: String,
}

/// A result the model reads as a failed call, with what to do about it.
fn failed(failure: &ToolFailure) -> CallToolResult {
    let advice = match failure.kind {
        ToolFailureKind::InvalidArguments => {
            "\nFix the arguments to match the tool's inputSchema and call again."
        }
        ToolFailureKind::Denied => {
            "\nThe sandbox allows only the grants the user gave this tool (`cordon grant`); \
             they cannot be widened from here. Try a path or host inside them, or ask the user."
        }
        // The sandbox's limit errors say "the call exceeded its <limit> limit".
        ToolFailureKind::Failed if failure.message.contains("exceeded its") => {
            "\nMake the call do less (a smaller input, fewer rows, a narrower search), or ask \
             the user to raise the plugin's limit (`cordon limit`)."
        }
        ToolFailureKind::Cancelled | ToolFailureKind::NotFound | ToolFailureKind::Failed => "",
    };
    CallToolResult::error(vec![ContentBlock::text(format!(
        "{}{advice}",
        render_failure(failure)
    ))])
}

/// How an approval ended for the audit log and the result.
struct Approved {
    decision: String,
    by: String,
}

/// How a call ended, for its audit record.
fn outcome_of(result: &Result<Vec<Content>, ToolFailure>) -> CallOutcome {
    match result {
        Ok(_) => CallOutcome::Ok,
        Err(f) => CallOutcome::Error {
            kind: f.kind.as_str().to_string(),
            message: f.message.clone(),
        },
    }
}

/// Where asking got to.
enum Asked {
    /// Run the call.
    Run(Approved),
    /// Do not run it; the result says why.
    Refused(Approved, String),
    /// The question went to the client in an `InputRequiredResult`.
    Sent(InputRequiredResult),
}

/// The audit facts of one call.
struct CallFacts<'a> {
    spec: &'a ToolSpec,
    /// What the per-call policy said of the call (`None`: no policy in force).
    verdict: Option<cordon_agent::cordon_policy::Verdict>,
    /// The counters the call was reserved on before it was decided.
    reserved: policy::Reserved,
    arguments: &'a Value,
    client: &'a str,
    /// The token the call came with (over HTTP).
    token: Option<&'a str>,
    call_id: String,
    /// The session's labels when the call was decided.
    labels: &'a SessionLabels,
}

impl McpServer {
    fn record(
        &self,
        facts: &CallFacts<'_>,
        decision: &Approved,
        outcome: CallOutcome,
        report: Option<CallReport>,
    ) -> AuditRecord {
        let spec = facts.spec;
        let rule = facts.verdict.as_ref().and_then(|v| v.rule.as_ref());
        spans::decided(&decision.decision, rule.map(|r| r.id.as_str()));
        AuditRecord {
            at_ms: now_ms(),
            origin: self.host.options.origin.clone(),
            entry: AuditEntry::ToolCall(Box::new(ToolCallAudit {
                session: None,
                turn: None,
                call_id: Some(facts.call_id.clone()),
                client: Some(facts.client.to_string()),
                requested_by: facts.token.map(cordon_core::Requester::token),
                tool: spec.tool.clone(),
                plugin: spec.plugin.clone(),
                digest: spec.digest.clone(),
                arguments_sha256: arguments_sha256(facts.arguments),
                arguments: self
                    .host
                    .options
                    .keep_arguments
                    .then(|| facts.arguments.clone()),
                grants: spec.grants.clone(),
                decision: decision.decision.clone(),
                decided_by: decision.by.clone(),
                policy_rule: facts
                    .verdict
                    .as_ref()
                    .and_then(|v| v.rule.as_ref())
                    .map(cordon_agent::cordon_policy::RuleRef::audit_name),
                policy_digest: facts
                    .verdict
                    .as_ref()
                    .map(|v| v.digest.clone())
                    .filter(|d| !d.is_empty()),
                labels: facts.labels.names(),
                outcome,
                report,
            })),
        }
    }

    /// Applies an answer to the call `facts` describes: `always` holds as long as `answers`
    /// are kept, and remembers who gave it, when and for which call, for the audit records
    /// of the calls it lets run.
    fn take_answer(&self, answers: &Answers, facts: &CallFacts<'_>, given: GivenAnswer) -> Asked {
        let spec = facts.spec;
        let approved = Approved {
            decision: given.answer.as_str().to_string(),
            by: given.by.clone(),
        };
        match given.answer {
            // `for` and `forever` answer grant requests; here they are a yes for this call.
            ApprovalAnswer::Yes | ApprovalAnswer::For { .. } | ApprovalAnswer::Forever => {
                Asked::Run(approved)
            }
            ApprovalAnswer::Always => {
                answers.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    spec.identity(),
                    StandingAnswer {
                        policy: Policy::Auto,
                        by: given.by.clone(),
                        at_ms: given.at_ms,
                        call_id: format!(
                            "{} (arguments sha256 {})",
                            facts.call_id,
                            arguments_sha256(facts.arguments)
                        ),
                        turn: 0,
                        requester: None,
                    },
                );
                Asked::Run(approved)
            }
            ApprovalAnswer::No | ApprovalAnswer::Never => {
                let why = format!("Declined by {}: `{}` did not run.", given.by, spec.tool);
                Asked::Refused(approved, why)
            }
            ApprovalAnswer::Refused { reason } => {
                let why = format!("The call of `{}` was not approved: {reason}", spec.tool);
                Asked::Refused(approved, why)
            }
        }
    }

    /// Decides whether the call runs, asking someone when policy says `ask`.
    async fn approve(
        &self,
        facts: &CallFacts<'_>,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Asked {
        let spec = facts.spec;
        let (answers, always_holds) = self.answers_for(context, facts);
        let (decision, standing) = {
            let given = answers.lock().unwrap_or_else(|e| e.into_inner());
            let standing = Standing {
                answers: &given,
                requester: None,
                labels: facts.labels,
            };
            let decision = decide(
                &self.host.options.approval,
                standing,
                spec,
                facts.verdict.as_ref(),
            );
            // The earlier answer that made the decision, if one did.
            let used = given
                .get(&spec.identity())
                .filter(|a| a.policy == decision.policy && a.reason() == decision.reason)
                .cloned();
            (decision, used)
        };
        match decision.policy {
            Policy::Auto => {
                let by = match standing {
                    Some(answer) => earlier_answer(&answer, always_holds),
                    None => format!("policy: {}", decision.reason),
                };
                return Asked::Run(Approved {
                    decision: "auto".to_string(),
                    by,
                });
            }
            Policy::Deny => {
                let approved = Approved {
                    decision: "deny".to_string(),
                    by: format!("policy: {}", decision.reason),
                };
                let why = format!("The call was refused: {}.", decision.reason);
                return Asked::Refused(approved, why);
            }
            Policy::Ask => {}
        }
        let question = ApprovalRequest {
            call_id: facts.call_id.clone(),
            tool: spec.tool.clone(),
            plugin: spec.plugin.clone(),
            arguments: facts.arguments.clone(),
            grants: spec.grants.clone(),
            reason: decision.reason,
            rule_of_two: cordon_core::rule_of_two(facts.labels, &spec.identity(), &spec.exposure)
                .is_some(),
            requested_grants: Vec::new(),
        };
        let timeout = self.host.options.approval_timeout;
        // The answer to a question sent in an InputRequiredResult.
        if let Some(handle) = &request.request_state {
            let response = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(APPROVAL_INPUT));
            return match self.host.outstanding.redeem(
                handle,
                facts.token,
                (&spec.name, facts.arguments),
                response,
                facts.client,
            ) {
                Redeemed::Answer(given) => self.take_answer(&answers, facts, given),
                Redeemed::Stale(why) => Asked::Refused(
                    Approved {
                        decision: "refused".to_string(),
                        by: format!("Cordon's check of the answer from `{}`", facts.client),
                    },
                    why,
                ),
            };
        }
        let capabilities = context.client_capabilities();
        if can_elicit_form(capabilities.as_ref()) {
            let modern = context
                .protocol_version()
                .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
            if modern {
                let handle =
                    self.host
                        .outstanding
                        .ask(facts.token, &spec.name, facts.arguments, timeout);
                let elicit =
                    rmcp::model::ElicitRequest::new(question_form(&question, always_holds));
                let requests = BTreeMap::from([(
                    APPROVAL_INPUT.to_string(),
                    InputRequest::Elicitation(elicit),
                )]);
                return Asked::Sent(InputRequiredResult::new(Some(requests), Some(handle)));
            }
            let form = question_form(&question, always_holds);
            let given = elicit(context, form, facts.client, timeout).await;
            return self.take_answer(&answers, facts, given);
        }
        let given = self
            .host
            .approver
            .ask(&question, facts.client, facts.token, timeout, &context.ct)
            .await;
        self.take_answer(&answers, facts, given)
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let catalog = self.host.catalog().await?;
        let Some(Offered { spec, schema }) = catalog.offered.get(request.name.as_ref()) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "there is no tool `{}`; the tools are: {}",
                    request.name.chars().take(200).collect::<String>(),
                    catalog.names()
                ),
                None,
            ));
        };
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let client = client_name(&context);
        let token = token(&context);
        let policy = self.policy(&catalog);
        let introduced = introduced_name(&context);
        let caller = self.caller(&introduced, token.as_deref());
        self.adopt_session(&context);
        let labels = self.labels_for(&context, token.as_deref(), &introduced);
        if let Err(why) = self
            .labels_from_store(&labels, &context, token.as_deref(), &introduced)
            .await
        {
            return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
        }
        let to = cordon_agent::grant_requests::Applying {
            plugin: &spec.plugin,
            digest: &spec.digest,
            requester: None,
            now_ms: now_ms(),
        };
        // A grant also recorded in the lock applies only while the lock holds it (`cordon
        // revoke` reaches this session), read only when the session holds one.
        let in_lock = {
            let held = labels.lock().unwrap_or_else(|e| e.into_inner());
            held.grants.any_in_lock(to)
        };
        let lock_grants = in_lock
            .then(|| catalog.host.lock_grants(&spec.name))
            .flatten();
        let (seen, session_grants) = {
            let held = labels.lock().unwrap_or_else(|e| e.into_inner());
            (
                held.labels.clone(),
                held.grants.of_held(to, lock_grants.as_deref()),
            )
        };
        // The tool as it runs in this session: with the grants given for it, which policy,
        // approval and the Rule of Two must see.
        let widened = spec.with_grants(&session_grants);
        let spec = &*widened;
        let (verdict, reserved) = self
            .verdict(
                &policy,
                spec,
                !session_grants.is_empty(),
                &arguments,
                &caller,
                &seen,
            )
            .await;
        let facts = CallFacts {
            spec,
            verdict,
            reserved,
            arguments: &arguments,
            client: &client,
            token: token.as_deref(),
            call_id: context.id.to_string(),
            labels: &seen,
        };
        if let Err(e) = schema.check(&arguments) {
            let failure = ToolFailure::new(
                ToolFailureKind::InvalidArguments,
                format!(
                    "the arguments do not fit the schema of `{}`: {e}",
                    spec.name
                ),
            );
            let approved = Approved {
                decision: "invalid".to_string(),
                by: "Cordon's check of the call".to_string(),
            };
            let outcome = CallOutcome::NotRun {
                reason: failure.message.clone(),
            };
            self.unreserve(&facts.reserved).await;
            self.host
                .audit(self.record(&facts, &approved, outcome, None))
                .await;
            return Ok(failed(&failure).into());
        }
        // Reported while the call waits for approval too: a person may take minutes to answer,
        // longer than clients wait for a result without hearing anything.
        let running = Arc::new(Mutex::new(None));
        let progress = context.meta.get_progress_token().map(|token| {
            let ticker = tokio::spawn(report_progress(
                context.peer.clone(),
                token,
                spec.name.clone(),
                self.host.options.progress_every,
                running.clone(),
            ));
            AbortOnDrop(ticker)
        });
        let approved = match self.approve(&facts, &request, &context).await {
            Asked::Run(approved) => approved,
            Asked::Sent(input) => {
                self.unreserve(&facts.reserved).await;
                return Ok(input.into());
            }
            Asked::Refused(approved, why) => {
                self.unreserve(&facts.reserved).await;
                let outcome = CallOutcome::NotRun {
                    reason: why.clone(),
                };
                self.host
                    .audit(self.record(&facts, &approved, outcome, None))
                    .await;
                return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
            }
        };
        *running.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        // The call was counted when it was decided (reserved); what its rules do not count of
        // that is taken back while it runs, rather than before (the store's round trip is
        // longer than a quick tool's whole run).
        let ((), (result, report)) = tokio::join!(
            self.ran(&policy, &facts, &approved, &caller),
            self.host.calls.call(
                &catalog.host,
                &spec.name,
                arguments.clone(),
                &session_grants,
                context.ct.clone()
            )
        );
        // The client's model is given the result, an error or not.
        let withheld = self
            .saw(
                &labels,
                &spec.identity(),
                &spec.widened(&session_grants).exposure,
                &context,
            )
            .await
            .err();
        let wanted = report
            .as_ref()
            .map(|r| r.wanted.clone())
            .unwrap_or_default();
        let refused = report
            .as_ref()
            .map(|r| r.refused.clone())
            .unwrap_or_default();
        cordon_agent::tools::record_call_outcome(
            &tracing::Span::current(),
            &result,
            report.as_ref(),
        );
        self.host
            .audit(self.record(&facts, &approved, outcome_of(&result), report))
            .await;
        if let Some(why) = withheld {
            return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
        }
        // A refusal a grant would lift may be put to a person, and the call run again.
        let result = match result {
            Err(failure) if !wanted.is_empty() => {
                let refusal = granting::Refusal {
                    failure,
                    wanted,
                    refused,
                };
                self.grant_request(&catalog, &facts, &labels, &context, refusal)
                    .await
            }
            other => other,
        };
        drop(progress);
        Ok(match result {
            Ok(content) => self.delivered(spec, content, (token.clone(), introduced.clone())),
            Err(failure) => failed(&failure),
        }
        .into())
    }

    /// Tells `peer` (a client that connected with `initialize`) whenever the tool list
    /// changes, until it disconnects.
    fn forward_list_changes(&self, peer: Peer<RoleServer>) {
        let mut changes = self.host.catalogs.subscribe();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                if peer.is_transport_closed() || peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends a progress notification every `every` (the first after `every`) while a call waits
/// for approval and while it runs (since the time in `running`). The progress is the seconds
/// since the call arrived, so it only grows.
async fn report_progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    tool: String,
    every: Duration,
    running: Arc<Mutex<Option<Instant>>>,
) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let secs = started.elapsed().as_secs_f64();
        let since = *running.lock().unwrap_or_else(|e| e.into_inner());
        let message = match since {
            Some(since) => format!(
                "`{tool}` has run for {:.0} s",
                since.elapsed().as_secs_f64()
            ),
            None => format!("`{tool}` is waiting for approval ({secs:.0} s so far)"),
        };
        let note =
            ProgressNotificationParam::new(token.clone(), secs.floor()).with_message(message);
        if peer.notify_progress(note).await.is_err() {
            return;
        }
    }
}

/// Who gave the earlier answer that let a call run, when, and for which call, for its audit
/// record.
fn earlier_answer(answer: &StandingAnswer, holds: &str) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(answer.at_ms.max(0) as u64);
    format!(
        "an earlier answer: {} answered `always` at {} to call {} of this tool, for every call \
         {holds}",
        answer.by,
        humantime::format_rfc3339_millis(at),
        answer.call_id,
    )
}

/// What every client is told first.
const INSTRUCTIONS: &str = "Cordon runs each of these tools in a fresh WebAssembly sandbox that \
     reaches only the directories, hosts and variables its user granted, within limits of time \
     and memory. A refusal names the grant it lacks; grants cannot be changed from here.";

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::default();
        let mut tools = ToolsCapability::default();
        tools.list_changed = Some(true);
        capabilities.tools = Some(tools);
        // For the links to results too long to send whole (see `crate::kept`).
        capabilities.resources = Some(Default::default());
        let instructions = match &self.host.options.notice {
            Some(notice) => format!("{notice}\n\n{INSTRUCTIONS}"),
            None => INSTRUCTIONS.to_string(),
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    // Cordon offers tools only, and does not advertise prompts or resources; clients that list
    // them anyway (several do, on every server) get empty lists rather than an error that
    // some show as a broken server.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::default())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::default())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let owner = (token(&context), introduced_name(&context));
        self.read_kept(&request.uri, &owner).map(Into::into)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::default())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.host.catalog().await?;
        Ok(ListToolsResult::with_all_items(catalog.listed.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let span = spans::tool_call(
            &request,
            &context,
            &self.host.options.origin,
            token(&context).as_deref(),
        );
        self.call(request, context).instrument(span).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.forward_list_changes(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        (requested.tools_list_changed == Some(true))
            .then(|| SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.host.catalogs.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
