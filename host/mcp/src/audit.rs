//! The audit records of MCP calls, written by a task of their own so that a call's result does
//! not wait for the database: records are queued in call order and written in batches (one
//! transaction each), within milliseconds. The queue is bounded — calls wait rather than a
//! record being dropped — and [`AuditWriter::finish`] writes what is queued before the
//! server exits. Only a process killed outright can lose the records of its last
//! milliseconds' calls; `cordon serve` sessions, whose journal decides what runs, write theirs
//! before acting.

use std::sync::Mutex;
use std::time::Duration;

use cordon_core::AuditRecord;
use cordon_store::Store;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Records waiting to be written, at most.
const QUEUE: usize = 4096;
/// Records written in one transaction, at most.
const BATCH: usize = 256;
/// How long the writer waits for more records before writing a batch: a transaction per call
/// would cost each call a commit's CPU time; records of calls in the same few milliseconds
/// share one.
const LINGER: Duration = Duration::from_millis(5);

/// Writes audit records in the background.
pub struct AuditWriter {
    queue: Mutex<Option<mpsc::Sender<AuditRecord>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AuditWriter {
    /// A writer into `store`.
    pub fn new(store: Store) -> Self {
        let (tx, mut rx) = mpsc::channel::<AuditRecord>(QUEUE);
        let writer = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            while rx.recv_many(&mut batch, BATCH).await > 0 {
                if batch.len() < BATCH {
                    tokio::time::sleep(LINGER).await;
                    while batch.len() < BATCH {
                        match rx.try_recv() {
                            Ok(record) => batch.push(record),
                            Err(_) => break,
                        }
                    }
                }
                if let Err(e) = store.append_audits(&batch).await {
                    // One more try, record by record, so one bad record cannot take others.
                    tracing::warn!(
                        "writing {} audit records failed, retrying: {e}",
                        batch.len()
                    );
                    for record in &batch {
                        if let Err(e) = store.append_audit(record).await {
                            tracing::error!("the audit log did not record a tool call: {e}");
                        }
                    }
                }
                batch.clear();
            }
        });
        Self {
            queue: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
        }
    }

    /// Queues a record (waiting while the queue is full).
    pub async fn record(&self, record: AuditRecord) {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match queue {
            Some(queue) => {
                if queue.send(record).await.is_err() {
                    tracing::error!("the audit log did not record a tool call: its writer stopped");
                }
            }
            None => tracing::error!(
                "the audit log did not record a tool call: the server had already finished"
            ),
        }
    }

    /// Writes everything queued and stops.
    pub async fn finish(&self) {
        drop(self.queue.lock().unwrap_or_else(|e| e.into_inner()).take());
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = writer {
            let _ = writer.await;
        }
    }
}
