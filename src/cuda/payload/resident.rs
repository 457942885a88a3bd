//! A sorted run's fixed-width and byte-like (views) columns kept on the device after its sort
//! ([`ResidentColumns`], `src/gather/resident.rs`), for the Parquet writer: each row
//! group's rows of them are gathered on the device into buffers of their own (byte-like
//! values as their bytes end to end and offsets) and its pages built from there
//! ([`ResidentRun::encode_pages`]); only the validity bitmaps and byte arrays' offsets (to
//! cut the pages) and the pages come back. The values of each page's extremes are read
//! from the run's input on the host ([`ResidentRun::values_at`]), and so are the columns
//! of a row group the device cannot take ([`ResidentColumns::column`]).
//!
//! ```text
//!  run on the device:  permutation, columns ─ gather rows first .. first + n ─► row group's
//!                      values + validity ─ page kernels (parquet.rs) ─► pages ──► host
//! ```

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::ArrayRef;
use arrow::buffer::NullBuffer;
use datafusion::arrow;
use datafusion::common::{DataFusionError, Result};

use super::{download_nulls, DevicePayload};
use crate::cuda::error::CudaResult;
use crate::cuda::memory::device::DeviceBuffer;
use crate::cuda::parquet::{ColumnPages, OnDevice, PageColumn, PageCut, StatisticsOrder};
use crate::cuda::runtime::note_failure_of;
use crate::gather::{PayloadGather, ResidentColumns, RunRows, SharedOrder};

/// A run's columns on the device, with the run's input and order on the host.
pub struct ResidentRun {
    /// Read by page jobs at once, each on a lane of the device (`memory/lanes.rs`).
    payload: DevicePayload,
    /// The sort's columns it holds.
    columns: Vec<usize>,
    /// Bytes of each column's values on the device.
    widths: Vec<usize>,
    rows: Arc<RunRows>,
    permutation: SharedOrder,
}

impl std::fmt::Debug for ResidentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResidentRun")
            .field("columns", &self.columns)
            .field("rows", &self.permutation.len())
            .finish()
    }
}

/// How one of a run's resident columns goes into a row group's pages.
#[derive(Debug, Clone, Copy)]
pub struct ResidentPageSpec {
    /// The column's place in [`ResidentColumns::columns`].
    pub column: usize,
    /// Bytes of each value in the page (its low bytes).
    pub out_width: u32,
    /// Definition levels are written.
    pub nullable: bool,
    /// Values `DELTA_BINARY_PACKED`, else `PLAIN`.
    pub delta: bool,
    /// A dictionary is tried, kept under this many bytes ([`PageColumn::dictionary_limit`]).
    pub dictionary_limit: Option<usize>,
    /// Each page's extremes are found in this order.
    pub statistics: Option<StatisticsOrder>,
}

/// One column of a row group, its pages built from the run's copy on the device.
#[derive(Debug)]
pub struct ResidentPages {
    /// How the column was cut into pages.
    pub cuts: Vec<PageCut>,
    /// The pages.
    pub pages: ColumnPages,
    /// Its validity in the row group, where a row of it is null.
    pub nulls: Option<NullBuffer>,
    /// Byte arrays: their offsets in the row group (one more than the rows, from 0).
    pub offsets: Option<Vec<u32>>,
}

/// One column's rows of a row group gathered on the device.
struct Gathered {
    /// Fixed-width values, or byte arrays' bytes end to end.
    values: DeviceBuffer<u8>,
    /// Byte arrays' offsets, on the device and on the host.
    offsets: Option<(DeviceBuffer<u32>, Vec<u32>)>,
    validity: Option<DeviceBuffer<u8>>,
}

/// How the caller cuts column `i` of a launch (its validity and, for byte arrays, its
/// offsets given) into pages.
pub type CutPages<'a> =
    &'a (dyn Fn(usize, Option<&NullBuffer>, Option<&[u32]>) -> Vec<PageCut> + Sync);

impl ResidentRun {
    /// The run whose columns `payload` holds (every one fixed-width on its device), of
    /// `rows` in `permutation`'s order.
    pub(super) fn new(
        payload: DevicePayload,
        rows: Arc<RunRows>,
        permutation: SharedOrder,
    ) -> Self {
        let widths = (0..payload.columns().len())
            .map(|at| match payload.fixed_width(at) {
                Some(width) => width,
                None => {
                    assert!(
                        payload.is_views(at),
                        "resident columns are fixed-width or views"
                    );
                    0
                }
            })
            .collect();
        Self {
            columns: payload.columns().to_vec(),
            widths,
            payload,
            rows,
            permutation,
        }
    }

    /// Bytes of a value of column `column` (its place in the run's columns) on the device;
    /// 0 for byte-like values (views), which its pages take as byte arrays.
    pub fn width(&self, column: usize) -> usize {
        self.widths[column]
    }

    /// The pages of `specs`' columns for rows `first .. first + rows` of the run, built on
    /// the device (Snappy where `snappy`), each column cut by `cut`; or why not (a failure
    /// is logged, and a fatal one disables the device, as a failed sort does).
    pub fn encode_pages(
        &self,
        first: usize,
        rows: usize,
        specs: &[ResidentPageSpec],
        snappy: bool,
        cut: CutPages<'_>,
    ) -> std::result::Result<Vec<ResidentPages>, String> {
        assert!(
            first + rows <= self.permutation.len(),
            "rows past the end of the run"
        );
        let payload = &self.payload;
        let runtime = Arc::clone(payload.runtime());
        let Some(encoder) = runtime.pages.as_ref() else {
            return Err("the Parquet page kernels did not load".to_string());
        };
        let started = Instant::now();
        let mut held = started;
        // On a lane: the device's stream finished the run's sort and uploads, which the
        // lane waits for; other row groups' jobs run on the other lanes at once.
        let built = runtime.on_lane(|device, staging| {
            held = Instant::now();
            let mut laps = crate::trace::Laps::start();
            let gathered = specs
                .iter()
                .map(|spec| match self.widths[spec.column] {
                    0 => payload
                        .gather_range_bytes(device, spec.column, payload.order_at(first), rows)
                        .map(|b| Gathered {
                            values: b.bytes,
                            offsets: Some((b.offsets, b.host_offsets)),
                            validity: b.validity,
                        }),
                    _ => payload
                        .gather_range(device, spec.column, payload.order_at(first), rows)
                        .map(|(values, validity)| Gathered {
                            values,
                            offsets: None,
                            validity,
                        }),
                })
                .collect::<CudaResult<Vec<_>>>()?;
            laps.lap("gathered");
            let nulls = gathered
                .iter()
                .map(|gathered| download_nulls(device, gathered.validity.as_ref(), rows))
                .collect::<CudaResult<Vec<Option<NullBuffer>>>>()?;
            laps.lap("validity down");
            let cuts: Vec<Vec<PageCut>> = nulls
                .iter()
                .zip(&gathered)
                .enumerate()
                .map(|(i, (nulls, gathered))| {
                    let offsets = gathered.offsets.as_ref().map(|(_, host)| host.as_slice());
                    cut(i, nulls.as_ref(), offsets)
                })
                .collect();
            laps.lap("cut");
            let columns: Vec<PageColumn<'_>> = specs
                .iter()
                .zip(&gathered)
                .zip(&nulls)
                .zip(&cuts)
                .map(|(((spec, gathered), nulls), cuts)| PageColumn {
                    values: &[],
                    offsets: gathered.offsets.as_ref().map(|(_, host)| host.as_slice()),
                    validity: nulls.as_ref().map(|n| n.buffer().as_slice()),
                    in_width: self.widths[spec.column] as u32,
                    out_width: spec.out_width,
                    nullable: spec.nullable,
                    delta: spec.delta,
                    pages: cuts,
                    dictionary_limit: spec.dictionary_limit,
                    statistics: spec.statistics,
                    on_device: Some(OnDevice {
                        values: gathered.values.ptr(),
                        offsets: gathered.offsets.as_ref().map_or(0, |(d, _)| d.ptr()),
                        // Where no row of the row group is null, the kernels read none.
                        validity: match (nulls, &gathered.validity) {
                            (Some(_), Some(bits)) => bits.ptr(),
                            _ => 0,
                        },
                        rows,
                    }),
                })
                .collect();
            let pages = encoder.encode(device, staging, &columns, snappy)?;
            laps.lap("encoded");
            crate::trace::event(|| format!("pages: resident rows {first}..: {}", laps.summary()));
            let offsets: Vec<Option<Vec<u32>>> = gathered
                .into_iter()
                .map(|g| g.offsets.map(|(_, host)| host))
                .collect();
            Ok((cuts, pages, nulls, offsets))
        });
        crate::trace::event(|| {
            format!(
                "pages: {rows} resident rows of {} columns, waited {:.1} ms for a lane, held it {:.1} ms",
                specs.len(),
                (held - started).as_secs_f64() * 1e3,
                held.elapsed().as_secs_f64() * 1e3,
            )
        });
        match built {
            Ok((cuts, pages, nulls, offsets)) => Ok(cuts
                .into_iter()
                .zip(pages)
                .zip(nulls)
                .zip(offsets)
                .map(|(((cuts, pages), nulls), offsets)| ResidentPages {
                    cuts,
                    pages,
                    nulls,
                    offsets,
                })
                .collect()),
            Err(error) => {
                note_failure_of(
                    runtime.ordinal(),
                    "Parquet page encoding",
                    "encoding on the host",
                    &error,
                    rows,
                );
                Err(error.to_string())
            }
        }
    }

    /// Column `column`'s (its place in the run's columns) values at rows `at` of the
    /// run's order, read from the run's input on the host; for a column whose input the
    /// device held in place of the host's (`early.rs`, `take_over`), read back from the
    /// device.
    pub fn values_at(&self, column: usize, at: &[usize]) -> Result<ArrayRef> {
        let ids: Vec<u32> = at.iter().map(|&row| self.permutation[row]).collect();
        if self.rows.is_hollow_column(self.columns[column]) {
            let runtime = Arc::clone(self.payload.runtime());
            return runtime
                .on_lane(|device, _| self.payload.values_at_ids(device, column, &ids))
                .map_err(|e| {
                    DataFusionError::Execution(format!(
                        "gpusort: reading page statistics back from the device: {e}"
                    ))
                });
        }
        self.input_values(column, &ids)
    }

    /// Column `column`'s values at input rows `ids`, from the run's input on the host.
    fn input_values(&self, column: usize, ids: &[u32]) -> Result<ArrayRef> {
        let mut arrays = self.rows.gather_columns(ids, &[self.columns[column]])?;
        Ok(arrays.remove(0))
    }
}

impl ResidentColumns for ResidentRun {
    fn columns(&self) -> &[usize] {
        &self.columns
    }

    fn rows(&self) -> usize {
        self.permutation.len()
    }

    fn column(&self, column: usize, first: usize, rows: usize) -> Result<ArrayRef> {
        self.input_values(column, &self.permutation[first..first + rows])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
