// gather.cu: payload columns gathered on the device in sorted order (launched by
// src/cuda/gather.rs), so that fixed-width columns cost two sequential PCIe copies instead
// of one host DRAM miss per row.
//
//   gather_w{1,2,4,8,16,32}   out[i] = src[perm[i]] for values of that many bytes
//   gather_bits               bitmaps (validity, Boolean values): bit i of the output is
//                             bit perm[i] of the source, laid out batch by batch
//
// `perm` points at the first permutation entry of the window being gathered; the host
// passes `n` (rows of the window). Bitmaps are little-endian arrays of 32-bit words, the
// source padded to whole words by the host.
#include "common.cuh"

typedef unsigned short u16;

// 16 and 32 bytes moved as aligned vectors (decimals of 128 and 256 bits, intervals).
struct __align__(16) Bytes16 {
    u64 lo, hi;
};
struct __align__(16) Bytes32 {
    Bytes16 lo, hi;
};

template <typename T>
__device__ __forceinline__ void gather_values(const T* __restrict__ src,
                                              const u32* __restrict__ perm, u32 n,
                                              T* __restrict__ out) {
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = src[perm[i]];
    }
}

#define GATHER_WIDTH(NAME, T)                                                               \
    extern "C" __global__ void NAME(const T* __restrict__ src, const u32* __restrict__ perm, \
                                    u32 n, T* __restrict__ out) {                           \
        gather_values<T>(src, perm, n, out);                                                \
    }

GATHER_WIDTH(gather_w1, u8)
GATHER_WIDTH(gather_w2, u16)
GATHER_WIDTH(gather_w4, u32)
GATHER_WIDTH(gather_w8, u64)
GATHER_WIDTH(gather_w16, Bytes16)
GATHER_WIDTH(gather_w32, Bytes32)

// Output batch b of the window (rows b*batch_rows .. up to n) owns words
// [b*batch_words, (b+1)*batch_words): its bitmap starts at bit 0 of its own words, so the
// host hands each batch its words as they are. Bits past a batch's rows are 0.
extern "C" __global__ void gather_bits(const u32* __restrict__ src,
                                       const u32* __restrict__ perm, u32 n, u32 batch_rows,
                                       u32 batch_words, u32 batches, u32* __restrict__ out) {
    // Every thread of a warp takes the same number of turns: the total and the stride are
    // multiples of 32, so the ballot always has all lanes.
    const u64 total = (u64)batches * batch_words * WARP;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const u64 batch = t / ((u64)batch_words * WARP);
        const u32 within = (u32)(t - batch * batch_words * WARP);
        const u64 i = batch * batch_rows + within;
        bool bit = false;
        if (within < batch_rows && i < n) {
            const u32 row = perm[i];
            bit = (src[row >> 5] >> (row & 31)) & 1u;
        }
        const u32 word = __ballot_sync(0xffffffffu, bit);
        if (lane_id() == 0) out[t / WARP] = word;
    }
}
