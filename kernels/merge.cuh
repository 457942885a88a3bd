// merge.cuh: the merge machinery shared by locality_sort.cu and segmented_sort.cu.
//
// A stable merge sort of (key, row id) elements, optionally with a segment index that
// orders before the key (segmented sort: rows of an earlier segment always come first):
//
//   block_sort        each block sorts one tile of TILE elements in shared memory
//                     (odd-even transposition in registers, then merge-path merges over
//                     separate key / segment / row id arrays; threads whose elements stay
//                     in place skip a level) and generates the row ids; in place
//   tile_radius       the smallest r such that every tile sorts after all tiles more than
//                     r tiles before it (checked per tile against the 2r + 2 tiles after)
//   place             with a small radius: every element's final position from counts in
//                     its 2r neighbour tiles; its row id is written there. One pass instead
//                     of the merge passes below.
//   find_dirty        for run length R, per pair of adjacent runs (A, B): the part that
//                     really needs merging. A's elements <= B[0] and B's elements >= A's
//                     last stay where they are, so only A[a_lo..R) and B[0..b_hi) are
//                     merged, into the same positions. Also counts run boundaries that are
//                     out of order: none means the whole array is sorted (early exit).
//   scan_tiles        one block: prefix sums of the pairs' tile counts = the work queue
//   merge_tiles       persistent blocks take work-queue tiles: merge-path split of the
//                     pair's dirty range, merge in shared memory, write to the scratch copy
//   copy_back         the merged ranges from the scratch copy back into place
//
// With segments the dirty range of a pair never leaves the segment that straddles the
// interface between A and B; nearly sorted input (locality sort) has short dirty ranges;
// tiles that are already in order cost nothing after the block sort.
#pragma once
#include "common.cuh"

// Block shapes: -D options from src/cuda/tuning.rs, with no defaults here.
#if !defined(MERGE_THREADS) || !defined(MERGE_ITEMS) || !defined(SCAN_THREADS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif
#define MERGE_TILE (MERGE_THREADS * MERGE_ITEMS)
// Shared tiles leave one element free after every MERGE_ITEMS: a thread's run of
// MERGE_ITEMS elements then starts in another bank than its neighbour's (without it, the
// blocked reads and writes of a warp all hit the same banks).
#define PADDED_TILE (MERGE_TILE + MERGE_TILE / MERGE_ITEMS)

__device__ __forceinline__ u32 pad(u32 e) { return e + e / MERGE_ITEMS; }

template <typename K, bool SEG>
struct Elem;
template <typename K>
struct Elem<K, false> {
    K key;
    u32 id;
};
template <typename K>
struct Elem<K, true> {
    K key;
    u32 seg;
    u32 id;
};

// a <= b in sort order (segment first, then key); ties keep a first (stability).
template <typename K>
__device__ __forceinline__ bool le(const Elem<K, false>& a, const Elem<K, false>& b) {
    return a.key <= b.key;
}
template <typename K>
__device__ __forceinline__ bool le(const Elem<K, true>& a, const Elem<K, true>& b) {
    return a.seg < b.seg || (a.seg == b.seg && a.key <= b.key);
}

// An element that sorts after every real one (padding of a partial tile; never stored).
template <typename K>
__device__ __forceinline__ void set_padding(Elem<K, false>& e) {
    e.key = (K)~(K)0;
    e.id = ~0u;
}
template <typename K>
__device__ __forceinline__ void set_padding(Elem<K, true>& e) {
    e.key = (K)~(K)0;
    e.seg = ~0u;
    e.id = ~0u;
}

// An element that sorts before every real one (padding in front of a window's first rows;
// never stored). Stability puts it before real elements of the least key.
template <typename K, bool SEG>
__device__ __forceinline__ void set_least(Elem<K, SEG>& e) {
    e.key = (K)0;
    if constexpr (SEG) e.seg = 0;
    e.id = 0;
}

// The element arrays in global memory (structure of arrays; `segs` only with SEG).
template <typename K, bool SEG>
struct Arrays {
    K* keys;
    u32* segs;
    u32* ids;
    __device__ __forceinline__ Elem<K, SEG> load(u64 i) const {
        Elem<K, SEG> e;
        e.key = keys[i];
        e.id = ids[i];
        if constexpr (SEG) e.seg = segs[i];
        return e;
    }
    // Key and segment of element i (the row id is left out).
    __device__ __forceinline__ Elem<K, SEG> load_order(u64 i) const {
        Elem<K, SEG> e;
        e.key = keys[i];
        e.id = 0;
        if constexpr (SEG) e.seg = segs[i];
        return e;
    }
    __device__ __forceinline__ void store(u64 i, const Elem<K, SEG>& e) const {
        keys[i] = e.key;
        ids[i] = e.id;
        if constexpr (SEG) segs[i] = e.seg;
    }
};

// Views that merge_path and serial_merge read through: a padded shared tile from element
// `base` on, or a range of global arrays.
template <typename E>
struct SharedView {
    const E* p;
    u32 base;
    __device__ __forceinline__ E operator()(u32 i) const { return p[pad(base + i)]; }
};
template <typename K, bool SEG>
struct GlobalView {
    Arrays<K, SEG> a;
    u64 offset;
    __device__ __forceinline__ Elem<K, SEG> operator()(u32 i) const { return a.load(offset + i); }
};

// How many of the first `diag` outputs of the stable merge of A and B come from A.
template <typename VA, typename VB>
__device__ u32 merge_path(VA A, u32 a_len, VB B, u32 b_len, u32 diag) {
    u32 lo = diag > b_len ? diag - b_len : 0;
    u32 hi = diag < a_len ? diag : a_len;
    while (lo < hi) {
        const u32 mid = (lo + hi) >> 1;
        if (le(A(mid), B(diag - 1 - mid))) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Up to `count` outputs of the merge of A[a..a_end) and B[b..b_end), A first on ties.
template <typename E>
__device__ __forceinline__ void serial_merge(SharedView<E> A, u32 a, u32 a_end, SharedView<E> B, u32 b,
                                             u32 b_end, u32 count, E (&out)[MERGE_ITEMS]) {
    E next_a, next_b;  // read only while in range
    if (a < a_end) next_a = A(a);
    if (b < b_end) next_b = B(b);
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) {
        if ((u32)i < count) {
            const bool take_a = b >= b_end || (a < a_end && le(next_a, next_b));
            out[i] = take_a ? next_a : next_b;
            if (take_a) {
                ++a;
                if (a < a_end) next_a = A(a);
            } else {
                ++b;
                if (b < b_end) next_b = B(b);
            }
        }
    }
}

// A tile in shared memory as separate arrays (padded positions): the merges read only the
// order (key, segment) while searching and merging, and each output's row id once.
template <typename K, bool SEG>
struct SharedTile {
    K keys[PADDED_TILE];
    u32 segs[SEG ? PADDED_TILE : 1];
    u32 ids[PADDED_TILE];
    __device__ __forceinline__ void put(u32 e, const Elem<K, SEG>& x) {
        keys[pad(e)] = x.key;
        if constexpr (SEG) segs[pad(e)] = x.seg;
        ids[pad(e)] = x.id;
    }
    // Key and segment of element e (the row id is left out).
    __device__ __forceinline__ Elem<K, SEG> order(u32 e) const {
        Elem<K, SEG> x;
        x.key = keys[pad(e)];
        if constexpr (SEG) x.seg = segs[pad(e)];
        x.id = 0;
        return x;
    }
    __device__ __forceinline__ Elem<K, SEG> get(u32 e) const {
        Elem<K, SEG> x = order(e);
        x.id = ids[pad(e)];
        return x;
    }
};

// Element i of a run starting at element `base` of a shared tile, order only.
template <typename K, bool SEG>
struct OrderView {
    const SharedTile<K, SEG>* t;
    u32 base;
    __device__ __forceinline__ Elem<K, SEG> operator()(u32 i) const { return t->order(base + i); }
};

// The MERGE_ITEMS outputs of the merge of A[a..a_len) and B[b..b_len) (runs of a shared
// tile, A first on ties), row ids fetched after the merge.
template <typename K, bool SEG>
__device__ __forceinline__ void serial_merge_tile(const SharedTile<K, SEG>& t, u32 a_base, u32 a, u32 a_len,
                                                  u32 b_base, u32 b, u32 b_len, Elem<K, SEG> (&out)[MERGE_ITEMS]) {
    Elem<K, SEG> next_a, next_b;  // read only while in range
    if (a < a_len) next_a = t.order(a_base + a);
    if (b < b_len) next_b = t.order(b_base + b);
    u32 from[MERGE_ITEMS];
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) {
        const bool take_a = b >= b_len || (a < a_len && le(next_a, next_b));
        out[i] = take_a ? next_a : next_b;
        from[i] = take_a ? a_base + a : b_base + b;
        if (take_a) {
            ++a;
            if (a < a_len) next_a = t.order(a_base + a);
        } else {
            ++b;
            if (b < b_len) next_b = t.order(b_base + b);
        }
    }
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) out[i].id = t.ids[pad(from[i])];
}

// Whether the elements r[] (thread t's blocked elements t * MERGE_ITEMS ..) of the tile in
// `s` are in order, within the thread and against the next thread's first.
template <typename K, bool SEG>
__device__ __forceinline__ bool tile_in_order(const SharedTile<K, SEG>& s, const Elem<K, SEG> (&r)[MERGE_ITEMS]) {
    bool in_order = true;
#pragma unroll
    for (int i = 0; i + 1 < MERGE_ITEMS; ++i) in_order = in_order && le(r[i], r[i + 1]);
    const u32 next = threadIdx.x * MERGE_ITEMS + MERGE_ITEMS;
    if (next < MERGE_TILE) in_order = in_order && le(r[MERGE_ITEMS - 1], s.order(next));
    return __syncthreads_and(in_order);
}

// Puts r[] at tile places at .. at + MERGE_ITEMS - 1 (callers synchronize around it: with
// the barriers inside, ptxas gave the windowed kernel 39 registers instead of 32).
template <typename K, bool SEG>
__device__ __forceinline__ void put_run(SharedTile<K, SEG>& s, u32 at, const Elem<K, SEG> (&r)[MERGE_ITEMS]) {
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) s.put(at + i, r[i]);
}

// One thread's share of merging the sorted runs A = [first, first + run) and B = [first +
// run, first + 2 run) of the tile: r[] holds the elements at merged places diag ..
// diag + MERGE_ITEMS - 1 of the pair and becomes what belongs there. Returns whether they
// changed. A thread whose elements all stay where they are keeps them: on A's side when
// its last is <= B's first, on B's side when its first is >= A's last (A's elements <= B's
// first, and B's >= A's last, are in their merged places). Nearly sorted tiles and tiles of
// short segments merge only around the pairs' interfaces.
template <typename K, bool SEG>
__device__ __forceinline__ bool merge_runs_at(const SharedTile<K, SEG>& s, u32 first, u32 run, u32 diag,
                                              Elem<K, SEG> (&r)[MERGE_ITEMS]) {
    const OrderView<K, SEG> A{&s, first};
    const OrderView<K, SEG> B{&s, first + run};
    const bool changed = !(diag < run ? le(r[MERGE_ITEMS - 1], B(0)) : le(A(run - 1), r[0]));
    if (changed) {
        const u32 a = merge_path(A, run, B, run, diag);
        serial_merge_tile(s, first, a, run, first + run, diag - a, run, r);
    }
    return changed;
}

// Sorts the runs of `sorted_run` elements (a power of two, MERGE_ITEMS ..= MERGE_TILE) of
// the tile in `s` whose blocked elements each thread holds in r[] (as in `s`); the sorted
// runs are left in `s` (synchronized). `sorted_run` = MERGE_TILE sorts the whole tile.
template <typename K, bool SEG>
__device__ void sort_tile(SharedTile<K, SEG>& s, Elem<K, SEG> (&r)[MERGE_ITEMS], u32 sorted_run = MERGE_TILE) {
    typedef Elem<K, SEG> E;
    // Odd-even transposition: swaps only strictly greater neighbours, so it is stable.
    bool changed = false;  // r[] differs from the thread's elements in `s`
#pragma unroll
    for (int round = 0; round < MERGE_ITEMS; ++round) {
#pragma unroll
        for (int i = round & 1; i + 1 < MERGE_ITEMS; i += 2) {
            if (!le(r[i], r[i + 1])) {
                const E t = r[i];
                r[i] = r[i + 1];
                r[i + 1] = t;
                changed = true;
            }
        }
    }
    for (u32 run = MERGE_ITEMS; run < sorted_run; run *= 2) {
        __syncthreads();
        if (changed) put_run(s, threadIdx.x * MERGE_ITEMS, r);
        __syncthreads();
        const u32 group = 2 * run / MERGE_ITEMS;  // threads per merged pair of runs
        const u32 first = (threadIdx.x / group) * 2 * run;
        changed = merge_runs_at(s, first, run, (threadIdx.x % group) * MERGE_ITEMS, r);
    }
    __syncthreads();
    if (changed) put_run(s, threadIdx.x * MERGE_ITEMS, r);
    __syncthreads();
}

// Loads `lead` elements of least padding, then rows [first, first + count), each with its
// position as row id, then padding into the tile `s`, and sorts its runs of `sorted_run`
// elements (see sort_tile) unless the tile is in order already. Returns whether it was
// (then `s` holds the rows as loaded). `s` is synchronized on return.
template <typename K, bool SEG>
__device__ bool load_and_sort_tile(SharedTile<K, SEG>& s, const K* keys, const u32* segs, u64 first, u32 count,
                                   u32 lead = 0, u32 sorted_run = MERGE_TILE) {
    typedef Elem<K, SEG> E;
    // All of a thread's loads are issued before its first store (one memory latency per
    // tile, not one per element).
    E e[MERGE_ITEMS];
#pragma unroll
    for (int k = 0; k < MERGE_ITEMS; ++k) {
        const u32 i = threadIdx.x + k * MERGE_THREADS;
        if (i < lead) {
            set_least(e[k]);
        } else if (i - lead < count) {
            const u64 row = first + (i - lead);
            e[k].key = keys[row];
            if constexpr (SEG) e[k].seg = segs[row];
            e[k].id = (u32)row;
        } else {
            set_padding(e[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < MERGE_ITEMS; ++k) s.put(threadIdx.x + k * MERGE_THREADS, e[k]);
    __syncthreads();
    E r[MERGE_ITEMS];
#pragma unroll
    for (int i = 0; i < MERGE_ITEMS; ++i) r[i] = s.get(threadIdx.x * MERGE_ITEMS + i);
    if (tile_in_order(s, r)) return true;
    sort_tile(s, r, sorted_run);
    return false;
}

// Sorts tile blockIdx.x of `data` in place and numbers its rows (row id = position).
template <typename K, bool SEG>
__device__ void block_sort(Arrays<K, SEG> data, u32 n) {
    __shared__ SharedTile<K, SEG> s;
    const u64 base = (u64)blockIdx.x * MERGE_TILE;
    const u32 count = (u32)min((u64)MERGE_TILE, n - base);
    // A tile already in order (sorted or nearly sorted input, short segments of such)
    // keeps its keys where they are: only its row ids are written.
    if (load_and_sort_tile(s, data.keys, data.segs, base, count)) {
        for (u32 i = threadIdx.x; i < count; i += MERGE_THREADS) data.ids[base + i] = (u32)(base + i);
        return;
    }
    for (u32 i = threadIdx.x; i < count; i += MERGE_THREADS) data.store(base + i, s.get(i));
}

// One thread per run of length `run`: counts out-of-order run boundaries into
// summary[1]; the thread of each even run (a pair's A) finds the pair's dirty range.
template <typename K, bool SEG>
__device__ void find_dirty(Arrays<K, SEG> data, u32 n, u32 run, u32* a_lo, u32* b_hi, u32* tiles,
                           u32* summary) {
    const u32 runs = (u32)(((u64)n + run - 1) / run);
    const u32 idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= runs) return;
    const u64 at = (u64)idx * run;
    if (idx > 0 && !le(data.load(at - 1), data.load(at))) atomicAdd(&summary[1], 1u);
    if (idx % 2 != 0) return;
    const u32 pair = idx / 2;
    u32 lo = run, hi = 0, count = 0;
    if (at + run < n) {
        const u32 b_len = (u32)min((u64)run, n - at - run);
        const GlobalView<K, SEG> A{data, at};
        const GlobalView<K, SEG> B{data, at + run};
        const Elem<K, SEG> a_last = A(run - 1);
        const Elem<K, SEG> b_first = B(0);
        if (!le(a_last, b_first)) {
            // A's elements <= B[0] stay in front; B's elements >= A's last stay behind.
            u32 l = 0, h = run;
            while (l < h) {
                const u32 m = (l + h) >> 1;
                if (le(A(m), b_first)) l = m + 1;
                else h = m;
            }
            lo = l;
            l = 0;
            h = b_len;
            while (l < h) {
                const u32 m = (l + h) >> 1;
                if (!le(a_last, B(m))) l = m + 1;
                else h = m;
            }
            hi = l;
            count = (run - lo + hi + MERGE_TILE - 1) / MERGE_TILE;
        }
    }
    a_lo[pair] = lo;
    b_hi[pair] = hi;
    tiles[pair] = count;
}

// Exclusive prefix sum of `v` over a block of THREADS threads (a multiple of WARP, at most
// WARP * WARP); `s_warp` holds THREADS / WARP values. Synchronizes the block.
template <u32 THREADS>
__device__ __forceinline__ u32 block_exclusive_sum(u32 v, u32* s_warp) {
    const u32 inclusive = warp_inclusive_sum(v);
    if (lane_id() == WARP - 1) s_warp[warp_id()] = inclusive;
    __syncthreads();
    if (warp_id() == 0) {
        const u32 w = lane_id() < THREADS / WARP ? s_warp[lane_id()] : 0;
        const u32 w_inclusive = warp_inclusive_sum(w);
        if (lane_id() < THREADS / WARP) s_warp[lane_id()] = w_inclusive - w;
    }
    __syncthreads();
    return s_warp[warp_id()] + inclusive - v;
}

// One block of SCAN_THREADS: tile_start[p] = tiles of pairs before p, tile_start[pairs] and
// summary[0] = all tiles.
__device__ void scan_tiles(const u32* tiles, u32 pairs, u32* tile_start, u32* summary) {
    __shared__ u32 s_warp[SCAN_THREADS / WARP];
    const u32 per = (pairs + SCAN_THREADS - 1) / SCAN_THREADS;
    const u32 first = threadIdx.x * per;
    const u32 last = min(first + per, pairs);
    u32 sum = 0;
    for (u32 p = first; p < last; ++p) sum += tiles[p];
    u32 running = block_exclusive_sum<SCAN_THREADS>(sum, s_warp);
    for (u32 p = first; p < last; ++p) {
        tile_start[p] = running;
        running += tiles[p];
    }
    if (threadIdx.x == SCAN_THREADS - 1) {
        tile_start[pairs] = running;
        summary[0] = running;
    }
}

// The pair whose work-queue tiles include tile `w` (tile_start is ascending).
__device__ __forceinline__ u32 pair_of_tile(const u32* tile_start, u32 pairs, u32 w) {
    u32 lo = 0, hi = pairs;
    while (lo < hi) {
        const u32 m = (lo + hi) >> 1;
        if (tile_start[m] <= w) lo = m + 1;
        else hi = m;
    }
    return lo - 1;
}

// Where one work-queue tile writes: its pair's dirty range, and the tile's part of it.
struct TileJob {
    u64 a_start;  // first element of A's dirty part (= first output position)
    u64 b_start;  // first element of B (its dirty part starts there)
    u32 a_len, b_len;
    u32 d0, d1;   // output diagonals of this tile within the dirty range
};

__device__ __forceinline__ TileJob tile_job(u32 w, u32 n, u32 run, const u32* a_lo, const u32* b_hi,
                                            const u32* tile_start, u32 pairs) {
    const u32 p = pair_of_tile(tile_start, pairs, w);
    const u64 base = (u64)p * 2 * run;
    TileJob j;
    j.a_start = base + a_lo[p];
    j.b_start = base + run;
    j.a_len = run - a_lo[p];
    j.b_len = b_hi[p];
    j.d0 = (w - tile_start[p]) * MERGE_TILE;
    j.d1 = min(j.d0 + MERGE_TILE, j.a_len + j.b_len);
    return j;
}

// Persistent blocks merge the work queue's `total` tiles from `data` into `scratch`.
template <typename K, bool SEG>
__device__ void merge_tiles(Arrays<K, SEG> data, Arrays<K, SEG> scratch, u32 n, u32 run, const u32* a_lo,
                            const u32* b_hi, const u32* tile_start, u32 pairs, u32 total) {
    typedef Elem<K, SEG> E;
    __shared__ E s[PADDED_TILE];
    __shared__ u32 s_split[2];
    for (u32 w = blockIdx.x; w < total; w += gridDim.x) {
        const TileJob j = tile_job(w, n, run, a_lo, b_hi, tile_start, pairs);
        const GlobalView<K, SEG> A{data, j.a_start};
        const GlobalView<K, SEG> B{data, j.b_start};
        if (threadIdx.x < 2) {
            s_split[threadIdx.x] = merge_path(A, j.a_len, B, j.b_len, threadIdx.x == 0 ? j.d0 : j.d1);
        }
        __syncthreads();
        const u32 a0 = s_split[0], a1 = s_split[1];
        const u32 b0 = j.d0 - a0, b1 = j.d1 - a1;
        const u32 na = a1 - a0, nb = b1 - b0;
        for (u32 i = threadIdx.x; i < na + nb; i += MERGE_THREADS) {
            s[pad(i)] = i < na ? A(a0 + i) : B(b0 + i - na);
        }
        __syncthreads();
        const u32 count = j.d1 - j.d0;
        const u32 diag = threadIdx.x * MERGE_ITEMS;
        E r[MERGE_ITEMS];
        u32 mine = 0;
        if (diag < count) {
            mine = min((u32)MERGE_ITEMS, count - diag);
            const SharedView<E> SA{s, 0};
            const SharedView<E> SB{s, na};
            const u32 a = merge_path(SA, na, SB, nb, diag);
            serial_merge(SA, a, na, SB, diag - a, nb, mine, r);
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < MERGE_ITEMS; ++i) {
            if ((u32)i < mine) s[pad(diag + i)] = r[i];
        }
        __syncthreads();
        const u64 out = j.a_start + j.d0;
        for (u32 i = threadIdx.x; i < count; i += MERGE_THREADS) scratch.store(out + i, s[pad(i)]);
        __syncthreads();
    }
}

// The merged ranges of the work queue back from `scratch` into `data`.
template <typename K, bool SEG>
__device__ void copy_back(Arrays<K, SEG> data, Arrays<K, SEG> scratch, u32 n, u32 run, const u32* a_lo,
                          const u32* b_hi, const u32* tile_start, u32 pairs, u32 total) {
    for (u32 w = blockIdx.x; w < total; w += gridDim.x) {
        const TileJob j = tile_job(w, n, run, a_lo, b_hi, tile_start, pairs);
        const u64 out = j.a_start + j.d0;
        for (u32 i = threadIdx.x; i < j.d1 - j.d0; i += MERGE_THREADS) data.store(out + i, scratch.load(out + i));
    }
}

// ---- Placement: one pass instead of the merge passes when disorder is bounded ----
//
// After the block sort every tile is sorted. The tiles' radius is the smallest r such that
// every element of a tile sorts at or after every element of the tiles more than r before
// it. Then an element x of tile t lands at
//     (tiles before t - r) * MERGE_TILE + its index in t
//     + per neighbour tile j in [t - r, t + r]: #{y in j : y <= x} (j < t), #{y < x} (j > t)
// (equal elements of earlier tiles go first: stable). Nearly sorted input has a radius of
// one or a few tiles; segments shorter than a tile give a radius of at most one.

__device__ __forceinline__ u32 tile_count(u32 n) { return (n + MERGE_TILE - 1) / MERGE_TILE; }

template <typename K, bool SEG>
__device__ __forceinline__ Elem<K, SEG> tile_first(Arrays<K, SEG> data, u32 t) {
    return data.load_order((u64)t * MERGE_TILE);
}
template <typename K, bool SEG>
__device__ __forceinline__ Elem<K, SEG> tile_last(Arrays<K, SEG> data, u32 n, u32 t) {
    return data.load_order(min((u64)(t + 1) * MERGE_TILE, (u64)n) - 1);
}

// Radius r holds when every tile's last element is <= the first element of every tile
// more than r tiles later. It suffices to check the tiles r + 1 ..= 2r + 2 later: any
// distance above r is a sum of distances in that window, and first <= last within a tile
// chains the comparisons. So one thread per tile j compares its last element with the
// first elements of tiles j + 1 ..= j + 2 * max_radius + 2 and sets, in `failed`, bit r
// of every radius r <= max_radius that tile j rules out.
template <typename K, bool SEG>
__device__ void tile_radius(Arrays<K, SEG> data, u32 n, u32 max_radius, u32* failed) {
    const u32 tiles = tile_count(n);
    const u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    u32 fails = 0;
    if (j < tiles) {
        const Elem<K, SEG> last = tile_last(data, n, j);
        u32 ok = 0;  // bit d - 1: last <= first of tile j + d
        for (u32 d = 1; d <= 2 * max_radius + 2; ++d) {
            // No tile there: nothing to break.
            if (j + d >= tiles || le(last, tile_first(data, j + d))) ok |= 1u << (d - 1);
        }
        for (u32 r = 0; r <= max_radius; ++r) {
            const u32 window = ((1u << (r + 2)) - 1) << r;  // bits r ..= 2r + 1: d = r+1 ..= 2r+2
            if ((ok & window) != window) fails |= 1u << r;
        }
    }
    fails = __reduce_or_sync(0xffffffffu, fails);
    if (lane_id() == 0 && fails != 0) atomicOr(failed, fails);
}

// How many of the `len` sorted elements at `keys`/`segs` sort before x: with `or_equal`
// those <= x, else those < x.
template <typename K, bool SEG>
__device__ __forceinline__ u32 count_before(const K* keys, const u32* segs, u32 len, const Elem<K, SEG>& x,
                                            bool or_equal) {
    u32 lo = 0, hi = len;
    while (lo < hi) {
        const u32 m = (lo + hi) >> 1;
        Elem<K, SEG> y;
        y.key = keys[m];
        if constexpr (SEG) y.seg = segs[m];
        const bool before = or_equal ? le(y, x) : !le(x, y);
        if (before) lo = m + 1;
        else hi = m;
    }
    return lo;
}

// How many of sorted tile elements [0, len) of `data` from `at` on satisfy `pred` (true,
// then false), found by the whole block in two rounds of loads: every MERGE_ITEMS-th
// element, then the MERGE_ITEMS - 1 after the last one that satisfies it.
template <typename K, bool SEG, typename P>
__device__ u32 block_count_while(Arrays<K, SEG> data, u64 at, u32 len, P pred) {
    const u32 coarse = threadIdx.x * MERGE_ITEMS;
    const u32 c1 = __syncthreads_count(coarse < len && pred(data.load_order(at + coarse)));
    if (c1 == 0) return 0;
    const u32 from = (c1 - 1) * MERGE_ITEMS + 1;
    const u32 fine = from + threadIdx.x;
    return from + __syncthreads_count(threadIdx.x < MERGE_ITEMS - 1 && fine < len &&
                                      pred(data.load_order(at + fine)));
}

// Block t: the final position of each element of sorted tile t, for tiles of radius
// `radius`; writes its row id there in `out_ids`.
template <typename K, bool SEG>
__device__ void place(Arrays<K, SEG> data, u32 n, u32 radius, u32* out_ids) {
    typedef Elem<K, SEG> E;
    __shared__ K s_keys[MERGE_TILE];
    __shared__ u32 s_segs[SEG ? MERGE_TILE : 1];
    const u32 tiles = tile_count(n);
    const u32 t = blockIdx.x;
    const u64 base = (u64)t * MERGE_TILE;
    const u32 count = (u32)min((u64)MERGE_TILE, n - base);
    E mine[MERGE_ITEMS];
    u32 pos[MERGE_ITEMS];
#pragma unroll
    for (int k = 0; k < MERGE_ITEMS; ++k) {
        const u32 e = threadIdx.x + k * MERGE_THREADS;
        pos[k] = e;
        if (e < count) mine[k] = data.load(base + e);
        else set_padding(mine[k]);  // counted like the rest, never written
    }
    const E lowest = data.load_order(base), highest = data.load_order(base + count - 1);
    const u32 first = t > radius ? t - radius : 0;
    const u32 last = min(t + radius, tiles - 1);
    for (u32 j = first; j <= last; ++j) {
        if (j == t) continue;
        const u64 at = (u64)j * MERGE_TILE;
        const u32 len = (u32)min((u64)MERGE_TILE, n - at);
        // Tile j's elements below [lowest, highest] count for every x, those above for none:
        // only j[lo..hi) needs searching.
        u32 lo, hi;
        if (!le(lowest, data.load_order(at + len - 1))) {
            lo = hi = len;
        } else if (!le(data.load_order(at), highest)) {
            lo = hi = 0;
        } else {
            lo = block_count_while(data, at, len, [&](const E& y) { return !le(lowest, y); });
            hi = block_count_while(data, at, len, [&](const E& y) { return le(y, highest); });
        }
#pragma unroll
        for (int k = 0; k < MERGE_ITEMS; ++k) pos[k] += lo;
        if (hi == lo) continue;  // the same for the whole block
        for (u32 i = threadIdx.x; i < hi - lo; i += MERGE_THREADS) {
            s_keys[i] = data.keys[at + lo + i];
            if constexpr (SEG) s_segs[i] = data.segs[at + lo + i];
        }
        __syncthreads();
        const bool or_equal = j < t;
#pragma unroll
        for (int k = 0; k < MERGE_ITEMS; ++k) pos[k] += count_before<K, SEG>(s_keys, s_segs, hi - lo, mine[k], or_equal);
        __syncthreads();
    }
    const u64 before = (u64)first * MERGE_TILE;
#pragma unroll
    for (int k = 0; k < MERGE_ITEMS; ++k) {
        const u32 e = threadIdx.x + k * MERGE_THREADS;
        if (e < count) out_ids[before + pos[k]] = mine[k].id;
    }
}

// The extern "C" entry points of one element type, named <prefix>_<what>.
#define MERGE_ENTRY_POINTS(PREFIX, K, SEG)                                                                  \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                             \
        PREFIX##_block_sort(K* keys, u32* segs, u32* ids, u32 n) {                                          \
        block_sort<K, SEG>(Arrays<K, SEG>{keys, segs, ids}, n);                                             \
    }                                                                                                       \
    extern "C" __global__ void PREFIX##_find_dirty(K* keys, u32* segs, u32* ids, u32 n, u32 run, u32* a_lo, \
                                                   u32* b_hi, u32* tiles, u32* summary) {                   \
        find_dirty<K, SEG>(Arrays<K, SEG>{keys, segs, ids}, n, run, a_lo, b_hi, tiles, summary);           \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                             \
        PREFIX##_merge_tiles(K* keys, u32* segs, u32* ids, K* s_keys, u32* s_segs, u32* s_ids, u32 n,     \
                             u32 run, const u32* a_lo, const u32* b_hi, const u32* tile_start, u32 pairs,  \
                             u32 total) {                                                                   \
        merge_tiles<K, SEG>(Arrays<K, SEG>{keys, segs, ids}, Arrays<K, SEG>{s_keys, s_segs, s_ids}, n, run, \
                            a_lo, b_hi, tile_start, pairs, total);                                          \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                             \
        PREFIX##_copy_back(K* keys, u32* segs, u32* ids, K* s_keys, u32* s_segs, u32* s_ids, u32 n,       \
                           u32 run, const u32* a_lo, const u32* b_hi, const u32* tile_start, u32 pairs,    \
                           u32 total) {                                                                     \
        copy_back<K, SEG>(Arrays<K, SEG>{keys, segs, ids}, Arrays<K, SEG>{s_keys, s_segs, s_ids}, n, run,   \
                          a_lo, b_hi, tile_start, pairs, total);                                            \
    }                                                                                                       \
    extern "C" __global__ void PREFIX##_tile_radius(K* keys, u32* segs, u32* ids, u32 n, u32 max_radius,     \
                                                    u32* failed) {                                          \
        tile_radius<K, SEG>(Arrays<K, SEG>{keys, segs, ids}, n, max_radius, failed);                        \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                             \
        PREFIX##_place(K* keys, u32* segs, u32* ids, u32 n, u32 radius, u32* out_ids) {                     \
        place<K, SEG>(Arrays<K, SEG>{keys, segs, ids}, n, radius, out_ids);                                 \
    }

#define MERGE_SCAN_ENTRY_POINT                                                                               \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS)                                              \
        merge_scan_tiles(const u32* tiles, u32 pairs, u32* tile_start, u32* summary) {                      \
        scan_tiles(tiles, pairs, tile_start, summary);                                                      \
    }
