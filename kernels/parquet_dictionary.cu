// parquet_dictionary.cu: the dictionary of one fixed-width column chunk, built on the device
// for its RLE_DICTIONARY pages (launched by src/cuda/parquet_dictionary.rs). A value is the
// Parquet value: the low `out_width` bytes (4 or 8) of each `in_width`-byte Arrow value.
//
//   dict_insert    one thread per row: the value into an open-addressing table of row ids
//                  (linear probing; a slot holds 1 + the first row of its value, kept the
//                  smallest by atomicMin); `status[0]` counts entries, `status[1]` is set
//                  once they pass `max_entries` or a probe passes DICT_PROBES slots (the
//                  writer then gives the dictionary up, as parquet's does past its page
//                  limit), and every thread stops
//   dict_first     one thread per row: its value's slot (into `work`), and 1 in `rank`
//                  where the row is its value's first
//   dict_count     one block per tile of DICT_TILE rows: the tile's first rows
//   dict_scan      one block: the tiles' counts to exclusive offsets
//   dict_entries   one block per tile: each first row's entry number (in `rank`), in order
//                  of first appearance, as parquet's writer numbers them, and its value at
//                  that place of the dictionary page's body
//   dict_ids       one thread per row: its value's entry number (into `work`, over its slot)
#include "common.cuh"

#if !defined(DICT_THREADS) || !defined(DICT_ITEMS) || !defined(DICT_PROBES)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

#define DICT_TILE (DICT_THREADS * DICT_ITEMS)

// Row `row`'s Parquet value, zero-extended.
__device__ __forceinline__ u64 dict_value(const u8* values, u32 in_width, u32 out_width, u64 row) {
    const u8* src = values + row * in_width;
    return out_width == 8 ? *(const u64*)src : (u64)*(const u32*)src;
}

__device__ __forceinline__ bool dict_valid(const u8* validity, u64 row) {
    return validity == 0 || ((validity[row >> 3] >> (row & 7)) & 1);
}

// A 64-bit mix (the finalizer of MurmurHash3), so that sorted or strided values spread.
__device__ __forceinline__ u32 dict_hash(u64 v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    v *= 0xc4ceb9fe1a85ec53ull;
    v ^= v >> 33;
    return (u32)v;
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_insert(const u8* __restrict__ values, const u8* __restrict__ validity, u32 in_width,
                u32 out_width, u32 rows, u32* __restrict__ table, u32 mask, u32 max_entries,
                u32* __restrict__ status) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += stride) {
        if (!dict_valid(validity, row)) continue;
        if (*(volatile u32*)&status[1]) return;
        const u64 v = dict_value(values, in_width, out_width, row);
        u32 slot = dict_hash(v) & mask;
        for (u32 probe = 0;; ++probe) {
            // A table at most half full seldom probes far: a long probe, like a table
            // filling past its entries, gives the dictionary up.
            if (probe == DICT_PROBES || *(volatile u32*)&status[1]) {
                atomicExch(&status[1], 1u);
                return;
            }
            u32 held = *(volatile u32*)&table[slot];
            if (held == 0) {
                held = atomicCAS(&table[slot], 0u, row + 1);
                if (held == 0) {
                    if (atomicAdd(&status[0], 1u) + 1 > max_entries) atomicExch(&status[1], 1u);
                    break;
                }
            }
            if (dict_value(values, in_width, out_width, held - 1) == v) {
                // Most rows come after their value's first: no atomic for them.
                if (row + 1 < held) atomicMin(&table[slot], row + 1);
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_first(const u8* __restrict__ values, const u8* __restrict__ validity, u32 in_width,
               u32 out_width, u32 rows, const u32* __restrict__ table, u32 mask,
               u32* __restrict__ work, u32* __restrict__ rank) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += stride) {
        if (!dict_valid(validity, row)) {
            rank[row] = 0;
            continue;
        }
        const u64 v = dict_value(values, in_width, out_width, row);
        u32 slot = dict_hash(v) & mask;
        u32 held = table[slot];
        // Every value is in the table (the insert did not overflow): the probe ends.
        while (dict_value(values, in_width, out_width, held - 1) != v) {
            slot = (slot + 1) & mask;
            held = table[slot];
        }
        work[row] = slot;
        rank[row] = held == row + 1 ? 1 : 0;
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_count(const u32* __restrict__ rank, u32 rows, u32* __restrict__ tile_counts) {
    const u32 first = blockIdx.x * DICT_TILE;
    u32 count = 0;
    for (u32 i = 0; i < DICT_ITEMS; ++i) {
        const u32 row = first + i * DICT_THREADS + threadIdx.x;
        count += __syncthreads_count(row < rows && rank[row] != 0);
    }
    if (threadIdx.x == 0) tile_counts[blockIdx.x] = count;
}

// Few tiles (one per DICT_TILE rows): one thread adds them up in order.
extern "C" __global__ void dict_scan(u32* __restrict__ tile_counts, u32 tiles) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    u32 sum = 0;
    for (u32 t = 0; t < tiles; ++t) {
        const u32 count = tile_counts[t];
        tile_counts[t] = sum;
        sum += count;
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_entries(const u8* __restrict__ values, u32 in_width, u32 out_width, u32 rows,
                 const u32* __restrict__ tile_offsets, u32* __restrict__ rank,
                 u8* __restrict__ dictionary) {
    __shared__ u32 warp_counts[DICT_THREADS / WARP];
    const u32 first = blockIdx.x * DICT_TILE;
    u32 base = tile_offsets[blockIdx.x];
    for (u32 i = 0; i < DICT_ITEMS; ++i) {
        const u32 row = first + i * DICT_THREADS + threadIdx.x;
        const bool is_first = row < rows && rank[row] != 0;
        u32 total;
        const u32 before = block_rank(is_first, warp_counts, total);
        if (is_first) {
            const u32 entry = base + before;
            rank[row] = entry;
            const u64 v = dict_value(values, in_width, out_width, row);
            u8* out = dictionary + (u64)entry * out_width;
            for (u32 b = 0; b < out_width; ++b) out[b] = (u8)(v >> (8 * b));
        }
        base += total;
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_ids(const u8* __restrict__ validity, u32 rows, const u32* __restrict__ table,
             const u32* __restrict__ rank, u32* __restrict__ work) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < rows; row += stride) {
        if (!dict_valid(validity, row)) continue;
        work[row] = rank[table[work[row]] - 1];
    }
}
