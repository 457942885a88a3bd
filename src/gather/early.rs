//! Copies of a sort's input columns that a backend starts making while the input is still
//! arriving ([`EarlyColumns`]), so that the run's payload is where the gather needs it
//! when the sort ends instead of crossing to the device after it.
//!
//! ```text
//!  input partitions ─► buffer (exec/buffer.rs) ─ each admitted batch ─► EarlyColumns::add
//!        input ended ─► EarlyColumns::input_ended (what is pending goes now)
//!        a spill, several runs ─► EarlyColumns::abandon (nothing of it is used)
//!  one run in memory: RunRows::with_early ─► the backend's payload gather takes the
//!                     columns whose every array of the run it holds, in the run's order
//! ```
//!
//! The object is the backend's own (the CUDA backend's: `cuda/payload/early.rs`); the
//! gather hands it back through [`EarlyColumns::as_any`]. A copy is only ever an
//! optimization: a column it does not hold whole, in the run's order, is moved as before.

use std::any::Any;

use arrow::array::RecordBatch;
use datafusion::arrow;

/// A backend's copy of some input columns, made as the batches arrive.
pub trait EarlyColumns: Send + Sync + std::fmt::Debug {
    /// Takes input partition `partition`'s next batch as it is buffered (batches of one
    /// partition come in their order).
    fn add(&self, partition: usize, batch: &RecordBatch);

    /// No batch comes any more: what is still pending is copied now.
    fn input_ended(&self);

    /// The input will not be one run in memory (a spill, several runs): stops and lets go
    /// of what it holds.
    fn abandon(&self);

    /// Takes over from the host the columns it copies: once every batch added so far is
    /// on the device, replaces those columns in `buffered` (every input partition's
    /// buffered batches, each added before) by stand-ins that keep their validity only
    /// (`hollow.rs`), so that the host memory of their values is freed. From then on the
    /// run must gather those columns from this copy, which cannot be let go: a spill, a
    /// run sorted on the host or in pieces, or a failed device fails the sort (the host
    /// gather refuses stand-ins). Returns the arrays replaced: 0 where it cannot (it
    /// stopped, or would pass `payload_bytes`, the payload expected, past its share of the
    /// device).
    fn take_over(&self, _buffered: &mut [Vec<RecordBatch>], _payload_bytes: u64) -> usize {
        0
    }

    /// The backend's own type.
    fn as_any(&self) -> &dyn Any;
}
