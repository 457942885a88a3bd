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
    /// `percent_rank()`.
    PercentRank,
    /// `cume_dist()`.
    CumeDist,
    /// `ntile(n)`, `n ≥ 1`.
    Ntile(u64),
    /// `count(arg)`, or `count(*)` without an argument.
    Count,
    /// `sum(arg)`: integers in wrapping 64-bit, decimals in wrapping 128-bit arithmetic,
    /// floats (output `Float64`) in double-double.
    Sum,
    /// `avg(arg)`: of a `Decimal128` as DataFusion's decimal average, else (output
    /// `Float64`) the float sum over the count.
    Avg,
    /// `min(arg)` over the frame.
    Min,
    /// `max(arg)` over the frame.
    Max,
    /// `lag(arg, back, default)`, or `lead` with `back` negated: the value `back` rows
    /// before, within the window partition, else the column's `default`.
    Shifted {
        /// Rows back (negative: ahead).
        back: i64,
    },
    /// `first_value(arg)` of the frame.
    First,
    /// `last_value(arg)` of the frame.
    Last,
    /// `nth_value(arg, n)` of the frame (from its end when `n < 0`; `n = 0`: null).
    Nth(i64),
}

/// How `min` and `max` order the values of a type, by their width in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordered {
    /// Two's complement integers (dates, times, timestamps, durations, decimals).
    Signed(usize),
    /// Unsigned integers.
    Unsigned(usize),
    /// IEEE floats, in their total order.
    Float(usize),
}

/// How `min` and `max` of `data_type` order its values, for the types a device compares.
pub fn ordered_of(data_type: &DataType) -> Option<Ordered> {
    use DataType::*;
    Some(match data_type {
        Int8
        | Int16
        | Int32
        | Int64
        | Date32
        | Date64
        | Time32(_)
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_)
        | Decimal128(_, _) => Ordered::Signed(data_type.primitive_width()?),
        UInt8 | UInt16 | UInt32 | UInt64 => Ordered::Unsigned(data_type.primitive_width()?),
        Float32 | Float64 => Ordered::Float(data_type.primitive_width()?),
        _ => return None,
    })
}

/// One end of a frame, as `src/window/frames.rs` defines it.
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
    /// `RANGE` `n PRECEDING`: the rows whose key is within `n` (in the key's units, see
    /// [`RangeKey`]; for a float key, the offset's bits) before the row's.
    ValuePreceding(u64),
    /// `RANGE` `n FOLLOWING`.
    ValueFollowing(u64),
    /// `GROUPS` `n PRECEDING`: the peer group `n` groups before the row's.
    GroupsPreceding(u64),
    /// `GROUPS` `n FOLLOWING`.
    GroupsFollowing(u64),
}

/// The `ORDER BY` key of `RANGE` frames with offsets, as a device searches it: integers
/// (dates as days, timestamps in their unit), compared as `i128`s, or floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeKey {
    /// Two's complement values (else unsigned).
    pub signed: bool,
    /// IEEE floats: targets in the key's precision (never outside its type), compared in
    /// total order; an offset is its value's bits ([`FrameEnd::ValuePreceding`]).
    pub float: bool,
    /// The values of the key's type: a key or target outside `min..=max` falls outside it
    /// (the target's bound collapses, as DataFusion's arithmetic fails there).
    pub min: i128,
    /// See `min`.
    pub max: i128,
    /// Sorted descending.
    pub descending: bool,
    /// Null keys first in each window partition.
    pub nulls_first: bool,
}

/// A frame of rows, or (`peers`) a `RANGE` or `GROUPS` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRange {
    /// `CURRENT ROW` means the row's peer group (`RANGE`, `GROUPS`), not the row (`ROWS`);
    /// value offsets are `RANGE`'s, group offsets `GROUPS`'.
    pub peers: bool,
    /// Where it starts.
    pub start: FrameEnd,
    /// Where it ends (inclusive).
    pub end: FrameEnd,
}

impl FrameEnd {
    /// Whether this end is a `RANGE` offset of the key's value.
    pub fn is_value_offset(&self) -> bool {
        matches!(
            self,
            FrameEnd::ValuePreceding(_) | FrameEnd::ValueFollowing(_)
        )
    }
}

impl FrameRange {
    /// Whether an end is a `RANGE` offset of the key's value.
    pub fn has_value_offset(&self) -> bool {
        self.start.is_value_offset() || self.end.is_value_offset()
    }

    /// The most rows a frame can hold when both ends are row offsets or the current row
    /// (0: every frame is empty); `None` for unbounded or peer frames.
    pub fn most_rows(&self) -> Option<u64> {
        if self.peers {
            return None;
        }
        let at = |end: FrameEnd| -> Option<i128> {
            match end {
                FrameEnd::Preceding(n) => Some(-i128::from(n)),
                FrameEnd::CurrentRow => Some(0),
                FrameEnd::Following(n) => Some(i128::from(n)),
                _ => None,
            }
        };
        let length = at(self.end)? - at(self.start)? + 1;
        Some(u64::try_from(length.max(0)).unwrap_or(u64::MAX))
    }
}

/// One window column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowColumn {
    /// What it computes.
    pub kind: WindowKind,
    /// The sort's column it reads (`count(*)` and ranking functions read none).
    pub arg: Option<usize>,
    /// The frame of the functions that read one.
    pub frame: FrameRange,
    /// Its type: `UInt64` (ranks, `ntile`), `Float64` (`percent_rank`, `cume_dist`),
    /// `Int64` (counts, sums of signed integers), `UInt64` (sums of unsigned integers),
    /// `Decimal128` (sums and averages of decimals), `Float64` (float sums, averages of
    /// integers and floats), or the argument's (value functions,
    /// `min`, `max`).
    pub output: DataType,
    /// `Shifted`'s default where the row shifted to is outside the partition: the value's
    /// little-endian bytes in the argument's width (`None`: null).
    pub default: Option<Vec<u8>>,
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
    /// The one `ORDER BY` key, when a column's frame is a `RANGE` with offsets.
    pub range_key: Option<RangeKey>,
    /// The sort's columns that its batches carry when the window columns join them, in
    /// order (`None`: all of them); the others are read where the run is only.
    pub keep: Option<Vec<usize>>,
    /// The sort's columns (those kept) then the window columns, with the metadata key
    /// [`DEVICE_WINDOWS_KEY`] that marks the batches that carry them.
    pub schema: SchemaRef,
}

/// Metadata key of the schema of a sort's batches that carry window columns.
pub const DEVICE_WINDOWS_KEY: &str = "gpusort.window_columns";

impl WindowRequest {
    /// Whether a column reads peer groups (rows equal on every key).
    pub fn reads_peers(&self) -> bool {
        self.columns.iter().any(|c| match c.kind {
            WindowKind::Rank
            | WindowKind::DenseRank
            | WindowKind::PercentRank
            | WindowKind::CumeDist => true,
            WindowKind::RowNumber | WindowKind::Ntile(_) | WindowKind::Shifted { .. } => false,
            _ => c.frame.peers,
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
