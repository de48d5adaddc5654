//! Results kept apart from a session's conversation: stored in parts and read back by part,
//! byte and line on both backends, replaced when a call runs again, refused to a host that
//! lost the session, copied by a fork and removed with their session.

use std::io::Write;
use std::time::Duration;

use cordon_agent::pages::{KeptAt, KeptPart, PART_BYTES};
use cordon_agent::{Journal, JournalError};
use cordon_core::Written;
use cordon_store::Store;

use crate::sessions::new_session;
use crate::{Backend, each_backend, fresh, options};

fn written(text: &str) -> Written {
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    Written::new(file, text.len() as u64, false)
}

/// About 2.5 parts of numbered lines, one with a NUL (PostgreSQL's text could not hold it).
fn rows() -> String {
    let mut text: String = (1..=60_000)
        .map(|i| format!("row {i:06} {}\n", "x".repeat(36)))
        .collect();
    text.push_str("a NUL: \0 and no newline at the end");
    text
}

async fn part(journal: &mut dyn Journal, id: &str, at: KeptAt) -> Option<KeptPart> {
    journal.kept_part(id, at).await.unwrap()
}

each_backend!(
    a_kept_result_is_read_back_by_part_byte_and_line,
    |backend: Backend| async move {
        let (store, _url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        new_session(&store, "s").await;
        let (mut journal, _conv) = store.drive("s").await.unwrap();
        let text = rows();
        let lines = journal.keep_result("c1", &written(&text)).await.unwrap();
        assert_eq!(lines, Some(60_001));
        let mut whole = String::new();
        let mut i = 0;
        while let Some(p) = part(&mut journal, "c1", KeptAt::Index(i)).await {
            assert_eq!(p.offset, whole.len() as u64);
            assert!(p.text.len() <= PART_BYTES && p.starts_line);
            whole.push_str(&p.text);
            i += 1;
        }
        assert_eq!(whole, text);
        assert!(i >= 3, "{i} parts");
        // The part holding a byte, and the part a line starts in.
        let second = part(&mut journal, "c1", KeptAt::Index(1)).await.unwrap();
        let by_byte = part(&mut journal, "c1", KeptAt::Byte(second.offset + 5))
            .await
            .unwrap();
        assert_eq!(by_byte.index, 1);
        let by_line = part(&mut journal, "c1", KeptAt::Line(second.first_line))
            .await
            .unwrap();
        assert_eq!(by_line.index, 1);
        let before = part(&mut journal, "c1", KeptAt::Line(second.first_line - 1))
            .await
            .unwrap();
        assert_eq!(before.index, 0);
        assert!(part(&mut journal, "c1", KeptAt::Index(i)).await.is_none());
        assert!(
            part(&mut journal, "other", KeptAt::Index(0))
                .await
                .is_none()
        );
        // A call run again (after a resume) replaces what was kept under its id.
        journal
            .keep_result("c1", &written("short\n"))
            .await
            .unwrap();
        let p = part(&mut journal, "c1", KeptAt::Index(0)).await.unwrap();
        assert_eq!(p.text, "short\n");
        assert!(part(&mut journal, "c1", KeptAt::Index(1)).await.is_none());
    }
);

each_backend!(
    a_host_that_lost_the_session_keeps_nothing,
    |backend: Backend| async move {
        let (first, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let second = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        new_session(&first, "s").await;
        let (mut stale, _) = first.drive("s").await.unwrap();
        crate::raw_sql(backend, &url, "UPDATE sessions SET lease_until_ms = 0")
            .await
            .unwrap();
        let (mut taken, _) = second.drive("s").await.unwrap();
        taken
            .keep_result("c1", &written("the new host's\n"))
            .await
            .unwrap();
        let e = stale
            .keep_result("c1", &written("the stale host's\n"))
            .await
            .unwrap_err();
        assert!(matches!(e, JournalError::LeaseLost { .. }), "{e}");
        let p = part(&mut taken, "c1", KeptAt::Index(0)).await.unwrap();
        assert_eq!(p.text, "the new host's\n");
    }
);

each_backend!(
    kept_results_go_with_their_session,
    |backend: Backend| async move {
        let (store, _url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        new_session(&store, "s").await;
        let (mut journal, _) = store.drive("s").await.unwrap();
        journal.keep_result("c1", &written("kept\n")).await.unwrap();
        journal.release().await.unwrap();
        store.delete_session("s").await.unwrap();
        new_session(&store, "s").await;
        let (mut again, _) = store.drive("s").await.unwrap();
        assert!(part(&mut again, "c1", KeptAt::Index(0)).await.is_none());
    }
);

each_backend!(
    a_fork_takes_the_results_its_conversation_keeps_apart,
    |backend: Backend| async move {
        use cordon_agent::{Event, KeptResult, State, ToolOutcome};

        use crate::sessions::{answer, apply, call_read};

        let (store, _url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        new_session(&store, "base").await;
        let (mut journal, mut conv) = store.drive("base").await.unwrap();
        let question = Event::UserMessage {
            text: "read it".into(),
            by: None,
            parts: None,
            parameters: Default::default(),
        };
        apply(&mut conv, &mut journal, question).await.unwrap();
        apply(&mut conv, &mut journal, call_read("k1"))
            .await
            .unwrap();
        apply(&mut conv, &mut journal, Event::Proceed)
            .await
            .unwrap();
        let State::ExecutingTools { batch } = &conv.state else {
            panic!("{:?}", conv.state)
        };
        let call_id = batch[0].id.clone();
        let text = rows();
        let lines = journal
            .keep_result(&call_id, &written(&text))
            .await
            .unwrap();
        let kept = KeptResult {
            id: call_id.clone(),
            bytes: text.len() as u64,
            lines: lines.unwrap(),
        };
        let outcome = ToolOutcome {
            call_id: call_id.clone(),
            content: "a preview".into(),
            kept: Some(kept),
            ..Default::default()
        };
        apply(&mut conv, &mut journal, Event::ToolFinished { outcome })
            .await
            .unwrap();
        apply(&mut conv, &mut journal, answer("read"))
            .await
            .unwrap();
        apply(&mut conv, &mut journal, Event::Proceed)
            .await
            .unwrap();
        journal.release().await.unwrap();
        store
            .fork("base", None, Some("branch".into()), None)
            .await
            .unwrap();
        // The base goes; the fork still reads the whole result.
        store.delete_session("base").await.unwrap();
        let (mut branch, _) = store.drive("branch").await.unwrap();
        let mut whole = String::new();
        let mut i = 0;
        while let Some(p) = part(&mut branch, &call_id, KeptAt::Index(i)).await {
            whole.push_str(&p.text);
            i += 1;
        }
        assert_eq!(whole, text);
    }
);
