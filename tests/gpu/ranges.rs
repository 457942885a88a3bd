//! `gpusort sort` of an input larger than its memory, by key range on the device: the same
//! file content as the operator's own spilling and merging (ties in input order: the key
//! has few values).

use super::*;

use datafusion::arrow::array::Int32Array;
use datafusion::parquet::arrow::ArrowWriter;
use gpusort::pipeline::{sort_files, KeyRangeChoice, Progress, SortJob};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU"]
async fn key_ranges_on_the_device_write_what_the_merge_writes() {
    let Some(_runtime) = device() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rng("ranges-on-device");
    let rows = 4_000_000;
    // A key of 5 000 values (ties everywhere), and the input position.
    let k =
        Int32Array::from_iter((0..rows).map(|i| (i % 13 != 0).then(|| rng.random_range(0..5_000))));
    let v = Int64Array::from_iter_values((0..rows).map(|_| rng.random::<i64>()));
    let position = Int64Array::from_iter_values(0..rows as i64);
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Int64, false),
        Field::new("position", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![Arc::new(k), Arc::new(v), Arc::new(position)];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
    let input = dir.path().join("in.parquet");
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(&input).unwrap(), schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let mut outputs = Vec::new();
    for (name, ranges) in [
        ("merge", KeyRangeChoice::Off),
        ("ranges", KeyRangeChoice::Auto),
    ] {
        let output = dir.path().join(format!("{name}.parquet"));
        let mut job = SortJob::new(vec![input.display().to_string()], &output, "k DESC");
        job.backend = gpusort::BackendChoice::Cuda;
        // A pool of 128 MiB (half the limit) for 80 MB of rows: by key range.
        job.memory_limit = Some(256 << 20);
        job.key_ranges = ranges;
        let summary = sort_files(&job, &Progress::new()).await.unwrap();
        eprintln!("{name}: {summary}");
        assert_eq!(summary.backend, "cuda", "{summary}");
        if ranges == KeyRangeChoice::Auto {
            assert!(summary.algorithm.contains("key ranges"), "{summary}");
        }
        outputs.push(output);
    }
    let (merged, ranged) = (read_parquet(&outputs[0]), read_parquet(&outputs[1]));
    assert_eq!(merged.num_rows(), rows);
    assert_eq!(merged, ranged);
}
