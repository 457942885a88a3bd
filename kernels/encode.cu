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
// The fields and how they are read from the buffers: fields.cuh.
#include "fields.cuh"

// Block shape and shared partition counters: -D options from src/cuda/tuning.rs.
#if !defined(ENCODE_THREADS) || !defined(SHARED_PARTITIONS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

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
