//! Deciding a call: the host evaluates the tool's `cordon.toml` rules ([`crate::native`]) and
//! the Cedar file policies in its part of Cedar ([`crate::subset`]); Cedar evaluates the rest
//! (a rule's `when` once the rest of the rule holds, other Cedar file policies) against a
//! request carrying only the parts of the context they read.

use std::collections::BTreeSet;

use cedar_policy::{Context, Effect, EvalResult, Request, RestrictedExpression};

use crate::call::{Arguments, Call, Moment};
use crate::config::Decision;
use crate::context::Needs;
use crate::engine::{Policy, RuleRef, ToolPolicy, Verdict, uid};
use crate::native::When;

/// Rules found to apply, as indices into `Policy::rules`, each with the error that made it
/// count as applying, if one did.
type Applied = Vec<(usize, Option<String>)>;

impl Policy {
    /// The rules that may apply to calls of `tool` (`plugin.tool`), in the order written.
    pub fn rules_for(&self, tool: &str) -> Vec<RuleRef> {
        let Some(t) = self.tools.get(tool) else {
            return Vec::new();
        };
        self.of_tool(t)
            .into_iter()
            .map(|i| self.rules[i].rule.clone())
            .collect()
    }

    /// The store keys a call of `tool` may add to: what [`Policy::tally`] gives when every
    /// rule that may apply to the tool applies, each with the places ahead it allows. They are reserved before the call is decided,
    /// so that calls decided at once see each other; what the call then does not add to is
    /// taken back ([`crate::settle`]).
    pub fn reservable(&self, tool: &str, scope: crate::CountScope<'_>) -> Vec<crate::Reservation> {
        let Some(t) = self.tools.get(tool) else {
            return Vec::new();
        };
        t.counting.reservations((tool, &t.plugin), scope)
    }

    /// Whether a rule may deny every call of `tool` whatever its arguments: a rule that
    /// denies it with no condition. Such a tool is not offered to the model.
    pub fn denies_every_call(&self, tool: &str) -> Option<RuleRef> {
        let t = self.tools.get(tool)?;
        self.of_tool(t)
            .into_iter()
            .map(|i| &self.rules[i])
            .find(|m| {
                m.rule.decision == Decision::Deny
                    && match &m.check {
                        Some(check) => check.unconditional(),
                        None => self.singles[&m.rule.id]
                            .policies()
                            .all(|p| p.effect() == Effect::Forbid && unconditional(p)),
                    }
            })
            .map(|m| m.rule.clone())
    }

    /// Decides `call`: the strictest decision of the rules that apply to it.
    pub fn decide(&self, call: &Call<'_>) -> Verdict {
        let Some(t) = self.tools.get(call.tool) else {
            return self.verdict(Vec::new());
        };
        let widened = match call.reach {
            Some(reach) if !t.reach_bound.is_empty() => Some(self.native_reaching(t, reach)),
            _ => None,
        };
        let has_native = widened
            .as_ref()
            .map_or(!t.native.is_empty(), |w| !w.is_empty());
        if !has_native && t.cedar.is_empty() {
            return self.verdict(Vec::new());
        }
        // Before the rules are narrowed to the caller's: a time that cannot be read makes
        // every rule of the tool that denies or asks apply, whoever it is for.
        let moment = match self.moment_for(t, call.now_ms) {
            Ok(m) => m,
            Err(e) => return self.unevaluable(t, &e),
        };
        let native = match &widened {
            Some(rules) => crate::by_caller::Filed([rules, &[], &[], &[], &[]]),
            None => t.by_caller.for_caller(call.caller),
        };
        let mut request = None;
        let mut applied: Applied = Vec::new();
        let mut args = Arguments::new(call.args, self.arg_paths, Some(&t.regex_sets));
        for i in native.iter() {
            let check = self.rules[i]
                .check
                .as_ref()
                .expect("a rule the host evaluates");
            let denies_or_asks = self.rules[i].rule.decision != Decision::Allow;
            match check.applies(call, &mut args, moment) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    if denies_or_asks {
                        applied.push((i, Some(e)));
                    }
                    continue;
                }
            }
            let Some(when) = &check.when else {
                applied.push((i, None));
                continue;
            };
            let request = request.get_or_insert_with(|| self.request(t, call, &t.needs));
            match self.when_holds(request, when) {
                Ok(false) => {}
                Ok(true) => applied.push((i, None)),
                Err(e) if denies_or_asks => applied.push((i, Some(e))),
                Err(_) => {}
            }
        }
        if widened.is_none() {
            t.by_count
                .applying(call.counts, |i| applied.push((i, None)));
        }
        if !t.cedar.is_empty() {
            self.by_cedar(t, call, &mut request, &mut applied);
        }
        // Those that apply in the order written, then those that could not be evaluated.
        applied.sort_by_key(|(i, e)| (e.is_some(), *i));
        let rules = applied
            .into_iter()
            .map(|(i, error)| RuleRef {
                error,
                ..self.rules[i].rule.clone()
            })
            .collect();
        self.verdict(rules)
    }

    /// The rules of `t` a call whose tool reaches `reach` evaluates: `native`'s and
    /// `reach_bound`'s whose reach tests fit it, in the order written.
    fn native_reaching(&self, t: &ToolPolicy, reach: &crate::Reach) -> Vec<usize> {
        let fits = |i: &usize| self.rules[*i].check.as_ref().is_some_and(|c| c.fits(reach));
        let mut out: Vec<usize> = t
            .native
            .iter()
            .chain(&t.reach_bound)
            .copied()
            .filter(fits)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every rule of `call`'s tool, each evaluated alone: what `policy explain` shows.
    pub fn explain(&self, call: &Call<'_>) -> (Verdict, Vec<(RuleRef, bool)>) {
        let verdict = self.decide(call);
        let Some(t) = self.tools.get(call.tool) else {
            return (verdict, Vec::new());
        };
        let each = self
            .of_tool(t)
            .into_iter()
            .map(|i| {
                let applies = self.applies_alone(t, i, call).unwrap_or(false);
                (self.rules[i].rule.clone(), applies)
            })
            .collect();
        (verdict, each)
    }

    /// Whether the rule `id` alone applies to the call (for examples). A `cordon.toml` rule
    /// is evaluated both by the host and, as written in Cedar, by Cedar: an answer on which
    /// they disagree is an error, so no policy loads whose rules the host would decide
    /// otherwise than their Cedar text says.
    pub(crate) fn rule_applies(&self, id: &str, call: &Call<'_>) -> Result<bool, String> {
        let t = self
            .tools
            .get(call.tool)
            .ok_or_else(|| format!("no installed tool is named `{}`", call.tool))?;
        let &i = self
            .index
            .get(&cedar_policy::PolicyId::new(id))
            .ok_or_else(|| format!("no rule is named `{id}`"))?;
        let by_cedar = self.cedar_alone(t, id, call)?;
        if self.rules[i].check.is_none() {
            // A Cedar file's policy that only Cedar evaluates.
            return Ok(by_cedar);
        }
        let by_host = if t.native.contains(&i) {
            self.applies_alone(t, i, call)?
        } else {
            false
        };
        if by_host != by_cedar {
            return Err(format!(
                "Cordon decides that the rule {} but its Cedar text says it {}; this is a bug in Cordon: please report it with the rule",
                if by_host { "applies" } else { "does not apply" },
                if by_cedar {
                    "applies"
                } else {
                    "does not apply"
                },
            ));
        }
        Ok(by_host)
    }

    /// What Cedar says of the rule `id` alone for `call`: whether it applies, or the error
    /// that kept it from being evaluated. The reference the host is tested against.
    #[cfg(test)]
    pub(crate) fn cedar_outcome(&self, id: &str, call: &Call<'_>) -> Result<bool, String> {
        let t = self.tools.get(call.tool).ok_or("no such tool")?;
        let request = self.request(t, call, &Needs::ALL)?;
        let response = self
            .authorizer
            .is_authorized(&request, &self.singles[id], &self.entities);
        if let Some(e) = response.diagnostics().errors().next() {
            return Err(e.to_string());
        }
        Ok(response.diagnostics().reason().next().is_some())
    }

    /// Indices of the rules that may apply to `t`, in the order written.
    fn of_tool(&self, t: &ToolPolicy) -> Vec<usize> {
        let mut all: Vec<usize> = t.native.clone();
        all.extend(t.cedar.policies().map(|p| self.index[p.id()]));
        all.sort_unstable();
        all
    }

    /// Whether rule `i` of tool `t` alone applies to `call`.
    fn applies_alone(&self, t: &ToolPolicy, i: usize, call: &Call<'_>) -> Result<bool, String> {
        let Some(check) = &self.rules[i].check else {
            return self.cedar_alone(t, &self.rules[i].rule.id, call);
        };
        let mut args = Arguments::new(call.args, 0, None);
        // A condition that cannot be evaluated does not apply alone, as in Cedar.
        if !check
            .applies(call, &mut args, self.moment_for(t, call.now_ms)?)
            .unwrap_or(false)
        {
            return Ok(false);
        }
        let Some(when) = &check.when else {
            return Ok(true);
        };
        Ok(self
            .when_holds(&self.request(t, call, &t.needs), when)
            .unwrap_or(false))
    }

    /// Whether a rule's `when` holds for `request`; an error when it cannot be evaluated.
    fn when_holds(&self, request: &Result<Request, String>, when: &When) -> Result<bool, String> {
        let request = request.as_ref().map_err(Clone::clone)?;
        match cedar_policy::eval_expression(request, &self.entities, &when.expr) {
            Ok(EvalResult::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("its `when` gave {other}, not true or false")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether the Cedar text of rule `id` alone holds for `call`.
    fn cedar_alone(&self, t: &ToolPolicy, id: &str, call: &Call<'_>) -> Result<bool, String> {
        let set = self
            .singles
            .get(id)
            .ok_or_else(|| format!("no rule is named `{id}`"))?;
        let request = self.request(t, call, &Needs::ALL)?;
        let response = self.authorizer.is_authorized(&request, set, &self.entities);
        Ok(response.diagnostics().reason().next().is_some())
    }

    /// The local time of a call, when the tool's rules read it.
    fn moment_for(&self, t: &ToolPolicy, now_ms: i64) -> Result<Option<Moment>, String> {
        if !t.reads_time {
            return Ok(None);
        }
        if let Some(moment) = self.moments.get(now_ms) {
            return Ok(Some(moment));
        }
        let at = self.zoned(now_ms)?;
        let moment = Moment {
            minute_of_day: u32::from(at.hour().unsigned_abs()) * 60
                + u32::from(at.minute().unsigned_abs()),
            weekday: at.weekday().to_monday_zero_offset().unsigned_abs(),
        };
        self.moments.keep(now_ms, moment, &self.tz);
        Ok(Some(moment))
    }

    fn zoned(&self, now_ms: i64) -> Result<jiff::Zoned, String> {
        Ok(jiff::Timestamp::from_millisecond(now_ms)
            .map_err(|e| format!("the time {now_ms} is out of range: {e}"))?
            .to_zoned(self.tz.clone()))
    }

    /// Evaluates the tool's Cedar file policies that only Cedar evaluates, building the
    /// call's request once, and adds those that apply to `applied`. A deny or ask policy that
    /// cannot be evaluated counts as applying.
    fn by_cedar(
        &self,
        t: &ToolPolicy,
        call: &Call<'_>,
        request: &mut Option<Result<Request, String>>,
        applied: &mut Applied,
    ) {
        let set = &t.cedar;
        let request = request.get_or_insert_with(|| self.request(t, call, &t.needs));
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                for p in set.policies() {
                    let i = self.index[p.id()];
                    if self.rules[i].rule.decision != Decision::Allow {
                        applied.push((i, Some(e.clone())));
                    }
                }
                return;
            }
        };
        let response = self.authorizer.is_authorized(request, set, &self.entities);
        applied.extend(
            response
                .diagnostics()
                .reason()
                .map(|id| (self.index[id], None)),
        );
        for e in response.diagnostics().errors() {
            let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
            let i = self.index[e.policy_id()];
            if self.rules[i].rule.decision != Decision::Allow {
                applied.push((i, Some(e.inner().to_string())));
            }
        }
    }

    /// The Cedar request of `call`, with the parts of the context that `needs` names.
    fn request(&self, t: &ToolPolicy, call: &Call<'_>, needs: &Needs) -> Result<Request, String> {
        let s = |v: &str| RestrictedExpression::new_string(v.to_string());
        let set = |v: &BTreeSet<String>| RestrictedExpression::new_set(v.iter().map(|x| s(x)));
        let record = |pairs: Vec<(&str, RestrictedExpression)>| {
            RestrictedExpression::new_record(pairs.into_iter().map(|(k, v)| (k.to_string(), v)))
                .map_err(|e| e.to_string())
        };
        let mut context = Vec::with_capacity(6);
        if needs.input.as_ref().is_none_or(|names| !names.is_empty()) {
            let input = t
                .input
                .value_with(call.args, needs.input.as_ref())
                .unwrap_or_else(|| RestrictedExpression::new_record([]).expect("empty record"));
            context.push(("input".to_string(), input));
        }
        if needs.caller {
            context.push((
                "caller".to_string(),
                record(vec![
                    ("origin", s(&call.caller.origin)),
                    ("token", s(&call.caller.token)),
                    ("user", s(&call.caller.user)),
                    ("client", s(&call.caller.client)),
                ])?,
            ));
        }
        if needs.session {
            context.push((
                "session".to_string(),
                record(vec![
                    ("approved", set(&call.session.approved)),
                    ("labels", set(&call.session.labels)),
                ])?,
            ));
        }
        if needs.time {
            let at = self.zoned(call.now_ms)?;
            let weekday = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
                [at.weekday().to_monday_zero_offset().unsigned_abs() as usize];
            let (hour, minute) = (i64::from(at.hour()), i64::from(at.minute()));
            context.push((
                "time".to_string(),
                record(vec![
                    ("hour", RestrictedExpression::new_long(hour)),
                    ("minute", RestrictedExpression::new_long(minute)),
                    (
                        "minute_of_day",
                        RestrictedExpression::new_long(hour * 60 + minute),
                    ),
                    ("weekday", s(weekday)),
                    ("date", s(&at.date().to_string())),
                ])?,
            ));
        }
        if needs.calls {
            let calls = t
                .counters
                .iter()
                .map(|&i| (i, &self.counters[i]))
                .map(|(i, c)| {
                    let n = match u32::try_from(i) {
                        Ok(number) => call.counts.numbered_or_named(self.number, number, &c.name),
                        Err(_) => call.counts.get(&c.name),
                    }
                    .unwrap_or(0);
                    (
                        &*c.name,
                        RestrictedExpression::new_long(n.min(i64::MAX as u64) as i64),
                    )
                })
                .collect();
            context.push(("calls".to_string(), record(calls)?));
        }
        if needs.matched {
            let matched = t
                .facts
                .iter()
                .map(|&i| &self.facts[i])
                .filter(|f| f.holds(call.args))
                .map(|f| s(&f.id));
            context.push((
                "matched".to_string(),
                RestrictedExpression::new_set(matched),
            ));
        }
        let context = Context::from_pairs(context).map_err(|e| e.to_string())?;
        Request::new(
            uid("Caller", "caller"),
            t.action.clone(),
            t.resource.clone(),
            context,
            None,
        )
        .map_err(|e| e.to_string())
    }

    /// A call whose time could not be read: every rule of its tool that denies or asks counts
    /// as applying.
    fn unevaluable(&self, t: &ToolPolicy, error: &str) -> Verdict {
        let rules = self
            .of_tool(t)
            .into_iter()
            .map(|i| &self.rules[i].rule)
            .filter(|r| r.decision != Decision::Allow)
            .map(|r| RuleRef {
                error: Some(error.to_string()),
                ..r.clone()
            })
            .collect();
        self.verdict(rules)
    }

    pub(crate) fn verdict(&self, applied: Vec<RuleRef>) -> Verdict {
        let decision = applied.iter().map(|r| r.decision).max();
        let rule = decision.and_then(|d| applied.iter().find(|r| r.decision == d).cloned());
        let applied = match decision {
            Some(Decision::Deny) => applied
                .into_iter()
                .filter(|r| r.decision == Decision::Deny)
                .collect(),
            _ => applied,
        };
        Verdict {
            decision,
            rule,
            applied,
            digest: self.digest.clone(),
        }
    }
}

/// Whether a policy holds for every call in its action scope: no condition, and no
/// constraint on the principal or the resource.
fn unconditional(p: &cedar_policy::Policy) -> bool {
    let Ok(json) = p.to_json() else {
        return false;
    };
    let all = |scope: &str| json[scope]["op"] == "All";
    json["conditions"].as_array().is_some_and(Vec::is_empty) && all("principal") && all("resource")
}
