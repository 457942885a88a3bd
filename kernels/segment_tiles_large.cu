// segment_tiles_large.cu: segment tiles of up to 12 288 rows, one block per SM
// (launched by src/cuda/merge/segment_tiles.rs).
//
// The segment-tile sort of segmented_sort.cu for runs whose longest segment is longer than
// half a standard tile: the same code (segment_tile.cuh) over a tile of MERGE_THREADS x
// MERGE_ITEMS rows (1 024 x 12 = 12 288 by default; the launcher passes its shape as -D
// options), held in dynamic shared memory.
//
//   segment_tile_windows     rows are cut into windows of `stride` rows; window w holds the
//                            segments that start in it, [s(w * stride), s((w + 1) * stride))
//                            with s(x) the first segment start at or after x. Each window
//                            that holds a segment appends (first, end segment) to a list
//                            (any order: the windows are independent). With segments
//                            longer than the stride most windows are empty; the list keeps
//                            the sort from visiting them.
//   segment_tiles_large_<k>  block b sorts the list's window b as one tile (the grid is an
//                            upper bound of the list's length: blocks past it return); rows
//                            are read once and the final row ids written once. (A persistent
//                            loop over the list spilled several times more registers.)
// The large tile's MERGE_THREADS and MERGE_ITEMS come as -D options from src/cuda/tuning.rs.
#include "segment_tile.cuh"

extern "C" __global__ void segment_tile_windows(const u32* __restrict__ starts, u32 segments, u32 stride,
                                                u32 windows, u32* __restrict__ list, u32* __restrict__ listed) {
    const u32 w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= windows) return;
    const u32 k0 = first_segment_from(starts, segments, (u64)w * stride);
    const u32 k1 = first_segment_from(starts, segments, (u64)(w + 1) * stride);
    if (k0 < k1) {
        const u32 at = atomicAdd(listed, 1u);
        list[2 * at] = k0;
        list[2 * at + 1] = k1;
    }
}

template <typename K>
__device__ void segment_tiles_large(const K* __restrict__ keys, const u32* __restrict__ starts, u32 segments,
                                    u32 n, const u32* __restrict__ list, const u32* __restrict__ listed,
                                    u32* __restrict__ out) {
    // The tile is larger than the 48 KiB of static shared memory. A launch with less
    // dynamic shared memory than the tile traps instead of corrupting memory.
    extern __shared__ __align__(16) u8 smem[];
    __shared__ u32 s_warp[MERGE_THREADS / WARP];
    SharedTile<K, true>& s = *reinterpret_cast<SharedTile<K, true>*>(smem);
    if (threadIdx.x == 0) {
        u32 have;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
        if (have < sizeof(SharedTile<K, true>)) __trap();
    }
    const u32 w = blockIdx.x;
    if (w < *listed) sort_segment_tile<K>(s, s_warp, keys, starts, segments, n, list[2 * w], list[2 * w + 1], out);
}

#define SEGMENT_TILES_LARGE_ENTRY_POINT(K)                                                                 \
    extern "C" __global__ void __launch_bounds__(MERGE_THREADS)                                           \
        segment_tiles_large_##K(const K* keys, const u32* starts, u32 segments, u32 n, const u32* list,   \
                                const u32* listed, u32* out) {                                            \
        segment_tiles_large<K>(keys, starts, segments, n, list, listed, out);                             \
    }

SEGMENT_TILES_LARGE_ENTRY_POINT(u32)
SEGMENT_TILES_LARGE_ENTRY_POINT(u64)
