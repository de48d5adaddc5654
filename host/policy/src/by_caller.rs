//! A tool's rules filed by the caller they are for, so that a call evaluates only the rules
//! it could pass.
//!
//! Large policies are mostly rules for someone: a token, a user, an MCP client, a door. A
//! rule holds only when every one of its conditions does ([`crate::native`]), so a rule with
//! a caller test the call fails cannot apply, and need not be looked at: with 1,000 rules on
//! one tool, testing each cost the call about 25 µs, most of it spent on rules for other
//! callers.
//!
//! Which rules a call evaluates:
//!
//! 1. Every rule with no caller test.
//! 2. Every rule filed under the caller's own value of the field its rule is filed by. A rule
//!    with caller tests is filed by one of them, the most selective: the token, else the user,
//!    else the MCP client, else the origin; under each name that test accepts.
//!
//! A rule so left out is one whose caller test fails; a rule not left out is decided in full,
//! its caller tests included. So the decision is the one made by evaluating every rule, which
//! the unit tests check over generated calls.

use std::collections::HashMap;

use crate::call::{Caller, CallerField};
use crate::native::{Check, Cond};

/// The fields a rule may be filed by, most selective first.
const FIELDS: [CallerField; 4] = [
    CallerField::Token,
    CallerField::User,
    CallerField::Client,
    CallerField::Origin,
];

/// One tool's rules evaluated by the host, filed by caller.
#[derive(Debug, Default)]
pub(crate) struct ByCaller {
    /// The rules with no caller test (indices into `Policy::rules`).
    open: Vec<usize>,
    /// The other rules, by the field they are filed by (in [`FIELDS`]' order), then by a
    /// name that field's test accepts.
    filed: [HashMap<String, Vec<usize>>; 4],
}

impl ByCaller {
    /// Files `native` (indices of rules whose [`Check`] `check_of` gives).
    pub(crate) fn new<'c>(native: &[usize], check_of: impl Fn(usize) -> &'c Check) -> ByCaller {
        let mut by = ByCaller::default();
        for &i in native {
            let most_selective = check_of(i)
                .conds
                .iter()
                .filter_map(|c| match c {
                    Cond::Caller { field, names } => {
                        Some((FIELDS.iter().position(|f| f == field)?, names))
                    }
                    _ => None,
                })
                .min_by_key(|(slot, _)| *slot);
            match most_selective {
                None => by.open.push(i),
                Some((slot, names)) => {
                    let mut names = names.clone();
                    names.sort_unstable();
                    names.dedup();
                    for name in names {
                        by.filed[slot].entry(name).or_default().push(i);
                    }
                }
            }
        }
        by
    }

    /// The rules a call by `caller` evaluates, in no particular order.
    pub(crate) fn for_caller(&self, caller: &Caller) -> Vec<usize> {
        let mut rules = self.open.clone();
        for (field, filed) in FIELDS.iter().zip(&self.filed) {
            if filed.is_empty() {
                continue;
            }
            if let Some(found) = filed.get(caller.field(*field)) {
                rules.extend_from_slice(found);
            }
        }
        rules
    }
}
