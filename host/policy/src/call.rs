//! A call as rules read it: who makes it, what the session has seen, its arguments (each
//! path looked up once, each set of regular expressions scanned once), its local time, and
//! the string tests (`like`, normalised paths) both the host's checks and its part of Cedar
//! use.

use std::collections::BTreeSet;

use regex::{Regex, RegexSet};
use serde_json::Value;

use crate::schema::{self, ArgType};

/// Who asks for a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// `cli`, `serve`, `mcp`, `mcp-http` or `gateway`.
    pub origin: String,
    /// The API token's name; empty when there is none.
    pub token: String,
    /// The gateway's `user`; empty when none was sent.
    pub user: String,
    /// The MCP client's name; empty when not over MCP.
    pub client: String,
}

impl Caller {
    /// Its value of `field`, as a rule's caller test compares it.
    pub(crate) fn field(&self, field: CallerField) -> &str {
        match field {
            CallerField::Origin => &self.origin,
            CallerField::Token => &self.token,
            CallerField::User => &self.user,
            CallerField::Client => &self.client,
        }
    }
}

/// What the session has seen so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFacts {
    /// Tools (`plugin.tool`) a human approved a call of in this session.
    pub approved: BTreeSet<String>,
    /// The session's labels.
    pub labels: BTreeSet<String>,
}

/// One call to decide.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool, `plugin.tool`.
    pub tool: &'a str,
    /// Its arguments (already checked against its schema).
    pub args: &'a Value,
    /// Who asks.
    pub caller: &'a Caller,
    /// The session so far.
    pub session: &'a SessionFacts,
    /// Counter values by name, as the store gave them for [`Policy::counters_for`].
    pub counts: &'a crate::Counts,
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// What the tool reaches for this call, when grants given through a grant request (for
    /// the call, the session or a while) widen what it was installed with; `None`: what it
    /// was installed with. Rules whose reach tests (`can_change`, `writes`, `network`) fit the
    /// one but not the other are decided by this one.
    pub reach: Option<&'a crate::Reach>,
}

/// An absolute path with `.`, `..` and repeated `/` resolved lexically, or `None` for a
/// relative path or one that climbs above `/`.
pub fn normalise(path: &str) -> Option<String> {
    normalised(path).map(std::borrow::Cow::into_owned)
}

/// [`normalise`], without copying a path that is normal already (as most are).
pub(crate) fn normalised(path: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !path.starts_with('/') {
        return None;
    }
    // No empty, `.` or `..` segment.
    let normal = path == "/"
        || !(path.ends_with('/')
            || path.ends_with("/.")
            || path.ends_with("/..")
            || path.contains("//")
            || path.contains("/./")
            || path.contains("/../"));
    if normal {
        return Some(std::borrow::Cow::Borrowed(path));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(std::borrow::Cow::Owned(format!("/{}", parts.join("/"))))
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
    /// No sets: every regular expression of the policy's `count` is tested alone.
    pub(crate) fn new(count: usize) -> RegexSets {
        RegexSets {
            sets: Vec::new(),
            set_of: vec![None; count],
        }
    }

    /// Adds `set`, whose patterns are the regular expressions numbered `numbers`, in order.
    pub(crate) fn add(&mut self, set: RegexSet, numbers: Vec<usize>) {
        for n in &numbers {
            if let Some(slot) = self.set_of.get_mut(*n) {
                *slot = Some(self.sets.len());
            }
        }
        self.sets.push((set, numbers));
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
    pub(crate) fn regex_matches(&mut self, n: usize, re: &Regex, text: &str) -> bool {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallerField {
    Origin,
    Token,
    User,
    Client,
}

/// The local time of a call, as the rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moment {
    pub minute_of_day: u32,
    /// 0 is Monday.
    pub weekday: u8,
}

/// The [`Moment`] of one UTC minute, kept so that calls within it need not convert the time
/// to the policy's zone again (a conversion is about a tenth of a 1,000-rule decision).
///
/// Kept only for a minute that is one local minute throughout: when the zone's offset is a
/// whole number of minutes and the same at the minute's first and last millisecond. Zones'
/// offsets change at whole minutes today, but a past offset such as Monrovia's -00:44:30 (until
/// 1972) is not cached rather than wrongly cached.
#[derive(Debug, Default)]
pub(crate) struct MinuteCache(std::sync::atomic::AtomicU64);

impl MinuteCache {
    /// The moment of `now_ms` if its minute is the one kept.
    pub(crate) fn get(&self, now_ms: i64) -> Option<Moment> {
        let minute = u64::try_from(now_ms.div_euclid(60_000)).ok()?;
        let kept = self.0.load(std::sync::atomic::Ordering::Relaxed);
        (kept != 0 && kept >> 16 == minute + 1).then_some(Moment {
            minute_of_day: ((kept >> 3) & 0x7ff) as u32,
            weekday: (kept & 0x7) as u8,
        })
    }

    /// Keeps `moment` as that of `now_ms`'s minute if `tz` makes that minute one local minute.
    pub(crate) fn keep(&self, now_ms: i64, moment: Moment, tz: &jiff::tz::TimeZone) {
        let Ok(minute) = u64::try_from(now_ms.div_euclid(60_000)) else {
            return;
        };
        let start = now_ms.div_euclid(60_000) * 60_000;
        let offset = |ms: i64| {
            jiff::Timestamp::from_millisecond(ms)
                .ok()
                .map(|t| tz.to_offset(t))
        };
        let (Some(first), Some(last)) = (offset(start), offset(start + 59_999)) else {
            return;
        };
        if first != last || first.seconds() % 60 != 0 || minute >= 1 << 47 {
            return;
        }
        let packed = ((minute + 1) << 16)
            | (u64::from(moment.minute_of_day & 0x7ff) << 3)
            | u64::from(moment.weekday & 0x7);
        self.0.store(packed, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The value at `path` below `args`, if there is one.
pub(crate) fn lookup<'v>(args: &'v Value, path: &[String]) -> Option<&'v Value> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalise_lexically_and_refuse_to_climb_out() {
        assert_eq!(
            normalise("/data/reports/../hr/x").as_deref(),
            Some("/data/hr/x")
        );
        assert_eq!(normalise("//data/./a//b").as_deref(), Some("/data/a/b"));
        assert_eq!(normalise("/.."), None);
        assert_eq!(normalise("data/x"), None);
        assert_eq!(normalise("/data/").as_deref(), Some("/data"));
        assert_eq!(normalise("/").as_deref(), Some("/"));
        assert!(matches!(
            normalised("/data/reports/x.csv"),
            Some(std::borrow::Cow::Borrowed(_))
        ));
        for (path, normal) in [
            ("/a/./b", "/a/b"),
            ("/a/.", "/a"),
            ("/a/..", "/"),
            ("/.hidden/..x/x..", "/.hidden/..x/x.."),
            ("/a//b/", "/a/b"),
        ] {
            assert_eq!(normalise(path).as_deref(), Some(normal), "{path}");
        }
    }

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

    /// The moment a cache gives is the one the zone gives, across a change to summer time,
    /// a change back, and a zone whose offset then had seconds.
    #[test]
    fn a_kept_minute_gives_the_moment_the_zone_gives() {
        let moment_of = |tz: &jiff::tz::TimeZone, ms: i64| {
            let at = jiff::Timestamp::from_millisecond(ms)
                .unwrap()
                .to_zoned(tz.clone());
            (
                u32::from(at.hour().unsigned_abs()) * 60 + u32::from(at.minute().unsigned_abs()),
                at.weekday().to_monday_zero_offset().unsigned_abs(),
            )
        };
        let cases = [
            // Berlin, 2026-03-29 01:00 UTC (summer time) and 2026-10-25 01:00 UTC (back).
            ("Europe/Berlin", 1_774_746_000_000_i64),
            ("Europe/Berlin", 1_792_890_000_000),
            // Monrovia at -00:44:30 (1971-06-01), Kathmandu at +05:45.
            ("Africa/Monrovia", 44_582_400_000),
            ("Asia/Kathmandu", 1_774_746_000_000),
        ];
        for (zone, around) in cases {
            let tz = jiff::tz::TimeZone::get(zone).unwrap();
            let cache = MinuteCache::default();
            let mut kept = 0;
            // Every 7 s over two hours around the change, as calls come.
            for step in 0..(2 * 3600 / 7) {
                let ms = around - 3_600_000 + step * 7_000;
                let want = moment_of(&tz, ms);
                let got = match cache.get(ms) {
                    Some(m) => {
                        kept += 1;
                        m
                    }
                    None => {
                        let m = Moment {
                            minute_of_day: want.0,
                            weekday: want.1,
                        };
                        cache.keep(ms, m, &tz);
                        m
                    }
                };
                assert_eq!((got.minute_of_day, got.weekday), want, "{zone} at {ms}");
            }
            if zone == "Africa/Monrovia" {
                assert_eq!(kept, 0, "an offset with seconds is not kept");
            } else {
                assert!(kept > 800, "{zone}: only {kept} from the cache");
            }
        }
    }
}
