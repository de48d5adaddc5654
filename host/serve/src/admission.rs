//! Admission: what `cordon serve` takes on at once, and what it answers past that. A host
//! that queues everything without end answers nobody in time; one that answers "busy, try
//! again in N s" at once keeps the work it took on as fast as when it was idle.
//!
//! A request meets the bounds in this order (`[serve.limits]` names each):
//! 1. A connection past `max_connections` is answered `503` with `Retry-After` and closed
//!    before a byte of it is read ([`crate::connections`]).
//! 2. A connection that takes longer than `header_timeout_secs` to send a request's headers,
//!    or stays idle that long between requests, is closed; a body that takes longer than
//!    `body_timeout_secs` is refused; an answer left unread for `send_timeout_secs` closes
//!    its connection.
//! 3. A token past its rate (`requests_per_second`, `request_burst`) is answered `429` with
//!    `Retry-After`, whatever it asked for: a token that hammers a full host spends its own
//!    budget, not others' places.
//! 4. A turn past `max_turns`, or past `max_turns_per_token` for its token, is answered `503`
//!    with `Retry-After`. Its place is held by the turn itself, not by the request that
//!    started it, so a turn that goes on after its answer was sent (an API message answered
//!    before its end, a client that went away) still counts.
//! 5. An MCP tool call past `max_tool_calls` waits for a place, at most `queue_wait_secs`
//!    and behind at most `tool_call_queue` others; past either it is answered `503`.
//! 6. An MCP `initialize` past `max_mcp_sessions`, or `max_mcp_sessions_per_token`, is
//!    answered `503`.
//!
//! What takes no place in 4–6 — approvals, cancels, reads, following a session, the health
//! check — is never refused for lack of one: a host full of turns waiting for approval can
//! always be given the approvals.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_agent::ServeLimits;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a request was not taken on: what it says to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// What is full, and what to do.
    pub message: String,
    /// Whole seconds after which trying again may succeed.
    pub retry_after_secs: u64,
}

/// The bounds of one running host.
pub(crate) struct Admission {
    /// Turns of the API and the gateway.
    pub turns: Arc<Places>,
    /// MCP tool calls over HTTP.
    pub tool_calls: Arc<Places>,
    rate: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

impl Admission {
    pub fn new(limits: &ServeLimits) -> Self {
        let per_second = NonZeroU32::new(limits.requests_per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(limits.request_burst).unwrap_or(NonZeroU32::MIN);
        Admission {
            turns: Arc::new(Places {
                what: "turns",
                setting: "[serve.limits] max_turns",
                running: Arc::new(Semaphore::new(limits.max_turns)),
                max: limits.max_turns,
                per_token: limits.max_turns_per_token,
                per_token_setting: "[serve.limits] max_turns_per_token",
                queue: 0,
                waiting: AtomicUsize::new(0),
                wait: Duration::ZERO,
                by_token: Mutex::new(HashMap::new()),
            }),
            tool_calls: Arc::new(Places {
                what: "tool calls",
                setting: "[serve.limits] max_tool_calls",
                running: Arc::new(Semaphore::new(limits.max_tool_calls)),
                max: limits.max_tool_calls,
                // A token's calls share the queue with others': no share of its own.
                per_token: usize::MAX,
                per_token_setting: "",
                queue: limits.tool_call_queue,
                waiting: AtomicUsize::new(0),
                wait: Duration::from_secs(limits.queue_wait_secs),
                by_token: Mutex::new(HashMap::new()),
            }),
            rate: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
            clock: DefaultClock::default(),
        }
    }

    /// Counts one request of `token` against its rate (step 3).
    pub fn rate(&self, token: &str) -> Result<(), Refused> {
        match self.rate.check_key(&token.to_string()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(Refused {
                    message: format!(
                        "token `{token}` sent more requests than [serve.limits] \
                         requests_per_second allows; wait {} ms and try again",
                        wait.as_millis().max(1)
                    ),
                    retry_after_secs: whole_seconds(wait),
                })
            }
        }
    }
}

/// Seconds for `Retry-After`: at least 1, rounded up.
fn whole_seconds(wait: Duration) -> u64 {
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
        .max(1)
}

/// A bounded number of places for one kind of work, shared by all tokens and bounded for each.
pub(crate) struct Places {
    what: &'static str,
    setting: &'static str,
    running: Arc<Semaphore>,
    max: usize,
    per_token: usize,
    per_token_setting: &'static str,
    /// How many may wait for a place; 0: none wait.
    queue: usize,
    waiting: AtomicUsize,
    wait: Duration,
    by_token: Mutex<HashMap<String, usize>>,
}

/// A place held: given back when dropped.
pub(crate) struct Place {
    _running: OwnedSemaphorePermit,
    places: Arc<Places>,
    token: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.places.give_back(&self.token);
    }
}

/// Counts one waiter while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Places {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.by_token.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one of `token`'s places as given back, forgetting a token that holds none.
    fn give_back(&self, token: &str) {
        let mut by_token = self.counts();
        if let Some(n) = by_token.get_mut(token) {
            *n -= 1;
            if *n == 0 {
                by_token.remove(token);
            }
        }
    }

    /// How many places are taken now.
    #[cfg(test)]
    pub fn taken(&self) -> usize {
        self.max - self.running.available_permits()
    }

    /// A place for `token`'s work: at once if one is free, else after waiting in the queue
    /// (if it has room), else refused.
    pub async fn take(self: &Arc<Self>, token: &str) -> Result<Place, Refused> {
        // The token's share first: a token at its share is refused without waiting, so
        // it cannot fill the queue either.
        {
            let mut by_token = self.counts();
            let held = by_token.entry(token.to_string()).or_insert(0);
            if *held >= self.per_token {
                return Err(self.refused(format!(
                    "token `{token}` already runs {held} {}, as many as one token may ({})",
                    self.what, self.per_token_setting
                )));
            }
            *held += 1;
        }
        // From here the count is given back by the `Place`, or below if none is had.
        let permit = match self.running.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) => self.queued().await,
        };
        match permit {
            Ok(permit) => Ok(Place {
                _running: permit,
                places: self.clone(),
                token: token.to_string(),
            }),
            Err(refused) => {
                self.give_back(token);
                Err(refused)
            }
        }
    }

    async fn queued(&self) -> Result<OwnedSemaphorePermit, Refused> {
        let full = || {
            self.refused(format!(
                "{} {} run at once, as many as {} allows",
                self.max, self.what, self.setting
            ))
        };
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(full());
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(self.wait, self.running.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a timeout is the only way here.
            Ok(Err(_)) | Err(_) => Err(full()),
        }
    }

    fn refused(&self, why: String) -> Refused {
        Refused {
            message: format!("the host is busy: {why}; try again shortly, or raise the limit"),
            retry_after_secs: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_turns: usize, per_token: usize) -> ServeLimits {
        ServeLimits {
            max_turns,
            max_turns_per_token: per_token,
            max_tool_calls: 1,
            tool_call_queue: 1,
            queue_wait_secs: 1,
            requests_per_second: 1,
            request_burst: 2,
            ..ServeLimits::default()
        }
    }

    #[tokio::test]
    async fn places_are_refused_past_the_bound_and_given_back_when_dropped() {
        let admission = Admission::new(&limits(2, 2));
        let a = admission.turns.take("a").await.unwrap();
        let _b = admission.turns.take("b").await.unwrap();
        let refused = admission.turns.take("c").await.err().unwrap();
        assert!(refused.message.contains("max_turns"), "{}", refused.message);
        assert_eq!(refused.retry_after_secs, 1);
        assert_eq!(admission.turns.taken(), 2);
        drop(a);
        assert_eq!(admission.turns.taken(), 1);
        admission.turns.take("c").await.unwrap();
        // The refused token's count was given back too.
        assert!(admission.turns.counts().get("c").is_none());
    }

    #[tokio::test]
    async fn one_token_gets_its_share_and_others_still_get_places() {
        let admission = Admission::new(&limits(4, 2));
        let _a1 = admission.turns.take("a").await.unwrap();
        let _a2 = admission.turns.take("a").await.unwrap();
        let refused = admission.turns.take("a").await.err().unwrap();
        assert!(
            refused.message.contains("max_turns_per_token"),
            "{}",
            refused.message
        );
        admission.turns.take("b").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_call_waits_in_a_bounded_queue_for_a_bounded_time() {
        let admission = Admission::new(&limits(1, 1));
        let calls = admission.tool_calls.clone();
        let first = calls.take("a").await.unwrap();
        // One may wait; it gets the place when the first is given back.
        let waiter = {
            let calls = calls.clone();
            tokio::spawn(async move { calls.take("a").await.map(|_| ()) })
        };
        tokio::task::yield_now().await;
        // The queue is full: the next is refused at once.
        let refused = calls.take("b").await.err().unwrap();
        assert!(
            refused.message.contains("max_tool_calls"),
            "{}",
            refused.message
        );
        drop(first);
        waiter.await.unwrap().unwrap();
        // With nothing given back, a waiter is refused after `queue_wait_secs`.
        let _held = calls.take("a").await.unwrap();
        let started = tokio::time::Instant::now();
        assert!(calls.take("b").await.is_err());
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[test]
    fn a_token_past_its_rate_is_told_when_to_come_back() {
        let admission = Admission::new(&limits(1, 1));
        admission.rate("a").unwrap();
        admission.rate("a").unwrap();
        let refused = admission.rate("a").unwrap_err();
        assert!(
            refused.message.contains("requests_per_second"),
            "{}",
            refused.message
        );
        assert_eq!(refused.retry_after_secs, 1);
        // Another token has its own budget.
        admission.rate("b").unwrap();
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(10)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
    }
}
