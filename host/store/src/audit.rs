//! The audit log: append a record, query records. There is no way to change or remove one.

use cordon_core::{AuditEntry, AuditRecord};
use serde::Serialize;
use sqlx::Row;

use crate::{Store, StoreError, on_backend};

/// Which records to return; every filter is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this session's.
    pub session: Option<String>,
    /// Only calls of this tool (its own name, or `plugin.tool`).
    pub tool: Option<String>,
    /// Only records at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Only `tool_call` or `home_change` records.
    pub kind: Option<String>,
    /// Only records after this id (to page through, or to follow new records).
    pub after_id: Option<i64>,
    /// Only records of calls of turns asked for with this token (its name).
    pub requested_by: Option<String>,
    /// Only records of calls decided by someone or something whose description contains
    /// this, whatever the case (a token's name, `policy`, `terminal`): the same on both
    /// backends, whose `LIKE` differ in case.
    pub decided_by: Option<String>,
    /// At most this many, the newest (default 100).
    pub limit: Option<i64>,
}

/// A record as stored, with its id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredAudit {
    /// Its position in the log.
    pub id: i64,
    /// The record.
    #[serde(flatten)]
    pub record: AuditRecord,
}

/// Records per statement: both backends bound the number of parameters (ten a record).
pub(crate) const PER_STATEMENT: usize = 100;

/// The columns of a record, in the order [`insert_sql`] takes them.
const COLUMNS: usize = 10;

/// One statement inserting `n` records, in order: `$10i+1`…`$10i+10` the `i`th record's
/// columns.
pub(crate) fn insert_sql(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let cols: Vec<String> = (1..=COLUMNS)
                .map(|c| format!("${}", COLUMNS * i + c))
                .collect();
            format!("({})", cols.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO audit (at_ms, kind, origin, session, tool, plugin, outcome, requested_by, \
         decided_by, record) VALUES {}",
        rows.join(", ")
    )
}

/// Counts the tool calls of records now on record, for `/metrics`.
pub(crate) fn count(records: &[AuditRecord]) {
    for record in records {
        if let AuditEntry::ToolCall(call) = &record.entry {
            cordon_core::metrics::tool_call(call);
        }
    }
}

/// The statement inserting `$rows` (a slice of [`AuditRow`]s, at most [`PER_STATEMENT`]).
macro_rules! insert_audit_rows {
    ($rows:expr) => {{
        let mut query = sqlx::query(sqlx::AssertSqlSafe($crate::audit::insert_sql($rows.len())));
        for row in $rows {
            query = query
                .bind(row.at_ms)
                .bind(row.kind)
                .bind(&row.origin)
                .bind(&row.session)
                .bind(&row.tool)
                .bind(&row.plugin)
                .bind(&row.outcome)
                .bind(&row.requested_by)
                .bind(&row.decided_by)
                .bind(&row.json);
        }
        query
    }};
}
pub(crate) use insert_audit_rows;

impl Store {
    /// Appends one record.
    pub async fn append_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        self.append_audits(std::slice::from_ref(record)).await
    }

    /// Appends records in order, in one database transaction: all or none. Up to
    /// [`PER_STATEMENT`] records go in one statement, so a batch holds the database for
    /// one round trip rather than one a record.
    pub async fn append_audits(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let rows: Vec<AuditRow> = records.iter().map(AuditRow::of).collect();
        let result = match rows.len() {
            0 => Ok(()),
            n if n <= PER_STATEMENT => {
                on_backend!(self, pool => insert_audit_rows!(&rows).execute(pool).await.map(|_| ()))
            }
            _ => on_backend!(self, pool => async {
                let mut tx = pool.begin().await?;
                for chunk in rows.chunks(PER_STATEMENT) {
                    insert_audit_rows!(chunk).execute(&mut *tx).await?;
                }
                tx.commit().await
            }
            .await),
        };
        result.map_err(|e| self.failed(e))?;
        count(records);
        Ok(())
    }

    /// The newest records matching `query`, oldest first.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<StoredAudit>, StoreError> {
        let sql = "SELECT id, record FROM audit \
                   WHERE (CAST($1 AS TEXT) IS NULL OR session = $1) \
                     AND (CAST($2 AS TEXT) IS NULL OR tool = $2 OR plugin || '.' || tool = $2) \
                     AND (CAST($3 AS BIGINT) IS NULL OR at_ms >= $3) \
                     AND (CAST($4 AS TEXT) IS NULL OR kind = $4) \
                     AND (CAST($5 AS BIGINT) IS NULL OR id > $5) \
                     AND (CAST($7 AS TEXT) IS NULL OR requested_by = $7) \
                     AND (CAST($8 AS TEXT) IS NULL OR LOWER(decided_by) LIKE LOWER($8) ESCAPE '\\') \
                   ORDER BY id DESC LIMIT $6";
        let limit = query.limit.unwrap_or(100).clamp(1, 10_000);
        // `decided_by` is found anywhere in the column, `%` and `_` in it as themselves.
        let decided = query.decided_by.as_ref().map(|d| {
            let escaped = d
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let rows = on_backend!(self, pool => sqlx::query(sql)
            .bind(&query.session)
            .bind(&query.tool)
            .bind(query.since_ms)
            .bind(&query.kind)
            .bind(query.after_id)
            .bind(limit)
            .bind(&query.requested_by)
            .bind(&decided)
            .fetch_all(pool)
            .await
            .and_then(|rows| rows.iter().map(|r| Ok((r.try_get::<i64, _>("id")?, r.try_get::<String, _>("record")?))).collect::<Result<Vec<_>, sqlx::Error>>()))
        .map_err(|e| self.failed(e))?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, json) in rows.into_iter().rev() {
            match serde_json::from_str(&json) {
                Ok(record) => out.push(StoredAudit { id, record }),
                // A record this version cannot read is skipped, not fatal: the log outlives
                // versions of Cordon.
                Err(e) => tracing::warn!(id, "cannot read audit record {id}: {e}"),
            }
        }
        Ok(out)
    }
}

/// The columns of one audit record.
pub(crate) struct AuditRow {
    pub(crate) at_ms: i64,
    pub(crate) kind: &'static str,
    pub(crate) origin: String,
    pub(crate) session: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) plugin: Option<String>,
    pub(crate) outcome: Option<String>,
    pub(crate) requested_by: Option<String>,
    pub(crate) decided_by: Option<String>,
    pub(crate) json: String,
}

impl AuditRow {
    pub(crate) fn of(record: &AuditRecord) -> Self {
        let (kind, session, tool, plugin, outcome) = match &record.entry {
            AuditEntry::ToolCall(call) => (
                "tool_call",
                call.session.clone(),
                Some(call.tool.clone()),
                Some(call.plugin.clone()),
                Some(call.outcome.label().to_string()),
            ),
            AuditEntry::HomeChange(change) => (
                "home_change",
                None,
                None,
                Some(change.plugin.clone()),
                Some(change.action.clone()),
            ),
        };
        let (requested_by, decided_by) = match &record.entry {
            AuditEntry::ToolCall(call) => (
                call.requested_by.as_ref().map(|r| r.token.clone()),
                Some(call.decided_by.clone()),
            ),
            AuditEntry::HomeChange(_) => (None, None),
        };
        Self {
            at_ms: record.at_ms,
            kind,
            origin: record.origin.clone(),
            session,
            tool,
            plugin,
            outcome,
            requested_by,
            decided_by,
            // Plain data with string keys: serialising cannot fail.
            json: serde_json::to_string(record).unwrap_or_default(),
        }
    }
}
