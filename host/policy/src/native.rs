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

use crate::engine::Call;
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
    /// The counter `name` is at least `at_least`.
    Calls { name: String, at_least: u64 },
    /// The local minute of the day is in `[from, to)`, wrapping past midnight when
    /// `from > to`.
    Hours { from: u32, to: u32 },
    /// The local weekday is one of these (bit 0 is Monday).
    Days(u8),
}

/// Where an argument is: its property names, and its number among the paths the policy's
/// rules read ([`ArgPath::number`]), so a call looks each up once however many rules test it.
#[derive(Debug, Clone)]
pub(crate) struct ArgPath {
    pub names: Vec<String>,
    pub number: usize,
}

/// The regular expressions a tool's rules test one argument with, as one set: a call scans
/// the argument once for all of them.
#[derive(Debug, Default)]
pub(crate) struct RegexSets {
    sets: Vec<(RegexSet, Vec<usize>)>,
    /// The set of each regular expression, by its number; `None` where it is tested alone.
    set_of: Vec<Option<usize>>,
}

impl RegexSets {
    /// Sets of the regular expressions of `checks` that test the same argument.
    pub(crate) fn of<'a>(checks: impl IntoIterator<Item = &'a Check>, count: usize) -> RegexSets {
        let mut by_path: std::collections::BTreeMap<usize, Vec<(&Regex, usize)>> =
            Default::default();
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
        let mut sets = RegexSets {
            sets: Vec::new(),
            set_of: vec![None; count],
        };
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
            for (_, n) in &regexes {
                if let Some(slot) = sets.set_of.get_mut(*n) {
                    *slot = Some(sets.sets.len());
                }
            }
            sets.sets
                .push((set, regexes.into_iter().map(|(_, n)| n).collect()));
        }
        sets
    }
}

/// The arguments of one call, each path looked up once, each set of regular expressions
/// scanned once.
pub(crate) struct Arguments<'v> {
    args: &'v Value,
    found: Vec<Option<Option<&'v Value>>>,
    regex_sets: Option<&'v RegexSets>,
    matched: Vec<Option<bool>>,
}

impl<'v> Arguments<'v> {
    /// The arguments `args`, where the policy's rules read `paths` different paths, and
    /// test with `regex_sets` (the tool's).
    pub(crate) fn new(args: &'v Value, paths: usize, regex_sets: Option<&'v RegexSets>) -> Self {
        Arguments {
            args,
            found: vec![None; paths],
            regex_sets,
            matched: Vec::new(),
        }
    }

    /// Whether regular expression `n`, `re`, matches `text` (the argument its set tests).
    fn regex_matches(&mut self, n: usize, re: &Regex, text: &str) -> bool {
        if let Some(Some(hit)) = self.matched.get(n) {
            return *hit;
        }
        let Some(sets) = self.regex_sets else {
            return re.is_match(text);
        };
        let Some(Some(i)) = sets.set_of.get(n) else {
            return re.is_match(text);
        };
        let (set, numbers) = &sets.sets[*i];
        let hits = set.matches(text);
        if self.matched.is_empty() {
            self.matched = vec![None; sets.set_of.len()];
        }
        for (k, number) in numbers.iter().enumerate() {
            self.matched[*number] = Some(hits.matched(k));
        }
        self.matched[n].unwrap_or(false)
    }

    pub(crate) fn get(&mut self, path: &ArgPath) -> Option<&'v Value> {
        let args = self.args;
        match self.found.get_mut(path.number) {
            Some(slot) => *slot.get_or_insert_with(|| lookup(args, &path.names)),
            None => lookup(args, &path.names),
        }
    }
}

/// Which part of the caller a test reads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallerField {
    Origin,
    Token,
    User,
    Client,
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

/// The local time of a call, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moment {
    pub minute_of_day: u32,
    /// 0 is Monday.
    pub weekday: u8,
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
    pub(crate) fn holds(
        &self,
        call: &Call<'_>,
        args: &mut Arguments<'_>,
        moment: Option<Moment>,
    ) -> bool {
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
                let value = match field {
                    CallerField::Origin => &call.caller.origin,
                    CallerField::Token => &call.caller.token,
                    CallerField::User => &call.caller.user,
                    CallerField::Client => &call.caller.client,
                };
                names.iter().any(|n| n == value)
            }
            Cond::Approved { tool, wanted } => call.session.approved.contains(tool) == *wanted,
            Cond::Labels(labels) => labels.iter().all(|l| call.session.labels.contains(l)),
            Cond::Calls { name, at_least } => {
                call.counts.get(name).copied().unwrap_or(0) >= *at_least
            }
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

/// The value at `path` below `args`, if there is one.
fn lookup<'v>(args: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut here = args;
    for part in path {
        here = here.as_object()?.get(part)?;
    }
    Some(here)
}

/// Whether `value` has the type `ty`, as [`ArgType::value`] converts it.
pub(crate) fn fits(value: &Value, ty: &ArgType) -> bool {
    match (ty, value) {
        (ArgType::String, Value::String(_)) | (ArgType::Bool, Value::Bool(_)) => true,
        (ArgType::Long, Value::Number(n)) => n.as_i64().is_some(),
        (ArgType::Decimal, Value::Number(n)) => schema::decimal_units(n).is_some(),
        (ArgType::Set(item), Value::Array(items)) => items.iter().all(|v| fits(v, item)),
        (ArgType::Record(_), Value::Object(_)) => true,
        _ => false,
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
    fn holds(&self, value: &Value, ty: &ArgType, args: &mut Arguments<'_>) -> bool {
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
            ArgCheck::Path(glob, unplaceable) => match crate::compile::normalised(text()) {
                Some(path) => glob.is_match(path.as_ref()),
                None => *unplaceable,
            },
        }
    }
}

/// The literal pieces of a `glob` test between its wildcards: `*` is the only wildcard, and
/// `\*` a literal star (as Cedar's `like`).
pub(crate) fn like_pieces(pattern: &str) -> Vec<String> {
    let mut pieces = vec![String::new()];
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'*') => {
                chars.next();
                pieces.last_mut().expect("never empty").push('*');
            }
            '*' => pieces.push(String::new()),
            c => pieces.last_mut().expect("never empty").push(c),
        }
    }
    pieces
}

/// A `like` pattern, compiled: literal pieces between wildcards, the inner ones with a
/// precomputed substring searcher.
#[derive(Debug, Clone)]
pub(crate) struct Like {
    first: String,
    /// `None` when the pattern has no wildcard: the text must equal `first`.
    rest: Option<(Vec<memchr::memmem::Finder<'static>>, String)>,
}

impl Like {
    /// The pattern whose literal `pieces` are separated by wildcards.
    pub(crate) fn new(mut pieces: Vec<String>) -> Like {
        if pieces.len() < 2 {
            return Like {
                first: pieces.pop().unwrap_or_default(),
                rest: None,
            };
        }
        let last = pieces.pop().expect("two or more");
        let first = pieces.remove(0);
        let middle = pieces
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| memchr::memmem::Finder::new(p.as_bytes()).into_owned())
            .collect();
        Like {
            first,
            rest: Some((middle, last)),
        }
    }

    /// Whether `text` matches.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let Some((middle, last)) = &self.rest else {
            return text == self.first;
        };
        let Some(left) = text.as_bytes().strip_prefix(self.first.as_bytes()) else {
            return false;
        };
        let mut left = left;
        for finder in middle {
            match finder.find(left) {
                Some(at) => left = &left[at + finder.needle().len()..],
                None => return false,
            }
        }
        left.ends_with(last.as_bytes())
    }
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
    fn like_patterns_match_as_cedar_like_does() {
        let m = |pattern: &str, text: &str| Like::new(like_pieces(pattern)).matches(text);
        assert!(m("INSERT INTO orders *", "INSERT INTO orders VALUES (1)"));
        assert!(!m("INSERT INTO orders *", "insert into orders"));
        assert!(m("*tmp*", "/x/tmp/y"));
        assert!(m("a*b*c", "abc"));
        assert!(m("a*b*c", "aXbYbZc"));
        assert!(!m("a*b*c", "acb"));
        assert!(!m("ab*ba", "aba"));
        assert!(m("*", ""));
        assert!(m("", ""));
        assert!(!m("", "x"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("é*ß", "éxyzß"));
    }

    #[test]
    fn weekdays_become_bits() {
        assert_eq!(day_bits(&["mon".into(), "sun".into()]), 0b100_0001);
    }
}
