//! `gpusort sort --page-encoding device` of an input larger than its memory, held on the
//! device: the sort hands its host copy of the payload to the device's copy instead of
//! spilling (`exec/buffer.rs`, `cuda/payload/early.rs`), and the pages and their statistics
//! are built from there. The file holds what the same job without a limit writes, with
//! the same statistics.

use super::*;

use datafusion::arrow::array::{Decimal128Array, Float64Array, Int32Array, StringArray};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use gpusort::pipeline::{sort_files, KeepOnDevice, PageEncoding, Progress, SortJob};
use gpusort::DeviceSelection;

fn held_input(dir: &std::path::Path, rows: usize) -> std::path::PathBuf {
    let mut rng = rng("held-input");
    // A key of 1 000 values (ties everywhere), some null.
    let k =
        Int32Array::from_iter((0..rows).map(|i| (i % 17 != 0).then(|| rng.random_range(0..1_000))));
    let v = Int64Array::from_iter_values((0..rows).map(|_| rng.random::<i64>()));
    let f = Float64Array::from_iter((0..rows).map(|i| (i % 11 != 0).then(|| rng.random::<f64>())));
    let d = Decimal128Array::from_iter(
        (0..rows)
            .map(|i| (i % 7 != 0).then(|| rng.random_range(-1_000_000_000i128..1_000_000_000))),
    )
    .with_precision_and_scale(12, 2)
    .unwrap();
    // Short and long strings (past a view's 12 inline bytes), some null, some empty.
    let s = StringArray::from_iter((0..rows).map(|i| {
        (i % 13 != 0).then(|| match i % 5 {
            0 => String::new(),
            1 | 2 => format!("{:x}", rng.random::<u32>()),
            _ => format!("a longer value number {:x}", rng.random::<u64>()),
        })
    }));
    let position = Int64Array::from_iter_values(0..rows as i64);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Int64, false),
        Field::new("f", DataType::Float64, true),
        Field::new("d", DataType::Decimal128(12, 2), true),
        Field::new("s", DataType::Utf8, true),
        Field::new("position", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(k),
        Arc::new(v),
        Arc::new(f),
        Arc::new(d),
        Arc::new(s),
        Arc::new(position),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
    let path = dir.join("in.parquet");
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
    // Row groups of 100 000 rows: the scan reads them in batches the sort buffers.
    for at in (0..rows).step_by(100_000) {
        writer
            .write(&batch.slice(at, 100_000.min(rows - at)))
            .unwrap();
        writer.flush().unwrap();
    }
    writer.close().unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn an_input_held_on_the_device_writes_what_memory_writes() {
    let Some(_runtime) = device() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rows = 3_000_000;
    let input = held_input(dir.path(), rows);
    let mut outputs = Vec::new();
    for (name, limit) in [("memory", None), ("held", Some(256usize << 20))] {
        let output = dir.path().join(format!("{name}.parquet"));
        let mut job = SortJob::new(vec![input.display().to_string()], &output, "k DESC");
        job.backend = gpusort::BackendChoice::Cuda;
        job.page_encoding = PageEncoding::Device;
        job.resident_pages = KeepOnDevice::All;
        job.devices = DeviceSelection::First(1);
        job.compression = "snappy".into();
        job.row_group_rows = 400_000;
        // A pool of 128 MiB (half the limit) for about 170 MB of decoded rows, whose key
        // column and working memory take 39 MB.
        job.memory_limit = limit;
        let summary = sort_files(&job, &Progress::new()).await.unwrap();
        eprintln!("{name}: {summary}");
        assert_eq!(summary.backend, "cuda", "{summary}");
        if limit.is_some() {
            assert!(
                summary.algorithm.contains("input held on the device"),
                "{summary}"
            );
            assert!(!summary.algorithm.contains("spill"), "{summary}");
            assert!(!summary.algorithm.contains("key ranges"), "{summary}");
        }
        outputs.push(output);
    }
    let (memory, held) = (read_parquet(&outputs[0]), read_parquet(&outputs[1]));
    assert_eq!(memory.num_rows(), rows);
    assert_eq!(memory, held);
    let meta = |path: &std::path::Path| {
        SerializedFileReader::new(std::fs::File::open(path).unwrap())
            .unwrap()
            .metadata()
            .clone()
    };
    let (a, b) = (meta(&outputs[0]), meta(&outputs[1]));
    assert_eq!(a.num_row_groups(), b.num_row_groups());
    for g in 0..a.num_row_groups() {
        for c in 0..a.row_group(g).num_columns() {
            let (x, y) = (a.row_group(g).column(c), b.row_group(g).column(c));
            assert_eq!(x.statistics(), y.statistics(), "row group {g} column {c}");
        }
    }
}
