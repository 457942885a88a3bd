//! A sort backend that asks for every run above a number of rows to be sorted in pieces,
//! as the CUDA backend does when a run passes what is free of its device memory limit; it
//! sorts on the CPU backend.

use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::Result;
use gpusort::keys::{column_rows, EncodedKeys, KeyColumn};
use gpusort::sort::{CpuBackend, KeySort, Segments, SortBackend, SortedRun};
use gpusort::AlgorithmChoice;

/// Splits runs of more than `piece_rows` rows into pieces of that many rows.
#[derive(Debug)]
pub struct PieceBackend {
    piece_rows: usize,
    splits: AtomicUsize,
}

impl PieceBackend {
    /// A backend whose device holds `piece_rows` rows.
    pub fn new(piece_rows: usize) -> Self {
        Self {
            piece_rows,
            splits: AtomicUsize::new(0),
        }
    }

    /// Runs it asked to split.
    pub fn splits(&self) -> usize {
        self.splits.load(Ordering::Relaxed)
    }
}

impl SortBackend for PieceBackend {
    fn name(&self) -> &'static str {
        "pieces"
    }

    fn sort(
        &self,
        keys: &EncodedKeys,
        algorithm: AlgorithmChoice,
        segments: Option<&Segments>,
    ) -> Result<SortedRun> {
        CpuBackend.sort(keys, algorithm, segments)
    }

    fn sort_or_split(
        &self,
        columns: &[KeyColumn],
        _algorithm: AlgorithmChoice,
        _segments: Option<&Segments>,
    ) -> Result<KeySort> {
        let rows = columns.first().map_or(0, column_rows);
        if rows > self.piece_rows {
            self.splits.fetch_add(1, Ordering::Relaxed);
            return Ok(KeySort::Split {
                rows: self.piece_rows,
            });
        }
        Ok(KeySort::OnHost)
    }
}
