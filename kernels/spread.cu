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
