//! Resource limits for one call.
//!
//! Every call runs under these limits so that a buggy or hostile plugin can only waste a
//! bounded amount of memory, time and output. They are stored in the lock file in the same
//! human form people type (`memory = "64MiB"`), so the file stays readable.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which limit was meant or exceeded; used in errors so they can name the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Linear memory of the instance (all memories together).
    Memory,
    /// Wall-clock time of one call.
    Time,
    /// Total size of the content a call returns.
    Output,
    /// Size of the JSON arguments handed to a call.
    Args,
    /// Bytes of log messages and stderr kept per call.
    Log,
}

impl LimitKind {
    /// All kinds, in the order they are shown.
    pub const ALL: [LimitKind; 5] = [
        LimitKind::Memory,
        LimitKind::Time,
        LimitKind::Output,
        LimitKind::Args,
        LimitKind::Log,
    ];

    /// The key used in `key=value` overrides and in the lock file.
    pub fn key(self) -> &'static str {
        match self {
            LimitKind::Memory => "memory",
            LimitKind::Time => "time",
            LimitKind::Output => "output",
            LimitKind::Args => "args",
            LimitKind::Log => "log",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// A limit override that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Not of the form `key=value` or an unknown key.
    #[error(
        "invalid limit `{input}`: {reason}; use `memory=64MiB`, `time=5s`, `output=256KiB`, `args=1MiB` or `log=64KiB`"
    )]
    Syntax {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn limit_err(input: &str, reason: impl Into<String>) -> LimitError {
    LimitError::Syntax {
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// Per-call resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Maximum linear memory in bytes. 512 MiB by default: enough for a ~20 MB Python
    /// component, small enough that a memory bomb cannot hurt the host.
    #[serde(with = "bytes_serde")]
    pub memory: u64,
    /// Maximum wall-clock time of one call. 30 s by default.
    #[serde(with = "duration_serde")]
    pub time: Duration,
    /// Maximum total size of a call's result. 64 MiB by default: a model reads a large result
    /// through a preview and pages (the conversation keeps it whole), and a result that large
    /// is written through `result-stream` into a file, never held whole in memory (what a
    /// plugin returns at once is held to 16 MiB whatever this says).
    #[serde(with = "bytes_serde")]
    pub output: u64,
    /// Maximum size of the JSON arguments. 1 MiB by default; checked before instantiating.
    #[serde(with = "bytes_serde")]
    pub args: u64,
    /// Bytes of stderr and log messages kept per call. 64 KiB by default; the rest is dropped
    /// (the plugin's writes still succeed).
    #[serde(with = "bytes_serde")]
    pub log: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 512 << 20,
            time: Duration::from_secs(30),
            output: 64 << 20,
            args: 1 << 20,
            log: 64 << 10,
        }
    }
}

impl Limits {
    /// Applies one `key=value` override such as `memory=64MiB` or `time=5s`.
    pub fn apply(&mut self, spec: &str) -> Result<LimitKind, LimitError> {
        let (key, value) = spec
            .split_once('=')
            .ok_or_else(|| limit_err(spec, "expected `key=value`"))?;
        let (key, value) = (key.trim(), value.trim());
        let kind = LimitKind::ALL
            .into_iter()
            .find(|k| k.key() == key)
            .ok_or_else(|| limit_err(spec, format!("unknown limit `{key}`")))?;
        match kind {
            LimitKind::Time => {
                let d = parse_duration(value).map_err(|r| limit_err(spec, r))?;
                if d.is_zero() {
                    return Err(limit_err(spec, "the time limit must be more than zero"));
                }
                self.time = d;
            }
            _ => {
                let n = parse_bytes(value).map_err(|r| limit_err(spec, r))?;
                if n == 0 && kind != LimitKind::Log {
                    return Err(limit_err(
                        spec,
                        format!("the {kind} limit must be more than zero"),
                    ));
                }
                if kind == LimitKind::Memory && n > 4u64 << 30 {
                    return Err(limit_err(
                        spec,
                        "the memory limit must be at most 4GiB (the 32-bit WebAssembly address space)",
                    ));
                }
                match kind {
                    LimitKind::Memory => self.memory = n,
                    LimitKind::Output => self.output = n,
                    LimitKind::Args => self.args = n,
                    LimitKind::Log => self.log = n,
                    LimitKind::Time => unreachable!("handled above"),
                }
            }
        }
        Ok(kind)
    }

    /// Applies several overrides (e.g. from `--limit` flags) in order.
    pub fn with_overrides<'a>(
        mut self,
        specs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Limits, LimitError> {
        for s in specs {
            self.apply(s)?;
        }
        Ok(self)
    }

    /// The value of one limit in its human form (`64MiB`, `5s`), for messages.
    pub fn describe(&self, kind: LimitKind) -> String {
        match kind {
            LimitKind::Memory => format_bytes(self.memory),
            LimitKind::Time => format_duration(self.time),
            LimitKind::Output => format_bytes(self.output),
            LimitKind::Args => format_bytes(self.args),
            LimitKind::Log => format_bytes(self.log),
        }
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in LimitKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", k.key(), self.describe(*k))?;
        }
        Ok(())
    }
}

const UNITS: [(&str, u64); 7] = [
    ("gib", 1 << 30),
    ("mib", 1 << 20),
    ("kib", 1 << 10),
    ("gb", 1_000_000_000),
    ("mb", 1_000_000),
    ("kb", 1_000),
    ("b", 1),
];

/// Parses a size such as `64MiB`, `256 KiB`, `1GB` or `4096` (bytes).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "`{s}` is not a size; write a whole number with a unit such as `64MiB`"
        ));
    }
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is too large"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let mult = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!("unknown size unit in `{s}`; use B, KiB, MiB, GiB, KB, MB or GB")
            })?
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// Formats a size with the largest binary unit that divides it exactly (`64MiB`, `1000B`).
pub fn format_bytes(n: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    format!("{n}B")
}

/// Formats a measured size for people: exact when a unit divides it (`64MiB`), otherwise in
/// the largest unit in which it shows as at least 1.0, with one decimal (`64.9MiB`, not
/// `66496KiB`).
pub fn format_bytes_rounded(n: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
        let tenths = (n as f64 / m as f64 * 10.0).round();
        // In this unit when it shows at least 1.0 (so 1048575 bytes reads 1.0MiB).
        if tenths >= 10.0 {
            return format!("{:.1}{unit}", tenths / 10.0);
        }
    }
    format!("{n}B")
}

/// Parses a duration such as `5s`, `250ms` or `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "`{s}` is not a duration; write a whole number with a unit: `250ms`, `5s` or `2m`"
        ));
    }
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is too long"))?;
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" | "min" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("`{s}` is too long")),
        "" => Err(format!("`{s}` has no unit; write `{n}s` or `{n}ms`")),
        other => Err(format!(
            "unknown time unit `{other}` in `{s}`; use ms, s or m"
        )),
    }
}

/// Formats a duration in the largest unit that represents it exactly (`5s`, `250ms`, `2m`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 60_000 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

mod bytes_serde {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_bytes(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(n),
            Raw::S(s) => parse_bytes(&s).map_err(serde::de::Error::custom),
        }
    }
}

mod duration_serde {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

impl FromStr for LimitKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LimitKind::ALL
            .into_iter()
            .find(|k| k.key() == s)
            .ok_or_else(|| format!("unknown limit `{s}`; use memory, time, output, args or log"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_sane() {
        let l = Limits::default();
        assert_eq!(l.memory, 512 * 1024 * 1024);
        assert_eq!(l.time, Duration::from_secs(30));
        assert_eq!(l.output, 64 * 1024 * 1024);
        assert_eq!(l.args, 1024 * 1024);
        assert_eq!(l.log, 64 * 1024);
        assert_eq!(
            l.to_string(),
            "memory=512MiB time=30s output=64MiB args=1MiB log=64KiB"
        );
    }

    #[test]
    fn overrides_parse() {
        let l = Limits::default()
            .with_overrides([
                "memory=64MiB",
                "time=5s",
                "output=256KiB",
                "args=1000",
                "log = 1KB",
            ])
            .unwrap();
        assert_eq!(l.memory, 64 << 20);
        assert_eq!(l.time, Duration::from_secs(5));
        assert_eq!(l.output, 256 << 10);
        assert_eq!(l.args, 1000);
        assert_eq!(l.log, 1000);
        let mut l = Limits::default();
        assert_eq!(l.apply("time=250ms").unwrap(), LimitKind::Time);
        assert_eq!(l.time, Duration::from_millis(250));
    }

    #[test]
    fn bad_overrides_are_explained() {
        let mut l = Limits::default();
        let e = |l: &mut Limits, s: &str| l.apply(s).unwrap_err().to_string();
        assert!(e(&mut l, "memory").contains("expected `key=value`"));
        assert!(e(&mut l, "cpu=1").contains("unknown limit `cpu`"));
        assert!(e(&mut l, "memory=64XB").contains("unknown size unit"));
        assert!(e(&mut l, "memory=lots").contains("not a size"));
        assert!(e(&mut l, "time=5").contains("has no unit"));
        assert!(e(&mut l, "time=0s").contains("more than zero"));
        assert!(e(&mut l, "memory=0").contains("more than zero"));
        assert!(e(&mut l, "output=99999999999999999999GiB").contains("too large"));
        assert!(e(&mut l, "memory=1TiB").contains("unknown size unit"));
        assert!(e(&mut l, "memory=8GiB").contains("at most 4GiB"));
        assert_eq!(l, Limits::default(), "failed overrides change nothing");
    }

    /// Edge values are values or errors that say what is wrong, never a panic or a wrapped
    /// number.
    #[test]
    fn edge_values_never_overflow() {
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        for huge in [
            "18446744073709551616",
            "18446744073709551615KiB",
            "17179869184GiB",
            "99999999999999999999999999999B",
        ] {
            assert!(
                parse_bytes(huge).unwrap_err().contains("too large"),
                "{huge}"
            );
        }
        for bad in ["", " ", "-1", "-1MiB", "MiB", "1.5MiB", "+1"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_duration("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parse_duration("18446744073709551615ms"),
            Ok(Duration::from_millis(u64::MAX))
        );
        for huge in [
            "18446744073709551615m",
            "307445734561825861min",
            "18446744073709551616s",
        ] {
            assert!(
                parse_duration(huge).unwrap_err().contains("too long"),
                "{huge}"
            );
        }
        for bad in ["", "-5s", "s", "1.5s", "5h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        // The largest values are limits like any other, and print.
        let mut l = Limits::default();
        l.apply("time=18446744073709551615s").unwrap();
        l.apply("output=18446744073709551615").unwrap();
        assert_eq!(
            l.to_string(),
            "memory=512MiB time=18446744073709551615s output=18446744073709551615B args=1MiB \
             log=64KiB"
        );
        let back: Limits = serde_json::from_value(serde_json::to_value(l).unwrap()).unwrap();
        assert_eq!(back, l);
    }

    #[test]
    fn measured_sizes_read_in_the_largest_unit() {
        assert_eq!(format_bytes_rounded(66496 << 10), "64.9MiB");
        assert_eq!(format_bytes_rounded(64 << 20), "64MiB");
        assert_eq!(format_bytes_rounded(1536), "1.5KiB");
        assert_eq!(format_bytes_rounded(5 << 30), "5GiB");
        assert_eq!(format_bytes_rounded(900), "900B");
        assert_eq!(format_bytes_rounded(1000), "1.0KiB");
        assert_eq!(format_bytes_rounded((1 << 20) - 1), "1.0MiB");
    }

    #[test]
    fn formats_round_trip() {
        for n in [0u64, 1, 1000, 1024, 1536, 64 << 20, 3 << 30] {
            assert_eq!(parse_bytes(&format_bytes(n)).unwrap(), n);
        }
        for d in [
            Duration::from_millis(1),
            Duration::from_millis(1500),
            Duration::from_secs(120),
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[test]
    fn serde_uses_human_units() {
        let l = Limits::default().with_overrides(["memory=64MiB"]).unwrap();
        let json = serde_json::to_value(l).unwrap();
        assert_eq!(json["memory"], "64MiB");
        assert_eq!(json["time"], "30s");
        let back: Limits = serde_json::from_value(json).unwrap();
        assert_eq!(back, l);
        let partial: Limits = serde_json::from_str(r#"{"time":"2s","output":4096}"#).unwrap();
        assert_eq!(partial.time, Duration::from_secs(2));
        assert_eq!(partial.output, 4096);
        assert_eq!(partial.memory, Limits::default().memory);
        assert!(serde_json::from_str::<Limits>(r#"{"cpu":"1"}"#).is_err());
    }

    /// The README's limits table is what users read: one row per limit, with the default.
    #[test]
    fn readme_table_shows_every_default() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("## Limits").expect("section")..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
        let defaults = Limits::default();
        for kind in LimitKind::ALL {
            let row = format!("| `{}` | `{}` |", kind.key(), defaults.describe(kind));
            assert!(section.contains(&row), "README's limits table lacks {row}");
        }
        let rows = section.lines().filter(|l| l.starts_with("| `")).count();
        assert_eq!(rows, LimitKind::ALL.len(), "one row per limit");
    }
}
