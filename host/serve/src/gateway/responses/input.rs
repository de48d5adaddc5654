//! Reading a Responses API request into what a Chat Completions request would have carried
//! (a [`ChatRequest`]), so one turn of a Cordon session serves both APIs alike.
//!
//! - `instructions` come first in the history, as a system message; `system` and `developer`
//!   message items are system messages where they stand.
//! - Message items' content parts are passed to the model in Chat Completions form:
//!   `input_text` as text, `input_image` as `image_url`, `input_file` as `file` (a file given
//!   by URL or by `file_id` alone is refused: the model server cannot fetch it).
//! - `function_call` items are the calls of the assistant message before them (one assistant
//!   message per run of message and call items); `function_call_output` items their results.
//!   Consecutive assistant message items hold one answer: Cordon shows the text of each model
//!   request of a turn as an item of its own, and the last one is the answer, so that is the
//!   text kept.
//! - `item_reference` items name items of earlier responses; [`super::stored`] looks them up.
//! - The parameters are translated and then checked as a Chat Completions request's are
//!   ([`parameters::take`]): `max_output_tokens` is `max_tokens`, `text.format`
//!   `response_format` (`json_schema` unflattened), `text.verbosity` `verbosity`,
//!   `reasoning.effort` `reasoning_effort`. `include`, `truncation`, `top_logprobs`,
//!   `max_tool_calls`, `stream_options`, `reasoning.summary`, `context_management` and
//!   `prompt_cache_options` are taken and not sent: Cordon returns text and function calls
//!   only, and manages its context itself. `background`, `conversation` and `prompt` are
//!   refused: Cordon answers in the request, keeps conversations as sessions, and has no stored
//!   prompts.

use serde_json::{Map, Value, json};

use cordon_agent::GatewayParameters;

use super::super::request::{
    ChatRequest, ClientTool, InputNames, Role, Said, WireCall, split_input,
};
use super::super::request::{Media, client_tools, content_of, flag, json_object, model_of};
use super::super::{GatewayError, parameters};
use super::ResponseId;

/// The fields the Responses reader handles itself; all others are parameters of the turn.
const HANDLED: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "previous_response_id",
    "user",
    "include",
    "truncation",
    "top_logprobs",
    "max_tool_calls",
    "context_management",
    "prompt_cache_options",
    "background",
    "conversation",
    "prompt",
    "text",
    "reasoning",
    "max_output_tokens",
];

/// One input item, before references to earlier responses are looked up.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item {
    Message {
        role: Role,
        text: String,
        parts: Option<Vec<Value>>,
    },
    Call(WireCall),
    Output {
        call_id: String,
        text: String,
    },
    /// An item of an earlier response, by id.
    Reference(String),
}

/// A request as read, its items not yet looked up.
#[derive(Debug)]
pub(super) struct Parsed {
    pub(super) model: String,
    pub(super) upstream: String,
    pub(super) instructions: Option<String>,
    /// The items, each with its index in `input`.
    pub(super) items: Vec<(usize, Item)>,
    pub(super) previous: Option<ResponseId>,
    pub(super) client_tools: Vec<ClientTool>,
    pub(super) stream: bool,
    pub(super) user: Option<String>,
    pub(super) parameters: cordon_agent::TurnParameters,
    /// The request's fields a response echoes (`tools`, `temperature`, …).
    pub(super) echo: Map<String, Value>,
}

/// A checked request.
#[derive(Debug)]
pub(super) struct ResponsesRequest {
    pub(super) chat: ChatRequest,
    pub(super) previous: Option<ResponseId>,
    /// The system prompt the request sets: `instructions` and system messages, joined.
    pub(super) system: Option<String>,
    pub(super) echo: Map<String, Value>,
}

/// The fields a response echoes back from its request.
const ECHOED: &[&str] = &[
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "previous_response_id",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "metadata",
    "user",
    "store",
    "truncation",
];

pub(super) fn parse(
    body: &[u8],
    offered: &[(String, String)],
    bounds: &GatewayParameters,
) -> Result<Parsed, GatewayError> {
    let fields = json_object(body)?;
    let (model, upstream) = model_of(&fields, offered)?;
    for (name, what) in [
        (
            "background",
            "Cordon answers within the request: leave `background` out",
        ),
        (
            "conversation",
            "Cordon keeps each conversation as a session: continue it with \
             `previous_response_id` (or send the whole conversation as `input`)",
        ),
        (
            "prompt",
            "Cordon has no stored prompts: send the prompt as `instructions` and `input`",
        ),
    ] {
        match fields.get(name) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(_) => return Err(GatewayError::invalid(name, what)),
        }
    }
    let mut parameters =
        parameters::take(&translated(&fields)?, &[], bounds).map_err(|e| renamed(e, "", ""))?;
    parameters.tool_choice = parameters::tool_choice(fields.get("tool_choice"))?;
    let instructions = match fields.get("instructions") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()).filter(|s| !s.is_empty()),
        Some(_) => {
            return Err(GatewayError::invalid(
                "instructions",
                "`instructions` must be a string",
            ));
        }
    };
    let previous = match fields.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(
            ResponseId::parse(id)
                .ok_or_else(|| super::unknown_response(id, "previous_response_id"))?,
        ),
        Some(_) => {
            return Err(GatewayError::invalid(
                "previous_response_id",
                "`previous_response_id` must be the id of a response",
            ));
        }
    };
    let stream = flag(&fields, "stream")?;
    let user = super::super::request::user_of(fields.get("user"))?;
    let client_tools = tools(fields.get("tools"))?;
    let items = items(fields.get("input"), Media::for_user(bounds))?;
    let echo = ECHOED
        .iter()
        .filter_map(|k| fields.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    Ok(Parsed {
        model,
        upstream,
        instructions,
        items,
        previous,
        client_tools,
        stream,
        user,
        parameters,
        echo,
    })
}

/// The request's parameters under their Chat Completions names.
fn translated(fields: &Map<String, Value>) -> Result<Map<String, Value>, GatewayError> {
    let mut out = Map::new();
    for (name, value) in fields {
        if value.is_null() {
            continue;
        }
        match name.as_str() {
            "max_output_tokens" => {
                out.insert("max_tokens".into(), value.clone());
            }
            "text" => {
                let Value::Object(text) = value else {
                    return Err(GatewayError::invalid("text", "`text` must be an object"));
                };
                if let Some(format) = text.get("format").filter(|f| !f.is_null()) {
                    out.insert("response_format".into(), response_format(format)?);
                }
                if let Some(verbosity) = text.get("verbosity").filter(|v| !v.is_null()) {
                    out.insert("verbosity".into(), verbosity.clone());
                }
            }
            "reasoning" => {
                let Value::Object(reasoning) = value else {
                    return Err(GatewayError::invalid(
                        "reasoning",
                        "`reasoning` must be an object",
                    ));
                };
                if let Some(effort) = reasoning.get("effort").filter(|e| !e.is_null()) {
                    out.insert("reasoning_effort".into(), effort.clone());
                }
            }
            n if HANDLED.contains(&n) => {}
            _ => {
                out.insert(name.clone(), value.clone());
            }
        }
    }
    Ok(out)
}

/// `text.format` as a Chat Completions `response_format`: the Responses API's `json_schema`
/// form is flat (`name`, `schema`, `strict` beside `type`), the Chat Completions one nested.
fn response_format(format: &Value) -> Result<Value, GatewayError> {
    match format["type"].as_str() {
        Some("json_schema") => {
            let mut spec = Map::new();
            for key in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    spec.insert(key.into(), v.clone());
                }
            }
            Ok(json!({"type": "json_schema", "json_schema": spec}))
        }
        Some("text" | "json_object") => Ok(json!({"type": format["type"]})),
        _ => Err(GatewayError::invalid(
            "text.format.type",
            "`text.format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

/// An error about a Chat Completions field, or a path of the request as translated, named
/// as the Responses request has it. `from`/`to`: a path prefix to rename as well.
pub(super) fn renamed(mut e: GatewayError, from: &str, to: &str) -> GatewayError {
    const NAMES: &[(&str, &str)] = &[
        ("max_tokens", "max_output_tokens"),
        ("response_format.json_schema.schema", "text.format.schema"),
        ("response_format.json_schema", "text.format"),
        ("response_format", "text.format"),
        ("reasoning_effort", "reasoning.effort"),
        ("verbosity", "text.verbosity"),
        ("messages", "input"),
    ];
    if let Some(param) = e.param.take() {
        let mut param = match NAMES.iter().find(|(chat, _)| {
            param == *chat
                || param.starts_with(&format!("{chat}."))
                || param.starts_with(&format!("{chat}["))
        }) {
            Some((chat, ours)) => {
                e.message = e
                    .message
                    .replace(&format!("`{chat}`"), &format!("`{ours}`"));
                format!("{ours}{}", &param[chat.len()..])
            }
            None => param,
        };
        if !from.is_empty() && param.contains(from) {
            param = param.replace(from, to);
        }
        e.param = Some(param);
    }
    e
}

/// The function tools a request defines. Responses function tools are flat (`name`,
/// `parameters` beside `type`); they are checked as Chat Completions tools.
fn tools(value: Option<&Value>) -> Result<Vec<ClientTool>, GatewayError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(GatewayError::invalid("tools", "`tools` must be a list")),
    };
    let mut nested = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        match tool["type"].as_str() {
            Some("function") => {}
            kind => {
                return Err(GatewayError::invalid(
                    format!("tools[{i}].type"),
                    format!(
                        "tools of type {} are not supported: Cordon's gateway offers the model \
                         Cordon's own sandboxed tools, and your `function` tools, which you \
                         run yourself",
                        kind.map_or("(none)".to_string(), |k| format!("`{k}`"))
                    ),
                ));
            }
        }
        let mut function = Map::new();
        for key in ["name", "description", "parameters", "strict"] {
            if let Some(v) = tool.get(key) {
                function.insert(key.into(), v.clone());
            }
        }
        nested.push(json!({"type": "function", "function": function}));
    }
    client_tools(Some(&Value::Array(nested))).map_err(|e| renamed(e, ".function.", "."))
}

/// A message item's content in Chat Completions form: text, or parts.
fn content(
    content: &Value,
    at: &str,
    media: Media,
) -> Result<(String, Option<Vec<Value>>), GatewayError> {
    let allowed = media != Media::Refused;
    let Value::Array(parts) = content else {
        return content_of(content, at, media);
    };
    let mut chat = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{i}]");
        let converted = match part["type"].as_str() {
            Some("input_text" | "output_text" | "text") => {
                json!({"type": "text", "text": part["text"]})
            }
            Some("refusal") => json!({"type": "text", "text": part["refusal"]}),
            Some("input_image") if allowed => match part["image_url"].as_str() {
                Some(url) => {
                    let mut image = json!({"url": url});
                    if let Some(detail) = part["detail"].as_str() {
                        image["detail"] = json!(detail);
                    }
                    json!({"type": "image_url", "image_url": image})
                }
                None => {
                    return Err(GatewayError::invalid(
                        format!("{at}.image_url"),
                        "an `input_image` needs an `image_url` (a URL or a data: URL); images \
                         by `file_id` are not supported",
                    ));
                }
            },
            Some("input_file") if allowed => {
                if part.get("file_url").is_some_and(|u| !u.is_null()) {
                    return Err(GatewayError::invalid(
                        format!("{at}.file_url"),
                        "files by URL are not supported; send the file's content as \
                         `file_data` (a data: URL) with its `filename`",
                    ));
                }
                let mut file = Map::new();
                for key in ["file_data", "filename", "file_id"] {
                    if let Some(v) = part.get(key).filter(|v| !v.is_null()) {
                        file.insert(key.into(), v.clone());
                    }
                }
                json!({"type": "file", "file": file})
            }
            Some("input_audio") if allowed => {
                json!({"type": "input_audio", "input_audio": part["input_audio"]})
            }
            kind => {
                return Err(GatewayError::invalid(
                    at,
                    format!(
                        "content parts of type {} are not supported here; send `input_text` \
                         parts{}",
                        kind.map_or("(none)".to_string(), |k| format!("`{k}`")),
                        if allowed {
                            ", `input_image` or `input_file` parts"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        };
        chat.push(converted);
    }
    content_of(&Value::Array(chat), at, media)
}

/// `input`: a string (one user message) or a list of items.
fn items(value: Option<&Value>, media: Media) -> Result<Vec<(usize, Item)>, GatewayError> {
    let list = match value {
        Some(Value::String(text)) => {
            return Ok(vec![(
                0,
                Item::Message {
                    role: Role::User,
                    text: text.clone(),
                    parts: None,
                },
            )]);
        }
        Some(Value::Array(list)) => list,
        _ => {
            return Err(GatewayError::invalid(
                "input",
                "`input` must be a string or a list of input items",
            ));
        }
    };
    let mut items = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let at = format!("input[{i}]");
        let string = |key: &str| -> Result<String, GatewayError> {
            item[key].as_str().map(str::to_string).ok_or_else(|| {
                GatewayError::invalid(
                    format!("{at}.{key}"),
                    format!(
                        "a `{}` item needs `{key}`",
                        item["type"].as_str().unwrap_or("")
                    ),
                )
            })
        };
        // A message item may leave out its type.
        let kind = item["type"]
            .as_str()
            .or(item.get("role").map(|_| "message"));
        let parsed = match kind {
            Some("message") => {
                let role = match item["role"].as_str() {
                    Some("user") => Role::User,
                    Some("system" | "developer") => Role::System,
                    Some("assistant") => Role::Assistant,
                    other => {
                        return Err(GatewayError::invalid(
                            format!("{at}.role"),
                            format!(
                                "the role {} is not one of user, system, developer, assistant",
                                other.map_or("(none)".to_string(), |r| format!("`{r}`"))
                            ),
                        ));
                    }
                };
                let (text, parts) = content(
                    &item["content"],
                    &at,
                    if role == Role::User {
                        media
                    } else {
                        Media::Refused
                    },
                )?;
                Item::Message { role, text, parts }
            }
            Some("function_call") => Item::Call(WireCall {
                id: string("call_id")?,
                name: string("name")?,
                arguments: string("arguments")?,
            }),
            Some("function_call_output") => {
                let text = match &item["output"] {
                    Value::String(s) => s.clone(),
                    output @ Value::Array(_) => {
                        content(output, &format!("{at}.output"), Media::Refused)?.0
                    }
                    _ => {
                        return Err(GatewayError::invalid(
                            format!("{at}.output"),
                            "`output` must be a string or a list of `input_text` parts",
                        ));
                    }
                };
                Item::Output {
                    call_id: string("call_id")?,
                    text,
                }
            }
            Some("item_reference") => Item::Reference(string("id")?),
            // Cordon never returns reasoning items; one a client kept from another server
            // says nothing the model here can read.
            Some("reasoning") => continue,
            other => {
                return Err(GatewayError::invalid(
                    format!("{at}.type"),
                    format!(
                        "input items of type {} are not supported; send `message`, \
                         `function_call`, `function_call_output` or `item_reference` items",
                        other.map_or("(none)".to_string(), |k| format!("`{k}`"))
                    ),
                ));
            }
        };
        items.push((i, parsed));
    }
    Ok(items)
}

/// The conversation items stand for, each with the index in `input` it came from: one
/// message per item, except that an assistant's messages and calls in a row are one message.
pub(super) fn saids(items: &[(usize, Item)]) -> Vec<(usize, Said)> {
    let mut out: Vec<(usize, Said)> = Vec::with_capacity(items.len());
    for (i, item) in items {
        let last = out
            .last_mut()
            .map(|(_, s)| s)
            .filter(|s| s.role == Role::Assistant);
        match item {
            Item::Message {
                role: Role::Assistant,
                text,
                ..
            } => match last {
                // The earlier text of the same answer (see the module's doc).
                Some(said) if said.tool_calls.is_empty() => said.text = text.clone(),
                _ => out.push((*i, Said::new(Role::Assistant, text.clone()))),
            },
            Item::Message { role, text, parts } => {
                let mut said = Said::new(*role, text.clone());
                said.parts = parts.clone();
                out.push((*i, said));
            }
            Item::Call(call) => match last {
                Some(said) => said.tool_calls.push(call.clone()),
                None => out.push((
                    *i,
                    Said {
                        tool_calls: vec![call.clone()],
                        ..Said::new(Role::Assistant, "")
                    },
                )),
            },
            Item::Output { call_id, text } => out.push((
                *i,
                Said {
                    tool_call_id: Some(call_id.clone()),
                    ..Said::new(Role::Tool, text.clone())
                },
            )),
            // Looked up before this; one that was not is not part of the conversation.
            Item::Reference(_) => {}
        }
    }
    out
}

const RESPONSES_NAMES: InputNames = InputNames {
    list: "input",
    call_id: "call_id",
    not_asked: "the `function_call` items before the outputs; send the calls the response \
                asked for, then their outputs, or name that response in `previous_response_id`",
    not_a_turn: "the last input item must be a user message, or the `function_call_output` \
                 items of the calls the last response asked for: each request is one turn, or \
                 the rest of one",
};

/// The request, its references looked up: what it adds to the conversation (a user message,
/// or function call outputs) and everything before that.
pub(super) fn request(parsed: Parsed) -> Result<ResponsesRequest, GatewayError> {
    let Parsed {
        model,
        upstream,
        instructions,
        items,
        previous,
        client_tools,
        stream,
        user,
        parameters,
        echo,
    } = parsed;
    let mut sent = saids(&items);
    if let Some(text) = &instructions {
        sent.insert(0, (0, Said::new(Role::System, text.clone())));
    }
    let system: Vec<&str> = sent
        .iter()
        .filter(|(_, s)| s.role == Role::System)
        .map(|(_, s)| s.text.as_str())
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    let (at, sent): (Vec<usize>, Vec<Said>) = sent.into_iter().unzip();
    // Continuing a response by id, the calls are that response's: the turn waiting on them
    // checks the ids.
    let (before, input) = split_input(&sent, |i| at[i], &RESPONSES_NAMES, previous.is_none())?;
    // The session holds what came before the response named; anything else the input holds
    // would not reach the model, so it is refused rather than dropped.
    let follows = |s: &Said| {
        s.role == Role::System
            || s.role == Role::Assistant && s.text.is_empty() && !s.tool_calls.is_empty()
    };
    if previous.is_some()
        && let Some(i) = (0..before).find(|&i| !follows(&sent[i]))
    {
        return Err(GatewayError::invalid(
            format!("input[{}]", at[i]),
            "with `previous_response_id`, `input` holds only what follows that response: the \
             next user message, or the `function_call_output` items of the calls it asked for \
             (the session holds the rest)",
        ));
    }
    let chat = ChatRequest {
        model,
        upstream,
        history: sent[..before].to_vec(),
        sent,
        input,
        client_tools,
        stream,
        include_usage: true,
        user,
        parameters,
    };
    Ok(ResponsesRequest {
        chat,
        previous,
        system,
        echo,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::request::Input;

    fn offered() -> Vec<(String, String)> {
        vec![("gpt-x".to_string(), "upstream".to_string())]
    }

    fn read(body: Value) -> Result<ResponsesRequest, GatewayError> {
        request(parse(
            body.to_string().as_bytes(),
            &offered(),
            &Default::default(),
        )?)
    }

    #[test]
    fn instructions_items_and_parameters_become_a_chat_turn() {
        let r = read(json!({
            "model": "gpt-x",
            "instructions": "Be brief.",
            "max_output_tokens": 300,
            "temperature": 0.2,
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}},
            "reasoning": {"effort": "low", "summary": "auto"},
            "include": [],
            "store": false,
            "input": [
                {"role": "user", "content": "Hi"},
                {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                 "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"},
                ]},
            ],
        }))
        .unwrap();
        let p = &r.chat.parameters.sent;
        assert_eq!(p["max_tokens"], json!(300));
        assert_eq!(p["temperature"], json!(0.2));
        assert_eq!(p["reasoning_effort"], json!("low"));
        assert_eq!(
            p["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": true}})
        );
        assert!(!p.contains_key("store") && !p.contains_key("include"));
        assert_eq!(r.system.as_deref(), Some("Be brief."));
        let roles: Vec<Role> = r.chat.history.iter().map(|s| s.role).collect();
        assert_eq!(roles, [Role::System, Role::User, Role::Assistant]);
        assert_eq!(r.chat.history[2].text, "Hello.");
        let Input::Message { text, parts } = &r.chat.input else {
            panic!("a message")
        };
        assert_eq!(text, "What is this?");
        assert_eq!(
            parts.as_ref().unwrap()[1],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "auto"}})
        );
    }

    #[test]
    fn function_call_outputs_continue_the_calls_before_them() {
        let tool = json!({"type": "function", "name": "lookup", "parameters": {"type": "object"}, "strict": false});
        let r = read(json!({
            "model": "gpt-x",
            "tools": [tool],
            "input": [
                {"role": "user", "content": "Look it up"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}", "id": "fc_1"},
                {"type": "function_call_output", "call_id": "c1", "output": "found"},
            ],
        }))
        .unwrap();
        assert_eq!(
            r.chat.input,
            Input::ToolResults(vec![("c1".into(), "found".into())])
        );
        assert_eq!(r.chat.history.len(), 2);
        assert_eq!(r.chat.history[1].text, "Looking.");
        assert_eq!(r.chat.history[1].tool_calls[0].id, "c1");
        assert_eq!(r.chat.client_tools[0].name, "lookup");
        // Outputs for calls nobody asked for, without a response to continue, are refused.
        let e = read(json!({"model": "gpt-x", "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call_output", "call_id": "c9", "output": "x"},
        ]}))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[1].call_id"));
        // With `previous_response_id`, the outputs alone are the input.
        let r = read(json!({"model": "gpt-x", "previous_response_id": "resp_s-1_1_0", "input": [
            {"type": "function_call_output", "call_id": "c9", "output": [{"type": "input_text", "text": "ok"}]},
        ]}))
        .unwrap();
        assert_eq!(
            r.chat.input,
            Input::ToolResults(vec![("c9".into(), "ok".into())])
        );
        assert_eq!(r.previous.unwrap().session, "s-1");
        // Earlier messages beside an id would not reach the model: refused, not dropped.
        let e = read(
            json!({"model": "gpt-x", "previous_response_id": "resp_s-1_1_0", "input": [
                {"role": "user", "content": "old"},
                {"role": "user", "content": "new"},
            ]}),
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0]"));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_its_responses_name() {
        let base = |extra: Value| {
            let mut body = json!({"model": "gpt-x", "input": "x"});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            read(body).unwrap_err()
        };
        let e = base(json!({"tools": [{"type": "web_search"}]}));
        assert_eq!(e.param.as_deref(), Some("tools[0].type"));
        assert!(
            e.message.contains("`web_search` are not supported"),
            "{e:?}"
        );
        let e = base(json!({"tools": [{"type": "function", "name": "a b"}]}));
        assert_eq!(e.param.as_deref(), Some("tools[0].name"));
        let e = base(json!({"max_output_tokens": 0}));
        assert_eq!(e.param.as_deref(), Some("max_output_tokens"));
        assert!(e.message.contains("`max_output_tokens` must be"), "{e:?}");
        let e = base(json!({"text": {"format": {"type": "json_schema", "schema": {}}}}));
        assert_eq!(e.param.as_deref(), Some("text.format"));
        let e = base(json!({"text": {"format": {"type": "yaml"}}}));
        assert_eq!(e.param.as_deref(), Some("text.format.type"));
        let e = base(json!({"background": true}));
        assert_eq!(e.param.as_deref(), Some("background"));
        let e = base(json!({"conversation": "conv_1"}));
        assert!(e.message.contains("previous_response_id"), "{e:?}");
        let e = base(json!({"input": [{"type": "web_search_call", "id": "x"}]}));
        assert_eq!(e.param.as_deref(), Some("input[0].type"));
        let e = base(
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x"}]}]}),
        );
        assert_eq!(e.param.as_deref(), Some("input[0].content[0].file_url"));
        let e = base(json!({"input": [{"role": "assistant", "content": "x"}]}));
        assert!(e.message.contains("the last input item must be"), "{e:?}");
        let e = base(json!({"previous_response_id": "chatcmpl-1"}));
        assert_eq!(e.status, axum::http::StatusCode::NOT_FOUND);
    }
}
