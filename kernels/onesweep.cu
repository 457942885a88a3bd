// onesweep.cu: OneSweep LSD radix sort over 8-bit digits (launched by src/cuda/radix/onesweep.rs).
//
//   onesweep_histogram_<k>   one read of the keys builds the 256-bucket histogram of every
//                            digit (the host scans them into bucket starts and skips digits
//                            whose histogram has one full bucket)
//   onesweep_pass_<k>_<v>    one kernel per live digit. Each block takes the next tile (in
//                            the order blocks start), counts its digits and publishes the
//                            counts (so successors look back past it early), ranks the keys
//                            stably into shared memory, finds the tile's global offsets by
//                            decoupled look-back, and scatters the keys from there; a pass
//                            with values then puts them in the keys' shared memory, at
//                            their keys' tile positions, and scatters them the same way
//   onesweep_gather_u64      keys of the next word in the current order (multi-word keys)
//
// Look-back state lives in a constant-size circular buffer of `slot_mask + 1` tile slots, 256
// 64-bit entries each: value (32 bits) | tag (30 bits) | flag (2 bits), where the tag is
// (epoch << 20 | tile). Every pass of one sort has its own epoch, so entries of an earlier
// pass never match. Reusing a slot is made safe by two rules:
//   * writer: tile b publishes into slot b % S only once tiles b - S and b - S + 1 have
//     published their inclusive prefixes;
//   * reader: a tile that finds a predecessor's entry overwritten by a newer tile knows (by
//     the writer rule) that a later predecessor is inclusive now, and restarts its look-back.
// Tiles wait only for tiles with smaller indices, which started earlier; so correctness and
// progress need nothing beyond what dynamic tile indices give: every tile a block waits for
// belongs to a block that is running or done.
#include "common.cuh"

// Block shape per key width and value mode, the histogram's threads and the bits of a tile
// index in a look-back tag: -D options from src/cuda/tuning.rs, with no defaults here.
#if !defined(ONESWEEP_U32_KEYS_THREADS) || !defined(ONESWEEP_U32_KEYS_ITEMS) || \
    !defined(ONESWEEP_U32_KEYS_BLOCKS) || !defined(ONESWEEP_U32_PAIRS_THREADS) || \
    !defined(ONESWEEP_U32_PAIRS_ITEMS) || !defined(ONESWEEP_U32_PAIRS_BLOCKS) || \
    !defined(ONESWEEP_U32_ROWIDS_THREADS) || !defined(ONESWEEP_U32_ROWIDS_ITEMS) || \
    !defined(ONESWEEP_U32_ROWIDS_BLOCKS) || !defined(ONESWEEP_U64_KEYS_THREADS) || \
    !defined(ONESWEEP_U64_KEYS_ITEMS) || !defined(ONESWEEP_U64_KEYS_BLOCKS) || \
    !defined(ONESWEEP_U64_PAIRS_THREADS) || !defined(ONESWEEP_U64_PAIRS_ITEMS) || \
    !defined(ONESWEEP_U64_PAIRS_BLOCKS) || !defined(ONESWEEP_U64_ROWIDS_THREADS) || \
    !defined(ONESWEEP_U64_ROWIDS_ITEMS) || !defined(ONESWEEP_U64_ROWIDS_BLOCKS) || \
    !defined(HISTOGRAM_THREADS) || !defined(TILE_BITS)
#error "the launch shapes come from src/cuda/tuning.rs as -D options"
#endif

enum ValueMode { KEYS_ONLY = 0, READ_VALUES = 1, ROW_IDS = 2 };

enum LookbackFlag : u32 { FLAG_EMPTY = 0, FLAG_AGGREGATE = 1, FLAG_INCLUSIVE = 2 };

#define TILE_MASK ((1u << TILE_BITS) - 1)

__device__ __forceinline__ u64 lookback_entry(u32 value, u32 tag, u32 flag) {
    return ((u64)value << 32) | ((u64)tag << 2) | flag;
}
__device__ __forceinline__ u32 entry_flag(u64 e) { return (u32)e & 3u; }
__device__ __forceinline__ u32 entry_tag(u64 e) { return (u32)e >> 2; }
__device__ __forceinline__ u32 entry_value(u64 e) { return (u32)(e >> 32); }
__device__ __forceinline__ u32 make_tag(u32 epoch, u32 tile) { return (epoch << TILE_BITS) | tile; }

// Whether the entry was written, in this pass, by a tile later than `tile`.
__device__ __forceinline__ bool is_overwritten(u64 e, u32 epoch, u32 tile) {
    u32 tag = entry_tag(e);
    return entry_flag(e) != FLAG_EMPTY && (tag >> TILE_BITS) == epoch && (tag & TILE_MASK) > tile;
}

__device__ __forceinline__ u64* slot_entry(u64* lookback, u32 tile, u32 slot_mask, u32 digit) {
    return lookback + (u64)(tile & slot_mask) * RADIX + digit;
}

// Writer rule: before tile `tile` reuses its slot, tiles tile-S and tile-S+1 must be inclusive.
__device__ void wait_until_slot_free(u64* lookback, u32 tile, u32 slot_mask, u32 digit, u32 epoch) {
    const u32 slots = slot_mask + 1;
    if (tile < slots) return;
    const u32 old = tile - slots;
    for (;;) {
        // Both loads in flight at once: one round trip when (as almost always) both are done.
        const u64 a = load_relaxed_gpu(slot_entry(lookback, old, slot_mask, digit));
        const u64 b = load_relaxed_gpu(slot_entry(lookback, old + 1, slot_mask, digit));
        const bool old_done = entry_flag(a) == FLAG_INCLUSIVE && entry_tag(a) == make_tag(epoch, old);
        const bool next_done = (entry_flag(b) == FLAG_INCLUSIVE && entry_tag(b) == make_tag(epoch, old + 1)) ||
                               is_overwritten(b, epoch, old + 1);
        if (old_done && next_done) break;
    }
}

// Sum of this digit's counts over all tiles before `tile` (plus the bucket start, which
// tile 0 folds into its inclusive value).
__device__ u32 look_back(u64* lookback, u32 tile, u32 slot_mask, u32 digit, u32 epoch) {
    u32 exclusive = 0;
    u32 j = tile - 1;
    for (;;) {
        u64 e = load_relaxed_gpu(slot_entry(lookback, j, slot_mask, digit));
        u32 flag = entry_flag(e);
        if (flag != FLAG_EMPTY && entry_tag(e) == make_tag(epoch, j)) {
            exclusive += entry_value(e);
            if (flag == FLAG_INCLUSIVE) return exclusive;
            j -= 1;  // an aggregate is never tile 0's entry, so j > 0 here
        } else if (is_overwritten(e, epoch, j)) {
            exclusive = 0;  // a later predecessor is inclusive by now: start over
            j = tile - 1;
        }
        // else: tile j has not published yet; read again
    }
}

// The lanes of the warp that hold a valid key with digit `d` (all lanes take part; 0 for an
// invalid lane). Each lane sets its bit in the warp's word for its digit and reads the word
// back; the group's lowest lane clears it for the next item. One shared atomic per key
// where finding the group by ballots took eight (measured 42.5 → 53.9 G keys/s on u32 keys
// at 2^28, H200).
__device__ __forceinline__ u32 group_of(u32* peer_bits, u32 d, bool valid) {
    if (valid) atomicOr(&peer_bits[d], 1u << lane_id());
    __syncwarp();
    const u32 peers = valid ? peer_bits[d] : 0u;
    __syncwarp();
    if (valid && (peers & lanemask_lt()) == 0) peer_bits[d] = 0;
    __syncwarp();
    return peers;
}

template <typename K, int MODE, int THREADS, int ITEMS>
__device__ __forceinline__ void onesweep_pass(const K* __restrict__ keys_in, K* __restrict__ keys_out,
                                              const u32* __restrict__ vals_in, u32* __restrict__ vals_out,
                                              u32 n, u32 shift, const u32* __restrict__ bucket_start,
                                              u64* lookback, u32 slot_mask, u32* tile_counter, u32 epoch) {
    static_assert(THREADS >= RADIX && THREADS % WARP == 0, "one thread per digit");
    constexpr int WARPS = THREADS / WARP;
    constexpr int TILE = THREADS * ITEMS;
    constexpr bool HAS_VALUES = MODE != KEYS_ONLY;
    // Dynamic shared memory (tiles may pass the 48 KiB of static shared memory), laid out
    // as `PassTuning::shared_bytes` in src/cuda/radix/onesweep.rs computes it: the tile's keys
    // (its values take the same bytes once the keys have left), then the u32 arrays. A
    // launch with less than that traps instead of corrupting memory.
    extern __shared__ __align__(16) u8 smem[];
    constexpr u32 TILE_BYTES = TILE * sizeof(K);
    K* s_keys = (K*)smem;
    u32* s_vals = (u32*)smem;
    u32* s_words = (u32*)(smem + TILE_BYTES);
    u32(*s_warp_hist)[RADIX] = (u32(*)[RADIX])s_words;
    u32(*s_warp_peers)[RADIX] = (u32(*)[RADIX])(s_words + WARPS * RADIX);
    u32* s_digit_start = s_words + 2 * WARPS * RADIX;
    u32* s_digit_base = s_digit_start + RADIX;
    u32* s_warp_sums = s_digit_base + RADIX;
    u32& s_tile = s_warp_sums[WARPS];
    if (threadIdx.x == 0) {
        u32 have;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
        const u32 need = TILE_BYTES + (2 * WARPS * RADIX + 2 * RADIX + WARPS + 1) * 4;
        if (have < need) __trap();
        s_tile = atomicAdd(tile_counter, 1u);
    }
    for (u32 i = threadIdx.x; i < 2 * WARPS * RADIX; i += THREADS) (&s_warp_hist[0][0])[i] = 0;
    __syncthreads();
    const u32 tile = s_tile;
    const u32 lane = lane_id();
    const u32 warp = warp_id();
    // Warp-striped: item i of this lane is element lane_begin + i * 32. Addresses are one
    // pointer plus constant offsets, validity one 32-bit compare (registers are what limits
    // occupancy); digits are recomputed from the keys where needed.
    const u64 lane_begin = (u64)tile * TILE + (u64)warp * (ITEMS * WARP) + lane;
    const bool full = (u64)(tile + 1) * TILE <= n;
    const u32 lane_rows = n > lane_begin ? (u32)min((u64)TILE, (u64)n - lane_begin) : 0u;
    const auto valid_item = [&](int i) { return full || (u32)(i * WARP) < lane_rows; };
    const K* lane_keys = keys_in + lane_begin;
    K keys[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) keys[i] = valid_item(i) ? lane_keys[i * WARP] : (K)0;

    // The slot this tile publishes into must be free; the check's latency overlaps the
    // loads above and the counting below.
    if (threadIdx.x < RADIX) wait_until_slot_free(lookback, tile, slot_mask, threadIdx.x, epoch);

    // Early counts: each warp counts its digits first (shared atomics on its own histogram),
    // so the tile's counts are published before the ranking, and successors looking back
    // find them while this tile still ranks.
    u32* hist = s_warp_hist[warp];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const bool valid = valid_item(i);
        if (valid) atomicAdd(&hist[digit_of(keys[i], shift)], 1u);
    }
    __syncthreads();

    // Per digit: exclusive offsets of the warps, the tile's count, and the digit's start.
    u32 tile_count = 0;
    if (threadIdx.x < RADIX) {
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const u32 c = s_warp_hist[w][threadIdx.x];
            s_warp_hist[w][threadIdx.x] = tile_count;
            tile_count += c;
        }
    }
    const u32 inclusive = warp_inclusive_sum(tile_count);
    if (lane == WARP - 1) s_warp_sums[warp] = inclusive;
    __syncthreads();
    const u32 tag = make_tag(epoch, tile);
    u64* my_entry = slot_entry(lookback, tile, slot_mask, threadIdx.x);
    if (threadIdx.x < RADIX) {
        if (tile == 0) {
            store_relaxed_gpu(my_entry, lookback_entry(bucket_start[threadIdx.x] + tile_count, tag, FLAG_INCLUSIVE));
        } else {
            store_relaxed_gpu(my_entry, lookback_entry(tile_count, tag, FLAG_AGGREGATE));
        }
        u32 prefix = 0;
        for (u32 w = 0; w < warp; ++w) prefix += s_warp_sums[w];
        const u32 digit_start = prefix + inclusive - tile_count;
        s_digit_start[threadIdx.x] = digit_start;
        // Each warp's offset becomes the tile position of its next key of that digit.
#pragma unroll
        for (int w = 0; w < WARPS; ++w) s_warp_hist[w][threadIdx.x] += digit_start;
    }
    __syncthreads();

    // Stable rank and place: lanes with equal digits form one group per item; the group's
    // lowest lane takes the group's positions from the warp's offset for that digit (items
    // in order, so earlier items get lower positions) and broadcasts them; each key goes
    // to its tile position at once. Only passes with values keep the positions (two 16-bit
    // positions per register) until their values follow. Past the end of the input (last
    // tile only) invalid lanes take nothing.
    static_assert(TILE <= 65536, "tile positions are kept in 16 bits");
    u32 ranks[HAS_VALUES ? (ITEMS + 1) / 2 : 1];
    u32* peer_bits = s_warp_peers[warp];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const bool valid = valid_item(i);
        const u32 d = digit_of(keys[i], shift);
        const u32 peers = group_of(peer_bits, d, valid);
        const u32 before = __popc(peers & lanemask_lt());
        u32 base = 0;
        if (valid && before == 0) base = atomicAdd(&hist[d], (u32)__popc(peers));
        base = __shfl_sync(0xffffffffu, base, __ffs(peers) - 1);
        const u32 pos = base + before;
        if (valid) s_keys[pos] = keys[i];
        if constexpr (HAS_VALUES) {
            if (i % 2 == 0) ranks[i / 2] = pos;
            else ranks[i / 2] |= pos << 16;
        }
    }
    if (threadIdx.x < RADIX) {
        u32 exclusive = bucket_start[threadIdx.x];
        if (tile != 0) {
            exclusive = look_back(lookback, tile, slot_mask, threadIdx.x, epoch);
            store_relaxed_gpu(my_entry, lookback_entry(exclusive + tile_count, tag, FLAG_INCLUSIVE));
        }
        s_digit_base[threadIdx.x] = exclusive - s_digit_start[threadIdx.x];
    }
    __syncthreads();

    // Scatter in tile order: neighbours with one digit write neighbouring addresses. A pass
    // with values remembers the digit of each position it wrote (four 8-bit digits per
    // register), because its values go to the same positions.
    const u64 tile_begin = (u64)tile * TILE;
    const u32 valid_count = (u32)min((u64)TILE, (u64)n - tile_begin);
    // Given values are loaded here, after the look-back and before the keys leave: their
    // loads are in flight while the keys scatter. Loading them any earlier holds their
    // registers through the ranking or the look-back; loading them after the keys' scatter
    // waits for them (measured in docs/performance.md, 2026-11-24).
    u32 values[MODE == READ_VALUES ? ITEMS : 1];
    if constexpr (MODE == READ_VALUES) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) values[i] = valid_item(i) ? vals_in[lane_begin + i * WARP] : 0u;
    }
    u32 digits[HAS_VALUES ? (ITEMS + 3) / 4 : 1];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const u32 i = k * THREADS + threadIdx.x;
        if (i < valid_count) {
            const K key = s_keys[i];
            const u32 d = digit_of(key, shift);
            keys_out[s_digit_base[d] + i] = key;
            if constexpr (HAS_VALUES) {
                if (k % 4 == 0) digits[k / 4] = d;
                else digits[k / 4] |= d << (8 * (k % 4));
            }
        }
    }
    if constexpr (HAS_VALUES) {
        // The values take the keys' shared memory once every key has left, so a pass with
        // values needs no more shared memory than one without, and its tiles can be as
        // large (larger tiles: longer runs of one digit, better coalesced writes).
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const u32 pos = (ranks[i / 2] >> (i % 2 == 0 ? 0 : 16)) & 0xffffu;
            if (valid_item(i)) s_vals[pos] = MODE == ROW_IDS ? (u32)lane_begin + i * WARP : values[i];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const u32 i = k * THREADS + threadIdx.x;
            if (i < valid_count) {
                const u32 d = (digits[k / 4] >> (8 * (k % 4))) & (RADIX - 1);
                vals_out[s_digit_base[d] + i] = s_vals[i];
            }
        }
    }
}

// Histograms of all `DIGITS` digits of the keys, added into hist[DIGITS][RADIX].
template <typename K, int DIGITS>
__device__ __forceinline__ void onesweep_histogram(const K* __restrict__ keys, u32 n, u32* hist) {
    __shared__ u32 s_hist[DIGITS][RADIX];
    for (u32 i = threadIdx.x; i < DIGITS * RADIX; i += blockDim.x) (&s_hist[0][0])[i] = 0;
    __syncthreads();
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const K key = keys[i];
#pragma unroll
        for (int d = 0; d < DIGITS; ++d) atomicAdd(&s_hist[d][digit_of(key, d * RADIX_BITS)], 1u);
    }
    __syncthreads();
    for (u32 i = threadIdx.x; i < DIGITS * RADIX; i += blockDim.x) {
        const u32 c = (&s_hist[0][0])[i];
        if (c != 0) atomicAdd(&hist[i], c);
    }
}

#define PASS_ARGS(K)                                                                              \
    const K *keys_in, K *keys_out, const u32 *vals_in, u32 *vals_out, u32 n, u32 shift,          \
        const u32 *bucket_start, u64 *lookback, u32 slot_mask, u32 *tile_counter, u32 epoch
#define PASS_CALL keys_in, keys_out, vals_in, vals_out, n, shift, bucket_start, lookback, slot_mask, tile_counter, epoch

// SHAPE names the tuning entry: SHAPE_THREADS threads, SHAPE_ITEMS keys per thread,
// SHAPE_BLOCKS blocks per SM (the register cap).
#define ONESWEEP_PASS(NAME, K, MODE, SHAPE)                                                         \
    extern "C" __global__ void __launch_bounds__(SHAPE##_THREADS, SHAPE##_BLOCKS) NAME(PASS_ARGS(K)) { \
        onesweep_pass<K, MODE, SHAPE##_THREADS, SHAPE##_ITEMS>(PASS_CALL);                           \
    }

ONESWEEP_PASS(onesweep_pass_u32_keys, u32, KEYS_ONLY, ONESWEEP_U32_KEYS)
ONESWEEP_PASS(onesweep_pass_u32_pairs, u32, READ_VALUES, ONESWEEP_U32_PAIRS)
ONESWEEP_PASS(onesweep_pass_u32_rowids, u32, ROW_IDS, ONESWEEP_U32_ROWIDS)
ONESWEEP_PASS(onesweep_pass_u64_keys, u64, KEYS_ONLY, ONESWEEP_U64_KEYS)
ONESWEEP_PASS(onesweep_pass_u64_pairs, u64, READ_VALUES, ONESWEEP_U64_PAIRS)
ONESWEEP_PASS(onesweep_pass_u64_rowids, u64, ROW_IDS, ONESWEEP_U64_ROWIDS)

extern "C" __global__ void __launch_bounds__(HISTOGRAM_THREADS)
    onesweep_histogram_u32(const u32* keys, u32 n, u32* hist) {
    onesweep_histogram<u32, 4>(keys, n, hist);
}

extern "C" __global__ void __launch_bounds__(HISTOGRAM_THREADS)
    onesweep_histogram_u64(const u64* keys, u32 n, u32* hist) {
    onesweep_histogram<u64, 8>(keys, n, hist);
}

// dst[i] = src[perm[i]]: the next (more significant) key word in the current order.
extern "C" __global__ void onesweep_gather_u64(const u64* __restrict__ src, const u32* __restrict__ perm,
                                               u64* __restrict__ dst, u32 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[perm[i]];
}
