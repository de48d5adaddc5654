//! The part of Cedar the host evaluates itself: the conditions rules are mostly written with.
//!
//! A rule's `when`, and a Cedar file's policy, are Cedar expressions. Evaluating them in Cedar
//! means building a Cedar request for the call (converting its arguments, caller, session and
//! time into Cedar values), which costs microseconds before the first policy is looked at.
//! Most conditions only compare what the call carries with literals, so they are lowered here,
//! from Cedar's own parse of them (its JSON form), into an [`Expr`] the host evaluates directly.
//! Anything outside this subset — entities, `in`, `is`, arithmetic, `if`, records, extension
//! functions (`decimal`, `ip`), `resource` — stays with Cedar. The subset:
//!
//! 1. Literals: strings, integers, booleans, and sets of them on the left of `contains`.
//! 2. `context.caller.{origin,token,user,client}`, `context.time.{hour,minute,minute_of_day,
//!    weekday}`, `context.calls.NAME`, and `context.input.a.b` when every tool the rule may
//!    apply to gives that argument the same string, integer or boolean type.
//! 3. `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||`, `!`, `like`, `has` on `context.input`
//!    (or an object argument), `[literals].contains(x)`, and
//!    `context.session.{approved,labels}` with `contains`, `containsAll`, `containsAny`.
//!
//! Errors follow Cedar: reading an argument the call lacks is an error, `&&` and `||` stop at
//! their left side when it decides, and an error anywhere else makes the whole condition one.
//! The unit tests and every example at load compare the two evaluations.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use crate::call::{self, ArgPath, Arguments, Call, CallerField, Moment};
use crate::schema::ArgType;

/// A condition the host evaluates.
#[derive(Debug, Clone)]
pub(crate) enum Expr {
    Const(bool),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Cmp(Op, Term, Term),
    Like(Term, call::Like),
    /// `context.input… has name`: the argument at `path` is present with type `ty`; `parent`
    /// (an object argument) must be there itself.
    Has {
        parent: Option<(ArgPath, ArgType)>,
        path: ArgPath,
        ty: ArgType,
    },
    /// `[literals].contains(term)`.
    OneOf(Vec<Lit>, Term),
    /// A test of `context.session.approved` (`true`) or `.labels` (`false`).
    Session {
        approved: bool,
        test: SetTest,
        items: Vec<String>,
    },
    /// A boolean argument used as a condition.
    Truth(Term),
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum SetTest {
    Contains,
    All,
    Any,
}

/// What a comparison reads.
#[derive(Debug, Clone)]
pub(crate) enum Term {
    Lit(Lit),
    Caller(CallerField),
    Hour,
    Minute,
    MinuteOfDay,
    Weekday,
    Calls(crate::counts::CounterRef),
    Input(ArgPath, ArgType),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Str(String),
    Long(i64),
    Bool(bool),
}

/// A value during evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum V<'a> {
    Str(&'a str),
    Long(i64),
    Bool(bool),
}

/// What an evaluation reads.
pub(crate) struct Scope<'m, 'v> {
    pub call: &'v Call<'v>,
    pub args: &'m mut Arguments<'v>,
    pub moment: Option<Moment>,
}

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// The conditions of a Cedar policy (its JSON form, as `Policy::to_json` gives it), for tools
/// whose arguments have the types `inputs`; `None` when the policy is not in the subset. A
/// policy without conditions lowers to `Some(None)`.
pub(crate) fn lower_policy(policy: &Json, inputs: &[&ArgType]) -> Option<Option<Expr>> {
    for scope in ["principal", "resource"] {
        if policy[scope]["op"] != "All" {
            return None;
        }
    }
    let mut all: Option<Expr> = None;
    for condition in policy["conditions"].as_array()? {
        let body = lower(&condition["body"], inputs)?;
        let body = match condition["kind"].as_str()? {
            "when" => body,
            "unless" => Expr::Not(Box::new(body)),
            _ => return None,
        };
        all = Some(match all {
            None => body,
            Some(before) => Expr::And(Box::new(before), Box::new(body)),
        });
    }
    Some(all)
}

/// A condition of the subset, or `None`.
pub(crate) fn lower(j: &Json, inputs: &[&ArgType]) -> Option<Expr> {
    let (op, body) = single(j)?;
    let pair = || Some((body.get("left")?, body.get("right")?));
    let cmp = |op: Op| -> Option<Expr> {
        let (l, r) = pair()?;
        Some(Expr::Cmp(op, term(l, inputs)?, term(r, inputs)?))
    };
    Some(match op {
        "Value" => Expr::Const(body.as_bool()?),
        "&&" | "||" => {
            let (l, r) = pair()?;
            let (l, r) = (Box::new(lower(l, inputs)?), Box::new(lower(r, inputs)?));
            if op == "&&" {
                Expr::And(l, r)
            } else {
                Expr::Or(l, r)
            }
        }
        "!" => Expr::Not(Box::new(lower(body.get("arg")?, inputs)?)),
        "==" => cmp(Op::Eq)?,
        "!=" => cmp(Op::Ne)?,
        "<" => cmp(Op::Lt)?,
        "<=" => cmp(Op::Le)?,
        ">" => cmp(Op::Gt)?,
        ">=" => cmp(Op::Ge)?,
        "like" => {
            let mut pieces = vec![String::new()];
            for element in body.get("pattern")?.as_array()? {
                match element {
                    Json::String(w) if w == "Wildcard" => pieces.push(String::new()),
                    Json::Object(o) => pieces
                        .last_mut()
                        .expect("never empty")
                        .push_str(o.get("Literal")?.as_str()?),
                    _ => return None,
                }
            }
            Expr::Like(term(body.get("left")?, inputs)?, call::Like::new(pieces))
        }
        "has" => {
            let parent = chain(body.get("left")?)?;
            let (first, rest) = parent.split_first()?;
            if *first != "input" {
                return None;
            }
            let mut names: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            let parent = match names.is_empty() {
                true => None,
                false => Some((path(&names), typed(&names, inputs)?)),
            };
            names.push(body.get("attr")?.as_str()?.to_string());
            Expr::Has {
                parent,
                ty: typed(&names, inputs)?,
                path: path(&names),
            }
        }
        "contains" | "containsAll" | "containsAny" => {
            let (l, r) = pair()?;
            if let Some(approved) = session_set(l) {
                let items = match (op, r) {
                    ("contains", r) => vec![string(r)?],
                    (_, r) => strings(r)?,
                };
                let test = match op {
                    "contains" => SetTest::Contains,
                    "containsAll" => SetTest::All,
                    _ => SetTest::Any,
                };
                Expr::Session {
                    approved,
                    test,
                    items,
                }
            } else if op == "contains" {
                let (_, items) = single(l).filter(|(k, _)| *k == "Set")?;
                let items = items
                    .as_array()?
                    .iter()
                    .map(|i| match term(i, inputs)? {
                        Term::Lit(l) => Some(l),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                Expr::OneOf(items, term(r, inputs)?)
            } else {
                return None;
            }
        }
        "." => match term(j, inputs)? {
            t @ Term::Input(_, ArgType::Bool) => Expr::Truth(t),
            _ => return None,
        },
        _ => return None,
    })
}

/// The one key of a JSON object and its value.
fn single(j: &Json) -> Option<(&str, &Json)> {
    let o = j.as_object()?;
    if o.len() != 1 {
        return None;
    }
    o.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// The attributes of `context.a.b…`, outermost first.
fn chain(j: &Json) -> Option<Vec<&str>> {
    let (op, body) = single(j)?;
    match op {
        "Var" if body == "context" => Some(Vec::new()),
        "." => {
            let mut names = chain(body.get("left")?)?;
            names.push(body.get("attr")?.as_str()?);
            Some(names)
        }
        _ => None,
    }
}

fn path(names: &[String]) -> ArgPath {
    ArgPath {
        names: names.to_vec(),
        number: usize::MAX,
    }
}

/// The type of the argument at `names` if it is the same in every tool of `inputs`.
fn typed(names: &[String], inputs: &[&ArgType]) -> Option<ArgType> {
    let parts: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut found: Option<&ArgType> = None;
    for input in inputs {
        let t = input.at(&parts).ok()?;
        match found {
            Some(f) if f != t => return None,
            _ => found = Some(t),
        }
    }
    found.cloned()
}

fn term(j: &Json, inputs: &[&ArgType]) -> Option<Term> {
    if let Some(("Value", v)) = single(j) {
        return Some(Term::Lit(match v {
            Json::String(s) => Lit::Str(s.clone()),
            Json::Bool(b) => Lit::Bool(*b),
            Json::Number(n) => Lit::Long(n.as_i64()?),
            _ => return None,
        }));
    }
    let names = chain(j)?;
    Some(match names.as_slice() {
        ["caller", field] => Term::Caller(match *field {
            "origin" => CallerField::Origin,
            "token" => CallerField::Token,
            "user" => CallerField::User,
            "client" => CallerField::Client,
            _ => return None,
        }),
        ["time", "hour"] => Term::Hour,
        ["time", "minute"] => Term::Minute,
        ["time", "minute_of_day"] => Term::MinuteOfDay,
        ["time", "weekday"] => Term::Weekday,
        ["calls", name] => Term::Calls(crate::counts::CounterRef::new(name.to_string())),
        ["input", rest @ ..] if !rest.is_empty() => {
            let names: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            let ty = typed(&names, inputs)?;
            if !matches!(ty, ArgType::String | ArgType::Long | ArgType::Bool) {
                return None;
            }
            Term::Input(path(&names), ty)
        }
        _ => return None,
    })
}

/// `context.session.approved` (`true`) or `.labels` (`false`).
fn session_set(j: &Json) -> Option<bool> {
    match chain(j)?.as_slice() {
        ["session", "approved"] => Some(true),
        ["session", "labels"] => Some(false),
        _ => None,
    }
}

fn string(j: &Json) -> Option<String> {
    match single(j)? {
        ("Value", Json::String(s)) => Some(s.clone()),
        _ => None,
    }
}

fn strings(j: &Json) -> Option<Vec<String>> {
    match single(j)? {
        ("Set", Json::Array(items)) => items.iter().map(string).collect(),
        _ => None,
    }
}

impl Expr {
    /// Whether the condition holds; an error when Cedar's evaluation would give one.
    pub(crate) fn eval<'v>(&'v self, scope: &mut Scope<'_, 'v>) -> Result<bool, String> {
        Ok(match self {
            Expr::Const(b) => *b,
            Expr::And(l, r) => l.eval(scope)? && r.eval(scope)?,
            Expr::Or(l, r) => l.eval(scope)? || r.eval(scope)?,
            Expr::Not(e) => !e.eval(scope)?,
            Expr::Cmp(op, l, r) => {
                let (l, r) = (l.value(scope)?, r.value(scope)?);
                match (op, l, r) {
                    (Op::Eq, l, r) => l == r,
                    (Op::Ne, l, r) => l != r,
                    (op, V::Long(l), V::Long(r)) => match op {
                        Op::Lt => l < r,
                        Op::Le => l <= r,
                        Op::Gt => l > r,
                        _ => l >= r,
                    },
                    _ => return Err("an order comparison of values that are not integers".into()),
                }
            }
            Expr::Like(t, pieces) => match t.value(scope)? {
                V::Str(s) => pieces.matches(s),
                _ => return Err("`like` on a value that is not a string".into()),
            },
            Expr::Has { parent, path, ty } => {
                if let Some((p, pty)) = parent
                    && !scope.args.get(p).is_some_and(|v| call::fits(v, pty))
                {
                    return Err(missing(&p.names));
                }
                scope.args.get(path).is_some_and(|v| call::fits(v, ty))
            }
            Expr::OneOf(items, t) => {
                let v = t.value(scope)?;
                items.iter().any(|i| i.value() == v)
            }
            Expr::Session {
                approved,
                test,
                items,
            } => {
                let set: &BTreeSet<String> = if *approved {
                    &scope.call.session.approved
                } else {
                    &scope.call.session.labels
                };
                match test {
                    SetTest::Contains | SetTest::All => items.iter().all(|i| set.contains(i)),
                    SetTest::Any => items.iter().any(|i| set.contains(i)),
                }
            }
            Expr::Truth(t) => match t.value(scope)? {
                V::Bool(b) => b,
                _ => return Err("a condition that is not true or false".into()),
            },
        })
    }

    /// The caller tests it makes before anything in it can fail: its leading conjuncts
    /// `context.caller.F == "name"` and `["a", "b"].contains(context.caller.F)`, each as the
    /// field and the names it accepts. A call failing one of them makes the expression false
    /// and never an error (a caller's field is always a string), so a rule can be filed by
    /// them ([`crate::by_caller`]).
    pub(crate) fn leading_caller_tests(&self) -> Vec<(CallerField, Vec<String>)> {
        fn walk(e: &Expr, out: &mut Vec<(CallerField, Vec<String>)>) -> bool {
            match e {
                Expr::And(l, r) => walk(l, out) && walk(r, out),
                Expr::Cmp(Op::Eq, Term::Caller(f), Term::Lit(Lit::Str(s)))
                | Expr::Cmp(Op::Eq, Term::Lit(Lit::Str(s)), Term::Caller(f)) => {
                    out.push((*f, vec![s.clone()]));
                    true
                }
                Expr::OneOf(items, Term::Caller(f)) => {
                    let names = items
                        .iter()
                        .filter_map(|i| match i {
                            Lit::Str(s) => Some(s.clone()),
                            _ => None,
                        })
                        .collect();
                    out.push((*f, names));
                    true
                }
                _ => false,
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Whether it reads the time.
    pub(crate) fn reads_time(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| {
            if let Expr::Cmp(_, l, r) = e {
                found |= [l, r].iter().any(|t| t.reads_time());
            }
            if let Expr::Like(t, _) | Expr::OneOf(_, t) = e {
                found |= t.reads_time();
            }
        });
        found
    }

    /// The counters it reads, to be numbered.
    pub(crate) fn counters_mut(&mut self, f: &mut dyn FnMut(&mut crate::counts::CounterRef)) {
        self.visit_mut(&mut |e| {
            e.terms_mut(&mut |t| {
                if let Term::Calls(c) = t {
                    f(c);
                }
            })
        });
    }

    /// The argument paths it reads, to be numbered.
    pub(crate) fn paths_mut(&mut self, f: &mut dyn FnMut(&mut ArgPath)) {
        self.visit_mut(&mut |e| match e {
            Expr::Has { parent, path, .. } => {
                if let Some((p, _)) = parent {
                    f(p);
                }
                f(path);
            }
            e => e.terms_mut(&mut |t| t.path_mut(f)),
        });
    }

    /// The terms this expression compares or tests itself (not those of its parts).
    fn terms_mut(&mut self, f: &mut dyn FnMut(&mut Term)) {
        match self {
            Expr::Cmp(_, l, r) => {
                f(l);
                f(r);
            }
            Expr::Like(t, _) | Expr::OneOf(_, t) | Expr::Truth(t) => f(t),
            _ => {}
        }
    }

    /// `visit`, for changing what it reads.
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        f(self);
        match self {
            Expr::And(l, r) | Expr::Or(l, r) => {
                l.visit_mut(f);
                r.visit_mut(f);
            }
            Expr::Not(e) => e.visit_mut(f),
            _ => {}
        }
    }

    fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::And(l, r) | Expr::Or(l, r) => {
                l.visit(f);
                r.visit(f);
            }
            Expr::Not(e) => e.visit(f),
            _ => {}
        }
    }
}

fn missing(names: &[String]) -> String {
    format!(
        "the call has no argument `{}` of the type its schema gives",
        names.join(".")
    )
}

impl Lit {
    fn value(&self) -> V<'_> {
        match self {
            Lit::Str(s) => V::Str(s),
            Lit::Long(n) => V::Long(*n),
            Lit::Bool(b) => V::Bool(*b),
        }
    }
}

impl Term {
    fn reads_time(&self) -> bool {
        matches!(
            self,
            Term::Hour | Term::Minute | Term::MinuteOfDay | Term::Weekday
        )
    }

    fn path_mut(&mut self, f: &mut dyn FnMut(&mut ArgPath)) {
        if let Term::Input(p, _) = self {
            f(p);
        }
    }

    fn value<'v>(&'v self, scope: &mut Scope<'_, 'v>) -> Result<V<'v>, String> {
        let at = scope.moment;
        let moment = || at.ok_or_else(|| "the time of the call is not known".to_string());
        let call = scope.call;
        Ok(match self {
            Term::Lit(l) => l.value(),
            Term::Caller(field) => V::Str(match field {
                CallerField::Origin => &call.caller.origin,
                CallerField::Token => &call.caller.token,
                CallerField::User => &call.caller.user,
                CallerField::Client => &call.caller.client,
            }),
            Term::Hour => V::Long(i64::from(moment()?.minute_of_day / 60)),
            Term::Minute => V::Long(i64::from(moment()?.minute_of_day % 60)),
            Term::MinuteOfDay => V::Long(i64::from(moment()?.minute_of_day)),
            Term::Weekday => V::Str(WEEKDAYS[usize::from(moment()?.weekday)]),
            Term::Calls(counter) => {
                let n = call.counts.of(counter).unwrap_or(0);
                V::Long(i64::try_from(n).unwrap_or(i64::MAX))
            }
            Term::Input(path, ty) => {
                let value = scope.args.get(path);
                match (ty, value) {
                    (ArgType::String, Some(Json::String(s))) => V::Str(s),
                    (ArgType::Bool, Some(Json::Bool(b))) => V::Bool(*b),
                    (ArgType::Long, Some(Json::Number(n))) if n.as_i64().is_some() => {
                        V::Long(n.as_i64().unwrap_or_default())
                    }
                    _ => return Err(missing(&path.names)),
                }
            }
        })
    }
}
