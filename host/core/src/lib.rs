//! Shared vocabulary of Cordon: grants, limits, the capability ceiling of a component and the
//! tool types that mirror `wit/tool.wit`.
//!
//! This crate has no WebAssembly dependency so that the home, the CLI and the agent can reason
//! about capabilities without linking wasmtime. It is the one place where capability decisions
//! are made: the runtime only translates the decisions taken here into a WASI context.
//!
//! Cordon targets Unix hosts: paths are handled with Unix semantics (`/` separators, symlinks),
//! and Windows drive letters or UNC paths are not given any meaning.

mod audit;
mod ceiling;
mod grant;
pub mod labels;
mod limits;
mod marks;
pub mod metrics;
mod reserved;
mod schema;
mod stamp;
mod tool;
mod tool_edits;
pub mod trace;
mod written;

pub use audit::{
    AuditEntry, AuditRecord, CallOutcome, CallReport, HomeChangeAudit, MAX_GRANTS_WANTED,
    MAX_REFUSALS_RECORDED, Requester, SAID_LACKED, ToolCallAudit, arguments_sha256, local_user,
    now_ms,
};
/// The plugin name of the tools Cordon provides itself (`cordon.read_result`): no installed
/// plugin may take it, so rules, answers and audit records never mix the two.
pub const BUILT_IN_PLUGIN: &str = "cordon";

pub use ceiling::{CAPABILITY_IMPORTS, Capability, Ceiling, CeilingError};
pub use grant::{
    FsGrant, FsMode, Grant, GrantError, Grants, HttpOrigin, HttpScheme, MAX_CONFIG_KEY_BYTES,
    valid_config_key,
};
pub use labels::{Exposure, Label, LabelSource, RuleOfTwo, SessionLabels, rule_of_two};
pub use limits::{
    LimitError, LimitKind, Limits, format_bytes, format_bytes_rounded, format_duration,
    parse_bytes, parse_duration,
};
pub use marks::Marks;
pub use reserved::{
    FileId, Relation, ReservedAddressOverlap, ReservedKind, ReservedOverlap, ReservedPaths,
};
pub use schema::{CompiledSchema, SchemaError, SchemaViolations};
pub use stamp::{
    BadStamp, CompiledPin, DigestCheck, DigestRecord, FileStamp, replace_file,
    replace_file_stamped, verify_file_digest,
};
pub use tool::{
    Content, MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES, MAX_TOOL_NAME_BYTES, ProvenHints,
    ToolDescriptor, ToolError, ToolErrorKind, ToolHints, tools_hash,
};
pub use tool_edits::{ToolEditError, ToolEdits, ToolText};
pub use written::{Written, WrittenReader};
