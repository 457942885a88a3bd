//! A job larger than its memory, sorted by key range: how many ranges, and the plans that
//! sort them one after the other.
//!
//! The alternative, the sort operator's own spilling, writes sorted runs and merges all of
//! them at the end: a merge that feeds the writer at about 10 M rows a second on 16 cores
//! (docs/performance.md, session 30) while the in-memory path feeds it three times faster.
//! By key range, every row is still written to disk and read back once, but each range is
//! then an in-memory sort (on the device, when there is one) whose output goes straight to
//! the writer, and the next range is read and sorted while one is written.

use std::sync::Arc;

use datafusion::common::config::SpillCompression;
use datafusion::logical_expr::SortExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};

use super::error::PipelineError;
use super::key_ranges::KeyRanges;
use super::order_by::SortKey;
use super::progress::Progress;
use super::range_spill::spill_by_range;
use super::range_table::RangeTable;

/// How a job whose rows may not fit its memory is sorted.
///
/// By key range where that was measured faster: on SF10 `lineitem` under a 4 GiB limit
/// (H200, 16 cores) a device sorting the ranges took 10.6 to 11.0 s against 12.7 to
/// 13.0 s for the merge, both peaking at 3.2 to 3.3 GiB; on the CPU backend (2 cores,
/// SF1 under 400 MiB) the merge took 5.1 to 6.1 s against 6.1 to 6.8 s
/// (docs/performance.md, 2026-11-29).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyRangeChoice {
    /// [`On`](Self::On) where a device sorts the job, [`Off`](Self::Off) on the CPU
    /// backend.
    #[default]
    Auto,
    /// By key range, whatever the backend, when the input's decoded size is more than
    /// half the memory pool (Parquet inputs, no `--limit`); otherwise by the operator's
    /// own spilling.
    On,
    /// Never by key range: the sort operator spills sorted runs and merges them.
    Off,
    /// By at most this many key ranges whatever the input's size (Parquet inputs, no
    /// `--limit`); for tests and measurements.
    Ranges(usize),
}

impl std::str::FromStr for KeyRangeChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "on" => Ok(Self::On),
            "off" | "merge" => Ok(Self::Off),
            n => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Self::Ranges(n)),
                _ => Err(format!(
                    "key ranges {text:?}: expected auto, on, off, or a number of ranges"
                )),
            },
        }
    }
}

/// Inputs decoding to more than this share of the pool go by key range: the operator's
/// buffer would fill and spill.
pub(super) const RANGE_TRIGGER_SHARE: f64 = 0.5;

/// A range is planned to hold this share of the pool once decoded: its sort holds its rows
/// and the batches it gathers from them, while the next range is read and sorted and the
/// writer encodes row groups of the one before.
pub(super) const RANGE_POOL_SHARE: f64 = 0.2;

/// Rows are routed into this many times the ranges the footers' sizes call for: the
/// sizes are estimates (decoded strings can be larger), and consecutive ranges are then
/// sorted together up to [`RANGE_POOL_SHARE`] of the pool by the bytes actually routed.
pub(super) const ROUTED_PER_PLANNED: usize = 4;

/// A range's sort starts while the one before it is written only if its rows take at most
/// this share of the pool.
pub(super) const AHEAD_POOL_SHARE: f64 = 0.3;

/// A Parquet writer's column encoders hold about this much each (a page being filled, a
/// dictionary), and the writer encodes while the ranges' sorts run.
pub(super) const WRITER_BYTES_PER_COLUMN: usize = 1 << 20;

/// By default, ranges only where the writer's encoders take at most this share of the pool
/// (below it the sorts of the ranges would have too little of it; the operator's spilling
/// sorts before the writer starts).
pub(super) const WRITER_POOL_SHARE: f64 = 0.25;

/// Spill files open at once while rows are routed (one per scan partition and range)
/// stay under this many; ranges past it are larger than planned, and their sorts spill.
pub(super) const MAX_RANGE_FILES: usize = 1024;

/// The number of key ranges for a job of `columns` columns, where a device may sort it or
/// not (`device`: one is usable or still opening; where it then fails to open, or cannot
/// take the keys, the ranges are sorted on the CPU, as correctly but slower): 1 sorts it
/// in one piece (the operator spilling as it must).
pub fn range_count(
    choice: KeyRangeChoice,
    pool: Option<usize>,
    (decoded_bytes, rows, columns): (Option<u64>, Option<u64>, usize),
    limit: Option<usize>,
    (partitions, device): (usize, bool),
) -> usize {
    let most = (MAX_RANGE_FILES / partitions.max(1)).max(2);
    if limit.is_some() || rows.is_none() {
        return 1;
    }
    match choice {
        KeyRangeChoice::Off => 1,
        KeyRangeChoice::Auto if !device => 1,
        KeyRangeChoice::Ranges(n) => n.clamp(1, most),
        KeyRangeChoice::Auto | KeyRangeChoice::On => match (pool, decoded_bytes) {
            (Some(pool), Some(decoded))
                if decoded as f64 > pool as f64 * RANGE_TRIGGER_SHARE
                    && (columns * WRITER_BYTES_PER_COLUMN) as f64
                        <= pool as f64 * WRITER_POOL_SHARE =>
            {
                let range_bytes = (pool as f64 * RANGE_POOL_SHARE).max(1.0);
                let planned = (decoded as f64 / range_bytes).ceil() as usize;
                (planned * ROUTED_PER_PLANNED).clamp(2, most)
            }
            _ => 1,
        },
    }
}

/// A spilled batch takes at most this share of the pool: the range's sort takes a few of
/// them per scan partition in transit before it admits them.
pub(super) const SPILL_BATCH_POOL_SHARE: usize = 64;

/// Rows per batch of the range files: the job's `batch_rows`, fewer where such batches
/// would be large for the pool (at least 64).
fn spill_batch_rows(batch_rows: usize, pool: Option<usize>, bytes_per_row: Option<u64>) -> usize {
    match (pool, bytes_per_row) {
        (Some(pool), Some(row)) => {
            (pool / SPILL_BATCH_POOL_SHARE / (row as usize).max(1)).clamp(64, batch_rows.max(64))
        }
        _ => batch_rows,
    }
}

/// What a job sorted by key range is sized by.
pub(super) struct RangeSizes {
    /// The input's rows.
    pub rows: u64,
    /// Their decoded bytes a row, where known.
    pub bytes_per_row: Option<u64>,
    /// The memory pool's bytes (`None`: no limit).
    pub pool: Option<usize>,
    /// Ranges to plan ([`range_count`]).
    pub ranges: usize,
    /// The session's rows per batch.
    pub batch_rows: usize,
    /// Compression of the spilled rows.
    pub compression: SpillCompression,
}

/// Consecutive ranges grouped into sorts of at most `target` bytes each (a range larger
/// than that alone); `None`: each range its own sort.
fn consecutive_groups(memory: &[u64], target: Option<u64>) -> Vec<std::ops::Range<usize>> {
    let Some(target) = target else {
        return (0..memory.len()).map(|r| r..r + 1).collect();
    };
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    let mut bytes = 0;
    for (range, &size) in memory.iter().enumerate() {
        match groups.last_mut() {
            Some(last) if bytes + size <= target => {
                last.end = range + 1;
                bytes += size;
            }
            _ => {
                groups.push(range..range + 1);
                bytes = size;
            }
        }
    }
    groups
}

/// A job's plans when sorted by key range.
pub(super) struct RangedJob {
    /// One sort per range, in key order.
    pub plans: Vec<Arc<dyn ExecutionPlan>>,
    /// Whether each range's sort may start while the one before it is written: where its
    /// rows take no more than [`AHEAD_POOL_SHARE`] of the pool (a range larger than
    /// planned, of one frequent key, waits for the memory of the one before).
    pub ahead: Vec<bool>,
    /// Ranges the rows were routed into (consecutive ones are sorted together).
    pub routed: usize,
    /// Rows sorted by each plan.
    pub range_rows: Vec<u64>,
    /// Bytes spilled.
    pub spilled_bytes: u64,
}

impl RangedJob {
    /// A line for the job's summary.
    pub(super) fn describe(&self) -> String {
        let largest = self.range_rows.iter().max().copied().unwrap_or(0);
        format!(
            "{} key ranges (of {} routed; largest {largest} rows, {} spilled)",
            self.plans.len(),
            self.routed,
            super::human_bytes(self.spilled_bytes)
        )
    }
}

/// Samples the keys of `input`, spills its rows by key range, and plans the sort of each
/// range (`sort`: the job's sort expressions); `None` where fewer than two ranges come
/// out (too few distinct keys, or keys without a row format): the job then sorts as one.
pub(super) async fn plan_ranges(
    ctx: &SessionContext,
    input: &DataFrame,
    (keys, sort): (&[SortKey], &[SortExpr]),
    sizes: RangeSizes,
    progress: &Progress,
) -> Result<Option<RangedJob>, PipelineError> {
    let RangeSizes {
        rows,
        bytes_per_row,
        pool,
        ranges,
        batch_rows,
        compression,
    } = sizes;
    let Some(key_ranges) = KeyRanges::sample(ctx, input, keys, rows, ranges).await? else {
        return Ok(None);
    };
    crate::trace::event(|| format!("ranges: {} key ranges sampled", key_ranges.count()));
    if key_ranges.count() < 2 {
        return Ok(None);
    }
    let routing = input
        .clone()
        .create_physical_plan()
        .await
        .map_err(PipelineError::execution(
            "planning the routing by key range",
        ))?;
    progress.watch(Arc::clone(&routing));
    let files = spill_by_range(
        ctx,
        Arc::clone(&routing),
        Arc::new(key_ranges),
        spill_batch_rows(batch_rows, pool, bytes_per_row),
        compression,
    )
    .await?;
    crate::trace::event(|| format!("ranges: rows spilled by range ({} bytes)", files.bytes));
    let schema = routing.schema();
    let target = pool.map(|pool| (pool as f64 * RANGE_POOL_SHARE) as u64);
    let groups = consecutive_groups(&files.memory, target);
    let mut plans = Vec::with_capacity(groups.len());
    for group in &groups {
        let table = RangeTable::new(group.clone(), Arc::clone(&schema), &files.files);
        let plan = ctx
            .read_table(Arc::new(table))
            .and_then(|df| df.sort(sort.to_vec()))
            .map_err(PipelineError::execution("planning a key range's sort"))?
            .create_physical_plan()
            .await
            .map_err(PipelineError::execution("planning a key range's sort"))?;
        plans.push(plan);
    }
    progress.watch_all(std::iter::once(&routing).chain(&plans).cloned().collect());
    let ahead = groups
        .iter()
        .enumerate()
        .map(|(i, group)| {
            let bytes: u64 = files.memory[group.clone()].iter().sum();
            i > 0 && pool.is_none_or(|pool| bytes as f64 <= pool as f64 * AHEAD_POOL_SHARE)
        })
        .collect();
    let range_rows = groups
        .iter()
        .map(|group| files.rows[group.clone()].iter().sum())
        .collect();
    Ok(Some(RangedJob {
        plans,
        ahead,
        routed: files.rows.len(),
        range_rows,
        spilled_bytes: files.bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_when_the_input_outgrows_the_pool() {
        let gib = 1usize << 30;
        let on = KeyRangeChoice::On;
        let rows = Some(1_000_000);
        let of = |decoded: u64| (Some(decoded), rows, 16);
        // Fits: one piece.
        assert_eq!(
            range_count(on, Some(4 * gib), of(gib as u64), None, (16, false)),
            1
        );
        // 12 GiB under a 4 GiB pool: sorts of a fifth of the pool, 15 of them, routed into
        // four times as many ranges.
        assert_eq!(
            range_count(on, Some(4 * gib), of(12 * gib as u64), None, (16, false)),
            60
        );
        // No limit, no footers' sizes, a LIMIT, or rows unknown: one piece.
        assert_eq!(
            range_count(on, None, of(12 * gib as u64), None, (16, false)),
            1
        );
        assert_eq!(
            range_count(on, Some(gib), (None, rows, 16), None, (16, false)),
            1
        );
        assert_eq!(
            range_count(on, Some(gib), of(8 * gib as u64), Some(10), (16, false)),
            1
        );
        let unknown_rows = (Some(8 * gib as u64), None, 16);
        assert_eq!(
            range_count(on, Some(gib), unknown_rows, None, (16, false)),
            1
        );
        // A pool the writer's encoders would take a large share of: one piece.
        let wide = (Some(1 << 30), rows, 100);
        assert_eq!(range_count(on, Some(256 << 20), wide, None, (16, false)), 1);
        assert_eq!(
            range_count(on, Some(400 << 20), wide, None, (16, false)),
            52
        );
        // Files open at once stay bounded.
        assert_eq!(
            range_count(on, Some(gib), of(1 << 50), None, (16, false)),
            MAX_RANGE_FILES / 16
        );
        let off = KeyRangeChoice::Off;
        assert_eq!(
            range_count(off, Some(gib), of(1 << 40), None, (4, false)),
            1
        );
        // `auto`: by key range where a device sorts, merged on the CPU backend.
        let big = of(12 * gib as u64);
        let auto = KeyRangeChoice::Auto;
        assert_eq!(range_count(auto, Some(4 * gib), big, None, (16, true)), 60);
        assert_eq!(range_count(auto, Some(4 * gib), big, None, (16, false)), 1);
        let forced = KeyRangeChoice::Ranges(7);
        assert_eq!(
            range_count(forced, None, (None, rows, 16), None, (4, false)),
            7
        );
    }

    #[test]
    fn consecutive_ranges_are_sorted_together_up_to_the_target() {
        let memory = [3, 3, 3, 10, 1, 0, 4, 2];
        let groups = consecutive_groups(&memory, Some(6));
        assert_eq!(groups, vec![0..2, 2..3, 3..4, 4..7, 7..8]);
        // Every range in exactly one group, in order.
        let flat: Vec<usize> = groups.into_iter().flatten().collect();
        assert_eq!(flat, (0..memory.len()).collect::<Vec<_>>());
        assert_eq!(consecutive_groups(&memory, None).len(), memory.len());
        assert!(consecutive_groups(&[], Some(6)).is_empty());
    }

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse(), Ok(KeyRangeChoice::Auto));
        assert_eq!("On".parse(), Ok(KeyRangeChoice::On));
        assert_eq!("OFF".parse(), Ok(KeyRangeChoice::Off));
        assert_eq!("12".parse(), Ok(KeyRangeChoice::Ranges(12)));
        assert!("0".parse::<KeyRangeChoice>().is_err());
        assert!("many".parse::<KeyRangeChoice>().is_err());
    }
}
