// The lookup helper (rule T5, `core/engine/src/rules.rs`) ported to CUDA, over the chunk table the engine builds,
// read byte for byte from the file `ChunkTable::to_le_bytes` writes. This is a port of the helper's
// logic (the hash, the bounded probe of 16-byte slots, two lookups per access), not the SPIR-V the
// Vulkan backend runs: the H200 it is measured on has no working Vulkan driver.
//
// Three kernels do the same random 4-byte loads over 1 GiB mapped in many pieces:
//   through_helper      guest addresses in, translated by the helper;
//   by_raw_address      device addresses in: no translation at all (the limit);
//   through_flat_table  guest addresses in, one u64 per 4 KiB page of the guest span (the
//                       shadPS4-style anchor).
// Each thread xors what it loads; the three results must equal the host's, so the figures are
// also a check of the port.
//
// Inputs (written by `cargo bench -p dispatchscope-core --bench vk_lookup -- --write-cuda-inputs DIR`):
//   DIR/table.bin   the engine's table, capacity * 16 bytes: per slot the guest chunk then the device
//                   address, little-endian u64s; device addresses are offsets from `file_base` in an
//                   arena where the pieces lie in shuffled order. The runner relocates every
//                   non-empty slot's address to its own cudaMalloc'd arena; slots and keys are untouched.
//   DIR/pieces.bin  per piece: guest start, bytes, arena offset (little-endian u64s).
//   DIR/meta.txt    `key value` lines.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o lookup_bench lookup.cu   (see run.sh)
// Without nvcc, `g++ -O2 -std=c++17 -x c++ lookup.cu` builds the same code against cpu_shim.h,
// which runs the kernels on the host, one thread after another: a check of the logic, not a figure.

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define LAUNCH(kernel, grid, block, ...) kernel<<<(grid), (block)>>>(__VA_ARGS__)
#define LDG(p) __ldg(p)
#else
#include "cpu_shim.h"
#endif

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t err_ = (x);                                                         \
        if (err_ != cudaSuccess) {                                                      \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,      \
                         cudaGetErrorString(err_));                                     \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)

// chunk_table.rs: EMPTY_KEY; spirv.rs: NO_SLOT. The table's multiplier comes from meta.txt.
constexpr uint64_t EMPTY_KEY = ~0ull;
constexpr uint32_t NO_SLOT = 0xffffffffu;

struct Hit {
    uint64_t device_addr;
    uint32_t slot;
};

// T5: the device address of a chunk's first byte and its slot, or (0, NO_SLOT). Bit for bit
// chunk_table::home_slot and ChunkTable::lookup: home = (k * multiplier) >> (64 - log2),
// then at most `bound` consecutive 16-byte slots, wrapping, until the key or the empty key.
// A slot is read as one 16-byte load (key, address): the layout's point.
__device__ __forceinline__ Hit lookup(const ulonglong2* __restrict__ table, uint32_t capacity_log2,
                                      uint32_t probe_bound, uint64_t multiplier,
                                      uint64_t guest_chunk) {
    Hit hit{0, NO_SLOT};
    if (guest_chunk == EMPTY_KEY) return hit;
    const uint64_t h = guest_chunk * multiplier;
    const uint32_t home = capacity_log2 == 0 ? 0u : (uint32_t)(h >> (64 - capacity_log2));
    const uint32_t wrap_mask = (1u << capacity_log2) - 1u;
    uint32_t slot = home;
    for (uint32_t n = 0; n < probe_bound; ++n) {
        const ulonglong2 s = LDG(table + slot);
        if (s.x == guest_chunk) {
            hit.device_addr = s.y;
            hit.slot = slot;
            return hit;
        }
        if (s.x == EMPTY_KEY) return hit;
        slot = (slot + 1u) & wrap_mask;
    }
    return hit;
}

struct Params {
    const uint64_t* addrs;  // guest addresses (helper, flat) or device addresses (raw)
    uint32_t* out;          // one xor per thread
    uint32_t threads;       // threads in all
    uint32_t per_thread;    // loads per thread: load k of thread g is addrs[k * threads + g]
    const ulonglong2* table;
    uint32_t capacity_log2;
    uint32_t probe_bound;
    uint64_t multiplier;
    uint32_t chunk_shift;
    const uint64_t* flat;   // one device address per 4 KiB page from flat_first_page, 0 if unmapped
    uint64_t flat_first_page;
    uint64_t flat_pages;
};

__global__ void through_helper(Params p) {
    const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= p.threads) return;
    const uint64_t chunk_mask = (1ull << p.chunk_shift) - 1ull;
    uint32_t acc = 0;
    for (uint32_t k = 0; k < p.per_thread; ++k) {
        const uint64_t a = p.addrs[(uint64_t)k * p.threads + g];
        // T5: the chunk of the first byte and the chunk of the last byte (never different for an
        // aligned 4-byte load, as in the Vulkan kernel).
        const uint64_t c0 = a >> p.chunk_shift;
        const uint64_t c1 = (a + 3) >> p.chunk_shift;
        const Hit h0 = lookup(p.table, p.capacity_log2, p.probe_bound, p.multiplier, c0);
        Hit h1 = h0;
        if (c1 != c0) h1 = lookup(p.table, p.capacity_log2, p.probe_bound, p.multiplier, c1);
        (void)h1;
        if (h0.slot != NO_SLOT) acc ^= *(const uint32_t*)(h0.device_addr + (a & chunk_mask));
    }
    p.out[g] = acc;
}

__global__ void by_raw_address(Params p) {
    const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= p.threads) return;
    uint32_t acc = 0;
    for (uint32_t k = 0; k < p.per_thread; ++k) {
        acc ^= *(const uint32_t*)(p.addrs[(uint64_t)k * p.threads + g]);
    }
    p.out[g] = acc;
}

__global__ void through_flat_table(Params p) {
    const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= p.threads) return;
    uint32_t acc = 0;
    for (uint32_t k = 0; k < p.per_thread; ++k) {
        const uint64_t a = p.addrs[(uint64_t)k * p.threads + g];
        const uint64_t rel = (a >> 12) - p.flat_first_page;
        if (rel < p.flat_pages) {
            const uint64_t base = LDG(p.flat + rel);
            if (base != 0) acc ^= *(const uint32_t*)(base + (a & 0xfffull));
        }
    }
    p.out[g] = acc;
}

// vk::bench::pattern: the word the pieces hold at guest address a.
__host__ __device__ inline uint32_t pattern(uint64_t a) {
    return ((uint32_t)(a >> 2)) * 0x9E3779B9u ^ 0x5bd1e995u;
}

__global__ void fill_piece(uint32_t* dst, uint64_t guest_start, uint64_t words) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < words) dst[i] = pattern(guest_start + 4 * i);
}

static std::vector<char> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        std::exit(1);
    }
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

static uint64_t le64(const char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | (uint8_t)p[i];
    return v;
}

struct Piece {
    uint64_t guest, bytes, offset;
};

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : "inputs/4k";
    const uint64_t loads = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : (1ull << 26);
    const uint32_t threads = argc > 3 ? (uint32_t)std::strtoul(argv[3], nullptr, 0) : (1u << 20);
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 10;

    std::map<std::string, std::string> meta;
    {
        std::ifstream f(dir + "/meta.txt");
        std::string k, v;
        while (f >> k >> v) meta[k] = v;
    }
    auto num = [&](const char* k) -> uint64_t {
        auto it = meta.find(k);
        if (it == meta.end()) {
            std::fprintf(stderr, "%s/meta.txt has no %s\n", dir.c_str(), k);
            std::exit(1);
        }
        return std::strtoull(it->second.c_str(), nullptr, 0);
    };
    const uint32_t capacity_log2 = (uint32_t)num("capacity_log2");
    const uint32_t chunk_shift = (uint32_t)num("chunk_shift");
    const uint32_t probe_bound = (uint32_t)num("probe_bound");
    const uint64_t multiplier = num("multiplier");
    const uint64_t arena_bytes = num("arena_bytes");
    const uint64_t file_base = num("file_base");

    std::vector<char> table_bytes = read_file(dir + "/table.bin");
    const uint64_t capacity = 1ull << capacity_log2;
    if (table_bytes.size() != capacity * 16) {
        std::fprintf(stderr, "table.bin has %zu bytes, not %" PRIu64 " slots of 16\n",
                     table_bytes.size(), capacity);
        return 1;
    }
    std::vector<char> piece_bytes = read_file(dir + "/pieces.bin");
    std::vector<Piece> pieces(piece_bytes.size() / 24);
    for (size_t i = 0; i < pieces.size(); ++i) {
        const char* p = piece_bytes.data() + 24 * i;
        pieces[i] = Piece{le64(p), le64(p + 8), le64(p + 16)};
    }

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    char* arena = nullptr;
    CHECK(cudaMalloc((void**)&arena, arena_bytes));
    for (const Piece& p : pieces) {
        const uint64_t words = p.bytes / 4;
        LAUNCH(fill_piece, (unsigned)((words + 255) / 256), 256u, (uint32_t*)(arena + p.offset),
               p.guest, words);
    }
    CHECK(cudaGetLastError());

    // Relocate the table's device addresses into the arena: the layout (slots, keys) is the engine's.
    std::vector<ulonglong2> table(capacity);
    uint64_t n_chunks = 0;
    for (uint64_t s = 0; s < capacity; ++s) {
        const char* p = table_bytes.data() + 16 * s;
        table[s].x = le64(p);
        table[s].y = le64(p + 8);
        if (table[s].x != EMPTY_KEY) {
            table[s].y = table[s].y - file_base + (uint64_t)(uintptr_t)arena;
            ++n_chunks;
        }
    }
    ulonglong2* d_table = nullptr;
    CHECK(cudaMalloc((void**)&d_table, capacity * sizeof(ulonglong2)));
    CHECK(cudaMemcpy(d_table, table.data(), capacity * sizeof(ulonglong2), cudaMemcpyHostToDevice));

    // The flat page table over the guest span.
    uint64_t first_page = ~0ull, end_page = 0;
    for (const Piece& p : pieces) {
        first_page = std::min(first_page, p.guest >> 12);
        end_page = std::max(end_page, (p.guest + p.bytes) >> 12);
    }
    const uint64_t n_pages = end_page - first_page;
    std::vector<uint64_t> flat(n_pages, 0);
    for (const Piece& p : pieces)
        for (uint64_t page = p.guest >> 12; page < (p.guest + p.bytes) >> 12; ++page)
            flat[page - first_page] = (uint64_t)(uintptr_t)arena + p.offset + ((page << 12) - p.guest);
    uint64_t* d_flat = nullptr;
    CHECK(cudaMalloc((void**)&d_flat, n_pages * 8));
    CHECK(cudaMemcpy(d_flat, flat.data(), n_pages * 8, cudaMemcpyHostToDevice));

    // Random 4-byte-aligned guest addresses in the pieces, each piece in proportion to its size,
    // and the device address of each.
    const uint32_t per_thread = (uint32_t)(loads / threads);
    const uint64_t n = (uint64_t)per_thread * threads;
    std::vector<uint64_t> ends(pieces.size());
    uint64_t total = 0;
    for (size_t i = 0; i < pieces.size(); ++i) ends[i] = (total += pieces[i].bytes);
    std::vector<uint64_t> guest(n), device(n);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    uint32_t expected = 0;
    for (uint64_t i = 0; i < n; ++i) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        const uint64_t r = ((x * 0x2545F4914F6CDD1Dull) % (total / 4)) * 4;
        const size_t k = std::upper_bound(ends.begin(), ends.end(), r) - ends.begin();
        const uint64_t before = k == 0 ? 0 : ends[k - 1];
        guest[i] = pieces[k].guest + (r - before);
        device[i] = (uint64_t)(uintptr_t)arena + pieces[k].offset + (r - before);
        expected ^= pattern(guest[i]);
    }
    uint64_t *d_guest = nullptr, *d_device = nullptr;
    uint32_t* d_out = nullptr;
    CHECK(cudaMalloc((void**)&d_guest, n * 8));
    CHECK(cudaMalloc((void**)&d_device, n * 8));
    CHECK(cudaMalloc((void**)&d_out, (uint64_t)threads * 4));
    CHECK(cudaMemcpy(d_guest, guest.data(), n * 8, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_device, device.data(), n * 8, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());

    std::printf("%s: %s, %zu pieces, %.0f MiB, chunk %#llx, table %" PRIu64
                " slots (%.1f MiB, %" PRIu64 " chunks, mean probes per hit %s), flat table %.1f MiB, %" PRIu64
                " loads (%u threads x %u)\n",
                dir.c_str(), prop.name, pieces.size(), arena_bytes / 1048576.0,
                (unsigned long long)(1ull << chunk_shift), capacity, capacity * 16 / 1048576.0,
                n_chunks, meta.count("mean_probes_hit") ? meta["mean_probes_hit"].c_str() : "?",
                n_pages * 8 / 1048576.0, n, threads, per_thread);

    const char* names[3] = {"helper", "raw", "flat"};
    float median_ms[3] = {0, 0, 0};
    std::vector<uint32_t> out(threads);
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int kernel = 0; kernel < 3; ++kernel) {
        Params p{};
        p.addrs = kernel == 1 ? d_device : d_guest;
        p.out = d_out;
        p.threads = threads;
        p.per_thread = per_thread;
        p.table = d_table;
        p.capacity_log2 = capacity_log2;
        p.probe_bound = probe_bound;
        p.multiplier = multiplier;
        p.chunk_shift = chunk_shift;
        p.flat = d_flat;
        p.flat_first_page = first_page;
        p.flat_pages = n_pages;
        const unsigned block = 256, grid = (threads + block - 1) / block;
        std::vector<float> ms;
        for (int r = 0; r <= repeats; ++r) {
            CHECK(cudaEventRecord(start));
            if (kernel == 0) LAUNCH(through_helper, grid, block, p);
            if (kernel == 1) LAUNCH(by_raw_address, grid, block, p);
            if (kernel == 2) LAUNCH(through_flat_table, grid, block, p);
            CHECK(cudaGetLastError());
            CHECK(cudaEventRecord(stop));
            CHECK(cudaEventSynchronize(stop));
            float t = 0;
            CHECK(cudaEventElapsedTime(&t, start, stop));
            if (r > 0) ms.push_back(t);  // run 0 warms up
        }
        std::sort(ms.begin(), ms.end());
        median_ms[kernel] = ms[ms.size() / 2];
        CHECK(cudaMemcpy(out.data(), d_out, (uint64_t)threads * 4, cudaMemcpyDeviceToHost));
        uint32_t got = 0;
        for (uint32_t v : out) got ^= v;
        std::printf("  %-6s median %9.3f ms (min %9.3f ms), %7.3f ns/load, %s\n", names[kernel],
                    median_ms[kernel], ms.front(), median_ms[kernel] * 1e6 / (double)n,
                    got == expected ? "result checked" : "RESULT WRONG");
        if (got != expected) {
            std::fprintf(stderr, "%s: xor %#x, expected %#x\n", names[kernel], got, expected);
            return 1;
        }
    }
    std::printf("  ratios: helper/raw %.3f, flat/raw %.3f, helper/flat %.3f (goal: helper/raw <= 1.3)\n",
                median_ms[0] / median_ms[1], median_ms[2] / median_ms[1], median_ms[0] / median_ms[2]);
    CHECK(cudaFree(d_out));
    CHECK(cudaFree(d_device));
    CHECK(cudaFree(d_guest));
    CHECK(cudaFree(d_flat));
    CHECK(cudaFree(d_table));
    CHECK(cudaFree(arena));
    return 0;
}
