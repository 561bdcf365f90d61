// A C++ frame loop standing in for an emulator that embeds dispatchscope: it creates its own
// Vulkan instance and device, hands them to dispatchscope through the C ABI, and every frame
// applies memory events and runs bound and device-addressed dispatches, while a debugger may
// attach (`dispatchscope attach 127.0.0.1:PORT`), pause it, step it and break on a refusal.
//
//   cpp-target [--listen 127.0.0.1:0] [--token T] [--frames N] [--cpu]
//
// It prints `listening on ADDR:PORT` once, then one line a frame. --frames 0 (the default) runs
// until killed; --cpu runs on dispatchscope's CPU reference instead of Vulkan.
#include <vulkan/vulkan.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ds_host.hpp"
#include "dispatchscope.h"

namespace {

[[noreturn]] void die(const std::string &what) {
    std::fprintf(stderr, "cpp-target: %s\n", what.c_str());
    std::exit(1);
}

void check(ds_status status, const char *what) {
    if (status != DS_OK) die(std::string(what) + ": " + ds_last_error());
}

void check_vk(VkResult result, const char *what) {
    if (result != VK_SUCCESS) die(std::string(what) + " failed: VkResult " + std::to_string(result));
}

// The emulator's own device: what dispatchscope needs (Vulkan 1.2, external host memory, buffer
// device addresses, 64-bit integers) enabled by the emulator, as it would for its own passes.
struct Device {
    VkInstance instance = VK_NULL_HANDLE;
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t family = 0;
    std::string name;
    // What vkCreateDevice was given, kept for dispatchscope to check.
    VkPhysicalDeviceVulkan12Features v12{};
    VkPhysicalDeviceFeatures2 features{};
    const char *extensions[1] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};

    void open() {
        VkApplicationInfo app{};
        app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
        app.pApplicationName = "dispatchscope cpp-target";
        app.apiVersion = VK_API_VERSION_1_2;
        VkInstanceCreateInfo ici{};
        ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
        ici.pApplicationInfo = &app;
        check_vk(vkCreateInstance(&ici, nullptr, &instance), "vkCreateInstance");

        ds_example::ComputeDevice found = ds_example::find_compute_device(instance);
        if (found.physical == VK_NULL_HANDLE) die("no Vulkan 1.2 device with a compute queue");
        physical = found.physical;
        family = found.family;
        name = found.props.deviceName;
        check_vk(ds_example::create_compute_device(found, v12, features, extensions, &device), "vkCreateDevice");
        vkGetDeviceQueue(device, family, 0, &queue);
    }

    void close() {
        if (device != VK_NULL_HANDLE) vkDestroyDevice(device, nullptr);
        if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
    }
};

void apply_event(ds_engine engine, const std::string &event) {
    check(ds_engine_apply_json(engine, reinterpret_cast<const uint8_t *>(event.data()), event.size()),
          "apply");
}

std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "\"0x%llx\"", static_cast<unsigned long long>(v));
    return buf;
}

using ds_example::slot;

const char *mode_name(ds_mode m) {
    switch (m) {
        case DS_MODE_BOUND: return "bound";
        case DS_MODE_DEVICE_ADDRESSED: return "device-addressed";
        case DS_MODE_REFUSED: return "refused";
    }
    return "?";
}

}  // namespace

int main(int argc, char **argv) {
    std::string listen = "127.0.0.1:0";
    const char *token = nullptr;
    long frames = 0;
    bool cpu = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--listen" && i + 1 < argc) listen = argv[++i];
        else if (a == "--token" && i + 1 < argc) token = argv[++i];
        else if (a == "--frames" && i + 1 < argc) frames = std::strtol(argv[++i], nullptr, 10);
        else if (a == "--cpu") cpu = true;
        else die("usage: cpp-target [--listen ADDR] [--token T] [--frames N] [--cpu]");
    }

    Device vk;
    ds_engine engine = 0;
    ds_limits limits;
    check(ds_limits_default(&limits), "ds_limits_default");
    limits.name = "cpp-target";
    if (cpu) {
        check(ds_engine_create(&limits, &engine), "ds_engine_create");
    } else {
        vk.open();
        ds_vulkan_device handles = ds_example::vulkan_handles(vk);
        check(ds_engine_create_vulkan(&handles, &engine), "ds_engine_create_vulkan");
    }
    uint16_t port = 0;
    check(ds_engine_listen(engine, listen.c_str(), token, "cpp-target", &port), "ds_engine_listen");
    std::printf("listening on %s:%u (%s)\n", listen.substr(0, listen.rfind(':')).c_str(), port,
                cpu ? "cpu-reference" : vk.name.c_str());
    std::fflush(stdout);

    // Guest memory: 64 KiB of read-write memory for the passes, and a page the guest may not write.
    const uint64_t heap = 0x7400000000ull;
    apply_event(engine, "{\"event\":\"reserve\",\"range\":{\"start\":" + hex(heap) + ",\"end\":" +
                      hex(heap + 0x10000) +
                      "},\"readable\":true,\"writable\":true,\"committed\":true}");
    const uint64_t ro = heap + 0x20000;
    apply_event(engine, "{\"event\":\"reserve\",\"range\":{\"start\":" + hex(ro) + ",\"end\":" +
                      hex(ro + 0x1000) + "},\"readable\":true,\"writable\":false,\"committed\":true}");

    for (long frame = 0; frames == 0 || frame < frames; frame++) {
        auto start = std::chrono::steady_clock::now();
        // Between frames the CPU writes the constants the passes read.
        uint32_t value = static_cast<uint32_t>(frame);
        std::string bytes;
        char buf[16];
        for (int i = 0; i < 4; i++) {
            std::snprintf(buf, sizeof buf, "%02x", (value >> (8 * i)) & 0xff);
            bytes += buf;
        }
        apply_event(engine, "{\"event\":\"write\",\"address\":" + hex(heap + 0x8000) + ",\"bytes\":\"" +
                          bytes + "\"}");

        // A bound pass: two written buffers overlapping (D953: one holder) and a read-only one.
        ds_slot bound[] = {slot(0, heap, 0x1000, true), slot(1, heap + 0x800, 0x1000, true),
                           slot(2, heap + 0x8000, 0x100, false)};
        ds_dispatch d{};
        d.size = sizeof d;
        d.program = 0x400000001000ull;
        d.slots = bound;
        d.n_slots = 3;
        check(ds_engine_dispatch(engine, &d), "bound dispatch");
        ds_mode m1;
        check(ds_engine_report_mode(engine, &m1), "mode");

        // A device-addressed pass (A1: its descriptor is computed from what the host cannot know),
        // with its recorded accesses: a load of the constants, a store into the heap.
        std::string json = "{\"program\":\"0x400000002000\",\"reasons\":[\"D753\"],\"accesses\":["
                           "{\"kind\":\"global\",\"op\":\"load\",\"size_bytes\":4,\"address\":" +
                           hex(heap + 0x8000) +
                           "},{\"kind\":\"global\",\"op\":\"store\",\"size_bytes\":4,\"address\":" +
                           hex(heap + 0x100 + 4 * (frame % 64)) + ",\"values\":[" +
                           std::to_string(value) + "]}]}";
        check(ds_engine_dispatch_json(engine, reinterpret_cast<const uint8_t *>(json.data()),
                                      json.size()),
              "device-addressed dispatch");
        ds_mode m2;
        check(ds_engine_report_mode(engine, &m2), "mode");

        // Every fourth frame a pass the planner refuses: a member at offset 0x44 of its holder,
        // which no storage-buffer offset alignment allows (O7).
        uint32_t refusals = 0;
        if (frame % 4 == 3) {
            ds_slot misaligned[] = {slot(0, heap + 0x2000, 0x1000, true),
                                    slot(1, heap + 0x2044, 0x100, true)};
            d.program = 0x400000003000ull;
            d.slots = misaligned;
            d.n_slots = 2;
            check(ds_engine_dispatch(engine, &d), "misaligned dispatch");
            check(ds_engine_report_refusals(engine, &refusals), "refusals");
        }
        uint8_t attached = 0;
        check(ds_engine_attached(engine, &attached), "attached");
        std::printf("frame %ld: %s, %s, %u refusals%s\n", frame, mode_name(m1), mode_name(m2),
                    refusals, attached ? " (debugger attached)" : "");
        std::fflush(stdout);
        std::this_thread::sleep_until(start + std::chrono::milliseconds(16));
    }
    check(ds_engine_destroy(engine), "ds_engine_destroy");
    vk.close();
    return 0;
}
