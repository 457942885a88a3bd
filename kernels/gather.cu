// gather.cu: payload columns gathered on the device in sorted order (launched by
// src/cuda/gather.rs), so that fixed-width columns cost two sequential PCIe copies instead
// of one host DRAM miss per row.
//
//   gather_w{1,2,4,8,16,32}   out[i] = src[perm[i]] for values of that many bytes
//   gather_bits               bitmaps (validity, Boolean values): bit i of the output is
//                             bit perm[i] of the source, laid out batch by batch
//   gather_views              views of byte-like values (empty under nulls), and the
//                             bytes each long value needs in its output batch's data
//   scan_view_bytes           per output batch: where each long value's bytes go in the
//                             batch's own data buffer, and the buffer's size
//   copy_view_bytes           the long values' bytes into their batch's data buffer; the
//                             views then point there (buffer 0 of their batch)
//   view_lengths              each gathered view's length (0 under nulls): scanned by
//                             scan_view_bytes into byte-array offsets, a block per stretch
//   add_stretch_bases         each stretch's offsets moved up by the bytes before it
//   view_bytes_end_to_end     every value's bytes at its offset, end to end (inline ones
//                             from their view, long ones from the column's data buffers)
//   gather_peer_w*, gather_peer_bits
//                             the same gathers from a column cut into slices, each held by
//                             another device of a spread run and read over NVLink or PCIe
//                             peer access (`PeerSlices`), so that no device holds it whole
//
// `perm` points at the first permutation entry of the window being gathered; the host
// passes `n` (rows of the window). Bitmaps are little-endian arrays of 32-bit words, the
// source padded to whole words by the host.
#include "common.cuh"

// Threads of the scan's blocks, and the most slices of a peer gather's column: -D options
// from src/cuda/tuning.rs.
#if !defined(GATHER_THREADS) || !defined(GATHER_PEER_SLICES)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

// 16 and 32 bytes moved as aligned vectors (decimals of 128 and 256 bits, intervals).
struct __align__(16) Bytes16 {
    u64 lo, hi;
};
struct __align__(16) Bytes32 {
    Bytes16 lo, hi;
};

// A column cut into slices, each in the memory of one device: rows start[k] .. start[k+1]
// lie in ptr[k] (start[0] = 0, `count` slices). Passed by value (the launcher's
// `PeerSlices`, src/cuda/gather.rs, has the same layout). A null validity slice: every
// row of it is valid.
struct PeerSlices {
    u64 ptr[GATHER_PEER_SLICES];
    u32 start[GATHER_PEER_SLICES + 1];
    u32 count;
};

// The slice holding `row`, and the row's place in it. Constant indices only, so the table
// stays in the parameter bank.
__device__ __forceinline__ u64 locate(const PeerSlices& s, u32 row, u32* local) {
    u64 ptr = s.ptr[0];
    u32 base = 0;
#pragma unroll
    for (u32 k = 1; k < GATHER_PEER_SLICES; ++k) {
        if (k < s.count && row >= s.start[k]) {
            ptr = s.ptr[k];
            base = s.start[k];
        }
    }
    *local = row - base;
    return ptr;
}

// Where a gather reads a row's value (bit): one buffer on this device, or slices.
template <typename T>
struct WholeValues {
    const T* __restrict__ src;
    __device__ __forceinline__ T operator()(u32 row) const { return src[row]; }
};

template <typename T>
struct SlicedValues {
    const PeerSlices& src;
    __device__ __forceinline__ T operator()(u32 row) const {
        u32 local;
        return ((const T*)locate(src, row, &local))[local];
    }
};

struct WholeBits {
    const u32* __restrict__ src;
    __device__ __forceinline__ bool operator()(u32 row) const {
        return (src[row >> 5] >> (row & 31)) & 1u;
    }
};

struct SlicedBits {
    const PeerSlices& src;
    __device__ __forceinline__ bool operator()(u32 row) const {
        u32 local;
        const u32* slice = (const u32*)locate(src, row, &local);
        return slice == nullptr || ((slice[local >> 5] >> (local & 31)) & 1u);
    }
};

template <typename T, typename Read>
__device__ __forceinline__ void gather_values(Read read, const u32* __restrict__ perm, u32 n,
                                              T* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = read(perm[i]);
    }
}

#define GATHER_WIDTH(NAME, PEER_NAME, T)                                                    \
    extern "C" __global__ void NAME(const T* __restrict__ src, const u32* __restrict__ perm, \
                                    u32 n, T* __restrict__ out) {                           \
        gather_values<T>(WholeValues<T>{src}, perm, n, out);                                \
    }                                                                                       \
    extern "C" __global__ void PEER_NAME(const __grid_constant__ PeerSlices src,            \
                                         const u32* __restrict__ perm, u32 n,               \
                                         T* __restrict__ out) {                             \
        gather_values<T>(SlicedValues<T>{src}, perm, n, out);                               \
    }

GATHER_WIDTH(gather_w1, gather_peer_w1, u8)
GATHER_WIDTH(gather_w2, gather_peer_w2, u16)
GATHER_WIDTH(gather_w4, gather_peer_w4, u32)
GATHER_WIDTH(gather_w8, gather_peer_w8, u64)
GATHER_WIDTH(gather_w16, gather_peer_w16, Bytes16)
GATHER_WIDTH(gather_w32, gather_peer_w32, Bytes32)

// Output batch b of the window (rows b*batch_rows .. up to n) owns words
// [b*batch_words, (b+1)*batch_words): its bitmap starts at bit 0 of its own words, so the
// host hands each batch its words as they are. Bits past a batch's rows are 0.
template <typename Read>
__device__ __forceinline__ void gather_bits_with(Read read, const u32* __restrict__ perm,
                                                 u32 n, u32 batch_rows, u32 batch_words,
                                                 u32 batches, u32* __restrict__ out) {
    // Every thread of a warp takes the same number of turns: the total and the stride are
    // multiples of 32, so the ballot always has all lanes.
    const u64 total = (u64)batches * batch_words * WARP;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const u64 batch = t / ((u64)batch_words * WARP);
        const u32 within = (u32)(t - batch * batch_words * WARP);
        const u64 i = batch * batch_rows + within;
        const bool bit = within < batch_rows && i < n && read(perm[i]);
        const u32 word = __ballot_sync(0xffffffffu, bit);
        if (lane_id() == 0) out[t / WARP] = word;
    }
}

extern "C" __global__ void gather_bits(const u32* __restrict__ src,
                                       const u32* __restrict__ perm, u32 n, u32 batch_rows,
                                       u32 batch_words, u32 batches, u32* __restrict__ out) {
    gather_bits_with(WholeBits{src}, perm, n, batch_rows, batch_words, batches, out);
}

// gather_bits from a sliced bitmap: each slice's bits start at bit 0 of its own words.
extern "C" __global__ void gather_peer_bits(const __grid_constant__ PeerSlices src,
                                            const u32* __restrict__ perm, u32 n,
                                            u32 batch_rows, u32 batch_words,
                                            u32 batches, u32* __restrict__ out) {
    gather_bits_with(SlicedBits{src}, perm, n, batch_rows, batch_words, batches, out);
}

// Views of the window's rows; `long_bytes[i]` the bytes row i's value keeps outside its
// view in the output (0 when inline or null). `valid`: source validity, or null.
extern "C" __global__ void gather_views(const View* __restrict__ src,
                                        const u32* __restrict__ valid,
                                        const u32* __restrict__ perm, u32 n,
                                        View* __restrict__ out, u32* __restrict__ long_bytes) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u32 row = perm[i];
        View view = src[row];
        if (valid != nullptr && !((valid[row >> 5] >> (row & 31)) & 1u)) {
            view.len = view.prefix = view.buffer = view.offset = 0;
        }
        out[i] = view;
        long_bytes[i] = view.len > MAX_INLINE_VIEW_LEN ? view.len : 0;
    }
}

// One block per output batch of `batch_rows` rows: `long_bytes` becomes the exclusive
// prefix sum within the batch, `totals[b]` the batch's sum.
extern "C" __global__ void __launch_bounds__(GATHER_THREADS)
    scan_view_bytes(u32* __restrict__ long_bytes, u32 n, u32 batch_rows,
                    u64* __restrict__ totals) {
    __shared__ u64 warp_sums[GATHER_THREADS / WARP];
    __shared__ u64 carry;
    const u32 begin = blockIdx.x * batch_rows;
    const u32 end = min(n, begin + batch_rows);
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (u32 base = begin; base < end; base += blockDim.x) {
        const u32 i = base + threadIdx.x;
        const u64 mine = i < end ? long_bytes[i] : 0;
        u64 inclusive = mine;
#pragma unroll
        for (int o = 1; o < WARP; o <<= 1) {
            const u64 up = __shfl_up_sync(0xffffffffu, inclusive, o);
            if (lane_id() >= (u32)o) inclusive += up;
        }
        if (lane_id() == WARP - 1) warp_sums[warp_id()] = inclusive;
        __syncthreads();
        u64 before = carry;
        for (u32 w = 0; w < warp_id(); ++w) before += warp_sums[w];
        if (i < end) long_bytes[i] = (u32)(before + inclusive - mine);
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) {
            u64 all = carry;
            for (u32 w = 0; w < blockDim.x / WARP; ++w) all += warp_sums[w];
            carry = all;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}

// Each of `n` gathered views' length (0 under nulls: gather_views emptied them).
extern "C" __global__ void view_lengths(const View* __restrict__ views, u32 n,
                                        u32* __restrict__ lengths) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        lengths[i] = views[i].len;
    }
}

// `offsets[i] += bases[i / stretch_rows]`: offsets scanned within stretches of rows made
// offsets from the start of all of them.
extern "C" __global__ void add_stretch_bases(u32* __restrict__ offsets, u32 n, u32 stretch_rows,
                                             const u64* __restrict__ bases) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        offsets[i] += (u32)bases[i / stretch_rows];
    }
}

// Each of `n` gathered views' bytes copied to `out + offsets[i]`: the values end to end, as
// a byte array column's bytes beside its offsets.
extern "C" __global__ void view_bytes_end_to_end(const View* __restrict__ views,
                                                 const u32* __restrict__ offsets, u32 n,
                                                 const u8* __restrict__ data,
                                                 const u64* __restrict__ buffer_starts,
                                                 u8* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const View view = views[i];
        const u8* from = view.len <= MAX_INLINE_VIEW_LEN
                             ? (const u8*)&views[i].prefix
                             : data + buffer_starts[view.buffer] + view.offset;
        u8* to = out + offsets[i];
        for (u32 k = 0; k < view.len; ++k) to[k] = from[k];
    }
}

// The final views of the window (`views` gathered by gather_views): each long value's bytes
// copied to `out_data + batch_data[b] + long_bytes[i]` (its batch's data buffer) and its
// view pointing there.
extern "C" __global__ void copy_view_bytes(const View* __restrict__ views,
                                           View* __restrict__ out_views,
                                           const u32* __restrict__ long_bytes, u32 n,
                                           u32 batch_rows, const u8* __restrict__ data,
                                           const u64* __restrict__ buffer_starts,
                                           const u64* __restrict__ batch_data,
                                           u8* __restrict__ out_data) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        View view = views[i];
        if (view.len > MAX_INLINE_VIEW_LEN) {
            const u8* from = data + buffer_starts[view.buffer] + view.offset;
            u8* to = out_data + batch_data[i / batch_rows] + long_bytes[i];
            for (u32 k = 0; k < view.len; ++k) to[k] = from[k];
            view.buffer = 0;
            view.offset = long_bytes[i];
        }
        out_views[i] = view;
    }
}
