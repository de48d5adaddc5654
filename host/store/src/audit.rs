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

/// Records per statement: both backends bound the number of parameters (eight a record).
pub(crate) const PER_STATEMENT: usize = 100;

/// One statement inserting `n` records, in order: `$8i+1`…`$8i+8` the `i`th record's columns.
pub(crate) fn insert_sql(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let cols: Vec<String> = (1..=8).map(|c| format!("${}", 8 * i + c)).collect();
            format!("({})", cols.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO audit (at_ms, kind, origin, session, tool, plugin, outcome, record) VALUES {}",
        rows.join(", ")
    )
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
        result.map_err(|e| self.failed(e))
    }

    /// The newest records matching `query`, oldest first.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<StoredAudit>, StoreError> {
        let sql = "SELECT id, record FROM audit \
                   WHERE (CAST($1 AS TEXT) IS NULL OR session = $1) \
                     AND (CAST($2 AS TEXT) IS NULL OR tool = $2 OR plugin || '.' || tool = $2) \
                     AND (CAST($3 AS BIGINT) IS NULL OR at_ms >= $3) \
                     AND (CAST($4 AS TEXT) IS NULL OR kind = $4) \
                     AND (CAST($5 AS BIGINT) IS NULL OR id > $5) \
                   ORDER BY id DESC LIMIT $6";
        let limit = query.limit.unwrap_or(100).clamp(1, 10_000);
        let rows = on_backend!(self, pool => sqlx::query(sql)
            .bind(&query.session)
            .bind(&query.tool)
            .bind(query.since_ms)
            .bind(&query.kind)
            .bind(query.after_id)
            .bind(limit)
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
        Self {
            at_ms: record.at_ms,
            kind,
            origin: record.origin.clone(),
            session,
            tool,
            plugin,
            outcome,
            // Plain data with string keys: serialising cannot fail.
            json: serde_json::to_string(record).unwrap_or_default(),
        }
    }
}
