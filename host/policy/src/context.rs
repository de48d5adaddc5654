//! What of a call's context Cedar policies read: a Cedar request is built with those parts
//! only, since converting a call's arguments, caller, session and time into Cedar values is
//! most of what a Cedar evaluation costs.

use std::collections::BTreeSet;

/// Which parts of a request's context Cedar policies read. Cedar names an attribute
/// literally, so a policy whose text does not contain a part's name cannot read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Needs {
    /// The arguments read by name (`context.input.path`, `context.input["path"]`,
    /// `context.input has path`); `None` when some text reads `context.input` otherwise (or
    /// names `input` where it is no attribute), which takes every argument.
    pub input: Option<BTreeSet<String>>,
    pub caller: bool,
    pub session: bool,
    pub time: bool,
    pub calls: bool,
    pub matched: bool,
}

impl Needs {
    /// The whole context.
    pub(crate) const ALL: Needs = Needs {
        input: None,
        caller: true,
        session: true,
        time: true,
        calls: true,
        matched: true,
    };

    /// What the policies written as `texts` read. A text that uses `context` other than to
    /// reach into it (`context.x`, `context["x"]`, `context has x`) reads all of it.
    pub(crate) fn of(texts: &[String]) -> Needs {
        let mut needs = Needs {
            input: Some(BTreeSet::new()),
            caller: false,
            session: false,
            time: false,
            calls: false,
            matched: false,
        };
        for text in texts {
            if text
                .match_indices("context")
                .any(|(at, _)| attribute_after(&text[at + "context".len()..]).is_none())
            {
                return Needs::ALL;
            }
            for (at, _) in text.match_indices("input") {
                let named = attribute_after(&text[at + "input".len()..]);
                match (&mut needs.input, named) {
                    (Some(names), Some(name)) => {
                        names.insert(name);
                    }
                    (input, None) => *input = None,
                    (None, Some(_)) => {}
                }
            }
            needs.caller |= text.contains("caller");
            needs.session |= text.contains("session");
            needs.time |= text.contains("time");
            needs.calls |= text.contains("calls");
            needs.matched |= text.contains("matched");
        }
        needs
    }
}

/// The attribute that `rest` (the text after a record's name) reaches into: `.name`,
/// `["name"]`, `has name` or `has "name"`; `None` when it does something else with the record.
fn attribute_after(rest: &str) -> Option<String> {
    let rest = rest.trim_start();
    let ident = |s: &str| -> Option<String> {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        (end > 0).then(|| s[..end].to_string())
    };
    let quoted = |s: &str| -> Option<String> {
        let s = s.strip_prefix('"')?;
        let end = s.find(['"', '\\'])?;
        s[end..].starts_with('"').then(|| s[..end].to_string())
    };
    if let Some(after) = rest.strip_prefix('.') {
        ident(after.trim_start())
    } else if let Some(after) = rest.strip_prefix('[') {
        quoted(after.trim_start())
    } else if let Some(after) = rest.strip_prefix("has") {
        let after = after.trim_start();
        quoted(after).or_else(|| ident(after))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_what_the_cedar_texts_name() {
        let needs = Needs::of(&[
            r#"context.input.path like "/x*" && context.input has "mode""#.to_string(),
            r#"context.input has depth && context.caller.origin == "mcp""#.to_string(),
        ]);
        let names: Vec<&str> = needs
            .input
            .as_ref()
            .unwrap()
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(names, ["depth", "mode", "path"]);
        assert!(needs.caller && !needs.session && !needs.time && !needs.calls && !needs.matched);
        // Whole records, or a name that is no attribute, take everything.
        assert_eq!(Needs::of(&["context == {}".to_string()]), Needs::ALL);
        assert!(
            Needs::of(&[r#"context["input"] has path"#.to_string()])
                .input
                .is_none()
        );
        assert!(
            Needs::of(&[r#"context.caller.user == "input""#.to_string()])
                .input
                .is_none()
        );
        assert_eq!(attribute_after(r#" [ "a b" ]"#).as_deref(), Some("a b"));
        assert_eq!(attribute_after(".x_1 > 2").as_deref(), Some("x_1"));
        assert_eq!(attribute_after(" == {}"), None);
    }
}
