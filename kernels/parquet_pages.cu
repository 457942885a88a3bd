// parquet_pages.cu: Parquet data pages of fixed-width and byte-array columns built and
// compressed on the device (launched by src/cuda/parquet/), so that only compressed pages cross PCIe back
// and the host writes headers and metadata alone.
//
//   plain_page_bodies   one block per page: the page's uncompressed body, version 1 layout:
//                       [definition levels: u32 length, RLE/bit-packed hybrid, bit width 1]
//                       (nullable columns only), then the non-null values: PLAIN (each
//                       value's low `out_width` bytes, little-endian; a byte array's
//                       4-byte length, then its bytes), or, for a
//                       DELTA_BINARY_PACKED or RLE_DICTIONARY column, the values as 64-bit
//                       integers into `compact` for delta_page_values or dict_page_values
//   delta_page_values   one block per page of a DELTA_BINARY_PACKED column: its values
//                       section after the levels, as parquet's writer lays it out (blocks of
//                       4 miniblocks of 32 values for INT32, 64 for INT64)
//   dict_chunk_runs     one thread per chunk of an RLE_DICTIONARY page's entry numbers
//                       (its column's `values` are its rows' entry numbers in the chunk's
//                       dictionary, parquet_dictionary.cu): RLE/bit-packed hybrid runs
//   dict_page_values    one block per page of an RLE_DICTIONARY column: the bit width, then
//                       its chunks' runs
//   page_extremes       one block per page of a column with statistics: the rows of its
//                       smallest and largest value as parquet orders them (nulls and NaNs
//                       skipped), so the host reads the page's minimum and maximum from two
//                       rows instead of scanning it
//   snappy_compress     one warp per piece (at most 64 KiB of one page's body): the piece
//                       as Snappy elements (literals and copies within the piece), into
//                       its own room of the scratch buffer; its length in `piece_bytes`
//   snappy_place        one block per piece: its elements copied to where the host put
//                       them, after the page's length varint, which the host writes
//
// A Snappy stream is a varint of the uncompressed length followed by elements, each
// self-contained; copies here never reach outside their piece, so a page's pieces,
// compressed apart, are one valid stream when laid end to end.
#include "common.cuh"

#if !defined(PAGE_THREADS) || !defined(SNAPPY_WARPS) || !defined(SNAPPY_HASH_BITS) || \
    !defined(SNAPPY_PIECE_BYTES) || !defined(SNAPPY_MAX_SKIP) || !defined(SNAPPY_STAGED) || !defined(VALUES_PLAIN) || \
    !defined(VALUES_DELTA) || \
    !defined(VALUES_DICT) || !defined(VALUES_BYTES) || !defined(ORDER_NONE) || \
    !defined(ORDER_SIGNED) || !defined(ORDER_UNSIGNED) || !defined(ORDER_FLOAT) || !defined(ORDER_BYTES)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

// One data page of a column chunk, as src/cuda/parquet/pages.rs lays it out.
struct PageSpec {
    u64 first_row;    // the page's first row in the column's values (a multiple of 8)
    u64 body_at;      // where its uncompressed body starts in `bodies`
    u64 compact_at;   // DELTA_BINARY_PACKED, RLE_DICTIONARY: where its values go in `compact`
    u32 rows;         // rows of the page (values, nulls included)
    u32 values;       // non-null rows
    u32 levels_bytes; // bytes of the definition levels section, length prefix included;
                      // 0 for a required column
    u32 column;       // index into the launch's columns
};

// One column of the launch: its values (`in_width` bytes each, all rows, nulls included;
// for byte arrays, their bytes end to end, row i's from offsets[i] - offsets[0] to
// offsets[i + 1] - offsets[0]) and validity bitmap (LSB first, row 0 at bit 0; 0: no nulls).
struct ColumnSpec {
    u64 values;
    u64 validity;
    u64 offsets;   // VALUES_BYTES: u32 offsets, one more than the rows
    u32 in_width;
    u32 out_width;
    u32 encoding;  // VALUES_PLAIN, VALUES_DELTA, VALUES_DICT or VALUES_BYTES
    u32 bit_width; // VALUES_DICT: bits of an entry number
};

// How a column's statistics order its values (values, validity and offsets as in
// ColumnSpec, but always the column's own values, also where its pages hold entry numbers).
struct OrderSpec {
    u64 values;
    u64 validity;
    u64 offsets;
    u32 in_width;
    u32 out_width;
    u32 order; // ORDER_NONE (no statistics), ORDER_SIGNED, ORDER_UNSIGNED, ORDER_FLOAT or ORDER_BYTES
    u32 unused;
};

__device__ __forceinline__ u32 varint_len(u32 v) {
    u32 n = 1;
    while (v >= 0x80) {
        v >>= 7;
        ++n;
    }
    return n;
}

__device__ __forceinline__ u32 put_varint(u8* out, u32 v) {
    u32 n = 0;
    while (v >= 0x80) {
        out[n++] = (u8)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (u8)v;
    return n;
}

__device__ __forceinline__ bool row_valid(const u8* validity, u64 row) {
    return validity == 0 || ((validity[row >> 3] >> (row & 7)) & 1);
}

// Value `row` of `column`, cut to its low `out_width` bytes, written at `out`.
__device__ __forceinline__ void put_value(const ColumnSpec& column, u64 row, u8* out) {
    const u8* src = (const u8*)column.values + row * column.in_width;
    if (column.out_width == 8) {
        u64 v;
        if (column.in_width >= 8) {
            v = *(const u64*)src;
        } else {
            v = *(const u32*)src;
        }
        for (u32 b = 0; b < 8; ++b) out[b] = (u8)(v >> (8 * b));
    } else {
        u32 v = *(const u32*)src;
        for (u32 b = 0; b < 4; ++b) out[b] = (u8)(v >> (8 * b));
    }
}

// Value `row` of `column`, cut to its low `out_width` bytes and sign-extended to 64 bits
// (the integer parquet's DELTA_BINARY_PACKED writer takes).
__device__ __forceinline__ long long value_i64(const ColumnSpec& column, u64 row) {
    const u8* src = (const u8*)column.values + row * column.in_width;
    if (column.out_width == 8) return column.in_width >= 8 ? *(const long long*)src : *(const int*)src;
    return *(const int*)src;
}

// The definition levels of a nullable page: with no nulls, one RLE run of 1s; else a
// bit-packed run of its validity bits (whole groups of 8; bits past the page's rows are
// 0). The host sized `levels_bytes` the same way (pages.rs).
__device__ void write_levels(const PageSpec& page, const ColumnSpec& column, u8* body) {
    const u8* validity = (const u8*)column.validity;
    if (threadIdx.x == 0) {
        const u32 data_bytes = page.levels_bytes - 4;
        body[0] = (u8)data_bytes;
        body[1] = (u8)(data_bytes >> 8);
        body[2] = (u8)(data_bytes >> 16);
        body[3] = (u8)(data_bytes >> 24);
    }
    if (page.values == page.rows) {
        if (threadIdx.x == 0) {
            u32 n = put_varint(body + 4, page.rows << 1);
            body[4 + n] = 1;
        }
        return;
    }
    const u32 groups = (page.rows + 7) / 8;
    const u32 header = varint_len((groups << 1) | 1);
    if (threadIdx.x == 0) put_varint(body + 4, (groups << 1) | 1);
    u8* bits = body + 4 + header;
    const u64 first_byte = page.first_row / 8;
    for (u32 g = threadIdx.x; g < groups; g += blockDim.x) {
        u8 byte = validity[first_byte + g];
        const u32 rows_left = page.rows - g * 8;
        if (rows_left < 8) byte &= (u8)((1u << rows_left) - 1);
        bits[g] = byte;
    }
}

// The PLAIN values of a page of a byte-array column after its levels at `out`: each
// non-null value's length (4 bytes, little-endian), then its bytes. Each value's place is a
// block-wide sum of the sizes before it; each warp then copies its values' bytes one value
// after another, its lanes over the bytes. Writes the page's body length.
__device__ void byte_page_values(const PageSpec& page, const ColumnSpec& column, u8* out,
                                 u32* warp_sums, u32* body_len) {
    const u8* validity = (const u8*)column.validity;
    const u8* data = (const u8*)column.values;
    const u32* offsets = (const u32*)column.offsets;
    const u32 base_offset = offsets[0];
    u32 base = 0;
    for (u32 tile = 0; tile < page.rows; tile += blockDim.x) {
        const u32 i = tile + threadIdx.x;
        const u64 row = page.first_row + i;
        const bool valid = i < page.rows && row_valid(validity, row);
        u32 start = 0, len = 0;
        if (valid) {
            start = offsets[row] - base_offset;
            len = offsets[row + 1] - offsets[row];
        }
        u32 total;
        const u32 at = base + block_exclusive_sum(valid ? 4 + len : 0, warp_sums, total);
        if (valid) {
            for (u32 b = 0; b < 4; ++b) out[at + b] = (u8)(len >> (8 * b));
        }
        for (u32 l = 0; l < WARP; ++l) {
            const u32 n = __shfl_sync(0xffffffffu, len, l);
            const u32 from = __shfl_sync(0xffffffffu, start, l);
            const u32 to = __shfl_sync(0xffffffffu, at + 4, l);
            for (u32 k = lane_id(); k < n; k += WARP) out[to + k] = data[from + k];
        }
        base += total;
    }
    if (threadIdx.x == 0) *body_len = page.levels_bytes + base;
}

extern "C" __global__ void __launch_bounds__(PAGE_THREADS)
    plain_page_bodies(const PageSpec* __restrict__ pages, const ColumnSpec* __restrict__ columns,
                      u8* __restrict__ bodies, long long* __restrict__ compact,
                      u32* __restrict__ body_len) {
    __shared__ u32 warp_counts[PAGE_THREADS / WARP];
    const PageSpec page = pages[blockIdx.x];
    const ColumnSpec column = columns[page.column];
    u8* body = bodies + page.body_at;
    if (page.levels_bytes > 0) write_levels(page, column, body);
    u8* out = body + page.levels_bytes;
    if (column.encoding == VALUES_BYTES) {
        byte_page_values(page, column, out, warp_counts, &body_len[blockIdx.x]);
        return;
    }
    const bool compacted = column.encoding != VALUES_PLAIN;
    long long* to = compact + page.compact_at;
    const u32 width = column.out_width;
    if (!compacted && threadIdx.x == 0) body_len[blockIdx.x] = page.levels_bytes + page.values * width;
    if (page.values == page.rows) {
        for (u32 i = threadIdx.x; i < page.rows; i += blockDim.x) {
            if (compacted) {
                to[i] = value_i64(column, page.first_row + i);
            } else {
                put_value(column, page.first_row + i, out + (u64)i * width);
            }
        }
        return;
    }
    const u8* validity = (const u8*)column.validity;
    u32 base = 0;
    for (u32 tile = 0; tile < page.rows; tile += blockDim.x) {
        const u32 i = tile + threadIdx.x;
        const u64 row = page.first_row + i;
        const bool valid = i < page.rows && row_valid(validity, row);
        u32 total;
        const u32 rank = block_rank(valid, warp_counts, total);
        if (valid) {
            if (compacted) {
                to[base + rank] = value_i64(column, row);
            } else {
                put_value(column, row, out + (u64)(base + rank) * width);
            }
        }
        base += total;
    }
}

__device__ __forceinline__ u64 zigzag(long long v) { return ((u64)v << 1) ^ (u64)(v >> 63); }

__device__ __forceinline__ u32 put_varint64(u8* out, u64 v) {
    u32 n = 0;
    while (v >= 0x80) {
        out[n++] = (u8)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (u8)v;
    return n;
}

__device__ __forceinline__ u32 varint64_len(u64 v) {
    u32 n = 1;
    while (v >= 0x80) {
        v >>= 7;
        ++n;
    }
    return n;
}

// The values section of a DELTA_BINARY_PACKED page, as parquet's writer makes it: a header
// (block size, 4 miniblocks, values, zigzag first value), then per block of deltas its
// zigzag minimum, the 4 miniblocks' bit widths (0 for miniblocks past the last delta, which
// take no bytes), and each miniblock's deltas less the minimum, bit-packed, padded with 0s
// to a whole miniblock. INT32 deltas wrap in 32 bits. Writes the page's body length.
extern "C" __global__ void __launch_bounds__(PAGE_THREADS)
    delta_page_values(const PageSpec* __restrict__ pages, const ColumnSpec* __restrict__ columns,
                      const long long* __restrict__ compact, u8* __restrict__ bodies,
                      u32* __restrict__ body_len) {
    __shared__ u32 header_bytes;
    __shared__ long long block_min;
    __shared__ u64 block_max[4];
    __shared__ u32 words[4][128];
    const PageSpec page = pages[blockIdx.x];
    const ColumnSpec column = columns[page.column];
    if (column.encoding != VALUES_DELTA) return;
    const long long* v = compact + page.compact_at;
    u8* out = bodies + page.body_at + page.levels_bytes;
    const bool narrow = column.out_width == 4;
    const u32 per_mini = narrow ? 32 : 64;
    const u32 per_block = 4 * per_mini;
    const u32 n = page.values;
    const u32 t = threadIdx.x;
    if (t == 0) {
        u32 at = put_varint64(out, per_block);
        at += put_varint64(out + at, 4);
        at += put_varint64(out + at, n);
        at += put_varint64(out + at, zigzag(n > 0 ? v[0] : 0));
        header_bytes = at;
    }
    __syncthreads();
    u64 pos = header_bytes;
    const u32 deltas = n > 0 ? n - 1 : 0;
    for (u32 first = 0; first < deltas; first += per_block) {
        const u32 in_block = min(per_block, deltas - first);
        const bool has = t < in_block;
        long long delta = 0;
        if (has) {
            const long long a = v[first + t + 1], b = v[first + t];
            delta = narrow ? (long long)(int)((u32)a - (u32)b) : (long long)((u64)a - (u64)b);
        }
        if (t == 0) block_min = 0x7fffffffffffffffLL;
        if (t < 4) block_max[t] = 0;
        for (u32 w = t; w < 4 * 128; w += blockDim.x) words[w / 128][w % 128] = 0;
        __syncthreads();
        if (has) atomicMin(&block_min, delta);
        __syncthreads();
        const long long least = block_min;
        const u64 rel = !has ? 0 : narrow ? (u64)((u32)delta - (u32)least) : (u64)delta - (u64)least;
        const u32 mini = t / per_mini;
        if (has) atomicMax((unsigned long long*)&block_max[mini], (unsigned long long)rel);
        __syncthreads();
        const u32 needed = (in_block + per_mini - 1) / per_mini;
        u32 widths[4], at[4];
        const u32 min_bytes = varint64_len(zigzag(least));
        u32 block_bytes = min_bytes + 4;
        for (u32 i = 0; i < 4; ++i) {
            widths[i] = i < needed && block_max[i] != 0 ? 64 - __clzll((long long)block_max[i]) : 0;
            at[i] = block_bytes;
            block_bytes += i < needed ? widths[i] * per_mini / 8 : 0;
        }
        if (t < needed * per_mini && widths[mini] > 0) {
            const u32 width = widths[mini];
            const u32 bit = (t % per_mini) * width;
            const u32 word = bit / 32, shift = bit % 32;
            atomicOr(&words[mini][word], (u32)(rel << shift));
            if (shift + width > 32) atomicOr(&words[mini][word + 1], (u32)(rel >> (32 - shift)));
            if (shift + width > 64) atomicOr(&words[mini][word + 2], (u32)(rel >> (64 - shift)));
        }
        __syncthreads();
        u8* block = out + pos;
        if (t == 0) {
            put_varint64(block, zigzag(least));
            for (u32 i = 0; i < 4; ++i) block[min_bytes + i] = (u8)widths[i];
        }
        for (u32 i = 0; i < needed; ++i) {
            const u32 bytes = widths[i] * per_mini / 8;
            for (u32 k = t; k < bytes; k += blockDim.x) {
                block[at[i] + k] = (u8)(words[i][k / 4] >> (8 * (k % 4)));
            }
        }
        pos += block_bytes;
        __syncthreads();
    }
    if (t == 0) body_len[blockIdx.x] = page.levels_bytes + (u32)pos;
}

// Whether the `len` values at `v` are all equal.
__device__ __forceinline__ bool all_equal(const long long* v, u32 len) {
    for (u32 i = 1; i < len; ++i) {
        if (v[i] != v[0]) return false;
    }
    return true;
}

// A stretch of an RLE_DICTIONARY page's entry numbers, encoded by one thread.
struct DictChunk {
    u64 out_at; // its room in `scratch`
    u32 page;   // its page, in the launch's pages
    u32 first;  // its first number among the page's
    u32 count;  // numbers: a multiple of 8 but for a page's last chunk
    u32 unused;
};

// The entry numbers of one chunk as RLE/bit-packed hybrid runs, into its room of the
// scratch buffer; its length in `chunk_len`. The numbers go in groups of 8 (the last one
// short): a run of groups that each hold one number, the same, as one RLE run (a varint of
// its count << 1, then the number in whole bytes); a run of other groups as one bit-packed
// run (a varint of its groups << 1 | 1, then 8 numbers a group in `bit_width` bits each,
// least significant bit first, the last group padded with 0s). Chunks are short (the host
// cuts pages into DICT_CHUNK_VALUES numbers) so that a row group's pages take thousands of
// threads; runs end at a chunk's end.
extern "C" __global__ void __launch_bounds__(PAGE_THREADS)
    dict_chunk_runs(const DictChunk* __restrict__ chunks, u32 chunk_count,
                    const PageSpec* __restrict__ pages, const ColumnSpec* __restrict__ columns,
                    const long long* __restrict__ compact, u8* __restrict__ scratch,
                    u32* __restrict__ chunk_len) {
    const u32 index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= chunk_count) return;
    const DictChunk chunk = chunks[index];
    const PageSpec page = pages[chunk.page];
    const u32 width = columns[page.column].bit_width;
    const long long* v = compact + page.compact_at + chunk.first;
    u8* out = scratch + chunk.out_at;
    const u32 n = chunk.count;
    const u32 value_bytes = (width + 7) / 8;
    const u32 groups = (n + 7) / 8;
    u32 at = 0;
    u32 g = 0;
    while (g < groups) {
        if (all_equal(v + 8 * g, min(8u, n - 8 * g))) {
            const long long number = v[8 * g];
            u32 count = min(8u, n - 8 * g), next = g + 1;
            while (next < groups && v[8 * next] == number &&
                   all_equal(v + 8 * next, min(8u, n - 8 * next))) {
                count += min(8u, n - 8 * next);
                ++next;
            }
            at += put_varint(out + at, count << 1);
            for (u32 b = 0; b < value_bytes; ++b) out[at++] = (u8)((u64)number >> (8 * b));
            g = next;
        } else {
            u32 next = g + 1;
            while (next < groups && !all_equal(v + 8 * next, min(8u, n - 8 * next))) ++next;
            at += put_varint(out + at, ((next - g) << 1) | 1);
            for (; g < next; ++g) {
                u64 bits = 0;
                u32 held = 0;
                for (u32 i = 0; i < 8; ++i) {
                    const u64 number = 8 * g + i < n ? (u64)v[8 * g + i] : 0;
                    bits |= number << held;
                    held += width;
                    while (held >= 8) {
                        out[at++] = (u8)bits;
                        bits >>= 8;
                        held -= 8;
                    }
                }
            }
        }
    }
    chunk_len[index] = at;
}

// The values section of an RLE_DICTIONARY page: its bit width (of the largest entry
// number), then its chunks' runs end to end. Writes the page's body length.
extern "C" __global__ void __launch_bounds__(PAGE_THREADS)
    dict_page_values(const PageSpec* __restrict__ pages, const ColumnSpec* __restrict__ columns,
                     const DictChunk* __restrict__ chunks, const u32* __restrict__ page_chunks,
                     const u32* __restrict__ chunk_len, const u8* __restrict__ scratch,
                     u8* __restrict__ bodies, u32* __restrict__ body_len) {
    const PageSpec page = pages[blockIdx.x];
    const ColumnSpec column = columns[page.column];
    if (column.encoding != VALUES_DICT) return;
    u8* out = bodies + page.body_at + page.levels_bytes;
    if (threadIdx.x == 0) out[0] = (u8)column.bit_width;
    u32 at = 1;
    for (u32 c = page_chunks[blockIdx.x]; c < page_chunks[blockIdx.x + 1]; ++c) {
        const u32 len = chunk_len[c];
        const u8* from = scratch + chunks[c].out_at;
        for (u32 i = threadIdx.x; i < len; i += blockDim.x) out[at + i] = from[i];
        at += len;
    }
    if (threadIdx.x == 0) body_len[blockIdx.x] = page.levels_bytes + at;
}

// ---- Statistics -----------------------------------------------------------------------

// No row: a page without a value its statistics count.
#define NO_ROW 0xffffffffu

// Whether row `row` of `c` counts in its statistics: not null, and not NaN.
__device__ __forceinline__ bool counts_in_extremes(const OrderSpec& c, u32 row) {
    if (!row_valid((const u8*)c.validity, row)) return false;
    if (c.order != ORDER_FLOAT) return true;
    const u8* src = (const u8*)c.values + (u64)row * c.in_width;
    return c.out_width == 8 ? !isnan(*(const double*)src) : !isnan(*(const float*)src);
}

// Whether row `a`'s value of `c` orders before row `b`'s (both counted): integers by their
// low `out_width` bytes, signed or not; floats as floats; byte arrays byte by byte,
// unsigned, a prefix first.
__device__ __forceinline__ bool orders_before(const OrderSpec& c, u32 a, u32 b) {
    if (c.order == ORDER_BYTES) {
        const u32* offsets = (const u32*)c.offsets;
        const u8* bytes = (const u8*)c.values - offsets[0];
        const u32 a_len = offsets[a + 1] - offsets[a], b_len = offsets[b + 1] - offsets[b];
        const u8* x = bytes + offsets[a];
        const u8* y = bytes + offsets[b];
        const u32 n = min(a_len, b_len);
        for (u32 i = 0; i < n; ++i) {
            if (x[i] != y[i]) return x[i] < y[i];
        }
        return a_len < b_len;
    }
    const u8* x = (const u8*)c.values + (u64)a * c.in_width;
    const u8* y = (const u8*)c.values + (u64)b * c.in_width;
    if (c.out_width == 8) {
        if (c.order == ORDER_FLOAT) return *(const double*)x < *(const double*)y;
        if (c.order == ORDER_UNSIGNED) return *(const u64*)x < *(const u64*)y;
        return *(const long long*)x < *(const long long*)y;
    }
    if (c.order == ORDER_FLOAT) return *(const float*)x < *(const float*)y;
    if (c.order == ORDER_UNSIGNED) return *(const u32*)x < *(const u32*)y;
    return *(const int*)x < *(const int*)y;
}

// The row of the smaller (`larger`: larger) value of rows `a` and `b`, either NO_ROW.
__device__ __forceinline__ u32 pick_extreme(const OrderSpec& c, u32 a, u32 b, bool larger) {
    if (a == NO_ROW) return b;
    if (b == NO_ROW) return a;
    return (larger ? orders_before(c, a, b) : orders_before(c, b, a)) ? b : a;
}

extern "C" __global__ void __launch_bounds__(PAGE_THREADS)
    page_extremes(const PageSpec* pages, const OrderSpec* columns, u32* extremes) {
    __shared__ u32 warp_rows[2][PAGE_THREADS / WARP];
    const PageSpec page = pages[blockIdx.x];
    const OrderSpec c = columns[page.column];
    if (c.order == ORDER_NONE || page.values == 0) {
        if (threadIdx.x == 0) {
            extremes[2 * blockIdx.x] = NO_ROW;
            extremes[2 * blockIdx.x + 1] = NO_ROW;
        }
        return;
    }
    u32 lo = NO_ROW, hi = NO_ROW;
    const u32 first = (u32)page.first_row, end = first + page.rows;
    for (u32 row = first + threadIdx.x; row < end; row += blockDim.x) {
        if (!counts_in_extremes(c, row)) continue;
        lo = pick_extreme(c, lo, row, false);
        hi = pick_extreme(c, hi, row, true);
    }
    for (u32 step = WARP / 2; step > 0; step /= 2) {
        const u32 other_lo = __shfl_down_sync(0xffffffffu, lo, step);
        const u32 other_hi = __shfl_down_sync(0xffffffffu, hi, step);
        lo = pick_extreme(c, lo, other_lo, false);
        hi = pick_extreme(c, hi, other_hi, true);
    }
    if (lane_id() == 0) {
        warp_rows[0][warp_id()] = lo;
        warp_rows[1][warp_id()] = hi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (u32 w = 1; w < blockDim.x / WARP; ++w) {
            lo = pick_extreme(c, lo, warp_rows[0][w], false);
            hi = pick_extreme(c, hi, warp_rows[1][w], true);
        }
        extremes[2 * blockIdx.x] = lo;
        extremes[2 * blockIdx.x + 1] = hi;
    }
}

// ---- Snappy ---------------------------------------------------------------------------

// One piece of a page's body, compressed by one warp.
struct Piece {
    u64 in_at;  // its first byte in `bodies`
    u64 out_at; // its room in the scratch buffer (snappy_bound(len) bytes)
    u32 len;    // bytes, at most SNAPPY_PIECE_BYTES
    u32 unused;
};

#define SNAPPY_TABLE (1u << SNAPPY_HASH_BITS)
#define SNAPPY_EMPTY 0xffffu

// 4 bytes at `p`, little-endian, by two aligned loads (the host pads `bodies` by 8 bytes).
__device__ __forceinline__ u32 load4(const u8* p) {
    const u64 at = (u64)p;
    const u32* aligned = (const u32*)(at & ~3ull);
    return __funnelshift_r(aligned[0], aligned[1], (u32)(at & 3) * 8);
}

__device__ __forceinline__ u32 snappy_hash(u32 v) {
    return (v * 0x1e35a7bdu) >> (32 - SNAPPY_HASH_BITS);
}

// A literal of `n` bytes from `src` at `dst + at`; the warp copies, lane 0 writes the tag.
__device__ __forceinline__ u32 emit_literal(u8* dst, u32 at, const u8* src, u32 n) {
    if (n == 0) return at;
    const u32 m = n - 1;
    u32 extra = m < 60 ? 0 : m < (1u << 8) ? 1 : m < (1u << 16) ? 2 : m < (1u << 24) ? 3 : 4;
    if (lane_id() == 0) {
        dst[at] = (u8)((extra == 0 ? m : 59 + extra) << 2);
        for (u32 b = 0; b < extra; ++b) dst[at + 1 + b] = (u8)(m >> (8 * b));
    }
    at += 1 + extra;
    for (u32 i = lane_id(); i < n; i += WARP) dst[at + i] = src[i];
    return at + n;
}

// One copy element of `len` (4..64) bytes from `offset` back.
__device__ __forceinline__ u32 emit_copy_element(u8* dst, u32 at, u32 offset, u32 len) {
    if (len < 12 && offset < 2048) {
        if (lane_id() == 0) {
            dst[at] = (u8)(1 | ((len - 4) << 2) | ((offset >> 8) << 5));
            dst[at + 1] = (u8)offset;
        }
        return at + 2;
    }
    if (lane_id() == 0) {
        dst[at] = (u8)(2 | ((len - 1) << 2));
        dst[at + 1] = (u8)offset;
        dst[at + 2] = (u8)(offset >> 8);
    }
    return at + 3;
}

// A match of `len` (>= 4) bytes from `offset` back, in elements of at most 64 bytes, none
// shorter than 4.
__device__ __forceinline__ u32 emit_copy(u8* dst, u32 at, u32 offset, u32 len) {
    while (len >= 68) {
        at = emit_copy_element(dst, at, offset, 64);
        len -= 64;
    }
    if (len > 64) {
        at = emit_copy_element(dst, at, offset, 60);
        len -= 60;
    }
    return emit_copy_element(dst, at, offset, len);
}

#if SNAPPY_STAGED
// A piece and 8 bytes of zeros after it in shared memory, a warp's.
#define SNAPPY_STAGE_BYTES (SNAPPY_PIECE_BYTES + 8)
#endif

extern "C" __global__ void __launch_bounds__(SNAPPY_WARPS * WARP)
    snappy_compress(const Piece* __restrict__ pieces, u32 n_pieces, const u8* __restrict__ bodies,
                    u8* __restrict__ scratch, u32* __restrict__ piece_bytes) {
    __shared__ u16 tables[SNAPPY_WARPS][SNAPPY_TABLE];
#if SNAPPY_STAGED
    __shared__ __align__(16) u32 staged[SNAPPY_WARPS][SNAPPY_STAGE_BYTES / 4];
#endif
    const u32 index = blockIdx.x * SNAPPY_WARPS + warp_id();
    if (index >= n_pieces) return;
    u16* table = tables[warp_id()];
    const u32 lane = lane_id();
    for (u32 i = lane; i < SNAPPY_TABLE; i += WARP) table[i] = SNAPPY_EMPTY;
    const Piece piece = pieces[index];
#if SNAPPY_STAGED
    // The piece into shared memory a word a lane at a time (the body may start on any
    // byte: each word from two aligned loads, as load4 reads), zeros in the words past it
    // (the last word of a piece whose length is not a multiple of 4 ends with bytes past
    // the piece, which the search never compares); every read of the search below is then
    // a shared-memory one.
    u32* words = staged[warp_id()];
    for (u32 w = lane; w < SNAPPY_STAGE_BYTES / 4; w += WARP) {
        words[w] = 4 * w < piece.len ? load4(bodies + piece.in_at + 4 * w) : 0;
    }
    const u8* src = (const u8*)words;
#else
    const u8* src = bodies + piece.in_at;
#endif
    __syncwarp();
    u8* dst = scratch + piece.out_at;
    const u32 len = piece.len;
    // Positions with 4 bytes of the piece from them on.
    const u32 limit = len >= 4 ? len - 3 : 0;
    u32 out = 0, literal = 0, pos = 0;
    // Windows without a match in a row: the lanes then look `1 + misses` bytes apart (at
    // most SNAPPY_MAX_SKIP + 1), so that incompressible bytes are passed over faster, as
    // Snappy's own compressor skips ahead after its misses; the next match resets it.
    u32 misses = 0;
    while (pos < limit) {
        const u32 stride = 1 + min(misses, (u32)SNAPPY_MAX_SKIP);
        const u32 p = pos + lane * stride;
        const bool inside = p < limit;
        const u32 v = inside ? load4(src + p) : 0;
        const u32 h = snappy_hash(v);
        const u32 candidate = inside ? table[h] : SNAPPY_EMPTY;
        const bool hit = candidate != SNAPPY_EMPTY && candidate < p && load4(src + candidate) == v;
        const u32 hits = __ballot_sync(0xffffffffu, hit);
        const u32 first = hits == 0 ? WARP : __ffs(hits) - 1;
        // Only the positions up to the first match go into the table: the scan goes on
        // from the match's end, and a position past it that the next window scans again
        // would find itself there, never an earlier match (on text, twice the output).
        __syncwarp();
        if (inside && lane <= first) table[h] = (u16)p;
        __syncwarp();
        if (hits == 0) {
            pos += WARP * stride;
            ++misses;
            continue;
        }
        misses = 0;
        const u32 at = pos + first * stride;
        const u32 from = __shfl_sync(0xffffffffu, candidate, first);
        u32 matched = 4;
        while (true) {
            const u32 i = at + matched + lane;
            const bool same = i < len && src[i] == src[from + matched + lane];
            const u32 differ = __ballot_sync(0xffffffffu, !same);
            if (differ == 0) {
                matched += WARP;
                continue;
            }
            matched += __ffs(differ) - 1;
            break;
        }
        out = emit_literal(dst, out, src + literal, at - literal);
        out = emit_copy(dst, out, at - from, matched);
        pos = at + matched;
        literal = pos;
    }
    out = emit_literal(dst, out, src + literal, len - literal);
    if (lane == 0) piece_bytes[index] = out;
}

// Each piece's elements copied from its scratch room to `final_at[piece]` in `out`.
extern "C" __global__ void __launch_bounds__(PAGE_THREADS)
    snappy_place(const Piece* __restrict__ pieces, const u32* __restrict__ piece_bytes,
                 const u64* __restrict__ final_at, const u8* __restrict__ scratch,
                 u8* __restrict__ out) {
    const u32 index = blockIdx.x;
    const u8* from = scratch + pieces[index].out_at;
    u8* to = out + final_at[index];
    const u32 n = piece_bytes[index];
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
}
