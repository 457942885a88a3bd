// spread.cu: one sort spread over several devices by key ranges (launched by
// src/cuda/spread/kernels.rs).
//
// Each device holds a contiguous slice of the rows, their packed key words (word 0 most
// significant) in device memory. A row's place in the whole order is (its key words, its
// global row id): equal keys are ordered by row id, which is what a stable sort gives.
//
//   spread_sample      evenly spaced rows of the slice: their words and global row ids
//   spread_classify    the key range of each row (the splitters at or below it), and the
//                      rows per range
//   spread_row_ids     global row ids of the slice in a given local order
//   spread_gather_u32  out[i] = src[order[i]]
//   spread_count, spread_scatter   the fused partition (below)
#include "common.cuh"

// Threads per block: a -D option from src/cuda/tuning.rs.
#if !defined(SPREAD_THREADS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

// Key words a spread sort compares, and splitters (devices - 1) it takes; the launcher
// checks both (src/cuda/spread/kernels.rs).
#define SPREAD_MAX_WORDS 8
#define SPREAD_MAX_SPLITTERS 63

// The key words of a slice, passed by value.
struct Words {
    const u64* word[SPREAD_MAX_WORDS];
};

// Samples `count` rows, row (i * n) / count for sample i: word w of sample i at
// out_words[w * count + i], its global row id (first_row + row) at out_rows[i].
extern "C" __global__ void __launch_bounds__(SPREAD_THREADS)
    spread_sample(Words words, u32 word_count, u32 n, u32 first_row, u32 count,
                  u64* __restrict__ out_words, u32* __restrict__ out_rows) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const u32 row = (u32)(((u64)i * n) / count);
    for (u32 w = 0; w < word_count; ++w) out_words[(u64)w * count + i] = words.word[w][row];
    out_rows[i] = first_row + row;
}

// Whether splitter `s` (words at splitter_words[s * word_count ..], row id splitter_rows[s])
// is at or below row `row` of the slice (global id `global_row`).
__device__ __forceinline__ bool splitter_at_or_below(const Words& words, u32 word_count, u32 row,
                                                     u32 global_row, const u64* splitter_words,
                                                     const u32* splitter_rows, u32 s) {
    for (u32 w = 0; w < word_count; ++w) {
        const u64 key = words.word[w][row];
        const u64 split = splitter_words[(u64)s * word_count + w];
        if (split != key) return split < key;
    }
    return splitter_rows[s] <= global_row;
}

// ranges[i] = how many of the (sorted) splitters are at or below row i; counts[r] += the
// rows of range r (counts has splitters + 1 entries, zeroed by the launcher).
extern "C" __global__ void __launch_bounds__(SPREAD_THREADS)
    spread_classify(Words words, u32 word_count, u32 n, u32 first_row,
                    const u64* __restrict__ splitter_words, const u32* __restrict__ splitter_rows,
                    u32 splitters, u32* __restrict__ ranges, u32* __restrict__ counts) {
    __shared__ u32 local[SPREAD_MAX_SPLITTERS + 1];
    for (u32 r = threadIdx.x; r <= splitters; r += blockDim.x) local[r] = 0;
    __syncthreads();
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        u32 lo = 0, hi = splitters;
        while (lo < hi) {
            const u32 mid = (lo + hi) / 2;
            if (splitter_at_or_below(words, word_count, i, first_row + i, splitter_words,
                                     splitter_rows, mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        ranges[i] = lo;
        atomicAdd(&local[lo], 1u);
    }
    __syncthreads();
    for (u32 r = threadIdx.x; r <= splitters; r += blockDim.x) {
        if (local[r] != 0) atomicAdd(&counts[r], local[r]);
    }
}

// out[i] = first_row + order[i], or first_row + i without an order (null).
extern "C" __global__ void __launch_bounds__(SPREAD_THREADS)
    spread_row_ids(const u32* __restrict__ order, u32 first_row, u32 n, u32* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = first_row + (order != nullptr ? order[i] : i);
    }
}

extern "C" __global__ void __launch_bounds__(SPREAD_THREADS)
    spread_gather_u32(const u32* __restrict__ src, const u32* __restrict__ order, u32 n,
                      u32* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = src[order[i]];
}

// ---- The fused partition: a tile's rows classified, then scattered by range ------------
//
// spread_count     the range of each row (u8) and the rows of each range per tile of
//                  SPREAD_TILE rows
// spread_scatter   each row's key words and global row id written at its place: its
//                  range's target, from the tile's offset there (the launcher's prefix
//                  sums over tiles), ranked stably within the tile. A target may be
//                  another device's memory (peer access): the exchange happens here.

#if !defined(SPREAD_TILE)
#error "the tile size comes from src/cuda/tuning.rs as a -D option"
#endif
#define SPREAD_ITEMS (SPREAD_TILE / SPREAD_THREADS)
// Ranges the fused partition takes (the launcher checks it).
#define SPREAD_FUSED_RANGES 8

// The range of row `row` (global id `global_row`) against the sorted splitters.
__device__ __forceinline__ u32 range_of(const Words& words, u32 word_count, u32 row,
                                        u32 global_row, const u64* splitter_words,
                                        const u32* splitter_rows, u32 splitters) {
    u32 lo = 0, hi = splitters;
    while (lo < hi) {
        const u32 mid = (lo + hi) / 2;
        if (splitter_at_or_below(words, word_count, row, global_row, splitter_words,
                                 splitter_rows, mid)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

extern "C" __global__ void __launch_bounds__(SPREAD_THREADS)
    spread_count(Words words, u32 word_count, u32 n, u32 first_row,
                 const u64* __restrict__ splitter_words, const u32* __restrict__ splitter_rows,
                 u32 splitters, u8* __restrict__ ranges, u32* __restrict__ tile_counts) {
    __shared__ u32 local[SPREAD_FUSED_RANGES];
    const u32 count = splitters + 1;
    if (threadIdx.x < count) local[threadIdx.x] = 0;
    __syncthreads();
    const u64 start = (u64)blockIdx.x * SPREAD_TILE;
    for (u32 j = threadIdx.x; j < SPREAD_TILE; j += SPREAD_THREADS) {
        const u64 i = start + j;
        if (i >= n) break;
        const u32 r = range_of(words, word_count, (u32)i, first_row + (u32)i, splitter_words,
                               splitter_rows, splitters);
        ranges[i] = (u8)r;
        atomicAdd(&local[r], 1u);
    }
    __syncthreads();
    if (threadIdx.x < count) tile_counts[(u64)blockIdx.x * count + threadIdx.x] = local[threadIdx.x];
}

// Where each range's rows go: key words (most significant first) and global row ids.
struct Targets {
    u64* word[SPREAD_FUSED_RANGES][SPREAD_MAX_WORDS];
    u32* ids[SPREAD_FUSED_RANGES];
};

// The exclusive sum of `value` over the block's threads (every thread calls it).
__device__ __forceinline__ u32 block_exclusive_sum(u32 value, u32* warp_sums) {
    const u32 lane = lane_id(), warp = warp_id();
    u32 inclusive = value;
    for (u32 d = 1; d < WARP; d <<= 1) {
        const u32 up = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += up;
    }
    if (lane == WARP - 1) warp_sums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        const u32 warps = SPREAD_THREADS / WARP;
        u32 total = lane < warps ? warp_sums[lane] : 0;
        for (u32 d = 1; d < WARP; d <<= 1) {
            const u32 up = __shfl_up_sync(0xffffffffu, total, d);
            if (lane >= d) total += up;
        }
        if (lane < warps) warp_sums[lane] = total;
    }
    __syncthreads();
    const u32 before = warp == 0 ? 0 : warp_sums[warp - 1];
    const u32 result = before + inclusive - value;
    __syncthreads();
    return result;
}

extern "C" __global__ void __launch_bounds__(SPREAD_THREADS)
    spread_scatter(Words words, u32 word_count, u32 n, u32 first_row,
                   const u8* __restrict__ ranges, const u32* __restrict__ tile_offsets,
                   u32 count, Targets targets) {
    __shared__ u32 warp_sums[SPREAD_THREADS / WARP];
    const u64 start = (u64)blockIdx.x * SPREAD_TILE + (u64)threadIdx.x * SPREAD_ITEMS;
    u32 mine[SPREAD_FUSED_RANGES];
#pragma unroll
    for (u32 r = 0; r < SPREAD_FUSED_RANGES; ++r) mine[r] = 0;
    for (u32 k = 0; k < SPREAD_ITEMS; ++k) {
        const u64 i = start + k;
        if (i < n) {
            const u32 of = ranges[i];
#pragma unroll
            for (u32 r = 0; r < SPREAD_FUSED_RANGES; ++r) mine[r] += (of == r) ? 1u : 0u;
        }
    }
    u32 place[SPREAD_FUSED_RANGES];
#pragma unroll
    for (u32 r = 0; r < SPREAD_FUSED_RANGES; ++r) {
        if (r < count) {
            const u32 before = block_exclusive_sum(mine[r], warp_sums);
            place[r] = tile_offsets[(u64)blockIdx.x * count + r] + before;
        }
    }
    for (u32 k = 0; k < SPREAD_ITEMS; ++k) {
        const u64 i = start + k;
        if (i >= n) break;
        const u32 of = ranges[i];
        u32 at = 0;
#pragma unroll
        for (u32 r = 0; r < SPREAD_FUSED_RANGES; ++r) {
            if (of == r) at = place[r]++;
        }
        for (u32 w = 0; w < word_count; ++w) targets.word[of][w][at] = words.word[w][i];
        targets.ids[of][at] = first_row + (u32)i;
    }
}
