//! Live counts of a running job: rows read (the scans' output), sorted (the sort's output)
//! and written, and the bytes of the input and of the output written so far, for a
//! progress display that polls [`Progress::snapshot`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::GpuSortExec;

/// Counts shared between a job and whoever displays its progress.
#[derive(Debug, Default)]
pub struct Progress {
    /// Rows the output will have, when the inputs say (`u64::MAX`: unknown).
    total: AtomicU64,
    /// Bytes of the input files.
    input_bytes: AtomicU64,
    written: Arc<AtomicU64>,
    written_bytes: Arc<AtomicU64>,
    /// The plans of the job: the first one's scans count as read, every plan's topmost
    /// sort as sorted.
    plans: Mutex<Vec<Arc<dyn ExecutionPlan>>>,
}

/// One reading of [`Progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgressSnapshot {
    /// Rows the output will have, if known.
    pub total: Option<u64>,
    /// Rows produced by the scans.
    pub read: u64,
    /// Rows produced by the sort.
    pub sorted: u64,
    /// Rows written to the output.
    pub written: u64,
    /// Bytes of the input files.
    pub input_bytes: u64,
    /// Bytes of the output written so far.
    pub written_bytes: u64,
}

impl ProgressSnapshot {
    /// The input bytes behind `rows` rows, in proportion (a Parquet file's bytes are not
    /// read row by row): what a stage that has passed `rows` rows has read.
    pub fn input_bytes_of(&self, rows: u64) -> u64 {
        match self.total {
            Some(total) if total > 0 => {
                (self.input_bytes as f64 * (rows.min(total) as f64 / total as f64)) as u64
            }
            _ => 0,
        }
    }
}

impl Progress {
    /// Counts of nothing yet.
    pub fn new() -> Self {
        Self {
            total: AtomicU64::new(u64::MAX),
            ..Self::default()
        }
    }

    /// The current counts.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let total = self.total.load(Ordering::Relaxed);
        let (read, sorted) = {
            let plans = self.plans.lock().expect("progress lock");
            let read = plans.first().map_or(0, |plan| plan_counts(plan).0);
            (read, plans.iter().map(|plan| plan_counts(plan).1).sum())
        };
        ProgressSnapshot {
            total: (total != u64::MAX).then_some(total),
            read,
            sorted,
            written: self.written.load(Ordering::Relaxed),
            input_bytes: self.input_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
        }
    }

    pub(super) fn set_total(&self, total: Option<u64>, input_bytes: u64) {
        self.total
            .store(total.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.input_bytes.store(input_bytes, Ordering::Relaxed);
    }

    pub(super) fn watch(&self, plan: Arc<dyn ExecutionPlan>) {
        self.watch_all(vec![plan]);
    }

    /// Watches a job of several plans: `plans[0]` reads the input, each plan may sort.
    pub(super) fn watch_all(&self, plans: Vec<Arc<dyn ExecutionPlan>>) {
        *self.plans.lock().expect("progress lock") = plans;
    }

    pub(super) fn written_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.written)
    }

    /// The count of output bytes written, which the output's files add to.
    pub(super) fn written_bytes_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.written_bytes)
    }
}

/// (rows out of the leaves, rows out of the topmost sort), from live metrics.
fn plan_counts(plan: &Arc<dyn ExecutionPlan>) -> (u64, u64) {
    let rows = |node: &Arc<dyn ExecutionPlan>| {
        node.metrics().and_then(|m| m.output_rows()).unwrap_or(0) as u64
    };
    let (mut read, mut sorted) = (0, None);
    let _ = plan.apply(|node| {
        if node.children().is_empty() {
            read += rows(node);
        }
        let is_sort = node.downcast_ref::<GpuSortExec>().is_some()
            || node.downcast_ref::<SortExec>().is_some();
        if is_sort && sorted.is_none() {
            sorted = Some(rows(node));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (read, sorted.unwrap_or(0))
}
