//! Counters of earlier calls for per-call policy rules: windows count only their minutes,
//! counts hold across a restart and across hosts adding at once, old rows are pruned, and a
//! session's own counters live exactly as long as the session.

use std::time::Duration;

use cordon_agent::Journal;
use cordon_agent::cordon_policy::{CountQuery, Reservation};
use cordon_store::{AuditJournal, LONGEST_WINDOW_MINUTES, Store};

use crate::sessions::new_session;
use crate::{Backend, each_backend, fresh, options, raw_sql};

fn query(key: &str, since_minute: i64) -> CountQuery {
    CountQuery::named(&[&format!("c:{key}")], key, since_minute)
}

/// Reservations on `keys`, with no size from a policy.
fn reserve(keys: &[&str]) -> Vec<Reservation> {
    keys.iter()
        .map(|k| Reservation {
            key: k.to_string(),
            most_ahead: None,
        })
        .collect()
}

fn keys(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

/// Two hosts' handles on one fresh store (and the directory that holds it, if any).
async fn two_hosts(backend: Backend) -> (Store, Store, Option<tempfile::TempDir>) {
    let (first, url, dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
    let second = Store::open(&url, options(Duration::from_secs(30), 64))
        .await
        .unwrap();
    (first, second, dir)
}

fn this_minute() -> i64 {
    cordon_core::now_ms().div_euclid(60_000)
}

/// The count of one counter from `since`.
async fn count(store: &Store, key: &str, since: i64) -> u64 {
    store.count_calls(&[query(key, since)], None).await.unwrap()[0]
}

each_backend!(
    windows_count_only_their_minutes_and_survive_a_restart,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let now = this_minute();
        let mut journal = AuditJournal::new(store.clone());
        for (minute, times) in [(now - 120, 2), (now - 30, 3), (now, 1)] {
            for _ in 0..times {
                journal
                    .add_calls(&keys(&["rule:writes", "tool:sql.sql_execute"]), minute)
                    .await
                    .unwrap();
            }
        }
        // Named twice (two calls of one answer, say), counted twice.
        journal
            .add_calls(&keys(&["plugin:sql", "plugin:sql"]), now)
            .await
            .unwrap();
        let asked = [
            query("rule:writes", now - 59),
            query("rule:writes", now - 119),
            query("rule:writes", now - 120),
            query("tool:sql.sql_execute", now),
            query("tool:sql.sql_execute", 0),
            query("plugin:sql", now - 59),
            query("rule:nothing", 0),
            query("rule:writes", now + 1),
        ];
        let expected = vec![4, 4, 6, 1, 6, 2, 0, 0];
        assert_eq!(journal.count_calls(&asked).await.unwrap(), expected);
        // More counters than one statement asks for come back whole and in order, those
        // asked more than once (counted once) as well as the rest.
        let many: Vec<CountQuery> = (0..250)
            .map(|i| match i % 2 {
                0 => asked[(i / 2) % asked.len()].clone(),
                _ => query(&format!("rule:unused-{i}"), 0),
            })
            .collect();
        let counted = store.count_calls(&many, None).await.unwrap();
        assert_eq!(counted.len(), 250);
        for (i, n) in counted.iter().enumerate() {
            let want = match i % 2 {
                0 => expected[(i / 2) % expected.len()],
                _ => 0,
            };
            assert_eq!(*n, want, "query {i}");
        }
        // The host restarts: the counts are where it left them.
        store.close().await;
        drop(journal);
        let store = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        assert_eq!(
            AuditJournal::new(store).count_calls(&asked).await.unwrap(),
            expected
        );
    }
);

each_backend!(
    two_hosts_adding_at_once_lose_no_count,
    |backend: Backend| async move {
        let (first, second, _dir) = two_hosts(backend).await;
        let now = this_minute();
        let adders: Vec<_> = [
            (first.clone(), "caller:a/|tool:t"),
            (second, "caller:b/|tool:t"),
        ]
        .into_iter()
        .map(|(store, own)| {
            tokio::spawn(async move {
                let mut journal = AuditJournal::new(store);
                let names = keys(&["rule:writes", "tool:t", own]);
                for _ in 0..200 {
                    journal.add_calls(&names, now).await.unwrap();
                }
            })
        })
        .collect();
        for adder in adders {
            adder.await.unwrap();
        }
        let counted = first
            .count_calls(
                &[
                    query("rule:writes", now),
                    query("tool:t", now),
                    query("caller:a/|tool:t", now),
                    query("caller:b/|tool:t", now),
                ],
                None,
            )
            .await
            .unwrap();
        assert_eq!(counted, [400, 400, 200, 200]);
    }
);

each_backend!(
    calls_reserved_at_once_on_two_hosts_each_see_those_before,
    |backend: Backend| async move {
        // The attack: two hosts (and several sessions on each) deciding calls under "at most
        // N an hour" at the same moment. Counted, then added, two calls could read the same
        // count and both take the last place; reserved, every call reads a different count.
        let (first, second, _dir) = two_hosts(backend).await;
        let now = this_minute();
        // Earlier calls in the window, and one before it.
        first
            .add_calls(&keys(&["tool:t", "tool:t", "tool:t"]), now - 30, None)
            .await
            .unwrap();
        first
            .add_calls(&keys(&["tool:t"]), now - 90, None)
            .await
            .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let store = if i % 2 == 0 {
                    first.clone()
                } else {
                    second.clone()
                };
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for _ in 0..25 {
                        let asked = [query("tool:t", now - 59), query("tool:t", now)];
                        let counts = store
                            .reserve_calls(&reserve(&["tool:t", "rule:r"]), &asked, now, None)
                            .await
                            .unwrap();
                        // The window's earlier minutes, and the minute itself alone.
                        assert_eq!(counts[0], counts[1] + 3, "{counts:?}");
                        seen.push(counts[1]);
                    }
                    seen
                })
            })
            .collect();
        let mut seen = Vec::new();
        for task in tasks {
            seen.extend(task.await.unwrap());
        }
        seen.sort_unstable();
        // No limit is passed: for every `at_least = L`, at most L calls see fewer than L
        // before them, so the i-th lowest count seen is at least i. (Places a host reserved
        // ahead and another host's call counted may make a count higher, never lower.)
        for (i, n) in seen.iter().enumerate() {
            assert!(*n >= i as u64, "call {i} saw {n}: {seen:?}");
        }
        assert!(seen[199] < 200 + 64, "{seen:?}");
        // Places reserved ahead and not used are given back.
        first.give_back_spare().await;
        second.give_back_spare().await;
        assert_eq!(count(&first, "tool:t", now).await, 200);
        assert_eq!(count(&first, "rule:r", now).await, 200);
        // Calls that did not run, or that `rule:r` did not count, are taken back; a count
        // never goes below zero.
        first
            .release_calls(&keys(&["rule:r"; 150]), now, None)
            .await
            .unwrap();
        first
            .release_calls(&keys(&["tool:t", "tool:t"]), now, None)
            .await
            .unwrap();
        assert_eq!(count(&first, "rule:r", now).await, 50);
        assert_eq!(count(&first, "tool:t", now - 59).await, 201);
        first
            .release_calls(&keys(&["rule:r"; 51]), now, None)
            .await
            .unwrap();
        assert_eq!(count(&first, "rule:r", now).await, 50);
        // Counters not reserved on are counted as before, and a session's own counter is
        // reserved at its minute 0.
        let own = "session:s1|tool:t".to_string();
        first
            .add_calls(std::slice::from_ref(&own), now, Some("s1"))
            .await
            .unwrap();
        let counted = first
            .reserve_calls(
                &reserve(&[&own, &own]),
                &[query(&own, 0), query("rule:r", now), query("rule:none", 0)],
                now,
                Some("s1"),
            )
            .await
            .unwrap();
        assert_eq!(counted, [1, 50, 0]);
        assert_eq!(count(&first, &own, 0).await, 3);
        first
            .release_calls(std::slice::from_ref(&own), now, Some("s1"))
            .await
            .unwrap();
        assert_eq!(count(&first, &own, 0).await, 2);
    }
);

each_backend!(
    a_host_alone_on_a_counter_reserves_ahead_and_every_call_sees_exactly_those_before,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let now = this_minute();
        store
            .add_calls(&keys(&["tool:t", "tool:t"]), now - 5, None)
            .await
            .unwrap();
        let asked = [query("tool:t", now - 59), query("tool:t", now - 2)];
        let mut seen = Vec::new();
        for i in 0..300 {
            let counts = store
                .reserve_calls(&reserve(&["tool:t", "rule:r"]), &asked, now, None)
                .await
                .unwrap();
            assert_eq!(counts[0], counts[1] + 2, "{counts:?}");
            seen.push(counts[1]);
            // Every third call is denied, and every call counts `rule:r` only reserved: given
            // back, the next call takes the place again.
            if i % 3 == 2 {
                store
                    .release_calls(&keys(&["tool:t", "rule:r"]), now, None)
                    .await
                    .unwrap();
            } else {
                store
                    .release_calls(&keys(&["rule:r"]), now, None)
                    .await
                    .unwrap();
            }
        }
        // Each call saw exactly the calls that ran before it.
        let expected: Vec<u64> = (0..300u64).map(|i| i - i / 3).collect();
        assert_eq!(seen, expected);
        // Another host sees every call, and the places held ahead (at most 16), until they
        // are given back.
        let other = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        // (16 spare, and the place of a last call that did not run.)
        let held = count(&other, "tool:t", now).await;
        assert!((200..=217).contains(&held), "{held}");
        store.give_back_spare().await;
        assert_eq!(count(&other, "tool:t", now).await, 200);
        assert_eq!(count(&other, "rule:r", now).await, 0);
        // Spare places not used for half a second are given back without being asked (the
        // second call reserves one ahead, unless in a minute's first seconds).
        for _ in 0..2 {
            store
                .reserve_calls(&reserve(&["tool:t"]), &asked, now, None)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(count(&other, "tool:t", now).await, 202);
    }
);

each_backend!(
    a_host_holds_no_more_places_ahead_than_its_reservations_allow,
    |backend: Backend| async move {
        let (store, other, _dir) = two_hosts(backend).await;
        let now = this_minute();
        // A threshold of 50 allows 3 ahead; a `when` reading the same key (no size known)
        // does not raise it.
        let sized = |key: &str, most: Option<u32>| Reservation {
            key: key.to_string(),
            most_ahead: most,
        };
        let adds = [sized("tool:z", Some(3)), sized("tool:z", None)];
        let asked = [query("tool:z", now - 59)];
        for i in 0..40u64 {
            let counts = store.reserve_calls(&adds, &asked, now, None).await.unwrap();
            // (Each call is reserved twice on the row, as named twice.)
            assert_eq!(counts, [2 * i]);
            let held = count(&other, "tool:z", now).await;
            assert!(
                (2 * i + 2..=2 * i + 5).contains(&held),
                "call {i}: {held} counted"
            );
        }
        // None ahead: another host counts exactly the calls made.
        let none = [sized("tool:y", Some(0))];
        let asked = [query("tool:y", now - 59)];
        for i in 0..20u64 {
            store.reserve_calls(&none, &asked, now, None).await.unwrap();
            assert_eq!(count(&other, "tool:y", now).await, i + 1);
        }
    }
);

each_backend!(
    a_call_that_did_not_run_is_never_held_as_a_place_ahead_where_none_is_allowed,
    |backend: Backend| async move {
        // A rule asking from the first call (`at_least = 1`) allows no places ahead. A call it
        // let past that did not run gives its place back; held by this host as a spare
        // place, it was still counted in the store, so the host's next call that went to
        // the store (the next minute's, or any in a minute's first seconds) read one call
        // too many and was asked about.
        let (store, other, _dir) = two_hosts(backend).await;
        // A minute ahead of the clock, so that nothing gives the place back meanwhile.
        let minute = this_minute() + 100;
        let none = [Reservation {
            key: "rule:once".to_string(),
            most_ahead: Some(0),
        }];
        let asked = [query("rule:once", minute - 59)];
        let counts = store
            .reserve_calls(&none, &asked, minute, None)
            .await
            .unwrap();
        assert_eq!(counts, [0]);
        store
            .release_calls(&keys(&["rule:once"]), minute, None)
            .await
            .unwrap();
        assert_eq!(
            count(&other, "rule:once", minute - 59).await,
            0,
            "given back to the store"
        );
        let asked = [query("rule:once", minute - 58)];
        let counts = store
            .reserve_calls(&none, &asked, minute + 1, None)
            .await
            .unwrap();
        assert_eq!(counts, [0], "the next minute's call sees no call before it");
    }
);

each_backend!(
    pruning_removes_only_rows_no_window_counts,
    |backend: Backend| async move {
        let (store, _url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let now = this_minute();
        // The oldest minute a 30-day window may still count, with the hour kept for hosts
        // whose clocks lag.
        let oldest = now - LONGEST_WINDOW_MINUTES - 60;
        let mut journal = AuditJournal::new(store.clone());
        // A store handle prunes after its first addition: this row is gone at once.
        journal
            .add_calls(&keys(&["rule:old"]), oldest - 1)
            .await
            .unwrap();
        assert_eq!(count(&store, "rule:old", 0).await, 0);
        // Within the hour it does not prune again.
        for minute in [oldest - 1, oldest, now - LONGEST_WINDOW_MINUTES + 1, now] {
            journal
                .add_calls(&keys(&["rule:old"]), minute)
                .await
                .unwrap();
        }
        assert_eq!(count(&store, "rule:old", 0).await, 4);
        assert_eq!(store.prune_call_counts(now).await.unwrap(), 1);
        assert_eq!(count(&store, "rule:old", 0).await, 3);
        assert_eq!(count(&store, "rule:old", oldest).await, 3);
        // What a 30-day window counts is all still there.
        assert_eq!(
            count(&store, "rule:old", now - LONGEST_WINDOW_MINUTES + 1).await,
            2
        );
        assert_eq!(store.prune_call_counts(now).await.unwrap(), 0);
    }
);

each_backend!(
    a_sessions_counters_last_as_long_as_the_session,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        // `_` is no wildcard: deleting `s_1` leaves `sX1` alone.
        for id in ["s_1", "sX1"] {
            new_session(&store, id).await;
        }
        let now = this_minute();
        let (mut s1, _) = store.drive("s_1").await.unwrap();
        let (mut sx1, _) = store.drive("sX1").await.unwrap();
        let of = |id: &str| format!("session:{id}|caller:ci/|plugin:sql");
        for _ in 0..3 {
            s1.add_calls(&[of("s_1"), "rule:writes".into()], now)
                .await
                .unwrap();
        }
        sx1.add_calls(&[of("sX1"), "rule:writes".into()], now)
            .await
            .unwrap();
        let asked = [query(&of("s_1"), 0), query("rule:writes", now)];
        assert_eq!(s1.count_calls(&asked).await.unwrap(), [3, 4]);
        // A session's counters are kept for its whole life: pruning, however much later,
        // leaves them (and only them).
        let years_later = now + 10 * 365 * 24 * 60;
        assert_eq!(store.prune_call_counts(years_later).await.unwrap(), 1);
        assert_eq!(s1.count_calls(&asked).await.unwrap(), [3, 0]);
        assert_eq!(sx1.count_calls(&[query(&of("sX1"), 0)]).await.unwrap(), [1]);
        s1.close().await.unwrap();
        sx1.close().await.unwrap();
        store.delete_session("s_1").await.unwrap();
        assert_eq!(count(&store, &of("s_1"), 0).await, 0);
        assert_eq!(count(&store, &of("sX1"), 0).await, 1);
        store.delete_session("sX1").await.unwrap();
        assert_eq!(count(&store, &of("sX1"), 0).await, 0);
        // The range holds only the session's keys in byte order, which PostgreSQL keeps the
        // column in whatever the database's own collation (a test cluster's is often `C`
        // anyway, where a server's is a language's, which may sort `|` and `}` elsewhere).
        if let Backend::Postgres = backend {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            let collation: Option<String> = sqlx::query_scalar(
                "SELECT collation_name FROM information_schema.columns \
                 WHERE table_name = 'call_counts' AND column_name = 'counter'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            assert_eq!(collation.as_deref(), Some("C"));
        }
    }
);

each_backend!(
    a_store_from_before_call_counts_gains_them,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        new_session(&store, "kept").await;
        store.close().await;
        // The store as the previous version left it: no counters, migrations up to 4.
        raw_sql(backend, &url, "DROP TABLE call_counts")
            .await
            .unwrap();
        let forgotten = raw_sql(
            backend,
            &url,
            "DELETE FROM _sqlx_migrations WHERE version = 5",
        )
        .await
        .unwrap();
        assert_eq!(forgotten, 1);
        let store = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        assert_eq!(store.session("kept").await.unwrap().id, "kept");
        store
            .add_calls(&keys(&["rule:writes"]), this_minute(), None)
            .await
            .unwrap();
        assert_eq!(count(&store, "rule:writes", 0).await, 1);
    }
);
