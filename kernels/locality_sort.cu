// locality_sort.cu: stable merge sort for nearly sorted keys (launched by src/cuda/merge/locality.rs).
//
//   locality_<k>_block_sort / _find_dirty / _merge_tiles / _copy_back
//                          the merge passes of merge.cuh over (key, row id), k = u32 or u64;
//                          a pair of runs already in order costs one comparison, and only
//                          the stretch where two runs overlap is merged
//   merge_scan_tiles       the work queue of a merge pass
//   locality_window_<k> / _check_<k>
//                          for disorder within a halo of rows: each block sorts chunks of two
//                          halos around its own rows, merges the chunks' neighbouring halves
//                          and writes its own places' row ids; checks of every place prove the
//                          result (or the launcher falls back)
//   locality_probe_<k>     the sortedness probe: how many keys are greater than the key
//                          d rows further on (0 for data whose disorder stays within d,
//                          about half the keys for random data), over a sample of chunks
//                          of consecutive positions, for every window halo d and one far d
#include "merge.cuh"

MERGE_ENTRY_POINTS(locality_u32, u32, false)
MERGE_ENTRY_POINTS(locality_u64, u64, false)
MERGE_SCAN_ENTRY_POINT

// Positions probed: chunks of PROBE_CHUNK consecutive positions (coalesced reads), every
// `every`-th chunk from the first (every = 1: all). The launcher counts the positions the
// same way (src/cuda/merge/locality_probe.rs); src/cuda/tuning.rs passes these constants as
// -D options.
// Distances probed: the window halos WINDOW_HALO_MIN << k for k < PROBE_HALOS, then `far`.
// From 16 rows on, a window owns a multiple of 32 rows, so its loads and stores start on
// 128-byte lines.
#if !defined(PROBE_CHUNK) || !defined(WINDOW_HALO_MIN) || !defined(PROBE_HALOS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif
static_assert((WINDOW_HALO_MIN << (PROBE_HALOS - 1)) == MERGE_TILE / 4, "window halos reach a quarter tile");

// counts[k] += how many probed keys are greater than the key d_k rows on (where there is
// one), for the distances d_k above: one read of the sample for every decision the
// locality sort takes (whether to run, and with which window halo).
template <typename K>
__device__ void count_inversions(const K* __restrict__ keys, u32 n, u32 far, u32 every, u64* counts) {
    // Warps add into the block's counters, blocks into the global ones: global atomics on
    // the same few addresses from every warp cost more than the reads (ncu: 113 µs against
    // 54 for sorted input over 2^26 u64 keys).
    __shared__ u32 block_counts[PROBE_HALOS + 1];
    if (threadIdx.x <= PROBE_HALOS) block_counts[threadIdx.x] = 0;
    __syncthreads();
    u32 local[PROBE_HALOS + 1];
#pragma unroll
    for (int k = 0; k <= PROBE_HALOS; ++k) local[k] = 0;
    const u32 nearest = min((u32)WINDOW_HALO_MIN, far);
    if (n > nearest) {
        const u64 limit = n - nearest;
        const u64 step = (u64)every * PROBE_CHUNK;
        const u64 probed = (limit + step - 1) / step * PROBE_CHUNK;
        const u64 stride = (u64)gridDim.x * blockDim.x;
        for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < probed; j += stride) {
            const u64 i = j / PROBE_CHUNK * step + j % PROBE_CHUNK;
            if (i >= limit) continue;
            const K x = keys[i];
#pragma unroll
            for (int k = 0; k < PROBE_HALOS; ++k) {
                const u64 d = (u64)WINDOW_HALO_MIN << k;
                if (i + d < n) local[k] += x > keys[i + d] ? 1u : 0u;
            }
            if (i + far < n) local[PROBE_HALOS] += x > keys[i + far] ? 1u : 0u;
        }
    }
#pragma unroll
    for (int k = 0; k <= PROBE_HALOS; ++k) {
        const u32 warp_total = __reduce_add_sync(0xffffffffu, local[k]);
        if (lane_id() == 0 && warp_total > 0) atomicAdd(&block_counts[k], warp_total);
    }
    __syncthreads();
    if (threadIdx.x <= PROBE_HALOS && block_counts[threadIdx.x] > 0) {
        atomicAdd(&counts[threadIdx.x], (u64)block_counts[threadIdx.x]);
    }
}

extern "C" __global__ void locality_probe_u32(const u32* keys, u32 n, u32 far, u32 every, u64* counts) {
    count_inversions<u32>(keys, n, far, every, counts);
}
extern "C" __global__ void locality_probe_u64(const u64* keys, u32 n, u32 far, u32 every, u64* counts) {
    count_inversions<u64>(keys, n, far, every, counts);
}

// ---- Windowed sort: one kernel for disorder within a halo ----
//
// For keys where no row sorts after a row `halo` or more places further on (h-sorted, h =
// halo), two phases sort everything: (1) sort the chunks of 2h rows, (2) merge the upper
// half of each chunk with the lower half of the next, in place. After (1), the h largest
// of chunk m sort after every row of chunk m - 1 (at least h + 1 rows of chunk m lie h or
// more places after any row of chunk m - 1), and the h least of chunk m before every row
// of chunk m + 1; so the merged ranges of (2) are in order among themselves.
//
// Block b owns the rows [b * M, (b + 1) * M), M = MERGE_TILE - 2h, and loads one tile of
// rows from b * M - h (rows before 0 load as least padding, rows from n as padding): its
// chunks are those of one global grid, its owned places are the merged ranges of (2) in
// its tile, and it writes their row ids. Whether the input was h-sorted is not assumed but
// checked: each block counts its owned places whose (key, row id) does not strictly
// increase into `failures`, and writes the (key, row id) of its first and last owned place
// for locality_window_check, which counts the block boundaries that do not. None at all:
// the ids are strictly increasing (key, row id) pairs over all n places, so every row
// appears once and the permutation is the stable sort. Else the launcher falls back to the
// merge sort, whose input keys this kernel left untouched.
template <typename K>
__device__ __forceinline__ bool strictly_before(const Elem<K, false>& a, const Elem<K, false>& b) {
    return a.key < b.key || (a.key == b.key && a.id < b.id);
}

// Phase (2) on a tile of sorted chunks of 2 * half elements: the elements of tile places
// [half, MERGE_TILE - half) merged in place; each thread returns in r[] the elements of its
// places q .. q + MERGE_ITEMS - 1, q = half + MERGE_ITEMS * thread (when below
// MERGE_TILE - half). `s` is synchronized on return.
template <typename K>
__device__ void merge_shifted_halves(SharedTile<K, false>& s, u32 half, Elem<K, false> (&r)[MERGE_ITEMS]) {
    const u32 q = half + threadIdx.x * MERGE_ITEMS;
    bool changed = false;
    if (q < MERGE_TILE - half) {
#pragma unroll
        for (int i = 0; i < MERGE_ITEMS; ++i) r[i] = s.get(q + i);
        // The pair: the upper half of one chunk and the lower half of the next.
        const u32 first = half + (q - half) / (2 * half) * (2 * half);
        changed = merge_runs_at(s, first, half, q - first, r);
    }
    __syncthreads();
    if (changed) put_run(s, q, r);
    __syncthreads();
}

// Whether the owned places [half, half + len) of the tile, whose thread-blocked elements from
// place q = half + MERGE_ITEMS * thread on are in r[], all strictly increase in (key, row id).
template <typename K>
__device__ bool owned_places_increase(const SharedTile<K, false>& s, u32 half, u32 len,
                                      const Elem<K, false> (&r)[MERGE_ITEMS]) {
    const u32 q = half + threadIdx.x * MERGE_ITEMS;
    const u32 end = half + len;
    bool ok = true;
#pragma unroll
    for (int i = 0; i + 1 < MERGE_ITEMS; ++i) {
        if (q + i + 1 < end) ok = ok && strictly_before(r[i], r[i + 1]);
    }
    if (q + MERGE_ITEMS < end) ok = ok && strictly_before(r[MERGE_ITEMS - 1], s.get(q + MERGE_ITEMS));
    return __syncthreads_and(ok);
}

template <typename K>
__device__ void window_sort(const K* __restrict__ keys, u32 n, u32 halo, u32* __restrict__ out,
                            K* __restrict__ edge_keys, u32* __restrict__ edge_ids, u32* failures) {
    __shared__ SharedTile<K, false> s;
    const u32 owned = MERGE_TILE - 2 * halo;
    const u64 own0 = (u64)blockIdx.x * owned;
    const u32 len = (u32)min((u64)owned, n - own0);
    // Tile place e holds row own0 - halo + e.
    const u32 lead = own0 < halo ? halo : 0;
    const u64 first = own0 + lead - halo;
    const u32 count = (u32)min((u64)(MERGE_TILE - lead), n - first);
    if (!load_and_sort_tile(s, keys, (const u32*)nullptr, first, count, lead, 2 * halo)) {
        Elem<K, false> r[MERGE_ITEMS];
        merge_shifted_halves(s, halo, r);
        if (!owned_places_increase(s, halo, len, r) && threadIdx.x == 0) atomicAdd(failures, 1u);
    }
    for (u32 i = threadIdx.x; i < len; i += MERGE_THREADS) out[own0 + i] = s.ids[pad(halo + i)];
    if (threadIdx.x < 2) {
        const u32 e = halo + (threadIdx.x == 0 ? 0 : len - 1);
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
        Elem<K, false> last, next;
        last.key = edge_keys[2 * b + 1];
        last.id = edge_ids[2 * b + 1];
        next.key = edge_keys[2 * b + 2];
        next.id = edge_ids[2 * b + 2];
        broken = !strictly_before(last, next);
    }
    const u32 warp_total = __reduce_add_sync(0xffffffffu, broken ? 1u : 0u);
    if (lane_id() == 0 && warp_total > 0) atomicAdd(failures, warp_total);
}

#define WINDOW_ENTRY_POINTS(K)                                                                             \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                           \
        locality_window_##K(const K* keys, u32 n, u32 halo, u32* out, K* edge_keys, u32* edge_ids,         \
                            u32* failures) {                                                              \
        window_sort<K>(keys, n, halo, out, edge_keys, edge_ids, failures);                                \
    }                                                                                                     \
    extern "C" __global__ void locality_window_check_##K(const K* edge_keys, const u32* edge_ids,          \
                                                         u32 windows, u32* failures) {                    \
        window_check<K>(edge_keys, edge_ids, windows, failures);                                          \
    }

WINDOW_ENTRY_POINTS(u32)
WINDOW_ENTRY_POINTS(u64)
