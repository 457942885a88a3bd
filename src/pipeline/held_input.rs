//! Whether a job larger than its memory keeps its input on the device instead of spilling
//! it ([`hold_on_device`]).
//!
//! With device pages, the sort copies the payload columns to the device while the input
//! is read (`cuda/payload/early.rs`), and the writer builds their pages there. Under a
//! memory limit the host's copy of those columns is then only in the way: when the sort's
//! memory is full it hands them to the device (`EarlyColumns::take_over`) and keeps the
//! key columns, so that an input larger than host memory but not than the device's is
//! sorted and written as an in-memory job, with no spill file and no merge. Key ranges
//! (`ranged_job.rs`) remain for the others.

use datafusion::arrow::datatypes::DataType;

use super::ranged_job::KeyRangeChoice;
use crate::exec::HELD_WORKING_BYTES_PER_ROW;
use crate::keys::limb_sources;

/// The key columns and the sort's working memory may take this share of the pool: the
/// rest is for the scan, the rows in transit, and the writer.
pub(super) const HELD_POOL_SHARE: f64 = 0.5;

/// Environment variable that turns holding off (`0`): such jobs go by key range.
pub const HOLD_INPUT_VAR: &str = "GPUSORT_HOLD_INPUT";

/// What decides whether a job holds its input on the device.
#[derive(Debug, Clone, Copy)]
pub(super) struct HoldQuestion<'a> {
    /// The job's choice of key ranges: only `auto` holds.
    pub choice: KeyRangeChoice,
    /// The writer builds pages from the sort's copy on the device of every column but the
    /// keys (a column it leaves on the host would stay in host memory, uncounted here).
    pub resident: bool,
    /// GPUs the job may use (at most).
    pub devices: usize,
    /// The memory pool's bytes (`None`: no limit).
    pub pool: Option<usize>,
    /// Key ranges the job would be sorted by otherwise (1: it is not larger than memory).
    pub ranges: usize,
    /// The input's rows and decoded bytes, from the footers.
    pub rows: Option<u64>,
    pub decoded_bytes: Option<u64>,
    /// The input's columns.
    pub columns: usize,
    /// The sort keys' types.
    pub key_types: &'a [DataType],
}

/// The payload bytes expected where the job should hold its input on the device:
/// `auto` key ranges, pages built on the device from one GPU of every column but the
/// keys, an input that would go by key range, keys the device encodes itself (fixed
/// width), and key columns, validity and working memory that fit [`HELD_POOL_SHARE`] of
/// the pool. The device's own room is checked by the copy, which declines a payload past a
/// quarter of its memory.
pub(super) fn hold_on_device(question: &HoldQuestion<'_>) -> Option<u64> {
    if std::env::var(HOLD_INPUT_VAR).is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    let q = question;
    if q.choice != KeyRangeChoice::Auto || !q.resident || q.devices != 1 || q.ranges <= 1 {
        return None;
    }
    let (pool, rows, decoded) = (q.pool?, q.rows?, q.decoded_bytes?);
    let mut key_bytes = 0;
    for data_type in q.key_types {
        limb_sources(data_type)?;
        key_bytes += data_type.primitive_width().unwrap_or(1);
    }
    let row_bytes = key_bytes + HELD_WORKING_BYTES_PER_ROW + q.columns.div_ceil(8);
    let host = (rows as f64) * row_bytes as f64;
    (host <= pool as f64 * HELD_POOL_SHARE).then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(key_types: &[DataType]) -> HoldQuestion<'_> {
        HoldQuestion {
            choice: KeyRangeChoice::Auto,
            resident: true,
            devices: 1,
            pool: Some(3 << 30),
            ranges: 40,
            rows: Some(60_000_000),
            decoded_bytes: Some(13_000_000_000),
            columns: 16,
            key_types,
        }
    }

    #[test]
    fn fixed_width_keys_that_fit_half_the_pool_are_held() {
        let keys = [DataType::Date32, DataType::Int64];
        assert_eq!(hold_on_device(&question(&keys)), Some(13_000_000_000));
        // Each condition alone turns it off.
        let off = [
            HoldQuestion {
                choice: KeyRangeChoice::On,
                ..question(&keys)
            },
            HoldQuestion {
                resident: false,
                ..question(&keys)
            },
            HoldQuestion {
                devices: 2,
                ..question(&keys)
            },
            HoldQuestion {
                ranges: 1,
                ..question(&keys)
            },
            HoldQuestion {
                pool: None,
                ..question(&keys)
            },
            // 60 M rows of 12 + 8 + 2 bytes do not fit half of 2 GiB.
            HoldQuestion {
                pool: Some(2 << 30),
                ..question(&keys)
            },
        ];
        for q in off {
            assert_eq!(hold_on_device(&q), None, "{q:?}");
        }
        // A string key is encoded on the host: not held.
        assert_eq!(hold_on_device(&question(&[DataType::Utf8View])), None);
    }
}
