//! Questions about tool calls that wait in the store for an answer: asked by a host without a
//! web API of its own (`cordon mcp` on stdio, whose client cannot ask its user), answered by
//! whoever can reach the store first — `cordon serve`'s approvals API and console, or
//! `cordon approve`. The answer is written once; a second answer is told who gave the first.

use cordon_agent::{ApprovalAnswer, ApprovalRequest, GivenAnswer};
use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::{Store, StoreError, on_backend};

/// The name under which `cordon serve` lists questions waiting in the store, where it lists
/// a session's name for its own; not a valid session name, so the two never meet.
pub const WAITING_APPROVALS_SESSION: &str = "mcp:";

/// One question waiting in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalWaiting {
    /// Its random id: what an answer names.
    pub id: String,
    /// The process that asked (its lease-holder name).
    pub asked_by: String,
    /// The client the call came from, as it named itself.
    pub client: String,
    /// The token the client authenticated with over HTTP (none: on stdio): whose question it
    /// is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The call (tool, arguments, grants, why it asks).
    pub request: ApprovalRequest,
    /// When it was asked (ms since the epoch).
    pub asked_ms: i64,
    /// When it is denied if nobody answers.
    pub expires_ms: i64,
}

/// How long answered and expired questions are kept before the next question clears them.
const KEEP_DONE_MS: i64 = 24 * 60 * 60 * 1000;

impl Store {
    /// Records a question about `request` from `client` (with `token`, over HTTP), to be
    /// answered within `timeout_ms`; clears questions done for more than a day.
    pub async fn ask_approval(
        &self,
        client: &str,
        token: Option<&str>,
        request: &ApprovalRequest,
        timeout_ms: i64,
    ) -> Result<ApprovalWaiting, StoreError> {
        let now = cordon_core::now_ms();
        let waiting = ApprovalWaiting {
            id: hex::encode(rand::random::<[u8; 12]>()),
            asked_by: self.holder().to_string(),
            client: client.to_string(),
            token: token.map(str::to_string),
            request: request.clone(),
            asked_ms: now,
            expires_ms: now + timeout_ms,
        };
        let clear = "DELETE FROM approvals WHERE expires_ms < $1";
        let insert = "INSERT INTO approvals \
                      (id, asked_by, client, token, request, asked_ms, expires_ms) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7)";
        let request_json = serde_json::to_string(request).unwrap_or_default();
        let result = on_backend!(self, pool => {
            let cleared = sqlx::query(clear).bind(now - KEEP_DONE_MS).execute(pool).await;
            match cleared {
                Err(e) => Err(e),
                Ok(_) => sqlx::query(insert)
                    .bind(&waiting.id)
                    .bind(&waiting.asked_by)
                    .bind(&waiting.client)
                    .bind(&waiting.token)
                    .bind(&request_json)
                    .bind(waiting.asked_ms)
                    .bind(waiting.expires_ms)
                    .execute(pool)
                    .await
                    .map(|_| ()),
            }
        });
        result.map_err(|e| self.failed(e))?;
        Ok(waiting)
    }

    /// The answer to question `id`, once there is one.
    pub async fn approval_answer(&self, id: &str) -> Result<Option<GivenAnswer>, StoreError> {
        let text = self.approval_column(id, "answer").await?;
        Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// Whose question `id` is: the token its client authenticated with (none: asked over
    /// stdio). An unknown question is an error, as answering it would be.
    pub async fn approval_token(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.approval_column(id, "token").await
    }

    /// One nullable text column of question `id`; an unknown question is an error.
    async fn approval_column(
        &self,
        id: &str,
        column: &'static str,
    ) -> Result<Option<String>, StoreError> {
        let sql = format!("SELECT {column} FROM approvals WHERE id = $1");
        let row: Option<Option<String>> =
            on_backend!(self, pool => sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(id)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| r.try_get::<Option<String>, _>(0)).transpose()))
            .map_err(|e| self.failed(e))?;
        row.ok_or_else(|| StoreError::UnknownApproval { id: id.to_string() })
    }

    /// The questions nobody has answered yet and that have not expired, oldest first.
    pub async fn waiting_approvals(&self) -> Result<Vec<ApprovalWaiting>, StoreError> {
        let sql = "SELECT id, asked_by, client, token, request, asked_ms, expires_ms FROM approvals \
                   WHERE answer IS NULL AND expires_ms > $1 ORDER BY asked_ms, id LIMIT 1000";
        let now = cordon_core::now_ms();
        let rows = on_backend!(self, pool => {
            let rows = sqlx::query(sql).bind(now).fetch_all(pool).await;
            rows.and_then(|rows| rows.iter().map(|r| Ok((
                r.try_get::<String, _>(0)?,
                r.try_get::<String, _>(1)?,
                r.try_get::<String, _>(2)?,
                r.try_get::<Option<String>, _>(3)?,
                r.try_get::<String, _>(4)?,
                r.try_get::<i64, _>(5)?,
                r.try_get::<i64, _>(6)?,
            ))).collect::<Result<Vec<_>, sqlx::Error>>())
        })
        .map_err(|e| self.failed(e))?;
        Ok(rows
            .into_iter()
            .filter_map(
                |(id, asked_by, client, token, request, asked_ms, expires_ms)| {
                    Some(ApprovalWaiting {
                        id,
                        asked_by,
                        client,
                        token,
                        request: serde_json::from_str(&request).ok()?,
                        asked_ms,
                        expires_ms,
                    })
                },
            )
            .collect())
    }

    /// Answers question `id`, if nobody has and it has not expired.
    pub async fn answer_approval(&self, id: &str, answer: &GivenAnswer) -> Result<(), StoreError> {
        let now = cordon_core::now_ms();
        let sql = "UPDATE approvals SET answer = $2, answered_ms = $3 \
                   WHERE id = $1 AND answer IS NULL AND expires_ms > $3";
        let text = serde_json::to_string(answer).unwrap_or_default();
        let updated = on_backend!(self, pool => sqlx::query(sql)
            .bind(id)
            .bind(&text)
            .bind(now)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| self.failed(e))?;
        if updated == 1 {
            return Ok(());
        }
        match self.approval_answer(id).await? {
            Some(earlier) => Err(StoreError::ApprovalAnswered {
                id: id.to_string(),
                earlier: format!("{} by {}", earlier.answer.as_str(), earlier.by),
            }),
            None => Err(StoreError::ApprovalExpired { id: id.to_string() }),
        }
    }

    /// Closes question `id` unanswered (the asker stopped waiting: the call was cancelled or
    /// timed out), so a late answer is told so instead of being taken.
    pub async fn withdraw_approval(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        let withdrawn = GivenAnswer::new(
            ApprovalAnswer::Refused {
                reason: reason.to_string(),
            },
            format!("nobody ({reason})"),
        );
        match self.answer_approval(id, &withdrawn).await {
            Ok(())
            | Err(StoreError::ApprovalAnswered { .. } | StoreError::ApprovalExpired { .. }) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
