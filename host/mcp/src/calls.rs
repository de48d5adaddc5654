//! Where `tools/call`s run. `cordon mcp` serves its client on one thread (a round trip without
//! hand-offs between threads is the fastest), but a call that spins there made every other
//! call wait: 0.8 s for the next call's request to be read. So when the server runs on a
//! single-threaded runtime, calls run on a pool of worker threads of their own, at most
//! [`MAX_CALLS`] at once (more wait their turn), while the protocol stays on its thread. The
//! hand-off to another thread and back costs a no-op call about 35 µs (docs/performance.md);
//! running a call that comes alone on the server's thread instead left it, when that call
//! spun, unable to read the next request for most of a second. On a runtime with worker
//! threads already (`cordon serve`), calls run where they are.

use std::future::Future;
use std::sync::Arc;

use cordon_agent::{CancellationToken, ToolFailure, ToolFailureKind, ToolHost};
use cordon_core::{CallReport, Content};
use serde_json::Value;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::sync::Semaphore;

/// Calls running at once, at most, on the pool.
pub const MAX_CALLS: usize = 16;

/// The pool's worker threads: calls are mostly the guest's computation.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
}

/// Where calls run (see the module docs).
pub(crate) struct CallPool {
    /// The pool's runtime, made on first use on a single-threaded runtime.
    runtime: std::sync::OnceLock<Option<Runtime>>,
    running: Arc<Semaphore>,
}

impl Default for CallPool {
    fn default() -> Self {
        CallPool {
            runtime: std::sync::OnceLock::new(),
            running: Arc::new(Semaphore::new(MAX_CALLS)),
        }
    }
}

impl Drop for CallPool {
    fn drop(&mut self) {
        // A runtime may not be dropped from async code, where the server ends.
        if let Some(Some(runtime)) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What a call returns.
type Called = (Result<Vec<Content>, ToolFailure>, Option<CallReport>);

impl CallPool {
    /// `host`'s `call_granted` of `tool`, run on the pool when there is one.
    pub(crate) async fn call(
        &self,
        host: &Arc<dyn ToolHost>,
        tool: &str,
        arguments: Value,
        grants: &[String],
        cancel: CancellationToken,
    ) -> Called {
        let Some(pool) = self.pool() else {
            return host.call_granted(tool, arguments, grants, cancel).await;
        };
        let (host, tool, grants) = (host.clone(), tool.to_string(), grants.to_vec());
        let running = self.running.clone();
        let call = async move {
            // Closed never: the semaphore lives as long as the pool.
            let _place = running.acquire_owned().await;
            host.call_granted(&tool, arguments, &grants, cancel).await
        };
        match on(pool, call).await {
            Some(called) => called,
            None => (
                Err(ToolFailure::new(
                    ToolFailureKind::Failed,
                    "the call stopped unexpectedly in the host (see the host's log)",
                )),
                None,
            ),
        }
    }

    /// The pool's handle, on a single-threaded runtime; None elsewhere.
    fn pool(&self) -> Option<Handle> {
        let current = Handle::try_current().ok()?;
        if current.runtime_flavor() != RuntimeFlavor::CurrentThread {
            return None;
        }
        self.runtime
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(workers())
                    .thread_name("cordon-calls")
                    .enable_all()
                    .build()
                    .inspect_err(|e| tracing::warn!("calls run on the server's thread: {e}"))
                    .ok()
            })
            .as_ref()
            .map(|r| r.handle().clone())
    }
}

/// Runs `work` on `pool` and waits for it; None when it panicked. Dropping the wait (a
/// cancelled request) stops the work too.
async fn on<T: Send + 'static>(
    pool: Handle,
    work: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = pool.spawn(work);
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(done) => Some(done),
        Err(e) => {
            tracing::error!("a tool call stopped: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_one_thread_a_spinning_call_leaves_the_others_their_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pool = CallPool::default();
        rt.block_on(async {
            use std::sync::atomic::{AtomicBool, Ordering};
            let handle = pool.pool().expect("a pool on one thread");
            let quick_ran = Arc::new(AtomicBool::new(false));
            // Spins without yielding, as a guest between epoch ticks does, until the quick
            // call has run beside it (at most 5 s: on one thread it never can).
            let seen = quick_ran.clone();
            let spinning = on(handle.clone(), async move {
                let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while !seen.load(Ordering::SeqCst) && std::time::Instant::now() < until {}
                seen.load(Ordering::SeqCst)
            });
            let ran = quick_ran.clone();
            let quick = on(handle, async move { ran.store(true, Ordering::SeqCst) });
            let (beside, quick) = tokio::join!(spinning, quick);
            assert_eq!(quick, Some(()));
            assert_eq!(
                beside,
                Some(true),
                "the quick call waited for the spinning one"
            );
        });
        drop(rt);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_worker_threads_calls_run_where_they_are() {
        assert!(CallPool::default().pool().is_none());
    }
}
