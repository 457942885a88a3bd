// segmented_sort.cu: stable sort within known segments (launched by src/cuda/merge.rs).
//
// Segments are runs of rows that already sort before every later run (rows with equal
// values of the sort keys that the input is ordered by); only rows within one segment
// change places.
//
//   segment_ids            per row: the index of its segment, from the segments' first rows
//   segmented_block_sort / _find_dirty / _merge_tiles / _copy_back
//                          the merge passes of merge.cuh over (segment, u64 key, row id):
//                          a tile's segments are sorted by the block sort; a merge pass
//                          merges only the segment that straddles each merge interface,
//                          and ends the sort as soon as every run boundary is in order
//   merge_scan_tiles       the work queue of a merge pass
//   segment_key_u32        (segment << 32 | key) for u32 keys: then the locality kernels
//                          (or OneSweep, for long segments) sort one u64 word
//   segment_word           the segment index as a u64 key word, put in front of multi-word
//                          keys for a composite OneSweep sort
#include "merge.cuh"

MERGE_ENTRY_POINTS(segmented, u64, true)
MERGE_SCAN_ENTRY_POINT

// Block b numbers rows [b * MERGE_TILE, (b + 1) * MERGE_TILE): at most MERGE_TILE segments
// start there, so the starts from the segment of its first row on fit in shared memory.
extern "C" __global__ void __launch_bounds__(MERGE_THREADS)
    segment_ids(const u32* __restrict__ starts, u32 segments, u32 n, u32* __restrict__ out) {
    __shared__ u32 s_starts[MERGE_TILE + 1];
    __shared__ u32 s_first;
    const u32 row0 = blockIdx.x * MERGE_TILE;
    if (threadIdx.x == 0) {
        u32 lo = 0, hi = segments;  // the last segment whose first row is <= row0
        while (lo < hi) {
            const u32 m = (lo + hi) >> 1;
            if (starts[m] <= row0) lo = m + 1;
            else hi = m;
        }
        s_first = lo - 1;
    }
    __syncthreads();
    const u32 first = s_first;
    const u32 len = min(segments - first, (u32)MERGE_TILE + 1);
    for (u32 i = threadIdx.x; i < len; i += MERGE_THREADS) s_starts[i] = starts[first + i];
    __syncthreads();
    for (u32 i = threadIdx.x; i < MERGE_TILE && row0 + i < n; i += MERGE_THREADS) {
        const u32 row = row0 + i;
        u32 lo = 0, hi = len;
        while (lo < hi) {
            const u32 m = (lo + hi) >> 1;
            if (s_starts[m] <= row) lo = m + 1;
            else hi = m;
        }
        out[row] = first + lo - 1;
    }
}

extern "C" __global__ void segment_key_u32(const u32* __restrict__ segs, const u32* __restrict__ keys,
                                           u32 n, u64* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = ((u64)segs[i] << 32) | keys[i];
    }
}

extern "C" __global__ void segment_word(const u32* __restrict__ segs, u32 n, u64* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = segs[i];
}
