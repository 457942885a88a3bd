//! Window columns a [`PayloadGather`](super::PayloadGather) computes where a run's sorted
//! rows already are (the CUDA backend: on the device), described by column index so that
//! a backend needs no DataFusion expression: what is asked ([`WindowRequest`]) and how the
//! columns join the run's output batches ([`append_window_columns`]).
//!
//! `SortedWindowExec` (`src/window/`) builds the request for the functions a device
//! computes. A sort hands the columns on only for a run that is its partition's whole
//! output in final order, and only to `SortedWindowExec`: its batches then carry the window
//! columns after the sort's own.

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow;
use datafusion::common::Result;

/// What a window column computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// `row_number()`.
    RowNumber,
    /// `rank()`.
    Rank,
    /// `dense_rank()`.
    DenseRank,
    /// `count(arg)`, or `count(*)` without an argument.
    Count,
    /// `sum(arg)`: integers in wrapping 64-bit, decimals in wrapping 128-bit arithmetic.
    Sum,
}

/// One end of a frame, as `src/window/frames.rs` defines it (no value offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameEnd {
    /// `UNBOUNDED PRECEDING`.
    UnboundedPreceding,
    /// `n PRECEDING` rows.
    Preceding(u64),
    /// `CURRENT ROW`: the row, or its peers when the frame counts peers.
    CurrentRow,
    /// `n FOLLOWING` rows.
    Following(u64),
    /// `UNBOUNDED FOLLOWING`.
    UnboundedFollowing,
}

/// A frame of rows, or (`peers`) a `RANGE` frame without offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRange {
    /// `CURRENT ROW` means the row's peer group (`RANGE`), not the row (`ROWS`).
    pub peers: bool,
    /// Where it starts.
    pub start: FrameEnd,
    /// Where it ends (inclusive).
    pub end: FrameEnd,
}

/// One window column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowColumn {
    /// What it computes.
    pub kind: WindowKind,
    /// The sort's column it reads (`count(*)` and ranking functions read none).
    pub arg: Option<usize>,
    /// The frame of `Count` and `Sum`.
    pub frame: FrameRange,
    /// Its type: `UInt64` (ranks), `Int64` (counts, sums of signed integers), `UInt64`
    /// (sums of unsigned integers) or `Decimal128` (sums of decimals).
    pub output: DataType,
}

/// The window columns of one window node, over the columns of the sort below it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRequest {
    /// The sort's columns that are the `PARTITION BY` keys.
    pub partition_by: Vec<usize>,
    /// The sort's columns that are the `ORDER BY` keys (after the partition keys).
    pub order_by: Vec<usize>,
    /// The columns, in output order.
    pub columns: Vec<WindowColumn>,
    /// The sort's columns then the window columns.
    pub schema: SchemaRef,
}

impl WindowRequest {
    /// Whether a column reads peer groups (rows equal on every key).
    pub fn reads_peers(&self) -> bool {
        self.columns.iter().any(|c| match c.kind {
            WindowKind::Rank | WindowKind::DenseRank => true,
            WindowKind::RowNumber => false,
            WindowKind::Count | WindowKind::Sum => c.frame.peers,
        })
    }
}

/// `batch` (rows `offset ..` of a run's output) with rows `offset ..` of each of the run's
/// window `columns` after its own columns, in `request`'s schema.
pub fn append_window_columns(
    batch: RecordBatch,
    columns: &[ArrayRef],
    offset: usize,
    request: &WindowRequest,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let mut all = batch.columns().to_vec();
    all.extend(columns.iter().map(|c| c.slice(offset, rows)));
    Ok(RecordBatch::try_new(
        std::sync::Arc::clone(&request.schema),
        all,
    )?)
}
