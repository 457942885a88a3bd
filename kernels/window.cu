// window.cu: window functions computed on the device over a run's sorted rows (launched by
// src/cuda/window.rs), so that a window over a gpusort sort reads its arguments where the
// device gather already put them.
//
//   window_distinct_w{1,2,4,8,16}   flags[i] |= mark where row i differs from row i - 1 on
//                                   one key column (nulls equal each other; values compare
//                                   by their bits, as arrow's total order does)
//   window_mark_rows                flags[rows[k]] |= both marks: rows that start a window
//                                   partition whatever their keys
//   window_load_flags               out[i + 1] = whether row i carries a flag bit (row 0
//                                   always starts a run)
//   window_load_count               out[i + 1] = whether row i is valid
//   window_load_{i,u}{8,16,32,64}   out[i + 1] = row i's value widened to 64 bits, 0 if null
//   window_load_d128                out[i + 1] = row i's 128-bit value, 0 if null
//   window_scan_{reduce,tiles,apply}_{u32,u64,u128}
//                                   an inclusive prefix sum in place, in three passes: each
//                                   tile's total, the tiles' exclusive prefix (one block),
//                                   each tile scanned from its prefix
//   window_starts                   starts[id - 1] = i for the row i that starts run id
//   window_ranking                  row_number, rank, dense_rank
//   window_frame_{u64,u128}         sum and count over each row's frame, as differences of
//                                   the prefix sums; validity as a bitmap (ballot)
//
// The prefix arrays have n + 1 entries, entry 0 being 0, so that the sum of rows s..e is
// P[e] - P[s]. Sums wrap (two's complement), as DataFusion's integer and decimal sums do.
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
__device__ __forceinline__ bool same(u8 a, u8 b) { return a == b; }
__device__ __forceinline__ bool same(u16 a, u16 b) { return a == b; }
__device__ __forceinline__ bool same(u32 a, u32 b) { return a == b; }
__device__ __forceinline__ bool same(u64 a, u64 b) { return a == b; }
__device__ __forceinline__ bool same(Bytes16 a, Bytes16 b) { return a.lo == b.lo && a.hi == b.hi; }

template <typename T>
__device__ __forceinline__ void distinct_rows(const T* __restrict__ values,
                                              const u32* __restrict__ valid, u32 n, u8 mark,
                                              u8* __restrict__ flags) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        bool differs = i == 0;
        if (!differs) {
            const bool here = valid_at(valid, i), before = valid_at(valid, i - 1);
            differs = here != before || (here && !same(values[i], values[i - 1]));
        }
        if (differs) flags[i] |= mark;
    }
}

#define DISTINCT_WIDTH(NAME, T)                                                             \
    extern "C" __global__ void NAME(const T* __restrict__ values, const u32* __restrict__ valid, \
                                    u32 n, u32 mark, u8* __restrict__ flags) {             \
        distinct_rows<T>(values, valid, n, (u8)mark, flags);                                \
    }

DISTINCT_WIDTH(window_distinct_w1, u8)
DISTINCT_WIDTH(window_distinct_w2, u16)
DISTINCT_WIDTH(window_distinct_w4, u32)
DISTINCT_WIDTH(window_distinct_w8, u64)
DISTINCT_WIDTH(window_distinct_w16, Bytes16)

// Rows that start a window partition whatever their keys (the first rows of the parts of a
// shared sort, each an output partition of its own).
extern "C" __global__ void window_mark_rows(const u32* __restrict__ rows, u32 count,
                                            u8* __restrict__ flags) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < count; k += stride) {
        flags[rows[k]] |= 3;
    }
}

extern "C" __global__ void window_load_flags(const u8* __restrict__ flags, u32 n, u32 mark,
                                             u32* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (i == 0) out[0] = 0;
        out[i + 1] = (i == 0 || (flags[i] & mark) != 0) ? 1u : 0u;
    }
}

extern "C" __global__ void window_load_count(const u32* __restrict__ valid, u32 n,
                                             u64* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (i == 0) out[0] = 0;
        out[i + 1] = valid_at(valid, i) ? 1ull : 0ull;
    }
}

// Integers widen to 64 bits by their own sign: the sum's two's complement bits.
#define LOAD_INT(NAME, T)                                                                    \
    extern "C" __global__ void NAME(const T* __restrict__ values, const u32* __restrict__ valid, \
                                    u32 n, u64* __restrict__ out) {                          \
        const u32 stride = gridDim.x * blockDim.x;                                           \
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {            \
            if (i == 0) out[0] = 0;                                                          \
            out[i + 1] = valid_at(valid, i) ? (u64)(long long)values[i] : 0ull;              \
        }                                                                                    \
    }
#define LOAD_UINT(NAME, T)                                                                   \
    extern "C" __global__ void NAME(const T* __restrict__ values, const u32* __restrict__ valid, \
                                    u32 n, u64* __restrict__ out) {                          \
        const u32 stride = gridDim.x * blockDim.x;                                           \
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {            \
            if (i == 0) out[0] = 0;                                                          \
            out[i + 1] = valid_at(valid, i) ? (u64)values[i] : 0ull;                         \
        }                                                                                    \
    }

LOAD_INT(window_load_i8, signed char)
LOAD_INT(window_load_i16, short)
LOAD_INT(window_load_i32, int)
LOAD_INT(window_load_i64, long long)
LOAD_UINT(window_load_u8, u8)
LOAD_UINT(window_load_u16, u16)
LOAD_UINT(window_load_u32, u32)
LOAD_UINT(window_load_u64, u64)

extern "C" __global__ void window_load_d128(const U128* __restrict__ values,
                                            const u32* __restrict__ valid, u32 n,
                                            U128* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (i == 0) out[0] = zero_of<U128>();
        out[i + 1] = valid_at(valid, i) ? values[i] : zero_of<U128>();
    }
}

// The exclusive prefix of one value per thread across the block, and the block's total.
template <typename S>
__device__ __forceinline__ S block_exclusive(S mine, S* total) {
    __shared__ S warp_totals[WINDOW_THREADS / WARP];
    S inclusive = mine;
#pragma unroll
    for (u32 o = 1; o < WARP; o <<= 1) {
        const S up = shfl_up(inclusive, o);
        if (lane_id() >= o) inclusive = plus(inclusive, up);
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

SCAN_KERNELS(u32, u32)
SCAN_KERNELS(u64, u64)
SCAN_KERNELS(u128, U128)

// ids: the inclusive count of run starts (n + 1 entries), so row i is in run ids[i + 1].
extern "C" __global__ void window_starts(const u8* __restrict__ flags,
                                         const u32* __restrict__ ids, u32 n, u32 mark,
                                         u32* __restrict__ starts) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (i == 0 || (flags[i] & mark) != 0) starts[ids[i + 1] - 1] = i;
    }
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

// kind: 0 row_number, 1 rank, 2 dense_rank.
extern "C" __global__ void window_ranking(const u32* __restrict__ part_ids,
                                          const u32* __restrict__ part_starts,
                                          const u32* __restrict__ peer_ids,
                                          const u32* __restrict__ peer_starts, u32 n, u32 kind,
                                          u64* __restrict__ out) {
    const Runs parts = {part_ids, part_starts};
    const Runs peers = {peer_ids, peer_starts};
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u32 first = run_start(parts, i);
        u64 value;
        if (kind == 0) {
            value = (u64)(i - first) + 1;
        } else if (kind == 1) {
            value = (u64)(run_start(peers, i) - first) + 1;
        } else {
            value = (u64)(peer_ids[i + 1] - peer_ids[first + 1]) + 1;
        }
        out[i] = value;
    }
}

// Frame ends, as src/window/frames.rs defines them.
#define BOUND_UNBOUNDED_PRECEDING 0
#define BOUND_PRECEDING 1
#define BOUND_CURRENT_ROW 2
#define BOUND_FOLLOWING 3
#define BOUND_UNBOUNDED_FOLLOWING 4

// One end of row i's frame (exclusive when `past` is 1), before it is clipped to the
// window partition [first, last). `peers`: RANGE without offsets (CURRENT ROW is the peer
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
        default:
            return last;
    }
}

// Sum (mode 0) or count (mode 1) of the argument over each row's frame. `prefix`: the
// argument's prefix sums (sum only); `counts`: prefix counts of its valid rows, or null
// when every row counts. A sum over a frame with no valid row is null.
template <typename S>
__device__ __forceinline__ void frame_aggregate(const u32* __restrict__ part_ids,
                                                const u32* __restrict__ part_starts,
                                                const u32* __restrict__ peer_ids,
                                                const u32* __restrict__ peer_starts, u32 n,
                                                u32 start_kind, u64 start_offset, u32 end_kind,
                                                u64 end_offset, u32 peers, u32 mode,
                                                const S* __restrict__ prefix,
                                                const u64* __restrict__ counts,
                                                S* __restrict__ out_sums,
                                                u64* __restrict__ out_counts,
                                                u32* __restrict__ out_valid) {
    const Runs parts = {part_ids, part_starts};
    const Runs peer_runs = {peer_ids, peer_starts};
    // Every lane of a warp takes the same turns: the bound is a multiple of 32.
    const u64 padded = ((u64)n + WARP - 1) / WARP * WARP;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < padded; t += stride) {
        bool valid = false;
        if (t < n) {
            const u32 i = (u32)t;
            const u32 first = run_start(parts, i);
            const u32 last = run_end(parts, i, n);
            u64 s = frame_bound(start_kind, start_offset, i, first, last, peers != 0, peer_runs,
                                n, 0);
            u64 e = frame_bound(end_kind, end_offset, i, first, last, peers != 0, peer_runs, n, 1);
            s = min(max(s, (u64)first), (u64)last);
            e = min(max(e, (u64)first), (u64)last);
            e = max(e, s);
            const u64 count = counts != nullptr ? counts[e] - counts[s] : e - s;
            if (mode == 1) {
                out_counts[i] = count;
                valid = true;
            } else {
                valid = count > 0;
                out_sums[i] = valid ? minus(prefix[e], prefix[s]) : zero_of<S>();
            }
        }
        if (out_valid != nullptr) {
            const u32 word = __ballot_sync(0xffffffffu, valid);
            if (lane_id() == 0) out_valid[t / WARP] = word;
        }
    }
}

#define FRAME_KERNEL(NAME, S)                                                                \
    extern "C" __global__ void NAME(                                                         \
        const u32* __restrict__ part_ids, const u32* __restrict__ part_starts,               \
        const u32* __restrict__ peer_ids, const u32* __restrict__ peer_starts, u32 n,        \
        u32 start_kind, u64 start_offset, u32 end_kind, u64 end_offset, u32 peers, u32 mode, \
        const S* __restrict__ prefix, const u64* __restrict__ counts, S* __restrict__ out_sums, \
        u64* __restrict__ out_counts, u32* __restrict__ out_valid) {                         \
        frame_aggregate<S>(part_ids, part_starts, peer_ids, peer_starts, n, start_kind,      \
                           start_offset, end_kind, end_offset, peers, mode, prefix, counts,  \
                           out_sums, out_counts, out_valid);                                 \
    }

FRAME_KERNEL(window_frame_u64, u64)
FRAME_KERNEL(window_frame_u128, U128)
