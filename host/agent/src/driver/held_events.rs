//! What a turn shows, held back until the transition before it is recorded (see
//! [`Agent::commit`](super::Agent)), and work that stops when the host suspends turns.

use tokio_util::sync::CancellationToken;

use super::Frontend;
use crate::conversation::Conversation;
use crate::machine::AgentEvent;

/// A turn's frontend, holding back what the turn shows until the transition before it is
/// recorded (see [`Agent::commit`]). Shared by the record and the model request, which run
/// together on the turn's task, so the lock is never contended for long.
pub(super) struct HeldEvents<'f> {
    inner: std::sync::Mutex<Held<'f>>,
}

struct Held<'f> {
    frontend: &'f mut dyn Frontend,
    /// What waits for the record, in order; `None` once it is written.
    waiting: Option<Vec<Shown>>,
}

/// One thing a turn shows.
enum Shown {
    Event(Box<AgentEvent>),
    /// Saving the conversation.
    Persist,
}

impl<'f> HeldEvents<'f> {
    pub(super) fn new(frontend: &'f mut dyn Frontend) -> Self {
        Self {
            inner: std::sync::Mutex::new(Held {
                frontend,
                waiting: Some(Vec::new()),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<'f>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows `event`, or keeps it until the record is written.
    pub(super) fn event(&self, event: &AgentEvent) {
        let mut held = self.lock();
        match &mut held.waiting {
            Some(waiting) => waiting.push(Shown::Event(Box::new(event.clone()))),
            None => held.frontend.event(event),
        }
    }

    /// Saves the conversation once the record is written (it is, before anything is shown).
    pub(super) fn persist_when_recorded(&self) {
        if let Some(waiting) = &mut self.lock().waiting {
            waiting.push(Shown::Persist);
        }
    }

    /// The record is written: what waited is shown, in order, and what follows goes
    /// straight through.
    pub(super) fn release(&self, conv: &Conversation) {
        let mut held = self.lock();
        let Held { frontend, waiting } = &mut *held;
        for shown in waiting.take().unwrap_or_default() {
            match shown {
                Shown::Event(event) => frontend.event(&event),
                Shown::Persist => frontend.persist(conv),
            }
        }
    }
}

/// Runs `work` unless `suspend` fires first (`None` then; the work is dropped).
pub(super) async fn until_suspended<T>(
    suspend: Option<&CancellationToken>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    match suspend {
        None => Some(work.await),
        Some(token) => tokio::select! {
            biased;
            _ = token.cancelled() => None,
            out = work => Some(out),
        },
    }
}
