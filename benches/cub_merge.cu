// cub_merge.cu: the CUB baselines of `gpusort bench merge`.
//
//   nvcc -O3 -arch=sm_90 -o cub_merge benches/cub_merge.cu
//   ./cub_merge SEED REPS WARMUP LOG2_SIZE
//
// Generates exactly the data of the Rust side (src/bin/gpusort/bench_merge.rs) and prints
// one line per cell:
//   cub seg <length> <stable segmented sort ms> <segmented radix sort ms>
//       u64 keys splitmix64(seed + i) with u32 row ids, segments of <length> rows (the last
//       shorter), cub::DeviceSegmentedSort::StableSortPairs and
//       cub::DeviceSegmentedRadixSort::SortPairs
//   cub near <bits> <noise> <radix sort ms>
//       nearly sorted keys (see nearly_sorted below) with u32 row ids,
//       cub::DeviceRadixSort::SortPairs
// Timing: a fresh device copy of the input before each run, CUDA events around the sort
// alone (row ids written inside it), warm-up runs first, median of REPS.
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

typedef unsigned int u32;
typedef unsigned long long u64;

#define CHECK(x)                                                                              \
    do {                                                                                      \
        cudaError_t e = (x);                                                                  \
        if (e != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

__host__ __device__ u64 splitmix64(u64 x) {
    u64 z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Row i: base = 16 i + splitmix64(seed + i) % (16 noise + 1); u32 keys are base, u64 keys
// (base << 24) | (splitmix64(~seed + i) & 0xffffff). Noise 0 is sorted input.
__host__ __device__ u64 nearly_sorted(u64 i, u64 seed, u64 noise, int bits) {
    u64 base = 16 * i + splitmix64(seed + i) % (16 * noise + 1);
    return bits == 32 ? base : (base << 24) | (splitmix64(~seed + i) & 0xffffff);
}

template <typename K>
__global__ void fill_random(K* out, size_t n, u64 seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (K)splitmix64(seed + i);
}

template <typename K>
__global__ void fill_nearly(K* out, size_t n, u64 seed, u64 noise, int bits) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (K)nearly_sorted(i, seed, noise, bits);
}

__global__ void iota(u32* out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (u32)i;
}

__global__ void segment_offsets(int* out, int segments, size_t n, size_t length) {
    for (size_t s = blockIdx.x * (size_t)blockDim.x + threadIdx.x; s <= (size_t)segments; s += (size_t)gridDim.x * blockDim.x)
        out[s] = (int)(s * length < n ? s * length : n);
}

// Median ms of `sort(keys_in, keys_out, vals_in, vals_out, temp, temp_bytes)` over fresh
// copies of `pristine`; `sort` with temp == nullptr sizes temp_bytes.
template <typename K, typename Sort>
float time_sort(const K* pristine, size_t n, int reps, int warmup, Sort sort) {
    K *keys_in, *keys_out;
    u32 *vals_in, *vals_out;
    CHECK(cudaMalloc(&keys_in, n * sizeof(K)));
    CHECK(cudaMalloc(&keys_out, n * sizeof(K)));
    CHECK(cudaMalloc(&vals_in, n * sizeof(u32)));
    CHECK(cudaMalloc(&vals_out, n * sizeof(u32)));
    size_t temp_bytes = 0;
    sort(keys_in, keys_out, vals_in, vals_out, (void*)nullptr, temp_bytes);
    void* temp;
    CHECK(cudaMalloc(&temp, std::max(temp_bytes, (size_t)1)));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<float> times;
    for (int rep = 0; rep < warmup + reps; ++rep) {
        CHECK(cudaMemcpy(keys_in, pristine, n * sizeof(K), cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(start));
        iota<<<1024, 256>>>(vals_in, n);
        sort(keys_in, keys_out, vals_in, vals_out, temp, temp_bytes);
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaGetLastError());
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (rep >= warmup) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    cudaFree(keys_in); cudaFree(keys_out); cudaFree(vals_in); cudaFree(vals_out); cudaFree(temp);
    return times[times.size() / 2];
}

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s SEED REPS WARMUP LOG2_SIZE\n", argv[0]);
        return 2;
    }
    u64 seed = strtoull(argv[1], nullptr, 10);
    int reps = atoi(argv[2]), warmup = atoi(argv[3]);
    size_t n = (size_t)1 << atoi(argv[4]);
    u64* random;
    CHECK(cudaMalloc(&random, n * sizeof(u64)));
    fill_random<u64><<<1024, 256>>>(random, n, seed);
    const size_t lengths[] = {16, 100, 113, 1000, 10000, 1000000};
    for (size_t length : lengths) {
        int segments = (int)((n + length - 1) / length);
        int* offsets;
        CHECK(cudaMalloc(&offsets, (segments + 1) * sizeof(int)));
        segment_offsets<<<1024, 256>>>(offsets, segments, n, length);
        float stable = time_sort(random, n, reps, warmup, [&](u64* ki, u64* ko, u32* vi, u32* vo, void* t, size_t& tb) {
            CHECK(cub::DeviceSegmentedSort::StableSortPairs(t, tb, ki, ko, vi, vo, (int)n, segments, offsets, offsets + 1));
        });
        float radix = time_sort(random, n, reps, warmup, [&](u64* ki, u64* ko, u32* vi, u32* vo, void* t, size_t& tb) {
            CHECK(cub::DeviceSegmentedRadixSort::SortPairs(t, tb, ki, ko, vi, vo, (int)n, segments, offsets, offsets + 1));
        });
        printf("cub seg %zu %.4f %.4f\n", length, stable, radix);
        fflush(stdout);
        cudaFree(offsets);
    }
    const u64 noises[] = {0, 64, 4096};
    for (int bits : {32, 64}) {
        for (u64 noise : noises) {
            float ms;
            if (bits == 32) {
                u32* keys;
                CHECK(cudaMalloc(&keys, n * sizeof(u32)));
                fill_nearly<u32><<<1024, 256>>>(keys, n, seed, noise, 32);
                ms = time_sort(keys, n, reps, warmup, [&](u32* ki, u32* ko, u32* vi, u32* vo, void* t, size_t& tb) {
                    CHECK(cub::DeviceRadixSort::SortPairs(t, tb, ki, ko, vi, vo, (int)n));
                });
                cudaFree(keys);
            } else {
                u64* keys;
                CHECK(cudaMalloc(&keys, n * sizeof(u64)));
                fill_nearly<u64><<<1024, 256>>>(keys, n, seed, noise, 64);
                ms = time_sort(keys, n, reps, warmup, [&](u64* ki, u64* ko, u32* vi, u32* vo, void* t, size_t& tb) {
                    CHECK(cub::DeviceRadixSort::SortPairs(t, tb, ki, ko, vi, vo, (int)n));
                });
                cudaFree(keys);
            }
            printf("cub near %d %llu %.4f\n", bits, noise, ms);
            fflush(stdout);
        }
    }
    return 0;
}
