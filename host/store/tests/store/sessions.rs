//! Sessions: creating, recording transitions, loading, leases, forks, removal.

use std::time::Duration;

use cordon_agent::machine::{self, Env, ToolCatalog, TurnLimits};
use cordon_agent::{
    ApprovalConfig, Cause, Conversation, Event, Journal, JournalError, ModelResponse, State,
    ToolCall, ToolOutcome, ToolSpec,
};
use cordon_store::{NewSession, SessionSettings, Store, StoreError};
use serde_json::json;

use crate::{Backend, each_backend, fresh, options};

fn catalog() -> ToolCatalog {
    ToolCatalog::new(
        vec![ToolSpec {
            name: "read".into(),
            tool: "read".into(),
            description: "reads".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            hints: Default::default(),
            plugin: "p".into(),
            grants: vec![],
            can_change_anything: false,
            digest: "sha256:00".into(),
            proven: Default::default(),
            reach: Default::default(),
            exposure: Default::default(),
        }],
        ApprovalConfig::default(),
    )
}

fn limits() -> TurnLimits {
    TurnLimits {
        max_iterations: 8,
        max_repeats: 2,
        retry: Default::default(),
        max_parallel_tools: 4,
    }
}

/// Applies `event` and records the result, as the driver does.
pub(crate) async fn apply(
    conv: &mut Conversation,
    journal: &mut dyn Journal,
    event: Event,
) -> Result<(), JournalError> {
    let cat = catalog();
    let lim = limits();
    machine::step(
        conv,
        event.clone(),
        Env {
            catalog: &cat,
            limits: &lim,
            inputs: &cordon_agent::machine::NO_INPUTS,
        },
    )
    .unwrap();
    journal.transition(conv, &Cause::Event { event }).await
}

pub(crate) fn answer(text: &str) -> Event {
    Event::ModelResponded {
        response: ModelResponse {
            content: text.into(),
            ..Default::default()
        },
    }
}

pub(crate) fn call_read(id: &str) -> Event {
    Event::ModelResponded {
        response: ModelResponse {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "read".into(),
                arguments: "{}".into(),
            }],
            ..Default::default()
        },
    }
}

/// One turn with a tool call and an answer: six transitions.
async fn tool_turn(conv: &mut Conversation, journal: &mut dyn Journal, n: usize) {
    apply(
        conv,
        journal,
        Event::UserMessage {
            text: format!("question {n}"),
            by: None,
            parts: None,
            parameters: Default::default(),
        },
    )
    .await
    .unwrap();
    apply(conv, journal, call_read(&format!("k{n}")))
        .await
        .unwrap();
    apply(conv, journal, Event::Proceed).await.unwrap();
    let State::ExecutingTools { batch } = &conv.state else {
        panic!("{:?}", conv.state)
    };
    let call_id = batch[0].id.clone();
    apply(
        conv,
        journal,
        Event::ToolFinished {
            outcome: ToolOutcome {
                call_id,
                content: format!("result {n}"),
                is_error: false,
                ..Default::default()
            },
        },
    )
    .await
    .unwrap();
    apply(conv, journal, answer(&format!("answer {n}")))
        .await
        .unwrap();
    apply(conv, journal, Event::Proceed).await.unwrap();
    assert_eq!(conv.state, State::Idle);
}

/// Creates the empty session `id`.
pub(crate) async fn new_session(store: &Store, id: &str) {
    store
        .create_session(NewSession {
            id: Some(id.into()),
            origin: "test".into(),
            parent: None,
            settings: SessionSettings::default(),
            conversation: Conversation::new(),
            created_by: None,
        })
        .await
        .unwrap();
}

each_backend!(
    recorded_transitions_load_back_exactly,
    |backend: Backend| async move {
        // A snapshot every 4 transitions: loading uses a snapshot and the transitions after it.
        let (store, _, _dir) = fresh(backend, options(Duration::from_secs(30), 4)).await;
        new_session(&store, "one").await;
        let (mut journal, mut conv) = store.drive("one").await.unwrap();
        assert_eq!(conv, Conversation::new());
        for n in 0..3 {
            tool_turn(&mut conv, &mut journal, n).await;
            let (_, loaded) = store.load("one").await.unwrap();
            assert_eq!(loaded, conv, "after turn {n}");
        }
        // A turn stopped half-way loads half-way.
        apply(
            &mut conv,
            &mut journal,
            Event::UserMessage {
                text: "more".into(),
                by: None,
                parts: None,
                parameters: Default::default(),
            },
        )
        .await
        .unwrap();
        apply(&mut conv, &mut journal, call_read("x"))
            .await
            .unwrap();
        let (info, loaded) = store.load("one").await.unwrap();
        assert_eq!(loaded, conv);
        assert_eq!(info.state, "processing_model_response");
        assert!(info.mid_turn());
        assert_eq!(info.turns, 4);
        assert_eq!(info.seq, 20);
        assert_eq!(info.title, "question 0");
        // The log holds every transition with its cause.
        let log = store.transitions("one", 0).await.unwrap();
        assert_eq!(log.len(), 20);
        assert_eq!(log[0].cause["cause"], "event");
        assert_eq!(log[0].cause["event"]["event"], "user_message");
        assert_eq!(log[0].messages.len(), 1);
        assert_eq!(log[3].cause["event"]["event"], "tool_finished");
        assert_eq!(log[5].state, "idle");
        let added: usize = log.iter().map(|t| t.messages.len()).sum();
        assert_eq!(added, conv.messages.len(), "each message is recorded once");
        journal.release().await.unwrap();
    }
);

each_backend!(
    a_second_host_waits_for_the_lease_then_takes_over,
    |backend: Backend| async move {
        let ttl = Duration::from_millis(600);
        let (first, url, _dir) = fresh(backend, options(ttl, 64)).await;
        let second = Store::open(&url, options(ttl, 64)).await.unwrap();
        assert_ne!(first.holder(), second.holder());
        new_session(&first, "shared").await;
        let (mut journal, mut conv) = first.drive("shared").await.unwrap();
        apply(
            &mut conv,
            &mut journal,
            Event::UserMessage {
                text: "hi".into(),
                by: None,
                parts: None,
                parameters: Default::default(),
            },
        )
        .await
        .unwrap();
        // The first host keeps its lease alive while it waits: the second cannot take it.
        tokio::time::sleep(ttl * 2).await;
        let busy = second.drive("shared").await.unwrap_err();
        assert!(matches!(busy, StoreError::Busy { .. }), "{busy}");
        assert!(busy.to_string().contains(first.holder()), "{busy}");
        // The first host dies (its lease is no longer renewed) with the turn mid-way.
        drop(journal);
        tokio::time::sleep(ttl + Duration::from_millis(200)).await;
        let orphans: Vec<String> = second
            .orphaned_sessions()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(orphans, vec!["shared".to_string()]);
        let (mut taken, mut resumed) = second.drive("shared").await.unwrap();
        assert_eq!(
            resumed, conv,
            "the second host resumes from the last recorded state"
        );
        apply(&mut resumed, &mut taken, answer("hello"))
            .await
            .unwrap();
        // The first host, were it still alive, could no longer renew its lease.
        let lost = first.renew("shared").await.unwrap_err();
        assert!(matches!(lost, StoreError::LeaseLost { .. }), "{lost}");
        // To any other host it is driven, not orphaned.
        assert!(first.orphaned_sessions().await.unwrap().is_empty());
        taken.release().await.unwrap();
    }
);

each_backend!(
    a_host_that_lost_its_lease_cannot_append,
    |backend: Backend| async move {
        let (first, url, _dir) = fresh(backend, StoreOptions::default()).await;
        let second = Store::open(&url, StoreOptions::default()).await.unwrap();
        new_session(&first, "s").await;
        let (mut journal, mut conv) = first.drive("s").await.unwrap();
        // The first host stalls (say, stopped by a debugger) until its lease runs out; the second
        // takes the session over and writes.
        crate::raw_sql(backend, &url, "UPDATE sessions SET lease_until_ms = 0")
            .await
            .unwrap();
        let (mut other, mut taken) = second.drive("s").await.unwrap();
        apply(
            &mut taken,
            &mut other,
            Event::UserMessage {
                text: "from the second".into(),
                by: None,
                parts: None,
                parameters: Default::default(),
            },
        )
        .await
        .unwrap();
        // The first host wakes up: nothing it does is recorded, and it learns it lost the lease.
        let e = apply(
            &mut conv,
            &mut journal,
            Event::UserMessage {
                text: "from the first".into(),
                by: None,
                parts: None,
                parameters: Default::default(),
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(e, JournalError::LeaseLost { .. }), "{e}");
        assert!(e.to_string().contains(second.holder()), "{e}");
        assert!(journal.lost().is_cancelled());
        let (_, loaded) = second.load("s").await.unwrap();
        assert_eq!(loaded, taken);
    }
);

each_backend!(
    sessions_are_listed_forked_and_removed,
    |backend: Backend| async move {
        let (store, _, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        new_session(&store, "base").await;
        let e = store
            .create_session(NewSession {
                id: Some("base".into()),
                origin: "test".into(),
                parent: None,
                settings: SessionSettings::default(),
                conversation: Conversation::new(),
                created_by: None,
            })
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::SessionExists { .. }), "{e}");
        for bad in ["", "-x", "a/b", "a b", "ä"] {
            let e = store
                .create_session(NewSession {
                    id: Some(bad.into()),
                    origin: "test".into(),
                    parent: None,
                    settings: SessionSettings::default(),
                    conversation: Conversation::new(),
                    created_by: None,
                })
                .await
                .unwrap_err();
            assert!(matches!(e, StoreError::BadSessionId { .. }), "{bad:?}: {e}");
        }
        let (mut journal, mut conv) = store.drive("base").await.unwrap();
        tool_turn(&mut conv, &mut journal, 0).await;
        tool_turn(&mut conv, &mut journal, 1).await;
        journal.release().await.unwrap();
        let fork = store
            .fork("base", Some(1), Some("branch".into()), None)
            .await
            .unwrap();
        assert_eq!(fork.parent.as_deref(), Some("base"));
        assert_eq!(fork.origin, "fork");
        let (_, forked) = store.load("branch").await.unwrap();
        assert_eq!(forked, conv.fork(1).unwrap());
        let e = store.fork("base", Some(5), None, None).await.unwrap_err();
        assert!(e.to_string().contains("cannot fork after turn 5"), "{e}");
        let generated = store.fork("base", None, None, None).await.unwrap();
        assert!(generated.id.starts_with("s-"), "{}", generated.id);
        let listed: Vec<String> = store
            .sessions(10)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(listed.len(), 3);
        assert!(listed.contains(&"branch".to_string()));
        store.delete_session("branch").await.unwrap();
        let e = store.load("branch").await.unwrap_err();
        assert!(matches!(e, StoreError::UnknownSession { .. }), "{e}");
        assert!(e.to_string().contains("cordon sessions list"), "{e}");
        assert!(store.transitions("branch", 0).await.is_err());
    }
);

each_backend!(
    a_session_driven_elsewhere_cannot_be_removed,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let other = Store::open(&url, StoreOptions::default()).await.unwrap();
        new_session(&store, "busy").await;
        let (journal, _) = store.drive("busy").await.unwrap();
        let e = other.delete_session("busy").await.unwrap_err();
        assert!(matches!(e, StoreError::Busy { .. }), "{e}");
        journal.release().await.unwrap();
        other.delete_session("busy").await.unwrap();
    }
);

use cordon_store::StoreOptions;

each_backend!(
    a_session_created_to_be_driven_is_written_with_its_first_transition_and_leased,
    |backend: Backend| async move {
        let ttl = Duration::from_secs(30);
        let (first, url, _dir) = fresh(backend, options(ttl, 64)).await;
        let second = Store::open(&url, options(ttl, 64)).await.unwrap();
        let seed = {
            let mut conv = Conversation::new();
            conv.messages.push(cordon_agent::Message::user("earlier"));
            conv
        };
        let new = |id: &str, conversation: Conversation| NewSession {
            id: Some(id.into()),
            origin: "gateway".into(),
            parent: None,
            settings: SessionSettings::default(),
            conversation,
            created_by: None,
        };
        let (id, mut journal, mut conv) =
            first.create_and_drive(new("driven", seed.clone())).unwrap();
        assert_eq!((id.as_str(), &conv), ("driven", &seed));
        // Nothing is written before the first transition: nobody sees the session yet.
        let unseen = second.drive("driven").await.unwrap_err();
        assert!(
            matches!(unseen, StoreError::UnknownSession { .. }),
            "{unseen}"
        );
        apply(
            &mut conv,
            &mut journal,
            Event::UserMessage {
                text: "hi".into(),
                by: None,
                parts: None,
                parameters: Default::default(),
            },
        )
        .await
        .unwrap();
        let (info, loaded) = first.load("driven").await.unwrap();
        assert_eq!((info.seq, info.origin.as_str()), (1, "gateway"));
        assert_eq!(
            info.lease.as_ref().map(|l| l.holder.as_str()),
            Some(first.holder())
        );
        assert_eq!(loaded, conv);
        let log = first.transitions("driven", 0).await.unwrap();
        assert_eq!(log.iter().map(|t| t.seq).collect::<Vec<_>>(), vec![1]);
        // Leased from its first record: nobody else can take it.
        let busy = second.drive("driven").await.unwrap_err();
        assert!(matches!(busy, StoreError::Busy { .. }), "{busy}");
        // A name taken meanwhile fails the first transition, and nothing of it is written.
        let (_, mut clash, mut other) = first
            .create_and_drive(new("driven", Conversation::new()))
            .unwrap();
        let taken = apply(
            &mut other,
            &mut clash,
            Event::UserMessage {
                text: "mine".into(),
                by: None,
                parts: None,
                parameters: Default::default(),
            },
        )
        .await
        .unwrap_err();
        assert!(taken.to_string().contains("driven"), "{taken}");
        assert_eq!(first.load("driven").await.unwrap().1, conv);
        // A session whose turn never records anything leaves nothing behind.
        let (_, never, _) = first.create_and_drive(new("never", seed.clone())).unwrap();
        never.release().await.unwrap();
        let gone = first.session("never").await.unwrap_err();
        assert!(matches!(gone, StoreError::UnknownSession { .. }), "{gone}");
        // A bad name is refused at once.
        assert!(matches!(
            first.create_and_drive(new("../x", Conversation::new())),
            Err(StoreError::BadSessionId { .. })
        ));
        journal.release().await.unwrap();
        second
            .drive("driven")
            .await
            .unwrap()
            .0
            .release()
            .await
            .unwrap();
    }
);

each_backend!(
    a_transition_records_what_changed_not_the_whole_turn_list,
    |backend: Backend| async move {
        // No snapshot after the first: loading folds every transition.
        let (store, _, _dir) = fresh(backend, options(Duration::from_secs(30), 10_000)).await;
        new_session(&store, "long").await;
        let (mut journal, mut conv) = store.drive("long").await.unwrap();
        for n in 0..60 {
            tool_turn(&mut conv, &mut journal, n).await;
        }
        let log = store.transitions("long", 0).await.unwrap();
        // Six transitions a turn: the 6th turn's and the 60th's take the same room (within
        // the digits their numbers add).
        let turn = |t: usize| -> usize { log[t * 6..t * 6 + 6].iter().map(|r| r.tail_bytes).sum() };
        assert!(
            turn(59) <= turn(5) + 200,
            "the 60th turn's records take {} bytes, the 6th's {}",
            turn(59),
            turn(5)
        );
        let (_, loaded) = store.load("long").await.unwrap();
        assert_eq!(loaded, conv);
        assert_eq!(loaded.turns.len(), 60);
        journal.release().await.unwrap();
    }
);
