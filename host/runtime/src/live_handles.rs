//! Counting the resources of one type a call holds, for per-call caps on host resources that
//! wasmtime-wasi creates without bound (sockets, file streams).
//!
//! A cap counts what the guest still holds, not what it ever created: a resource counts while
//! the call's table has an entry of its type under the handle it was given.

use std::marker::PhantomData;

use wasmtime::component::{Resource, ResourceTable};

/// Handles of resources of type `T` a call created; some may have been dropped since.
pub(crate) struct Created<T> {
    reps: Vec<u32>,
    kind: PhantomData<fn() -> T>,
}

impl<T> Default for Created<T> {
    fn default() -> Self {
        Created {
            reps: Vec::new(),
            kind: PhantomData,
        }
    }
}

impl<T: 'static> Created<T> {
    /// How many of them are still in `table`, forgetting the rest.
    pub(crate) fn live(&mut self, table: &ResourceTable) -> usize {
        self.reps
            .retain(|&rep| table.get(&Resource::<T>::new_borrow(rep)).is_ok());
        self.reps.len()
    }

    /// Whether fewer than `max` of them are still in `table`; looks at the table only once
    /// `max` were recorded.
    pub(crate) fn has_room(&mut self, table: &ResourceTable, max: usize) -> bool {
        self.recorded() < max || self.live(table) < max
    }

    /// The sum of `size` over those still in `table`, forgetting the rest.
    pub(crate) fn live_sum(&mut self, table: &ResourceTable, size: impl Fn(&T) -> usize) -> usize {
        let mut sum = 0;
        self.reps
            .retain(|&rep| match table.get(&Resource::<T>::new_borrow(rep)) {
                Ok(live) => {
                    sum += size(live);
                    true
                }
                Err(_) => false,
            });
        sum
    }

    /// How many were recorded; at least [`Created::live`], and cheap.
    pub(crate) fn recorded(&self) -> usize {
        self.reps.len()
    }

    /// Records a newly created resource. A handle of one dropped earlier may be reused by it:
    /// it is counted once.
    pub(crate) fn record(&mut self, created: &Resource<T>) {
        let rep = created.rep();
        if !self.reps.contains(&rep) {
            self.reps.push(rep);
        }
    }
}
