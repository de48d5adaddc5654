//! The sessions histories sent to the gateway continue: found again by another process on the
//! same store, replaced by the newest turn, gone with their session.

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
        assert_eq!(store.history_session("d1").await.unwrap(), None);
        store.remember_history("d1", "first").await.unwrap();
        store.remember_history("d2", "second").await.unwrap();
        // A host started later on the same store.
        let other = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        assert_eq!(
            other.history_session("d1").await.unwrap().as_deref(),
            Some("first")
        );
        other.remember_history("d1", "second").await.unwrap();
        assert_eq!(
            store.history_session("d1").await.unwrap().as_deref(),
            Some("second")
        );
        store.delete_session("second").await.unwrap();
        assert_eq!(store.history_session("d1").await.unwrap(), None);
        assert_eq!(store.history_session("d2").await.unwrap(), None);
    }
);
