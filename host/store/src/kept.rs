//! Results kept apart from a session's conversation (see `cordon_agent::spill`, rule 3): a
//! tool result written as it was made, too large to hold in the conversation, stored in parts
//! (see `cordon_agent::pages`) so that a page of it reads only the parts it needs and keeping
//! it takes the memory of one part.

use cordon_agent::pages::{KeptAt, KeptPart};
use sqlx::Row;

use crate::{Store, StoreError, on_backend};

/// Bytes of results one session keeps apart at most, all together: past it a result stays in
/// the conversation as its preview only.
pub const MAX_KEPT_PER_SESSION: u64 = 1 << 30;

/// Why a keeping transaction wrote nothing.
enum Refused {
    /// This process no longer holds the session's lease.
    Lease,
    /// The session keeps this many bytes already, too many to add the result.
    Full(u64),
    /// The result could not be read from its file.
    Unreadable(std::io::Error),
}

impl Store {
    /// Keeps `parts` (`bytes` in all) as the result `id` of `session`, in place of any kept
    /// under that id before (a call run again after a resume), in one database transaction
    /// that also checks this process still holds the session's lease (a host that lost the
    /// session can never write over what the host that took it keeps) and that the session
    /// keeps no more than [`MAX_KEPT_PER_SESSION`].
    pub(crate) async fn keep_result(
        &self,
        session: &str,
        id: &str,
        bytes: u64,
        parts: &mut (dyn Iterator<Item = std::io::Result<KeptPart>> + Send),
    ) -> Result<(), StoreError> {
        const USED: &str = "SELECT coalesce(sum(length(body)), 0) AS used FROM kept_results \
                            WHERE session = $1 AND id <> $2";
        const LEASE: &str = "UPDATE sessions SET lease_until_ms = $3 \
                             WHERE id = $1 AND lease_holder = $2";
        const CLEAR: &str = "DELETE FROM kept_results WHERE session = $1 AND id = $2";
        const PART: &str = "INSERT INTO kept_results \
                            (session, id, part, byte_offset, first_line, starts_line, body) \
                            VALUES ($1, $2, $3, $4, $5, $6, $7)";
        let until = self.lease_until(cordon_core::now_ms());
        let kept = on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            let held = sqlx::query(LEASE)
                .bind(session)
                .bind(self.holder())
                .bind(until)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if held == 0 {
                return Ok(Err(Refused::Lease));
            }
            let used: i64 = sqlx::query(USED)
                .bind(session)
                .bind(id)
                .fetch_one(&mut *tx)
                .await?
                .try_get("used")?;
            if (used as u64).saturating_add(bytes) > MAX_KEPT_PER_SESSION {
                return Ok(Err(Refused::Full(used as u64)));
            }
            sqlx::query(CLEAR).bind(session).bind(id).execute(&mut *tx).await?;
            for part in &mut *parts {
                let part = match part {
                    Ok(part) => part,
                    Err(e) => return Ok(Err(Refused::Unreadable(e))),
                };
                sqlx::query(PART)
                    .bind(session)
                    .bind(id)
                    .bind(part.index as i64)
                    .bind(part.offset as i64)
                    .bind(part.first_line as i64)
                    .bind(part.starts_line)
                    .bind(part.text.into_bytes())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(Ok(()))
        }.await)
        .map_err(|e| self.failed(e))?;
        match kept {
            Ok(()) => Ok(()),
            Err(Refused::Unreadable(source)) => Err(StoreError::Unkept {
                id: id.to_string(),
                source,
            }),
            Err(Refused::Full(used)) => Err(StoreError::KeptFull {
                id: session.to_string(),
                used,
                limit: MAX_KEPT_PER_SESSION,
            }),
            Err(Refused::Lease) => Err(StoreError::LeaseLost {
                id: session.to_string(),
                holder: self
                    .session(session)
                    .await?
                    .lease
                    .map(|l| l.holder)
                    .unwrap_or_else(|| "nobody".to_string()),
            }),
        }
    }

    /// Copies the results `ids` of session `from` to session `to` (a fork of it).
    pub(crate) async fn copy_kept(
        &self,
        from: &str,
        to: &str,
        ids: &[String],
    ) -> Result<(), StoreError> {
        const COPY: &str = "INSERT INTO kept_results \
                            (session, id, part, byte_offset, first_line, starts_line, body) \
                            SELECT CAST($2 AS TEXT), id, part, byte_offset, first_line, starts_line, body \
                            FROM kept_results WHERE session = $1 AND id = $3";
        if ids.is_empty() {
            return Ok(());
        }
        on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            for id in ids {
                sqlx::query(COPY).bind(from).bind(to).bind(id).execute(&mut *tx).await?;
            }
            tx.commit().await
        }.await)
        .map_err(|e| self.failed(e))
    }

    /// The part at `at` of the result `id` of `session`; None past its end or when none is
    /// kept under `id`.
    pub(crate) async fn kept_part(
        &self,
        session: &str,
        id: &str,
        at: KeptAt,
    ) -> Result<Option<KeptPart>, StoreError> {
        const COLUMNS: &str = "SELECT part, byte_offset, first_line, starts_line, body \
                               FROM kept_results WHERE session = $1 AND id = $2";
        let (sql, n) = match at {
            KeptAt::Index(i) => (format!("{COLUMNS} AND part = $3"), i),
            KeptAt::Byte(b) => (
                format!("{COLUMNS} AND byte_offset <= $3 ORDER BY byte_offset DESC LIMIT 1"),
                b,
            ),
            // The line starts in the last part whose first line is before it, or in a part
            // that starts it.
            KeptAt::Line(l) => (
                format!(
                    "{COLUMNS} AND (first_line < $3 OR (first_line = $3 AND starts_line)) \
                     ORDER BY part DESC LIMIT 1"
                ),
                l,
            ),
        };
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let row = on_backend!(self, pool => sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(session)
            .bind(id)
            .bind(n)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| {
                Ok::<_, sqlx::Error>((
                    r.try_get::<i64, _>("part")?,
                    r.try_get::<i64, _>("byte_offset")?,
                    r.try_get::<i64, _>("first_line")?,
                    r.try_get::<bool, _>("starts_line")?,
                    r.try_get::<Vec<u8>, _>("body")?,
                ))
            }).transpose()))
        .map_err(|e| self.failed(e))?;
        let Some((index, offset, first_line, starts_line, body)) = row else {
            return Ok(None);
        };
        let text = String::from_utf8(body).map_err(|_| StoreError::Corrupt {
            id: session.to_string(),
            reason: format!("part {index} of the kept result of call `{id}` is not UTF-8"),
        })?;
        Ok(Some(KeptPart {
            index: index as u64,
            offset: offset as u64,
            first_line: first_line as u64,
            starts_line,
            text,
        }))
    }
}
