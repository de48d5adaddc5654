//! Questions waiting in the store: asked by one process, answered once by another.

use std::time::Duration;

use cordon_agent::{ApprovalAnswer, ApprovalRequest, GivenAnswer};
use cordon_store::StoreError;
use serde_json::json;

use crate::{Backend, each_backend, fresh, options};

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
