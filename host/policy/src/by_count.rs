//! A tool's rules whose only test is a count, grouped by the count they read, so that a call
//! looks each count up once rather than once for each rule.
//!
//! "Ask after 20 writes an hour" is a rule with one `calls` condition and nothing else; a
//! policy may have many on one tool (the 1,000-rule benchmark policy has 60 on its tool), and
//! most read one of a few counts: the tool's or its plugin's calls over an hour, a day, the
//! session. Each such rule has a counter of its own, but counters of the same kind of key
//! over the same window read the same count, which the store counts once
//! ([`crate::Policy::counters_for`]).
//!
//! Which of these rules apply to a call:
//!
//! 1. With counts answered for the tool's own query of the group's count ([`crate::counts_of`]
//!    of `counters_for` of this tool under this policy, known by the very list of counter
//!    numbers the query carries), every counter of the group has that count: it is looked up
//!    once, and the rules whose threshold it reaches apply, found by their thresholds in
//!    ascending order.
//! 2. With counts given otherwise (by name: `policy explain --count`, a rule's examples, a
//!    count added to since; or answered for another tool's queries), counters of one group
//!    may differ, so each rule looks up its own.
//!
//! A rule with any other test (a caller, a time, a `when`) is not here: it is filed by caller
//! and evaluated in full ([`crate::by_caller`]). A `calls` condition cannot fail to be
//! evaluated (an unknown count reads 0), so a rule here applies exactly when its count
//! reaches its threshold, as its full evaluation says; the unit tests compare the two.

use std::sync::Arc;

use crate::counts::{CounterRef, Counts};
use crate::native::{Check, Cond};

/// One tool's rules tested only on a count, by the count they read.
#[derive(Debug, Default)]
pub(crate) struct ByCount {
    groups: Vec<Group>,
}

/// Rules reading one count, by ascending threshold.
#[derive(Debug)]
struct Group {
    /// The numbers of the counters the tool's query of this count carries (see
    /// [`crate::counts::ToolCounting::read_of`]).
    count: Arc<[u32]>,
    /// Each rule's threshold, index into `Policy::rules`, and counter.
    rules: Vec<(u64, usize, CounterRef)>,
}

impl ByCount {
    /// The rules of `native` that test nothing but a count, grouped by the tool's query of
    /// the count their counter reads (`count_of`), and the other rules (those whose counter
    /// it gives no query for among them).
    pub(crate) fn split<'c>(
        native: &[usize],
        check_of: impl Fn(usize) -> &'c Check,
        count_of: impl Fn(&CounterRef) -> Option<Arc<[u32]>>,
    ) -> (ByCount, Vec<usize>) {
        let mut by = ByCount::default();
        let mut rest = native.to_vec();
        rest.retain(|&i| {
            let check = check_of(i);
            let (Some(c), None, None) = (counted_only(check), &check.when, &check.expr) else {
                return true;
            };
            let (counter, at_least) = c;
            let Some(count) = count_of(counter) else {
                return true;
            };
            let at = match by.groups.iter().position(|g| Arc::ptr_eq(&g.count, &count)) {
                Some(at) => at,
                None => {
                    by.groups.push(Group {
                        count,
                        rules: Vec::new(),
                    });
                    by.groups.len() - 1
                }
            };
            by.groups[at].rules.push((at_least, i, counter.clone()));
            false
        });
        for g in &mut by.groups {
            g.rules.sort_by_key(|(at_least, i, _)| (*at_least, *i));
        }
        (by, rest)
    }

    /// Calls `apply` with each of these rules that applies to a call with `counts` (in no
    /// particular order).
    pub(crate) fn applying(&self, counts: &Counts, mut apply: impl FnMut(usize)) {
        for g in &self.groups {
            if let Some(n) = counts.answer_to(&g.count) {
                g.rules
                    .iter()
                    .take_while(|(at_least, ..)| *at_least <= n)
                    .for_each(|(_, i, _)| apply(*i));
            } else {
                g.rules
                    .iter()
                    .filter(|(at_least, _, counter)| counts.of(counter).unwrap_or(0) >= *at_least)
                    .for_each(|(_, i, _)| apply(*i));
            }
        }
    }
}

/// The counter and threshold of a check whose only condition is a count.
fn counted_only(check: &Check) -> Option<(&CounterRef, u64)> {
    match check.conds.as_slice() {
        [Cond::Calls { counter, at_least }] => Some((counter, *at_least)),
        _ => None,
    }
}
