//! The tests of a `cordon.toml` rule, evaluated by the host.
//!
//! Each rule is compiled twice: to Cedar text, which is validated against the tools' schema,
//! hashed into the policy's digest and kept as the reference; and to the [`Check`] here, which
//! decides calls. Cedar's authorizer rebuilds and interprets every policy's condition for each
//! request, which costs microseconds per rule; a [`Check`] is a list of comparisons compiled
//! once, costing nanoseconds. A rule's `when`, and a Cedar file's policy, are evaluated here
//! too when they are in the subset of Cedar of [`crate::subset`]; Cedar evaluates the others.
//!
//! The two forms must agree. Every example a rule carries is decided both ways when the policy
//! loads ([`crate::Policy::load`]) and a disagreement refuses the policy; the unit tests
//! compare them over generated calls.
//!
//! How a [`Check`] decides, mirroring the Cedar text it was compiled with:
//!
//! 1. Its **reach** tests (`can_change`, `writes`, `network`) depend on the tool alone, so they
//!    are settled when the policy loads: a rule whose reach tests fail for a tool is not among
//!    that tool's rules at all.
//! 2. Its **conditions** must all hold, tested in the order written. An argument is present
//!    only when its value has the type the tool's schema gives it (as `context.input` leaves
//!    out a value of another type); a test on an absent argument fails.
//! 3. Then its **`when`**, if any: by the host when it is in the subset (an [`Expr`]), else
//!    by Cedar. A `when` that cannot be evaluated (an argument the call lacks, an overflow)
//!    makes a deny or ask rule apply, as everywhere.

use cedar_policy::Expression;
use globset::GlobMatcher;
use regex::{Regex, RegexSet};
use serde_json::Value;

use crate::call::{ArgPath, Arguments, Call, CallerField, Like, Moment, RegexSets, fits};
use crate::schema::{self, ArgType};
use crate::subset::{Expr, Scope};

/// A rule's tests, compiled for the host.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// Tests of what the tool's grants reach: `(what, wanted)`.
    pub reach: Vec<(ReachTest, bool)>,
    /// Tests of the call, all of which must hold.
    pub conds: Vec<Cond>,
    /// The rule's `when`, evaluated by Cedar once `conds` hold, when it is not in the subset
    /// the host evaluates.
    pub when: Option<When>,
    /// The rule's `when`, or a Cedar file policy's conditions, in the subset of Cedar the
    /// host evaluates itself, once `conds` hold.
    pub expr: Option<Expr>,
}

/// A rule's `when` condition.
#[derive(Debug, Clone)]
pub(crate) struct When {
    /// As written, for finding what of the context it reads.
    pub text: String,
    /// Parsed once, evaluated as an expression: no policy set, no scope to rebuild.
    pub expr: Expression,
}

/// What a reach test looks at.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReachTest {
    /// `can_change`: anything could be changed or sent.
    CanChange,
    /// `writes`: some path is granted read-write.
    Writes,
    /// `network`: some origin is granted.
    Network,
}

/// One test of a call.
#[derive(Debug, Clone)]
pub(crate) enum Cond {
    /// The argument at `path`, of type `ty`, is present and passes every test.
    Arg {
        path: ArgPath,
        ty: ArgType,
        tests: Vec<ArgCheck>,
    },
    /// The argument at `path` is absent (`present = false`).
    Absent { path: ArgPath, ty: ArgType },
    /// The caller's `field` is one of `names`.
    Caller {
        field: CallerField,
        names: Vec<String>,
    },
    /// Whether a human approved a call of `tool` in this session is `wanted`.
    Approved { tool: String, wanted: bool },
    /// The session carries every one of these labels.
    Labels(Vec<String>),
    /// The counter is at least `at_least`.
    Calls {
        counter: crate::counts::CounterRef,
        at_least: u64,
    },
    /// The local minute of the day is in `[from, to)`, wrapping past midnight when
    /// `from > to`.
    Hours { from: u32, to: u32 },
    /// The local weekday is one of these (bit 0 is Monday).
    Days(u8),
}

/// A value an argument is compared with, in the type the argument has.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Str(String),
    Long(i64),
    Bool(bool),
    /// A `decimal`, in ten-thousandths.
    Dec(i64),
}

/// One test of an argument's value.
#[derive(Debug, Clone)]
pub(crate) enum ArgCheck {
    Equals(Scalar),
    In(Vec<Scalar>),
    NotIn(Vec<Scalar>),
    Min(Scalar),
    Max(Scalar),
    Prefix(String),
    Suffix(String),
    /// A `like` pattern.
    Like(Like),
    /// A regular expression, and its number among the policy's (set at load).
    Regex(Regex, usize),
    /// A path pattern; and whether a path that cannot be placed counts as matching.
    Path(GlobMatcher, bool),
}

impl Check {
    /// Whether the reach tests hold for a tool reaching `reach`.
    pub(crate) fn fits(&self, reach: &schema::Reach) -> bool {
        self.reach.iter().all(|(test, wanted)| {
            let has = match test {
                ReachTest::CanChange => reach.can_change,
                ReachTest::Writes => !reach.read_write.is_empty(),
                ReachTest::Network => !reach.network.is_empty(),
            };
            has == *wanted
        })
    }

    /// Whether any condition reads the time.
    pub(crate) fn reads_time(&self) -> bool {
        self.conds
            .iter()
            .any(|c| matches!(c, Cond::Hours { .. } | Cond::Days(_)))
            || self.expr.as_ref().is_some_and(Expr::reads_time)
    }

    /// Whether the rule holds for `call` with nothing left to test: no condition, no `when`.
    pub(crate) fn unconditional(&self) -> bool {
        self.conds.is_empty() && self.when.is_none() && self.expr.is_none()
    }

    /// Whether the conditions hold and then the host-evaluated `expr` does (an error when it
    /// cannot be evaluated). The Cedar `when`, if any, is left to the caller.
    pub(crate) fn applies<'v>(
        &'v self,
        call: &'v Call<'v>,
        args: &mut Arguments<'v>,
        moment: Option<Moment>,
    ) -> Result<bool, String> {
        if !self.holds(call, args, moment) {
            return Ok(false);
        }
        match &self.expr {
            None => Ok(true),
            Some(e) => e.eval(&mut Scope { call, args, moment }),
        }
    }

    /// Whether every condition holds for `call` at `moment` (which is given whenever
    /// [`Check::reads_time`]).
    fn holds(&self, call: &Call<'_>, args: &mut Arguments<'_>, moment: Option<Moment>) -> bool {
        self.conds.iter().all(|c| c.holds(call, args, moment))
    }

    /// Numbers its regular expressions with `next`.
    pub(crate) fn number_regexes(&mut self, next: &mut usize) {
        for c in &mut self.conds {
            if let Cond::Arg { tests, .. } = c {
                for t in tests {
                    if let ArgCheck::Regex(_, n) = t {
                        *n = *next;
                        *next += 1;
                    }
                }
            }
        }
    }

    /// Numbers the counters it reads.
    pub(crate) fn number_counters(&mut self, f: &mut dyn FnMut(&mut crate::counts::CounterRef)) {
        for c in &mut self.conds {
            if let Cond::Calls { counter, .. } = c {
                f(counter);
            }
        }
        if let Some(e) = &mut self.expr {
            e.counters_mut(f);
        }
    }

    /// Numbers the argument paths it reads.
    pub(crate) fn number_paths(&mut self, f: &mut dyn FnMut(&mut ArgPath)) {
        for c in &mut self.conds {
            if let Cond::Arg { path, .. } | Cond::Absent { path, .. } = c {
                f(path);
            }
        }
        if let Some(e) = &mut self.expr {
            e.paths_mut(f);
        }
    }
}

impl Cond {
    fn holds(&self, call: &Call<'_>, args: &mut Arguments<'_>, moment: Option<Moment>) -> bool {
        match self {
            Cond::Arg { path, ty, tests } => match args.get(path).filter(|v| fits(v, ty)) {
                Some(v) => tests.iter().all(|t| t.holds(v, ty, args)),
                None => false,
            },
            Cond::Absent { path, ty } => !args.get(path).is_some_and(|v| fits(v, ty)),
            Cond::Caller { field, names } => {
                let value = call.caller.field(*field);
                names.iter().any(|n| n == value)
            }
            Cond::Approved { tool, wanted } => call.session.approved.contains(tool) == *wanted,
            Cond::Labels(labels) => labels.iter().all(|l| call.session.labels.contains(l)),
            Cond::Calls { counter, at_least } => call.counts.of(counter).unwrap_or(0) >= *at_least,
            Cond::Hours { from, to } => moment.is_some_and(|m| {
                let at = m.minute_of_day;
                if from <= to {
                    at >= *from && at < *to
                } else {
                    at >= *from || at < *to
                }
            }),
            Cond::Days(days) => moment.is_some_and(|m| days & (1 << m.weekday) != 0),
        }
    }
}

/// `value` (which fits `ty`) as a scalar, for comparisons.
fn scalar(value: &Value, ty: &ArgType) -> Option<Scalar> {
    Some(match (ty, value) {
        (ArgType::String, Value::String(s)) => Scalar::Str(s.clone()),
        (ArgType::Long, Value::Number(n)) => Scalar::Long(n.as_i64()?),
        (ArgType::Decimal, Value::Number(n)) => Scalar::Dec(schema::decimal_units(n)?),
        (ArgType::Bool, Value::Bool(b)) => Scalar::Bool(*b),
        _ => return None,
    })
}

/// Whether a scalar argument equals `want`, without copying strings.
fn equals(value: &Value, ty: &ArgType, want: &Scalar) -> bool {
    match (want, value) {
        (Scalar::Str(w), Value::String(s)) => w == s,
        (Scalar::Bool(w), Value::Bool(b)) => w == b,
        _ => scalar(value, ty).as_ref() == Some(want),
    }
}

impl ArgCheck {
    pub(crate) fn holds(&self, value: &Value, ty: &ArgType, args: &mut Arguments<'_>) -> bool {
        let text = || value.as_str().unwrap_or_default();
        match self {
            ArgCheck::Equals(want) => equals(value, ty, want),
            ArgCheck::In(items) => items.iter().any(|w| equals(value, ty, w)),
            ArgCheck::NotIn(items) => !items.iter().any(|w| equals(value, ty, w)),
            ArgCheck::Min(bound) | ArgCheck::Max(bound) => {
                let min = matches!(self, ArgCheck::Min(_));
                match (scalar(value, ty), bound) {
                    (Some(Scalar::Long(v)), Scalar::Long(b))
                    | (Some(Scalar::Dec(v)), Scalar::Dec(b)) => {
                        if min {
                            v >= *b
                        } else {
                            v <= *b
                        }
                    }
                    _ => false,
                }
            }
            ArgCheck::Prefix(p) => text().starts_with(p.as_str()),
            ArgCheck::Suffix(s) => text().ends_with(s.as_str()),
            ArgCheck::Like(pattern) => pattern.matches(text()),
            ArgCheck::Regex(re, n) => args.regex_matches(*n, re, text()),
            ArgCheck::Path(glob, unplaceable) => match crate::call::normalised(text()) {
                Some(path) => glob.is_match(path.as_ref()),
                None => *unplaceable,
            },
        }
    }
}

/// Sets of the regular expressions of `checks` (a tool's rules, `count` regular expressions
/// in the whole policy) that test the same argument.
pub(crate) fn regex_sets<'a>(
    checks: impl IntoIterator<Item = &'a Check>,
    count: usize,
) -> RegexSets {
    let mut by_path: std::collections::BTreeMap<usize, Vec<(&Regex, usize)>> = Default::default();
    for check in checks {
        for c in &check.conds {
            if let Cond::Arg { path, tests, .. } = c {
                for t in tests {
                    if let ArgCheck::Regex(re, n) = t {
                        by_path.entry(path.number).or_default().push((re, *n));
                    }
                }
            }
        }
    }
    let mut sets = RegexSets::new(count);
    for (_, mut regexes) in by_path {
        regexes.sort_by_key(|(_, n)| *n);
        regexes.dedup_by_key(|(_, n)| *n);
        if regexes.len() < 2 {
            continue;
        }
        // Each compiled alone; a set too large to compile leaves them so.
        let Ok(set) = RegexSet::new(regexes.iter().map(|(re, _)| re.as_str())) else {
            continue;
        };
        sets.add(set, regexes.into_iter().map(|(_, n)| n).collect());
    }
    sets
}

/// Bits of the weekdays in `days` (three-letter names, `mon` first).
pub(crate) fn day_bits(days: &[String]) -> u8 {
    const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    days.iter()
        .filter_map(|d| DAYS.iter().position(|x| x == d))
        .fold(0, |bits, i| bits | (1 << i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weekdays_become_bits() {
        assert_eq!(day_bits(&["mon".into(), "sun".into()]), 0b100_0001);
    }
}
