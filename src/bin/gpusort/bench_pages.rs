//! `gpusort bench pages`: Parquet data pages of 8-byte columns built on the device against
//! parquet's own column writers on every core, from the same Arrow columns.
//!
//! The table: `--columns` columns of `--rows` rows, four kinds in turn (random integers,
//! sorted integers, random doubles, sorted doubles with a tenth null), cut into row groups
//! of `--row-group-rows` rows as `gpusort sort` writes them. Each row group's columns go to
//! the device in one call, as `--page-encoding device` sends them (their input laid out in
//! host memory, then upload, page kernels, Snappy, download of the pages; the host's page
//! headers and statistics are not in this time), [`JOBS`] row groups at a time as a file's
//! page jobs run. The baseline encodes every (row group, column) chunk with parquet's
//! `ArrowWriter` on the rayon pool, with the same encodings and compression. The
//! dictionary passes: the same table, every dictionary given up (its values are nearly all
//! distinct); then a table of the same kinds whose values take 1 000 distinct values a
//! column, every dictionary kept. Then a table of strings: columns of text of 10 to 43
//! bytes, nearly all distinct (dictionaries given up), and columns of 7 short values
//! (dictionaries kept), as `lineitem`'s comments and ship modes. Medians of `--reps` after
//! one warm-up run of each, with the process's CPU time (user and system) of each pass:
//! the cores the device leaves to the sort and the other columns' encoders.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{exec_err, Result};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, Encoding};
use datafusion::parquet::file::properties::WriterProperties;
use gpusort::cuda::{PageColumn, PageCut, StatisticsOrder};
use rayon::prelude::*;

use crate::bench::splitmix64;

/// Options of `gpusort bench pages`.
#[derive(Debug, Clone)]
pub struct PagesBench {
    pub rows: usize,
    pub columns: usize,
    pub row_group_rows: usize,
    pub reps: usize,
}

/// Column `c` of the table, rows `start .. start + rows`.
fn column(c: usize, start: usize, rows: usize) -> ArrayRef {
    let seed = (c as u64) << 40;
    let range = start as u64..(start + rows) as u64;
    match c % 4 {
        0 => Arc::new(Int64Array::from_iter_values(
            range.map(|i| splitmix64(seed + i) as i64),
        )),
        1 => Arc::new(Int64Array::from_iter_values(
            range.map(|i| (i * 1000 + splitmix64(seed + i) % 1000) as i64),
        )),
        2 => {
            Arc::new(Float64Array::from_iter_values(range.map(|i| {
                (splitmix64(seed + i) >> 11) as f64 / (1u64 << 53) as f64
            })))
        }
        _ => Arc::new(Float64Array::from_iter(
            range.map(|i| (i % 10 != 3).then_some(i as f64 * 0.01)),
        )),
    }
}

/// Column `c` of the table of few values: [`column`]'s kinds, of 1 000 values each (the
/// sorted integers in runs of 16 384 rows).
fn few_column(c: usize, start: usize, rows: usize) -> ArrayRef {
    let seed = (c as u64) << 40;
    let range = start as u64..(start + rows) as u64;
    match c % 4 {
        0 => Arc::new(Int64Array::from_iter_values(
            range.map(|i| (splitmix64(seed + i) % 1000) as i64 * 7919),
        )),
        1 => Arc::new(Int64Array::from_iter_values(
            range.map(|i| (i >> 14) as i64),
        )),
        2 => Arc::new(Float64Array::from_iter_values(
            range.map(|i| (splitmix64(seed + i) % 1000) as f64 * 0.25),
        )),
        _ => Arc::new(Float64Array::from_iter(
            range.map(|i| (i % 10 != 3).then_some((i % 1000) as f64 * 0.01)),
        )),
    }
}

/// Words of the string table's text.
const WORDS: [&str; 16] = [
    "carefully",
    "final",
    "deposits",
    "sleep",
    "quickly",
    "ironic",
    "requests",
    "boost",
    "furiously",
    "regular",
    "packages",
    "haggle",
    "blithely",
    "express",
    "accounts",
    "nag",
];

/// Column `c` of the string table, rows `start .. start + rows`: even columns text of
/// words, 10 to 43 bytes, nearly all distinct; odd ones one of 7 ship modes.
fn string_column(c: usize, start: usize, rows: usize) -> ArrayRef {
    const MODES: [&str; 7] = ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"];
    let seed = (c as u64) << 40;
    let range = start as u64..(start + rows) as u64;
    match c % 2 {
        0 => Arc::new(StringArray::from_iter_values(range.map(|i| {
            let mut bits = splitmix64(seed + i);
            let want = 10 + (bits % 34) as usize;
            let mut text = String::with_capacity(want + 10);
            while text.len() < want {
                bits = splitmix64(bits);
                text.push_str(WORDS[(bits % 16) as usize]);
                text.push(' ');
            }
            text.truncate(want);
            text
        }))),
        _ => Arc::new(StringArray::from_iter_values(
            range.map(|i| MODES[(splitmix64(seed + i) % 7) as usize]),
        )),
    }
}

/// Pages of at most `per_page` rows (a multiple of 8) over `array`.
fn cuts(array: &dyn Array, per_page: usize) -> Vec<PageCut> {
    (0..array.len())
        .step_by(per_page)
        .map(|first_row| {
            let rows = per_page.min(array.len() - first_row);
            let nulls = array
                .nulls()
                .map_or(0, |n| n.slice(first_row, rows).null_count());
            PageCut {
                first_row,
                rows,
                values: rows - nulls,
            }
        })
        .collect()
}

/// CPU time of the process so far (user and system, every thread).
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Row groups whose pages are built at once, as `gpusort sort` runs a file's page jobs
/// (one lays its input out while another holds the device).
const JOBS: usize = 4;

/// One pass of the device: every row group's columns in one call each, [`JOBS`] at a
/// time; bytes of pages.
/// With `delta`, the integer columns' values `DELTA_BINARY_PACKED`; with `dictionary`, a
/// dictionary of at most 1 MiB tried first.
fn device_pass(
    groups: &[Vec<ArrayRef>],
    snappy: bool,
    delta: bool,
    dictionary: bool,
    per_page: usize,
) -> Result<usize> {
    // Plain threads, as the writer's page jobs: a rayon worker waiting for the copy
    // threads would take another row group's job meanwhile, and that job would wait for
    // the device its own thread holds.
    let next = AtomicUsize::new(0);
    let sizes: Vec<Result<usize>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..JOBS)
            .map(|_| {
                scope.spawn(|| {
                    let mut bytes = 0;
                    loop {
                        let Some(group) = groups.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            return Ok(bytes);
                        };
                        bytes += device_group(group, snappy, delta, dictionary, per_page)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| exec_err!("a page job panicked"))
            })
            .collect()
    });
    sizes.into_iter().sum()
}

/// One row group's pages built on the device; their bytes.
fn device_group(
    group: &[ArrayRef],
    snappy: bool,
    delta: bool,
    dictionary: bool,
    per_page: usize,
) -> Result<usize> {
    let data: Vec<_> = group.iter().map(|a| a.to_data()).collect();
    let validity: Vec<_> = group
        .iter()
        .map(|a| a.nulls().map(|n| n.inner().sliced()))
        .collect();
    let cut: Vec<Vec<PageCut>> = group.iter().map(|a| cuts(a.as_ref(), per_page)).collect();
    let columns: Vec<PageColumn<'_>> = (0..group.len())
        .map(|i| {
            let (values, offsets, width) = match group[i].as_string_opt::<i32>() {
                Some(strings) => {
                    let offsets: &[u32] = strings.offsets().inner().inner().typed_data();
                    (strings.values().as_slice(), Some(offsets), 0)
                }
                None => (data[i].buffers()[0].as_slice(), None, 8),
            };
            PageColumn {
                values,
                offsets,
                validity: validity[i].as_ref().map(|b| b.as_slice()),
                in_width: width,
                out_width: width,
                nullable: true,
                delta: delta && width == 8 && i % 4 < 2,
                pages: &cut[i],
                dictionary_limit: dictionary.then_some(1 << 20),
                // As parquet's writers: each page's minimum and maximum.
                statistics: Some(match offsets {
                    Some(_) => StatisticsOrder::Bytes,
                    None => StatisticsOrder::Signed,
                }),
                on_device: None,
            }
        })
        .collect();
    let pages = match gpusort::cuda::encode_on_device(&columns, snappy) {
        Ok(pages) => pages,
        Err(reason) => return exec_err!("pages on the device: {reason}"),
    };
    Ok(pages
        .iter()
        .flat_map(|c| c.dictionary.iter().map(|d| &d.0).chain(&c.pages))
        .map(|p| p.data.len())
        .sum::<usize>())
}

/// One pass of parquet's writers: every (row group, column) chunk on the rayon pool.
fn host_pass(
    groups: &[Vec<ArrayRef>],
    properties: &WriterProperties,
    integers: &WriterProperties,
) -> Result<usize> {
    let chunks: Vec<&ArrayRef> = groups.iter().flatten().collect();
    let sizes: Result<Vec<usize>> = chunks
        .par_iter()
        .map(|array| {
            let field = Field::new("c", array.data_type().clone(), true);
            let batch =
                RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![Arc::clone(array)])?;
            let mut out = Vec::new();
            let properties = match array.data_type() {
                DataType::Int64 => integers,
                _ => properties,
            };
            let mut writer =
                ArrowWriter::try_new(&mut out, batch.schema(), Some(properties.clone()))?;
            writer.write(&batch)?;
            writer.close()?;
            Ok(out.len())
        })
        .collect();
    Ok(sizes?.iter().sum())
}

pub fn run(options: &PagesBench) -> Result<()> {
    if options.rows == 0 || options.columns == 0 || options.row_group_rows == 0 {
        return exec_err!("rows, columns and row group rows must be at least 1");
    }
    let table = |column: fn(usize, usize, usize) -> ArrayRef| -> Vec<Vec<ArrayRef>> {
        (0..options.rows)
            .step_by(options.row_group_rows)
            .map(|start| {
                let rows = options.row_group_rows.min(options.rows - start);
                (0..options.columns)
                    .into_par_iter()
                    .map(|c| column(c, start, rows))
                    .collect()
            })
            .collect()
    };
    let (distinct, few) = (table(column), table(few_column));
    let strings = table(string_column);
    let input_bytes = options.rows * options.columns * 8;
    let string_bytes: usize = strings
        .iter()
        .flatten()
        .map(|a| a.as_string::<i32>().values().len())
        .sum();
    let host = |compression, dictionary| {
        WriterProperties::builder()
            .set_dictionary_enabled(dictionary)
            .set_compression(compression)
            .build()
    };
    // Pages as parquet's writer cuts them by default: 1 MiB of 8-byte values, 20 000 rows.
    let per_page = 20_480;
    println!(
        "{} rows × {} columns of 8-byte values ({:.2} GB), row groups of {} rows, {} threads; \
         medians of {}",
        options.rows,
        options.columns,
        input_bytes as f64 / 1e9,
        options.row_group_rows,
        rayon::current_num_threads(),
        options.reps
    );
    println!(
        "| pages | device | GB/s | its CPU time | parquet's writers | GB/s | their CPU time | bytes (device / parquet) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let (plain, snappy) = (Compression::UNCOMPRESSED, Compression::SNAPPY);
    for (name, groups, compression, delta, dictionary, bytes) in [
        (
            "PLAIN, uncompressed",
            &distinct,
            plain,
            false,
            false,
            input_bytes,
        ),
        (
            "PLAIN, Snappy",
            &distinct,
            snappy,
            false,
            false,
            input_bytes,
        ),
        (
            "integers DELTA_BINARY_PACKED, Snappy",
            &distinct,
            snappy,
            true,
            false,
            input_bytes,
        ),
        (
            "dictionaries given up, then as above",
            &distinct,
            snappy,
            true,
            true,
            input_bytes,
        ),
        (
            "dictionaries of 1 000 values, Snappy",
            &few,
            snappy,
            true,
            true,
            input_bytes,
        ),
        (
            "strings: text PLAIN (dictionary given up), 7 values dictionary, Snappy",
            &strings,
            snappy,
            false,
            true,
            string_bytes,
        ),
    ] {
        let snappy = compression == Compression::SNAPPY;
        let properties = host(compression, dictionary);
        let integers = match delta {
            true => WriterProperties::builder()
                .set_dictionary_enabled(dictionary)
                .set_compression(compression)
                .set_encoding(Encoding::DELTA_BINARY_PACKED)
                .build(),
            false => properties.clone(),
        };
        device_pass(groups, snappy, delta, dictionary, per_page)?;
        host_pass(groups, &properties, &integers)?;
        let (mut device_times, mut host_times) = (Vec::new(), Vec::new());
        let (mut device_cpu, mut host_cpu) = (Vec::new(), Vec::new());
        let (mut device_bytes, mut host_bytes) = (0, 0);
        for _ in 0..options.reps {
            let (started, cpu) = (Instant::now(), cpu_time());
            device_bytes = device_pass(groups, snappy, delta, dictionary, per_page)?;
            device_times.push(started.elapsed());
            device_cpu.push(cpu_time() - cpu);
            let (started, cpu) = (Instant::now(), cpu_time());
            host_bytes = host_pass(groups, &properties, &integers)?;
            host_times.push(started.elapsed());
            host_cpu.push(cpu_time() - cpu);
        }
        let (device, host) = (median(device_times), median(host_times));
        println!(
            "| {name} | {:.1} ms | {:.1} | {:.2} s | {:.1} ms | {:.1} | {:.2} s | {} / {} |",
            device.as_secs_f64() * 1e3,
            bytes as f64 / device.as_secs_f64() / 1e9,
            median(device_cpu).as_secs_f64(),
            host.as_secs_f64() * 1e3,
            bytes as f64 / host.as_secs_f64() / 1e9,
            median(host_cpu).as_secs_f64(),
            device_bytes,
            host_bytes
        );
    }
    Ok(())
}
