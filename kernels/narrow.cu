// narrow.cu: narrowed uploads put back to full width (launched by src/cuda/columns/narrow.rs).
//
// A column whose every value is the sign extension of its low 4 or 8 bytes crosses PCIe as
// those low bytes only; each uploaded chunk is then widened into the column's buffer:
//
//   widen_<from>_<to>   out[i] = src[i] sign-extended from <from> to <to> bytes
#include "common.cuh"

// Threads per block: a -D option from src/cuda/tuning.rs.
#if !defined(NARROW_THREADS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

// A 16-byte value (a 128-bit decimal), stored as an aligned vector.
struct __align__(16) Wide16 {
    u64 lo, hi;
};

__device__ __forceinline__ Wide16 extend16(long long v) {
    Wide16 out;
    out.lo = (u64)v;
    out.hi = (u64)(v >> 63);
    return out;
}

__device__ __forceinline__ long long extend8(i32 v) { return (long long)v; }

#define WIDEN(NAME, FROM, TO, EXTEND)                                                        \
    extern "C" __global__ void __launch_bounds__(NARROW_THREADS)                             \
        NAME(const FROM* __restrict__ src, u32 n, TO* __restrict__ out) {                    \
        const u32 stride = gridDim.x * blockDim.x;                                           \
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {            \
            out[i] = EXTEND(src[i]);                                                         \
        }                                                                                    \
    }

WIDEN(widen_4_8, i32, long long, extend8)
WIDEN(widen_4_16, i32, Wide16, extend16)
WIDEN(widen_8_16, long long, Wide16, extend16)
