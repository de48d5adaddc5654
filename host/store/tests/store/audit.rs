//! The audit log: what is appended can be queried, and nothing can change or remove it.

use std::time::Duration;

use cordon_core::Requester;
use cordon_core::{
    AuditEntry, AuditRecord, CallOutcome, CallReport, HomeChangeAudit, ToolCallAudit,
};
use cordon_store::{AuditQuery, Store};

use crate::{Backend, each_backend, fresh, options, raw_sql};

fn call(at_ms: i64, session: Option<&str>, plugin: &str, tool: &str, ok: bool) -> AuditRecord {
    AuditRecord {
        at_ms,
        origin: "serve".into(),
        entry: AuditEntry::ToolCall(Box::new(ToolCallAudit {
            session: session.map(String::from),
            turn: Some(0),
            call_id: Some("c1".into()),
            client: None,
            requested_by: None,
            tool: tool.into(),
            plugin: plugin.into(),
            digest: "sha256:ab".into(),
            arguments_sha256: "0".repeat(64),
            arguments: None,
            grants: vec!["fs:/data:/data:ro".into()],
            decision: "yes".into(),
            decided_by: "API token `ops`".into(),
            policy_rule: None,
            policy_digest: None,
            labels: vec!["private".into()],
            outcome: if ok {
                CallOutcome::Ok
            } else {
                CallOutcome::Error {
                    kind: "denied".into(),
                    message: "outside the grant".into(),
                }
            },
            report: Some(CallReport {
                duration_ms: 1.5,
                peak_memory: 1 << 20,
                refused: vec!["path: /etc (outside every grant)".into()],
                refusals_dropped: 0,
                ..Default::default()
            }),
        })),
    }
}

fn change(at_ms: i64) -> AuditRecord {
    AuditRecord {
        at_ms,
        origin: "cli".into(),
        entry: AuditEntry::HomeChange(HomeChangeAudit {
            action: "grant".into(),
            plugin: "sql".into(),
            digest: "sha256:ab".into(),
            details: vec!["+ fs:/data:/data:ro".into()],
            by: "user `ann`".into(),
        }),
    }
}

each_backend!(
    records_come_back_filtered_in_order,
    |backend: Backend| async move {
        let (store, _, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let records = [
            call(1000, Some("a"), "sql", "sql_query", true),
            change(2000),
            call(3000, Some("b"), "files", "read_file", false),
            call(4000, Some("a"), "files", "read_file", true),
            call(5000, None, "sql", "sql_query", true),
        ];
        for r in &records {
            store.append_audit(r).await.unwrap();
        }
        let all = store.audit(&AuditQuery::default()).await.unwrap();
        assert_eq!(
            all.iter().map(|s| s.record.clone()).collect::<Vec<_>>(),
            records
        );
        assert!(all.windows(2).all(|w| w[0].id < w[1].id));
        let q = |f: fn(&mut AuditQuery)| {
            let mut query = AuditQuery::default();
            f(&mut query);
            query
        };
        let times = |found: Vec<cordon_store::StoredAudit>| -> Vec<i64> {
            found.into_iter().map(|s| s.record.at_ms).collect()
        };
        assert_eq!(
            times(
                store
                    .audit(&q(|q| q.session = Some("a".into())))
                    .await
                    .unwrap()
            ),
            [1000, 4000]
        );
        assert_eq!(
            times(
                store
                    .audit(&q(|q| q.tool = Some("read_file".into())))
                    .await
                    .unwrap()
            ),
            [3000, 4000]
        );
        assert_eq!(
            times(
                store
                    .audit(&q(|q| q.tool = Some("sql.sql_query".into())))
                    .await
                    .unwrap()
            ),
            [1000, 5000]
        );
        assert_eq!(
            times(store.audit(&q(|q| q.since_ms = Some(3000))).await.unwrap()),
            [3000, 4000, 5000]
        );
        assert_eq!(
            times(
                store
                    .audit(&q(|q| q.kind = Some("home_change".into())))
                    .await
                    .unwrap()
            ),
            [2000]
        );
        // The newest ones when limited, still oldest first; then what came after.
        let last_two = store.audit(&q(|q| q.limit = Some(2))).await.unwrap();
        assert_eq!(times(last_two.clone()), [4000, 5000]);
        let after = AuditQuery {
            after_id: Some(last_two[0].id),
            ..Default::default()
        };
        assert_eq!(times(store.audit(&after).await.unwrap()), [5000]);
    }
);

each_backend!(
    the_log_cannot_be_changed_or_emptied,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        store
            .append_audit(&call(1, None, "sql", "sql_query", true))
            .await
            .unwrap();
        for sql in ["UPDATE audit SET outcome = 'ok'", "DELETE FROM audit"] {
            let e = raw_sql(backend, &url, sql).await.unwrap_err();
            assert!(e.to_string().contains("append-only"), "{sql}: {e}");
        }
        if let Backend::Postgres = backend {
            let e = raw_sql(backend, &url, "TRUNCATE audit").await.unwrap_err();
            assert!(e.to_string().contains("append-only"), "{e}");
        }
        assert_eq!(store.audit(&Default::default()).await.unwrap().len(), 1);
    }
);

each_backend!(
    a_batch_is_kept_in_order_and_whole_across_statements,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        // 250 records: more than one statement holds.
        let batch: Vec<AuditRecord> = (0..250)
            .map(|i| match i % 7 {
                3 => change(i),
                _ => call(i, Some("s"), "sql", "sql_query", i % 2 == 0),
            })
            .collect();
        store.append_audits(&batch).await.unwrap();
        let all = store
            .audit(&AuditQuery {
                limit: Some(1000),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            all.iter().map(|s| s.record.clone()).collect::<Vec<_>>(),
            batch
        );
        assert!(all.windows(2).all(|w| w[0].id < w[1].id));
        // A batch whose last statement fails leaves none of it: here the table refuses any
        // row once 260 are in, so the third statement of a 250-record batch fails.
        let limit: &[&'static str] = match backend {
            Backend::Sqlite => &["CREATE TRIGGER audit_full BEFORE INSERT ON audit \
                 WHEN (SELECT COUNT(*) FROM audit) >= 460 \
                 BEGIN SELECT RAISE(ABORT, 'full'); END"],
            Backend::Postgres => &[
                "CREATE FUNCTION audit_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF (SELECT COUNT(*) FROM audit) >= 460 THEN RAISE EXCEPTION 'full'; END IF; \
                 RETURN NEW; END $$",
                "CREATE TRIGGER audit_full BEFORE INSERT ON audit \
                 FOR EACH ROW EXECUTE FUNCTION audit_full()",
            ],
        };
        for sql in limit {
            raw_sql(backend, &url, sql).await.unwrap();
        }
        let e = store.append_audits(&batch).await.unwrap_err();
        assert!(e.to_string().contains("full"), "{e}");
        assert_eq!(
            store
                .audit(&AuditQuery {
                    limit: Some(1000),
                    ..Default::default()
                })
                .await
                .unwrap()
                .len(),
            250
        );
    }
);

each_backend!(
    a_calls_record_is_kept_with_its_transition_and_never_from_a_host_that_lost_the_session,
    |backend: Backend| async move {
        use cordon_agent::{Cause, Journal, JournalError};
        let (first, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let second = cordon_store::Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        crate::sessions::new_session(&first, "s").await;
        let (mut stale, conv) = first.drive("s").await.unwrap();
        // The first host's lease runs out while a call runs; the second takes the session up.
        raw_sql(backend, &url, "UPDATE sessions SET lease_until_ms = 0")
            .await
            .unwrap();
        let (mut taken, resumed) = second.drive("s").await.unwrap();
        let mut interrupted = call(2, Some("s"), "sql", "sql_query", false);
        if let AuditEntry::ToolCall(c) = &mut interrupted.entry {
            c.outcome = CallOutcome::Error {
                kind: "interrupted".into(),
                message: "stopped".into(),
            };
        }
        taken
            .transition_audited(&resumed, &Cause::Resume, vec![interrupted])
            .await
            .unwrap();
        // The call ends on the first host after all: neither its result nor its record is kept.
        let e = stale
            .transition_audited(
                &conv,
                &Cause::Resume,
                vec![call(3, Some("s"), "sql", "sql_query", true)],
            )
            .await
            .unwrap_err();
        assert!(matches!(e, JournalError::LeaseLost { .. }), "{e}");
        let query = AuditQuery {
            session: Some("s".into()),
            ..Default::default()
        };
        let records = second.audit(&query).await.unwrap();
        let outcomes: Vec<&str> = records
            .iter()
            .map(|r| match &r.record.entry {
                AuditEntry::ToolCall(c) => c.outcome.label(),
                AuditEntry::HomeChange(_) => "change",
            })
            .collect();
        assert_eq!(outcomes, ["interrupted"]);
        // Many records go with one transition, all or none.
        let many: Vec<AuditRecord> = (0..250)
            .map(|i| call(10 + i, Some("s"), "sql", "sql_query", true))
            .collect();
        taken
            .transition_audited(&resumed, &Cause::Resume, many)
            .await
            .unwrap();
        assert_eq!(
            second
                .audit(&AuditQuery {
                    limit: Some(1000),
                    ..query
                })
                .await
                .unwrap()
                .len(),
            251
        );
    }
);

each_backend!(
    records_written_before_their_requester_columns_are_found_by_them,
    |backend: Backend| async move {
        let (store, url, _dir) = fresh(backend, options(Duration::from_secs(30), 64)).await;
        let mut asked = call(1000, Some("s"), "sql", "sql_query", true);
        if let AuditEntry::ToolCall(c) = &mut asked.entry {
            c.requested_by = Some(Requester::token("alice"));
            // A NUL a model put in its arguments, kept as `\u0000`: PostgreSQL's `jsonb`
            // refuses it, which would stop the migration and every host with it.
            c.arguments = Some(serde_json::json!({"sql": "SELECT 1\u{0}"}));
        }
        store.append_audit(&asked).await.unwrap();
        store
            .append_audit(&call(2000, None, "sql", "sql_query", true))
            .await
            .unwrap();
        store.close().await;
        // The store as the previous version left it: no such columns, migrations up to 6.
        for sql in [
            "DROP INDEX audit_requested_by",
            "ALTER TABLE audit DROP COLUMN requested_by",
            "ALTER TABLE audit DROP COLUMN decided_by",
            "DELETE FROM _sqlx_migrations WHERE version = 7",
        ] {
            raw_sql(backend, &url, sql).await.unwrap();
        }
        let store = Store::open(&url, options(Duration::from_secs(30), 64))
            .await
            .unwrap();
        let found = |asked: Option<&str>, decided: Option<&str>| {
            let store = store.clone();
            let query = AuditQuery {
                requested_by: asked.map(String::from),
                decided_by: decided.map(String::from),
                ..Default::default()
            };
            async move { store.audit(&query).await.unwrap().len() }
        };
        assert_eq!(found(Some("alice"), None).await, 1);
        assert_eq!(found(Some("bob"), None).await, 0);
        assert_eq!(found(None, Some("ops")).await, 2);
        assert_eq!(found(Some("alice"), Some("token `ops`")).await, 1);
        // `_` and `%` are themselves, not wildcards.
        assert_eq!(found(None, Some("o_s")).await, 0);
        assert_eq!(found(None, Some("%")).await, 0);
        // Still append-only.
        assert!(
            raw_sql(backend, &url, "UPDATE audit SET tool = 'x'")
                .await
                .is_err()
        );
    }
);
