// refine.cu: the ties a byte-like key's window leaves, ordered on the device (launched by
// src/cuda/refine.rs, which explains the whole loop).
//
//   refine_iota          the identity permutation (when the sort found every key equal)
//   refine_heads_init    heads[i] = 1 at position 0 and where the known segments change
//   refine_mark_field    heads[i] = 1 where one field of the key differs between the rows
//                        at sorted positions i - 1 and i
//   refine_first_flags   flags[i] = 1 for a position in a tie group: a run of at least two
//                        positions without a head inside, whose value is longer than the
//                        window
//   refine_block_sums    scan, step 1: the sum of each tile of SCAN_TILE values
//   refine_scan_tiles    scan, step 2 (tile offsets scanned by the host): exclusive prefix
//                        sums of the values
//   refine_compact       the flagged positions, in order, and whether each starts a group
//   refine_step_keys     per tied position: its group (inclusive scan of the group starts)
//                        and the step key of its row at byte `start`
//   refine_gather_perm / refine_scatter_perm
//                        the group's rows put in the order the segmented sort found
//   refine_step_heads    heads where the step keys of neighbours in a group differ; which
//                        neighbours still tie
//   refine_next_flags    the positions still tied whose values go on past this step
//
// A step key holds STEP_BYTES bytes of the value from `start` (big-endian, zero-padded)
// above a length marker min(len - start, STEP_BYTES + 1) in the low byte: one u64 that
// orders like the bytes, a shorter value first, and marks a value that goes on (marker
// STEP_BYTES + 1). Inverted for DESC.
#include "fields.cuh"

// Block shape, scan tile and step: -D options from src/cuda/tuning.rs, with no defaults here.
#if !defined(REFINE_THREADS) || !defined(SCAN_ITEMS) || !defined(STEP_BYTES)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif
#define SCAN_TILE (REFINE_THREADS * SCAN_ITEMS)

extern "C" __global__ void refine_iota(u32 n, u32* out) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = (u32)i;
}

extern "C" __global__ void refine_heads_init(const u32* __restrict__ segs, u32 n, u8* __restrict__ heads) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        heads[i] = (i == 0 || (segs != nullptr && segs[i] != segs[i - 1])) ? 1 : 0;
    }
}

extern "C" __global__ void refine_mark_field(FieldSource source, const u32* __restrict__ perm, u32 n,
                                             u8* __restrict__ heads) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x + 1; i < n; i += stride) {
        if (heads[i]) continue;
        bool counts;
        const u64 before = field_value(source, perm[i - 1], &counts);
        const u64 here = field_value(source, perm[i], &counts);
        if (before != here) heads[i] = 1;
    }
}

// Whether the byte-like value of `row` (of the column read through `base`) is valid and
// longer than `bytes`.
__device__ __forceinline__ bool longer_than(const FieldSource& base, u32 row, u32 bytes) {
    const bool valid = base.valid == nullptr || bit_at(base.valid, row);
    return valid && ((const View*)base.values)[row].len > bytes;
}

extern "C" __global__ void refine_first_flags(FieldSource base, u32 window, const u32* __restrict__ perm,
                                              const u8* __restrict__ heads, u32 n, u32* __restrict__ flags) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const bool in_run = !heads[i] || (i + 1 < n && !heads[i + 1]);
        flags[i] = (in_run && longer_than(base, perm[i], window)) ? 1u : 0u;
    }
}

#define REFINE_WARPS (REFINE_THREADS / WARP)

// This thread's exclusive prefix of one value per thread over the block; the block's sum
// goes to `total` (shared). Called once per kernel.
__device__ __forceinline__ u32 block_exclusive_sum(u32 value, u32* total) {
    __shared__ u32 s_warps[REFINE_WARPS];
    const u32 inclusive = warp_inclusive_sum(value);
    if (lane_id() == WARP - 1) s_warps[warp_id()] = inclusive;
    __syncthreads();
    if (warp_id() == 0) {
        const u32 w = lane_id() < REFINE_WARPS ? s_warps[lane_id()] : 0;
        const u32 scanned = warp_inclusive_sum(w);
        if (lane_id() < REFINE_WARPS) s_warps[lane_id()] = scanned - w;
        if (lane_id() == WARP - 1) *total = scanned;
    }
    __syncthreads();
    return s_warps[warp_id()] + inclusive - value;
}

extern "C" __global__ void __launch_bounds__(REFINE_THREADS)
    refine_block_sums(const u32* __restrict__ values, u32 n, u32* __restrict__ sums) {
    __shared__ u32 s_total;
    const u64 base = (u64)blockIdx.x * SCAN_TILE + threadIdx.x * SCAN_ITEMS;
    u32 sum = 0;
#pragma unroll
    for (u32 k = 0; k < SCAN_ITEMS; ++k) sum += base + k < n ? values[base + k] : 0;
    block_exclusive_sum(sum, &s_total);
    if (threadIdx.x == 0) sums[blockIdx.x] = s_total;
}

extern "C" __global__ void __launch_bounds__(REFINE_THREADS)
    refine_scan_tiles(const u32* __restrict__ values, u32 n, const u32* __restrict__ tile_offsets,
                      u32* __restrict__ out) {
    __shared__ u32 s_total;
    const u64 base = (u64)blockIdx.x * SCAN_TILE + threadIdx.x * SCAN_ITEMS;
    u32 mine[SCAN_ITEMS];
    u32 sum = 0;
#pragma unroll
    for (u32 k = 0; k < SCAN_ITEMS; ++k) {
        mine[k] = base + k < n ? values[base + k] : 0;
        sum += mine[k];
    }
    u32 running = tile_offsets[blockIdx.x] + block_exclusive_sum(sum, &s_total);
#pragma unroll
    for (u32 k = 0; k < SCAN_ITEMS; ++k) {
        if (base + k < n) out[base + k] = running;
        running += mine[k];
    }
}

extern "C" __global__ void refine_compact(const u32* __restrict__ flags, const u32* __restrict__ offsets, u32 n,
                                          const u32* __restrict__ positions, const u8* __restrict__ heads,
                                          u32* __restrict__ pos_out, u32* __restrict__ head_out) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (!flags[i]) continue;
        const u32 p = positions != nullptr ? positions[i] : (u32)i;
        pos_out[offsets[i]] = p;
        head_out[offsets[i]] = heads[p];
    }
}

// The step key of `row` at byte `start` (see the top of the file), not inverted.
__device__ __forceinline__ u64 step_key(const FieldSource& base, u32 row, u32 start) {
    const View* views = (const View*)base.values;
    const u32 len = views[row].len;
    if (start >= len) return 0;
    const u8* bytes = view_bytes(base, views, row) + start;
    const u32 take = min(len - start, (u32)STEP_BYTES);
    u64 key = 0;
#pragma unroll
    for (u32 i = 0; i < STEP_BYTES; ++i) key = (key << 8) | (i < take ? (u64)bytes[i] : 0ull);
    return (key << 8) | (u64)min(len - start, (u32)STEP_BYTES + 1);
}

extern "C" __global__ void refine_step_keys(FieldSource base, u32 start, const u32* __restrict__ perm,
                                            const u32* __restrict__ pos, const u32* __restrict__ head_offsets,
                                            const u32* __restrict__ head_flags, u32 m, u64* __restrict__ keys,
                                            u32* __restrict__ segs) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += stride) {
        segs[j] = head_offsets[j] + head_flags[j];
        const u64 key = step_key(base, perm[pos[j]], start);
        keys[j] = base.descending ? ~key : key;
    }
}

extern "C" __global__ void refine_gather_perm(const u32* __restrict__ perm, const u32* __restrict__ pos, u32 m,
                                              u32* __restrict__ rows) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += stride) rows[j] = perm[pos[j]];
}

extern "C" __global__ void refine_scatter_perm(const u32* __restrict__ rows, const u32* __restrict__ order,
                                               const u32* __restrict__ pos, u32 m, u32* __restrict__ perm) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += stride) perm[pos[j]] = rows[order[j]];
}

extern "C" __global__ void refine_step_heads(FieldSource base, u32 start, const u32* __restrict__ perm,
                                             const u32* __restrict__ pos, const u32* __restrict__ segs, u32 m,
                                             u8* __restrict__ heads, u32* __restrict__ same_before) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += stride) {
        const bool same_group = j > 0 && segs[j] == segs[j - 1];
        bool same = false;
        if (same_group) {
            same = step_key(base, perm[pos[j]], start) == step_key(base, perm[pos[j - 1]], start);
            if (!same) heads[pos[j]] = 1;
        }
        same_before[j] = same ? 1u : 0u;
    }
}

extern "C" __global__ void refine_next_flags(FieldSource base, u32 start, const u32* __restrict__ perm,
                                             const u32* __restrict__ pos, const u32* __restrict__ same_before,
                                             u32 m, u32* __restrict__ flags) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += stride) {
        const bool tied = same_before[j] || (j + 1 < m && same_before[j + 1]);
        flags[j] = (tied && longer_than(base, perm[pos[j]], start + STEP_BYTES)) ? 1u : 0u;
    }
}
