//! Questions about tool calls that wait in the store for an answer: asked by a host without a
//! web API of its own (`cordon mcp` on stdio, whose client cannot ask its user), by an MCP
//! client's call over HTTP, and by sessions' turns in `cordon serve`; answered by whoever
//! can reach the store first — any `cordon serve` on the store (its approvals API and
//! console), or `cordon approve`. The store is the one place an answer is taken: it is
//! written once, by a conditional update, and a second answer is told who gave the first.
//! The asker learns of it through [`Store::wait_for_answer`].

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
    /// The token the client authenticated with over HTTP (none: on stdio), or whose turn
    /// caused a session's call: who needs `approve:own` to answer it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The session whose turn asks, and the call (none: an MCP client's call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionCall>,
    /// The call (tool, arguments, grants, why it asks).
    pub request: ApprovalRequest,
    /// When it was asked (ms since the epoch).
    pub asked_ms: i64,
    /// When it is denied if nobody answers.
    pub expires_ms: i64,
}

/// The session and call a turn's question is about, and who may see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionCall {
    /// The session.
    pub session: String,
    /// The call's id in the session.
    pub call_id: String,
    /// The token that created the session (none: created at the terminal): who may see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// What asking about a session's call found.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// The question waits for an answer.
    Waiting(Box<ApprovalWaiting>),
    /// A person answered this very question (the same call of the session, with the same
    /// request) while no turn waited for it (the host that asked died, or the store was
    /// away): the answer, now taken.
    Answered(GivenAnswer),
}

/// Why a question was withdrawn when its call was asked about again.
const ASKED_AGAIN: &str = "the call was asked about again";

/// How long answered and expired questions are kept before the next question clears them.
const KEEP_DONE_MS: i64 = 24 * 60 * 60 * 1000;

/// The columns a question is read from, in [`waiting_from`]'s order.
const WAITING_COLUMNS: &str =
    "id, asked_by, client, token, request, asked_ms, expires_ms, session, call_id, owner";

/// A question read with [`WAITING_COLUMNS`]; none when its request cannot be read (written
/// by a later version).
fn waiting_from<R>(r: &R) -> Result<Option<ApprovalWaiting>, sqlx::Error>
where
    R: Row,
    usize: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let request: String = r.try_get(4)?;
    let Ok(request) = serde_json::from_str(&request) else {
        return Ok(None);
    };
    let session: Option<String> = r.try_get(7)?;
    let call_id: Option<String> = r.try_get(8)?;
    Ok(Some(ApprovalWaiting {
        id: r.try_get(0)?,
        asked_by: r.try_get(1)?,
        client: r.try_get(2)?,
        token: r.try_get(3)?,
        request,
        asked_ms: r.try_get(5)?,
        expires_ms: r.try_get(6)?,
        session: session.zip(call_id).map(|(session, call_id)| SessionCall {
            session,
            call_id,
            owner: r.try_get(9).ok().flatten(),
        }),
    }))
}

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
        match self
            .put_question(client, token, None, request, timeout_ms)
            .await?
        {
            Asked::Waiting(waiting) => Ok(*waiting),
            // Only a session's question finds an earlier answer.
            Asked::Answered(_) => unreachable!("an MCP client's question is always new"),
        }
    }

    /// Records the question a turn of `session` asks about `request` (its call id in the
    /// session), to be answered within `timeout_ms`; `owner` created the session and `token`
    /// asked for the turn. In the same transaction, a question about the same call asked
    /// before (by a host that died, or that stopped when the store went away):
    /// - answered by a person and not taken by any turn, with the same request: its answer is
    ///   this question's (and is taken);
    /// - else, still open: it is withdrawn, so the call is asked about once, by the host that
    ///   drives it now.
    pub async fn ask_session_approval(
        &self,
        session: &str,
        owner: Option<&str>,
        token: Option<&str>,
        request: &ApprovalRequest,
        timeout_ms: i64,
    ) -> Result<Asked, StoreError> {
        let call = SessionCall {
            session: session.to_string(),
            call_id: request.call_id.clone(),
            owner: owner.map(str::to_string),
        };
        self.put_question(
            &format!("session {session}"),
            token,
            Some(call),
            request,
            timeout_ms,
        )
        .await
    }

    async fn put_question(
        &self,
        client: &str,
        token: Option<&str>,
        session: Option<SessionCall>,
        request: &ApprovalRequest,
        timeout_ms: i64,
    ) -> Result<Asked, StoreError> {
        let now = cordon_core::now_ms();
        let waiting = ApprovalWaiting {
            id: hex::encode(rand::random::<[u8; 12]>()),
            asked_by: self.holder().to_string(),
            client: client.to_string(),
            token: token.map(str::to_string),
            request: request.clone(),
            asked_ms: now,
            expires_ms: now.saturating_add(timeout_ms),
            session,
        };
        let clear = "DELETE FROM approvals WHERE expires_ms < $1";
        // Asked within a day, answered, and received by no turn: a withdrawal is received by
        // its asker as it is written, so only a person's answer is found.
        let unheard = "SELECT id, answer FROM approvals WHERE session = $1 AND call_id = $2 \
                       AND request = $3 AND answer IS NOT NULL AND taken_ms IS NULL \
                       AND asked_ms > $4 ORDER BY answered_ms DESC LIMIT 1";
        let take = "UPDATE approvals SET taken_ms = $2 WHERE id = $1 AND taken_ms IS NULL";
        let withdraw = "UPDATE approvals SET answer = $3, answered_ms = $4, taken_ms = $4 \
                        WHERE session = $1 AND call_id = $2 AND answer IS NULL";
        let insert = "INSERT INTO approvals \
                      (id, asked_by, client, token, request, asked_ms, expires_ms, session, \
                      call_id, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
        let request_json = serde_json::to_string(request).unwrap_or_default();
        let asked_again = serde_json::to_string(&GivenAnswer::new(
            ApprovalAnswer::Refused {
                reason: ASKED_AGAIN.to_string(),
            },
            format!("nobody (asked again by {})", self.holder()),
        ))
        .unwrap_or_default();
        let call = waiting.session.as_ref();
        let result = on_backend!(self, pool => async {
            let mut tx = pool.begin().await?;
            sqlx::query(clear).bind(now - KEEP_DONE_MS).execute(&mut *tx).await?;
            if let Some(call) = call {
                // Withdrawn first: an answer to the open question committed before this is
                // found below; one after it waits for this transaction, finds the question
                // answered, and follows the answer to the question asked now.
                sqlx::query(withdraw)
                    .bind(&call.session)
                    .bind(&call.call_id)
                    .bind(&asked_again)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let found = sqlx::query(unheard)
                    .bind(&call.session)
                    .bind(&call.call_id)
                    .bind(&request_json)
                    .bind(now - KEEP_DONE_MS)
                    .fetch_optional(&mut *tx)
                    .await?
                    .map(|r| Ok::<_, sqlx::Error>((r.try_get::<String, _>(0)?, r.try_get::<String, _>(1)?)))
                    .transpose()?;
                if let Some((id, answer)) = found
                    && let Ok(answer) = serde_json::from_str::<GivenAnswer>(&answer)
                {
                    // Taken once: of two hosts asking at once, one takes it.
                    let taken = sqlx::query(take).bind(&id).bind(now).execute(&mut *tx).await?;
                    if taken.rows_affected() == 1 {
                        tx.commit().await?;
                        return Ok(Some(answer));
                    }
                }
            }
            sqlx::query(insert)
                .bind(&waiting.id)
                .bind(&waiting.asked_by)
                .bind(&waiting.client)
                .bind(&waiting.token)
                .bind(&request_json)
                .bind(waiting.asked_ms)
                .bind(waiting.expires_ms)
                .bind(call.map(|c| c.session.as_str()))
                .bind(call.map(|c| c.call_id.as_str()))
                .bind(call.and_then(|c| c.owner.as_deref()))
                .execute(&mut *tx)
                .await?;
            tx.commit().await.map(|()| None)
        }.await);
        match result.map_err(|e| self.failed(e))? {
            Some(answer) => Ok(Asked::Answered(answer)),
            None => Ok(Asked::Waiting(Box::new(waiting))),
        }
    }

    /// The turn that asked question `id` received its answer: no later question about the
    /// same call takes it.
    pub async fn took_answer(&self, id: &str) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE approvals SET taken_ms = $2 WHERE id = $1 AND taken_ms IS NULL";
        let now = cordon_core::now_ms();
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(now)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(|e| self.failed(e))
    }

    /// The last question a turn of `session` asked about call `call_id`, answered or not
    /// (answering it says which), if there is one.
    pub async fn session_approval(
        &self,
        session: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalWaiting>, StoreError> {
        let sql = format!(
            "SELECT {WAITING_COLUMNS} FROM approvals WHERE session = $1 AND call_id = $2 \
             ORDER BY asked_ms DESC, answer IS NULL DESC LIMIT 1"
        );
        on_backend!(self, pool => sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
            .bind(session)
            .bind(call_id)
            .fetch_optional(pool)
            .await
            .and_then(|row| row.map(|r| waiting_from(&r)).transpose()))
        .map(Option::flatten)
        .map_err(|e| self.failed(e))
    }

    /// The answer to question `id`, once there is one.
    pub async fn approval_answer(&self, id: &str) -> Result<Option<GivenAnswer>, StoreError> {
        let text = self.approval_column(id, "answer", "").await?;
        Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// Whose MCP client's question `id` is: the token its client authenticated with (none:
    /// asked over stdio). An unknown question is an error, as answering it would be; so is
    /// the id of a session's question, which is answered by its session and call.
    pub async fn approval_token(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.approval_column(id, "token", " AND session IS NULL")
            .await
    }

    /// One nullable text column of question `id` (a question `only` further narrows); an
    /// unknown question is an error.
    async fn approval_column(
        &self,
        id: &str,
        column: &'static str,
        only: &'static str,
    ) -> Result<Option<String>, StoreError> {
        let sql = format!("SELECT {column} FROM approvals WHERE id = $1{only}");
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
        let sql = format!(
            "SELECT {WAITING_COLUMNS} FROM approvals WHERE answer IS NULL AND expires_ms > $1 \
             ORDER BY asked_ms, id LIMIT 1000"
        );
        let now = cordon_core::now_ms();
        let rows = on_backend!(self, pool => {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.as_str())).bind(now).fetch_all(pool).await;
            rows.and_then(|rows| rows.iter().map(waiting_from).collect::<Result<Vec<_>, sqlx::Error>>())
        })
        .map_err(|e| self.failed(e))?;
        Ok(rows.into_iter().flatten().collect())
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
    /// The withdrawal and its receipt are one statement: it is never taken for a person's
    /// answer. An answer given before it stays for the asker to read ([`Store::took_answer`]
    /// once it has).
    pub async fn withdraw_approval(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE approvals SET answer = $2, answered_ms = $3, taken_ms = $3 \
                           WHERE id = $1 AND answer IS NULL";
        let withdrawn = serde_json::to_string(&GivenAnswer::new(
            ApprovalAnswer::Refused {
                reason: reason.to_string(),
            },
            format!("nobody ({reason})"),
        ))
        .unwrap_or_default();
        let now = cordon_core::now_ms();
        on_backend!(self, pool => sqlx::query(SQL)
            .bind(id)
            .bind(&withdrawn)
            .bind(now)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(|e| self.failed(e))
    }

    /// Whether question `id` was closed because its call was asked about again (by the host
    /// that drives the session now): an answer to it then belongs to the question asked now.
    pub async fn asked_again(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.approval_answer(id).await?.is_some_and(
            |a| matches!(a.answer, ApprovalAnswer::Refused { ref reason } if reason == ASKED_AGAIN),
        ))
    }
}
