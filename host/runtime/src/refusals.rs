//! What the sandbox refused one call, for its [`CallReport`].
//!
//! A refusal is noted where the host produces the error it answers with (a path that leaves a
//! grant, a write under a read-only grant, an origin or address that was not granted), never by
//! checking anything on the way of a call that is refused nothing: a call that refuses nothing
//! pays nothing, and allocates nothing, for its report.
//!
//! Code that runs with the call's store in hand (the WASI replacements, bulk-read's calls, the
//! HTTP policy's check) notes into a [`Refusals`] it is lent. Code that runs where the store is
//! out of reach (the TCP address check wasmtime-wasi calls from its connect, the DNS check of an
//! HTTP request wasmtime-wasi-http polls on its own, bulk-read's worker threads) notes into a
//! [`SharedRefusals`] handed out by a [`Refusals`]; it is made on first need, and what it holds
//! joins the report when the call ends.

use std::sync::{Arc, Mutex, PoisonError};

use std::path::Path;

use cordon_core::{CallReport, Grant, GrantError, MAX_GRANTS_WANTED, Marks, SAID_LACKED};

use crate::caps::MAX_REFUSAL_LINE_BYTES;

/// The longest grant a plugin may say it lacked: a path of a few thousand bytes is as long as
/// a grant gets.
const MAX_SAID_GRANT_BYTES: usize = 4096;

/// The refusals one part of a call's store noted, and the handle it gave out to code that
/// notes without the store.
#[derive(Default)]
pub(crate) struct Refusals {
    /// Refusals noted with the store in hand (capped and deduplicated by
    /// [`CallReport::refuse`]; only its refusal fields are used).
    noted: CallReport,
    /// The handle given to code that runs without the store, once any asked for one.
    shared: Option<SharedRefusals>,
    /// How many grants the plugin itself said the call lacked (`cordon:tool/grant-wanted`).
    said: usize,
}

impl Refusals {
    /// Notes one refusal, one human line (`write: /data/x under a read-only grant at /data`).
    pub(crate) fn refuse(&mut self, line: String) {
        self.noted.refuse(shortened(line));
    }

    /// Notes the grant that would have allowed what was just refused (grant syntax).
    pub(crate) fn want(&mut self, grant: String) {
        self.noted.want(grant);
    }

    /// Notes a grant the plugin says the call lacked (`cordon:tool/grant-wanted`), for what the
    /// host cannot see itself: a path outside every granted directory, an environment variable
    /// that was not granted. Untrusted like everything a plugin says, so only a plain grant is
    /// noted: of a kind a grant request may offer, naming an absolute directory seen at the
    /// same path, without marks (`public`, `shared`: what a person says of a grant's contents,
    /// which would change what the Rule of Two sees), at most [`MAX_GRANTS_WANTED`] a call.
    /// Whether it is ever offered is decided later, as for every wanted grant (ceiling,
    /// Cordon's own state, and only when the call fails).
    pub(crate) fn said_wanted(&mut self, grant: &str) -> Result<(), String> {
        if self.said >= MAX_GRANTS_WANTED {
            return Err(format!(
                "this call already said it lacked {MAX_GRANTS_WANTED} grants; no more are noted"
            ));
        }
        if grant.len() > MAX_SAID_GRANT_BYTES {
            return Err(format!(
                "a grant of {} bytes is longer than any the host offers ({MAX_SAID_GRANT_BYTES})",
                grant.len()
            ));
        }
        let parsed: Grant = grant.parse().map_err(|e: GrantError| e.to_string())?;
        if parsed.marks() != Marks::default() {
            return Err(format!(
                "`{grant}` carries marks; only a person marks a grant (`public`, `shared`), \
                 say the grant without them"
            ));
        }
        if let Grant::Fs(fs) = &parsed {
            if !fs.host.is_absolute() {
                return Err(format!(
                    "`{grant}` names a relative directory; name it from the root, as the host \
                     does (the guest sees a wanted directory at the same path)"
                ));
            }
            if fs.guest.as_deref().is_some_and(|g| Path::new(g) != fs.host) {
                return Err(format!(
                    "`{grant}` sees the directory at another path; a wanted directory is seen \
                     at its own path, say it without the guest part"
                ));
            }
        }
        self.said += 1;
        let grant = parsed.to_string();
        self.refuse(format!("{SAID_LACKED} `{grant}`"));
        self.want(grant);
        Ok(())
    }

    /// A handle for code that notes refusals where this store is out of reach; the same one
    /// every time, so the call's refusals stay in one place.
    pub(crate) fn shared(&mut self) -> SharedRefusals {
        self.shared.get_or_insert_with(Default::default).clone()
    }

    /// Moves everything noted so far into `report` (its cap and deduplication apply to the
    /// whole call, across the parts that noted).
    pub(crate) fn drain_into(&mut self, report: &mut CallReport) {
        merge(report, std::mem::take(&mut self.noted));
        if let Some(shared) = &self.shared {
            shared.drain_into(report);
        }
    }
}

/// Refusals noted where the call's store is out of reach, shared with the [`Refusals`] that
/// handed it out. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct SharedRefusals(Arc<Mutex<CallReport>>);

impl SharedRefusals {
    /// Notes one refusal (see [`Refusals::refuse`]).
    pub(crate) fn refuse(&self, line: String) {
        // A panic while the lock was held cannot leave a report half-changed in a way that
        // matters: keep noting.
        let line = shortened(line);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refuse(line);
    }

    /// Notes a grant that would have allowed a refusal (see [`Refusals::want`]).
    pub(crate) fn want(&self, grant: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .want(grant);
    }

    fn drain_into(&self, report: &mut CallReport) {
        let taken = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        merge(report, taken);
    }
}

/// `line`, cut to at most [`MAX_REFUSAL_LINE_BYTES`] (at a character boundary, ending in `…`),
/// with control characters shown as `?`: a line names paths a plugin chose, and it is shown to
/// people (a grant request quotes it), where a newline could forge a line of its own.
fn shortened(line: String) -> String {
    let mut line = if line.chars().any(char::is_control) {
        line.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    } else {
        line
    };
    if line.len() > MAX_REFUSAL_LINE_BYTES {
        const ELLIPSIS: &str = "…";
        let end = line.floor_char_boundary(MAX_REFUSAL_LINE_BYTES - ELLIPSIS.len());
        line.truncate(end);
        line.push_str(ELLIPSIS);
    }
    line
}

/// Adds the refusals of `from` to `report`. A line `from` dropped for its own cap is counted
/// as dropped even if `report` holds the same line: the count may then be one high, never low.
fn merge(report: &mut CallReport, from: CallReport) {
    for line in from.refused {
        report.refuse(line);
    }
    report.refusals_dropped += from.refusals_dropped;
    for grant in from.wanted {
        report.want(grant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_core::MAX_REFUSALS_RECORDED;

    #[test]
    fn noted_and_shared_refusals_join_one_report() {
        let mut refusals = Refusals::default();
        refusals.refuse("path: a".into());
        let shared = refusals.shared();
        let from_a_thread = refusals.shared();
        std::thread::spawn(move || from_a_thread.refuse("tcp: b".into()))
            .join()
            .unwrap();
        shared.refuse("path: a".into());
        let mut report = CallReport::default();
        refusals.drain_into(&mut report);
        assert_eq!(report.refused, vec!["path: a", "tcp: b"]);
        assert_eq!(report.refusals_dropped, 0);
        // Drained: nothing is reported twice.
        let mut again = CallReport::default();
        refusals.drain_into(&mut again);
        assert_eq!(again, CallReport::default());
    }

    #[test]
    fn control_characters_cannot_forge_a_line() {
        let mut refusals = Refusals::default();
        refusals.refuse("path: /data/x\nGrant? yes\u{1b}[2K".into());
        let mut report = CallReport::default();
        refusals.drain_into(&mut report);
        assert_eq!(report.refused, vec!["path: /data/x?Grant? yes?[2K"]);
    }

    #[test]
    fn long_lines_are_shortened() {
        let mut refusals = Refusals::default();
        let path = "é".repeat(MAX_REFUSAL_LINE_BYTES);
        refusals.refuse(format!("path: {path} escapes the grant at /data"));
        let mut report = CallReport::default();
        refusals.drain_into(&mut report);
        let line = &report.refused[0];
        assert!(line.len() <= MAX_REFUSAL_LINE_BYTES, "{}", line.len());
        assert!(
            line.starts_with("path: éé") && line.ends_with("é…"),
            "{line}"
        );
    }

    #[test]
    fn a_plugin_may_say_only_plain_grants_and_only_a_few() {
        let mut refusals = Refusals::default();
        refusals.said_wanted("env:API_KEY").unwrap();
        refusals.said_wanted("fs:/home/ann/docs").unwrap();
        for (bad, why) in [
            ("nonsense", "invalid grant"),
            ("fs:/home/ann:ro:public", "carries marks"),
            ("net:https://example.com:trusted", "carries marks"),
            ("fs:docs:ro", "relative"),
            ("fs:/home/ann/.ssh:/data/reports:ro", "another path"),
        ] {
            let e = refusals.said_wanted(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = format!("fs:/{}:ro", "a".repeat(MAX_SAID_GRANT_BYTES));
        assert!(refusals.said_wanted(&long).unwrap_err().contains("longer"));
        for i in 2..MAX_GRANTS_WANTED {
            refusals.said_wanted(&format!("env:V{i}")).unwrap();
        }
        let e = refusals.said_wanted("env:ONE_MORE").unwrap_err();
        assert!(e.contains("no more"), "{e}");
        let mut report = CallReport::default();
        refusals.drain_into(&mut report);
        assert_eq!(report.wanted.len(), MAX_GRANTS_WANTED);
        assert_eq!(report.wanted[..2], ["env:API_KEY", "fs:/home/ann/docs:ro"]);
        assert_eq!(report.refused[0], "the plugin says it lacked `env:API_KEY`");
    }

    #[test]
    fn the_cap_holds_across_parts() {
        let mut refusals = Refusals::default();
        let shared = refusals.shared();
        for i in 0..MAX_REFUSALS_RECORDED {
            refusals.refuse(format!("path: {i}"));
            shared.refuse(format!("tcp: {i}"));
        }
        let mut report = CallReport::default();
        refusals.drain_into(&mut report);
        assert_eq!(report.refused.len(), MAX_REFUSALS_RECORDED);
        assert_eq!(report.refusals_dropped, MAX_REFUSALS_RECORDED as u64);
    }
}
