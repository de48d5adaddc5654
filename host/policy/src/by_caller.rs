//! A tool's rules filed by the caller they are for, so that a call evaluates only the rules
//! it could pass.
//!
//! Large policies are mostly rules for someone: a token, a user, an MCP client, a door. A
//! rule holds only when every one of its conditions does ([`crate::native`]), so a rule with
//! a caller test the call fails cannot apply, and need not be looked at: with 1,000 rules on
//! one tool, testing each cost the call about 25 µs, most of it spent on rules for other
//! callers.
//!
//! Which rules a call evaluates (of those filed here: rules tested only on a count are not,
//! see [`crate::by_count`]):
//!
//! 1. Every rule with no caller test.
//! 2. Every rule filed under the caller's own value of the field its rule is filed by. A rule
//!    with caller tests is filed by one of them, the most selective: the token, else the user,
//!    else the MCP client, else the origin; under each name that test accepts. Its caller
//!    tests are its `token`/`user`/`client`/`origin` conditions and the leading caller
//!    comparisons of its host-evaluated `when` (those it makes before anything in it can
//!    fail, see `Expr::leading_caller_tests`).
//!
//! A rule so left out is one whose caller test fails; a rule not left out is decided in full,
//! its caller tests included. So the decision is the one made by evaluating every rule, which
//! the unit tests check over generated calls.

use std::collections::HashMap;

use crate::call::{Caller, CallerField};
use crate::native::{Check, Cond};
use crate::subset::Expr;

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
    /// Files `native` (indices of rules whose [`Check`] `check_of` gives: the tool's rules
    /// but those tested only on a count).
    pub(crate) fn new<'c>(native: &[usize], check_of: impl Fn(usize) -> &'c Check) -> ByCaller {
        let mut by = ByCaller::default();
        for &i in native {
            let check = check_of(i);
            let leading = check
                .expr
                .as_ref()
                .map(Expr::leading_caller_tests)
                .unwrap_or_default();
            let most_selective = check
                .conds
                .iter()
                .filter_map(|c| match c {
                    Cond::Caller { field, names } => Some((*field, names)),
                    _ => None,
                })
                .chain(leading.iter().map(|(field, names)| (*field, names)))
                .filter_map(|(field, names)| {
                    Some((FIELDS.iter().position(|f| *f == field)?, names))
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
    pub(crate) fn for_caller(&self, caller: &Caller) -> Filed<'_> {
        let mut filed = Filed([&self.open, &[], &[], &[], &[]]);
        for ((field, by_name), slot) in FIELDS.iter().zip(&self.filed).zip(&mut filed.0[1..]) {
            if !by_name.is_empty()
                && let Some(found) = by_name.get(caller.field(*field))
            {
                *slot = found;
            }
        }
        filed
    }
}

/// Rules a call evaluates, as the lists they are filed in (not copied: a call of a tool with
/// 1,000 rules would copy hundreds of indices).
pub(crate) struct Filed<'a>(pub(crate) [&'a [usize]; 5]);

impl Filed<'_> {
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().flat_map(|rules| rules.iter().copied())
    }
}
