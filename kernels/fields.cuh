// fields.cuh: the fields of a sort key read from raw Arrow buffers, shared by encode.cu
// (statistics and packing) and refine.cu (comparing neighbours after the sort).
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
#pragma once
#include "common.cuh"

typedef long long i64;

enum LimbKind { LIMB_UNSIGNED = 0, LIMB_SIGNED = 1, LIMB_FLOAT = 2, LIMB_BIT = 3 };
// FIELD_NULL_FLAG: the field is the null flag, not a limb. LIMB_VIEW_CHUNK and
// LIMB_VIEW_LENGTH: limbs of byte-like values, read through their views. All three are
// -D options from src/cuda/tuning.rs, where the host writes the same codes.
#if !defined(FIELD_NULL_FLAG) || !defined(LIMB_VIEW_CHUNK) || !defined(LIMB_VIEW_LENGTH)
#error "the field kinds come from src/cuda/tuning.rs as -D options"
#endif

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

// The bytes of the byte-like value of `row`.
__device__ __forceinline__ const u8* view_bytes(const FieldSource& s, const View* views, u64 row) {
    const View& view = views[row];
    return view.len <= MAX_INLINE_VIEW_LEN ? (const u8*)&views[row].prefix
                                           : s.data + s.buffer_starts[view.buffer] + view.offset;
}

// Limb of a byte-like value through its view (host twins: `chunk_at`, `length_marker`).
__device__ __forceinline__ u64 read_view_limb(const FieldSource& s, u64 row) {
    const View* views = (const View*)s.values;
    const View view = views[row];
    const u32 len = view.len;
    if (s.kind == LIMB_VIEW_LENGTH) return (u64)min(len, s.offset + 1);
    const u32 from = s.offset;
    if (from >= len) return 0;
    const u8* bytes = view_bytes(s, views, row);
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
