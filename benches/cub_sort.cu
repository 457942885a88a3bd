// cub_sort.cu: the CUB baseline of `gpusort bench kernels`.
//
//   nvcc -O3 -arch=sm_90 -o cub_sort benches/cub_sort.cu
//   ./cub_sort SEED REPS WARMUP LOG2_SIZE...
//
// Generates exactly the data of the Rust side (keys splitmix64(seed + i), values
// splitmix64(~seed + i)), sorts it with cub::DeviceRadixSort (keys only, pairs, and u64 keys
// with u32 row ids), and prints one line per cell: `cub <variant> <log2> <median ms>`.
// Timing: a fresh device copy of the input before each run, CUDA events around the sort
// alone, warm-up runs first, median of REPS.
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

typedef unsigned int u32;
typedef unsigned long long u64;

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e = (x);                                                             \
        if (e != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

__host__ __device__ u64 splitmix64(u64 x) {
    u64 z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <typename T>
__global__ void fill(T* out, size_t n, u64 seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (T)splitmix64(seed + i);
}

__global__ void iota(u32* out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (u32)i;
}

template <typename K>
float time_cell(size_t n, u64 seed, int mode, int reps, int warmup) {
    // mode 0 keys only, 1 given u32 values, 2 row ids (iota values)
    K *pristine, *keys_in, *keys_out;
    u32 *vals_pristine = nullptr, *vals_in = nullptr, *vals_out = nullptr;
    CHECK(cudaMalloc(&pristine, n * sizeof(K)));
    CHECK(cudaMalloc(&keys_in, n * sizeof(K)));
    CHECK(cudaMalloc(&keys_out, n * sizeof(K)));
    fill<K><<<1024, 256>>>(pristine, n, seed);
    if (mode != 0) {
        CHECK(cudaMalloc(&vals_pristine, n * sizeof(u32)));
        CHECK(cudaMalloc(&vals_in, n * sizeof(u32)));
        CHECK(cudaMalloc(&vals_out, n * sizeof(u32)));
        if (mode == 1) fill<u32><<<1024, 256>>>(vals_pristine, n, ~seed);
    }
    size_t temp_bytes = 0;
    if (mode == 0)
        cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, keys_in, keys_out, (int)n);
    else
        cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, vals_in, vals_out, (int)n);
    void* temp;
    CHECK(cudaMalloc(&temp, temp_bytes));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<float> times;
    for (int rep = 0; rep < warmup + reps; ++rep) {
        CHECK(cudaMemcpy(keys_in, pristine, n * sizeof(K), cudaMemcpyDeviceToDevice));
        if (mode == 1) CHECK(cudaMemcpy(vals_in, vals_pristine, n * sizeof(u32), cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(start));
        // Row ids: CUB has no generator, so the iota runs inside the timed region (one
        // extra write of n u32; our pass writes them as part of the first scatter).
        if (mode == 2) iota<<<1024, 256>>>(vals_in, n);
        if (mode == 0)
            cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys_in, keys_out, (int)n);
        else
            cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out, (int)n);
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaGetLastError());
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (rep >= warmup) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    cudaFree(pristine); cudaFree(keys_in); cudaFree(keys_out); cudaFree(temp);
    if (mode != 0) { cudaFree(vals_pristine); cudaFree(vals_in); cudaFree(vals_out); }
    return times[times.size() / 2];
}

int main(int argc, char** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SEED REPS WARMUP LOG2_SIZE...\n", argv[0]);
        return 2;
    }
    u64 seed = strtoull(argv[1], nullptr, 10);
    int reps = atoi(argv[2]), warmup = atoi(argv[3]);
    for (int a = 4; a < argc; ++a) {
        int log2 = atoi(argv[a]);
        size_t n = (size_t)1 << log2;
        printf("cub u32_keys %d %.4f\n", log2, time_cell<u32>(n, seed, 0, reps, warmup));
        printf("cub u64_keys %d %.4f\n", log2, time_cell<u64>(n, seed, 0, reps, warmup));
        printf("cub u32_pairs %d %.4f\n", log2, time_cell<u32>(n, seed, 1, reps, warmup));
        printf("cub u64_rowids %d %.4f\n", log2, time_cell<u64>(n, seed, 2, reps, warmup));
        fflush(stdout);
    }
    return 0;
}
