//! `gpusort`: the command line.
//!
//! ```text
//! gpusort demo [--rows N]                       generate a table, ORDER BY it, verify
//! gpusort sql "<statements>" [--table name=path ...] [--explain]
//! gpusort sort <inputs...> -o <output> --by "<col> [ASC|DESC] [NULLS FIRST|LAST], ..."
//! gpusort bench kernels [--sizes 20,24,26,28] [--cub PATH]   (needs a GPU)
//! gpusort bench merge [--size 26] [--cub PATH]        segmented and locality sorts vs CUB
//! gpusort bench sql [--rows N] [--query Q1 ...]         rule on vs off, stage breakdown
//! gpusort bench spread [--log2-rows 30] [--devices 1 --devices all]   one GPU vs several
//! ```
//!
//! `demo`, `sql` and `sort` run on machines without a GPU (the CPU backend answers).

mod bench;
mod bench_merge;
mod bench_pages;
mod bench_spread;
mod bench_sql;
mod bench_tables;
mod bench_tpch;
mod demo;
mod process_memory;
mod session;
mod signals;
mod sort;
mod sql;

/// mimalloc keeps freed memory for reuse instead of handing every large buffer back to
/// the kernel: a sort of Parquet files allocates and frees gigabytes of Arrow buffers, and
/// with the system allocator each new one was faulted in page by page again (see
/// docs/performance.md, session 28).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use datafusion::common::config::SpillCompression;
use gpusort::BackendChoice;

#[derive(Debug, Parser)]
#[command(name = "gpusort", version, about = "GPU sorting for Apache DataFusion")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a table, run an ORDER BY through gpusort, print the plan and time, verify.
    Demo {
        /// Rows of the generated table.
        #[arg(long, default_value_t = 10_000_000)]
        rows: usize,
        /// Seed of the generated data.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Sort backend: auto, cuda or cpu.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
    },
    /// Run SQL statements (separated by ';') with gpusort registered.
    Sql {
        /// The statements, e.g. "SET gpu_sort.enabled = false; SELECT ...".
        statements: String,
        /// Register a table: name=path (Parquet or CSV, a file or a directory).
        #[arg(long = "table", value_name = "NAME=PATH")]
        tables: Vec<String>,
        /// Print each query's physical plan and gpusort's decisions before its result.
        #[arg(long)]
        explain: bool,
        /// Sort backend: auto, cuda or cpu.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// Print at most this many rows of each result.
        #[arg(long, default_value_t = 50)]
        max_rows: usize,
    },
    /// Sort Parquet or CSV files (files, directories, globs) into Parquet.
    Sort {
        /// Input files, directories or glob patterns, in input order: ties keep it (files
        /// in the order given, a directory's or a pattern's in sorted path order). A path
        /// that names a file is that file, whatever characters it holds; only a path that
        /// names nothing is a glob pattern.
        #[arg(required = true)]
        inputs: Vec<String>,
        /// Output Parquet file (a directory with --max-rows-per-file).
        #[arg(short, long)]
        output: std::path::PathBuf,
        /// Sort keys: "<col> [ASC|DESC] [NULLS FIRST|LAST], ...".
        #[arg(long)]
        by: String,
        /// Keep only the first N rows.
        #[arg(long)]
        limit: Option<usize>,
        /// Write a directory of files of at most N rows each.
        #[arg(long)]
        max_rows_per_file: Option<usize>,
        /// Rows per Parquet row group.
        #[arg(long, default_value_t = gpusort::pipeline::DEFAULT_ROW_GROUP_ROWS)]
        row_group_rows: usize,
        /// Compression: zstd[(level)], snappy, lz4, lz4_raw, gzip[(level)], brotli[(level)], none.
        #[arg(long, default_value = "zstd(1)")]
        compression: String,
        /// Memory limit (e.g. 4G); larger inputs spill to disk. Default: half the memory
        /// this process may use (RAM, or its cgroup's limit).
        #[arg(long, value_parser = gpusort::parse_bytes)]
        memory_limit: Option<usize>,
        /// Compression of spilled runs: lz4_frame (default), zstd or uncompressed.
        #[arg(long, default_value = "lz4_frame")]
        spill_compression: SpillCompression,
        /// Where to spill (a folder of the job's own is made there). Default: $TMPDIR, or
        /// /tmp.
        #[arg(long)]
        spill_dir: Option<std::path::PathBuf>,
        /// The most the job may spill (e.g. 200G). Default: 90 % of the space free on the
        /// spill directory's disk when the job starts.
        #[arg(long, value_parser = gpusort::parse_bytes)]
        max_spill: Option<usize>,
        /// Match the inputs' columns by name: every column of any file, nulls where a file
        /// lacks it, types widened where that is exact. Without it, inputs whose columns
        /// differ are refused.
        #[arg(long)]
        union_by_name: bool,
        /// Replace an existing output.
        #[arg(long)]
        overwrite: bool,
        /// Do not flush the output to disk before renaming it into place. It is still
        /// renamed whole and atomically, but a crash soon after the job may lose it (DuckDB's
        /// and DataFusion's COPY do not flush either). Faster where the disk is slower than
        /// the page cache.
        #[arg(long)]
        no_fsync: bool,
        /// Sort backend: auto, cuda or cpu. With auto, inputs of fewer than 100 000 rows
        /// (known from Parquet footers) sort on the CPU without opening the device.
        #[arg(long, default_value = "auto")]
        backend: BackendChoice,
        /// The GPUs to sort on: all (the default), a count (2: the first two) or ordinals
        /// (0,2; "1," for device 1 alone). Spilled runs and key ranges are sorted on all
        /// of them at once, each run on the least busy one.
        #[arg(long, default_value = "all")]
        devices: gpusort::DeviceSelection,
        /// Where Parquet data pages are built: host (every page on the CPU), or device
        /// (the pages of top-level columns of 4- and 8-byte values, strings and binaries,
        /// uncompressed or snappy, dictionaries included, built and compressed on the GPU).
        #[arg(long, default_value = "host")]
        page_encoding: gpusort::pipeline::PageEncoding,
        /// How an input larger than the memory limit is sorted: on (by key range when its
        /// decoded size passes half the memory pool: the keys sampled, every row spilled
        /// into its range, each range sorted in memory and written in turn), off (sorted
        /// runs spilled and merged at the end), auto (the default: on where a GPU sorts,
        /// off on the CPU backend, as measured faster on each), or a number of ranges to
        /// use whatever the input's size.
        #[arg(long, default_value = "auto")]
        key_ranges: gpusort::pipeline::KeyRangeChoice,
        /// No progress bars and no summary line.
        #[arg(short, long)]
        quiet: bool,
        /// Also print where the time went (plan, read+sort, write).
        #[arg(long)]
        timings: bool,
    },
    /// Benchmarks (on a GPU host).
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// DataFusion's sort benchmark (sort_tpch Q1–Q11) over TPC-H lineitem generated
    /// in-process and read from Parquet, with gpusort's rule on and off.
    Tpch(bench_tpch::TpchBench),
    /// OneSweep against CUB for u32/u64 keys, pairs and row ids (G keys/s, warm medians).
    Kernels {
        /// log2 of the sizes, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "20,24,26,28")]
        sizes: Vec<u32>,
        /// Timed runs per cell.
        #[arg(long, default_value_t = 10)]
        reps: usize,
        /// Untimed warm-up runs per cell.
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// Data seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// The CUB baseline binary (built from benches/cub_sort.cu with nvcc).
        #[arg(long)]
        cub: Option<String>,
        /// Only these variants, comma separated.
        #[arg(long, value_delimiter = ',', value_enum)]
        variants: Vec<bench::Variant>,
    },
    /// Parquet data pages of 8-byte columns built on the device against parquet's own
    /// writers on every core.
    Pages {
        /// Rows of each column.
        #[arg(long, default_value_t = 16 << 20)]
        rows: usize,
        /// Columns.
        #[arg(long, default_value_t = 8)]
        columns: usize,
        /// Rows per row group.
        #[arg(long, default_value_t = gpusort::pipeline::DEFAULT_ROW_GROUP_ROWS)]
        row_group_rows: usize,
        /// Timed runs.
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// Segmented and locality sorts against CUB (segment lengths, nearly sorted keys).
    Merge {
        /// log2 of the number of keys.
        #[arg(long, default_value_t = 26)]
        size: u32,
        /// Timed runs per cell.
        #[arg(long, default_value_t = 10)]
        reps: usize,
        /// Untimed warm-up runs per cell.
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// Data seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// The CUB baseline binary (built from benches/cub_merge.cu with nvcc).
        #[arg(long)]
        cub: Option<String>,
    },
    /// Q1–Q8 on generated tables with gpusort's rule on and off (medians, stage breakdown).
    Sql(bench_sql::SqlBench),
    /// A host-resident key sort on one device against the same sort spread over several.
    Spread(bench_spread::SpreadBench),
}

fn main() {
    let started = std::time::Instant::now();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    if let Command::Sort { memory_limit, .. } = &cli.command {
        // Before the runtime's threads start.
        let limit = memory_limit.or_else(gpusort::pipeline::memory::default_memory_limit);
        process_memory::bound_for_limit(limit, memory_limit.is_some());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let code = runtime.block_on(run(cli));
    // A job stopped by a signal drops its sort; the sort's blocking jobs stop at their next
    // stage and let go of the spill files, which are removed then.
    runtime.shutdown_timeout(std::time::Duration::from_secs(30));
    if std::env::var_os("GPUSORT_TRACE").is_some() {
        // What the job's timeline does not show: dropping the runtime. The process's
        // exit (the kernel letting go of its memory) comes after.
        eprintln!(
            "process: exiting {:.1} ms after it started",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    std::process::exit(code);
}

/// Runs the command; the process's exit code.
async fn run(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Demo {
            rows,
            seed,
            backend,
        } => demo::run(rows, seed, backend).await,
        Command::Sql {
            statements,
            tables,
            explain,
            backend,
            max_rows,
        } => sql::run(&statements, &tables, explain, backend, max_rows).await,
        Command::Sort {
            inputs,
            output,
            by,
            limit,
            max_rows_per_file,
            row_group_rows,
            compression,
            memory_limit,
            spill_compression,
            spill_dir,
            max_spill,
            union_by_name,
            overwrite,
            no_fsync,
            backend,
            devices,
            page_encoding,
            key_ranges,
            quiet,
            timings,
        } => {
            let mut job = gpusort::pipeline::SortJob::new(inputs, output, by);
            job.limit = limit;
            job.max_rows_per_file = max_rows_per_file;
            job.row_group_rows = row_group_rows;
            job.compression = compression;
            job.spill_compression = spill_compression;
            job.spill_dir = spill_dir;
            job.max_spill = max_spill.map(|bytes| bytes as u64);
            job.union_by_name = union_by_name;
            if memory_limit.is_some() {
                job.memory_limit = memory_limit;
            }
            job.overwrite = overwrite;
            job.sync = !no_fsync;
            job.backend = backend;
            job.devices = devices;
            job.page_encoding = page_encoding;
            job.key_ranges = key_ranges;
            signals::install();
            return match sort::run(job, quiet, timings).await {
                Ok(_) => 0,
                Err(sort::Stopped::Failed(e)) => {
                    eprintln!("gpusort: error: {e}");
                    1
                }
                Err(sort::Stopped::Signal(signal)) => {
                    eprintln!("gpusort: stopped by signal {signal}; nothing was written");
                    signals::exit_code(signal)
                }
            };
        }
        Command::Bench {
            what:
                BenchCommand::Kernels {
                    sizes,
                    reps,
                    warmup,
                    seed,
                    cub,
                    variants,
                },
        } => bench::run(&bench::KernelBench {
            log2_sizes: sizes,
            reps: reps.max(1),
            warmup,
            seed,
            cub,
            variants,
        }),
        Command::Bench {
            what:
                BenchCommand::Merge {
                    size,
                    reps,
                    warmup,
                    seed,
                    cub,
                },
        } => bench_merge::run(&bench_merge::MergeBench {
            log2_size: size,
            reps: reps.max(1),
            warmup,
            seed,
            cub,
        }),
        Command::Bench {
            what: BenchCommand::Tpch(options),
        } => bench_tpch::run(&options).await,
        Command::Bench {
            what:
                BenchCommand::Pages {
                    rows,
                    columns,
                    row_group_rows,
                    reps,
                },
        } => bench_pages::run(&bench_pages::PagesBench {
            rows,
            columns,
            row_group_rows,
            reps: reps.max(1),
        }),
        Command::Bench {
            what: BenchCommand::Sql(options),
        } => bench_sql::run(&options).await,
        Command::Bench {
            what: BenchCommand::Spread(options),
        } => bench_spread::run(&options),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpusort: error: {e}");
            1
        }
    }
}
