// locality_sort.cu: stable merge sort for nearly sorted keys (launched by src/cuda/merge.rs).
//
//   locality_<k>_block_sort / _find_dirty / _merge_tiles / _copy_back
//                          the merge passes of merge.cuh over (key, row id), k = u32 or u64;
//                          a pair of runs already in order costs one comparison, and only
//                          the stretch where two runs overlap is merged
//   merge_scan_tiles       the work queue of a merge pass
//   locality_inversions_<k>  the sortedness probe: how many keys are greater than the key
//                          `distance` rows further on (0 for data whose disorder stays
//                          within that distance, about half the keys for random data),
//                          over a sample of chunks of consecutive positions
#include "merge.cuh"

MERGE_ENTRY_POINTS(locality_u32, u32, false)
MERGE_ENTRY_POINTS(locality_u64, u64, false)
MERGE_SCAN_ENTRY_POINT

// Positions probed: chunks of PROBE_CHUNK consecutive positions (coalesced reads), every
// `every`-th chunk from the first (every = 1: all), below n - distance. The launcher counts
// the positions the same way.
#define PROBE_CHUNK 1024

template <typename K>
__device__ void count_inversions(const K* __restrict__ keys, u32 n, u32 distance, u32 every, u64* count) {
    u32 local = 0;
    if (n > distance) {
        const u64 limit = n - distance;
        const u64 step = (u64)every * PROBE_CHUNK;
        const u64 probed = (limit + step - 1) / step * PROBE_CHUNK;
        const u64 stride = (u64)gridDim.x * blockDim.x;
        for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < probed; j += stride) {
            const u64 i = j / PROBE_CHUNK * step + j % PROBE_CHUNK;
            if (i < limit) local += keys[i] > keys[i + distance] ? 1u : 0u;
        }
    }
    const u32 warp_total = __reduce_add_sync(0xffffffffu, local);
    if (lane_id() == 0 && warp_total > 0) atomicAdd(count, (u64)warp_total);
}

extern "C" __global__ void locality_inversions_u32(const u32* keys, u32 n, u32 distance, u32 every, u64* count) {
    count_inversions<u32>(keys, n, distance, every, count);
}
extern "C" __global__ void locality_inversions_u64(const u64* keys, u32 n, u32 distance, u32 every, u64* count) {
    count_inversions<u64>(keys, n, distance, every, count);
}
