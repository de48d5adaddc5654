//! What makes a conversation durable and accountable: the driver hands every transition of the
//! state machine, and every tool call it settles, to a [`Journal`] — the transition before it
//! performs the actions the transition produced. A journal that keeps both in a store therefore
//! holds, at any moment, the state from which the conversation can go on, and never a state
//! whose effects were performed but not recorded.

use async_trait::async_trait;
use cordon_core::AuditRecord;
use serde::{Deserialize, Serialize};

use crate::conversation::Conversation;
use crate::machine::Event;
use crate::pages::{KeptAt, KeptPart};

/// Why the conversation changed: what a journal records beside the new conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Cause {
    /// The state machine applied an event.
    Event {
        /// The event.
        event: Event,
    },
    /// A conversation stopped in the middle of a turn was taken up again (calls that were
    /// running are closed as interrupted; see [`crate::machine::resume`]).
    Resume,
}

/// A journal that could not record: the turn stops without performing what it was about to.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Another host now drives the session (its lease on the session expired and was taken):
    /// this one must stop driving it at once.
    #[error(
        "session `{session}` is now driven by another host ({holder}); this host stopped driving it"
    )]
    LeaseLost {
        /// The session.
        session: String,
        /// Who holds it now.
        holder: String,
    },
    /// The store did not take the record (unreachable, full, failing).
    #[error("the session store did not record the change: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Where a driven conversation records itself; see the module docs.
#[async_trait]
pub trait Journal: Send {
    /// The conversation after one transition, and its cause. Called before any action of the
    /// transition is performed; an error stops the turn there.
    async fn transition(
        &mut self,
        conversation: &Conversation,
        cause: &Cause,
    ) -> Result<(), JournalError>;

    /// One tool call for the audit log: after it ran (with what the sandbox reported), or when
    /// it was settled without running.
    async fn audit(&mut self, record: AuditRecord) -> Result<(), JournalError>;

    /// A transition and the audit records of the calls it settled (a result came, a call was
    /// denied, cancelled or closed as interrupted). A journal that can records them as one:
    /// then a call never has its result recorded without its record, nor a record of its result
    /// and a second one saying it was interrupted when the host stopped in between. This one
    /// writes the records, then the transition.
    async fn transition_audited(
        &mut self,
        conversation: &Conversation,
        cause: &Cause,
        audits: Vec<AuditRecord>,
    ) -> Result<(), JournalError> {
        for record in audits {
            self.audit(record).await?;
        }
        self.transition(conversation, cause).await
    }

    /// How many earlier calls each policy counter holds (see [`cordon_policy::CountQuery`]),
    /// in the order asked. A journal with no store counts only what this process added.
    async fn count_calls(
        &mut self,
        queries: &[cordon_policy::CountQuery],
    ) -> Result<Vec<u64>, JournalError> {
        Ok(vec![0; queries.len()])
    }

    /// Calls that run: add one to each policy counter `keys` names, for each time it is
    /// named, at minute `minute` (minutes since the Unix epoch).
    async fn add_calls(&mut self, keys: &[String], minute: i64) -> Result<(), JournalError> {
        let _ = (keys, minute);
        Ok(())
    }

    /// Calls about to be decided: add them to the counters `adds` names at `minute` and
    /// answer `queries` as [`Journal::count_calls`] would have just before, so that calls
    /// decided at once elsewhere see each other (see the store's `reserve_calls`).
    async fn reserve_calls(
        &mut self,
        adds: &[cordon_policy::Reservation],
        queries: &[cordon_policy::CountQuery],
        minute: i64,
    ) -> Result<Vec<u64>, JournalError> {
        let _ = (adds, minute);
        self.count_calls(queries).await
    }

    /// Takes back what [`Journal::reserve_calls`] added at `minute` for calls that did not
    /// run or that a counter does not count after all.
    async fn release_calls(&mut self, keys: &[String], minute: i64) -> Result<(), JournalError> {
        let _ = (keys, minute);
        Ok(())
    }

    /// Keeps a written tool result apart from the conversation, in parts (see
    /// [`crate::pages`]), under `id` (Cordon's id of the call, unique in the conversation);
    /// see [`crate::spill`]. Its line count once kept; None when the journal keeps no results
    /// (the conversation then holds the result whole).
    async fn keep_result(
        &mut self,
        id: &str,
        written: &cordon_core::Written,
    ) -> Result<Option<u64>, JournalError> {
        let _ = (id, written);
        Ok(None)
    }

    /// The part at `at` of the result kept under `id`; None past its end, or when no result
    /// is kept under `id`.
    async fn kept_part(&mut self, id: &str, at: KeptAt) -> Result<Option<KeptPart>, JournalError> {
        let _ = (id, at);
        Ok(None)
    }

    /// Whether every transition is recorded before its actions are performed, so that a
    /// conversation taken up from the journal knows which calls never started (a session
    /// store's journal). False for journals that keep nothing, or a file saved now and then.
    fn records_every_transition(&self) -> bool {
        false
    }

    /// Driving is over for now: give up what the journal holds (a session's lease) so that
    /// another host or command may drive the conversation at once.
    async fn close(&mut self) -> Result<(), JournalError> {
        Ok(())
    }
}

/// A journal that keeps nothing: for conversations that live only in memory (tests, embedders
/// with no store).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoJournal;

#[async_trait]
impl Journal for NoJournal {
    async fn transition(&mut self, _: &Conversation, _: &Cause) -> Result<(), JournalError> {
        Ok(())
    }

    async fn audit(&mut self, _: AuditRecord) -> Result<(), JournalError> {
        Ok(())
    }
}
