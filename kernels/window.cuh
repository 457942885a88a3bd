// window.cuh: device code shared by the window kernel files (window.cu, window_values.cu):
// 128-bit sums, validity bits, the block-wide prefix scans (three passes over tiles, for
// any associative combine `plus`), the runs of a run's sorted rows (window partitions and
// peer groups), and each row's frame.
#pragma once
#include "common.cuh"

#if !defined(WINDOW_THREADS) || !defined(WINDOW_SCAN_ITEMS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

#define SCAN_TILE (WINDOW_THREADS * WINDOW_SCAN_ITEMS)

struct __align__(16) U128 {
    u64 lo, hi;
};

__device__ __forceinline__ u32 plus(u32 a, u32 b) { return a + b; }
__device__ __forceinline__ u64 plus(u64 a, u64 b) { return a + b; }
__device__ __forceinline__ U128 plus(U128 a, U128 b) {
    U128 r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo ? 1ull : 0ull);
    return r;
}
__device__ __forceinline__ u64 minus(u64 a, u64 b) { return a - b; }
__device__ __forceinline__ U128 minus(U128 a, U128 b) {
    U128 r;
    r.lo = a.lo - b.lo;
    r.hi = a.hi - b.hi - (a.lo < b.lo ? 1ull : 0ull);
    return r;
}
template <typename S> __device__ __forceinline__ S zero_of();
template <> __device__ __forceinline__ u32 zero_of<u32>() { return 0; }
template <> __device__ __forceinline__ u64 zero_of<u64>() { return 0; }
template <> __device__ __forceinline__ U128 zero_of<U128>() {
    U128 z;
    z.lo = 0;
    z.hi = 0;
    return z;
}
__device__ __forceinline__ u32 shfl_up(u32 v, u32 o) { return __shfl_up_sync(0xffffffffu, v, o); }
__device__ __forceinline__ u64 shfl_up(u64 v, u32 o) { return __shfl_up_sync(0xffffffffu, v, o); }
__device__ __forceinline__ U128 shfl_up(U128 v, u32 o) {
    U128 r;
    r.lo = __shfl_up_sync(0xffffffffu, v.lo, o);
    r.hi = __shfl_up_sync(0xffffffffu, v.hi, o);
    return r;
}

// Bit i of a validity bitmap; every row is valid without one.
__device__ __forceinline__ bool valid_at(const u32* __restrict__ bits, u64 i) {
    return bits == nullptr || ((bits[i >> 5] >> (i & 31)) & 1u);
}

struct __align__(16) Bytes16 {
    u64 lo, hi;
};

// The exclusive prefix of one value per thread across the block, and the block's total.
template <typename S>
__device__ __forceinline__ S block_exclusive(S mine, S* total) {
    __shared__ S warp_totals[WINDOW_THREADS / WARP];
    S inclusive = mine;
#pragma unroll
    for (u32 o = 1; o < WARP; o <<= 1) {
        const S up = shfl_up(inclusive, o);
        if (lane_id() >= o) inclusive = plus(up, inclusive);
    }
    if (lane_id() == WARP - 1) warp_totals[warp_id()] = inclusive;
    __syncthreads();
    S before = zero_of<S>();
    S all = zero_of<S>();
    for (u32 w = 0; w < WINDOW_THREADS / WARP; ++w) {
        if (w < warp_id()) before = plus(before, warp_totals[w]);
        all = plus(all, warp_totals[w]);
    }
    __syncthreads();
    *total = all;
    // Exclusive within the warp: the inclusive value less this thread's own.
    S lane_before = shfl_up(inclusive, 1);
    if (lane_id() == 0) lane_before = zero_of<S>();
    return plus(before, lane_before);
}

// Each thread owns WINDOW_SCAN_ITEMS consecutive items of the block's tile.
template <typename S>
__device__ __forceinline__ void scan_reduce(const S* __restrict__ data, u64 len,
                                            S* __restrict__ tile_totals) {
    const u64 base = (u64)blockIdx.x * SCAN_TILE + (u64)threadIdx.x * WINDOW_SCAN_ITEMS;
    S mine = zero_of<S>();
#pragma unroll 4
    for (u32 k = 0; k < WINDOW_SCAN_ITEMS; ++k) {
        if (base + k < len) mine = plus(mine, data[base + k]);
    }
    S total;
    block_exclusive(mine, &total);
    if (threadIdx.x == 0) tile_totals[blockIdx.x] = total;
}

// One block: the tiles' totals become their exclusive prefixes.
template <typename S>
__device__ __forceinline__ void scan_tiles(S* __restrict__ tile_totals, u32 tiles) {
    S carry = zero_of<S>();
    for (u32 base = 0; base < tiles; base += WINDOW_THREADS) {
        const u32 t = base + threadIdx.x;
        const S mine = t < tiles ? tile_totals[t] : zero_of<S>();
        S total;
        const S before = block_exclusive(mine, &total);
        if (t < tiles) tile_totals[t] = plus(carry, before);
        carry = plus(carry, total);
    }
}

template <typename S>
__device__ __forceinline__ void scan_apply(S* __restrict__ data, u64 len,
                                           const S* __restrict__ tile_prefix) {
    const u64 base = (u64)blockIdx.x * SCAN_TILE + (u64)threadIdx.x * WINDOW_SCAN_ITEMS;
    S mine = zero_of<S>();
#pragma unroll 4
    for (u32 k = 0; k < WINDOW_SCAN_ITEMS; ++k) {
        if (base + k < len) mine = plus(mine, data[base + k]);
    }
    S total;
    S running = plus(tile_prefix[blockIdx.x], block_exclusive(mine, &total));
#pragma unroll 4
    for (u32 k = 0; k < WINDOW_SCAN_ITEMS; ++k) {
        if (base + k < len) {
            running = plus(running, data[base + k]);
            data[base + k] = running;
        }
    }
}

#define SCAN_KERNELS(SUFFIX, S)                                                              \
    extern "C" __global__ void __launch_bounds__(WINDOW_THREADS)                             \
        window_scan_reduce_##SUFFIX(const S* __restrict__ data, u64 len, S* __restrict__ totals) { \
        scan_reduce<S>(data, len, totals);                                                   \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(WINDOW_THREADS)                             \
        window_scan_tiles_##SUFFIX(S* __restrict__ totals, u32 tiles) {                      \
        scan_tiles<S>(totals, tiles);                                                        \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(WINDOW_THREADS)                             \
        window_scan_apply_##SUFFIX(S* __restrict__ data, u64 len, const S* __restrict__ prefix) { \
        scan_apply<S>(data, len, prefix);                                                    \
    }

__device__ __forceinline__ u64 least(u64 a, u64 b) { return a < b ? a : b; }
__device__ __forceinline__ U128 least(U128 a, U128 b) {
    return (a.hi < b.hi || (a.hi == b.hi && a.lo <= b.lo)) ? a : b;
}
__device__ __forceinline__ u64 inverted(u64 k) { return ~k; }
__device__ __forceinline__ U128 inverted(U128 k) {
    U128 r;
    r.lo = ~k.lo;
    r.hi = ~k.hi;
    return r;
}
__device__ __forceinline__ U128 all_ones() {
    U128 r;
    r.lo = ~0ull;
    r.hi = ~0ull;
    return r;
}

// A key with whether its row starts a segment: the running minimum restarts there.
struct __align__(16) SegU64 {
    u64 key;
    u32 head;
    u32 pad;
};
struct __align__(16) SegU128 {
    U128 key;
    u32 head;
    u32 pad[3];
};
__device__ __forceinline__ SegU64 plus(SegU64 a, SegU64 b) {
    SegU64 r;
    r.key = b.head ? b.key : least(a.key, b.key);
    r.head = a.head | b.head;
    r.pad = 0;
    return r;
}
__device__ __forceinline__ SegU128 plus(SegU128 a, SegU128 b) {
    SegU128 r;
    r.key = b.head ? b.key : least(a.key, b.key);
    r.head = a.head | b.head;
    r.pad[0] = r.pad[1] = r.pad[2] = 0;
    return r;
}
template <> __device__ __forceinline__ SegU64 zero_of<SegU64>() {
    SegU64 z;
    z.key = ~0ull;
    z.head = 0;
    z.pad = 0;
    return z;
}
template <> __device__ __forceinline__ SegU128 zero_of<SegU128>() {
    SegU128 z;
    z.key = all_ones();
    z.head = 0;
    z.pad[0] = z.pad[1] = z.pad[2] = 0;
    return z;
}
__device__ __forceinline__ SegU64 shfl_up(SegU64 v, u32 o) {
    SegU64 r;
    r.key = __shfl_up_sync(0xffffffffu, v.key, o);
    r.head = __shfl_up_sync(0xffffffffu, v.head, o);
    r.pad = 0;
    return r;
}
__device__ __forceinline__ SegU128 shfl_up(SegU128 v, u32 o) {
    SegU128 r;
    r.key = shfl_up(v.key, o);
    r.head = __shfl_up_sync(0xffffffffu, v.head, o);
    r.pad[0] = r.pad[1] = r.pad[2] = 0;
    return r;
}

// The runs (window partitions or peer groups) of a run's rows.
struct Runs {
    const u32* ids;     // n + 1 entries: ids[i + 1] is row i's run, counted from 1
    const u32* starts;  // the first row of each run
};

__device__ __forceinline__ u32 run_start(Runs r, u32 i) { return r.starts[r.ids[i + 1] - 1]; }
__device__ __forceinline__ u32 run_end(Runs r, u32 i, u32 n) {
    const u32 id = r.ids[i + 1];
    return id < r.ids[n] ? r.starts[id] : n;
}

// The window partitions and peer groups of a run's rows, as one kernel parameter
// (`RunLayout` in src/cuda/window/mod.rs).
struct RunLayout {
    const u32* part_ids;
    const u32* part_starts;
    const u32* peer_ids;
    const u32* peer_starts;
};

__device__ __forceinline__ Runs partitions_of(RunLayout l) { return Runs{l.part_ids, l.part_starts}; }
__device__ __forceinline__ Runs peers_of(RunLayout l) { return Runs{l.peer_ids, l.peer_starts}; }

// Frame ends, as src/window/frames.rs defines them.
#define BOUND_UNBOUNDED_PRECEDING 0
#define BOUND_PRECEDING 1
#define BOUND_CURRENT_ROW 2
#define BOUND_FOLLOWING 3
#define BOUND_UNBOUNDED_FOLLOWING 4
// A RANGE offset's bound, searched beforehand (window_range_bound_*): `offset` is the
// address of each row's bound, bit-inverted in a SegU64 (a running minimum of them is the
// running maximum of the bounds).
#define BOUND_SEARCHED 5
// A GROUPS offset: `offset` peer groups before (6) or after (7) the row's, within its
// window partition (a group before the partition's first makes the frame start, or end,
// at the partition's start; one after its last, at the partition's end).
#define BOUND_GROUPS_PRECEDING 6
#define BOUND_GROUPS_FOLLOWING 7

// One end of row i's frame (exclusive when `past` is 1), before it is clipped to the
// window partition [first, last). `peers`: RANGE or GROUPS (CURRENT ROW is the peer
// group's start or end).
__device__ __forceinline__ u64 frame_bound(u32 kind, u64 offset, u32 i, u32 first, u32 last,
                                           bool peers, Runs peer_runs, u32 n, u32 past) {
    const u64 row = (u64)i + past;
    switch (kind) {
        case BOUND_UNBOUNDED_PRECEDING:
            return first;
        case BOUND_PRECEDING:
            return row > offset ? row - offset : 0;
        case BOUND_CURRENT_ROW:
            if (!peers) return row;
            return past ? run_end(peer_runs, i, n) : run_start(peer_runs, i);
        case BOUND_FOLLOWING:
            return row + offset < row ? ~0ull : row + offset;
        case BOUND_SEARCHED:
            return (u32)~((const SegU64*)offset)[i].key;
        case BOUND_GROUPS_PRECEDING:
        case BOUND_GROUPS_FOLLOWING: {
            const u64 group = peer_runs.ids[i + 1];
            u64 target;
            if (kind == BOUND_GROUPS_PRECEDING) {
                if (group - peer_runs.ids[first + 1] < offset) return first;
                target = group - offset;
            } else {
                if (peer_runs.ids[last] - group < offset) return last;
                target = group + offset;
            }
            if (!past) return peer_runs.starts[target - 1];
            return target < peer_runs.ids[n] ? peer_runs.starts[target] : n;
        }
        default:
            return last;
    }
}

// A frame's two ends, as one kernel parameter (`FrameSpec` in src/cuda/window/mod.rs).
struct FrameSpec {
    u64 start_offset;
    u64 end_offset;
    u32 start_kind;
    u32 end_kind;
    u32 peers;  // RANGE or GROUPS: CURRENT ROW is the row's peer group
    u32 pad;
};

// Row i's frame [*s, *e) clipped to its window partition [*first, *last); *e >= *s.
__device__ __forceinline__ void frame_rows(RunLayout layout, FrameSpec f, u32 n, u32 i, u32* s,
                                           u32* e, u32* first, u32* last) {
    const Runs parts = partitions_of(layout);
    const Runs peer_runs = peers_of(layout);
    const u32 lo = run_start(parts, i);
    const u32 hi = run_end(parts, i, n);
    u64 a = frame_bound(f.start_kind, f.start_offset, i, lo, hi, f.peers != 0, peer_runs, n, 0);
    u64 b = frame_bound(f.end_kind, f.end_offset, i, lo, hi, f.peers != 0, peer_runs, n, 1);
    a = min(max(a, (u64)lo), (u64)hi);
    b = min(max(b, (u64)lo), (u64)hi);
    b = max(a, b);
    *s = (u32)a;
    *e = (u32)b;
    *first = lo;
    *last = hi;
}

// Row i's frame for every row: calls body(i, s, e, first, last, count), where [s, e) is
// the frame clipped to its window partition [first, last) and `count` its valid rows
// (`counts`: prefix counts of the valid rows, or null when every row counts), and writes
// what body returns, whether row i's result is valid, as a validity bitmap to
// `out_valid` (when given). Every lane of a warp takes the same turns (the bound is a
// multiple of 32), so that each bitmap word is one ballot.
template <typename F>
__device__ __forceinline__ void each_frame(RunLayout layout, FrameSpec frame, u32 n,
                                           const u64* __restrict__ counts,
                                           u32* __restrict__ out_valid, F body) {
    const u64 padded = ((u64)n + WARP - 1) / WARP * WARP;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < padded; t += stride) {
        bool valid = false;
        if (t < n) {
            const u32 i = (u32)t;
            u32 s, e, first, last;
            frame_rows(layout, frame, n, i, &s, &e, &first, &last);
            const u64 count = counts != nullptr ? counts[e] - counts[s] : (u64)(e - s);
            valid = body(i, s, e, first, last, count);
        }
        if (out_valid != nullptr) {
            const u32 word = __ballot_sync(0xffffffffu, valid);
            if (lane_id() == 0) out_valid[t / WARP] = word;
        }
    }
}
