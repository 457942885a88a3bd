// locality_sort.cu: stable merge sort for nearly sorted keys (launched by src/cuda/merge.rs).
//
//   locality_<k>_block_sort / _find_dirty / _merge_tiles / _copy_back
//                          the merge passes of merge.cuh over (key, row id), k = u32 or u64;
//                          a pair of runs already in order costs one comparison, and only
//                          the stretch where two runs overlap is merged
//   merge_scan_tiles       the work queue of a merge pass
//   locality_window_<k> / _check_<k>
//                          for disorder within a halo of rows: each block sorts its own rows
//                          with a halo on each side and writes its own places' row ids; the
//                          check proves the result (or the launcher falls back)
//   locality_inversions_<k>  the sortedness probe: how many keys are greater than the key
//                          `distance` rows further on (0 for data whose disorder stays
//                          within that distance, about half the keys for random data),
//                          over a sample of chunks of consecutive positions
#include "merge.cuh"

MERGE_ENTRY_POINTS(locality_u32, u32, false)
MERGE_ENTRY_POINTS(locality_u64, u64, false)
MERGE_SCAN_ENTRY_POINT

// Positions probed: chunks of PROBE_CHUNK consecutive positions (coalesced reads), every
// `every`-th chunk from the first (every = 1: all), below n - distance. The launcher counts
// the positions the same way.
#define PROBE_CHUNK 1024

template <typename K>
__device__ void count_inversions(const K* __restrict__ keys, u32 n, u32 distance, u32 every, u64* count) {
    u32 local = 0;
    if (n > distance) {
        const u64 limit = n - distance;
        const u64 step = (u64)every * PROBE_CHUNK;
        const u64 probed = (limit + step - 1) / step * PROBE_CHUNK;
        const u64 stride = (u64)gridDim.x * blockDim.x;
        for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < probed; j += stride) {
            const u64 i = j / PROBE_CHUNK * step + j % PROBE_CHUNK;
            if (i < limit) local += keys[i] > keys[i + distance] ? 1u : 0u;
        }
    }
    const u32 warp_total = __reduce_add_sync(0xffffffffu, local);
    if (lane_id() == 0 && warp_total > 0) atomicAdd(count, (u64)warp_total);
}

extern "C" __global__ void locality_inversions_u32(const u32* keys, u32 n, u32 distance, u32 every, u64* count) {
    count_inversions<u32>(keys, n, distance, every, count);
}
extern "C" __global__ void locality_inversions_u64(const u64* keys, u32 n, u32 distance, u32 every, u64* count) {
    count_inversions<u64>(keys, n, distance, every, count);
}

// ---- Windowed sort: one kernel for disorder within a halo ----
//
// Block b owns the rows [b * M, (b + 1) * M), M = MERGE_TILE - 2 * halo, and sorts them
// together with `halo` rows on each side (one tile); it writes the row ids of its own rows'
// places only. When no key is more than `halo` places from its sorted place, every block's
// owned places hold exactly the right rows. Whether they did is checked after: each block
// also writes the (key, row id) of its first and last owned place, and
// locality_window_check counts the block boundaries where the order does not strictly
// increase. None: the ids are strictly increasing (key, row id) pairs over all n places,
// so every row appears once and the permutation is the stable sort. Else the launcher
// falls back to the merge sort, whose input keys this kernel left untouched.
template <typename K>
__device__ void window_sort(const K* __restrict__ keys, u32 n, u32 halo, u32* __restrict__ out,
                            K* __restrict__ edge_keys, u32* __restrict__ edge_ids) {
    __shared__ SharedTile<K, false> s;
    const u32 owned = MERGE_TILE - 2 * halo;
    const u64 own0 = (u64)blockIdx.x * owned;
    const u64 own1 = min(own0 + owned, (u64)n);
    const u64 w0 = own0 > halo ? own0 - halo : 0;
    const u32 count = (u32)(min(own1 + halo, (u64)n) - w0);
    load_and_sort_tile(s, keys, (const u32*)nullptr, w0, count);
    const u32 from = (u32)(own0 - w0), len = (u32)(own1 - own0);
    for (u32 i = threadIdx.x; i < len; i += MERGE_THREADS) out[own0 + i] = s.ids[pad(from + i)];
    if (threadIdx.x < 2) {
        const u32 e = from + (threadIdx.x == 0 ? 0 : len - 1);
        edge_keys[2 * blockIdx.x + threadIdx.x] = s.keys[pad(e)];
        edge_ids[2 * blockIdx.x + threadIdx.x] = s.ids[pad(e)];
    }
}

// failures += the boundaries b (between windows b and b + 1) whose last owned (key, id) is
// not below the next window's first.
template <typename K>
__device__ void window_check(const K* __restrict__ edge_keys, const u32* __restrict__ edge_ids, u32 windows,
                             u32* failures) {
    const u32 b = blockIdx.x * blockDim.x + threadIdx.x;
    bool broken = false;
    if (b + 1 < windows) {
        const K last = edge_keys[2 * b + 1], next = edge_keys[2 * b + 2];
        broken = !(last < next || (last == next && edge_ids[2 * b + 1] < edge_ids[2 * b + 2]));
    }
    const u32 warp_total = __reduce_add_sync(0xffffffffu, broken ? 1u : 0u);
    if (lane_id() == 0 && warp_total > 0) atomicAdd(failures, warp_total);
}

#define WINDOW_ENTRY_POINTS(K)                                                                             \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                           \
        locality_window_##K(const K* keys, u32 n, u32 halo, u32* out, K* edge_keys, u32* edge_ids) {      \
        window_sort<K>(keys, n, halo, out, edge_keys, edge_ids);                                          \
    }                                                                                                     \
    extern "C" __global__ void locality_window_check_##K(const K* edge_keys, const u32* edge_ids,          \
                                                         u32 windows, u32* failures) {                    \
        window_check<K>(edge_keys, edge_ids, windows, failures);                                          \
    }

WINDOW_ENTRY_POINTS(u32)
WINDOW_ENTRY_POINTS(u64)
