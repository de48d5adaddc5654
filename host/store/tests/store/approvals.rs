//! Questions waiting in the store: asked by one process, answered once by another.

use std::time::Duration;

use cordon_agent::{ApprovalAnswer, ApprovalRequest, GivenAnswer};
use cordon_store::StoreError;
use serde_json::json;

use crate::{Backend, each_backend, fresh, options};

fn yes_again() -> GivenAnswer {
    GivenAnswer::new(ApprovalAnswer::Yes, "API token `ops`")
}

fn request(call_id: &str) -> ApprovalRequest {
    ApprovalRequest {
        call_id: call_id.into(),
        tool: "write_file".into(),
        plugin: "files".into(),
        arguments: json!({"path": "/data/a"}),
        grants: vec!["fs:/srv:/data:rw".into()],
        reason: "its grants allow changing something".into(),
        rule_of_two: false,
        requested_grants: vec![],
    }
}

each_backend!(
    a_question_is_answered_once_and_a_second_answer_is_told_by_whom,
    |backend: Backend| async move {
        let (asker, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let other = cordon_store::Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        let waiting = asker
            .ask_approval("claude-code 2.1", Some("alice"), &request("7"), 60_000)
            .await
            .unwrap();
        assert_eq!(asker.approval_answer(&waiting.id).await.unwrap(), None);
        // Another process sees it, with the client and the call.
        let seen = other.waiting_approvals().await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].client, "claude-code 2.1");
        // Whose it is: the client's token, for whoever answers to check.
        assert_eq!(seen[0].token.as_deref(), Some("alice"));
        assert_eq!(
            other.approval_token(&waiting.id).await.unwrap().as_deref(),
            Some("alice")
        );
        assert_eq!(seen[0].request, request("7"));
        assert!(seen[0].expires_ms > seen[0].asked_ms);
        let yes = GivenAnswer::new(ApprovalAnswer::Yes, "API token `ops`");
        other.answer_approval(&waiting.id, &yes).await.unwrap();
        assert_eq!(
            asker.approval_answer(&waiting.id).await.unwrap(),
            Some(yes.clone())
        );
        assert!(other.waiting_approvals().await.unwrap().is_empty());
        let no = GivenAnswer::new(ApprovalAnswer::No, "user `ann`");
        match other.answer_approval(&waiting.id, &no).await {
            Err(StoreError::ApprovalAnswered { earlier, .. }) => {
                assert_eq!(earlier, "yes by API token `ops`")
            }
            other => panic!("{other:?}"),
        }
        // Unknown and expired questions say so.
        assert!(matches!(
            other.approval_token("nope").await,
            Err(StoreError::UnknownApproval { .. })
        ));
        assert!(matches!(
            other.answer_approval("nope", &no).await,
            Err(StoreError::UnknownApproval { .. })
        ));
        let gone = asker
            .ask_approval("c", None, &request("8"), 0)
            .await
            .unwrap();
        let e = other.answer_approval(&gone.id, &no).await.unwrap_err();
        assert!(e.to_string().contains("nobody answered in time"), "{e}");
        // A question its asker stopped waiting for takes no late answer.
        let withdrawn = asker
            .ask_approval("c", None, &request("9"), 60_000)
            .await
            .unwrap();
        asker
            .withdraw_approval(&withdrawn.id, "the client cancelled the call")
            .await
            .unwrap();
        let e = other
            .answer_approval(&withdrawn.id, &yes)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("the client cancelled the call"),
            "{e}"
        );
        assert!(other.waiting_approvals().await.unwrap().is_empty());
    }
);

each_backend!(
    a_sessions_question_is_answered_through_another_store_handle_and_heard_at_once,
    |backend: Backend| async move {
        let (asker, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let other = cordon_store::Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        let cordon_store::Asked::Waiting(waiting) = asker
            .ask_session_approval("s1", Some("alice"), Some("bob"), &request("c1"), 60_000)
            .await
            .unwrap()
        else {
            panic!("a new question waits")
        };
        // Listed by every handle, with its session, call and owner.
        let seen = other.waiting_approvals().await.unwrap();
        let call = seen[0].session.as_ref().expect("a session's question");
        assert_eq!((call.session.as_str(), call.call_id.as_str()), ("s1", "c1"));
        assert_eq!(call.owner.as_deref(), Some("alice"));
        assert_eq!(seen[0].token.as_deref(), Some("bob"));
        assert_eq!(
            other
                .session_approval("s1", "c1")
                .await
                .unwrap()
                .unwrap()
                .id,
            waiting.id
        );
        assert_eq!(other.session_approval("s1", "c2").await.unwrap(), None);
        // Its id does not name an MCP client's question.
        assert!(matches!(
            other.approval_token(&waiting.id).await,
            Err(StoreError::UnknownApproval { .. })
        ));
        // The asker waits; the answer, given through the other handle, ends the wait (on
        // PostgreSQL through the notification, long before the two-second look).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let id = waiting.id.clone();
        let wait = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let waited = asker
                .wait_for_answer(&id, deadline, &Default::default())
                .await
                .unwrap();
            (waited, started.elapsed(), asker)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let yes = GivenAnswer::new(ApprovalAnswer::Yes, "API token `ops`");
        other.answer_approval(&waiting.id, &yes).await.unwrap();
        let (waited, took, asker) = wait.await.unwrap();
        assert_eq!(waited, cordon_store::Waited::Answered(yes));
        if matches!(backend, Backend::Postgres) {
            assert!(took < Duration::from_millis(1500), "{took:?}");
        }
        asker.took_answer(&waiting.id).await.unwrap();
        // Asked about again (as after a restart): taken answers are not reused.
        let again = asker
            .ask_session_approval("s1", Some("alice"), Some("bob"), &request("c1"), 60_000)
            .await
            .unwrap();
        assert!(
            matches!(again, cordon_store::Asked::Waiting(_)),
            "{again:?}"
        );
    }
);

each_backend!(
    a_question_asked_again_replaces_the_open_one_and_takes_an_answer_nobody_heard,
    |backend: Backend| async move {
        let (store, _url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let ask = |call: &'static str| {
            let store = store.clone();
            async move {
                store
                    .ask_session_approval("s1", None, None, &request(call), 60_000)
                    .await
                    .unwrap()
            }
        };
        let cordon_store::Asked::Waiting(first) = ask("c1").await else {
            panic!("a new question waits")
        };
        // The host that asked died; the one taking the session up asks again: one question.
        let cordon_store::Asked::Waiting(second) = ask("c1").await else {
            panic!("nobody answered the first")
        };
        assert_ne!(first.id, second.id);
        let waiting = store.waiting_approvals().await.unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].id, second.id);
        let e = store
            .answer_approval(
                &first.id,
                &GivenAnswer::new(ApprovalAnswer::Yes, "API token `ops`"),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("asked again"), "{e}");
        assert!(store.asked_again(&first.id).await.unwrap());
        assert!(!store.asked_again(&second.id).await.unwrap());
        // A person answers while no turn waits (the host died again): the next question
        // about that call takes the answer, once.
        let yes = GivenAnswer::new(ApprovalAnswer::Yes, "API token `ops`");
        store.answer_approval(&second.id, &yes).await.unwrap();
        assert_eq!(ask("c1").await, cordon_store::Asked::Answered(yes));
        let cordon_store::Asked::Waiting(third) = ask("c1").await else {
            panic!("an answer is taken once")
        };
        // The asker's own withdrawal (it stopped waiting) is never taken for a person's
        // answer.
        store
            .withdraw_approval(&third.id, "nobody answered within 5m")
            .await
            .unwrap();
        assert!(matches!(ask("c1").await, cordon_store::Asked::Waiting(_)));
        // Nor is an answer to the same call id with another request (what the person saw).
        let mut other = request("c3");
        let cordon_store::Asked::Waiting(asked) = store
            .ask_session_approval("s1", None, None, &other, 60_000)
            .await
            .unwrap()
        else {
            panic!("a new question waits")
        };
        store
            .answer_approval(&asked.id, &yes_again())
            .await
            .unwrap();
        other.arguments = json!({"path": "/data/b"});
        assert!(matches!(
            store
                .ask_session_approval("s1", None, None, &other, 60_000)
                .await
                .unwrap(),
            cordon_store::Asked::Waiting(_)
        ));
        // Another call's question takes nothing.
        assert!(matches!(ask("c2").await, cordon_store::Asked::Waiting(_)));
    }
);
