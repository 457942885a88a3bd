//! Segmented sorts: the segmented merge sort, segment starts, standard and large segment
//! tiles, and segments of device-encoded columns.

use super::*;

/// Segment starts of `n` rows with lengths drawn as `lengths` says.
pub(super) fn segments_of(
    n: usize,
    label: &str,
    lengths: common::strategies::Lengths,
) -> gpusort::sort::Segments {
    let mut rng = rng(label);
    let mut starts = Vec::new();
    let mut at = 0;
    for len in common::strategies::segment_lengths(&mut rng, n, lengths) {
        starts.push(at as u32);
        at += len;
    }
    gpusort::sort::Segments::new(starts, n)
}

gpu_test!(segmented_sort_equals_the_cpu_segmented_sort, |rt| {
    use common::strategies::Lengths;
    let _ = rt;
    let backend = CudaBackend::new().unwrap();
    let shapes = [
        Lengths::Fixed(1),
        Lengths::Short,
        Lengths::Fixed(100),
        Lengths::Fixed(113),
        Lengths::Fixed(1000),
        Lengths::Fixed(5000),
        // Segments over up to 9 tiles: radii near the placement pass's limit.
        Lengths::Fixed(15_000),
        Lengths::Fixed(100_000),
        Lengths::One,
        Lengths::PowerLaw,
    ];
    for n in merge_sizes() {
        for lengths in shapes {
            for (bits, words) in [(24u32, 1usize), (64, 1), (64, 2)] {
                let label = format!("segmented n={n} {lengths:?} bits={bits} words={words}");
                if n == 0 {
                    continue;
                }
                let segments = segments_of(n, &label, lengths);
                let mut keys = one_word(shaped_word(n, &label, bits, "random", 0), bits);
                if words == 2 {
                    keys.words
                        .push(random_keys(n, &format!("{label}b"), |x| x & 0xff00));
                    keys.total_bits = 128;
                }
                let expected = gpusort::sort::segmented_sort(&keys.words, &segments);
                for algorithm in [AlgorithmChoice::Auto, AlgorithmChoice::Onesweep] {
                    let run = backend.sort(&keys, algorithm, Some(&segments)).unwrap();
                    assert!(!run.fell_back, "{label}: fell back");
                    assert!(
                        run.permutation == expected,
                        "{label} {algorithm:?}: order differs"
                    );
                    assert_eq!(
                        run.algorithm,
                        gpusort::sort::Algorithm::Segmented,
                        "{label}"
                    );
                }
            }
        }
    }
});

/// Top-aligned one-word keys on the device as merge keys: their top 32 bits as u32 keys when
/// `bits` ≤ 32, else the u64 words.
pub(super) fn upload_merge_keys(
    device: &cuda::Device,
    staging: &mut cuda::Staging,
    word: &[u64],
    bits: u32,
) -> cuda::CudaResult<cuda::MergeKeys> {
    let n = word.len();
    Ok(if bits <= 32 {
        let narrow: Vec<u32> = word.iter().map(|&k| (k >> 32) as u32).collect();
        cuda::MergeKeys::U32(staging.upload::<u32, _>(device, n, "test keys", |at, out| {
            out.copy_from_slice(&narrow[at..at + out.len()])
        })?)
    } else {
        cuda::MergeKeys::U64(staging.upload::<u64, _>(device, n, "test keys", |at, out| {
            out.copy_from_slice(&word[at..at + out.len()])
        })?)
    })
}

/// Runs the segment-tile sort with `tile` directly on u32 and u64 keys (few distinct
/// values: many ties, so stability is checked too) for every size and segment shape, and
/// compares with the CPU segmented sort. Segments longer than the tile (power-law lengths)
/// are split first.
pub(super) fn check_segment_tiles(
    rt: &cuda::CudaRuntime,
    tile: cuda::SegmentTile,
    sizes: &[usize],
    shapes: &[common::strategies::Lengths],
) {
    let tile_rows = rt.segmented.tiles.tile_rows(tile);
    for &n in sizes {
        for &lengths in shapes {
            let label = format!("segment tiles {tile:?} n={n} {lengths:?}");
            let mut segments = segments_of(n, &label, lengths);
            if segments.longest_rows() > tile_rows {
                let starts = segments
                    .ranges()
                    .flat_map(|r| r.step_by(tile_rows).map(|s| s as u32))
                    .collect();
                segments = gpusort::sort::Segments::new(starts, n);
            }
            for bits in [20u32, 64] {
                let label = format!("{label} bits={bits}");
                let word: Vec<u64> = shaped_word(n, &label, bits, "random", 0)
                    .into_iter()
                    .map(|k| k & (0xfu64 << 60 | 0xff << (64 - bits)))
                    .collect();
                let expected =
                    gpusort::sort::segmented_sort(std::slice::from_ref(&word), &segments);
                let got = rt
                    .with_device(|device, staging| {
                        let keys = upload_merge_keys(device, staging, &word, bits)?;
                        let ids = rt
                            .segmented
                            .sort_segment_tiles(device, staging, &keys, &segments, n, tile)?;
                        download(device, staging, Some(ids), n)
                    })
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                assert!(got == expected, "{label}: order differs");
            }
        }
    }
}

// Segment starts sent as u8 / u16 lengths (or as they are) and rebuilt on the device: segment
// counts around the rebuild's chunk, lengths at each encoding's limit, random lengths.
gpu_test!(segment_starts_rebuilt_from_lengths, |rt| {
    use cuda::{StartsEncoding, SEGMENT_STARTS_CHUNK as CHUNK};
    let mut rng = rng("segment starts");
    for longest in [1usize, 2, 255, 256, 257, 65_535, 65_536, 65_537] {
        for count in [
            1,
            2,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            2 * CHUNK + 1,
            5 * CHUNK + 17,
        ] {
            // Random lengths, the longest one somewhere; at most 2^26 rows in all.
            let longest = longest.min((1usize << 26) / count);
            let label = format!("segment starts: {count} segments of up to {longest} rows");
            let mut lengths: Vec<usize> =
                (0..count).map(|_| rng.random_range(1..=longest)).collect();
            lengths[rng.random_range(0..count)] = longest;
            let mut starts = Vec::with_capacity(count);
            let mut rows = 0usize;
            for length in &lengths {
                starts.push(rows as u32);
                rows += length;
            }
            let segments = gpusort::sort::Segments::new(starts, rows);
            assert_eq!(segments.longest_rows(), longest, "{label}");
            let got = rt
                .with_device(|device, staging| {
                    let on_device = rt.segmented.starts.upload(device, staging, &segments)?;
                    download(device, staging, Some(on_device), count)
                })
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(
                got == segments.starts(),
                "{label} ({:?}): starts differ",
                StartsEncoding::for_longest(longest)
            );
        }
    }
});

// The standard segment tile: segment lengths up to a whole tile (stride 1), around the rank
// kernel's limit of 32, mixed lengths, sizes around the tile.
gpu_test!(segment_tiles_sort_segments_up_to_a_tile, |rt| {
    use common::strategies::Lengths;
    let tile = cuda::MERGE_TILE as usize;
    check_segment_tiles(
        rt,
        cuda::SegmentTile::Standard,
        &[
            1,
            2,
            17,
            tile - 1,
            tile,
            tile + 1,
            2 * tile + 1,
            100_003,
            1 << 20,
        ],
        &[
            Lengths::Short,
            Lengths::Fixed(1),
            Lengths::Fixed(3),
            Lengths::Fixed(32),
            Lengths::Fixed(33),
            Lengths::Fixed(113),
            Lengths::Fixed(tile / 2 + 1),
            Lengths::Fixed(tile - 1),
            Lengths::Fixed(tile),
            Lengths::PowerLaw,
        ],
    );
});

// The large segment tile: segments from just over a standard tile to a whole large tile
// (stride 1), short ones mixed in, sizes around the large tile; and which tile `auto` picks.
gpu_test!(large_segment_tiles_sort_segments_up_to_a_tile, |rt| {
    use common::strategies::Lengths;
    let tile = rt.segmented.tiles.tile_rows(cuda::SegmentTile::Large);
    let standard = cuda::MERGE_TILE as usize;
    check_segment_tiles(
        rt,
        cuda::SegmentTile::Large,
        &[
            1,
            17,
            tile - 1,
            tile,
            tile + 1,
            2 * tile + 1,
            100_003,
            1 << 20,
        ],
        &[
            Lengths::Short,
            Lengths::Fixed(standard + 1),
            Lengths::Fixed(5000),
            Lengths::Fixed(10_000),
            Lengths::Fixed(tile - 1),
            Lengths::Fixed(tile),
            Lengths::PowerLaw,
        ],
    );
    let n = 1 << 20;
    let fixed = |len: usize| {
        let starts = (0..n).step_by(len).map(|s| s as u32).collect();
        gpusort::sort::Segments::new(starts, n)
    };
    let pick = |segments: &gpusort::sort::Segments| rt.segmented.tiles.tile_for(8, segments);
    assert_eq!(pick(&fixed(100)), Some(cuda::SegmentTile::Standard));
    // Longer than a standard tile, most of a large one (10 000 of 12 288 rows by default).
    assert_eq!(pick(&fixed(tile * 4 / 5)), Some(cuda::SegmentTile::Large));
    assert_eq!(pick(&fixed(tile + 1)), None);
    // Short segments and one as long as the tile: windows of one row would hold a few
    // short segments each, a tile sorted for a handful of rows.
    let mut starts: Vec<u32> = (0..n - tile).step_by(10).map(|s| s as u32).collect();
    starts.push((n - tile) as u32);
    assert_eq!(pick(&gpusort::sort::Segments::new(starts, n)), None);
});

gpu_test!(segmented_sort_of_device_encoded_columns, |rt| {
    let _ = rt;
    let backend = CudaBackend::new().unwrap();
    let mut rng = rng("segmented columns");
    let n = (1 << 20) + 333;
    for (dt, lengths) in [
        (DataType::Int32, common::strategies::Lengths::Short),
        (DataType::Int64, common::strategies::Lengths::Fixed(700)),
        (
            DataType::Float64,
            common::strategies::Lengths::Fixed(50_000),
        ),
    ] {
        let label = format!("segmented columns {dt}");
        let column = key_column(
            &mut rng,
            &dt,
            n,
            common::data::Distribution::Uniform,
            0.1,
            SortOptions::default(),
        );
        let segments = segments_of(n, &label, lengths);
        let columns = std::slice::from_ref(&column);
        let expected = CpuBackend
            .sort(
                &encode_keys(columns).unwrap(),
                AlgorithmChoice::Auto,
                Some(&segments),
            )
            .unwrap();
        let run = backend
            .sort_key_columns(columns, AlgorithmChoice::Auto, Some(&segments))
            .unwrap()
            .unwrap_or_else(|| panic!("{label}: not on the device"));
        assert!(
            run.permutation == expected.permutation,
            "{label}: order differs"
        );
    }
});
