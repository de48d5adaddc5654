//! MCP sessions and client labels kept for every host on the store.

use std::time::Duration;

use cordon_core::{Label, LabelSource};

use crate::{Backend, each_backend, fresh, options};

each_backend!(
    an_mcp_session_is_taken_up_only_by_the_token_that_opened_it,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let other = cordon_store::Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        store.put_mcp_session("m1", r#"{"x":1}"#).await.unwrap();
        // Until the opening host names its owner, the session is nobody's.
        assert_eq!(other.mcp_session("m1", "alice").await.unwrap(), None);
        store.own_mcp_session("m1", "alice").await.unwrap();
        assert_eq!(
            other.mcp_session("m1", "alice").await.unwrap().as_deref(),
            Some(r#"{"x":1}"#)
        );
        // Another token is told nothing; a second owner does not replace the first.
        assert_eq!(other.mcp_session("m1", "mallory").await.unwrap(), None);
        other.own_mcp_session("m1", "mallory").await.unwrap();
        assert_eq!(other.mcp_session("m1", "mallory").await.unwrap(), None);
        other.delete_mcp_session("m1").await.unwrap();
        assert_eq!(store.mcp_session("m1", "alice").await.unwrap(), None);
        assert_eq!(store.mcp_session_state("m1").await.unwrap(), None);
    }
);

each_backend!(
    a_clients_labels_are_shared_by_every_host_and_only_grow,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let other = cordon_store::Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        let private = LabelSource {
            label: Label::Private,
            tool: "files.read_file".into(),
            grant: "fs:/srv:/data:ro".into(),
        };
        let untrusted = LabelSource {
            label: Label::Untrusted,
            tool: "fetch.get".into(),
            grant: "net:https://example.com".into(),
        };
        store
            .add_mcp_labels("alice", "claude-code", std::slice::from_ref(&private))
            .await
            .unwrap();
        other
            .add_mcp_labels(
                "alice",
                "claude-code",
                &[private.clone(), untrusted.clone()],
            )
            .await
            .unwrap();
        assert_eq!(
            store.mcp_labels("alice", "claude-code").await.unwrap(),
            [private, untrusted]
        );
        // Another client, or the same name under another token, holds none of them.
        assert!(
            store
                .mcp_labels("alice", "cursor")
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .mcp_labels("bob", "claude-code")
                .await
                .unwrap()
                .is_empty()
        );
    }
);
