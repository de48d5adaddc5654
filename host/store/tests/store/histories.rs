//! The sessions histories sent to the gateway continue: found again by another process on the
//! same store, kept side by side when two sessions share a history (none overwrites
//! another), gone with their session.

use std::time::Duration;

use cordon_store::Store;

use crate::sessions::new_session;
use crate::{Backend, each_backend, fresh, options};

each_backend!(
    a_history_is_found_again_by_another_host_until_its_session_goes,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        for id in ["first", "second"] {
            new_session(&store, id).await;
        }
        assert!(store.history_sessions("d1").await.unwrap().is_empty());
        store.remember_history("d1", "first").await.unwrap();
        store.remember_history("d2", "second").await.unwrap();
        // A host started later on the same store.
        let other = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        assert_eq!(other.history_sessions("d1").await.unwrap(), ["first"]);
        // Another session with the same history is kept beside the first, newest first.
        tokio::time::sleep(Duration::from_millis(5)).await;
        other.remember_history("d1", "second").await.unwrap();
        assert_eq!(
            store.history_sessions("d1").await.unwrap(),
            ["second", "first"]
        );
        // Recording the same pair again changes nothing but its time.
        store.remember_history("d1", "first").await.unwrap();
        assert_eq!(
            store.history_sessions("d1").await.unwrap(),
            ["first", "second"]
        );
        store.delete_session("second").await.unwrap();
        assert_eq!(store.history_sessions("d1").await.unwrap(), ["first"]);
        assert!(store.history_sessions("d2").await.unwrap().is_empty());
    }
);
