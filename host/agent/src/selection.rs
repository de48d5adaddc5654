//! Which tools a request offers when more are offered than `[agent] max_offered_tools`: every
//! tool's name, description and schema goes with every request, and on a small local model
//! each token of them costs prompt-processing time. In this order:
//!
//! 1. The candidates are the tools policy offers the conversation
//!    ([`crate::machine::ToolCatalog::offered`]): selection only ever leaves tools out.
//! 2. Tools a gateway client sent with its request (plugin [`CLIENT_PLUGIN`]) are always
//!    offered and take no place: the client chose them.
//! 3. With at most `max` other candidates (or `max` 0), all are offered.
//! 4. Kept first, up to `max`: the tool the turn's `tool_choice` names, then the tools the
//!    conversation has called, the most recent first, then the tools `[agent] router_model`
//!    picked for the turn (a small model asked once a turn, given each candidate's name and
//!    the first sentence of its description; what it names that is no candidate is ignored).
//! 5. The other places go to the candidates that best match the turn's question: BM25 over
//!    each tool's name, description and argument names and descriptions, against the turn's
//!    user message; ties go to the name first in order. A question that names a path
//!    (`/data/draft.md`, `notes.txt`) also asks for the words `path` and `file`; one with a
//!    number and an arithmetic word (`2 to the power of 100`) for `arithmetic`, `calculate`,
//!    `compute` and `math`.
//! 6. Then the tools of the same thing as a matched one, in the order of their match: those
//!    whose name ends in the same word (`search_email` and `read_email` after `send_email`).
//!    Places left go to the others in name order, so a question that names no tool's words
//!    still gets tools to work with.
//! 7. The offered tools go in name order, as without selection, so a request's tool list
//!    changes only when the selection does: within a turn, only by growing (rule 4).
//!
//! A call of an installed, allowed tool that was not offered is checked and run as any other
//! (the catalog holds every tool), and being called, it is offered from then on (rule 4).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::messages::Message;
use crate::tools::ToolSpec;

/// The plugin of the tools a gateway client sends with its request.
pub const CLIENT_PLUGIN: &str = "client";

/// Why a tool was offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Reason {
    /// The turn's `tool_choice` names it.
    Named,
    /// The conversation called it.
    Called,
    /// The router model picked it for the turn.
    Routed,
    /// It matched the question, with this BM25 score.
    Matched {
        /// The score (higher matches better).
        score: f32,
    },
    /// Its name ends in the same word as a tool that matched (`email`).
    Related {
        /// The matched tool.
        to: String,
    },
    /// A place was left after the tools that matched.
    Filled,
    /// The client sent it with the request.
    Client,
}

/// The tools a request offers out of more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// How many tools were candidates.
    pub of: usize,
    /// The tools offered and why, in name order.
    pub offered: Vec<Offered>,
}

/// One tool offered, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offered {
    /// The name the model knows it by.
    pub name: String,
    /// Why it was offered.
    #[serde(flatten)]
    pub why: Reason,
}

/// Whether a request with `candidates` offers only some of them (rules 2 and 3).
pub fn selects(candidates: &[&ToolSpec], max: usize) -> bool {
    max != 0
        && candidates
            .iter()
            .filter(|t| t.plugin != CLIENT_PLUGIN)
            .count()
            > max
}

/// The tools to offer out of `candidates` (see the module docs), with why; `None` when all
/// are offered.
pub fn select<'a>(
    candidates: &[&'a ToolSpec],
    max: usize,
    messages: &[Message],
    named: Option<&str>,
    routed: &[String],
) -> Option<(Vec<&'a ToolSpec>, Selection)> {
    if !selects(candidates, max) {
        return None;
    }
    let (client, candidates): (Vec<&ToolSpec>, Vec<&ToolSpec>) =
        candidates.iter().partition(|t| t.plugin == CLIENT_PLUGIN);
    let candidates = &candidates[..];
    let mut chosen: BTreeMap<&str, Reason> = BTreeMap::new();
    let by_name: HashMap<&str, &ToolSpec> =
        candidates.iter().map(|t| (t.name.as_str(), *t)).collect();
    if let Some(name) = named.filter(|n| by_name.contains_key(n)) {
        chosen.insert(name, Reason::Named);
    }
    for name in called(messages) {
        if chosen.len() >= max {
            break;
        }
        if let Some((name, _)) = by_name.get_key_value(name.as_str()) {
            chosen.entry(name).or_insert(Reason::Called);
        }
    }
    for name in routed {
        if chosen.len() >= max {
            break;
        }
        if let Some((name, _)) = by_name.get_key_value(name.as_str()) {
            chosen.entry(name).or_insert(Reason::Routed);
        }
    }
    let question = messages.iter().rev().find_map(|m| match m {
        Message::User { content, .. } => Some(content.as_str()),
        _ => None,
    });
    let ranked = rank(candidates, question.unwrap_or_default());
    for (score, tool) in &ranked {
        if chosen.len() >= max {
            break;
        }
        chosen
            .entry(tool.name.as_str())
            .or_insert(Reason::Matched { score: *score });
    }
    // Rule 6: the same thing as a matched tool.
    let mut names: Vec<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    for (_, matched) in &ranked {
        let Some((_, object)) = matched.name.rsplit_once('_') else {
            continue;
        };
        for name in &names {
            if chosen.len() >= max {
                break;
            }
            if name.rsplit_once('_').is_some_and(|(_, o)| o == object) {
                chosen.entry(name).or_insert_with(|| Reason::Related {
                    to: matched.name.clone(),
                });
            }
        }
    }
    let mut rest: Vec<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
    rest.sort_unstable();
    for name in rest {
        if chosen.len() >= max {
            break;
        }
        chosen.entry(name).or_insert(Reason::Filled);
    }
    let of = candidates.len() + client.len();
    let mut by_name = by_name;
    for tool in client {
        by_name.insert(tool.name.as_str(), tool);
        chosen.insert(tool.name.as_str(), Reason::Client);
    }
    let tools: Vec<&ToolSpec> = chosen.keys().map(|n| by_name[n]).collect();
    let selection = Selection {
        of,
        offered: chosen
            .into_iter()
            .map(|(name, why)| Offered {
                name: name.to_string(),
                why,
            })
            .collect(),
    };
    Some((tools, selection))
}

/// What the router model picked for one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routed {
    /// The index of the user message that started the turn.
    pub at_message: usize,
    /// The tools it picked, in its order.
    pub tools: Vec<String>,
}

/// The index of the user message the turn being answered started with.
pub fn turn_start(messages: &[Message]) -> Option<usize> {
    messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
}

/// The router model's request for `candidates`, at most `max` picks: a system message listing
/// each tool by name with the first sentence of its description, and the question.
pub fn router_messages(candidates: &[&ToolSpec], max: usize, question: &str) -> [String; 2] {
    let mut system = format!(
        "Pick the tools needed to answer the user's request. Answer with their names only, \
         separated by commas, at most {max}; answer none if no tool is needed.\n\nTools:\n"
    );
    for tool in candidates {
        let first = tool
            .description
            .split_inclusive(". ")
            .next()
            .unwrap_or_default()
            .trim();
        let first: String = first.chars().take(120).collect();
        system.push_str(&format!("- {}: {first}\n", tool.name));
    }
    [system, question.to_string()]
}

/// The candidates the router's `answer` names, in its order, each once, at most `max`.
pub fn router_picks(answer: &str, candidates: &[&ToolSpec], max: usize) -> Vec<String> {
    let mut picks: Vec<String> = Vec::new();
    for word in answer.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-')) {
        let word = word.trim_matches('.');
        if picks.len() >= max {
            break;
        }
        if let Some(tool) = candidates.iter().find(|t| t.name == word)
            && !picks.contains(&tool.name)
        {
            picks.push(tool.name.clone());
        }
    }
    picks
}

/// The tools the conversation called, the most recent first, each once.
fn called(messages: &[Message]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for m in messages.iter().rev() {
        if let Message::Assistant { tool_calls, .. } = m {
            for call in tool_calls.iter().rev() {
                if !names.contains(&call.name) {
                    names.push(call.name.clone());
                }
            }
        }
    }
    names
}

/// English words that say nothing about which tool is meant.
const STOP: [&str; 48] = [
    "a", "about", "all", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does",
    "for", "from", "get", "give", "has", "have", "how", "in", "into", "is", "it", "its", "me",
    "my", "of", "on", "or", "please", "show", "that", "the", "their", "there", "this", "to", "use",
    "was", "what", "when", "where", "which", "who", "with", "you",
];

/// The words of `text`, lowercased, split at anything not a letter or digit (so `sql_query`
/// is `sql` and `query`), words that say nothing left out, each as its English stem (so
/// `changed` and `changes` are one word).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    static STEMMER: std::sync::OnceLock<rust_stemmers::Stemmer> = std::sync::OnceLock::new();
    let stemmer =
        STEMMER.get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 1)
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
        .map(|w| stemmer.stem(&w).into_owned())
}

/// The words of the tools of installed components, by component digest and tool name:
/// worked out once per process, not once per request. Bounded: past this many it starts over.
const KEPT_DOCUMENTS: usize = 4096;

/// What a tool is matched on (see [`words_of`]), kept when the tool's component is known.
fn document(tool: &ToolSpec) -> std::sync::Arc<Vec<String>> {
    type Kept = std::sync::Mutex<HashMap<(String, String), std::sync::Arc<Vec<String>>>>;
    static KEPT: std::sync::OnceLock<Kept> = std::sync::OnceLock::new();
    if tool.digest.is_empty() {
        return std::sync::Arc::new(words_of(tool));
    }
    let key = (tool.digest.clone(), tool.name.clone());
    let kept = KEPT.get_or_init(Default::default);
    if let Some(words) = kept.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return words.clone();
    }
    let words = std::sync::Arc::new(words_of(tool));
    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() >= KEPT_DOCUMENTS {
        kept.clear();
    }
    kept.insert(key, words.clone());
    words
}

/// What a tool is matched on: its name, description and arguments.
fn words_of(tool: &ToolSpec) -> Vec<String> {
    let mut text = format!("{} {}", tool.name, tool.description);
    if let Some(properties) = tool.input_schema["properties"].as_object() {
        for (name, schema) in properties {
            text.push(' ');
            text.push_str(name);
            if let Some(d) = schema["description"].as_str() {
                text.push(' ');
                text.push_str(d);
            }
        }
    }
    words(&text).collect()
}

/// Whether `question` names a path: a word with a `/` in it (not a URL), or a file name with
/// an extension (`notes.txt`).
fn names_a_path(question: &str) -> bool {
    question.split_whitespace().any(|word| {
        let word = word.trim_matches(|c: char| !(c.is_alphanumeric() || "/~._-".contains(c)));
        let word = word.trim_end_matches('.');
        if word.contains("://") {
            return false;
        }
        if word.contains('/') {
            return word.chars().any(char::is_alphabetic);
        }
        word.rsplit_once('.').is_some_and(|(stem, extension)| {
            stem.chars().filter(|c| c.is_alphanumeric()).count() >= 2
                && (1..=5).contains(&extension.len())
                && extension.chars().all(|c| c.is_ascii_alphanumeric())
                && extension.chars().any(|c| c.is_ascii_alphabetic())
        })
    })
}

/// Words that, beside a number, ask for arithmetic.
const ARITHMETIC: [&str; 20] = [
    "average",
    "cubed",
    "divided",
    "exponent",
    "factorial",
    "logarithm",
    "mean",
    "minus",
    "modulo",
    "multiplied",
    "multiply",
    "percent",
    "percentage",
    "plus",
    "power",
    "remainder",
    "root",
    "squared",
    "sum",
    "times",
];

/// Whether `question` has a number and a word of arithmetic (`What is 2 to the power of 100`).
fn asks_arithmetic(question: &str) -> bool {
    question.chars().any(|c| c.is_ascii_digit())
        && question
            .split(|c: char| !c.is_alphabetic())
            .any(|w| ARITHMETIC.contains(&w.to_lowercase().as_str()))
}

/// The candidates that match `question` at all, best first (BM25, k1 1.2, b 0.75).
fn rank<'a>(candidates: &[&'a ToolSpec], question: &str) -> Vec<(f32, &'a ToolSpec)> {
    const K1: f32 = 1.2;
    const B: f32 = 0.75;
    let docs: Vec<std::sync::Arc<Vec<String>>> = candidates.iter().map(|t| document(t)).collect();
    let n = docs.len() as f32;
    let average = docs.iter().map(|d| d.len()).sum::<usize>() as f32 / n.max(1.0);
    let mut query: Vec<String> = words(question).collect();
    if names_a_path(question) {
        query.extend(["path".to_string(), "file".to_string()]);
    }
    if asks_arithmetic(question) {
        query.extend(words("arithmetic calculate compute math"));
    }
    query.sort();
    query.dedup();
    let idf: Vec<f32> = query
        .iter()
        .map(|q| {
            let df = docs.iter().filter(|d| d.contains(q)).count() as f32;
            ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    let mut ranked: Vec<(f32, &ToolSpec)> = candidates
        .iter()
        .zip(&docs)
        .map(|(tool, doc)| {
            let length = doc.len() as f32;
            let score = query
                .iter()
                .zip(&idf)
                .map(|(q, idf)| {
                    let tf = doc.iter().filter(|w| *w == q).count() as f32;
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average.max(1.0)))
                })
                .sum::<f32>();
            (score, *tool)
        })
        .filter(|(score, _)| *score > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ToolCall;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            tool: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for."}}}),
            output_schema: None,
            hints: Default::default(),
            plugin: "p".into(),
            grants: vec![],
            can_change_anything: false,
            digest: String::new(),
            proven: Default::default(),
            reach: Default::default(),
            exposure: Default::default(),
        }
    }

    fn catalog() -> Vec<ToolSpec> {
        vec![
            tool(
                "sql_query",
                "Runs a read-only SQL statement on a SQLite database.",
            ),
            tool(
                "sql_execute",
                "Changes a SQLite database: INSERT, UPDATE, DELETE.",
            ),
            tool("read_file", "Reads a text file."),
            tool("list_dir", "Lists one directory."),
            tool("get_weather", "The weather forecast for a city."),
            tool("send_email", "Sends an email message to recipients."),
            tool("create_event", "Creates a calendar event at a time."),
            tool(
                "run_python",
                "Runs Python code and returns what it printed.",
            ),
        ]
    }

    #[test]
    fn with_few_tools_all_are_offered() {
        let all = catalog();
        let refs: Vec<&ToolSpec> = all.iter().collect();
        assert!(select(&refs, 8, &[], None, &[]).is_none());
        assert!(select(&refs, 0, &[], None, &[]).is_none());
    }

    #[test]
    fn the_tools_matching_the_question_are_offered_in_name_order() {
        let all = catalog();
        let refs: Vec<&ToolSpec> = all.iter().collect();
        let messages = [Message::user("Which customers are in the shop database?")];
        let (tools, why) = select(&refs, 2, &messages, None, &[]).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["sql_execute", "sql_query"]);
        assert_eq!(why.of, 8);
        assert!(matches!(why.offered[0].why, Reason::Matched { score } if score > 0.0));
        let messages = [Message::user("What will the weather be in Oslo tomorrow?")];
        let (tools, why) = select(&refs, 2, &messages, None, &[]).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        // One tool matches; the place left goes to the first other by name.
        assert_eq!(names, ["create_event", "get_weather"]);
        assert_eq!(why.offered[0].why, Reason::Filled);
    }

    /// Rules 5 and 6: a path asks for file tools; a matched tool brings the tools of the same
    /// thing.
    #[test]
    fn a_path_asks_for_files_and_a_match_brings_its_kin() {
        let mut all = catalog();
        all.push(tool(
            "search_email",
            "Searches the mailbox by sender or words.",
        ));
        all.push(tool("write_file", "Writes text to a file."));
        all.push(tool("zip_files", "Packs files into an archive."));
        let refs: Vec<&ToolSpec> = all.iter().collect();
        let offered = |question: &str, max: usize| {
            let (tools, why) = select(&refs, max, &[Message::user(question)], None, &[]).unwrap();
            let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
            (names, why)
        };
        let (names, _) = offered("Save this paragraph to /data/draft.md.", 2);
        assert_eq!(names, ["read_file", "write_file"]);
        let (names, why) = offered("Did Bob send me anything about the invoice?", 2);
        assert_eq!(names, ["search_email", "send_email"]);
        assert!(why.offered.iter().any(|o| o.name == "search_email"
            && o.why
                == Reason::Related {
                    to: "send_email".into()
                }));
        assert!(asks_arithmetic("What is 2 to the power of 100?"));
        assert!(!asks_arithmetic("Show the last 100 log lines."));
        assert!(!asks_arithmetic("What is the power of this idea?"));
        for (question, path) in [
            ("Open notes.txt", true),
            ("What is in ~/todo?", true),
            ("Fetch https://example.com/a", false),
            ("Is 2.5 more than 2?", false),
            ("Use a tool, e.g. the first.", false),
        ] {
            assert_eq!(names_a_path(question), path, "{question}");
        }
    }

    /// The router's picks come after the named and called tools and before the matches; what
    /// it names that is no candidate, or twice, or past `max`, is left out.
    #[test]
    fn the_router_models_picks_are_offered_before_the_matches() {
        let all = catalog();
        let refs: Vec<&ToolSpec> = all.iter().collect();
        let answer = "run_python, rm_rf,\nrun_python and `get_weather`.";
        let picks = router_picks(answer, &refs, 3);
        assert_eq!(picks, ["run_python", "get_weather"]);
        assert_eq!(router_picks("none", &refs, 3), Vec::<String>::new());
        let messages = [Message::user("Which customers are in the shop database?")];
        let (tools, why) = select(&refs, 3, &messages, None, &picks).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "run_python", "sql_execute"]);
        assert!(
            why.offered
                .iter()
                .any(|o| o.name == "run_python" && o.why == Reason::Routed)
        );
        let [system, question] = router_messages(&refs, 3, "Hi?");
        assert!(system.contains("at most 3") && system.contains("- read_file: Reads a text file."));
        assert_eq!(question, "Hi?");
        assert_eq!(turn_start(&messages), Some(0));
    }

    #[test]
    fn the_named_tool_and_the_called_ones_are_kept_first() {
        let all = catalog();
        let refs: Vec<&ToolSpec> = all.iter().collect();
        let messages = [
            Message::user("hello"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "1".into(),
                    name: "run_python".into(),
                    arguments: "{}".into(),
                }],
                partial: false,
            },
            Message::user("Now send an email with the result"),
        ];
        let (tools, why) = select(&refs, 3, &messages, Some("list_dir"), &[]).unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["list_dir", "run_python", "send_email"]);
        assert_eq!(why.offered[0].why, Reason::Named);
        assert_eq!(why.offered[1].why, Reason::Called);
        // A name no candidate has (a tool policy hides) is never offered.
        let (tools, _) = select(&refs, 3, &messages, Some("rm_rf"), &[]).unwrap();
        assert!(tools.iter().all(|t| t.name != "rm_rf"));
    }

    #[test]
    fn a_clients_own_tools_are_always_offered_and_take_no_place() {
        let mut all = catalog();
        for n in 0..5 {
            let mut own = tool(&format!("client_tool_{n}"), "Something of the client's.");
            own.plugin = CLIENT_PLUGIN.into();
            all.push(own);
        }
        let refs: Vec<&ToolSpec> = all.iter().collect();
        let messages = [Message::user("Which customers are in the shop database?")];
        let (tools, why) = select(&refs, 2, &messages, None, &[]).unwrap();
        assert_eq!(tools.len(), 7);
        assert_eq!(why.of, 13);
        assert_eq!(
            tools.iter().filter(|t| t.plugin == CLIENT_PLUGIN).count(),
            5
        );
        // Few of Cordon's own: nothing is left out.
        assert!(select(&refs, 8, &messages, None, &[]).is_none());
    }
}
