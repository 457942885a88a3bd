// window_values.cu: window functions that pick one row's value, computed on the device over
// a run's sorted rows (launched by src/cuda/window/): lag, lead, first_value,
// last_value, nth_value, and min and max over frames.
//
//   window_value_w{1,2,4,8,16}      the value of another row (lag/lead: of the partition;
//                                   first/last/nth_value: of the frame), or the default
//   window_key_{i8..i64,u8..u64,f32,f64}, window_key_d128
//                                   each value as an unsigned key in its order (floats in
//                                   IEEE total order), inverted for max, so that both
//                                   extremes are a minimum; nulls are all ones, the
//                                   minimum's identity
//   window_unkey_*                  the keys back into values
//   window_sparse_{u64,u128}        level k of a sparse table: the minimum of rows
//                                   i .. i + 2^k, from level k - 1
//   window_segments_{u64,u128}      (key, starts a partition) pairs, forward or reversed,
//                                   for a running minimum that restarts at each partition
//   window_scan_*_seg_{u64,u128}    that running minimum (window.cuh's scans)
//   window_extreme_{u64,u128}       each frame's minimum key: two overlapping table entries
//                                   (bounded frames), or the running minimum at its far
//                                   end (frames from a partition's first row or to its
//                                   last); validity from the frame's count of values
#include "window.cuh"

// A value of T from the low `lo` and high `hi` 64 bits (the default of lag and lead).
template <typename T>
__device__ __forceinline__ T from_bits(u64 lo, u64 hi) {
    return (T)lo;
}
template <>
__device__ __forceinline__ Bytes16 from_bits<Bytes16>(u64 lo, u64 hi) {
    Bytes16 v;
    v.lo = lo;
    v.hi = hi;
    return v;
}

// kind: 0 shifted (param: rows back, negative ahead; within the partition), 1 first_value,
// 2 last_value, 3 nth_value (param: n, counted from the frame's end when negative).
template <typename T>
__device__ __forceinline__ void frame_value(RunLayout layout, FrameSpec frame, u32 n, u32 kind,
                                            long long param, const T* __restrict__ values,
                                            const u32* __restrict__ valid, u64 default_lo,
                                            u64 default_hi, u32 has_default,
                                            T* __restrict__ out, u32* __restrict__ out_valid) {
    each_frame(layout, frame, n, nullptr, out_valid,
               [&](u32 i, u32 s, u32 e, u32 first, u32 last, u64) {
                   long long row = -1;
                   if (kind == 0) {
                       const long long at = (long long)i - param;
                       if (at >= (long long)first && at < (long long)last) row = at;
                   } else if (s < e) {
                       if (kind == 1) {
                           row = s;
                       } else if (kind == 2) {
                           row = (long long)e - 1;
                       } else if (param > 0 && param <= (long long)(e - s)) {
                           row = (long long)s + param - 1;
                       } else if (param < 0 && -param <= (long long)(e - s)) {
                           row = (long long)e + param;
                       }
                   }
                   if (row >= 0) {
                       out[i] = values[row];
                       return valid_at(valid, (u64)row);
                   }
                   out[i] = from_bits<T>(default_lo, default_hi);
                   return kind == 0 && has_default != 0;
               });
}

#define VALUE_WIDTH(NAME, T)                                                                 \
    extern "C" __global__ void NAME(RunLayout layout, FrameSpec frame, u32 n, u32 kind,      \
                                    long long param, const T* __restrict__ values,           \
                                    const u32* __restrict__ valid, u64 default_lo,           \
                                    u64 default_hi, u32 has_default, T* __restrict__ out,    \
                                    u32* __restrict__ out_valid) {                           \
        frame_value<T>(layout, frame, n, kind, param, values, valid, default_lo, default_hi,  \
                       has_default, out, out_valid);                                         \
    }

VALUE_WIDTH(window_value_w1, u8)
VALUE_WIDTH(window_value_w2, u16)
VALUE_WIDTH(window_value_w4, u32)
VALUE_WIDTH(window_value_w8, u64)
VALUE_WIDTH(window_value_w16, Bytes16)

// ---- min and max ----

// Order-preserving keys of one type, and back.
#define SIGNED_KEYS(SUFFIX, T, UT, BITS)                                                     \
    __device__ __forceinline__ u64 key_of_##SUFFIX(T v) {                                    \
        return (u64)((UT)v ^ ((UT)1 << (BITS - 1)));                                         \
    }                                                                                        \
    __device__ __forceinline__ T value_of_##SUFFIX(u64 k) {                                  \
        return (T)((UT)k ^ ((UT)1 << (BITS - 1)));                                           \
    }
#define UNSIGNED_KEYS(SUFFIX, T)                                                             \
    __device__ __forceinline__ u64 key_of_##SUFFIX(T v) { return (u64)v; }                   \
    __device__ __forceinline__ T value_of_##SUFFIX(u64 k) { return (T)k; }

SIGNED_KEYS(i8, signed char, u8, 8)
SIGNED_KEYS(i16, short, u16, 16)
SIGNED_KEYS(i32, int, u32, 32)
SIGNED_KEYS(i64, long long, u64, 64)
UNSIGNED_KEYS(u8, u8)
UNSIGNED_KEYS(u16, u16)
UNSIGNED_KEYS(u32, u32)
UNSIGNED_KEYS(u64, u64)

// IEEE total order: negative values have every bit flipped, the others only the sign bit.
__device__ __forceinline__ u64 key_of_f32(float v) {
    const u32 b = __float_as_uint(v);
    return (u64)((b & 0x80000000u) ? ~b : (b | 0x80000000u));
}
__device__ __forceinline__ float value_of_f32(u64 k) {
    const u32 b = (u32)k;
    return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}
__device__ __forceinline__ u64 key_of_f64(double v) {
    const u64 b = (u64)__double_as_longlong(v);
    return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
__device__ __forceinline__ double value_of_f64(u64 k) {
    return __longlong_as_double((long long)((k & 0x8000000000000000ull)
                                                ? (k & 0x7fffffffffffffffull)
                                                : ~k));
}

#define KEY_KERNELS(SUFFIX, T)                                                               \
    extern "C" __global__ void window_key_##SUFFIX(const T* __restrict__ values,              \
                                                   const u32* __restrict__ valid, u32 n,     \
                                                   u32 invert, u64* __restrict__ keys) {     \
        const u32 stride = gridDim.x * blockDim.x;                                           \
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {            \
            const u64 k = key_of_##SUFFIX(values[i]);                                        \
            keys[i] = !valid_at(valid, i) ? ~0ull : (invert ? ~k : k);                       \
        }                                                                                    \
    }                                                                                        \
    extern "C" __global__ void window_unkey_##SUFFIX(const u64* __restrict__ keys, u32 n,    \
                                                     u32 invert, T* __restrict__ values) {   \
        const u32 stride = gridDim.x * blockDim.x;                                           \
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {            \
            values[i] = value_of_##SUFFIX(invert ? ~keys[i] : keys[i]);                      \
        }                                                                                    \
    }

KEY_KERNELS(i8, signed char)
KEY_KERNELS(i16, short)
KEY_KERNELS(i32, int)
KEY_KERNELS(i64, long long)
KEY_KERNELS(u8, u8)
KEY_KERNELS(u16, u16)
KEY_KERNELS(u32, u32)
KEY_KERNELS(u64, u64)
KEY_KERNELS(f32, float)
KEY_KERNELS(f64, double)

// Decimal128: the sign bit of the high word flipped.
extern "C" __global__ void window_key_d128(const U128* __restrict__ values,
                                           const u32* __restrict__ valid, u32 n, u32 invert,
                                           U128* __restrict__ keys) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        U128 k = values[i];
        k.hi ^= 0x8000000000000000ull;
        keys[i] = !valid_at(valid, i) ? all_ones() : (invert ? inverted(k) : k);
    }
}
extern "C" __global__ void window_unkey_d128(const U128* __restrict__ keys, u32 n, u32 invert,
                                             U128* __restrict__ values) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        U128 k = invert ? inverted(keys[i]) : keys[i];
        k.hi ^= 0x8000000000000000ull;
        values[i] = k;
    }
}

// Level `level` (>= 1) of a sparse table of n entries a level, level 0 being the keys:
// entry i is the minimum of keys i .. i + 2^level (fewer past the end).
template <typename K>
__device__ __forceinline__ void sparse_level(K* __restrict__ table, u32 n, u32 level) {
    const K* below = table + (u64)(level - 1) * n;
    K* here = table + (u64)level * n;
    const u32 half = 1u << (level - 1);
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        here[i] = (u64)i + half < n ? least(below[i], below[i + half]) : below[i];
    }
}

extern "C" __global__ void window_sparse_u64(u64* __restrict__ table, u32 n, u32 level) {
    sparse_level<u64>(table, n, level);
}
extern "C" __global__ void window_sparse_u128(U128* __restrict__ table, u32 n, u32 level) {
    sparse_level<U128>(table, n, level);
}

SCAN_KERNELS(seg_u64, SegU64)
SCAN_KERNELS(seg_u128, SegU128)

// The pairs of a running minimum from each partition's first row (reverse 0), or from
// each partition's last row backwards (reverse 1: row i at n - 1 - i). part_ids as in
// window.cuh's Runs.
template <typename K, typename G>
__device__ __forceinline__ void segments(const K* __restrict__ keys,
                                         const u32* __restrict__ part_ids, u32 n, u32 reverse,
                                         G* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        G g = zero_of<G>();
        g.key = keys[i];
        if (reverse) {
            g.head = (i + 1 == n || part_ids[i + 2] != part_ids[i + 1]) ? 1u : 0u;
            out[n - 1 - i] = g;
        } else {
            g.head = part_ids[i + 1] != part_ids[i] ? 1u : 0u;
            out[i] = g;
        }
    }
}

extern "C" __global__ void window_segments_u64(const u64* __restrict__ keys,
                                               const u32* __restrict__ part_ids, u32 n,
                                               u32 reverse, SegU64* __restrict__ out) {
    segments<u64, SegU64>(keys, part_ids, n, reverse, out);
}
extern "C" __global__ void window_segments_u128(const U128* __restrict__ keys,
                                                const u32* __restrict__ part_ids, u32 n,
                                                u32 reverse, SegU128* __restrict__ out) {
    segments<U128, SegU128>(keys, part_ids, n, reverse, out);
}

// Each frame's minimum key. `table` (levels > 0 entries a row) for frames of bounded
// length; else `running`, scanned forward (from_end 0: every frame starts at its
// partition's first row) or reversed (from_end 1: every frame ends at its last). `counts`:
// prefix counts of the valid rows, or null when every row is valid.
template <typename K, typename G>
__device__ __forceinline__ void frame_extreme(RunLayout layout, FrameSpec frame, u32 n,
                                              const u64* __restrict__ counts,
                                              const K* __restrict__ table, u32 levels,
                                              const G* __restrict__ running, u32 from_end,
                                              K* __restrict__ out, u32* __restrict__ out_valid) {
    each_frame(layout, frame, n, counts, out_valid,
               [&](u32 i, u32 s, u32 e, u32, u32, u64 count) {
                   K key = zero_of<K>();
                   if (count > 0) {
                       if (running != nullptr) {
                           key = from_end ? running[n - 1 - s].key : running[e - 1].key;
                       } else {
                           const u32 level = 31 - __clz(e - s);
                           const K* row = table + (u64)min(level, levels - 1) * n;
                           key = least(row[s], row[e - (1u << level)]);
                       }
                   }
                   out[i] = key;
                   return count > 0;
               });
}

extern "C" __global__ void window_extreme_u64(RunLayout layout, FrameSpec frame, u32 n,
                                              const u64* __restrict__ counts,
                                              const u64* __restrict__ table, u32 levels,
                                              const SegU64* __restrict__ running, u32 from_end,
                                              u64* __restrict__ out, u32* __restrict__ out_valid) {
    frame_extreme<u64, SegU64>(layout, frame, n, counts, table, levels, running, from_end, out,
                               out_valid);
}
extern "C" __global__ void window_extreme_u128(RunLayout layout, FrameSpec frame, u32 n,
                                               const u64* __restrict__ counts,
                                               const U128* __restrict__ table, u32 levels,
                                               const SegU128* __restrict__ running,
                                               u32 from_end, U128* __restrict__ out,
                                               u32* __restrict__ out_valid) {
    frame_extreme<U128, SegU128>(layout, frame, n, counts, table, levels, running, from_end,
                                 out, out_valid);
}
