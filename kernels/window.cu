// window.cu: window functions computed on the device over a run's sorted rows (launched by
// src/cuda/window/), so that a window over a gpusort sort reads its arguments where the
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
//   window_ranking                  row_number, rank, dense_rank, percent_rank, cume_dist,
//                                   ntile
//   window_frame_{u64,u128}         sum and count over each row's frame, as differences of
//                                   the prefix sums; validity as a bitmap (ballot)
//   window_average_d128             decimal averages from the frames' sums and counts
//   window_load_float_{i8..i64,u8..u64,f32,f64}
//                                   out[i + 1] = row i's value as a double-double (0 if
//                                   null); a NaN or infinity sets *non_finite
//   window_scan_*_dd                double-double prefix sums
//   window_frame_dd                 float sum or average over each row's frame, rounded
//                                   from the difference of two double-double prefixes
//   window_range_bound_w{1,2,4,8}   one end of each row's RANGE frame with an offset: a
//                                   binary search for its target within the partition
//
// Value functions and min/max are in window_values.cu; what both files share (scans, runs,
// frames) is in window.cuh.
//
// The prefix arrays have n + 1 entries, entry 0 being 0, so that the sum of rows s..e is
// P[e] - P[s]. Sums wrap (two's complement), as DataFusion's integer and decimal sums do.

#include "window.cuh"

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

// Ranking functions, from each row's window partition and peer group. kind: 0 row_number,
// 1 rank, 2 dense_rank, 3 percent_rank, 4 cume_dist (both as f64 bits), 5 ntile(param).
extern "C" __global__ void window_ranking(RunLayout layout, u32 n, u32 kind, u64 param,
                                          u64* __restrict__ out) {
    const Runs parts = partitions_of(layout);
    const Runs peers = peers_of(layout);
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u32 first = run_start(parts, i);
        u64 value;
        if (kind == 0) {
            value = (u64)(i - first) + 1;
        } else if (kind == 1) {
            value = (u64)(run_start(peers, i) - first) + 1;
        } else if (kind == 2) {
            value = (u64)(layout.peer_ids[i + 1] - layout.peer_ids[first + 1]) + 1;
        } else {
            const u64 rows = (u64)(run_end(parts, i, n) - first);
            if (kind == 3) {
                const double rank = (double)(run_start(peers, i) - first);
                value = (u64)__double_as_longlong(rank / fmax((double)rows - 1.0, 1.0));
            } else if (kind == 4) {
                const double upto = (double)(run_end(peers, i, n) - first);
                value = (u64)__double_as_longlong(upto / (double)rows);
            } else {
                // The first rows % param buckets hold one row more, as DataFusion's ntile.
                const u64 row = (u64)(i - first);
                const u64 base = rows / param, remainder = rows % param;
                const u64 large_rows = remainder * (base + 1);
                value = row < large_rows ? row / (base + 1) + 1
                                         : remainder + (row - large_rows) / base + 1;
            }
        }
        out[i] = value;
    }
}

// Sum (mode 0) or count (mode 1) of the argument over each row's frame. `prefix`: the
// argument's prefix sums (sum only); `counts`: prefix counts of its valid rows, or null
// when every row counts. A sum over a frame with no valid row is null. `out_counts`, when
// given with mode 0, receives the counts too (for averages).
template <typename S>
__device__ __forceinline__ void frame_aggregate(RunLayout layout, FrameSpec frame, u32 n,
                                                u32 mode, const S* __restrict__ prefix,
                                                const u64* __restrict__ counts,
                                                S* __restrict__ out_sums,
                                                u64* __restrict__ out_counts,
                                                u32* __restrict__ out_valid) {
    each_frame(layout, frame, n, counts, out_valid,
               [&](u32 i, u32 s, u32 e, u32, u32, u64 count) {
                   if (out_counts != nullptr) out_counts[i] = count;
                   if (mode == 1) return true;
                   const bool valid = count > 0;
                   out_sums[i] = valid ? minus(prefix[e], prefix[s]) : zero_of<S>();
                   return valid;
               });
}

#define FRAME_KERNEL(NAME, S)                                                                \
    extern "C" __global__ void NAME(RunLayout layout, FrameSpec frame, u32 n, u32 mode,      \
                                    const S* __restrict__ prefix,                            \
                                    const u64* __restrict__ counts, S* __restrict__ out_sums, \
                                    u64* __restrict__ out_counts, u32* __restrict__ out_valid) { \
        frame_aggregate<S>(layout, frame, n, mode, prefix, counts, out_sums, out_counts,     \
                           out_valid);                                                       \
    }

FRAME_KERNEL(window_frame_u64, u64)
FRAME_KERNEL(window_frame_u128, U128)

__device__ __forceinline__ U128 negated(U128 a) { return minus(zero_of<U128>(), a); }

// a < b, unsigned.
__device__ __forceinline__ bool below(U128 a, U128 b) {
    return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}

// DataFusion's decimal average of each frame: its sum times `multiplier` (the change of
// scale, checked), divided by its count truncating toward zero, within the output's
// precision (|value| < `limit`). A frame where DataFusion would fail sets *overflow, and
// the host recomputes the column (and fails as DataFusion does). Rows with no valid value
// are left 0 (null by the sums' validity). Counts are below 2^32.
extern "C" __global__ void window_average_d128(const U128* __restrict__ sums,
                                               const u64* __restrict__ counts, u32 n,
                                               u64 multiplier, U128 limit,
                                               U128* __restrict__ out,
                                               u32* __restrict__ overflow) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u64 count = counts[i];
        if (count == 0) {
            out[i] = zero_of<U128>();
            continue;
        }
        const U128 sum = sums[i];
        const bool negative = (sum.hi >> 63) != 0;
        const U128 size = negative ? negated(sum) : sum;
        // |sum| * multiplier in 192 bits: it must stay below 2^127.
        const u64 low_hi = __umul64hi(size.lo, multiplier);
        const u64 high_lo = size.hi * multiplier;
        const u64 high_hi = __umul64hi(size.hi, multiplier);
        const u64 hi = low_hi + high_lo;
        if ((size.hi >> 63) != 0 || high_hi != 0 || hi < low_hi || (hi >> 63) != 0) {
            *overflow = 1;
            out[i] = zero_of<U128>();
            continue;
        }
        const u64 lo = size.lo * multiplier;
        // (hi, lo) / count, 32 bits at a time below the high word (count < 2^32).
        const u64 q_hi = hi / count;
        const u64 x1 = ((hi % count) << 32) | (lo >> 32);
        const u64 q1 = x1 / count;
        const u64 x0 = ((x1 % count) << 32) | (lo & 0xffffffffull);
        const u64 q0 = x0 / count;
        U128 quotient;
        quotient.lo = (q1 << 32) | q0;
        quotient.hi = q_hi;
        if (!below(quotient, limit)) {
            *overflow = 1;
            out[i] = zero_of<U128>();
            continue;
        }
        out[i] = negative ? negated(quotient) : quotient;
    }
}

// ---- float sums: double-double prefix sums ----
//
// As src/window/sums.rs on the host: a frame's sum is P[e] - P[s] rounded to f64, with
// about 106 significant bits in the prefixes, so cancellation across a long partition
// costs nothing visible. Non-finite values are not summed here: a column that holds one
// (or whose prefixes overflow) sets *non_finite, and the host computes it.

struct __align__(16) DD {
    double hi, lo;
};

// a + b and its rounding error (Knuth's two-sum), in round-to-nearest without contraction.
__device__ __forceinline__ void two_sum(double a, double b, double* sum, double* error) {
    const double s = __dadd_rn(a, b);
    const double b_part = __dsub_rn(s, a);
    *sum = s;
    *error = __dadd_rn(__dsub_rn(a, __dsub_rn(s, b_part)), __dsub_rn(b, b_part));
}

__device__ __forceinline__ DD plus(DD a, DD b) {
    double sum, error;
    two_sum(a.hi, b.hi, &sum, &error);
    error = __dadd_rn(__dadd_rn(error, a.lo), b.lo);
    DD r;
    r.hi = __dadd_rn(sum, error);
    r.lo = __dsub_rn(error, __dsub_rn(r.hi, sum));
    return r;
}
template <> __device__ __forceinline__ DD zero_of<DD>() {
    DD z;
    z.hi = 0.0;
    z.lo = 0.0;
    return z;
}
__device__ __forceinline__ DD shfl_up(DD v, u32 o) {
    DD r;
    r.hi = __shfl_up_sync(0xffffffffu, v.hi, o);
    r.lo = __shfl_up_sync(0xffffffffu, v.lo, o);
    return r;
}

SCAN_KERNELS(dd, DD)

// Integers convert to the nearest double, as arrow's cast to Float64 does.
#define LOAD_FLOAT(NAME, T)                                                                  \
    extern "C" __global__ void NAME(const T* __restrict__ values, const u32* __restrict__ valid, \
                                    u32 n, DD* __restrict__ out, u32* __restrict__ non_finite) { \
        const u32 stride = gridDim.x * blockDim.x;                                           \
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {            \
            if (i == 0) out[0] = zero_of<DD>();                                              \
            double x = valid_at(valid, i) ? (double)values[i] : 0.0;                         \
            if (!isfinite(x)) {                                                              \
                *non_finite = 1;                                                             \
                x = 0.0;                                                                     \
            }                                                                                \
            DD v;                                                                            \
            v.hi = x;                                                                        \
            v.lo = 0.0;                                                                      \
            out[i + 1] = v;                                                                  \
        }                                                                                    \
    }

LOAD_FLOAT(window_load_float_i8, signed char)
LOAD_FLOAT(window_load_float_i16, short)
LOAD_FLOAT(window_load_float_i32, int)
LOAD_FLOAT(window_load_float_i64, long long)
LOAD_FLOAT(window_load_float_u8, u8)
LOAD_FLOAT(window_load_float_u16, u16)
LOAD_FLOAT(window_load_float_u32, u32)
LOAD_FLOAT(window_load_float_u64, u64)
LOAD_FLOAT(window_load_float_f32, float)
LOAD_FLOAT(window_load_float_f64, double)

// The sum (average 0) or average (1) of each row's frame, as the host computes it: the
// rounded difference of the prefixes, divided by the count of valid rows for averages.
// A frame with no valid row is null (and 0). A prefix that is not finite (the column's
// sums overflow) sets *non_finite.
extern "C" __global__ void window_frame_dd(RunLayout layout, FrameSpec frame, u32 n,
                                           u32 average, const DD* __restrict__ prefix,
                                           const u64* __restrict__ counts,
                                           double* __restrict__ out,
                                           u32* __restrict__ out_valid,
                                           u32* __restrict__ non_finite) {
    each_frame(layout, frame, n, counts, out_valid,
               [&](u32 i, u32 s, u32 e, u32, u32, u64 count) {
                   double value = 0.0;
                   if (count > 0) {
                       const DD upto = prefix[e];
                       DD before = prefix[s];
                       if (!isfinite(upto.hi) || !isfinite(before.hi)) *non_finite = 1;
                       before.hi = -before.hi;
                       before.lo = -before.lo;
                       const DD d = plus(upto, before);
                       value = __dadd_rn(d.hi, d.lo);
                       if (average) value = __ddiv_rn(value, (double)count);
                   }
                   out[i] = value;
                   return count > 0;
               });
}

// ---- RANGE frames with value offsets ----

// How one end of a RANGE frame with an offset is searched (`RangeSearch` in
// src/cuda/window/range.rs). Keys are unsigned in ascending value order (signed values
// with the sign bit flipped); min_key..=max_key is the range of the key's type.
struct RangeSearch {
    u64 offset;
    u64 min_key;
    u64 max_key;
    u32 adds;         // the target is the key plus the offset (else minus)
    u32 preceding;    // a target outside the type collapses to the partition's start
    u32 is_end;       // the bound is the first row past the target (else the first reaching it)
    u32 descending;   // the rows are sorted descending
    u32 nulls_first;  // a partition's null keys come first (else last)
    u32 is_signed;    // two's complement keys
    u32 clamps;       // an unsigned key below the offset has target 0 (DataFusion's rule)
    u32 is_float;     // IEEE keys (their bits): targets in the key's precision, compared in
                      // total order; `offset` holds the offset's bits
};

// A float key's bits as an unsigned key in IEEE total order.
__device__ __forceinline__ u64 total_key(u8 bits) { return bits; }
__device__ __forceinline__ u64 total_key(u16 bits) { return bits; }
__device__ __forceinline__ u64 total_key(u32 bits) {
    return (u64)(bits ^ ((bits >> 31) ? 0xffffffffu : 0x80000000u));
}
__device__ __forceinline__ u64 total_key(u64 bits) {
    return bits ^ ((bits >> 63) ? ~0ull : 0x8000000000000000ull);
}

// A float key moved by the offset in its own precision, as the host's arithmetic gives it:
// a NaN stays itself (quieted), as x86 and ARM propagate it; ±inf stays.
__device__ __forceinline__ u8 float_moved(u8 bits, u64 offset, u32 adds) { return bits; }
__device__ __forceinline__ u16 float_moved(u16 bits, u64 offset, u32 adds) { return bits; }
__device__ __forceinline__ u32 float_moved(u32 bits, u64 offset, u32 adds) {
    const float v = __uint_as_float(bits);
    if (isnan(v)) return bits | 0x00400000u;
    const float d = __uint_as_float((u32)offset);
    return __float_as_uint(adds ? __fadd_rn(v, d) : __fsub_rn(v, d));
}
__device__ __forceinline__ u64 float_moved(u64 bits, u64 offset, u32 adds) {
    const double v = __longlong_as_double((long long)bits);
    if (isnan(v)) return bits | 0x0008000000000000ull;
    const double d = __longlong_as_double((long long)offset);
    return (u64)__double_as_longlong(adds ? __dadd_rn(v, d) : __dsub_rn(v, d));
}

template <typename T>
__device__ __forceinline__ u64 ordered_key(T raw, u32 is_signed) {
    const u64 v = (u64)raw;
    if (!is_signed) return v;
    const u32 shift = 64 - 8 * sizeof(T);
    return (u64)(((long long)(v << shift)) >> shift) ^ 0x8000000000000000ull;
}

// The first row in [lo, hi) where `holds`, which holds from some row on (hi if none).
template <typename P>
__device__ __forceinline__ u32 first_where(u32 lo, u32 hi, P holds) {
    while (lo < hi) {
        const u32 mid = lo + (hi - lo) / 2;
        if (holds(mid)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

// Each row's bound for one end of a RANGE frame with an offset, as src/window/range.rs
// finds it: a null key's frame is its partition's nulls; a target outside the key's type
// collapses (floats never fall outside: they reach ±inf); else a binary search over the
// partition's keys. Written bit-inverted with
// whether the row starts a partition, for the running maximum that follows.
template <typename T>
__device__ __forceinline__ void range_bound(RunLayout layout, u32 n, const T* __restrict__ keys,
                                            const u32* __restrict__ valid, RangeSearch r,
                                            SegU64* __restrict__ out) {
    const Runs parts = partitions_of(layout);
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u32 first = run_start(parts, i);
        const u32 last = run_end(parts, i, n);
        // The partition's keys [lo, hi), its nulls the rest.
        u32 lo = first, hi = last;
        if (valid != nullptr) {
            if (r.nulls_first) {
                lo = first_where(first, last, [&](u32 row) { return valid_at(valid, row); });
            } else {
                hi = first_where(first, last, [&](u32 row) { return !valid_at(valid, row); });
            }
        }
        u32 bound;
        if (!valid_at(valid, i)) {
            const u32 nulls_lo = r.nulls_first ? first : hi;
            const u32 nulls_hi = r.nulls_first ? lo : last;
            bound = r.is_end ? nulls_hi : nulls_lo;
        } else {
            const u64 key = r.is_float ? total_key(keys[i]) : ordered_key<T>(keys[i], r.is_signed);
            bool outside = !r.is_float && (key < r.min_key || key > r.max_key);
            u64 target = 0;
            if (r.is_float) {
                target = total_key(float_moved(keys[i], r.offset, r.adds));
            } else if (!outside) {
                if (r.adds) {
                    outside = r.offset > r.max_key - key;
                    target = key + r.offset;
                } else if (key - r.min_key < r.offset) {
                    outside = !r.clamps;
                    target = r.min_key;
                } else {
                    target = key - r.offset;
                }
            }
            if (outside) {
                bound = r.preceding ? first : last;
            } else {
                const u64 goal = r.descending ? ~target : target;
                bound = first_where(lo, hi, [&](u32 row) {
                    const u64 k = r.is_float ? total_key(keys[row])
                                             : ordered_key<T>(keys[row], r.is_signed);
                    const u64 at = r.descending ? ~k : k;
                    return r.is_end ? at > goal : at >= goal;
                });
            }
        }
        SegU64 g;
        g.key = ~(u64)bound;
        g.head = layout.part_ids[i + 1] != layout.part_ids[i] ? 1u : 0u;
        g.pad = 0;
        out[i] = g;
    }
}

#define RANGE_BOUND(NAME, T)                                                                 \
    extern "C" __global__ void NAME(RunLayout layout, u32 n, const T* __restrict__ keys,     \
                                    const u32* __restrict__ valid, RangeSearch search,       \
                                    SegU64* __restrict__ out) {                              \
        range_bound<T>(layout, n, keys, valid, search, out);                                 \
    }

RANGE_BOUND(window_range_bound_w1, u8)
RANGE_BOUND(window_range_bound_w2, u16)
RANGE_BOUND(window_range_bound_w4, u32)
RANGE_BOUND(window_range_bound_w8, u64)
