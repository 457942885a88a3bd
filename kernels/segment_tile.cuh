// segment_tile.cuh: one tile of whole segments sorted in shared memory, shared by
// segmented_sort.cu (tiles of MERGE_TILE = 2 048 rows, several blocks per SM) and
// segment_tiles_large.cu (the same code compiled with a larger MERGE_THREADS / MERGE_ITEMS:
// one block per SM, its tile in dynamic shared memory).
//
// A block sorts rows [starts[k0], starts[k1]) (n when k1 is past the last segment): whole
// segments, so its sorted tile is final and its row ids go straight to `out`; no keys are
// written. Each row's segment, numbered within the tile, comes from head flags and a block
// scan.
#pragma once
#include "merge.cuh"

// The index of the first segment starting at or after row x (`segments` when none does).
__device__ __forceinline__ u32 first_segment_from(const u32* starts, u32 segments, u64 x) {
    u32 lo = 0, hi = segments;
    while (lo < hi) {
        const u32 m = (lo + hi) >> 1;
        if (starts[m] < x) lo = m + 1;
        else hi = m;
    }
    return lo;
}

// Sorts segments [k0, k1) in `s` (s_warp: MERGE_THREADS / WARP words) and writes their
// final row ids. May be called again by the same block for other segments.
template <typename K>
__device__ void sort_segment_tile(SharedTile<K, true>& s, u32* s_warp, const K* __restrict__ keys,
                                  const u32* __restrict__ starts, u32 segments, u32 n, u32 k0, u32 k1,
                                  u32* __restrict__ out) {
    typedef Elem<K, true> E;
    const u32 row0 = k0 < segments ? starts[k0] : n;
    const u32 count = (k1 < segments ? starts[k1] : n) - row0;
    if (count == 0) return;  // the same for the whole block
    if (count > MERGE_TILE) __trap();  // a stride too large for the longest segment
    // s.segs holds head flags first.
    for (u32 i = threadIdx.x; i < PADDED_TILE; i += MERGE_THREADS) s.segs[i] = 0;
    __syncthreads();
    for (u32 k = k0 + threadIdx.x; k < k1; k += MERGE_THREADS) s.segs[pad(starts[k] - row0)] = 1;
    for (u32 i = threadIdx.x; i < MERGE_TILE; i += MERGE_THREADS) {
        s.keys[pad(i)] = i < count ? keys[row0 + i] : (K)~(K)0;
        s.ids[pad(i)] = row0 + i;
    }
    __syncthreads();
    E r[MERGE_ITEMS];
    u32 heads = 0;
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) {
        r[i] = s.get(threadIdx.x * MERGE_ITEMS + i);
        heads += r[i].seg;
    }
    u32 seg = block_exclusive_sum<MERGE_THREADS>(heads, s_warp);
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) {
        const u32 e = threadIdx.x * MERGE_ITEMS + i;
        seg += r[i].seg;
        // Padding after the last row sorts after every row.
        r[i].seg = e < count ? seg - 1 : ~0u;
        s.segs[pad(e)] = r[i].seg;
    }
    __syncthreads();
    if (tile_in_order(s, r)) {
        for (u32 i = threadIdx.x; i < count; i += MERGE_THREADS) out[row0 + i] = row0 + i;
        return;
    }
    sort_tile(s, r);
    for (u32 i = threadIdx.x; i < count; i += MERGE_THREADS) out[row0 + i] = s.ids[pad(i)];
    // The next call's first writes to `s` come after its first barrier.
}
