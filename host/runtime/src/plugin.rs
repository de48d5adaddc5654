//! A loaded plugin and the life of one call.

use std::sync::Arc;
use std::time::Instant;

use cordon_core::{
    CallReport, Ceiling, CompiledPin, Content, LimitKind, Limits, ToolDescriptor, ToolError,
    ToolErrorKind, ToolHints, Written, format_bytes, format_bytes_rounded,
};
use serde::Deserialize;
use wasmtime::{Store, UpdateDeadline};

use crate::bindings;
use crate::caps::{MAX_CONTENT_PIECES, MAX_HANDLES_PER_CALL, MAX_RETURNED_BYTES, MAX_WASM_STACK};
use crate::error::CallError;
use crate::result_stream::Broken;
use crate::sandbox::{HostState, Sandbox, build_state};
use crate::typed::{TypedExports, Unavailable};

/// What a [`Plugin`] shares among its clones. Calls run on the engine `pre` was prepared on
/// (`pre.engine()`), so a plugin needs nothing of the runtime that loaded it: the engine builds
/// plugins, never the reverse.
pub(crate) struct PluginInner {
    pub(crate) pre: wasmtime::component::InstancePre<HostState>,
    pub(crate) exports: PluginExports,
    pub(crate) digest: String,
    pub(crate) imports: Vec<String>,
    pub(crate) compiled: Option<CompiledPin>,
    /// Where calls keep what they write of their results (see `result_stream`).
    pub(crate) spool: Arc<crate::result_stream::Spool>,
}

/// A compiled, linked plugin, ready to be instantiated for calls. Cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<PluginInner>,
    name: Arc<str>,
}

/// What a successful call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The tool's result.
    pub content: Vec<Content>,
    /// What the plugin wrote to stdout and stderr, up to the log limit.
    pub stderr: String,
    /// Whether some of that output, or some `cordon:tool/log` records, were dropped for
    /// exceeding the log limit.
    pub stderr_truncated: bool,
}

/// How a plugin offers its tools.
pub(crate) enum PluginExports {
    /// Through Cordon's contract: where the `tools` export is in each instance, and the
    /// optional `tool-outputs` export when the component has it.
    Contract {
        tools: bindings::PluginIndices,
        outputs: Option<bindings::outputs::tool_outputs::GuestIndices>,
    },
    /// As plain typed functions, each a tool (see [`crate::typed`]).
    Typed(Arc<TypedExports>),
}

/// One fresh instance, and the contract's exports in it for a plugin that has them.
pub(crate) struct Exports {
    instance: wasmtime::component::Instance,
    contract: Option<ContractExports>,
}

/// The contract's exports of one instance: `tools`, and `tool-outputs` when the component
/// has it.
struct ContractExports {
    tools: bindings::Plugin,
    outputs: Option<bindings::outputs::tool_outputs::Guest>,
}

impl Exports {
    fn contract(&self) -> wasmtime::Result<&ContractExports> {
        self.contract.as_ref().ok_or_else(|| {
            wasmtime::format_err!("the component does not export `cordon:tool/tools`")
        })
    }
}

/// How many lines of a stopped or crashed call's last output its error quotes.
const LAST_OUTPUT_LINES: usize = 10;

impl Plugin {
    pub(crate) fn new(inner: PluginInner) -> Plugin {
        let name: Arc<str> = Arc::from(format!("{}…", &inner.digest[..19]));
        Plugin {
            inner: Arc::new(inner),
            name,
        }
    }

    /// The same plugin, with `name` used in log records and error messages (by default a
    /// short digest). Callers that know the installed name should set it.
    pub fn named(&self, name: &str) -> Plugin {
        Plugin {
            inner: self.inner.clone(),
            name: Arc::from(name),
        }
    }

    /// The name used in logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:<hex>` of the component bytes.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// The interfaces the component imports, e.g. `wasi:filesystem/types@0.2.6`.
    pub fn imports(&self) -> &[String] {
        &self.inner.imports
    }

    /// The compiled code this plugin was loaded from or compiled into, as it is in the cache
    /// now: what a caller records where only the host writes and passes to the next
    /// [`Runtime::load`](crate::Runtime::load) so that the cache entry is used. `None` when the
    /// runtime has no cache or could not write to it.
    pub fn compiled_pin(&self) -> Option<&CompiledPin> {
        self.inner.compiled.as_ref()
    }

    /// What the component could use at all, judged from its imports.
    pub fn ceiling(&self) -> Ceiling {
        Ceiling::from_imports(&self.inner.imports)
    }

    /// The exported functions of a component without the contract that are not offered as
    /// tools, and why (empty for a plugin with the contract).
    pub fn unavailable(&self) -> &[Unavailable] {
        match &self.inner.exports {
            PluginExports::Typed(typed) => &typed.unavailable,
            PluginExports::Contract { .. } => &[],
        }
    }

    /// Whether a tool named `tool` can be called: for a component without the contract, whether
    /// one of its functions is offered under that name (a list recorded by an older Cordon
    /// may name one it no longer offers, such as a toolchain's own export); `None` for a
    /// plugin with the contract, whose tools only it can say.
    pub fn offers_tool(&self, tool: &str) -> Option<bool> {
        match &self.inner.exports {
            PluginExports::Typed(typed) => {
                Some(typed.functions.iter().any(|f| f.descriptor.name == tool))
            }
            PluginExports::Contract { .. } => None,
        }
    }

    /// Whether the component offers plain typed functions rather than Cordon's contract.
    pub fn has_typed_exports(&self) -> bool {
        matches!(self.inner.exports, PluginExports::Typed(_))
    }

    /// Asks the plugin for its tools, in an instance with no grants at all: `list-tools`, and
    /// `output-schemas` when the component exports `tool-outputs` (WIT 0.1.3).
    /// For a component without the contract, the tools derived from its exported functions'
    /// types (nothing runs).
    pub async fn list_tools(&self, limits: &Limits) -> Result<Vec<ToolDescriptor>, CallError> {
        if let PluginExports::Typed(typed) = &self.inner.exports {
            return Ok(typed
                .functions
                .iter()
                .map(|f| f.descriptor.clone())
                .collect());
        }
        let sandbox = Sandbox {
            limits: *limits,
            ..Sandbox::default()
        };
        let (raw, outputs) = self
            .run(&sandbox, &mut CallReport::default(), |exports, store| {
                Box::pin(async move {
                    let contract = exports.contract()?;
                    let tools = contract
                        .tools
                        .cordon_tool_tools()
                        .call_list_tools(&mut *store)
                        .await?;
                    let outputs = match &contract.outputs {
                        Some(outputs) => outputs.call_output_schemas(&mut *store).await?,
                        None => Vec::new(),
                    };
                    Ok((tools, outputs))
                })
            })
            .await?
            .value;
        descriptors(raw, outputs)
    }

    /// Instantiates the plugin once with no grants and calls nothing: checks that it starts
    /// under `limits` (e.g. that a memory limit is not too small for it) and measures the
    /// per-call instantiation cost.
    pub async fn check_instantiate(&self, limits: &Limits) -> Result<(), CallError> {
        let sandbox = Sandbox {
            limits: *limits,
            ..Sandbox::default()
        };
        self.run(&sandbox, &mut CallReport::default(), |_, _| {
            Box::pin(async { Ok(()) })
        })
        .await
        .map(|_| ())
    }

    /// Runs `tool` with `arguments` (JSON text) in a fresh instance set up from `sandbox`.
    ///
    /// Grants the plugin's ceiling does not permit are refused before anything runs; the
    /// argument size is checked before instantiating; memory, time, output and log are
    /// limited while it runs. [`Plugin::call_tool_reported`] also says what the call measured
    /// and was refused.
    pub async fn call_tool(
        &self,
        sandbox: &Sandbox,
        tool: &str,
        arguments: &str,
    ) -> Result<ToolOutput, CallError> {
        self.call_tool_reported(sandbox, tool, arguments).await.0
    }

    /// [`Plugin::call_tool`], with what the sandbox measured and refused during the call, for
    /// an audit log: its wall-clock time (store set-up included), the peak of its linear memory
    /// (0 when it was refused before an instance started) and one line per refusal: a path
    /// that leaves a grant, a write under a read-only grant, an HTTP origin, TCP address or
    /// resolved address that was not granted, and grants refused before the call
    /// ([`CallError::Denied`]).
    ///
    /// The report comes beside the result rather than inside it because every call has one,
    /// whichever way it ended, and neither [`ToolOutput`] nor [`CallError`] (which callers
    /// match and show) should carry it: a pair keeps both types as they are and destructures
    /// as `let (result, report) = …`.
    pub async fn call_tool_reported(
        &self,
        sandbox: &Sandbox,
        tool: &str,
        arguments: &str,
    ) -> (Result<ToolOutput, CallError>, CallReport) {
        let started = Instant::now();
        let mut report = CallReport::default();
        let result = self
            .call_tool_into(sandbox, tool, arguments, &mut report)
            .await;
        if let Err(CallError::Denied(denial)) = &result {
            report.refuse(format!("grant: {denial}"));
        }
        report.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        (result, report)
    }

    /// The call of [`Plugin::call_tool_reported`], filling `report` with the instance's peak
    /// memory and refusals.
    async fn call_tool_into(
        &self,
        sandbox: &Sandbox,
        tool: &str,
        arguments: &str,
        report: &mut CallReport,
    ) -> Result<ToolOutput, CallError> {
        self.ceiling()
            .permit_all(sandbox.grants.iter())
            .map_err(|e| CallError::Denied(e.for_plugin(&*self.name).into()))?;
        let limits = &sandbox.limits;
        if arguments.len() as u64 > limits.args {
            return Err(CallError::LimitExceeded {
                limit: LimitKind::Args,
                detail: format!(
                    "the arguments are {} bytes; the args limit is {}",
                    arguments.len(),
                    format_bytes(limits.args)
                ),
            });
        }
        if let PluginExports::Typed(typed) = &self.inner.exports {
            return self
                .call_typed(typed, sandbox, tool, arguments, report)
                .await;
        }
        let (tool_owned, args_owned) = (tool.to_string(), arguments.to_string());
        let Ran {
            value: result,
            stderr,
            stderr_truncated,
            written,
        } = self
            .run(sandbox, report, move |exports, store| {
                Box::pin(async move {
                    exports
                        .contract()?
                        .tools
                        .cordon_tool_tools()
                        .call_call_tool(store, &tool_owned, &args_owned)
                        .await
                })
            })
            .await?;
        let pieces = result.map_err(|e| {
            let (kind, message) = match e {
                bindings::cordon::tool::types::ToolError::InvalidArguments(m) => {
                    (ToolErrorKind::InvalidArguments, m)
                }
                bindings::cordon::tool::types::ToolError::NotFound(m) => {
                    (ToolErrorKind::NotFound, m)
                }
                bindings::cordon::tool::types::ToolError::Denied(m) => (ToolErrorKind::Denied, m),
                bindings::cordon::tool::types::ToolError::Failed(m) => (ToolErrorKind::Failed, m),
            };
            CallError::Tool(ToolError { kind, message })
        })?;
        if pieces.len() > MAX_CONTENT_PIECES {
            return Err(CallError::LimitExceeded {
                limit: LimitKind::Output,
                detail: format!(
                    "the result has {} content pieces; at most {MAX_CONTENT_PIECES} are accepted",
                    pieces.len()
                ),
            });
        }
        let returned: u64 = pieces
            .iter()
            .map(|p| match p {
                bindings::cordon::tool::types::Content::Text(t)
                | bindings::cordon::tool::types::Content::Json(t) => t.len() as u64,
            })
            .sum();
        check_output(returned, written.as_ref(), limits.output)?;
        let mut content = Vec::with_capacity(pieces.len() + 1);
        if let Some(written) = written {
            check_written(&written, tool).await?;
            content.push(Content::Written(written));
        }
        for (i, p) in pieces.into_iter().enumerate() {
            content.push(match p {
                bindings::cordon::tool::types::Content::Text(t) => Content::Text(t),
                bindings::cordon::tool::types::Content::Json(t) => {
                    Content::Json(serde_json::from_str(&t).map_err(|e| {
                        // serde_json stops at 128 levels to keep the host's stack safe; that is
                        // valid JSON the host will not take, not broken JSON.
                        CallError::Malformed(if e.to_string().starts_with("recursion limit") {
                            format!(
                                "content piece {i} of tool `{tool}` is JSON nested deeper than \
                                 128 levels, more than the host accepts"
                            )
                        } else {
                            format!(
                                "content piece {i} of tool `{tool}` is marked json but is not JSON: {e}"
                            )
                        })
                    })?)
                }
            });
        }
        Ok(ToolOutput {
            content,
            stderr,
            stderr_truncated,
        })
    }

    /// A call of a component without the contract: the arguments converted to the
    /// function's parameters (refused, naming where they do not fit, before anything runs),
    /// the function called, its result converted to JSON and held to the output limit.
    async fn call_typed(
        &self,
        typed: &Arc<TypedExports>,
        sandbox: &Sandbox,
        tool: &str,
        arguments: &str,
        report: &mut CallReport,
    ) -> Result<ToolOutput, CallError> {
        let Some(function) = typed.find(tool) else {
            return Err(CallError::Tool(ToolError {
                kind: ToolErrorKind::NotFound,
                message: format!("the plugin has no tool `{tool}`"),
            }));
        };
        let params = function.arguments(arguments)?;
        // A result that takes far more memory lifted on the host than in the guest is bounded
        // through the guest's memory (see `typed::lift`).
        let capped;
        let (sandbox, cap) = match function.memory_cap {
            Some(cap) if cap < sandbox.limits.memory => {
                let mut held = sandbox.clone();
                held.limits.memory = cap;
                capped = held;
                (&capped, Some(cap))
            }
            _ => (sandbox, None),
        };
        let (typed_owned, tool_owned) = (typed.clone(), tool.to_string());
        let ran = self
            .run(sandbox, report, move |exports, store| {
                Box::pin(async move {
                    let function = typed_owned
                        .find(&tool_owned)
                        .ok_or_else(|| wasmtime::format_err!("no tool `{tool_owned}`"))?;
                    function.call(store, &exports.instance, params).await
                })
            })
            .await;
        let Ran {
            value: results,
            stderr,
            stderr_truncated,
            written,
        } = match (ran, cap) {
            (
                Err(CallError::LimitExceeded {
                    limit: LimitKind::Memory,
                    detail,
                }),
                Some(cap),
            ) => {
                return Err(CallError::LimitExceeded {
                    limit: LimitKind::Memory,
                    detail: format!(
                        "{detail} (`{tool}` is held to {}: the lists it returns would take far \
                         more memory in the host than in the plugin)",
                        format_bytes(cap)
                    ),
                });
            }
            (ran, _) => ran?,
        };
        let returned = function.output(results)?;
        let total: usize = returned.iter().map(Content::size).sum();
        check_output(total as u64, written.as_ref(), sandbox.limits.output)?;
        let mut content = Vec::with_capacity(returned.len() + 1);
        if let Some(written) = written {
            check_written(&written, tool).await?;
            content.push(Content::Written(written));
        }
        content.extend(returned);
        Ok(ToolOutput {
            content,
            stderr,
            stderr_truncated,
        })
    }

    /// Instantiates a fresh instance and runs `f` in it under the sandbox's limits; returns
    /// what `f` returned plus the captured output, and puts what the sandbox measured and
    /// refused into `report` however the call ended. The store is dropped afterwards whatever
    /// happened, so nothing (in particular a trapped instance) is ever reused.
    async fn run<R, F>(
        &self,
        sandbox: &Sandbox,
        report: &mut CallReport,
        f: F,
    ) -> Result<Ran<R>, CallError>
    where
        R: Send,
        F: for<'a> FnOnce(
                &'a Exports,
                &'a mut Store<HostState>,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = wasmtime::Result<R>> + Send + 'a>,
            > + Send,
    {
        let limits = sandbox.limits;
        let state = build_state(sandbox, self.name.clone(), &self.inner.spool)?;
        let mut store = Store::new(self.inner.pre.engine(), state);
        store.limiter(|s| &mut s.budget.limiter);
        store.set_max_component_handles(MAX_HANDLES_PER_CALL);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            if ctx.data().budget.cancel.is_cancelled() {
                ctx.data_mut().budget.cancelled = true;
                return Ok(UpdateDeadline::Interrupt);
            }
            if Instant::now() >= ctx.data().budget.deadline {
                ctx.data_mut().budget.timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        let inner = &self.inner;
        let work = async {
            let instance = inner.pre.instantiate_async(&mut store).await?;
            let contract = match &inner.exports {
                PluginExports::Contract { tools, outputs } => Some(ContractExports {
                    tools: tools.load(&mut store, &instance)?,
                    outputs: match outputs {
                        Some(indices) => Some(indices.load(&mut store, &instance)?),
                        None => None,
                    },
                }),
                PluginExports::Typed(_) => None,
            };
            let exports = Exports { instance, contract };
            f(&exports, &mut store).await
        };
        // The epoch callback stops running guest code at the deadline; this timeout also stops
        // a guest blocked in a host call (a slow HTTP server, a sleep).
        // Guest code that runs is stopped by the epoch callback once `cancel` fires; a guest
        // blocked in a host call is stopped here, by dropping the call.
        let cancel = sandbox.cancel.clone();
        let outcome = tokio::select! {
            biased;
            outcome = tokio::time::timeout(limits.time, work) => Some(outcome),
            () = cancel.cancelled() => None,
        };
        store.data_mut().report_into(report);
        let Some(outcome) = outcome else {
            return Err(CallError::Cancelled);
        };
        let written = store.data_mut().written.finish();
        let data = store.data();
        // What the plugin wrote last says where it was when it was stopped or crashed.
        let with_last_output = |msg: String| match data.out.pipe.last_lines(LAST_OUTPUT_LINES) {
            Some(lines) => format!("{msg}; last plugin output:\n{lines}"),
            None => msg,
        };
        let time_exceeded = || CallError::LimitExceeded {
            limit: LimitKind::Time,
            detail: with_last_output(format!(
                "the call ran longer than the time limit of {}",
                cordon_core::format_duration(limits.time)
            )),
        };
        let result = match outcome {
            Err(_elapsed) => return Err(time_exceeded()),
            Ok(r) => r,
        };
        let (stderr, output_truncated) = data.out.pipe.take();
        let truncated = output_truncated || data.out.log.dropped() > 0;
        match result {
            Ok(value) => Ok(Ran {
                value,
                stderr,
                stderr_truncated: truncated,
                written: written.map_err(|broken| written_error(broken, limits.output))?,
            }),
            Err(e) => {
                if data.budget.cancelled {
                    return Err(CallError::Cancelled);
                }
                if data.budget.timed_out {
                    return Err(time_exceeded());
                }
                if let Some(wanted) = data.budget.limiter.exceeded {
                    return Err(CallError::LimitExceeded {
                        limit: LimitKind::Memory,
                        detail: with_last_output(format!(
                            "the plugin tried to use {} of memory; the memory limit is {}",
                            format_bytes_rounded(wanted),
                            format_bytes(limits.memory)
                        )),
                    });
                }
                let msg = match e.downcast_ref::<wasmtime::Trap>() {
                    // The guest's own stack overflow check cannot fire first in wasm (CPython's
                    // RecursionError, for one, does not), so say what happened and what helps.
                    Some(wasmtime::Trap::StackOverflow) => format!(
                        "it ran out of call stack ({}): the code recursed too deeply, for \
                         example into data nested thousands of levels; reduce the depth of \
                         recursion or nesting",
                        format_bytes(MAX_WASM_STACK as u64)
                    ),
                    Some(trap) => trap.to_string(),
                    None if held_too_many_handles(&e) => format!(
                        "it held more than {} handles at once (open files, streams, sockets, \
                         pollables, HTTP requests and fields …), the most one call may hold; \
                         drop what it no longer uses",
                        MAX_HANDLES_PER_CALL
                    ),
                    None => format!("{e:#}"),
                };
                // A panic message is the most useful part of a crash report.
                Err(CallError::Trapped(with_last_output(msg)))
            }
        }
    }
}

/// Holds a result to the output limit: what the call returned (held in memory, so also to
/// [`MAX_RETURNED_BYTES`]) and what it wrote (held in a file) together.
fn check_output(returned: u64, written: Option<&Written>, limit: u64) -> Result<(), CallError> {
    let written = written.map_or(0, Written::len);
    let total = returned.saturating_add(written);
    if total > limit {
        return Err(CallError::LimitExceeded {
            limit: LimitKind::Output,
            detail: if written > 0 {
                format!(
                    "the result is {total} bytes ({written} written, {returned} returned); the \
                     output limit is {}",
                    format_bytes(limit)
                )
            } else {
                format!(
                    "the result is {total} bytes; the output limit is {}",
                    format_bytes(limit)
                )
            },
        });
    }
    if returned > MAX_RETURNED_BYTES {
        return Err(CallError::LimitExceeded {
            limit: LimitKind::Output,
            detail: format!(
                "the plugin returned {returned} bytes at once; at most {} are taken that way \
                 (the rest of the output limit, {}, is for results written through \
                 `cordon:tool/result-stream`, which the host keeps out of memory)",
                format_bytes(MAX_RETURNED_BYTES),
                format_bytes(limit)
            ),
        });
    }
    Ok(())
}

/// A written JSON piece must be one JSON document: checked by reading it through, without
/// building it (and no deeper than returned pieces may be), on a thread that may block.
async fn check_written(written: &Written, tool: &str) -> Result<(), CallError> {
    if !written.is_json() {
        return Ok(());
    }
    let (written, tool) = (written.clone(), tool.to_string());
    tokio::task::spawn_blocking(move || check_written_now(&written, &tool))
        .await
        .map_err(|e| CallError::NotKept(format!("the check of the written result stopped: {e}")))?
}

fn check_written_now(written: &Written, tool: &str) -> Result<(), CallError> {
    let unreadable = |e: std::io::Error| {
        CallError::NotKept(format!("the written result could not be read back: {e}"))
    };
    // serde_json skips a value without counting its depth, so the depth is counted apart.
    if json_depth(written.reader()).map_err(unreadable)? > MAX_JSON_DEPTH {
        return Err(CallError::Malformed(format!(
            "the written result of tool `{tool}` is JSON nested deeper than {} levels, more \
             than the host accepts",
            MAX_JSON_DEPTH + 1
        )));
    }
    let reader = std::io::BufReader::with_capacity(64 << 10, written.reader());
    let mut de = serde_json::Deserializer::from_reader(reader);
    let checked = serde::de::IgnoredAny::deserialize(&mut de).and_then(|_| de.end());
    checked.map_err(|e| {
        CallError::Malformed(format!(
            "the written result of tool `{tool}` is marked json but is not JSON: {e}"
        ))
    })
}

/// How deep JSON may nest: what serde_json parses (its recursion limit of 128 refuses a 128th
/// level), as for returned pieces, which keeps the host's stack safe wherever a document is
/// parsed.
const MAX_JSON_DEPTH: usize = 127;

/// The deepest nesting of arrays and objects in JSON text read from `reader` (brackets inside
/// strings do not count); whether it is JSON at all is checked apart.
fn json_depth(mut reader: impl std::io::Read) -> std::io::Result<usize> {
    let mut buf = vec![0u8; 64 << 10];
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(deepest);
        }
        for &b in &buf[..n] {
            if in_string {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
}

/// What [`Plugin::run`] gives back of a call that returned.
struct Ran<R> {
    /// What the called function returned.
    value: R,
    /// What the plugin wrote to stdout and stderr, up to the log limit, and whether some of it
    /// or of its log records were dropped.
    stderr: String,
    stderr_truncated: bool,
    /// What it wrote of its result through `result-stream`, if anything.
    written: Option<Written>,
}

/// The error of a call whose written result cannot be used.
fn written_error(broken: Broken, output_limit: u64) -> CallError {
    match broken {
        Broken::OverLimit(bytes) => CallError::LimitExceeded {
            limit: LimitKind::Output,
            detail: format!(
                "the plugin wrote a result of more than {bytes} bytes; the output limit is {}",
                format_bytes(output_limit)
            ),
        },
        Broken::Mixed => CallError::Malformed(
            "the plugin wrote its result as text and then as json (or the reverse); a written \
             result is one piece of one kind"
                .to_string(),
        ),
        Broken::Host(why) => CallError::NotKept(why),
    }
}

/// Whether `e` is the guest running out of handles: wasmtime's cap on live handles in the
/// store, or the host's resource table being full.
fn held_too_many_handles(e: &wasmtime::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<wasmtime::component::ResourceTableError>(),
            Some(wasmtime::component::ResourceTableError::Full)
        ) || cause.to_string().contains("store handle limit exceeded")
    })
}

/// The tool list a component reported, checked against the contract: valid, unique names,
/// input schemas that are JSON objects, and output schemas (from `output-schemas`) that name
/// listed tools once each and describe objects.
fn descriptors(
    raw: Vec<bindings::cordon::tool::types::ToolDescriptor>,
    outputs: Vec<bindings::outputs::tool_outputs::OutputSchema>,
) -> Result<Vec<ToolDescriptor>, CallError> {
    let mut seen = std::collections::HashSet::new();
    let mut tools = Vec::with_capacity(raw.len());
    for t in raw {
        ToolDescriptor::check_name(&t.name).map_err(CallError::Malformed)?;
        if !seen.insert(t.name.clone()) {
            return Err(CallError::Malformed(format!(
                "the tool name `{}` appears twice",
                t.name
            )));
        }
        let input_schema: serde_json::Value =
            serde_json::from_str(&t.input_schema).map_err(|e| {
                CallError::Malformed(format!(
                    "the input schema of tool `{}` is not JSON: {e}",
                    t.name
                ))
            })?;
        if !input_schema.is_object() {
            return Err(CallError::Malformed(format!(
                "the input schema of tool `{}` is not a JSON object",
                t.name
            )));
        }
        tools.push(ToolDescriptor {
            name: t.name,
            description: t.description,
            input_schema,
            hints: ToolHints {
                read_only: t.hints.read_only,
                destructive: t.hints.destructive,
                idempotent: t.hints.idempotent,
                open_world: t.hints.open_world,
            },
            output_schema: None,
        });
    }
    for output in outputs {
        let Some(tool) = tools.iter_mut().find(|t| t.name == output.tool) else {
            return Err(CallError::Malformed(format!(
                "`output-schemas` names tool `{}`, which `list-tools` does not list",
                output.tool
            )));
        };
        if tool.output_schema.is_some() {
            return Err(CallError::Malformed(format!(
                "`output-schemas` gives tool `{}` a schema twice",
                output.tool
            )));
        }
        let schema: serde_json::Value = serde_json::from_str(&output.schema).map_err(|e| {
            CallError::Malformed(format!(
                "the output schema of tool `{}` is not JSON: {e}",
                output.tool
            ))
        })?;
        if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
            return Err(CallError::Malformed(format!(
                "the output schema of tool `{}` must be a JSON object with \"type\": \"object\" \
                 (a structured result is one JSON object)",
                output.tool
            )));
        }
        tool.output_schema = Some(schema);
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::cordon::tool::types as wit;
    use bindings::outputs::tool_outputs::OutputSchema;

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        let depth = |s: &str| json_depth(s.as_bytes()).unwrap();
        assert_eq!(depth(r#"[{"a":"[[[{","b\"[":[1]}]"#), 3);
        assert_eq!(depth("1"), 0);
        assert_eq!(depth(&("[".repeat(129) + &"]".repeat(129))), 129);
        // The limit is what serde_json parses: a written piece is refused exactly where a
        // returned one is.
        let nest = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert!(serde_json::from_str::<serde_json::Value>(&nest(MAX_JSON_DEPTH)).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&nest(MAX_JSON_DEPTH + 1)).is_err());
    }

    fn tool(name: &str) -> wit::ToolDescriptor {
        wit::ToolDescriptor {
            name: name.into(),
            description: "d".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            hints: wit::ToolHints {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: false,
            },
        }
    }

    fn output(tool: &str, schema: &str) -> OutputSchema {
        OutputSchema {
            tool: tool.into(),
            schema: schema.into(),
        }
    }

    fn refused(outputs: Vec<OutputSchema>) -> String {
        match descriptors(vec![tool("a"), tool("b")], outputs) {
            Err(CallError::Malformed(why)) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn output_schemas_attach_to_the_tools_they_name() {
        let tools = descriptors(
            vec![tool("a"), tool("b")],
            vec![output("b", r#"{"type":"object","required":["n"]}"#)],
        )
        .unwrap();
        assert_eq!(tools[0].output_schema, None);
        assert_eq!(
            tools[1].output_schema,
            Some(serde_json::json!({"type": "object", "required": ["n"]}))
        );
    }

    #[test]
    fn output_schemas_that_break_the_contract_are_refused() {
        let why = refused(vec![output("c", r#"{"type":"object"}"#)]);
        assert!(
            why.contains("names tool `c`, which `list-tools` does not list"),
            "{why}"
        );
        let why = refused(vec![
            output("a", r#"{"type":"object"}"#),
            output("a", r#"{"type":"object"}"#),
        ]);
        assert!(why.contains("gives tool `a` a schema twice"), "{why}");
        let why = refused(vec![output("a", "{")]);
        assert!(
            why.contains("output schema of tool `a` is not JSON"),
            "{why}"
        );
        for not_object in [
            r#"{"type":"array"}"#,
            "{}",
            "true",
            r#"{"type":["object"]}"#,
        ] {
            let why = refused(vec![output("a", not_object)]);
            assert!(
                why.contains(r#"must be a JSON object with "type": "object""#),
                "{why}"
            );
        }
    }
}
