// encode.cu: fixed-width sort keys encoded on the device from raw Arrow buffers
// (launched by src/cuda/encode.rs; the encoding is docs/ordering.md's, the same as the
// host's in src/keys/).
//
//   encode_field_stats   one read of a column: min, max, OR and AND of one field over the
//                        valid rows (the host turns them into the field's reduction and
//                        its place in the packed words)
//   encode_pack_field    a second read: each row's reduced field ORed into its key word
//   encode_partition_ids each row's hash partition looked up from its limb in a table the
//                        host made over the column's value range (src/exec/id_table.rs),
//                        and the rows per partition: a key column made on the device
//
// A field is either one limb of a column's values (read as `read_limb` says, inverted for
// DESC, 0 under a null) or the column's null flag (NULLS FIRST: null 0, value 1; NULLS
// LAST: value 0, null 1). Bitmaps (validity, Boolean values) are little-endian bit arrays
// read as 32-bit words, padded to whole words by the host.
//
// Byte-like columns (strings, binaries) arrive as 16-byte Arrow views: length, then the
// value itself when it has at most 12 bytes, else its first 4 bytes, a buffer number and
// an offset. The host renumbers buffers across the run's arrays and uploads every data
// buffer back to back (`buffer_starts[b]`: where buffer b begins). Their limbs are
// docs/ordering.md's window: chunk c is bytes 8c .. 8c+8 big-endian, zero-padded
// (LIMB_VIEW_CHUNK, `offset` = 8c); the length marker is min(len, window + 1)
// (LIMB_VIEW_LENGTH, `offset` = window).
#include "common.cuh"

typedef long long i64;

#ifndef ENCODE_THREADS
#define ENCODE_THREADS 256
#endif

enum LimbKind { LIMB_UNSIGNED = 0, LIMB_SIGNED = 1, LIMB_FLOAT = 2, LIMB_BIT = 3 };
// The field is the null flag, not a limb.
#define FIELD_NULL_FLAG 4
// Limbs of byte-like values, read through their views.
#define LIMB_VIEW_CHUNK 5
#define LIMB_VIEW_LENGTH 6

// What one field reads: mirrors `LimbSource` in src/keys/limbs.rs plus the column's
// validity and direction.
struct FieldSource {
    const u8* values;    // the values buffer (or the Boolean bitmap)
    const u32* valid;    // validity bitmap, or null when no row is null
    u32 stride;          // bytes per value
    u32 offset;          // byte offset of the limb in a value
    u32 width;           // bytes of the limb
    u32 kind;            // LimbKind, or FIELD_NULL_FLAG
    u32 descending;      // invert the limb
    u32 nulls_first;     // for the null flag
    const u8* data;              // views: every data buffer back to back
    const u64* buffer_starts;    // views: where each buffer begins in `data`
};

__device__ __forceinline__ bool bit_at(const u32* bits, u64 row) {
    return (bits[row >> 5] >> (row & 31)) & 1u;
}

__device__ __forceinline__ u64 total_order(u64 bits, u32 width_bits) {
    const u64 sign = 1ull << (width_bits - 1);
    const u64 mask = width_bits == 64 ? ~0ull : ((1ull << width_bits) - 1);
    return (bits & sign) ? (~bits & mask) : (bits | sign);
}

// Limb of a byte-like value through its view (host twins: `chunk_at`, `length_marker`).
__device__ __forceinline__ u64 read_view_limb(const FieldSource& s, u64 row) {
    const View* views = (const View*)s.values;
    const View view = views[row];
    const u32 len = view.len;
    if (s.kind == LIMB_VIEW_LENGTH) return (u64)min(len, s.offset + 1);
    const u32 from = s.offset;
    if (from >= len) return 0;
    const u8* bytes = len <= MAX_INLINE_VIEW_LEN ? (const u8*)&views[row].prefix
                                : s.data + s.buffer_starts[view.buffer] + view.offset;
    const u32 take = min(len - from, 8u);
    u64 limb = 0;
    for (u32 i = 0; i < 8; ++i) limb = (limb << 8) | (i < take ? (u64)bytes[from + i] : 0ull);
    return limb;
}

// The order-preserving limb of `row` (host twin: `limb_from_bytes`).
__device__ __forceinline__ u64 read_limb(const FieldSource& s, u64 row) {
    if (s.kind == LIMB_BIT) return bit_at((const u32*)s.values, row) ? 1ull : 0ull;
    if (s.kind >= LIMB_VIEW_CHUNK) return read_view_limb(s, row);
    const u8* p = s.values + row * s.stride + s.offset;
    u64 raw;
    switch (s.width) {
        case 1: raw = *p; break;
        case 2: raw = *(const u16*)p; break;
        case 4: raw = *(const u32*)p; break;
        default: raw = *(const u64*)p; break;
    }
    const u32 bits = 8 * s.width;
    if (s.kind == LIMB_SIGNED) {
        const i64 extended = ((i64)(raw << (64 - bits))) >> (64 - bits);
        return (u64)extended ^ (1ull << 63);
    }
    if (s.kind == LIMB_FLOAT) return total_order(raw, bits);
    return raw;
}

// The field's value of `row` and whether it counts in the statistics.
__device__ __forceinline__ u64 field_value(const FieldSource& s, u64 row, bool* counts) {
    const bool valid = s.valid == nullptr || bit_at(s.valid, row);
    if (s.kind == FIELD_NULL_FLAG) {
        *counts = true;
        return (valid == (s.nulls_first != 0)) ? 1ull : 0ull;
    }
    *counts = valid;
    if (!valid) return 0;
    const u64 limb = read_limb(s, row);
    return s.descending ? ~limb : limb;
}

__device__ __forceinline__ u64 warp_min(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ u64 warp_max(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ u64 warp_or(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v |= __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ u64 warp_and(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v &= __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// stats = {min, max, or, and}, initialised by the host to {~0, 0, 0, ~0}.
extern "C" __global__ void __launch_bounds__(ENCODE_THREADS)
    encode_field_stats(FieldSource source, u32 n, u64* stats) {
    u64 lo = ~0ull, hi = 0, ones = 0, all = ~0ull;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < n; row += stride) {
        bool counts;
        const u64 v = field_value(source, row, &counts);
        if (counts) {
            lo = min(lo, v);
            hi = max(hi, v);
            ones |= v;
            all &= v;
        }
    }
    lo = warp_min(lo);
    hi = warp_max(hi);
    ones = warp_or(ones);
    all = warp_and(all);
    if (lane_id() == 0 && lo <= hi) {
        atomicMin(&stats[0], lo);
        atomicMax(&stats[1], hi);
        atomicOr(&stats[2], ones);
        atomicAnd(&stats[3], all);
    }
}

// words[row] |= (((value - lo) >> shift) >> drop_low & mask) << place, for valid rows of a
// limb and every row of a null flag. `word_bits` is 32 or 64: the key word's width.
extern "C" __global__ void __launch_bounds__(ENCODE_THREADS)
    encode_pack_field(FieldSource source, u32 n, u64 lo, u32 shift, u32 drop_low, u64 mask, u32 place,
                      u32 word_bits, void* words) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x; row < n; row += stride) {
        bool counts;
        const u64 v = field_value(source, row, &counts);
        const u64 part = counts ? ((((v - lo) >> shift) >> drop_low) & mask) << place : 0;
        if (word_bits == 32) {
            ((u32*)words)[row] |= (u32)part;
        } else {
            ((u64*)words)[row] |= part;
        }
    }
}

// Partitions counted in shared memory (more: in global memory directly).
#define SHARED_PARTITIONS 4096

// ids[row] = table[limb(row) - first] for a valid row, `null_id` for a null one (the limb
// read with `descending` 0); counts[id] += 1 per row. `counts` is zeroed by the host; a
// limb outside the table (the host's range was wrong) is written as 0xffff and not
// counted, so the host's check that the counts add up to `n` catches it.
extern "C" __global__ void __launch_bounds__(ENCODE_THREADS)
    encode_partition_ids(FieldSource source, u32 n, u64 first, const u16* table, u32 table_len,
                         u32 null_id, u32 partitions, u16* ids, u32* counts) {
    __shared__ u32 local[SHARED_PARTITIONS];
    const bool in_shared = partitions <= SHARED_PARTITIONS;
    if (in_shared) {
        for (u32 p = threadIdx.x; p < partitions; p += blockDim.x) local[p] = 0;
        __syncthreads();
    }
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 rounds = ((u64)n + stride - 1) / stride;
    const u64 begin = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    // Whole warps go round together, so the lanes can add up equal ids before counting.
    for (u64 round = 0; round < rounds; ++round) {
        const u64 row = begin + round * stride;
        u32 id = 0xffffffffu;
        if (row < n) {
            const bool valid = source.valid == nullptr || bit_at(source.valid, row);
            if (!valid) {
                id = null_id;
            } else {
                const u64 at = read_limb(source, row) - first;
                id = at < table_len ? (u32)table[at] : 0xffffffffu;
            }
            ids[row] = (u16)id;
        }
        const u32 same = __match_any_sync(0xffffffffu, id);
        const bool leader = (same & lanemask_lt()) == 0;
        if (leader && id < partitions) {
            u32* counter = in_shared ? &local[id] : &counts[id];
            atomicAdd(counter, (u32)__popc(same));
        }
    }
    if (in_shared) {
        __syncthreads();
        for (u32 p = threadIdx.x; p < partitions; p += blockDim.x) {
            if (local[p] != 0) atomicAdd(&counts[p], local[p]);
        }
    }
}
