// common.cuh: device code shared by the kernel files of gpusort.
//
// Self-contained on purpose: NVRTC compiles these sources with no system headers, so the
// fixed-width integer names and the few intrinsics wrappers we need are defined here.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;

// An Arrow view of a byte-like value: `len` bytes, stored inline from `prefix` on when
// len <= 12, else in data buffer `buffer` at `offset` (`prefix`: its first 4 bytes).
struct __align__(16) View {
    u32 len, prefix, buffer, offset;
};
#define MAX_INLINE_VIEW_LEN 12

// 8-bit digits: 256 buckets per radix pass.
#define RADIX_BITS 8
#define RADIX 256
#define WARP 32

__device__ __forceinline__ u32 lane_id() { return threadIdx.x & (WARP - 1); }
__device__ __forceinline__ u32 warp_id() { return threadIdx.x / WARP; }

// Bit mask of the lanes below this one.
__device__ __forceinline__ u32 lanemask_lt() {
    u32 mask;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
    return mask;
}

// The 8-bit digit of `key` at bit offset `shift`.
__device__ __forceinline__ u32 digit_of(u32 key, u32 shift) { return (key >> shift) & (RADIX - 1); }
__device__ __forceinline__ u32 digit_of(u64 key, u32 shift) {
    return (u32)(key >> shift) & (RADIX - 1);
}

// Loads and stores other blocks observe: they go to L2, never stay in L1 or registers.
__device__ __forceinline__ u64 load_relaxed_gpu(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_relaxed_gpu(u64* p, u64 v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Inclusive prefix sum over the lanes of one warp.
__device__ __forceinline__ u32 warp_inclusive_sum(u32 v) {
#pragma unroll
    for (u32 offset = 1; offset < WARP; offset <<= 1) {
        u32 other = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane_id() >= offset) v += other;
    }
    return v;
}

// Block-wide: the sum of one value per warp (`warp_total`, the same in every lane of a
// warp) over the warps before this one; `total` gets the sum over every warp (every thread
// of the block calls it; `warp_values` holds a value per warp).
__device__ __forceinline__ u32 warps_before(u32 warp_total, u32* warp_values, u32& total) {
    const u32 warp = warp_id();
    if (lane_id() == 0) warp_values[warp] = warp_total;
    __syncthreads();
    u32 before = 0, sum = 0;
    const u32 warps = blockDim.x / WARP;
    for (u32 w = 0; w < warps; ++w) {
        if (w == warp) before = sum;
        sum += warp_values[w];
    }
    __syncthreads();
    total = sum;
    return before;
}

// Block-wide exclusive prefix count of `flag`; `total` gets the block's count (every
// thread of the block calls it; `warp_counts` holds a count per warp).
__device__ __forceinline__ u32 block_rank(bool flag, u32* warp_counts, u32& total) {
    const u32 ballot = __ballot_sync(0xffffffffu, flag);
    return warps_before(__popc(ballot), warp_counts, total) + __popc(ballot & lanemask_lt());
}

// Block-wide exclusive prefix sum of `v`; `total` gets the block's sum (every thread of the
// block calls it; `warp_sums` holds a sum per warp).
__device__ __forceinline__ u32 block_exclusive_sum(u32 v, u32* warp_sums, u32& total) {
    const u32 inclusive = warp_inclusive_sum(v);
    const u32 warp_total = __shfl_sync(0xffffffffu, inclusive, WARP - 1);
    return warps_before(warp_total, warp_sums, total) + inclusive - v;
}
