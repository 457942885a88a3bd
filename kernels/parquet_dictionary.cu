// parquet_dictionary.cu: the dictionary of one column chunk, built on the device for its
// RLE_DICTIONARY pages (launched by src/cuda/parquet_dictionary.rs). A value is the Parquet
// value: the low `out_width` bytes (4 or 8) of each `in_width`-byte Arrow value, or a byte
// array (its bytes between two offsets).
//
//   dict_insert    one thread per row: the value into an open-addressing table of row ids
//                  (linear probing; a slot holds 1 + the first row of its value, kept the
//                  smallest by atomicMin); `status` counts entries and the bytes of the
//                  dictionary page they make (`out_width`, or a byte array's 4-byte length
//                  and bytes, each), and is marked once those pass `max_bytes` or a probe
//                  passes DICT_PROBES slots (the writer then gives the dictionary up, as
//                  parquet's does past its page limit), and every thread stops
//   dict_first     one thread per row: its value's slot (into `work`), and 1 in `rank`
//                  where the row is its value's first
//   dict_count     one block per tile of DICT_TILE rows: the tile's first rows, and the
//                  bytes of their values in the dictionary page
//   dict_scan      one thread: the tiles' counts and bytes to exclusive offsets
//   dict_entries   one block per tile: each first row's entry number (in `rank`), in order
//                  of first appearance, as parquet's writer numbers them, and its value at
//                  its place of the dictionary page's body (PLAIN)
//   dict_ids       one thread per row: its value's entry number (into `work`, over its slot)
#include "common.cuh"

#if !defined(DICT_THREADS) || !defined(DICT_ITEMS) || !defined(DICT_PROBES)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

#define DICT_TILE (DICT_THREADS * DICT_ITEMS)

// The column of a dictionary, as src/cuda/parquet_dictionary.rs lays it out.
struct DictColumn {
    u64 values;   // fixed width: `in_width` bytes a row; byte arrays: their bytes end to end
    u64 offsets;  // byte arrays: u32 offsets (row i from offsets[i] - offsets[0]); 0: fixed width
    u64 validity; // validity bitmap, row 0 at bit 0; 0: no nulls
    u32 in_width;
    u32 out_width;
    u32 rows;
    u32 unused;
};

// Where the dictionary of a column stands, as the host reads it back.
struct DictStatus {
    u32 entries;  // distinct values inserted
    u32 overflow; // set once the dictionary is given up
    u64 bytes;    // bytes of the dictionary page's body
};

// Row `row`'s fixed-width Parquet value, zero-extended.
__device__ __forceinline__ u64 dict_value(const DictColumn& c, u64 row) {
    const u8* src = (const u8*)c.values + row * c.in_width;
    return c.out_width == 8 ? *(const u64*)src : (u64)*(const u32*)src;
}

// Row `row`'s byte array: its first byte and its length.
__device__ __forceinline__ const u8* dict_bytes(const DictColumn& c, u32 row, u32& len) {
    const u32* offsets = (const u32*)c.offsets;
    len = offsets[row + 1] - offsets[row];
    return (const u8*)c.values + (offsets[row] - offsets[0]);
}

__device__ __forceinline__ bool dict_valid(const DictColumn& c, u64 row) {
    const u8* validity = (const u8*)c.validity;
    return validity == 0 || ((validity[row >> 3] >> (row & 7)) & 1);
}

// A 64-bit mix (the finalizer of MurmurHash3), so that sorted or strided values spread.
__device__ __forceinline__ u32 dict_mix(u64 v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    v *= 0xc4ceb9fe1a85ec53ull;
    v ^= v >> 33;
    return (u32)v;
}

// The hash of row `row`'s value: its bits mixed, or a byte array's FNV-1a mixed.
__device__ __forceinline__ u32 dict_hash(const DictColumn& c, u32 row) {
    if (c.offsets == 0) return dict_mix(dict_value(c, row));
    u32 len;
    const u8* bytes = dict_bytes(c, row, len);
    u64 h = 0xcbf29ce484222325ull ^ len;
    for (u32 i = 0; i < len; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
    return dict_mix(h);
}

// Whether rows `a` and `b` hold the same value.
__device__ __forceinline__ bool dict_same(const DictColumn& c, u32 a, u32 b) {
    if (c.offsets == 0) return dict_value(c, a) == dict_value(c, b);
    u32 len_a, len_b;
    const u8* x = dict_bytes(c, a, len_a);
    const u8* y = dict_bytes(c, b, len_b);
    if (len_a != len_b) return false;
    for (u32 i = 0; i < len_a; ++i) {
        if (x[i] != y[i]) return false;
    }
    return true;
}

// Bytes of row `row`'s value in the dictionary page (PLAIN).
__device__ __forceinline__ u32 dict_entry_bytes(const DictColumn& c, u32 row) {
    if (c.offsets == 0) return c.out_width;
    const u32* offsets = (const u32*)c.offsets;
    return 4 + offsets[row + 1] - offsets[row];
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_insert(const DictColumn c, u32* __restrict__ table, u32 mask, u64 max_bytes,
                DictStatus* __restrict__ status) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < c.rows; row += stride) {
        if (!dict_valid(c, row)) continue;
        if (*(volatile u32*)&status->overflow) return;
        u32 slot = dict_hash(c, row) & mask;
        for (u32 probe = 0;; ++probe) {
            // A table at most half full seldom probes far: a long probe, like a table
            // filling past its entries, gives the dictionary up.
            if (probe == DICT_PROBES || *(volatile u32*)&status->overflow) {
                atomicExch(&status->overflow, 1u);
                return;
            }
            u32 held = *(volatile u32*)&table[slot];
            if (held == 0) {
                held = atomicCAS(&table[slot], 0u, row + 1);
                if (held == 0) {
                    const u64 size = dict_entry_bytes(c, row);
                    atomicAdd(&status->entries, 1u);
                    const u64 bytes =
                        atomicAdd((unsigned long long*)&status->bytes, (unsigned long long)size);
                    if (bytes + size > max_bytes) atomicExch(&status->overflow, 1u);
                    break;
                }
            }
            if (dict_same(c, row, held - 1)) {
                // Most rows come after their value's first: no atomic for them.
                if (row + 1 < held) atomicMin(&table[slot], row + 1);
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_first(const DictColumn c, const u32* __restrict__ table, u32 mask, u32* __restrict__ work,
               u32* __restrict__ rank) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < c.rows; row += stride) {
        if (!dict_valid(c, row)) {
            rank[row] = 0;
            continue;
        }
        u32 slot = dict_hash(c, row) & mask;
        u32 held = table[slot];
        // Every value is in the table (the insert did not overflow): the probe ends.
        while (!dict_same(c, row, held - 1)) {
            slot = (slot + 1) & mask;
            held = table[slot];
        }
        work[row] = slot;
        rank[row] = held == row + 1 ? 1 : 0;
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_count(const DictColumn c, const u32* __restrict__ rank, u32* __restrict__ tile_counts,
               u32* __restrict__ tile_bytes) {
    __shared__ u32 warp_sums[DICT_THREADS / WARP];
    const u32 first = blockIdx.x * DICT_TILE;
    u32 count = 0, bytes = 0;
    for (u32 i = 0; i < DICT_ITEMS; ++i) {
        const u32 row = first + i * DICT_THREADS + threadIdx.x;
        const bool is_first = row < c.rows && rank[row] != 0;
        u32 total;
        block_exclusive_sum(is_first ? dict_entry_bytes(c, row) : 0, warp_sums, total);
        bytes += total;
        count += __syncthreads_count(is_first);
    }
    if (threadIdx.x == 0) {
        tile_counts[blockIdx.x] = count;
        tile_bytes[blockIdx.x] = bytes;
    }
}

// Few tiles (one per DICT_TILE rows): one thread adds them up in order.
extern "C" __global__ void dict_scan(u32* __restrict__ tile_counts, u32* __restrict__ tile_bytes,
                                     u32 tiles) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    u32 count = 0, bytes = 0;
    for (u32 t = 0; t < tiles; ++t) {
        const u32 c = tile_counts[t], b = tile_bytes[t];
        tile_counts[t] = count;
        tile_bytes[t] = bytes;
        count += c;
        bytes += b;
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_entries(const DictColumn c, const u32* __restrict__ tile_counts,
                 const u32* __restrict__ tile_bytes, u32* __restrict__ rank,
                 u8* __restrict__ dictionary) {
    __shared__ u32 warp_counts[DICT_THREADS / WARP];
    __shared__ u32 warp_sums[DICT_THREADS / WARP];
    const u32 first = blockIdx.x * DICT_TILE;
    u32 base = tile_counts[blockIdx.x], base_bytes = tile_bytes[blockIdx.x];
    for (u32 i = 0; i < DICT_ITEMS; ++i) {
        const u32 row = first + i * DICT_THREADS + threadIdx.x;
        const bool is_first = row < c.rows && rank[row] != 0;
        u32 total, total_bytes;
        const u32 before = block_rank(is_first, warp_counts, total);
        const u32 at = base_bytes + block_exclusive_sum(
                                        is_first ? dict_entry_bytes(c, row) : 0, warp_sums,
                                        total_bytes);
        if (is_first) {
            rank[row] = base + before;
            u8* out = dictionary + at;
            if (c.offsets == 0) {
                const u64 v = dict_value(c, row);
                for (u32 b = 0; b < c.out_width; ++b) out[b] = (u8)(v >> (8 * b));
            } else {
                u32 len;
                const u8* bytes = dict_bytes(c, row, len);
                for (u32 b = 0; b < 4; ++b) out[b] = (u8)(len >> (8 * b));
                for (u32 k = 0; k < len; ++k) out[4 + k] = bytes[k];
            }
        }
        base += total;
        base_bytes += total_bytes;
    }
}

extern "C" __global__ void __launch_bounds__(DICT_THREADS)
    dict_ids(const DictColumn c, const u32* __restrict__ table, const u32* __restrict__ rank,
             u32* __restrict__ work) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < c.rows; row += stride) {
        if (!dict_valid(c, row)) continue;
        work[row] = rank[table[work[row]] - 1];
    }
}
