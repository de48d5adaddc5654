//! Unit tests of the transitions, the rejections and resuming.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::transitions::backoff;
use super::*;
use crate::approval::{ApprovalAnswer, ApprovalConfig, Policy, StandingAnswer};
use crate::config::RetryConfig;
use crate::conversation::{Conversation, TurnOutcome};
use crate::messages::{LlmFailure, Message, ModelResponse, ToolCall, Usage};
use crate::tools::{ToolHints, ToolSpec};

fn spec(name: &str, can_change: bool) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        tool: name.into(),
        description: format!("{name} tool"),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false}),
        output_schema: None,
        hints: ToolHints::default(),
        plugin: "p".into(),
        grants: vec![format!("{name} grant")],
        can_change_anything: can_change,
        digest: String::new(),
        proven: Default::default(),
        reach: Default::default(),
        exposure: Default::default(),
    }
}

fn catalog() -> ToolCatalog {
    let mut approval = ApprovalConfig::default();
    approval.tools.insert("banned".into(), Policy::Deny);
    ToolCatalog::new(
        vec![
            spec("read", false),
            spec("write", true),
            spec("banned", false),
        ],
        approval,
    )
}

fn limits() -> TurnLimits {
    TurnLimits {
        max_iterations: 3,
        max_repeats: 2,
        retry: RetryConfig {
            max_retries: 2,
            initial_backoff_ms: 100,
            max_backoff_ms: 150,
            max_retry_after_ms: 5_000,
        },
        max_parallel_tools: 4,
    }
}

struct T {
    conv: Conversation,
    cat: ToolCatalog,
    lim: TurnLimits,
    inputs: CallInputs,
}

impl T {
    fn env(&self) -> Env<'_> {
        Env {
            catalog: &self.cat,
            limits: &self.lim,
            inputs: &self.inputs,
        }
    }
    fn new() -> Self {
        Self {
            conv: Conversation::new(),
            cat: catalog(),
            lim: limits(),
            inputs: NO_INPUTS.clone(),
        }
    }
    fn step(&mut self, e: Event) -> Vec<Action> {
        step(
            &mut self.conv,
            e,
            Env {
                catalog: &self.cat,
                limits: &self.lim,
                inputs: &self.inputs,
            },
        )
        .unwrap()
    }
    fn err(&mut self, e: Event) -> StepError {
        let before = self.conv.clone();
        let err = step(
            &mut self.conv,
            e,
            Env {
                catalog: &self.cat,
                limits: &self.lim,
                inputs: &self.inputs,
            },
        )
        .unwrap_err();
        assert_eq!(
            self.conv, before,
            "a rejected event must not change the conversation"
        );
        err
    }
    fn started(mut self) -> Self {
        self.step(Event::UserMessage {
            text: "hi".into(),
            by: None,
            parts: None,
            parameters: Default::default(),
        });
        self
    }
    fn respond(&mut self, content: &str, calls: &[(&str, &str, Value)]) -> Vec<Action> {
        let response = ModelResponse {
            content: content.into(),
            tool_calls: calls
                .iter()
                .map(|(id, name, args)| ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: match args {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    },
                })
                .collect(),
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
            }),
            finish_reason: None,
        };
        let mut a = self.step(Event::ModelResponded { response });
        assert_eq!(a.pop(), Some(Action::Advance));
        self.step(Event::Proceed)
    }
}

fn env<'a>(catalog: &'a ToolCatalog, limits: &'a TurnLimits) -> Env<'a> {
    Env {
        catalog,
        limits,
        inputs: &NO_INPUTS,
    }
}

fn has(actions: &[Action], pred: impl Fn(&Action) -> bool) -> bool {
    actions.iter().any(pred)
}

fn tool_messages(conv: &Conversation) -> Vec<(String, String, bool)> {
    conv.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                ..
            } => Some((tool_call_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[test]
fn user_message_starts_a_turn_from_idle_or_failed_only() {
    let mut t = T::new();
    let a = t.step(Event::UserMessage {
        text: "hi".into(),
        by: None,
        parts: None,
        parameters: Default::default(),
    });
    assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
    assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
    assert_eq!(t.conv.messages, vec![Message::user("hi")]);
    assert_eq!(t.conv.turns.len(), 1);
    let e = t.err(Event::UserMessage {
        text: "again".into(),
        by: None,
        parts: None,
        parameters: Default::default(),
    });
    assert!(e.message.contains("still waiting for the model"), "{e}");
    // A failed turn can be continued.
    t.step(Event::ModelFailed {
        failure: LlmFailure {
            transient: false,
            message: "bad".into(),
            status: Some(400),
            retry_after_ms: None,
        },
    });
    assert!(matches!(t.conv.state, State::Failed { .. }));
    t.step(Event::UserMessage {
        text: "next".into(),
        by: None,
        parts: None,
        parameters: Default::default(),
    });
    assert_eq!(t.conv.turns.len(), 2);
    assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
}

#[test]
fn text_answer_finishes_the_turn() {
    let mut t = T::new().started();
    let a = t.respond("hello", &[]);
    assert_eq!(t.conv.state, State::Idle);
    assert_eq!(t.conv.turns[0].outcome, Some(TurnOutcome::Answered));
    assert_eq!(t.conv.messages.last(), Some(&Message::assistant("hello")));
    assert_eq!(
        t.conv.usage,
        Usage {
            prompt_tokens: 10,
            completion_tokens: 2
        }
    );
    assert!(has(
        &a,
        |a| matches!(a, Action::Emit(AgentEvent::TurnFinished { answer, .. }) if answer == "hello")
    ));
}

#[test]
fn auto_tools_run_and_results_return_in_call_order() {
    let mut t = T::new().started();
    let a = t.respond(
        "",
        &[
            ("1", "read", json!({"q": "a"})),
            ("2", "read", json!({"q": "b"})),
        ],
    );
    assert!(matches!(t.conv.state, State::ExecutingTools { .. }));
    let Some(Action::RunTools { calls }) = a.iter().find(|a| matches!(a, Action::RunTools { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(
        calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        vec!["c1", "c2"]
    );
    // Results arrive out of order; history keeps call order.
    let a = t.step(Event::ToolsFinished {
        results: vec![
            ToolOutcome {
                call_id: "c2".into(),
                content: "B".into(),
                is_error: false,
                ..Default::default()
            },
            ToolOutcome {
                call_id: "c1".into(),
                content: "A".into(),
                is_error: false,
                ..Default::default()
            },
        ],
    });
    assert_eq!(
        tool_messages(&t.conv),
        vec![
            ("1".into(), "A".into(), false),
            ("2".into(), "B".into(), false)
        ]
    );
    assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
    assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
}

#[test]
fn tool_errors_go_through_handling_tool_error() {
    let mut t = T::new().started();
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    let a = t.step(Event::ToolsFinished {
        results: vec![ToolOutcome {
            call_id: "c1".into(),
            content: "Error (failed): x".into(),
            is_error: true,
            ..Default::default()
        }],
    });
    assert!(matches!(t.conv.state, State::HandlingToolError { .. }));
    assert_eq!(a.last(), Some(&Action::Advance));
    let a = t.step(Event::Proceed);
    assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
    assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
}

#[test]
fn missing_tool_result_is_an_error_result() {
    let mut t = T::new().started();
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    t.step(Event::ToolsFinished { results: vec![] });
    assert!(tool_messages(&t.conv)[0].2);
}

#[test]
fn unknown_tool_and_invalid_arguments_are_reported_to_the_model() {
    let mut t = T::new().started();
    t.respond(
        "",
        &[
            ("1", "reed", json!({"q": "a"})),
            ("2", "read", Value::String("{not json".into())),
            ("3", "read", json!({"q": 5})),
            ("4", "banned", json!({"q": "a"})),
            ("5", "", Value::String("garbage".into())),
        ],
    );
    let msgs = tool_messages(&t.conv);
    assert_eq!(msgs.len(), 5);
    assert!(msgs.iter().all(|m| m.2));
    assert!(
        msgs[0].1.contains("no tool named `reed`") && msgs[0].1.contains("read, write"),
        "{}",
        msgs[0].1
    );
    assert!(
        !msgs[0].1.contains("banned"),
        "denied tools are not advertised: {}",
        msgs[0].1
    );
    assert!(msgs[1].1.contains("not valid JSON"), "{}", msgs[1].1);
    assert!(
        msgs[2].1.contains("do not match its schema") && msgs[2].1.contains("/q"),
        "{}",
        msgs[2].1
    );
    assert!(
        msgs[3].1.starts_with(
            "Error (not run): refused by policy: cordon.toml denies the tool `banned`"
        ),
        "{}",
        msgs[3].1
    );
    assert!(msgs[4].1.contains("no tool name"), "{}", msgs[4].1);
    assert!(matches!(t.conv.state, State::HandlingToolError { ref errors } if errors.len() == 5));
}

#[test]
fn ask_tools_wait_for_approval_yes_and_no() {
    let mut t = T::new().started();
    let a = t.respond(
        "",
        &[
            ("1", "write", json!({"q": "a"})),
            ("2", "read", json!({"q": "b"})),
            ("3", "write", json!({"q": "c"})),
        ],
    );
    let Some(Action::RequestApproval { request }) = a
        .iter()
        .find(|a| matches!(a, Action::RequestApproval { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(request.call_id, "c1");
    assert_eq!(request.grants, vec!["write grant".to_string()]);
    assert!(
        request.reason.contains("grants allow changing"),
        "{}",
        request.reason
    );
    let e = t.err(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c2".into(),
        answer: ApprovalAnswer::Yes,
    });
    assert!(e.message.contains("c1, c3"), "{e}");
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c1".into(),
        answer: ApprovalAnswer::Yes,
    });
    assert!(matches!(&t.conv.state, State::AwaitingApproval { .. }));
    assert!(has(
        &a,
        |a| matches!(a, Action::RequestApproval { request } if request.call_id == "c3")
    ));
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c3".into(),
        answer: ApprovalAnswer::No,
    });
    let Some(Action::RunTools { calls }) = a.iter().find(|a| matches!(a, Action::RunTools { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(
        calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        vec!["c1", "c2"]
    );
    t.step(Event::ToolsFinished {
        results: vec![
            ToolOutcome {
                call_id: "c1".into(),
                content: "W".into(),
                is_error: false,
                ..Default::default()
            },
            ToolOutcome {
                call_id: "c2".into(),
                content: "R".into(),
                is_error: false,
                ..Default::default()
            },
        ],
    });
    let msgs = tool_messages(&t.conv);
    assert_eq!(msgs[0].1, "W");
    assert_eq!(msgs[1].1, "R");
    assert!(msgs[2].1.contains("user declined"), "{}", msgs[2].1);
    assert!(matches!(t.conv.state, State::HandlingToolError { .. }));
}

fn approval_of(actions: &[Action]) -> Option<ApprovalRequest> {
    actions.iter().find_map(|a| match a {
        Action::RequestApproval { request } => Some(request.clone()),
        _ => None,
    })
}

/// The attack of issue #20: two calls share the id `dup`; the answer about the first must
/// not approve the second, and each result must answer its own call.
#[test]
fn calls_sharing_an_id_are_approved_run_and_answered_one_by_one() {
    let mut t = T::new().started();
    let a = t.respond(
        "",
        &[
            ("dup", "write", json!({"q": "harmless"})),
            ("dup", "write", json!({"q": "harmful"})),
        ],
    );
    let first = approval_of(&a).expect("asked about the first call");
    assert_eq!(first.arguments, json!({"q": "harmless"}));
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: first.call_id.clone(),
        answer: ApprovalAnswer::Yes,
    });
    let second = approval_of(&a).expect("the second call is asked about on its own");
    assert_ne!(second.call_id, first.call_id);
    assert_eq!(second.arguments, json!({"q": "harmful"}));
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: second.call_id.clone(),
        answer: ApprovalAnswer::No,
    });
    let Some(Action::RunTools { calls }) = a.iter().find(|a| matches!(a, Action::RunTools { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(calls.len(), 1, "only the approved call runs: {calls:?}");
    t.step(Event::ToolsFinished {
        results: vec![ToolOutcome {
            call_id: first.call_id.clone(),
            content: "harmless result".into(),
            is_error: false,
            ..Default::default()
        }],
    });
    // On the wire, each result answers exactly one call.
    let Message::Assistant { tool_calls, .. } = &t.conv.messages[1] else {
        panic!("{:?}", t.conv.messages)
    };
    let wire: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(wire[0], "dup", "a unique first id is kept");
    assert_ne!(wire[1], "dup", "{wire:?}");
    let results = tool_messages(&t.conv);
    assert_eq!(results.len(), 2);
    assert_eq!(
        (results[0].0.as_str(), results[0].1.as_str()),
        (wire[0], "harmless result")
    );
    assert_eq!(results[1].0, wire[1]);
    assert!(results[1].1.contains("declined"), "{}", results[1].1);
}

#[test]
fn missing_and_repeated_wire_ids_are_replaced_and_unique_ones_kept() {
    let mut t = T::new().started();
    let a = t.respond(
        "",
        &[
            ("", "read", json!({"q": "a"})),
            ("cordon_c1", "read", json!({"q": "b"})),
            ("x", "read", json!({"q": "c"})),
            ("x", "read", json!({"q": "d"})),
            ("", "read", json!({"q": "e"})),
        ],
    );
    let Message::Assistant { tool_calls, .. } = &t.conv.messages[1] else {
        panic!("{:?}", t.conv.messages)
    };
    let wire: Vec<String> = tool_calls.iter().map(|c| c.id.clone()).collect();
    let wire: Vec<&str> = wire.iter().map(String::as_str).collect();
    // The model's own unique ids stay; the generated ones avoid them.
    assert_eq!(wire[1], "cordon_c1");
    assert_eq!(wire[2], "x");
    let unique: BTreeSet<&str> = wire.iter().copied().collect();
    assert_eq!(unique.len(), 5, "{wire:?}");
    assert!(wire.iter().all(|w| !w.is_empty()), "{wire:?}");
    // Events carry Cordon's ids beside the wire ids.
    let Some(Action::Emit(AgentEvent::ToolCallsRequested { calls })) = a
        .iter()
        .find(|a| matches!(a, Action::Emit(AgentEvent::ToolCallsRequested { .. })))
    else {
        panic!("{a:?}")
    };
    let ids: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.call.id.as_str()))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("c1", wire[0]),
            ("c2", "cordon_c1"),
            ("c3", "x"),
            ("c4", wire[3]),
            ("c5", wire[4])
        ]
    );
    let results = ["A", "B", "C", "D", "E"];
    t.step(Event::ToolsFinished {
        results: results
            .iter()
            .enumerate()
            .map(|(i, r)| ToolOutcome {
                call_id: format!("c{}", i + 1),
                content: r.to_string(),
                is_error: false,
                ..Default::default()
            })
            .collect(),
    });
    let answered: Vec<(String, String)> = tool_messages(&t.conv)
        .into_iter()
        .map(|(id, content, _)| (id, content))
        .collect();
    let expected: Vec<(String, String)> = wire
        .iter()
        .zip(results)
        .map(|(w, r)| (w.to_string(), r.to_string()))
        .collect();
    assert_eq!(answered, expected);
    // Ids keep counting through the conversation.
    t.respond("", &[("y", "read", json!({"q": "f"}))]);
    let State::ExecutingTools { batch } = &t.conv.state else {
        panic!("{:?}", t.conv.state)
    };
    assert_eq!(batch[0].id, "c6");
}

#[test]
fn a_policy_denial_names_the_rule_and_a_refusal_its_reason() {
    let mut t = T::new().started();
    t.respond(
        "",
        &[
            ("1", "banned", json!({"q": "a"})),
            ("2", "write", json!({"q": "b"})),
        ],
    );
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c2".into(),
        answer: ApprovalAnswer::Refused {
            reason: "this run approves nothing it would have to ask about".into(),
        },
    });
    let rejected: Vec<&str> = a
        .iter()
        .filter_map(|a| match a {
            Action::Emit(AgentEvent::ToolCallRejected { reason, .. }) => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let msgs = tool_messages(&t.conv);
    assert!(
        msgs[0].1.starts_with(
            "Error (not run): refused by policy: cordon.toml denies the tool `banned`"
        ),
        "{}",
        msgs[0].1
    );
    assert!(
        msgs[1]
            .1
            .contains("no one was asked: this run approves nothing")
            && !msgs[1].1.contains("declined"),
        "{}",
        msgs[1].1
    );
}

#[test]
fn always_binds_to_the_tool_identity_not_its_name() {
    // Two plugins offer `read_file`; the model sees qualified names.
    let clash = |plugin: &str| ToolSpec {
        name: format!("{plugin}__read_file"),
        tool: "read_file".into(),
        plugin: plugin.into(),
        ..spec("read_file", true)
    };
    let mut t = T::new();
    t.cat = ToolCatalog::new(
        vec![clash("files"), clash("files2")],
        ApprovalConfig::default(),
    );
    t = t.started();
    t.respond(
        "",
        &[
            ("1", "files__read_file", json!({"q": "a"})),
            ("2", "files2__read_file", json!({"q": "b"})),
        ],
    );
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c1".into(),
        answer: ApprovalAnswer::Always,
    });
    let policies: BTreeMap<String, Policy> = t
        .conv
        .session_approvals
        .iter()
        .map(|(k, a)| (k.clone(), a.policy))
        .collect();
    assert_eq!(
        policies,
        BTreeMap::from([("files.read_file".to_string(), Policy::Auto)])
    );
    let request = approval_of(&a).expect("the other plugin's tool is still asked about");
    assert_eq!(request.call_id, "c2");
    // Answers saved under a model-facing name move to the identity.
    let answer = StandingAnswer::unattributed;
    let mut legacy = BTreeMap::from([
        ("files2__read_file".to_string(), answer(Policy::Deny)),
        ("gone".to_string(), answer(Policy::Auto)),
        ("files.read_file".to_string(), answer(Policy::Auto)),
    ]);
    t.cat.upgrade_session(&mut legacy);
    let legacy: BTreeMap<String, Policy> = legacy.into_iter().map(|(k, a)| (k, a.policy)).collect();
    assert_eq!(
        legacy,
        BTreeMap::from([
            ("files.read_file".to_string(), Policy::Auto),
            ("files2.read_file".to_string(), Policy::Deny),
            ("gone".to_string(), Policy::Auto),
        ])
    );
}

#[test]
fn a_batch_saved_without_call_ids_gets_them_when_loaded() {
    let mut t = T::new().started();
    t.respond(
        "",
        &[
            ("dup", "write", json!({"q": "a"})),
            ("dup", "write", json!({"q": "b"})),
        ],
    );
    // The layout of an older save: no Cordon ids, the model's repeated id everywhere.
    let mut old: Value = serde_json::from_str(&t.conv.to_json()).unwrap();
    old.as_object_mut().unwrap().remove("next_call");
    for p in old["state"]["batch"].as_array_mut().unwrap() {
        p.as_object_mut().unwrap().remove("id");
        p["call"]["id"] = json!("dup");
    }
    for c in old["messages"][1]["tool_calls"].as_array_mut().unwrap() {
        c["id"] = json!("dup");
    }
    let mut loaded = Conversation::from_json(&old.to_string()).unwrap();
    let State::AwaitingApproval { batch } = &loaded.state else {
        panic!("{:?}", loaded.state)
    };
    let ids: Vec<&str> = batch.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, vec!["c1", "c2"]);
    let wire: Vec<String> = batch.iter().map(|p| p.call.id.clone()).collect();
    assert_eq!(wire[0], "dup");
    assert_ne!(wire[1], "dup");
    let Message::Assistant { tool_calls, .. } = &loaded.messages[1] else {
        panic!()
    };
    assert_eq!(
        tool_calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
        wire
    );
    let actions = resume(&mut loaded, t.env(), true).unwrap();
    assert!(
        matches!(&actions[0], Action::RequestApproval { request } if request.call_id == "c1"),
        "{actions:?}"
    );
}

#[test]
fn always_and_never_apply_to_the_rest_of_the_conversation() {
    let mut t = T::new().started();
    t.respond(
        "",
        &[
            ("1", "write", json!({"q": "a"})),
            ("2", "write", json!({"q": "b"})),
        ],
    );
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c1".into(),
        answer: ApprovalAnswer::Always,
    });
    assert!(has(
        &a,
        |a| matches!(a, Action::RunTools { calls } if calls.len() == 2)
    ));
    assert_eq!(t.conv.session_approvals["p.write"].policy, Policy::Auto);
    t.step(Event::ToolsFinished { results: vec![] });
    t.step(Event::Proceed);
    // Next answer: `write` now runs without asking.
    let a = t.respond("", &[("3", "write", json!({"q": "c"}))]);
    assert!(has(&a, |a| matches!(a, Action::RunTools { .. })));
    let mut t = T::new().started();
    t.respond("", &[("1", "write", json!({"q": "a"}))]);
    t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c1".into(),
        answer: ApprovalAnswer::Never,
    });
    assert_eq!(t.conv.session_approvals["p.write"].policy, Policy::Deny);
    assert!(matches!(t.conv.state, State::HandlingToolError { .. }));
}

#[test]
fn iteration_limit_leads_to_a_final_answer_pass() {
    let mut t = T::new().started();
    for i in 0..3 {
        t.respond(
            "",
            &[(&format!("c{i}"), "read", json!({"q": format!("{i}")}))],
        );
        let a = t.step(Event::ToolsFinished { results: vec![] });
        t.step(Event::Proceed);
        if i < 2 {
            assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
        } else {
            let _ = a;
            assert_eq!(t.conv.state, State::AwaitingModel { final_pass: true });
        }
    }
    // Even if the model still asks for tools, the final pass ends the turn.
    t.respond("final words", &[("x", "read", json!({"q": "z"}))]);
    assert_eq!(t.conv.state, State::Idle);
    assert_eq!(
        t.conv.turns[0].outcome,
        Some(TurnOutcome::FinalAnswerAfterLimit)
    );
    assert_eq!(
        t.conv.messages.last(),
        Some(&Message::assistant("final words"))
    );
}

#[test]
fn limit_check_after_successful_tools_too() {
    let mut t = T::new().started();
    t.lim.max_iterations = 1;
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    let a = t.step(Event::ToolsFinished {
        results: vec![ToolOutcome {
            call_id: "c1".into(),
            content: "ok".into(),
            is_error: false,
            ..Default::default()
        }],
    });
    assert!(has(&a, |a| matches!(
        a,
        Action::Emit(AgentEvent::IterationLimitReached { limit: 1 })
    )));
    assert_eq!(t.conv.state, State::AwaitingModel { final_pass: true });
}

#[test]
fn repeating_the_same_call_stops_for_lack_of_progress() {
    let mut t = T::new().started();
    t.lim.max_iterations = 10;
    for i in 0..2 {
        t.respond("", &[(&format!("c{i}"), "read", json!({"q": "same"}))]);
        t.step(Event::ToolsFinished { results: vec![] });
        t.step(Event::Proceed);
    }
    // Same arguments with different key order/spacing still count as the same call.
    let a = t.respond(
        "",
        &[("c2", "read", Value::String("{ \"q\" : \"same\" }".into()))],
    );
    assert_eq!(t.conv.state, State::Idle);
    let Some(TurnOutcome::NoProgress { explanation }) = &t.conv.turns[0].outcome else {
        panic!("{:?}", t.conv.turns)
    };
    assert!(
        explanation.contains("`read`") && explanation.contains("3 times"),
        "{explanation}"
    );
    assert!(has(&a, |a| matches!(
        a,
        Action::Emit(AgentEvent::TurnFinished { .. })
    )));
    // Every call has a result so the history stays valid for the next turn.
    assert!(
        matches!(t.conv.messages.last(), Some(Message::Tool { tool_call_id, .. }) if tool_call_id == "c2")
    );
}

#[test]
fn transient_failures_back_off_then_give_up() {
    let mut t = T::new().started();
    let transient = |after: Option<u64>| LlmFailure {
        transient: true,
        message: "HTTP 503".into(),
        status: Some(503),
        retry_after_ms: after,
    };
    let a = t.step(Event::ModelFailed {
        failure: transient(None),
    });
    assert!(has(&a, |a| *a
        == Action::ScheduleRetry {
            retry: 1,
            delay_ms: 100,
            jitter: true
        }));
    assert!(matches!(
        t.conv.state,
        State::TransientFailure { retry: 1, .. }
    ));
    let a = t.step(Event::RetryTimerFired);
    assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
    let a = t.step(Event::ModelFailed {
        failure: transient(Some(1000)),
    });
    assert!(has(&a, |a| *a
        == Action::ScheduleRetry {
            retry: 2,
            delay_ms: 1000,
            jitter: false
        }));
    t.step(Event::RetryTimerFired);
    let len = t.conv.messages.len();
    t.step(Event::ModelFailed {
        failure: transient(None),
    });
    let State::Failed { error, .. } = &t.conv.state else {
        panic!("{:?}", t.conv.state)
    };
    assert!(
        error.contains("HTTP 503") && error.contains("gave up after 2 retries"),
        "{error}"
    );
    assert_eq!(t.conv.messages.len(), len, "history intact");
    // Retry from Failed.
    let a = t.step(Event::Retry);
    assert!(has(&a, |a| *a == Action::CallModel { final_pass: false }));
    assert_eq!(t.conv.turns[0].outcome, None);
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let r = limits().retry;
    assert_eq!(backoff(&r, 1), 100);
    assert_eq!(backoff(&r, 2), 150);
    assert_eq!(backoff(&r, 60), 150);
}

#[test]
fn fatal_failures_and_long_retry_after_fail_at_once() {
    let mut t = T::new().started();
    t.step(Event::ModelFailed {
        failure: LlmFailure {
            transient: false,
            message: "HTTP 401: bad key".into(),
            status: Some(401),
            retry_after_ms: None,
        },
    });
    assert!(matches!(&t.conv.state, State::Failed { error, .. } if error == "HTTP 401: bad key"));
    let mut t = T::new().started();
    t.step(Event::ModelFailed {
        failure: LlmFailure {
            transient: true,
            message: "429".into(),
            status: Some(429),
            retry_after_ms: Some(60_000),
        },
    });
    assert!(matches!(&t.conv.state, State::Failed { error, .. } if error.contains("wait 60 s")));
}

#[test]
fn cancel_keeps_partial_answer_marked() {
    let mut t = T::new().started();
    t.step(Event::Cancel {
        partial: "half an ans".into(),
    });
    assert_eq!(t.conv.state, State::Idle);
    assert_eq!(t.conv.turns[0].outcome, Some(TurnOutcome::Cancelled));
    assert!(
        matches!(t.conv.messages.last(), Some(Message::Assistant { content, partial: true, .. }) if content == "half an ans")
    );
    // The conversation stays usable.
    t.step(Event::UserMessage {
        text: "again".into(),
        by: None,
        parts: None,
        parameters: Default::default(),
    });
    assert_eq!(t.conv.state, State::AwaitingModel { final_pass: false });
}

#[test]
fn cancel_during_approval_tools_retry_and_processing() {
    let mut t = T::new().started();
    t.respond("", &[("1", "write", json!({"q": "a"}))]);
    t.step(Event::Cancel {
        partial: String::new(),
    });
    // Cancelled while waiting for approval: the call never started.
    let result = &tool_messages(&t.conv)[0].1;
    assert!(
        result.starts_with("Error (not run)") && result.contains("cancelled"),
        "{result}"
    );
    assert_eq!(t.conv.state, State::Idle);

    // Cancelled while running: it did start, and may have done part of its work.
    let mut t = T::new().started();
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    t.step(Event::Cancel {
        partial: String::new(),
    });
    let result = &tool_messages(&t.conv)[0].1;
    assert!(
        result.starts_with("Error (cancelled)") && result.contains("while it ran"),
        "{result}"
    );

    let mut t = T::new().started();
    t.step(Event::ModelFailed {
        failure: LlmFailure {
            transient: true,
            message: "x".into(),
            status: None,
            retry_after_ms: None,
        },
    });
    t.step(Event::Cancel {
        partial: String::new(),
    });
    assert_eq!(t.conv.turns[0].outcome, Some(TurnOutcome::Cancelled));

    let mut t = T::new().started();
    t.step(Event::ModelResponded {
        response: ModelResponse {
            content: "text".into(),
            ..Default::default()
        },
    });
    t.step(Event::Cancel {
        partial: String::new(),
    });
    assert!(matches!(
        t.conv.messages.last(),
        Some(Message::Assistant { partial: true, .. })
    ));

    let mut t = T::new().started();
    t.respond("", &[("1", "nope", json!({}))]);
    t.step(Event::Cancel {
        partial: String::new(),
    });
    assert_eq!(t.conv.state, State::Idle);

    let mut t = T::new();
    assert!(
        t.err(Event::Cancel {
            partial: String::new()
        })
        .message
        .contains("nothing to cancel")
    );
}

#[test]
fn events_that_do_not_fit_are_rejected() {
    let mut t = T::new();
    for e in [
        Event::Proceed,
        Event::RetryTimerFired,
        Event::Retry,
        Event::ToolsFinished { results: vec![] },
        Event::ModelResponded {
            response: ModelResponse::default(),
        },
        Event::ApprovalGiven {
            by: String::new(),
            at_ms: 0,
            call_id: "x".into(),
            answer: ApprovalAnswer::Yes,
        },
    ] {
        t.err(e);
    }
    let mut t = T::new().started();
    t.err(Event::Proceed);
    t.err(Event::ToolsFinished { results: vec![] });
    t.err(Event::RetryTimerFired);
}

#[test]
fn resume_gives_the_next_action_for_every_state() {
    let mut t = T::new();
    assert!(resume(&mut t.conv, env(&t.cat, &t.lim), true).is_err());
    t.step(Event::UserMessage {
        text: "hi".into(),
        by: None,
        parts: None,
        parameters: Default::default(),
    });
    assert_eq!(
        resume(&mut t.conv, env(&t.cat, &t.lim), true).unwrap(),
        vec![Action::CallModel { final_pass: false }]
    );
    t.step(Event::ModelResponded {
        response: ModelResponse {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "1".into(),
                name: "write".into(),
                arguments: "{\"q\":\"a\"}".into(),
            }],
            ..Default::default()
        },
    });
    assert_eq!(
        resume(&mut t.conv, env(&t.cat, &t.lim), true).unwrap(),
        vec![Action::Advance]
    );
    t.step(Event::Proceed);
    assert!(matches!(
        &resume(&mut t.conv, env(&t.cat, &t.lim), true).unwrap()[0],
        Action::RequestApproval { request } if request.grants == vec!["write grant".to_string()]
    ));
    t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "c1".into(),
        answer: ApprovalAnswer::Yes,
    });
    // After a stop mid-run the call is closed as interrupted, never repeated, and the batch
    // goes back to the model with that error.
    let mut loaded = Conversation::from_json(&t.conv.to_json()).unwrap();
    assert_eq!(loaded, t.conv);
    let actions = resume(&mut loaded, t.env(), true).unwrap();
    assert!(
        matches!(&actions[0], Action::Emit(AgentEvent::ToolCallRejected { call_id, .. }) if call_id == "c1")
    );
    assert!(!has(&actions, |a| matches!(a, Action::RunTools { .. })));
    assert!(matches!(loaded.state, State::HandlingToolError { .. }));
    t.step(Event::ToolsFinished { results: vec![] });
    t.step(Event::Proceed);
    t.step(Event::ModelFailed {
        failure: LlmFailure {
            transient: true,
            message: "x".into(),
            status: None,
            retry_after_ms: None,
        },
    });
    assert!(matches!(
        resume(&mut t.conv, env(&t.cat, &t.lim), true).unwrap()[0],
        Action::ScheduleRetry { .. }
    ));
}

#[test]
fn resuming_mid_run_never_runs_a_call_again_and_keeps_recorded_results() {
    let mut t = T::new();
    t.step(Event::UserMessage {
        text: "hi".into(),
        by: None,
        parts: None,
        parameters: Default::default(),
    });
    t.respond(
        "",
        &[
            ("1", "read", json!({"q": "a"})),
            ("2", "write", json!({"q": "b"})),
            ("3", "read", json!({"q": "c"})),
        ],
    );
    t.step(Event::ApprovalGiven {
        by: "API token `ops`".into(),
        at_ms: 0,
        call_id: "c2".into(),
        answer: ApprovalAnswer::Yes,
    });
    assert!(matches!(t.conv.state, State::ExecutingTools { .. }));
    // The first call's result was recorded before the process stopped.
    t.step(Event::ToolFinished {
        outcome: ToolOutcome {
            call_id: "c1".into(),
            content: "read once".into(),
            is_error: false,
            ..Default::default()
        },
    });
    let mut loaded = Conversation::from_json(&t.conv.to_json()).unwrap();
    let actions = resume(&mut loaded, t.env(), true).unwrap();
    assert!(
        !has(&actions, |a| matches!(a, Action::RunTools { .. })),
        "nothing runs again, even a call that cannot change anything: {actions:?}"
    );
    let interrupted: Vec<(&str, &str)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::AuditCall { call, outcome } => Some((call.id.as_str(), outcome.label())),
            _ => None,
        })
        .collect();
    assert_eq!(
        interrupted,
        vec![("c2", "interrupted"), ("c3", "interrupted")]
    );
    let results: Vec<(&str, &str)> = loaded
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => Some((tool_call_id.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ("1", "read once"));
    for (id, content) in &results[1..] {
        assert!(
            content.contains("its effect is unknown") && content.contains("not run again"),
            "{id}: {content}"
        );
    }
    assert!(matches!(loaded.state, State::HandlingToolError { .. }));
}

#[test]
fn results_are_recorded_one_call_at_a_time() {
    let mut t = T::new().started();
    t.respond(
        "",
        &[
            ("1", "read", json!({"q": "a"})),
            ("2", "read", json!({"q": "b"})),
        ],
    );
    let finished = |id: &str| Event::ToolFinished {
        outcome: ToolOutcome {
            call_id: id.into(),
            content: format!("result of {id}"),
            is_error: false,
            ..Default::default()
        },
    };
    // Results may come in any order; the batch stays running until every call has one.
    let a = t.step(finished("c2"));
    assert!(a.is_empty(), "{a:?}");
    assert!(matches!(t.conv.state, State::ExecutingTools { .. }));
    // A result for a call that is not running is refused, naming the running ones.
    let e = t.err(finished("c2"));
    assert!(
        e.message.contains("no running call `c2`") && e.message.contains("c1"),
        "{e}"
    );
    let a = t.step(finished("c1"));
    assert!(has(&a, |a| matches!(
        a,
        Action::CallModel { final_pass: false }
    )));
    // The history keeps the order the model made the calls in.
    let ids: Vec<String> = tool_messages(&t.conv).into_iter().map(|m| m.0).collect();
    assert_eq!(ids, vec!["1", "2"]);
}

#[test]
fn who_decided_is_kept_for_every_call() {
    let mut t = T::new().started();
    let a = t.respond(
        "",
        &[
            ("1", "read", json!({"q": "a"})),
            ("2", "write", json!({"q": "b"})),
            ("3", "banned", json!({"q": "c"})),
            ("4", "nope", json!({})),
        ],
    );
    assert!(approval_of(&a).is_some());
    let State::AwaitingApproval { batch } = &t.conv.state else {
        panic!("{:?}", t.conv.state)
    };
    let decided: Vec<Option<(&str, &str)>> = batch
        .iter()
        .map(|p| {
            p.approval
                .as_ref()
                .map(|a| (a.decision.as_str(), a.by.as_str()))
        })
        .collect();
    assert_eq!(
        decided[0],
        Some(("auto", "policy: its grants cannot change anything"))
    );
    assert_eq!(decided[1], None, "still waiting for an answer");
    assert_eq!(
        decided[2],
        Some(("deny", "policy: cordon.toml denies the tool `banned`"))
    );
    assert_eq!(decided[3], Some(("invalid", "Cordon's check of the call")));
    let a = t.step(Event::ApprovalGiven {
        call_id: "c2".into(),
        answer: ApprovalAnswer::No,
        by: "API token `ops`".into(),
        at_ms: 0,
    });
    // The finished batch puts the calls that never ran in the audit log.
    let audited: Vec<(String, String, String)> = a
        .iter()
        .filter_map(|a| match a {
            Action::AuditCall { call, outcome } => Some((
                call.id.clone(),
                call.approval.as_ref().unwrap().by.clone(),
                outcome.label().to_string(),
            )),
            _ => None,
        })
        .collect();
    assert!(audited.is_empty(), "c1 still runs: {a:?}");
    let a = t.step(Event::ToolFinished {
        outcome: ToolOutcome {
            call_id: "c1".into(),
            content: "ok".into(),
            is_error: false,
            ..Default::default()
        },
    });
    let audited: Vec<(String, String, String)> = a
        .iter()
        .filter_map(|a| match a {
            Action::AuditCall { call, outcome } => Some((
                call.id.clone(),
                call.approval.as_ref().unwrap().by.clone(),
                outcome.label().to_string(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        audited,
        vec![
            ("c2".into(), "API token `ops`".into(), "not_run".into()),
            (
                "c3".into(),
                "policy: cordon.toml denies the tool `banned`".into(),
                "not_run".into()
            ),
            (
                "c4".into(),
                "Cordon's check of the call".into(),
                "not_run".into()
            ),
        ]
    );
}

#[test]
fn events_and_actions_serialize() {
    let e = Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: "1".into(),
        answer: ApprovalAnswer::Always,
    };
    let text = serde_json::to_string(&e).unwrap();
    assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), e);
    let a = Action::Emit(AgentEvent::TextDelta { text: "x".into() });
    let text = serde_json::to_string(&a).unwrap();
    assert!(text.contains("\"type\":\"text_delta\""), "{text}");
    assert_eq!(serde_json::from_str::<Action>(&text).unwrap(), a);
}

/// A catalog whose `[policy]` decides `write` per call: `q = "ok"` runs unasked, `q` starting
/// with `drop` is denied, anything starting with `big` is asked by a rule.
fn policed() -> ToolCatalog {
    let text = r#"
[policy]
rules = [
  { id = "fine", tool = "p.write", args = { q = "ok" }, decision = "allow" },
  { id = "no-drop", tool = "p.write", args = { q = { prefix = "drop" } }, decision = "deny", reason = "nothing is dropped" },
  { id = "big", tool = "p.write", args = { q = { prefix = "big" } }, decision = "ask", reason = "big writes are checked" },
]
"#;
    let config = crate::config::AgentConfig::from_toml(text, "cordon.toml").unwrap();
    let specs = vec![spec("read", false), spec("write", true)];
    let policy = crate::policy::load(&config.policy, &specs).map_err(|e| e.to_string());
    ToolCatalog::with_policy(specs, ApprovalConfig::default(), policy)
}

#[test]
fn the_policy_decides_each_call_by_its_arguments_and_names_the_rule() {
    let mut t = T {
        cat: policed(),
        ..T::new()
    }
    .started();
    let a = t.respond(
        "",
        &[
            ("1", "write", json!({"q": "ok"})),
            ("2", "write", json!({"q": "drop it"})),
            ("3", "write", json!({"q": "something"})),
        ],
    );
    let State::AwaitingApproval { batch, .. } = &t.conv.state else {
        panic!("{:?}", t.conv.state)
    };
    // Allowed by its rule, denied by its rule (the model is told which), asked by default.
    assert_eq!(batch[0].status, CallStatus::Approved);
    let note = batch[0].policy.as_ref().unwrap();
    assert_eq!(note.rule.as_ref().unwrap().id, "fine");
    assert!(note.digest.starts_with("sha256:"));
    let CallStatus::Denied { message } = &batch[1].status else {
        panic!("{:?}", batch[1].status)
    };
    assert!(
        message.contains("policy rule `no-drop` (cordon.toml:5): nothing is dropped"),
        "{message}"
    );
    assert_eq!(batch[2].status, CallStatus::Pending);
    assert!(batch[2].policy.as_ref().unwrap().rule.is_none());
    assert!(has(
        &a,
        |a| matches!(a, Action::RequestApproval { request } if request.call_id == "c3")
    ));
}

#[test]
fn an_always_does_not_answer_a_call_a_rule_asks_about() {
    let mut t = T {
        cat: policed(),
        ..T::new()
    }
    .started();
    let a = t.respond(
        "",
        &[
            ("1", "write", json!({"q": "small"})),
            ("2", "write", json!({"q": "big one"})),
        ],
    );
    let Some(Action::RequestApproval { request }) = a
        .iter()
        .find(|a| matches!(a, Action::RequestApproval { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(request.call_id, "c1");
    let a = t.step(Event::ApprovalGiven {
        by: "ann".into(),
        at_ms: 1,
        call_id: "c1".into(),
        answer: ApprovalAnswer::Always,
    });
    // The `always` answered c1 only: c2 is asked with the rule's own reason.
    let Some(Action::RequestApproval { request }) = a
        .iter()
        .find(|a| matches!(a, Action::RequestApproval { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(request.call_id, "c2");
    assert!(
        request.reason.contains("big writes are checked"),
        "{}",
        request.reason
    );
    assert!(t.conv.approved_tools.contains_key("p.write"));
}

#[test]
fn calls_earlier_in_one_answer_count_toward_a_limit() {
    let text = r#"
[policy]
rules = [
  { id = "fine", tool = "p.write", decision = "allow" },
  { id = "hourly", tool = "p.write", calls = { of = "tool", within = "1h", at_least = 2 }, decision = "deny", reason = "two writes an hour" },
]
"#;
    let config = crate::config::AgentConfig::from_toml(text, "cordon.toml").unwrap();
    let specs = vec![spec("read", false), spec("write", true)];
    let policy = crate::policy::load(&config.policy, &specs).unwrap();
    let scope = cordon_policy::CountScope {
        session: "s",
        caller: ("", ""),
    };
    // One write ran earlier this hour, as the store says.
    let mut inputs = CallInputs {
        session: "s".into(),
        ..NO_INPUTS.clone()
    };
    for q in policy.counters_for("p.write", scope, 0) {
        for name in q.names.iter() {
            inputs
                .keys
                .entry("p.write".into())
                .or_default()
                .insert(name.clone(), q.key.clone());
            inputs
                .counts
                .entry("p.write".into())
                .or_default()
                .insert(name.clone(), 1);
        }
    }
    let mut t = T {
        cat: ToolCatalog::with_policy(specs, ApprovalConfig::default(), Ok(policy)),
        inputs,
        ..T::new()
    }
    .started();
    t.respond(
        "",
        &[
            ("1", "write", json!({"q": "a"})),
            ("2", "write", json!({"q": "b"})),
            ("3", "write", json!({"q": "c"})),
        ],
    );
    let batch = match &t.conv.state {
        State::AwaitingApproval { batch, .. } | State::ExecutingTools { batch, .. } => batch,
        other => panic!("{other:?}"),
    };
    let statuses: Vec<&CallStatus> = batch.iter().map(|c| &c.status).collect();
    // The first is the hour's second write; the next two would pass the limit.
    assert_eq!(statuses[0], &CallStatus::Approved, "{statuses:?}");
    // The one that runs unasked was counted when it was decided (the driver keeps what was
    // reserved for it); the denied ones were not.
    let counted: Vec<bool> = batch
        .iter()
        .map(|c| c.policy.as_ref().is_some_and(|n| n.counted))
        .collect();
    assert_eq!(counted, [true, false, false]);
    for s in &statuses[1..] {
        assert!(
            matches!(s, CallStatus::Denied { message } if message.contains("two writes an hour")),
            "{statuses:?}"
        );
    }
}

#[test]
fn results_label_the_conversation_and_both_labels_hold_back_a_call_that_sends() {
    let grants = |list: &[&str]| -> cordon_core::Grants {
        list.iter().map(|g| g.parse().unwrap()).collect()
    };
    let mut read = spec("read", false);
    read.plugin = "files".into();
    read.exposure = cordon_core::Exposure::of(&grants(&["fs:/home/ann/docs:/docs:ro"]));
    let mut fetch = spec("fetch", true);
    fetch.plugin = "web".into();
    fetch.exposure = cordon_core::Exposure::of(&grants(&["net:http://127.0.0.1:8080"]));
    let mut approval = ApprovalConfig::default();
    approval.tools.insert("web.fetch".into(), Policy::Auto);
    let mut t = T::new();
    t.cat = ToolCatalog::new(vec![read, fetch], approval);
    t.lim.max_iterations = 10;
    let mut t = t.started();
    let finish = |t: &mut T, call_id: &str, is_error: bool| {
        t.step(Event::ToolsFinished {
            results: vec![ToolOutcome {
                call_id: call_id.into(),
                content: "text".into(),
                is_error,
                ..Default::default()
            }],
        })
    };
    // Untrusted content first: the next fetch still runs unasked.
    t.respond("", &[("1", "fetch", json!({"q": "page"}))]);
    finish(&mut t, "c1", false);
    assert_eq!(t.conv.labels.names(), ["untrusted"]);
    let a = t.respond("", &[("2", "fetch", json!({"q": "again"}))]);
    assert!(has(&a, |a| matches!(a, Action::RunTools { .. })), "{a:?}");
    // A failed read still gave the model whatever it said.
    finish(&mut t, "c2", false);
    t.respond("", &[("3", "read", json!({"q": "secret.txt"}))]);
    finish(&mut t, "c3", true);
    let a = t.step(Event::Proceed);
    assert_eq!(t.conv.labels.names(), ["private", "untrusted"], "{a:?}");
    let a = t.respond(
        "",
        &[
            ("4", "fetch", json!({"q": "leak"})),
            ("5", "fetch", json!({"q": "leak more"})),
        ],
    );
    let request = approval_of(&a).expect("the fetch is asked");
    assert!(request.rule_of_two);
    assert!(
        request.reason.contains("/home/ann/docs") && request.reason.contains("127.0.0.1:8080"),
        "{}",
        request.reason
    );
    assert!(!has(&a, |a| matches!(a, Action::RunTools { .. })));
    // The labels at decision time go with the call to its audit record, and with the
    // conversation wherever it is saved.
    let State::AwaitingApproval { batch } = &t.conv.state else {
        panic!("{:?}", t.conv.state)
    };
    assert_eq!(batch[0].labels, ["private", "untrusted"]);
    let saved = Conversation::from_tail(
        &serde_json::to_string(&t.conv.tail()).unwrap(),
        t.conv.messages.clone(),
    )
    .unwrap();
    assert_eq!(saved.labels, t.conv.labels);
    // `always` for the first held-back call does not run the second, whose arguments the
    // person has not seen: it is asked about in turn.
    let first = request.call_id.clone();
    let a = t.step(Event::ApprovalGiven {
        by: String::new(),
        at_ms: 0,
        call_id: first.clone(),
        answer: ApprovalAnswer::Always,
    });
    let next = approval_of(&a).expect("the second fetch is asked too");
    assert_ne!(next.call_id, first);
    assert_eq!(next.arguments, json!({"q": "leak more"}));
    assert!(!has(&a, |a| matches!(a, Action::RunTools { .. })));
}

#[test]
fn a_history_without_labels_is_labelled_from_its_tool_results() {
    let grants = |list: &[&str]| -> cordon_core::Grants {
        list.iter().map(|g| g.parse().unwrap()).collect()
    };
    let mut read = spec("read", false);
    read.exposure = cordon_core::Exposure::of(&grants(&["fs:/docs:/docs:ro"]));
    let mut fetch = spec("fetch", true);
    fetch.exposure = cordon_core::Exposure::of(&grants(&["net:https://example.com"]));
    let cat = ToolCatalog::new(vec![read, fetch], ApprovalConfig::default());
    let mut conv = Conversation::new();
    for (id, name) in [("1", "read"), ("2", "fetch"), ("3", "a_client_tool")] {
        conv.messages.push(Message::Tool {
            tool_call_id: id.into(),
            name: name.into(),
            content: "x".into(),
            is_error: false,
            kept: None,
        });
    }
    cat.label_history(&mut conv);
    assert_eq!(conv.labels.names(), ["private", "untrusted"]);
    // Labels held already are what the session saw: nothing is recomputed over them.
    let mut held = Conversation::new();
    held.labels = conv.labels.clone();
    held.messages = conv.messages[2..].to_vec();
    cat.label_history(&mut held);
    assert_eq!(held.labels, conv.labels);
}

fn refused(call_id: &str) -> Event {
    Event::ToolFinished {
        outcome: ToolOutcome {
            call_id: call_id.into(),
            content: "Error (denied): not granted".into(),
            is_error: true,
            wanted: vec!["net:https://api.example".into()],
            refused: vec!["http: https://api.example:443 (not granted)".into()],
            kept: None,
        },
    }
}

fn grant_answer(call_id: &str, answer: ApprovalAnswer) -> Event {
    Event::ApprovalGiven {
        call_id: call_id.into(),
        answer,
        by: "ann".into(),
        at_ms: 1,
    }
}

/// A person is not asked for a grant the policy would deny the call with: a rule on what the
/// tool could reach is not overruled by an answer to a grant request. And a grant given for
/// the conversation makes such a rule apply to the calls after it.
#[test]
fn rules_on_reach_see_what_grant_requests_give() {
    let text = r#"
[policy]
rules = [
  { id = "offline", tool = "p.read", network = true, decision = "deny", reason = "reads stay offline" },
  { id = "rw-asks", tool = "p.read", writes = true, decision = "ask", reason = "writing reads are checked" },
]
"#;
    let config = crate::config::AgentConfig::from_toml(text, "cordon.toml").unwrap();
    let specs = vec![spec("read", false), spec("write", true)];
    let policy = crate::policy::load(&config.policy, &specs).map_err(|e| e.to_string());
    let mut t = T {
        cat: ToolCatalog::with_policy(specs, ApprovalConfig::default(), policy),
        ..T::new()
    }
    .started();
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    let a = t.step(refused("c1"));
    assert!(
        !has(&a, |a| matches!(a, Action::RequestApproval { .. })),
        "{a:?}"
    );
    let result = t
        .conv
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .expect("the call's result");
    assert!(
        result.contains("Nobody was asked to grant net:https://api.example")
            && result.contains("reads stay offline"),
        "{result}"
    );
    // A read-write directory given for the conversation: the next call is decided as a tool
    // that writes, which a rule asks about.
    t.conv.grants.give(
        crate::grant_requests::Applying {
            plugin: "p",
            digest: "",
            requester: None,
            now_ms: 0,
        },
        &["fs:/tmp:/out:rw".to_string()],
        "ann",
        1,
        None,
        false,
    );
    t.step(Event::Proceed);
    t.respond("", &[("2", "read", json!({"q": "b"}))]);
    let State::AwaitingApproval { batch, .. } = &t.conv.state else {
        panic!("{:?}", t.conv.state)
    };
    assert_eq!(batch[0].status, CallStatus::Pending);
    let note = batch[0].policy.as_ref().unwrap();
    assert_eq!(note.rule.as_ref().unwrap().id, "rw-asks");
}

#[test]
fn a_refused_call_becomes_a_grant_request_and_runs_again_with_what_was_given() {
    let mut t = T::new().started();
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    let a = t.step(refused("c1"));
    let Some(Action::RequestApproval { request }) = a
        .iter()
        .find(|a| matches!(a, Action::RequestApproval { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(request.requested_grants, ["net:https://api.example"]);
    assert!(request.reason.contains("not granted"), "{}", request.reason);
    assert!(matches!(t.conv.state, State::AwaitingApproval { .. }));
    // `always` gives it to the conversation, and the call runs again with it.
    let a = t.step(grant_answer("c1", ApprovalAnswer::Always));
    let Some(Action::RunTools { calls }) = a.iter().find(|a| matches!(a, Action::RunTools { .. }))
    else {
        panic!("{a:?}")
    };
    assert_eq!(calls[0].grants, ["net:https://api.example"]);
    let p = crate::grant_requests::Applying {
        plugin: "p",
        digest: "",
        requester: None,
        now_ms: 0,
    };
    assert_eq!(t.conv.grants.of(p), ["net:https://api.example"]);
    t.step(Event::ToolFinished {
        outcome: ToolOutcome {
            call_id: "c1".into(),
            content: "fetched".into(),
            ..Default::default()
        },
    });
    assert_eq!(
        tool_messages(&t.conv),
        vec![("1".into(), "fetched".into(), false)]
    );
    // Given for the session: a later refusal of the same grant is not asked about again.
    assert!(
        t.conv
            .grants
            .askable(p, &["net:https://api.example".into()])
            .is_empty()
    );
}

#[test]
fn a_refused_grant_sends_the_refusal_and_forever_is_recorded_by_the_driver() {
    let mut t = T::new().started();
    t.respond(
        "",
        &[
            ("1", "read", json!({"q": "a"})),
            ("2", "read", json!({"q": "b"})),
        ],
    );
    t.step(refused("c1"));
    // The batch waits for its other call before asking.
    assert!(matches!(t.conv.state, State::ExecutingTools { .. }));
    let a = t.step(refused("c2"));
    assert!(has(
        &a,
        |a| matches!(a, Action::RequestApproval { request } if request.call_id == "c1")
    ));
    let a = t.step(grant_answer("c1", ApprovalAnswer::Never));
    assert!(
        !has(
            &a,
            |a| matches!(a, Action::RequestApproval { request } if request.call_id == "c2")
        ),
        "a grant refused for good is not asked for again: {a:?}"
    );
    let messages = tool_messages(&t.conv);
    assert!(
        messages[0].1.contains("will not be asked again"),
        "{messages:?}"
    );
    assert!(messages[1].1.contains("not granted"), "{messages:?}");
    // Another turn: `forever` asks the driver to record it, and the call runs with it.
    let mut t = T::new().started();
    t.respond("", &[("1", "read", json!({"q": "a"}))]);
    t.step(refused("c1"));
    let a = t.step(grant_answer("c1", ApprovalAnswer::Forever));
    assert!(has(
        &a,
        |a| matches!(a, Action::GiveGrants { span: crate::grant_requests::GrantSpan::Forever, grants, .. } if grants == &["net:https://api.example".to_string()])
    ));
    assert!(has(
        &a,
        |a| matches!(a, Action::RunTools { calls } if calls[0].grants.len() == 1)
    ));
}

#[test]
fn grant_requests_are_bounded_per_turn_and_nobody_is_asked_past_the_bound() {
    let mut t = T::new().started();
    let calls: Vec<(String, &str, Value)> = (1..=4)
        .map(|i| (i.to_string(), "read", json!({"q": i.to_string()})))
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(a, b, c)| (a.as_str(), *b, c.clone()))
        .collect();
    t.respond("", &calls);
    for i in 1..=4 {
        t.step(refused(&format!("c{i}")));
    }
    for i in 1..=3 {
        t.step(grant_answer(&format!("c{i}"), ApprovalAnswer::No));
    }
    let messages = tool_messages(&t.conv);
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert!(messages[3].1.contains("Nobody was asked"), "{messages:?}");
    assert!(
        messages[3].1.contains("this turn already made 3"),
        "{messages:?}"
    );
}

/// The calls run, as the actions ask, in the order of a batch of three reads.
fn runs(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RunTools { calls } => Some(calls.iter().map(|c| c.call_id.as_str())),
            _ => None,
        })
        .flatten()
        .collect()
}

fn statuses(conv: &Conversation) -> Vec<(&str, &CallStatus)> {
    let State::ExecutingTools { batch } = &conv.state else {
        return Vec::new();
    };
    batch.iter().map(|p| (p.id.as_str(), &p.status)).collect()
}

fn three_reads(t: &mut T) -> Vec<Action> {
    t.respond(
        "",
        &[
            ("1", "read", json!({"q": "a"})),
            ("2", "read", json!({"q": "b"})),
            ("3", "read", json!({"q": "c"})),
        ],
    )
}

fn read_done(id: &str) -> Event {
    Event::ToolFinished {
        outcome: ToolOutcome {
            call_id: id.into(),
            content: format!("result of {id}"),
            is_error: false,
            ..Default::default()
        },
    }
}

#[test]
fn a_batch_runs_at_most_max_parallel_tools_and_records_each_start_before_it_runs() {
    let mut t = T::new().started();
    t.lim.max_parallel_tools = 2;
    let actions = three_reads(&mut t);
    assert_eq!(runs(&actions), ["c1", "c2"]);
    assert_eq!(
        statuses(&t.conv),
        [
            ("c1", &CallStatus::Approved),
            ("c2", &CallStatus::Approved),
            ("c3", &CallStatus::Queued)
        ]
    );
    // A place comes free: the next call is marked started in the same transition.
    let actions = t.step(read_done("c2"));
    assert_eq!(runs(&actions), ["c3"]);
    assert!(has(&actions, |a| matches!(
        a,
        Action::Emit(AgentEvent::ToolStarted { call_id, .. }) if call_id == "c3"
    )));
    assert_eq!(statuses(&t.conv)[2], ("c3", &CallStatus::Approved));
    assert!(runs(&t.step(read_done("c1"))).is_empty());
    let actions = t.step(read_done("c3"));
    assert!(has(&actions, |a| matches!(a, Action::CallModel { .. })));
}

#[test]
fn resuming_runs_the_calls_that_provably_never_started_and_closes_the_others() {
    let mut t = T::new().started();
    t.lim.max_parallel_tools = 1;
    assert_eq!(runs(&three_reads(&mut t)), ["c1"]);
    // Stopped while c1 ran: c2 and c3 waited, and their starts were never recorded.
    let saved = t.conv.to_json();
    let mut loaded = Conversation::from_json(&saved).unwrap();
    let actions = resume(&mut loaded, t.env(), true).unwrap();
    let audited: Vec<(&str, &str)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::AuditCall { call, outcome } => Some((call.id.as_str(), outcome.label())),
            _ => None,
        })
        .collect();
    assert_eq!(audited, [("c1", "interrupted")]);
    assert_eq!(runs(&actions), ["c2"]);
    assert_eq!(statuses(&loaded)[2], ("c3", &CallStatus::Queued));
    // A conversation saved to a file now and then cannot tell: every call is closed.
    let mut loaded = Conversation::from_json(&saved).unwrap();
    let actions = resume(&mut loaded, t.env(), false).unwrap();
    assert!(runs(&actions).is_empty());
    let closed = actions
        .iter()
        .filter(
            |a| matches!(a, Action::AuditCall { outcome, .. } if outcome.label() == "interrupted"),
        )
        .count();
    assert_eq!(closed, 3);
    // While the host stops, a call that ends gives its place to nobody.
    let mut stopping = T::new().started();
    stopping.lim.max_parallel_tools = 1;
    three_reads(&mut stopping);
    stopping.lim.max_parallel_tools = 0;
    assert!(runs(&stopping.step(read_done("c1"))).is_empty());
    assert_eq!(
        statuses(&stopping.conv)[1..],
        [("c2", &CallStatus::Queued), ("c3", &CallStatus::Queued)]
    );
}

#[test]
fn cancelling_a_batch_tells_the_queued_calls_they_never_ran() {
    let mut t = T::new().started();
    t.lim.max_parallel_tools = 1;
    three_reads(&mut t);
    let actions = t.step(Event::Cancel {
        partial: String::new(),
    });
    let not_run: Vec<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::AuditCall { call, outcome } if outcome.label() == "not_run" => {
                Some(call.id.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(not_run, ["c2", "c3"]);
}
