// segmented_sort.cu: stable sort within known segments (launched by src/cuda/merge/segmented.rs).
//
// Segments are runs of rows that already sort before every later run (rows with equal
// values of the sort keys that the input is ordered by); only rows within one segment
// change places.
//
//   segment_tile_bounds    the first segment of each block of segment_tiles_<k>
//   segment_tiles_<k>      segments of at most a tile (half a tile by default) sorted in
//                          one kernel: each block takes whole segments, numbers them from
//                          head flags, sorts them as one tile and writes the final row ids
//   segment_ranks_<k>      the same blocks when every segment is short: each row ranked by
//                          counting the rows of its segment before it
//   segment_starts_<l>     the segments' first rows from their lengths less one (u8 or u16:
//                          a quarter or half the bytes of the starts over PCIe) and the
//                          first row of every SEGMENT_STARTS_CHUNK-th segment
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
#include "segment_tile.cuh"

MERGE_ENTRY_POINTS(segmented, u64, true)
MERGE_SCAN_ENTRY_POINT

// ---- Segment tiles: segments no longer than a tile, sorted in one kernel ----
//
// Block b sorts rows [s(b * stride), s((b + 1) * stride)), where s(x) is the first segment
// start at or after x (n when there is none): whole segments (segment_tile.cuh). The
// launcher picks stride = MERGE_TILE + 1 - (longest segment), so that a block's rows fit in
// one tile: s(x + stride) <= x + stride + longest - 1.

// bounds[b] = the first segment of block b's rows, for b in 0 ..= blocks (one thread each;
// the searches of all blocks run in parallel instead of holding up each sorting block).
extern "C" __global__ void segment_tile_bounds(const u32* __restrict__ starts, u32 segments, u32 stride,
                                               u32 blocks, u32* __restrict__ bounds) {
    const u32 b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b <= blocks) bounds[b] = first_segment_from(starts, segments, (u64)b * stride);
}

template <typename K>
__device__ void segment_tiles(const K* __restrict__ keys, const u32* __restrict__ starts, u32 segments, u32 n,
                              const u32* __restrict__ bounds, u32* __restrict__ out) {
    __shared__ SharedTile<K, true> s;
    __shared__ u32 s_warp[MERGE_THREADS / WARP];
    sort_segment_tile<K>(s, s_warp, keys, starts, segments, n, bounds[blockIdx.x], bounds[blockIdx.x + 1], out);
}

// Runs whose segments are all short (the launcher's limit: 32 rows): the same blocks of whole
// segments, but each row goes to its segment's first row plus the rows of its segment that
// sort before it (smaller keys, and equal keys of earlier rows): work grows with the square
// of the segment length. Threads of a warp read the same rows of the same segment
// (broadcasts); no merge, few registers, many blocks per SM.

// 1 when (other, j) >= (key, i), read as one number of the key's bits then 32 bits of row,
// else 0: the carry out of the subtraction chain (other, j) - (key, i). CC.CF works as a
// carry: sub.cc / subc.cc compile to IADD3 / IADD3.X (a + ~b + carry), so it ends as 1
// exactly when the chain did not borrow (seen on an H100 for every ordering of keys and
// rows, ties included; the GPU tests of segment tiles check it through the sort).
__device__ __forceinline__ u32 not_before(u32 other, u32 j, u32 key, u32 i) {
    u32 flag;
    asm("{\n\t.reg .u32 d;\n\t"
        "sub.cc.u32 d, %1, %2;\n\t"
        "subc.cc.u32 d, %3, %4;\n\t"
        "addc.u32 %0, 0, 0;\n\t}"
        : "=r"(flag)
        : "r"(j), "r"(i), "r"(other), "r"(key));
    return flag;
}
__device__ __forceinline__ u32 not_before(u64 other, u32 j, u64 key, u32 i) {
    u32 flag;
    asm("{\n\t.reg .u32 d;\n\t"
        "sub.cc.u32 d, %1, %2;\n\t"
        "subc.cc.u32 d, %3, %4;\n\t"
        "subc.cc.u32 d, %5, %6;\n\t"
        "addc.u32 %0, 0, 0;\n\t}"
        : "=r"(flag)
        : "r"(j), "r"(i), "r"((u32)other), "r"((u32)key), "r"((u32)(other >> 32)), "r"((u32)(key >> 32)));
    return flag;
}

template <typename K>
__device__ void segment_ranks(const K* __restrict__ keys, const u32* __restrict__ starts, u32 segments, u32 n,
                              const u32* __restrict__ bounds, u32* __restrict__ out) {
    __shared__ K s_keys[MERGE_TILE];
    __shared__ u32 s_span[MERGE_TILE];  // per row: its segment's first row | its end << 16
    __shared__ u32 s_ids[MERGE_TILE];
    const u32 k0 = bounds[blockIdx.x], k1 = bounds[blockIdx.x + 1];
    const u32 row0 = k0 < segments ? starts[k0] : n;
    const u32 count = (k1 < segments ? starts[k1] : n) - row0;
    if (count == 0) return;  // the same for the whole block
    if (count > MERGE_TILE) __trap();  // a stride too large for the longest segment
    // Thread t's rows are t, t + MERGE_THREADS, ...: all its key loads are issued before the
    // first is used, and its keys stay in registers for the ranking.
    K mine[MERGE_ITEMS];
#pragma unroll
    for (int it = 0; it < MERGE_ITEMS; ++it) {
        const u32 i = threadIdx.x + it * MERGE_THREADS;
        if (i < count) mine[it] = keys[row0 + i];
    }
#pragma unroll
    for (int it = 0; it < MERGE_ITEMS; ++it) {
        const u32 i = threadIdx.x + it * MERGE_THREADS;
        if (i < count) s_keys[i] = mine[it];
    }
    for (u32 k = k0 + threadIdx.x; k < k1; k += MERGE_THREADS) {
        const u32 first = starts[k] - row0;
        const u32 end = k + 1 < k1 ? starts[k + 1] - row0 : count;
        for (u32 r = first; r < end; ++r) s_span[r] = first | end << 16;
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < MERGE_ITEMS; ++it) {
        const u32 i = threadIdx.x + it * MERGE_THREADS;
        if (i < count) {
            const K key = mine[it];
            const u32 span = s_span[i];
            const u32 first = span & 0xffffu, end = span >> 16;
            // Its rank: first + the rows j of its segment with (key_j, j) < (key, i), that is
            // end - those not before it (itself included), each found by one chain of
            // subtractions: fewer instructions than comparing keys for less and equal and
            // rows for less, and the loop is bound by instruction issue.
            u32 not_before_count = 0;
#pragma unroll 4
            for (u32 j = first; j < end; ++j) not_before_count += not_before(s_keys[j], j, key, i);
            const u32 rank = end - not_before_count;
            s_ids[rank] = row0 + i;
        }
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < MERGE_ITEMS; ++it) {
        const u32 i = threadIdx.x + it * MERGE_THREADS;
        if (i < count) out[row0 + i] = s_ids[i];
    }
}

// Blocks of segment_ranks_<k> that must fit one SM: ptxas keeps the registers low enough for
// the shared memory to be the limit (7 blocks of 32 KB for u64 keys; 32 registers, no spills).
// It and SEGMENT_STARTS_ITEMS below are -D options from src/cuda/tuning.rs.
#if !defined(SEGMENT_RANKS_MIN_BLOCKS) || !defined(SEGMENT_STARTS_ITEMS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

// The extern "C" entry points segment_ranks_<k> and segment_tiles_<k> of one key type.
#define SEGMENT_TILE_ENTRY_POINTS(K)                                                                       \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS, SEGMENT_RANKS_MIN_BLOCKS)                 \
        segment_ranks_##K(const K* keys, const u32* starts, u32 segments, u32 n, const u32* bounds,      \
                          u32* out) {                                                                     \
        segment_ranks<K>(keys, starts, segments, n, bounds, out);                                         \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                           \
        segment_tiles_##K(const K* keys, const u32* starts, u32 segments, u32 n, const u32* bounds,      \
                          u32* out) {                                                                     \
        segment_tiles<K>(keys, starts, segments, n, bounds, out);                                         \
    }

SEGMENT_TILE_ENTRY_POINTS(u32)
SEGMENT_TILE_ENTRY_POINTS(u64)

// ---- Segment starts from segment lengths ----
//
// Block b rebuilds the starts of segments [b * SEGMENT_STARTS_CHUNK, (b + 1) * ...): thread t
// adds up the lengths of its SEGMENT_STARTS_ITEMS consecutive segments, a block scan gives
// each thread its offset, and chunk_starts[b] (sent by the host, which knows the starts)
// places the chunk. lengths[k] is segment k's rows less one, so u8 takes segments of up to
// 256 rows and u16 up to 65 536.
#define SEGMENT_STARTS_CHUNK (MERGE_THREADS * SEGMENT_STARTS_ITEMS)

template <typename L>
__device__ void segment_starts(const L* __restrict__ lengths, const u32* __restrict__ chunk_starts,
                               u32 segments, u32* __restrict__ starts) {
    __shared__ u32 s_warp[MERGE_THREADS / WARP];
    const u64 first = (u64)blockIdx.x * SEGMENT_STARTS_CHUNK + threadIdx.x * SEGMENT_STARTS_ITEMS;
    u32 rows[SEGMENT_STARTS_ITEMS];
    u32 sum = 0;
#pragma unroll
    for (int i = 0; i < SEGMENT_STARTS_ITEMS; ++i) {
        rows[i] = first + i < segments ? (u32)lengths[first + i] + 1 : 0;
        sum += rows[i];
    }
    u32 at = chunk_starts[blockIdx.x] + block_exclusive_sum<MERGE_THREADS>(sum, s_warp);
#pragma unroll
    for (int i = 0; i < SEGMENT_STARTS_ITEMS; ++i) {
        if (first + i < segments) starts[first + i] = at;
        at += rows[i];
    }
}

extern "C" __global__ void __launch_bounds__(MERGE_THREADS)
    segment_starts_u8(const u8* lengths, const u32* chunk_starts, u32 segments, u32* starts) {
    segment_starts<u8>(lengths, chunk_starts, segments, starts);
}

extern "C" __global__ void __launch_bounds__(MERGE_THREADS)
    segment_starts_u16(const u16* lengths, const u32* chunk_starts, u32 segments, u32* starts) {
    segment_starts<u16>(lengths, chunk_starts, segments, starts);
}

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
