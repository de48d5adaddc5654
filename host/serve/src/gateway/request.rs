//! Reading a Chat Completions request: what it adds to its conversation (a user message, or
//! the results of the client's own tools), the history before it, and the tools the client
//! defines, each checked as an upstream would check it, with a 400 naming what is wrong.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use cordon_agent::{GatewayParameters, TurnParameters};
use cordon_core::Requester;

use super::{GatewayError, parameters};

/// The fields of a Chat Completions request this parser reads itself; every other field is
/// a parameter of the turn's model requests (see [`super::parameters`]).
pub(super) const HANDLED: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "n",
    "user",
    "tools",
    "tool_choice",
];

/// The longest `user` field taken (OpenAI's own limit is of this order).
const MAX_USER_LEN: usize = 256;

/// One message of a request, reduced to what a turn uses.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Said {
    pub(super) role: Role,
    pub(super) text: String,
    /// An assistant message's tool calls.
    pub(super) tool_calls: Vec<WireCall>,
    /// The call a tool message answers.
    pub(super) tool_call_id: Option<String>,
    /// A user message's content parts, when they are not all text (images, audio).
    pub(super) parts: Option<Vec<Value>>,
}

impl Said {
    pub(super) fn new(role: Role, text: impl Into<String>) -> Self {
        Said {
            role,
            text: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            parts: None,
        }
    }
}

/// A tool call as the Chat Completions API carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WireCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

impl WireCall {
    pub(super) fn to_json(&self, index: usize) -> Value {
        json!({
            "index": index,
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub(super) fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool the client defined and runs itself.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ClientTool {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) parameters: Value,
}

/// What a request adds to its conversation.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Input {
    /// A new user message: a new turn. `parts`: its content parts when they are not all
    /// text, sent to the model as given.
    Message {
        text: String,
        parts: Option<Vec<Value>>,
    },
    /// The results of the client's own tools that the last response asked for: the turn
    /// that asked goes on.
    ToolResults(Vec<(String, String)>),
}

/// A checked request.
#[derive(Debug)]
pub(super) struct ChatRequest {
    /// The model as the client named it.
    pub(super) model: String,
    /// The upstream model it stands for.
    pub(super) upstream: String,
    /// Every message before `input`.
    pub(super) history: Vec<Said>,
    /// Every message the client sent.
    pub(super) sent: Vec<Said>,
    pub(super) input: Input,
    pub(super) client_tools: Vec<ClientTool>,
    pub(super) stream: bool,
    pub(super) include_usage: bool,
    /// The end user the client named (`user`): sessions of different users stay apart even
    /// under one token. The client's word, never trusted for anything else.
    pub(super) user: Option<String>,
    /// What the client set for the turn's model requests.
    pub(super) parameters: TurnParameters,
}

/// The digest of a conversation as a client sends it, and who sends it: the requester (token
/// and end user), the model and each message's role, text, tool calls and the call it
/// answers, in order. Equal histories of different requesters never share a digest.
pub(super) fn history_digest(requester: &Requester, model: &str, history: &[Said]) -> String {
    let list: Vec<Value> = history
        .iter()
        .map(|s| {
            let calls: Vec<Value> = s
                .tool_calls
                .iter()
                .map(|c| json!([c.id, c.name, c.arguments]))
                .collect();
            // Parts only when there are any: digests recorded before parts were kept match.
            let mut said = json!([s.role.name(), s.text, calls, s.tool_call_id]);
            if let (Some(parts), Some(list)) = (&s.parts, said.as_array_mut()) {
                list.push(Value::Array(parts.clone()));
            }
            said
        })
        .collect();
    let text = json!([requester.token, requester.user, model, list]).to_string();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Which content parts besides text a message may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Media {
    /// None (every message but the user's).
    Refused,
    /// Images, audio and files that carry their data (`data:` URLs, base64).
    Embedded,
    /// Those, and http(s) URLs the model server fetches (`[gateway.parameters] remote_media`).
    Remote,
}

impl Media {
    /// What a user message may hold under `bounds`.
    pub(super) fn for_user(bounds: &GatewayParameters) -> Self {
        if bounds.remote_media {
            Media::Remote
        } else {
            Media::Embedded
        }
    }
}

/// Refuses a media part whose data the model server would fetch or look up itself: a URL
/// (unless `media` is [`Media::Remote`]), or a `file_id` (a file of the operator's account
/// upstream, never the client's to name).
fn check_source(part: &Value, kind: &str, at: &str, media: Media) -> Result<(), GatewayError> {
    let inner = &part[kind];
    if inner.get("file_id").is_some_and(|v| !v.is_null()) {
        return Err(GatewayError::invalid(
            format!("{at}.{kind}.file_id"),
            "files by `file_id` are not taken: send the file's content as `file_data` (a data: \
             URL) with its `filename`",
        ));
    }
    let url = match kind {
        "image_url" => inner["url"].as_str(),
        "file" => inner["file_data"].as_str(),
        _ => return Ok(()),
    };
    match url {
        Some(u) if u.starts_with("data:") => Ok(()),
        Some(u)
            if media == Media::Remote
                && (u.starts_with("https://") || u.starts_with("http://")) =>
        {
            Ok(())
        }
        Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
            Err(GatewayError::invalid(
                format!("{at}.{kind}"),
                "a URL the model server would fetch from its own network is not taken here: \
                 send the content as a data: URL (base64), or an operator can allow URLs \
                 (cordon.toml's [gateway.parameters] remote_media = true)",
            ))
        }
        Some(_) if kind == "file" => Ok(()),
        _ => Err(GatewayError::invalid(
            format!("{at}.{kind}"),
            format!("a `{kind}` part needs its content as a data: URL"),
        )),
    }
}

/// The text of a message's `content` (a string, or parts), and the parts themselves when
/// some are not text and `media` allows them (a user message's images and audio, passed to
/// the model as given).
pub(super) fn content_of(
    content: &Value,
    at: &str,
    media: Media,
) -> Result<(String, Option<Vec<Value>>), GatewayError> {
    match content {
        Value::String(s) => Ok((s.clone(), None)),
        Value::Null => Ok((String::new(), None)),
        Value::Array(parts) => {
            let mut text = String::new();
            let mut all_text = true;
            for (i, part) in parts.iter().enumerate() {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text" | "input_text" | "output_text"), Some(t)) => text.push_str(t),
                    (Some(kind @ ("image_url" | "input_audio" | "file")), _)
                        if media != Media::Refused =>
                    {
                        if !part[kind].is_object() {
                            return Err(GatewayError::invalid(
                                format!("{at}.content[{i}].{kind}"),
                                format!("a `{kind}` part needs a `{kind}` object"),
                            ));
                        }
                        check_source(part, kind, &format!("{at}.content[{i}]"), media)?;
                        all_text = false;
                    }
                    (kind, _) => {
                        return Err(GatewayError::invalid(
                            format!("{at}.content[{i}]"),
                            format!(
                                "content parts of type {} are not supported here; send text \
                                 parts (`{{\"type\": \"text\", \"text\": …}}`){}",
                                kind.map_or("(none)".to_string(), |k| format!("`{k}`")),
                                if media != Media::Refused {
                                    ", `image_url`, `input_audio` or `file` parts"
                                } else {
                                    ""
                                }
                            ),
                        ));
                    }
                }
            }
            Ok((text, (!all_text).then(|| parts.clone())))
        }
        _ => Err(GatewayError::invalid(
            format!("{at}.content"),
            "`content` must be a string or a list of content parts",
        )),
    }
}

/// The tools a request defines (`tools`), checked as an upstream would check them.
pub(super) fn client_tools(value: Option<&Value>) -> Result<Vec<ClientTool>, GatewayError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(GatewayError::invalid("tools", "`tools` must be a list")),
    };
    let mut tools: Vec<ClientTool> = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        if tool["type"] != "function" {
            return Err(GatewayError::invalid(
                format!("{at}.type"),
                "only tools of type `function` are supported",
            ));
        }
        let function = &tool["function"];
        let name = function["name"].as_str().unwrap_or_default();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(GatewayError::invalid(
                format!("{at}.function.name"),
                format!("the tool name `{name}` is invalid: 1 to 64 letters, digits, `_` or `-`"),
            ));
        }
        if tools.iter().any(|t| t.name == name) {
            return Err(GatewayError::invalid(
                format!("{at}.function.name"),
                format!("the tool `{name}` is defined twice"),
            ));
        }
        let parameters = match &function["parameters"] {
            Value::Null => json!({"type": "object", "properties": {}}),
            p @ Value::Object(_) => p.clone(),
            _ => {
                return Err(GatewayError::invalid(
                    format!("{at}.function.parameters"),
                    "`parameters` must be a JSON Schema object",
                ));
            }
        };
        if let Err(e) = cordon_core::CompiledSchema::compile(&parameters) {
            return Err(GatewayError::invalid(
                format!("{at}.function.parameters"),
                format!("`parameters` of `{name}` is not a valid JSON Schema: {e}"),
            ));
        }
        tools.push(ClientTool {
            name: name.to_string(),
            description: function["description"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            parameters,
        });
    }
    Ok(tools)
}

/// An assistant message's `tool_calls`.
pub(super) fn wire_calls(value: Option<&Value>, at: &str) -> Result<Vec<WireCall>, GatewayError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(GatewayError::invalid(
                format!("{at}.tool_calls"),
                "`tool_calls` must be a list",
            ));
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, call)| {
            let (Some(id), Some(name)) = (call["id"].as_str(), call["function"]["name"].as_str())
            else {
                return Err(GatewayError::invalid(
                    format!("{at}.tool_calls[{i}]"),
                    "a tool call needs an `id` and a `function.name`",
                ));
            };
            Ok(WireCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: call["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            })
        })
        .collect()
}

/// A request's `user`: the end user the client names.
pub(super) fn user_of(value: Option<&Value>) -> Result<Option<String>, GatewayError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(u)) if u.len() <= MAX_USER_LEN => Ok(Some(u.clone())),
        Some(Value::String(_)) => Err(GatewayError::invalid(
            "user",
            format!("`user` is longer than {MAX_USER_LEN} bytes; send a shorter identifier"),
        )),
        Some(_) => Err(GatewayError::invalid(
            "user",
            "`user` must be a string that identifies the end user",
        )),
    }
}

/// How an API names what [`split_input`] reports on.
pub(super) struct InputNames {
    /// The list of messages or items (`messages`, `input`).
    pub(super) list: &'static str,
    /// A tool result's field naming the call it answers (`tool_call_id`, `call_id`).
    pub(super) call_id: &'static str,
    /// What a result's call is not a call of, and what to send instead.
    pub(super) not_asked: &'static str,
    /// Why the last entry must be a user message or tool results.
    pub(super) not_a_turn: &'static str,
}

const CHAT_NAMES: InputNames = InputNames {
    list: "messages",
    call_id: "tool_call_id",
    not_asked: "the assistant message before the tool results",
    not_a_turn: "the last message must be the user's (`\"role\": \"user\"`), or the results \
                 of the tool calls the last answer asked for (`\"role\": \"tool\"`): each \
                 request is one turn, or the rest of one",
};

/// What a request adds to its conversation, and how many of `sent` come before it: the
/// results of the client's tools that end it (each answering a call of the entry before
/// them, when `check_calls`), or else its last entry, a user message that is not empty.
/// `at(i)` is where `sent[i]` stands in the client's list, for the errors.
pub(super) fn split_input(
    sent: &[Said],
    at: impl Fn(usize) -> usize,
    names: &InputNames,
    check_calls: bool,
) -> Result<(usize, Input), GatewayError> {
    let list = names.list;
    let results = sent
        .iter()
        .rev()
        .take_while(|s| s.role == Role::Tool)
        .count();
    let first = sent.len() - results;
    if results > 0 {
        let asked = sent[..first]
            .last()
            .map(|s| s.tool_calls.as_slice())
            .unwrap_or_default();
        let mut answers = Vec::with_capacity(results);
        for (i, said) in sent.iter().enumerate().skip(first) {
            let id = said.tool_call_id.clone().unwrap_or_default();
            if check_calls && !asked.iter().any(|c| c.id == id) {
                return Err(GatewayError::invalid(
                    format!("{list}[{}].{}", at(i), names.call_id),
                    format!("`{id}` is not a call of {}", names.not_asked),
                ));
            }
            answers.push((id, said.text.clone()));
        }
        return Ok((first, Input::ToolResults(answers)));
    }
    match sent.last() {
        Some(Said {
            role: Role::User,
            text,
            parts,
            ..
        }) if !text.trim().is_empty() || parts.is_some() => Ok((
            sent.len() - 1,
            Input::Message {
                text: text.clone(),
                parts: parts.clone(),
            },
        )),
        Some(Said {
            role: Role::User, ..
        }) => Err(GatewayError::invalid(
            format!("{list}[{}].content", at(sent.len() - 1)),
            "the user's message is empty",
        )),
        _ => Err(GatewayError::invalid(list, names.not_a_turn)),
    }
}

/// A request body: a JSON object.
pub(super) fn json_object(body: &[u8]) -> Result<Map<String, Value>, GatewayError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(GatewayError::invalid("", "the body must be a JSON object")),
        Err(e) => Err(GatewayError::invalid(
            "",
            format!("the body is not JSON ({e}); send a JSON object"),
        )),
    }
}

/// A request's `model`, and the upstream model it stands for.
pub(super) fn model_of(
    fields: &Map<String, Value>,
    offered: &[(String, String)],
) -> Result<(String, String), GatewayError> {
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m,
        _ => {
            return Err(GatewayError::invalid(
                "model",
                "`model` must be a model name",
            ));
        }
    };
    match offered.iter().find(|(name, _)| name == model) {
        Some((_, upstream)) => Ok((model.clone(), upstream.clone())),
        None => Err(super::unknown_model(model, offered, Some("model"))),
    }
}

/// A boolean field; absent is false.
pub(super) fn flag(fields: &Map<String, Value>, name: &str) -> Result<bool, GatewayError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(GatewayError::invalid(
            name,
            format!("`{name}` must be a boolean"),
        )),
    }
}

pub(super) fn parse_request(
    body: &[u8],
    offered: &[(String, String)],
    bounds: &GatewayParameters,
) -> Result<ChatRequest, GatewayError> {
    let fields = json_object(body)?;
    let mut parameters = parameters::take(&fields, HANDLED, bounds)?;
    parameters.tool_choice = parameters::tool_choice(fields.get("tool_choice"))?;
    let (model, upstream) = model_of(&fields, offered)?;
    match fields.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(GatewayError::invalid(
                "n",
                format!("`n` is {n}: Cordon's gateway gives one answer per request (n = 1)"),
            ));
        }
    }
    let client_tools = client_tools(fields.get("tools"))?;
    let stream = flag(&fields, "stream")?;
    let include_usage = match fields.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => {
            if let Some(k) = o.keys().find(|k| *k != "include_usage") {
                return Err(GatewayError::invalid(
                    format!("stream_options.{k}"),
                    format!("`stream_options.{k}` is not supported; only `include_usage` is"),
                ));
            }
            o.get("include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        }
        Some(_) => {
            return Err(GatewayError::invalid(
                "stream_options",
                "`stream_options` must be an object",
            ));
        }
    };
    let user = user_of(fields.get("user"))?;
    let Some(Value::Array(messages)) = fields.get("messages") else {
        return Err(GatewayError::invalid(
            "messages",
            "`messages` must be a list of messages",
        ));
    };
    let mut sent = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(GatewayError::invalid(at, "a message must be a JSON object"));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            other => {
                return Err(GatewayError::invalid(
                    format!("{at}.role"),
                    format!(
                        "the role {} is not one of system, developer, user, assistant, tool",
                        other.map_or("(none)".to_string(), |r| format!("`{r}`"))
                    ),
                ));
            }
        };
        let (text, parts) = content_of(
            m.get("content").unwrap_or(&Value::Null),
            &at,
            if role == Role::User {
                Media::for_user(bounds)
            } else {
                Media::Refused
            },
        )?;
        let mut said = Said::new(role, text);
        said.parts = parts;
        match role {
            Role::Assistant => said.tool_calls = wire_calls(m.get("tool_calls"), &at)?,
            Role::Tool => match m.get("tool_call_id").and_then(Value::as_str) {
                Some(id) => said.tool_call_id = Some(id.to_string()),
                None => {
                    return Err(GatewayError::invalid(
                        format!("{at}.tool_call_id"),
                        "a tool message needs the `tool_call_id` of the call it answers",
                    ));
                }
            },
            _ => {}
        }
        sent.push(said);
    }
    let (before, input) = split_input(&sent, |i| i, &CHAT_NAMES, true)?;
    let history = sent[..before].to_vec();
    Ok(ChatRequest {
        model,
        upstream,
        history,
        sent,
        input,
        client_tools,
        stream,
        include_usage,
        user,
        parameters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn offered() -> Vec<(String, String)> {
        vec![("gpt-x".to_string(), "upstream".to_string())]
    }

    fn refused(body: Value) -> GatewayError {
        parse_request(body.to_string().as_bytes(), &offered(), &Default::default()).unwrap_err()
    }

    #[test]
    fn a_request_is_history_and_one_new_user_message() {
        let chat = parse_request(
            json!({
                "model": "gpt-x",
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": null,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                    {"role": "assistant", "content": "Hello."},
                    {"role": "user", "content": "Sum 1 and 2"},
                ],
            })
            .to_string()
            .as_bytes(),
            &offered(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(chat.upstream, "upstream");
        assert_eq!(
            chat.input,
            Input::Message {
                text: "Sum 1 and 2".into(),
                parts: None
            }
        );
        assert!(chat.stream && chat.include_usage);
        let roles: Vec<Role> = chat.history.iter().map(|s| s.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant]);
        assert_eq!(chat.history[1].text, "Hi");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let base = |extra: Value| {
            let mut body =
                json!({"model": "gpt-x", "messages": [{"role": "user", "content": "x"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let e = refused(base(json!({"temperature": 9})));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = refused(base(json!({"functions": []})));
        assert!(
            e.message.contains("define your tools with `tools`"),
            "{e:?}"
        );
        let e = refused(base(json!({"tool_choice": "sometimes"})));
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        let e = refused(base(
            json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
        ));
        assert!(e.message.contains("`a b` is invalid"), "{e:?}");
        let e = refused(base(json!({"n": 2})));
        assert!(e.message.contains("one answer per request"), "{e:?}");
        let e = refused(json!({"model": "nope", "messages": []}));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::NOT_FOUND, Some("model_not_found"))
        );
        assert!(e.message.contains("`gpt-x`"), "{e:?}");
        let e = refused(base(
            json!({"messages": [{"role": "assistant", "content": "x"}]}),
        ));
        assert!(
            e.message.contains("the last message must be the user's"),
            "{e:?}"
        );
        let e = refused(base(
            json!({"messages": [{"role": "tool", "content": "x"}]}),
        ));
        assert_eq!(e.param.as_deref(), Some("messages[0].tool_call_id"));
        let e = refused(base(json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "b", "content": "x"},
        ]})));
        assert!(
            e.message
                .contains("`b` is not a call of the assistant message"),
            "{e:?}"
        );
        let e = refused(base(json!({"messages": [
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "user", "content": "x"},
        ]})));
        assert!(e.message.contains("`image_url` are not supported"), "{e:?}");
        let e = refused(base(json!({"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}
        ]})));
        assert!(e.message.contains("needs a `image_url` object"), "{e:?}");
        let e = parse_request(b"{", &offered(), &Default::default()).unwrap_err();
        assert!(e.message.contains("not JSON"), "{e:?}");
    }

    #[test]
    fn parameters_images_and_the_tool_choice_are_kept_for_the_turn() {
        let image =
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}});
        let chat = parse_request(
            json!({
                "model": "gpt-x",
                "max_tokens": 4096,
                "temperature": 0.1,
                "tool_choice": "required",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]},
                ],
            })
            .to_string()
            .as_bytes(),
            &offered(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(chat.parameters.sent["max_tokens"], json!(4096));
        assert_eq!(chat.parameters.sent["temperature"], json!(0.1));
        assert_eq!(
            chat.parameters.tool_choice,
            Some(cordon_agent::ToolChoice::Required)
        );
        let Input::Message { text, parts } = chat.input else {
            panic!("a message")
        };
        assert_eq!(text, "What is this?");
        assert_eq!(parts.unwrap()[1], image);
    }

    #[test]
    fn tool_results_continue_the_turn_that_asked_for_them() {
        let chat = parse_request(
            json!({
                "model": "gpt-x",
                "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
                "messages": [
                    {"role": "user", "content": "Look it up"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "found"},
                ],
            })
            .to_string()
            .as_bytes(),
            &offered(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(
            chat.input,
            Input::ToolResults(vec![("call_1".into(), "found".into())])
        );
        assert_eq!(chat.history.len(), 2);
        assert_eq!(chat.client_tools[0].name, "lookup");
    }

    #[test]
    fn histories_are_told_apart_by_model_roles_and_text() {
        let said = |role, text: &str| Said::new(role, text);
        let ann = Requester::token("ann");
        let a = history_digest(&ann, "m", &[said(Role::User, "hi")]);
        assert_eq!(a, history_digest(&ann, "m", &[said(Role::User, "hi")]));
        assert_ne!(a, history_digest(&ann, "n", &[said(Role::User, "hi")]));
        assert_ne!(a, history_digest(&ann, "m", &[said(Role::Assistant, "hi")]));
        assert_ne!(a, history_digest(&ann, "m", &[said(Role::User, "hi ")]));
        // Another token, or another end user under the same token, never shares a digest.
        let bob = Requester::token("bob");
        assert_ne!(a, history_digest(&bob, "m", &[said(Role::User, "hi")]));
        let ann_as_carol = Requester {
            token: "ann".into(),
            user: Some("carol".into()),
        };
        assert_ne!(
            a,
            history_digest(&ann_as_carol, "m", &[said(Role::User, "hi")])
        );
        // The same text with an image is another message; plain text keeps the digest it
        // had before parts were kept (recorded histories still match).
        let mut pictured = said(Role::User, "hi");
        pictured.parts = Some(vec![
            json!({"type": "image_url", "image_url": {"url": "x"}}),
        ]);
        assert_ne!(a, history_digest(&ann, "m", &[pictured]));
        let before = json!([ann.token, ann.user, "m", [["user", "hi", [], null]]]).to_string();
        assert_eq!(a, hex::encode(Sha256::digest(before.as_bytes())));
    }
}
