// An emulator-shaped host for dispatchscope (issues 27 and 40): a C++ frame loop whose guest memory
// is real pages and whose passes are its own modules on its own Vulkan device, shaped as an emulator
// runs a game: a frame's hundreds of dispatches prepared one after another (ds_engine_prepare),
// recorded into this program's command buffer in that order with a barrier between them, submitted
// once, frames in flight, and completed in order after each frame's fence (ds_engine_complete);
// guest threads write and guard guest memory meanwhile. A debugger may attach at any time (--listen).
//
//   emulator-host [--frames N] [--dispatches-per-frame N] [--frames-in-flight K] [--guest-threads T]
//                 [--plain] [--lose-device] [--listen ADDR] [--token T] [--guest-mib N] [--toggles N]
//                 [--lock-every N] [--instrumented | --header] [--import-holders] [--heap-sets]
//                 [--serial] [--resolution WxH] [--validation] [--print-reports]
//
// Guest memory (every region at a host address this program chooses):
// - the heap: --guest-mib MiB reserved with mmap (MAP_NORESERVE, PROT_NONE), committed lazily (M2's
//   commit callback makes each stretch read-write). It is what device-addressed passes reach (M1):
//   the constant leaves, the idle page, and one arena a frame in flight plus one (frames N and N+K+1
//   share arena N % (K+1)) holding each unit's outputs, in-place holders and root tables, the
//   frame's deferred copy (C3), and words the guest threads write beside them.
// - a region whose pages guest thread 0 makes read-only every --lock-every frames (DS_EVENT_PROTECT
//   and DS_EVENT_HOST_PROTECT, then mprotect) and read-write again: each device-addressed pass
//   stores four words there, which land or escape (T4) as the page was at its prepare.
// - a region backed by a shared memfd (the guest's view and the CPU's alias), which M3 leaves out
//   by name: the device-addressed passes' loads and stores there escape. Its pages are the
//   write-watch's (mprotect guards and a SIGSEGV handler, D824; a guard over mapped memory would
//   wait for every device-addressed dispatch in flight, M5): the textures that can be guarded,
//   the bound pass's sets (copy holders, written back by O8 at complete), and pages guest threads
//   guard and release.
//
// A frame: --dispatches-per-frame dispatches in units of ten, [D D G B D G B R D B]:
// - D, device-addressed (D964): a two-level walk through computed addresses, LDS and scratch through
//   flat apertures (P1), stores through computed addresses (C1), and stores and loads that reach the
//   read-only region and the shared region (escapes). Its instance table points its bottom levels at
//   constant leaves, the deferred copy, and what the unit's earlier D and G passes wrote
//   (device -> device and in place -> device: a barrier is enough).
// - G, bound (D953, shaders/gather.spvasm): reads one slot (a copy holder over what an earlier D or
//   G wrote: a DS_CARRY_FROM_GUEST re-reads it on the device) and read-modify-writes another bound
//   over the guest's own pages (DS_SLOT_IN_PLACE, an import of the heap's arenas).
// - B, bound: run 305's shapes (a member in a 0xe40f-byte holder, a 4-byte member in a 0x94-byte
//   one), three a unit on one pair of sets: each reads what the one before wrote into its holder
//   (DS_CARRY_FROM_HOLDER). With --import-holders its holders are the shared pages, imported.
// - R: a member 0x24 into its holder, refused by O7; prepared, completed, never run.
// Each pass's effect is computed by this program from its own reference image of guest memory (the
// dispatches in the order prepared); after each frame's completes every guest word is checked
// against it (the arenas of frames still in flight next time), and each guest thread's own words
// against what it wrote. One line a frame:
//   frame N: time_ms=… engine_us=… dispatches=… refusals=… escapes=… predicted=… carries=…
//            submissions=… fence_waits=… waits=… mismatches=… … checks=ok
// and a `summary:` line at the end. Exit status 1 if any check failed or the validation layer
// spoke; 3 when Vulkan (or the validation layer asked for) is not there; 4 after --lose-device
// lost the device (the `lost:` lines and the loss report printed).
//
// --plain runs the same frames with no engine: this program's own bindings (the plans it knows),
// its own carries and write-back, and the device-addressed pass linked against the raw helper
// (guest address plus one constant, its heap imported whole); R is skipped, and the passes' stores
// to the read-only and shared regions go to heap words instead (nothing there to escape). The
// baseline for what putting dispatchscope in the path costs.
// --lose-device adds, at frame 2, a pass that hangs the device (lavapipe: its loop bound from a read
// that escaped; the frame's fence wait times out after 2 s) or faults it (another driver: a store
// through a wild address, with VK_EXT_device_fault where the device has it), and reports the loss
// with ds_engine_device_lost.
// --heap-sets puts B's sets in the heap's arenas: copy holders over memory a device-addressed pass
// maps, so each D after a B in flight is DS_WAIT at its prepare (it would read in place what B
// writes back only at its complete): the frame submits what it recorded, waits, completes up to the
// B named, and prepares again (several submissions a frame; the chains then carry from guest
// memory).
// --serial submits each dispatch and completes it before preparing the next (the shape before
// issue 40: a debugger stepping dispatch by dispatch then sees each one's effect in guest memory
// at once).
// --header links D with the helper's header form: its push block carries one 64-bit value for
// dispatchscope (words 30-31, the address of a 64-byte header holding ds_prepared.push[16..32]).
// --instrumented links D with the instrumented library `dispatchscope spirv-helper` writes by
// default, issue 42's lean one (what dispatchscope's own modules ship): D counts its sites' accesses
// itself (SITE_DERIVED, dispatchscope_count at each lane's end), the library counts each escape by
// its site and logs each escaping lane's first, and captures no lane. Its device needs subgroup
// arithmetic and vote in compute shaders and shaderBufferInt64Atomics (enabled here; a device without
// is status 3). Each D's buffer goes to ds_engine_complete, and each D's counts are checked against
// the reference: every site's accesses by route, every site's escapes, the log's entries (one an
// escaping lane: its first escape, at the address the reference computes), the canary's one escape.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dispatchscope.h"
#include "ds_host.hpp"

#ifndef EMULATOR_HOST_SPV_DIR
#define EMULATOR_HOST_SPV_DIR "spv"
#endif
#ifndef EMULATOR_HOST_RDNA_DIR
#define EMULATOR_HOST_RDNA_DIR "rdna"
#endif

namespace {

constexpr int EXIT_ABSENT = 3;
constexpr int EXIT_LOST = 4;

[[noreturn]] void die(const std::string &what) {
    std::fflush(stdout);
    std::fprintf(stderr, "emulator-host: %s\n", what.c_str());
    std::exit(2);
}

// Vulkan (or its validation layer) is not there: status 3, which a test may take as "skip".
[[noreturn]] void absent(const std::string &what) {
    std::fprintf(stderr, "emulator-host: %s\n", what.c_str());
    std::exit(EXIT_ABSENT);
}

void check(ds_status status, const char *what) {
    if (status != DS_OK) die(std::string(what) + ": status " + std::to_string(status) + ": " + ds_last_error());
}

const char *vk_name(VkResult r) {
    switch (r) {
        case VK_SUCCESS: return "VK_SUCCESS";
        case VK_TIMEOUT: return "VK_TIMEOUT";
        case VK_NOT_READY: return "VK_NOT_READY";
        case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
        case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
        case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
        case VK_ERROR_INVALID_EXTERNAL_HANDLE: return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
        default: return "a VkResult";
    }
}

void check_vk(VkResult result, const char *what) {
    if (result != VK_SUCCESS)
        die(std::string(what) + " failed: " + vk_name(result) + " (" + std::to_string(result) + ")");
}

std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

constexpr uint64_t PAGE = 0x1000;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

using Clock = std::chrono::steady_clock;

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// xorshift64*: each thread its own, the same every run.
uint64_t next_rng(uint64_t &s) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
}

// The dispatch a DS_WAIT names: "… waits for dispatch N: …" (a prepare: a chain, a deferred
// copy) or "… which dispatch N (…) can reach …" (an event, M5).
uint64_t waits_for(const std::string &message) {
    for (const char *key : {"waits for dispatch ", "which dispatch "}) {
        size_t at = message.find(key);
        if (at != std::string::npos) return std::strtoull(message.c_str() + at + std::strlen(key), nullptr, 10);
    }
    die("DS_WAIT names no dispatch: " + message);
}

// ---------------------------------------------------------------------------------------------
// Vulkan: the emulator's own instance, device and queue.

std::atomic<uint32_t> g_validation_messages{0};

VKAPI_ATTR VkBool32 VKAPI_CALL on_debug(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                        VkDebugUtilsMessageTypeFlagsEXT,
                                        const VkDebugUtilsMessengerCallbackDataEXT *data, void *) {
    if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        g_validation_messages++;
        std::printf("validation: %s\n", data && data->pMessage ? data->pMessage : "?");
        std::fflush(stdout);
    }
    return VK_FALSE;
}

// One of the device's feature structs, through vkGetPhysicalDeviceFeatures2.
template <class T>
T device_features(VkPhysicalDevice physical, VkStructureType type) {
    T f{};
    f.sType = type;
    VkPhysicalDeviceFeatures2 f2{};
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &f;
    vkGetPhysicalDeviceFeatures2(physical, &f2);
    f.pNext = nullptr;
    return f;
}

struct Device {
    VkInstance instance = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t family = 0;
    std::string name;
    VkPhysicalDeviceProperties props{};
    VkPhysicalDeviceMemoryProperties memory{};
    uint64_t import_alignment = 0x1000;  // minImportedHostPointerAlignment
    bool validation_layer = false;
    VkDriverId driver{};
    bool lavapipe = false;
    // VK_EXT_device_fault, enabled where the device has it: a lost device's report.
    bool device_fault = false;
    VkPhysicalDeviceFaultFeaturesEXT fault_features{};
    PFN_vkGetDeviceFaultInfoEXT get_fault_info = nullptr;
    // What vkCreateDevice was given, kept for dispatchscope to check.
    VkPhysicalDeviceVulkan12Features v12{};
    VkPhysicalDeviceFeatures2 features{};
    const char *extensions[2] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME, VK_EXT_DEVICE_FAULT_EXTENSION_NAME};
    uint32_t n_extensions = 1;

    // `instrumented`: the lean instrumented library is linked (spirv-helper's default), which
    // declares GroupNonUniform{Arithmetic,Vote} and Int64Atomics: the device must have subgroup
    // arithmetic and vote in compute shaders, and shaderBufferInt64Atomics, which is enabled here.
    void open(bool validation, bool instrumented) {
        VkApplicationInfo app{};
        app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
        app.pApplicationName = "dispatchscope emulator-host";
        app.apiVersion = VK_API_VERSION_1_2;
        std::vector<const char *> layers, exts;
        uint32_t n = 0;
        vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
        std::vector<VkExtensionProperties> available(n);
        vkEnumerateInstanceExtensionProperties(nullptr, &n, available.data());
        bool debug_utils = false;
        for (auto &e : available)
            if (std::strcmp(e.extensionName, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0) debug_utils = true;
        // A validation layer enabled from the environment (VK_INSTANCE_LAYERS) also adds the
        // extension; ask the layers too.
        uint32_t nl = 0;
        vkEnumerateInstanceLayerProperties(&nl, nullptr);
        std::vector<VkLayerProperties> available_layers(nl);
        vkEnumerateInstanceLayerProperties(&nl, available_layers.data());
        for (auto &l : available_layers) {
            if (std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") != 0) continue;
            validation_layer = true;
            uint32_t m = 0;
            vkEnumerateInstanceExtensionProperties(l.layerName, &m, nullptr);
            std::vector<VkExtensionProperties> le(m);
            vkEnumerateInstanceExtensionProperties(l.layerName, &m, le.data());
            for (auto &e : le)
                if (std::strcmp(e.extensionName, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0) debug_utils = true;
        }
        if (validation) {
            if (!validation_layer) absent("--validation: VK_LAYER_KHRONOS_validation is not installed");
            layers.push_back("VK_LAYER_KHRONOS_validation");
        }
        if (debug_utils) exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        VkDebugUtilsMessengerCreateInfoEXT dci{};
        dci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
        dci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                              VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        dci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        dci.pfnUserCallback = on_debug;
        VkInstanceCreateInfo ici{};
        ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
        ici.pNext = debug_utils ? &dci : nullptr;
        ici.pApplicationInfo = &app;
        ici.enabledLayerCount = static_cast<uint32_t>(layers.size());
        ici.ppEnabledLayerNames = layers.data();
        ici.enabledExtensionCount = static_cast<uint32_t>(exts.size());
        ici.ppEnabledExtensionNames = exts.data();
        VkResult created = vkCreateInstance(&ici, nullptr, &instance);
        if (created != VK_SUCCESS) absent("vkCreateInstance failed: VkResult " + std::to_string(created));
        if (debug_utils) {
            auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
            if (create) check_vk(create(instance, &dci, nullptr, &messenger), "vkCreateDebugUtilsMessengerEXT");
        }

        ds_example::ComputeDevice found = ds_example::find_compute_device(instance);
        if (found.physical == VK_NULL_HANDLE) absent("no Vulkan 1.2 device with a compute queue");
        physical = found.physical;
        family = found.family;
        props = found.props;
        name = found.props.deviceName;
        vkGetPhysicalDeviceMemoryProperties(physical, &memory);
        VkPhysicalDeviceDriverProperties drv{};
        drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
        VkPhysicalDeviceExternalMemoryHostPropertiesEXT host_props{};
        host_props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT;
        host_props.pNext = &drv;
        VkPhysicalDeviceProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        p2.pNext = &host_props;
        vkGetPhysicalDeviceProperties2(physical, &p2);
        import_alignment = std::max<uint64_t>(host_props.minImportedHostPointerAlignment, 1);
        driver = drv.driverID;
        lavapipe = driver == VK_DRIVER_ID_MESA_LLVMPIPE || name.find("llvmpipe") != std::string::npos;

        // VK_EXT_device_fault where the device has it (a lost device's fault addresses).
        uint32_t ne = 0;
        vkEnumerateDeviceExtensionProperties(physical, nullptr, &ne, nullptr);
        std::vector<VkExtensionProperties> dev_exts(ne);
        vkEnumerateDeviceExtensionProperties(physical, nullptr, &ne, dev_exts.data());
        bool has_fault = false;
        for (auto &e : dev_exts)
            if (std::strcmp(e.extensionName, VK_EXT_DEVICE_FAULT_EXTENSION_NAME) == 0) has_fault = true;
        if (has_fault) {
            const auto ff = device_features<VkPhysicalDeviceFaultFeaturesEXT>(
                physical, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT);
            if (ff.deviceFault) {
                fault_features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT;
                fault_features.deviceFault = VK_TRUE;
                v12.pNext = &fault_features;
                n_extensions = 2;
                device_fault = true;
            }
        }
        if (instrumented) {
            VkPhysicalDeviceSubgroupProperties sub{};
            sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
            VkPhysicalDeviceProperties2 sp{};
            sp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
            sp.pNext = &sub;
            vkGetPhysicalDeviceProperties2(physical, &sp);
            const auto f12 = device_features<VkPhysicalDeviceVulkan12Features>(
                physical, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
            const VkSubgroupFeatureFlags ops = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT |
                                               VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
            std::string lacks;
            if ((sub.supportedOperations & ops) != ops || !(sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT))
                lacks += "subgroup arithmetic and vote in compute shaders";
            if (!f12.shaderBufferInt64Atomics) lacks += std::string(lacks.empty() ? "" : " and ") + "shaderBufferInt64Atomics";
            if (!lacks.empty())
                absent("--instrumented: the lean instrumented helper library needs " + lacks + ", which " + name +
                       " lacks (spirv-helper --no-subgroup-arithmetic --no-int64-atomics writes one without)");
            v12.shaderBufferInt64Atomics = VK_TRUE;
        }
        check_vk(ds_example::create_compute_device(found, v12, features, extensions, &device, n_extensions),
                 "vkCreateDevice");
        vkGetDeviceQueue(device, family, 0, &queue);
        if (device_fault)
            get_fault_info = reinterpret_cast<PFN_vkGetDeviceFaultInfoEXT>(
                vkGetDeviceProcAddr(device, "vkGetDeviceFaultInfoEXT"));
    }

    // A type with `want` and `better`, else one with `want`.
    uint32_t memory_type_preferring(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags better) const {
        for (uint32_t i = 0; i < memory.memoryTypeCount; i++)
            if ((bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & (want | better)) == (want | better))
                return i;
        return memory_type(bits, want);
    }

    uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want) const {
        for (uint32_t i = 0; i < memory.memoryTypeCount; i++)
            if ((bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & want) == want) return i;
        die("no memory type for the buffer");
    }

    void close() {
        if (device != VK_NULL_HANDLE) vkDestroyDevice(device, nullptr);
        if (messenger != VK_NULL_HANDLE) {
            auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
            if (destroy) destroy(instance, messenger, nullptr);
        }
        if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
    }
};

constexpr VkBufferUsageFlags BUFFER_USAGE =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

// A host-visible, coherent buffer of the emulator's (not guest memory), or the emulator's own guest
// pages imported zero-copy.
struct Buffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    uint8_t *ptr = nullptr;
    uint64_t bytes = 0;
    uint64_t address = 0;
    bool imported = false;

    // `read_back`: the CPU reads what the device wrote here (holders, masks, logs): host-cached
    // memory where the device has it. Uncached (write-combined) memory, the first host-visible type
    // on NVIDIA, reads at a few tens of MB/s: a frame's masks and holders cost ~80 ms there.
    void make(const Device &d, uint64_t size, bool device_address, bool read_back = false) {
        bytes = size;
        VkBufferCreateInfo bci{};
        bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bci.size = size;
        bci.usage = BUFFER_USAGE |
                    (device_address ? static_cast<VkBufferUsageFlags>(VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT) : 0u);
        bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        check_vk(vkCreateBuffer(d.device, &bci, nullptr, &buffer), "vkCreateBuffer");
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(d.device, buffer, &req);
        VkMemoryAllocateFlagsInfo flags{};
        flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
        flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
        VkMemoryAllocateInfo mai{};
        mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        mai.pNext = device_address ? &flags : nullptr;
        mai.allocationSize = req.size;
        const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        mai.memoryTypeIndex = read_back ? d.memory_type_preferring(req.memoryTypeBits, visible,
                                                                   VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                                        : d.memory_type(req.memoryTypeBits, visible);
        check_vk(vkAllocateMemory(d.device, &mai, nullptr, &memory), "vkAllocateMemory");
        check_vk(vkBindBufferMemory(d.device, buffer, memory, 0), "vkBindBufferMemory");
        void *p = nullptr;
        check_vk(vkMapMemory(d.device, memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
        ptr = static_cast<uint8_t *>(p);
        std::memset(ptr, 0, size);
        if (device_address) address = device_address_of(d);
    }

    // The emulator's own guest pages as a buffer, zero-copy (VK_EXT_external_memory_host): `host`
    // and `size` aligned to the device's minImportedHostPointerAlignment.
    void import(const Device &d, uint8_t *host, uint64_t size, bool device_address) {
        bytes = size;
        ptr = host;
        VkExternalMemoryBufferCreateInfo ext{};
        ext.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
        ext.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
        VkBufferCreateInfo bci{};
        bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bci.pNext = &ext;
        bci.size = size;
        bci.usage = BUFFER_USAGE |
                    (device_address ? static_cast<VkBufferUsageFlags>(VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT) : 0u);
        bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        check_vk(vkCreateBuffer(d.device, &bci, nullptr, &buffer), "vkCreateBuffer (import)");
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(d.device, buffer, &req);
        auto props_of = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
            vkGetDeviceProcAddr(d.device, "vkGetMemoryHostPointerPropertiesEXT"));
        if (!props_of) die("vkGetMemoryHostPointerPropertiesEXT is missing");
        VkMemoryHostPointerPropertiesEXT hp{};
        hp.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT;
        check_vk(props_of(d.device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, host, &hp),
                 "vkGetMemoryHostPointerPropertiesEXT");
        VkMemoryAllocateFlagsInfo flags{};
        flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
        flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
        VkImportMemoryHostPointerInfoEXT imp{};
        imp.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT;
        imp.pNext = device_address ? &flags : nullptr;
        imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
        imp.pHostPointer = host;
        VkMemoryAllocateInfo mai{};
        mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        mai.pNext = &imp;
        mai.allocationSize = size;
        mai.memoryTypeIndex = d.memory_type(req.memoryTypeBits & hp.memoryTypeBits, 0);
        check_vk(vkAllocateMemory(d.device, &mai, nullptr, &memory), "vkAllocateMemory (import)");
        check_vk(vkBindBufferMemory(d.device, buffer, memory, 0), "vkBindBufferMemory (import)");
        imported = true;
        if (device_address) address = device_address_of(d);
    }

    uint64_t device_address_of(const Device &d) const {
        VkBufferDeviceAddressInfo info{};
        info.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
        info.buffer = buffer;
        return vkGetBufferDeviceAddress(d.device, &info);
    }

    void destroy(const Device &d) {
        if (buffer == VK_NULL_HANDLE) return;
        vkDestroyBuffer(d.device, buffer, nullptr);
        if (!imported) vkUnmapMemory(d.device, memory);
        vkFreeMemory(d.device, memory, nullptr);
        *this = Buffer{};
    }

    uint32_t word(uint64_t byte_offset) const {
        uint32_t v;
        std::memcpy(&v, ptr + byte_offset, 4);
        return v;
    }
};

std::vector<uint32_t> read_spv(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) die("cannot read " + path + " (built by cmake from shaders/*.spvasm)");
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() % 4) die(path + " is not SPIR-V");
    std::vector<uint32_t> words(bytes.size() / 4);
    std::memcpy(words.data(), bytes.data(), bytes.size());
    return words;
}

// The guest's code of one program (rdna/*.s, assembled by llvm-mc at build time) and the offsets
// of its `site_N` labels (llvm-nm): the pc of the helper's site N is the program's address plus it.
struct GuestCode {
    std::vector<uint8_t> bytes;
    std::vector<uint64_t> sites;

    void load(const std::string &dir, const std::string &name) {
        std::ifstream f(dir + "/" + name + ".bin", std::ios::binary);
        if (!f) die("cannot read " + dir + "/" + name + ".bin (built by cmake from rdna/" + name + ".s)");
        bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        std::ifstream sym(dir + "/" + name + ".sym");
        std::string line;
        while (std::getline(sym, line)) {
            auto at = line.find(" site_");
            if (at == std::string::npos) continue;
            size_t n = std::stoul(line.substr(at + 6));
            if (sites.size() <= n) sites.resize(n + 1);
            sites[n] = std::stoull(line.substr(0, line.find(' ')), nullptr, 16);
        }
        if (bytes.empty()) die(name + ".bin is empty");
    }
};

// A compute pipeline of one module, one descriptor set (storage buffers, arrays of them, or one
// dynamic one) and a 128-byte push block; or a second module on another's layouts.
struct Pipeline {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    bool owns_layout = true;

    void make(const Device &d, const std::string &spv, const std::vector<std::pair<uint32_t, VkDescriptorType>> &bindings) {
        std::vector<VkDescriptorSetLayoutBinding> b;
        for (uint32_t i = 0; i < bindings.size(); i++) {
            VkDescriptorSetLayoutBinding x{};
            x.binding = i;
            x.descriptorType = bindings[i].second;
            x.descriptorCount = bindings[i].first;
            x.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
            b.push_back(x);
        }
        VkDescriptorSetLayoutCreateInfo sli{};
        sli.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
        sli.bindingCount = static_cast<uint32_t>(b.size());
        sli.pBindings = b.data();
        check_vk(vkCreateDescriptorSetLayout(d.device, &sli, nullptr, &set_layout), "vkCreateDescriptorSetLayout");
        VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
        VkPipelineLayoutCreateInfo pli{};
        pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
        pli.setLayoutCount = 1;
        pli.pSetLayouts = &set_layout;
        pli.pushConstantRangeCount = 1;
        pli.pPushConstantRanges = &range;
        check_vk(vkCreatePipelineLayout(d.device, &pli, nullptr, &layout), "vkCreatePipelineLayout");
        build(d, spv);
    }

    void make_like(const Device &d, const std::string &spv, const Pipeline &like) {
        set_layout = like.set_layout;
        layout = like.layout;
        owns_layout = false;
        build(d, spv);
    }

    void build(const Device &d, const std::string &spv) {
        std::vector<uint32_t> code = read_spv(spv);
        VkShaderModuleCreateInfo smi{};
        smi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
        smi.codeSize = code.size() * 4;
        smi.pCode = code.data();
        VkShaderModule module;
        check_vk(vkCreateShaderModule(d.device, &smi, nullptr, &module), "vkCreateShaderModule");
        VkComputePipelineCreateInfo cpi{};
        cpi.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
        cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
        cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        cpi.stage.module = module;
        cpi.stage.pName = "main";
        cpi.layout = layout;
        check_vk(vkCreateComputePipelines(d.device, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipeline),
                 "vkCreateComputePipelines");
        vkDestroyShaderModule(d.device, module, nullptr);
    }

    void destroy(const Device &d) {
        if (pipeline != VK_NULL_HANDLE) vkDestroyPipeline(d.device, pipeline, nullptr);
        if (owns_layout && layout != VK_NULL_HANDLE) {
            vkDestroyPipelineLayout(d.device, layout, nullptr);
            vkDestroyDescriptorSetLayout(d.device, set_layout, nullptr);
        }
        *this = Pipeline{};
    }
};

// A memory barrier of the whole queue: what one dispatch (or copy) wrote, visible to the next.
void barrier(VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
             VkAccessFlags dst) {
    VkMemoryBarrier mb{};
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = src;
    mb.dstAccessMask = dst;
    vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Guest memory: real pages, a write-watch, a texture cache.

namespace {

enum Cause { CAUSE_CPU = 0, CAUSE_WRITE = 1, CAUSE_HAND_OFF = 2, CAUSE_M2 = 3, CAUSE_BOUND = 4, CAUSES = 5 };
const char *cause_name(int c) {
    switch (c) {
        case CAUSE_CPU: return "cpu-fault";
        case CAUSE_WRITE: return "host-write";
        case CAUSE_HAND_OFF: return "hand-off";
        case CAUSE_M2: return "m2-release";
        case CAUSE_BOUND: return "bound-store";
    }
    return "?";
}

struct Region {
    const char *name = "";
    uint64_t guest = 0;
    uint64_t bytes = 0;
    uint8_t *host = nullptr;
    uint8_t *alias = nullptr;  // the shared region's second view (the CPU's), else null
    int fd = -1;

    bool holds(uint64_t g) const { return g >= guest && g < guest + bytes; }
    bool holds_host(uint64_t h) const {
        uint64_t base = reinterpret_cast<uint64_t>(host);
        return h >= base && h < base + bytes;
    }
};

// D720: a texture made from guest pages, trusted until they are written. Each frame in flight has
// its own (over its arena's pages).
struct Texture {
    std::string name;
    long frame;
    uint64_t start, end;  // guest
    uint32_t id;
    bool trusted;
    int dropped_by;  // the cause of its drop, or -1
};

// What the write-watch and the engine's callbacks saw while one frame was recorded or completed
// (the calling thread's: `t_stats`).
struct Stats {
    uint32_t hand_offs = 0, host_writes = 0, commits = 0, pages_committed = 0, releases = 0;
    std::unordered_set<uint64_t> pages[CAUSES];  // guest pages noted written, by cause

    void clear() {
        *this = Stats{};
    }
    uint32_t written(int cause) const {
        if (cause >= 0) return static_cast<uint32_t>(pages[cause].size());
        std::unordered_set<uint64_t> all;
        for (auto &s : pages) all.insert(s.begin(), s.end());
        return static_cast<uint32_t>(all.size());
    }
};

thread_local Stats *t_stats = nullptr;
// The guest ranges the engine handed off (C2) during the calling thread's current complete.
thread_local std::vector<std::pair<uint64_t, uint64_t>> *t_handed = nullptr;
// Set while the game thread writes a guarded page on purpose (the SIGSEGV handler lets it through).
thread_local volatile sig_atomic_t t_cpu_writing = 0;

// What the SIGSEGV handler, the engine's callbacks and the threads touch. One emulator a process.
struct Emulator {
    Region heap, ro, shared;
    // Per page of the heap and of the shared region: guarded (read-only) by the write-watch. The
    // signal handler reads them, so they are atomics; everything else changes them under `watch`.
    std::unique_ptr<std::atomic<uint8_t>[]> heap_guarded, shared_guarded;
    std::vector<uint8_t> committed;  // heap pages (under `watch`)
    std::mutex watch;                // page states, textures, a frame's stats
    std::vector<Texture> textures;   // of every frame in flight
    std::atomic<uint32_t> cpu_faults{0}, unexpected_faults{0};

    const Region *region_of(uint64_t guest) const {
        for (const Region *r : {&heap, &ro, &shared})
            if (r->holds(guest)) return r;
        return nullptr;
    }
    uint8_t *host_of(uint64_t guest) const {
        const Region *r = region_of(guest);
        return r ? r->host + (guest - r->guest) : nullptr;
    }
    uint64_t guest_of_host(uint64_t host) const {
        for (const Region *r : {&heap, &ro, &shared})
            if (r->holds_host(host)) return r->guest + (host - reinterpret_cast<uint64_t>(r->host));
        return 0;
    }
    uint32_t word(uint64_t guest) const {
        uint32_t v;
        std::memcpy(&v, host_of(guest), 4);
        return v;
    }
    std::atomic<uint8_t> *guard_of(uint64_t guest) {
        if (heap.holds(guest)) return &heap_guarded[(guest - heap.guest) / PAGE];
        if (shared.holds(guest)) return &shared_guarded[(guest - shared.guest) / PAGE];
        return nullptr;
    }

    // Under `watch`.
    void distrust(uint64_t start, uint64_t end, int cause) {
        for (Texture &t : textures) {
            if (t.trusted && t.start < end && start < t.end) {
                t.trusted = false;
                t.dropped_by = cause;
            }
        }
    }
    void note(uint64_t guest_page, int cause) {
        if (t_stats) t_stats->pages[cause].insert(guest_page);
    }

    // The write-watch lifts its guard over a page it must write (under `watch`).
    bool unguard_locked(uint64_t guest_page) {
        std::atomic<uint8_t> *g = guard_of(guest_page);
        if (!g || !g->load()) return true;
        if (mprotect(host_of(guest_page), PAGE, PROT_READ | PROT_WRITE) != 0) return false;
        g->store(0);
        return true;
    }
};

Emulator g_emu;

void on_segv(int sig, siginfo_t *info, void *) {
    uint64_t addr = reinterpret_cast<uint64_t>(info->si_addr);
    Emulator &e = g_emu;
    if (t_cpu_writing && e.shared.holds_host(addr)) {
        uint64_t page = (addr - reinterpret_cast<uint64_t>(e.shared.host)) / PAGE;
        if (e.shared_guarded[page].load()) {
            // D824: a CPU write into a guarded page: let it through, and say so after.
            if (mprotect(e.shared.host + page * PAGE, PAGE, PROT_READ | PROT_WRITE) == 0) {
                e.shared_guarded[page].store(0);
                e.cpu_faults++;
                return;
            }
        }
    }
    // Anything else is a crash: above all a device access to a protected page (lavapipe's
    // SIGSEGV), which dispatchscope's path must make impossible.
    e.unexpected_faults++;
    static const char msg[] = "emulator-host: SIGSEGV outside the write-watch (a device or a bug touched a protected page)\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    signal(sig, SIG_DFL);
}

// A host write of guest bytes through the write-watch: each page's guard lifted, noted written,
// textures over it dropped. The engine's O8 write-back and C3 copies come this way, and --plain's
// own write-back.
int32_t host_write(uint64_t host, const uint8_t *src, uint64_t bytes, int cause) {
    Emulator &e = g_emu;
    std::lock_guard<std::mutex> lock(e.watch);
    if (t_stats) t_stats->host_writes++;
    for (uint64_t a = host & ~(PAGE - 1); a < host + bytes; a += PAGE) {
        uint64_t guest = e.guest_of_host(a);
        if (guest == 0) return -3;
        if (e.heap.holds(guest) && !e.committed[(guest - e.heap.guest) / PAGE]) return -1;
        if (!e.unguard_locked(guest)) return -2;
        e.note(guest, cause);
        e.distrust(guest, guest + PAGE, cause);
    }
    std::memcpy(reinterpret_cast<void *>(host), src, bytes);
    return 0;
}

// The engine's calls into the emulator (ds_host_callbacks), on the thread that called the engine.
int32_t cb_write(void *, uint64_t host, const uint8_t *src, uint64_t bytes) {
    return host_write(host, src, bytes, CAUSE_WRITE);
}

// O8's write-back as batches of runs of the words the device wrote: each run through the same
// write-watch path as a single write; the first run that fails is named, the ones before landed.
int32_t cb_write_runs(void *user, const ds_write_run *runs, uint64_t n, uint64_t *failed_at) {
    for (uint64_t k = 0; k < n; k++) {
        int32_t r = cb_write(user, runs[k].host_addr, runs[k].src, runs[k].bytes);
        if (r != 0) {
            *failed_at = k;
            return r;
        }
    }
    return 0;
}

int32_t cb_commit(void *, uint64_t host, uint64_t bytes) {
    Emulator &e = g_emu;
    std::lock_guard<std::mutex> lock(e.watch);
    if (t_stats) t_stats->commits++;
    if (!e.heap.holds_host(host)) return 0;  // the other regions are committed from the start
    uint64_t h0 = reinterpret_cast<uint64_t>(e.heap.host);
    // Each stretch of uncommitted pages made read-write with one mprotect; the kernel gives a page
    // its memory on first touch (MAP_NORESERVE), so 16 GiB committed costs what it touches.
    uint64_t a = host & ~(PAGE - 1);
    while (a < host + bytes) {
        if (e.committed[(a - h0) / PAGE]) {
            a += PAGE;
            continue;
        }
        uint64_t end = a;
        while (end < host + bytes && !e.committed[(end - h0) / PAGE]) {
            e.committed[(end - h0) / PAGE] = 1;
            if (t_stats) t_stats->pages_committed++;
            end += PAGE;
        }
        if (mprotect(reinterpret_cast<void *>(a), end - a, PROT_READ | PROT_WRITE) != 0) return -1;
        a = end;
    }
    return 0;
}

int32_t cb_release_guards(void *, uint64_t host, uint64_t bytes) {
    Emulator &e = g_emu;
    std::lock_guard<std::mutex> lock(e.watch);
    if (t_stats) t_stats->releases++;
    for (uint64_t a = host & ~(PAGE - 1); a < host + bytes; a += PAGE) {
        uint64_t guest = e.guest_of_host(a);
        if (guest == 0) return -3;
        std::atomic<uint8_t> *g = e.guard_of(guest);
        if (!g || !g->load()) continue;
        if (!e.unguard_locked(guest)) return -1;
        // M2: the pages are noted written (the engine does the same); a texture over them stays
        // trusted until a store is handed off (C2) or the CPU writes it.
        e.note(guest, CAUSE_M2);
    }
    return 0;
}

int32_t cb_hand_off(void *, uint64_t guest_start, uint64_t guest_end, uint64_t) {
    Emulator &e = g_emu;
    std::lock_guard<std::mutex> lock(e.watch);
    if (t_stats) t_stats->hand_offs++;
    if (t_handed) t_handed->push_back({guest_start, guest_end});
    for (uint64_t g = guest_start & ~(PAGE - 1); g < guest_end; g += PAGE)
        if (e.heap.holds(g)) e.note(g, CAUSE_HAND_OFF);
    e.distrust(guest_start, guest_end, CAUSE_HAND_OFF);
    return 0;
}

ds_event event(uint32_t kind, uint64_t start, uint64_t end) {
    ds_event e;
    std::memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = kind;
    e.start = start;
    e.end = end;
    return e;
}

// Finds every `"reason":"…"` of the report's left-out pieces.
std::string left_out_names(const char *json) {
    std::string s = json ? json : "";
    std::string out;
    size_t at = s.find("\"left_out\"");
    if (at == std::string::npos) return out;
    size_t end = s.find(']', at);
    size_t p = at;
    while ((p = s.find("\"reason\":\"", p)) != std::string::npos && p < end) {
        p += 10;
        size_t q = s.find('"', p);
        if (!out.empty()) out += ",";
        out += s.substr(p, q - p);
        p = q;
    }
    return out;
}

// The strings of a JSON array `key` (the loss report's findings), escapes undone roughly.
std::vector<std::string> json_strings(const std::string &json, const std::string &key) {
    std::vector<std::string> out;
    size_t at = json.find("\"" + key + "\"");
    if (at == std::string::npos) return out;
    size_t p = json.find('[', at);
    if (p == std::string::npos) return out;
    p++;
    while (p < json.size()) {
        while (p < json.size() && (json[p] == ' ' || json[p] == '\n' || json[p] == ',')) p++;
        if (p >= json.size() || json[p] != '"') break;
        std::string s;
        for (p++; p < json.size() && json[p] != '"'; p++) {
            if (json[p] == '\\' && p + 1 < json.size()) p++;
            s += json[p];
        }
        out.push_back(s);
        p++;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// The reference: this program's own image of guest memory, a page at a time (absent pages are
// zero), into which it computes what each pass leaves.

class RefMemory {
  public:
    uint32_t get(uint64_t a) const {
        const uint32_t *p = find(a & ~(PAGE - 1));
        return p ? p[(a & (PAGE - 1)) / 4] : 0;
    }
    void set(uint64_t a, uint32_t v) { make(a & ~(PAGE - 1))[(a & (PAGE - 1)) / 4] = v; }
    const uint32_t *find(uint64_t page) const {
        if (page == key_) return cache_;
        auto it = pages_.find(page);
        if (it == pages_.end()) return nullptr;
        key_ = page;
        cache_ = it->second.get();
        return cache_;
    }
    bool has(uint64_t page) const { return find(page) != nullptr; }
    template <class F>
    void each_page(F f) const {
        for (auto &[k, v] : pages_) f(k, v.get());
    }

  private:
    uint32_t *make(uint64_t page) {
        if (page == key_ && cache_) return cache_;
        auto &slot = pages_[page];
        if (!slot) {
            slot.reset(new uint32_t[PAGE / 4]);
            std::memset(slot.get(), 0, PAGE);
        }
        key_ = page;
        cache_ = slot.get();
        return cache_;
    }
    std::unordered_map<uint64_t, std::unique_ptr<uint32_t[]>> pages_;
    mutable uint64_t key_ = ~0ull;
    mutable uint32_t *cache_ = nullptr;
};

using Writes = std::vector<std::pair<uint64_t, uint32_t>>;

// Whether the device-addressed pass reaches a guest address: through the chunk table (engine: the
// heap, and the read-only region's pages unless locked at its prepare; the shared region is left
// out, M3) or through the raw helper (--plain: the heap, imported whole).
struct Reach {
    const Emulator *e;
    bool plain;
    bool ro_locked;
    uint64_t ro_lock_end;
    bool operator()(uint64_t a) const {
        if (e->heap.holds(a)) return true;
        if (plain) return false;
        if (e->ro.holds(a)) return !(ro_locked && a < ro_lock_end);
        return false;
    }
};

// shaders/device.spvasm over `lanes` lanes, lane by lane: its writes, and each of lanes 0-3's
// misses (T4) as the program logs them (1 the read-only store, 2 the shared load, 4 the shared
// store). A lane's result depends only on g % 8 and g % count: a whole screen's lanes are the
// first few's again.
void ref_device(const RefMemory &m, const Reach &reach, uint64_t root, uint64_t out, uint64_t ro, uint64_t sh,
                uint32_t v, uint32_t lanes, Writes &w, uint32_t log[4]) {
    auto ld = [&](uint64_t a) { return reach(a) ? m.get(a) : 0u; };
    uint64_t bottom[8];
    uint32_t count[8], bias[8];
    for (uint32_t k = 0; k < 8; k++) {
        uint64_t ia = root + 16 * k;
        bottom[k] = (static_cast<uint64_t>(ld(ia + 4)) << 32) | ld(ia);
        count[k] = ld(ia + 8);
        bias[k] = ld(ia + 12);
    }
    std::vector<uint32_t> res(lanes);
    for (uint32_t g = 0; g < lanes; g++) {
        const uint32_t k = g & 7;
        uint32_t leaf = count[k] ? ld(bottom[k] + 4 * (g % count[k])) : 0;
        res[g] = (leaf + bias[k]) * 3 + v;
    }
    w.reserve(w.size() + lanes + 12);
    for (uint32_t g = 0; g < lanes; g++)
        if (reach(out + 4 * g)) w.push_back({out + 4 * g, res[g]});
    for (uint32_t g = 0; g < 4; g++) {
        log[g] = 0;
        if (reach(ro + 4 * g)) w.push_back({ro + 4 * g, res[g] ^ 0xabcd0000u});
        else log[g] |= 1;
        if (!reach(sh + 4 * g)) log[g] |= 2;
        uint32_t s = ld(sh + 4 * g);
        if (reach(out + 4 * (uint64_t(lanes) + g))) w.push_back({out + 4 * (uint64_t(lanes) + g), s + 1});
        if (reach(sh + 4 * (64 + g))) w.push_back({sh + 4 * (64 + g), res[g]});
        else log[g] |= 4;
    }
}

// shaders/gather.spvasm: dst[l] = dst[l] * 3 + src[l] + v.
void ref_gather(const RefMemory &m, uint64_t src, uint64_t dst, uint32_t v, Writes &w) {
    for (uint32_t l = 0; l < 64; l++) w.push_back({dst + 4 * l, m.get(dst + 4 * l) * 3 + m.get(src + 4 * l) + v});
}

// shaders/bound.spvasm over run 305's two sets at `a` and `b`.
void ref_bound(const RefMemory &m, uint64_t a, uint64_t b, uint32_t v, Writes &w) {
    for (uint32_t l = 0; l < 8; l++)
        w.push_back({a + 0xe400 + 4 * l, (m.get(a + 0xe400 + 4 * l) ^ m.get(a + 4 * l)) + 0x305 + v});
    for (uint32_t l = 0; l < 64; l++) w.push_back({a + 4 * (64 + l), m.get(a + 4 * (64 + l)) * 2 + l});
    uint32_t sum = 0;
    for (uint32_t k = 0; k < 37; k++) sum += m.get(b + 4 * k);
    w.push_back({b + 0x10, sum + v});
}

void apply_writes(RefMemory &m, const Writes &w) {
    for (auto &[a, v] : w) m.set(a, v);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A frame: its schedule, where each pass's memory lies, and what is kept of it until its fence.

namespace {

enum Kind : uint8_t { KIND_D, KIND_G, KIND_B, KIND_R, KIND_H };

// A unit of ten: [D D G B D G B R D B]; `SUB` is which of its kind in the unit each is.
constexpr Kind PATTERN[10] = {KIND_D, KIND_D, KIND_G, KIND_B, KIND_D, KIND_G, KIND_B, KIND_R, KIND_D, KIND_B};
constexpr uint32_t SUB[10] = {0, 1, 0, 0, 2, 1, 1, 0, 3, 2};

struct Step {
    Kind kind;
    uint32_t unit, sub, ordinal;  // ordinal: among the frame's passes of its kind
};

// The guest programs (run 305's and the ray traversal's ids, as the decision records name them;
// the hang pass's is ours).
constexpr uint64_t BOUND_PROGRAM = 0x400003e19200ull, GATHER_PROGRAM = 0x400003e1ac00ull,
                   O7_PROGRAM = 0x400003d88400ull, DEVICE_PROGRAM = 0x74005b854a00ull,
                   HANG_PROGRAM = 0x74000bad0000ull;
// Guest addresses no reservation holds: the instrumented helper's positive control, and where the
// hang pass reads its loop bound.
constexpr uint64_t CANARY = 0x700000000ull, BAD_COUNT = 0x680000000ull;
// A device address nothing maps (the hang pass's store on a real GPU).
constexpr uint64_t WILD = 0xdead00000000ull;

constexpr uint32_t SITES = 9;            // the device-addressed program's (device.spvasm)
constexpr uint64_t LOG_STRIDE = 512;     // its log: one word a lane, 128 lanes
// The instrumented buffer's words (dispatchscope_core::instrument): the escapes offered to the log,
// the canary's escapes, the sites (SITE_WORDS words each, 64-bit counters: the routes' accesses,
// guest 0, LDS 1, scratch 2, bound 3, then the escapes), then the escape log.
constexpr uint32_t COUNTER_ESCAPES = 16, COUNTER_CANARY = 18, SITES_AT = 60, SITE_WORDS = 16, SITE_ESCAPES = 4;
constexpr uint32_t ROUTE_GUEST = 0, ROUTE_LDS = 1, ROUTE_SCRATCH = 2;
constexpr uint32_t ESC_CAP = 48, ESCAPES_AT = SITES_AT + SITES * SITE_WORDS, GRID_W = 16, GRID_H = 8;

struct Layout {
    uint32_t per_frame = 0, units = 0, arenas = 0, n_d = 0, n_g = 0, n_b = 0, n_r = 0;
    bool heap_sets = false;  // --heap-sets: run 305's sets in the heap's arenas, not the shared region
    uint64_t sets_off = 0;   // where in a heap arena its sets start (--heap-sets)
    // --resolution: the screen the frame's first device-addressed pass covers (one lane a pixel),
    // and where in a heap arena its output lies (a word a lane and the four lanes' second words).
    uint32_t screen_w = 0, screen_h = 0;
    uint64_t screen_off = 0;
    uint64_t H = 0x100000000ull, heap_bytes = 0, arena_bytes = 0;
    uint64_t RO = 0x200000000ull, ro_bytes = 0, ro_lock_bytes = 0;
    uint64_t SH = 0x300000000ull, shared_bytes = 0;
    // Heap offsets.
    static constexpr uint64_t O7_BASE = 0x11000, LEAVES = 0x40000, IDLE = 0x50000, ARENAS = 0x100000, UNIT = 0x4000;
    // Shared-region offsets.
    static constexpr uint64_t SH_CPU = 0x10000, SH_WATCH = 0x20000, WATCH_PAGES = 32, SH_ARENAS = 0x1A0000,
                              SH_UNIT = 0x10000;
    static constexpr uint32_t MAX_THREADS = 12;
    static constexpr uint32_t COUNTS[8] = {16, 6, 16, 8, 16, 10, 16, 12};

    void plan(uint32_t n, uint32_t in_flight, uint64_t heap, bool sets_in_heap, uint32_t sw, uint32_t sh) {
        per_frame = n;
        screen_w = sw;
        screen_h = sh;
        heap_sets = sets_in_heap;
        units = (n + 9) / 10;
        arenas = in_flight + 1;
        for (uint32_t p = 0; p < n; p++) {
            switch (PATTERN[p % 10]) {
                case KIND_D: n_d++; break;
                case KIND_G: n_g++; break;
                case KIND_B: n_b++; break;
                case KIND_R: n_r++; break;
                case KIND_H: break;
            }
        }
        heap_bytes = heap;
        // The read-only and shared regions lie past the heap (a 16 GiB heap reaches 0x500000000).
        if (heap != UINT64_MAX) {
            RO = std::max<uint64_t>(0x200000000ull, round_up(H + heap_bytes, 1ull << 32));
            SH = RO + 0x100000000ull;
        }
        sets_off = round_up(UNIT + units * UNIT, SH_UNIT);
        // A chunk (T1, at most 64 KiB) never spans two arenas.
        arena_bytes = heap_sets ? sets_off + units * SH_UNIT : sets_off;
        if (screen_w) {
            screen_off = round_up(arena_bytes, SH_UNIT);
            arena_bytes = screen_off + round_up(4 * (screen_lanes() + 4), SH_UNIT);
        }
        if (ARENAS + arenas * arena_bytes > heap_bytes)
            die(format("--guest-mib: the heap's %u arenas of %llu KiB need %llu MiB", arenas,
                       static_cast<unsigned long long>(arena_bytes >> 10),
                       static_cast<unsigned long long>((ARENAS + arenas * arena_bytes + 0xfffff) >> 20)));
        ro_lock_bytes = round_up(static_cast<uint64_t>(arenas) * std::max(n_d, 1u) * 16, PAGE);
        ro_bytes = std::max<uint64_t>(0x10000, ro_lock_bytes);
        shared_bytes = SH_ARENAS + static_cast<uint64_t>(arenas) * units * SH_UNIT;
    }

    // The heap: an arena a frame in flight (and one more), each a free page then its units.
    uint64_t arena(uint32_t a) const { return H + ARENAS + a * arena_bytes; }
    uint64_t unit(uint32_t a, uint32_t u) const { return arena(a) + UNIT + u * UNIT; }
    uint64_t out(uint32_t a, uint32_t u, uint32_t i) const { return unit(a, u) + 0x400 * i; }
    uint64_t gdst(uint32_t a, uint32_t u, uint32_t i) const { return unit(a, u) + 0x1000 + 0x100 * i; }
    uint64_t root(uint32_t a, uint32_t u, uint32_t i) const { return unit(a, u) + 0x1200 + 0x80 * i; }
    uint64_t guest_words(uint32_t a, uint32_t u, uint32_t t) const { return unit(a, u) + 0x1400 + 0x100 * t; }
    uint64_t sink(uint32_t a, uint32_t u, uint32_t i) const { return unit(a, u) + 0x2000 + 0x200 * i; }
    uint64_t hang_out(uint32_t a) const { return unit(a, 0) + 0x3000; }
    uint64_t screen_lanes() const { return static_cast<uint64_t>(screen_w) * screen_h; }
    uint64_t screen_out(uint32_t a) const { return arena(a) + screen_off; }
    // The heap an --resolution run needs at least (MiB): the arenas and what lies before them.
    static uint64_t heap_mib_for(uint32_t n, uint32_t in_flight, uint32_t sw, uint32_t sh) {
        Layout l;
        l.plan(n, in_flight, UINT64_MAX, false, sw, sh);
        return (ARENAS + (in_flight + 1ull) * l.arena_bytes + (1ull << 20) - 1) >> 20;
    }
    // Where the frame's deferred copy (C3) lands: the first words of the first unit's set A, which
    // its first bound pass reads (or a free heap page of the arena where a frame has no bound pass).
    uint64_t copy_at(uint32_t a) const { return n_b ? set_a(a, 0) : arena(a); }
    uint64_t leaf(uint32_t k) const { return H + LEAVES + k * PAGE; }
    uint64_t idle() const { return H + IDLE; }
    // The read-only region: four words for each device-addressed pass of each arena.
    uint64_t ro_at(uint32_t a, uint32_t d) const { return RO + (static_cast<uint64_t>(a) * n_d + d) * 16; }
    // The shared region: the escape area, a CPU page an arena, the guest threads' watched pages,
    // then the bound sets, a pair a unit of each arena.
    uint64_t sh_cpu(uint32_t a) const { return SH + SH_CPU + a * PAGE; }
    uint64_t sh_watch(uint32_t t, uint64_t i) const { return SH + SH_WATCH + (t * WATCH_PAGES + i) * PAGE; }
    uint64_t set_a(uint32_t a, uint32_t u) const {
        if (heap_sets) return arena(a) + sets_off + u * SH_UNIT;
        return SH + SH_ARENAS + (static_cast<uint64_t>(a) * units + u) * SH_UNIT;
    }
    uint64_t set_b(uint32_t a, uint32_t u) const { return set_a(a, u) + 0xF000; }
    // In set A's pages no pass reads or writes (1-13 of its 15): pages 1-6 the guest threads
    // write, pages 7-12 they guard.
    uint64_t sh_write(uint32_t a, uint32_t u, uint32_t t) const {
        return set_a(a, u) + (1 + t % 6) * PAGE + (t / 6) * 0x800;
    }
    uint64_t sh_toggle(uint32_t a, uint32_t u, uint32_t t) const { return set_a(a, u) + (7 + t) * PAGE; }

    // Which arena a guest address's memory is, or -1.
    int arena_of(uint64_t g) const {
        if (g >= arena(0) && g < arena(arenas)) return static_cast<int>((g - arena(0)) / arena_bytes);
        uint64_t s0 = SH + SH_ARENAS;
        if (g >= s0 && g < SH + shared_bytes) return static_cast<int>((g - s0) / (units * SH_UNIT));
        if (n_d && g >= RO && g < RO + static_cast<uint64_t>(arenas) * n_d * 16)
            return static_cast<int>((g - RO) / (n_d * 16));
        return -1;
    }
    // The words guest threads write (checked against what each wrote, not the reference).
    bool guest_owned(uint64_t g) const {
        if (g >= arena(0) && g < arena(arenas)) {
            uint64_t off = (g - arena(0)) % arena_bytes;
            if (screen_w && off >= screen_off) return false;
            if (off >= sets_off) {
                uint64_t page = ((off - sets_off) % SH_UNIT) / PAGE;
                return page >= 1 && page <= 6;
            }
            if (off < UNIT) return false;
            off = (off - UNIT) % UNIT;
            return off >= 0x1400 && off < 0x2000;
        }
        uint64_t s0 = SH + SH_ARENAS;
        if (g >= s0 && g < SH + shared_bytes) {
            uint64_t page = ((g - s0) % SH_UNIT) / PAGE;
            return page >= 1 && page <= 6;
        }
        return false;
    }
};

std::vector<Step> schedule(const Layout &L, bool plain, bool hang) {
    std::vector<Step> out;
    uint32_t ord[5] = {0, 0, 0, 0, 0};
    for (uint32_t p = 0; p < L.per_frame; p++) {
        if (hang && p == L.per_frame / 2) out.push_back({KIND_H, 0, 0, ord[KIND_H]++});
        Kind k = PATTERN[p % 10];
        if (plain && k == KIND_R) continue;  // no engine, no O7: nothing refuses it
        out.push_back({k, p / 10, SUB[p % 10], ord[k]++});
    }
    return out;
}

struct Options {
    std::string listen;
    const char *token = nullptr;
    long frames = 0;
    uint32_t per_frame = 200, in_flight = 2, guest_threads = 4;
    uint64_t guest_mib = 8;
    uint32_t toggles = 100, lock_every = 8;
    uint32_t screen_w = 0, screen_h = 0;  // --resolution WxH
    bool guest_mib_given = false;
    bool plain = false, lose = false, instrumented = false, header = false, validation = false, print_reports = false,
         import_holders = false, heap_sets = false, serial = false;
    long lose_at = 2;
    uint32_t fence_timeout_ms = 60000;
};

// One pass of a frame: what its prepare handed out, where its holders lie, what the reference says
// it leaves.
struct Rec {
    Step step{};
    uint64_t index = UINT64_MAX;
    uint32_t mode = 0, n_refusals = 0, seg = 0, value = 0;
    uint32_t n_plans = 0;
    ds_slot_plan plans[4]{};
    // By holder slot: its buffer's offset (in the frame's holder pool, or in the import where it is
    // bound in place) and its masks' offset in the frame's mask pool.
    uint64_t data_off[4]{}, mask_off[4]{};
    bool in_place[4]{};
    Writes expect;
    bool ro_locked = false;
    uint32_t log[4]{};  // the misses the reference predicts (device-addressed)
    uint64_t ro_addr = 0, sh_addr = 0, out_addr = 0;
    uint64_t engine_ns = 0;
    // A device-addressed pass's grid in pixels (8x8 tiles, a lane a pixel): two tiles, or the
    // screen (--resolution) for the frame's first.
    uint32_t grid_w = GRID_W, grid_h = GRID_H;
    bool screen = false;
    uint64_t lanes() const { return static_cast<uint64_t>(grid_w) * grid_h; }
};

struct Segment {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool recorded_any = false, submitted = false, waited = false;
};

// What a frame in flight owns: its command buffers and fences, its holder, mask, log,
// instrumentation and header buffers, its descriptor sets.
struct FrameSlot {
    VkCommandPool pool = VK_NULL_HANDLE;
    std::vector<Segment> segs;
    Buffer holders, masks, logs, instr, headers;
    uint64_t holders_used = 0, masks_used = 0;
    VkQueryPool queries = VK_NULL_HANDLE;  // --resolution: the screen pass's two timestamps
    VkDescriptorPool dpool = VK_NULL_HANDLE;
    std::vector<VkDescriptorSet> bsets, gsets;
    VkDescriptorSet dset = VK_NULL_HANDLE;
};

struct FrameRec {
    long number = -1;
    uint32_t slot = 0, arena = 0;
    bool active = false, recording = false;
    std::vector<Rec> recs;
    size_t n_done = 0;
    uint32_t n_segs = 0, submissions = 0, fence_waits = 0;
    Clock::time_point t_begin{};
    double period_ms = -1;
    Stats stats;
    uint32_t dispatches = 0, refusals = 0, escapes = 0, predicted = 0, carries = 0, failures = 0;
    uint32_t carries_guest = 0, carries_holder = 0;
    uint64_t engine_ns = 0;
    uint32_t engine_dispatches = 0;
    // Where the game's thread spent the frame: recording it, waiting for its fences, checking it.
    uint64_t record_ns = 0, wait_ns = 0, complete_ns = 0, check_ns = 0;
    uint64_t hang_index = UINT64_MAX;
    double screen_us = -1;  // --resolution: the screen pass's device time
    bool noted_left_out = false, noted_o7 = false, noted_instrumented = false;
    std::vector<std::string> notes;

    void fail(const std::string &what) {
        failures++;
        if (failures <= 20) notes.push_back("MISMATCH " + what);
    }
};

// A guest CPU thread: the words it wrote (what it expects there), the pages it guarded.
struct GuestThread {
    uint32_t id = 0;
    std::thread th;
    std::mutex m;
    std::unordered_map<uint64_t, uint32_t> expect;
    uint64_t rng = 0;
    std::vector<uint64_t> guarded;
    bool ro_locked = false;
    long next_change = 0;  // thread 0: the frame from which it changes the read-only region again
};

uint32_t value_of(long frame, uint32_t pos) { return static_cast<uint32_t>(frame * 1000 + pos + 1); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// The host: the game's thread (record a frame, submit it, complete the one K frames back) and the
// guest threads.

namespace {

class Host {
  public:
    explicit Host(const Options &opts) : o(opts) {}
    void setup();
    void run();
    int teardown();

  private:
    // Setup.
    void map_memory();
    void open_engine();
    void first_contents();
    void make_device_objects();
    void cpu_commit(uint64_t guest, uint64_t bytes);
    void cpu_write_contents(uint64_t guest, const uint32_t *words, uint64_t n);

    // The game's thread.
    void record(long number, Clock::time_point t);
    void begin_frame_memory(FrameRec &f);
    void record_one(FrameRec &f, size_t i);
    void record_device(FrameRec &f, FrameSlot &fs, Rec &r, size_t i);
    void record_hang(FrameRec &f, FrameSlot &fs, Rec &r);
    void record_bound(FrameRec &f, FrameSlot &fs, Rec &r, size_t i);
    void record_refused(FrameRec &f, Rec &r);
    void prepare(FrameRec &f, Rec &r, const ds_dispatch &d, ds_prepared &p, bool memory_map);
    void holder(FrameSlot &fs, Rec &r, uint32_t h, bool in_place);
    void record_carries(FrameRec &f, FrameSlot &fs, Rec &r, const std::vector<ds_carry> &carries);
    void bind_sets(FrameSlot &fs, Rec &r, VkDescriptorSet set);
    Segment &open_segment(FrameRec &f);
    void close_segment(FrameRec &f);
    void wait_segment(FrameRec &f, uint32_t s);
    void advance(FrameRec &f, uint64_t upto);
    void complete_one(FrameRec &f, Rec &r);
    void check_device(FrameRec &f, FrameSlot &fs, Rec &r, const std::vector<std::pair<uint64_t, uint64_t>> &handed);
    void in_place_stores(FrameRec &f, FrameSlot &fs, Rec &r);
    void plain_write_back(FrameSlot &fs, Rec &r);
    void finish(FrameRec &f);
    void end_frame(FrameRec &f);
    void finish_all();
    void complete_through(uint64_t index);
    void serve_drain();
    uint32_t check_memory(FrameRec &f, uint64_t &checked);
    std::vector<FrameRec *> active_frames();
    void game_apply(const ds_event &e, const char *what);
    void guard_page(uint64_t guest_page);
    void unguard_page(uint64_t guest_page);
    Buffer *import_for(uint64_t guest, uint64_t bytes, uint64_t &offset);
    uint64_t alloc(Buffer &b, uint64_t &used, uint64_t bytes);
    [[noreturn]] void lost_device(FrameRec &f, VkResult r, const std::string &what);

    // The guest threads.
    void guest_main(GuestThread &g);
    void guest_frame(GuestThread &g, long frame);
    bool apply_waiting(const std::function<ds_status()> &attempt, bool memory_map);
    void guest_fail(const std::string &what);
    void set_read_only(bool lock);

    Options o;
    Layout L;
    Emulator &emu = g_emu;
    Device vk;
    ds_engine engine = 0;
    Pipeline bound_p, gather_p, device_p, hang_p;
    std::vector<FrameSlot> slots;
    std::vector<FrameRec> frames;  // by slot
    // The host's own imports of guest memory: the heap's arenas (where G binds in place, and where
    // a carry from guest memory reads; --plain: the whole heap, with its device address), and with
    // --import-holders the shared region's sets.
    Buffer arena_import, shared_import;
    uint64_t arena_import_guest = 0, shared_import_guest = 0;
    uint64_t raw_offset = 0;  // --plain: the raw helper's device address minus guest address
    RefMemory ref_prep, ref_done;  // as of every pass prepared / completed
    std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> by_index;  // in flight: slot, rec
    uint64_t plain_next = 0;
    uint32_t next_target = 1;
    GuestCode bound_code, device_code;
    ds_site sites[SITES]{};
    uint64_t instr_words = 0, instr_stride = 0, instr_words_screen = 0;
    // Where a device-addressed pass's instrumented buffer lies in its frame's, and its words: the
    // 128-lane passes' one after another, the screen pass's after them.
    uint64_t instr_at(const Rec &r) const { return r.screen ? L.n_d * instr_stride : r.step.ordinal * instr_stride; }
    uint64_t instr_n(const Rec &r) const { return r.screen ? instr_words_screen : instr_words; }
    bool timestamps = false;
    uint64_t ts_mask = ~0ull;  // the queue's timestampValidBits
    std::vector<double> screen_us;  // the screen pass's device time, a frame

    // Between the game's thread and the guest threads.
    std::mutex sync_m;
    std::condition_variable sync_cv;
    long frame_started = -1;
    uint64_t completed_upto = 0;  // every dispatch below it completed
    int drain_requests = 0;
    bool stop = false, lost = false;
    // The guest's memory map: the read-only region's state, taken while a device-addressed pass is
    // prepared (so each knows how the region was) and while guest thread 0 changes it.
    std::mutex mm;
    bool ro_locked = false;
    std::vector<std::unique_ptr<GuestThread>> threads;
    std::atomic<uint64_t> waits{0}, game_waits{0}, guest_failures{0};
    std::mutex notes_m;
    std::vector<std::string> guest_notes;
    uint64_t drains = 0;

    // Figures.
    std::vector<double> frame_ms, record_ms, wait_ms, complete_ms, check_ms;
    std::vector<uint64_t> engine_ns;
    uint64_t mismatches_total = 0, failures_total = 0, submissions_total = 0, fence_waits_total = 0,
             checked_total = 0, carries_total = 0, dispatches_total = 0;
    long frames_done = 0;
    uint64_t waits_reported = 0, drains_reported = 0;
    uint64_t window_page = 0;  // a huge heap: where the next frame's check of untouched pages starts
    Clock::time_point previous_begin{};
};

// --- setup -------------------------------------------------------------------------------------

void Host::map_memory() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    auto map_at = [](uint64_t host, uint64_t bytes, int prot, int flags, int fd) {
        void *p = mmap(reinterpret_cast<void *>(host), bytes, prot, flags | MAP_FIXED_NOREPLACE, fd, 0);
        if (p == MAP_FAILED || reinterpret_cast<uint64_t>(p) != host) die("mmap at " + hex(host) + " failed");
        return static_cast<uint8_t *>(p);
    };
    emu.heap.name = "heap";
    emu.heap.guest = L.H;
    emu.heap.bytes = L.heap_bytes;
    emu.heap.host = map_at(0x5e0000000000ull, emu.heap.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
    emu.committed.assign(emu.heap.bytes / PAGE, 0);
    emu.heap_guarded.reset(new std::atomic<uint8_t>[emu.heap.bytes / PAGE]);
    for (uint64_t i = 0; i < emu.heap.bytes / PAGE; i++) emu.heap_guarded[i].store(0);
    emu.ro.name = "read-only";
    emu.ro.guest = L.RO;
    emu.ro.bytes = L.ro_bytes;
    emu.ro.host = map_at(0x5f0000000000ull, emu.ro.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    emu.shared.name = "shared";
    emu.shared.guest = L.SH;
    emu.shared.bytes = L.shared_bytes;
    emu.shared.fd = memfd_create("emulator-host-guest", MFD_CLOEXEC);
    if (emu.shared.fd < 0 || ftruncate(emu.shared.fd, static_cast<off_t>(emu.shared.bytes)) != 0) die("memfd");
    emu.shared.host = map_at(0x5f8000000000ull, emu.shared.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, emu.shared.fd);
    void *alias = mmap(nullptr, emu.shared.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, emu.shared.fd, 0);
    if (alias == MAP_FAILED) die("mmap (alias)");
    emu.shared.alias = static_cast<uint8_t *>(alias);
    emu.shared_guarded.reset(new std::atomic<uint8_t>[emu.shared.bytes / PAGE]);
    for (uint64_t i = 0; i < emu.shared.bytes / PAGE; i++) emu.shared_guarded[i].store(0);
}

void Host::open_engine() {
    ds_vulkan_device handles = ds_example::vulkan_handles(vk, vk.n_extensions);
    ds_host_callbacks cb;
    std::memset(&cb, 0, sizeof cb);
    cb.size = sizeof cb;
    cb.abi_version = DS_ABI_VERSION;
    cb.user = &emu;
    cb.write = cb_write;
    cb.write_runs = cb_write_runs;
    cb.commit = cb_commit;
    cb.release_guards = cb_release_guards;
    cb.hand_off = cb_hand_off;
    check(ds_engine_create_vulkan_host(&handles, &cb, &engine), "ds_engine_create_vulkan_host");
    if (!o.listen.empty()) {
        uint16_t port = 0;
        check(ds_engine_listen(engine, o.listen.c_str(), o.token, "emulator-host", &port), "ds_engine_listen");
        std::printf("listening on %s:%u (%s)\n", o.listen.substr(0, o.listen.rfind(':')).c_str(), port, vk.name.c_str());
    }
    // The guest's code of each program, handed over as an emulator first translates it (the gather
    // pass and the refused one are run 305's bound code; the hang pass the traversal's).
    check(ds_engine_add_program(engine, BOUND_PROGRAM, bound_code.bytes.data(), bound_code.bytes.size()),
          "ds_engine_add_program (bound)");
    check(ds_engine_add_program(engine, GATHER_PROGRAM, bound_code.bytes.data(), bound_code.bytes.size()),
          "ds_engine_add_program (gather)");
    check(ds_engine_add_program(engine, O7_PROGRAM, bound_code.bytes.data(), bound_code.bytes.size()),
          "ds_engine_add_program (O7)");
    check(ds_engine_add_program(engine, DEVICE_PROGRAM, device_code.bytes.data(), device_code.bytes.size()),
          "ds_engine_add_program (device-addressed)");
    check(ds_engine_add_program(engine, HANG_PROGRAM, device_code.bytes.data(), device_code.bytes.size()),
          "ds_engine_add_program (hang)");
    // The reservations (host addresses named).
    ds_event r = event(DS_EVENT_RESERVE, emu.heap.guest, emu.heap.guest + emu.heap.bytes);
    r.host_address = reinterpret_cast<uint64_t>(emu.heap.host);
    r.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE;  // committed lazily
    game_apply(r, "reserve heap");
    r = event(DS_EVENT_RESERVE, emu.ro.guest, emu.ro.guest + emu.ro.bytes);
    r.host_address = reinterpret_cast<uint64_t>(emu.ro.host);
    r.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
    game_apply(r, "reserve read-only region");
    r = event(DS_EVENT_RESERVE, emu.shared.guest, emu.shared.guest + emu.shared.bytes);
    r.host_address = reinterpret_cast<uint64_t>(emu.shared.host);
    r.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED | DS_EVENT_SHARED;
    game_apply(r, "reserve shared region");
}

// The CPU commits heap pages itself (the rest the engine asks for, M2).
void Host::cpu_commit(uint64_t guest, uint64_t bytes) {
    uint64_t off = guest - L.H;
    if (mprotect(emu.heap.host + off, bytes, PROT_READ | PROT_WRITE) != 0) die("mprotect (commit)");
    {
        std::lock_guard<std::mutex> lock(emu.watch);
        for (uint64_t p = off / PAGE; p < (off + bytes) / PAGE; p++) emu.committed[p] = 1;
    }
    game_apply(event(DS_EVENT_COMMIT, guest, guest + bytes), "commit");
}

// Words the CPU writes before any frame (through the guest's view), told to the engine and to the
// reference.
void Host::cpu_write_contents(uint64_t guest, const uint32_t *words, uint64_t n) {
    std::memcpy(emu.host_of(guest), words, 4 * n);
    for (uint64_t i = 0; i < n; i++) {
        ref_prep.set(guest + 4 * i, words[i]);
        ref_done.set(guest + 4 * i, words[i]);
    }
    ds_event w = event(DS_EVENT_WRITE, guest, guest);
    w.n_bytes = 4 * n;
    game_apply(w, "write");
}

void Host::first_contents() {
    // What the CPU commits itself: the leaves, the idle page and the arenas (--plain: all of it,
    // imported whole for the raw helper).
    if (o.plain) {
        cpu_commit(L.H, L.heap_bytes);
    } else {
        cpu_commit(L.leaf(0), 8 * PAGE);
        cpu_commit(L.idle(), PAGE);
        cpu_commit(L.arena(0), L.arenas * L.arena_bytes);
    }
    std::vector<uint32_t> w;
    // The constant leaves the walks end in.
    for (uint32_t k = 0; k < 8; k++) {
        w.assign(64, 0);
        for (uint32_t i = 0; i < 64; i++) w[i] = 0x10000 * k + i;
        cpu_write_contents(L.leaf(k), w.data(), w.size());
    }
    // Each unit's instance tables: bottom levels in the leaves, the deferred copy, and what the
    // unit's earlier passes wrote.
    for (uint32_t a = 0; a < L.arenas; a++) {
        for (uint32_t u = 0; u < L.units; u++) {
            for (uint32_t i = 0; i < 4; i++) {
                w.assign(32, 0);
                for (uint32_t k = 0; k < 8; k++) {
                    uint64_t bottom = L.leaf(k);
                    uint32_t count = Layout::COUNTS[k];
                    if (i == 1 && k % 2 == 0) bottom = L.out(a, u, 0), count = 128;
                    if (i == 2) bottom = k < 4 ? L.gdst(a, u, 0) : L.out(a, u, 1), count = k < 4 ? 64 : 132;
                    if (i == 3) bottom = k % 2 == 0 ? L.out(a, u, 2) : L.gdst(a, u, 1), count = k % 2 == 0 ? 132 : 64;
                    w[4 * k] = static_cast<uint32_t>(bottom);
                    w[4 * k + 1] = static_cast<uint32_t>(bottom >> 32);
                    w[4 * k + 2] = count;
                    w[4 * k + 3] = 100 * k + i;
                }
                cpu_write_contents(L.root(a, u, i), w.data(), w.size());
            }
            // Run 305's sets.
            w.assign(0xe420 / 4, 0);
            for (uint64_t x = 0; x < w.size(); x++) w[x] = static_cast<uint32_t>(0x1000 + x * 7 + (a * L.units + u) * 13);
            cpu_write_contents(L.set_a(a, u), w.data(), w.size());
            w.assign(0x94 / 4, 0);
            for (uint64_t x = 0; x < w.size(); x++) w[x] = static_cast<uint32_t>(0x50 + x + u);
            cpu_write_contents(L.set_b(a, u), w.data(), w.size());
        }
    }
    // The shared region's first words, through the CPU's alias.
    w.assign(0x200 / 4, 0);
    for (uint32_t i = 0; i < w.size(); i++) w[i] = 0x5a000000 + i;
    std::memcpy(emu.shared.alias, w.data(), 0x200);
    for (uint32_t i = 0; i < w.size(); i++) {
        ref_prep.set(L.SH + 4 * i, w[i]);
        ref_done.set(L.SH + 4 * i, w[i]);
    }
    ds_event e = event(DS_EVENT_WRITE, L.SH, L.SH);
    e.n_bytes = 0x200;
    game_apply(e, "write (shared)");
}

void Host::make_device_objects() {
    std::string spv = EMULATOR_HOST_SPV_DIR;
    if (const char *d = std::getenv("EMULATOR_HOST_SPV_DIR")) spv = d;
    const VkDescriptorType SB = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bound_p.make(vk, spv + "/bound.spv", {{4, SB}, {4, SB}});
    gather_p.make(vk, spv + "/gather.spv", {{2, SB}, {2, SB}});
    std::string device_spv = o.plain          ? "/device-raw.spv"
                             : o.instrumented ? "/device-instrumented.spv"
                             : o.header       ? "/device-header.spv"
                                              : "/device-helper.spv";
    device_p.make(vk, spv + device_spv, {{1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC}});
    if (o.lose) hang_p.make_like(vk, spv + "/hang-helper.spv", device_p);

    // The host's imports of guest memory.
    if (o.plain) {
        arena_import.import(vk, emu.heap.host, emu.heap.bytes, true);
        arena_import_guest = L.H;
        raw_offset = arena_import.address - L.H;
    } else {
        arena_import.import(vk, emu.host_of(L.arena(0)), L.arenas * L.arena_bytes, false);
        arena_import_guest = L.arena(0);
    }
    if (o.import_holders) {
        uint64_t s0 = L.SH + Layout::SH_ARENAS;
        shared_import.import(vk, emu.host_of(s0), L.SH + L.shared_bytes - s0, false);
        shared_import_guest = s0;
    }

    if (!o.plain) {
        check(ds_engine_instrumentation_init(engine, SITES, GRID_W, GRID_H, CANARY, nullptr, 0, &instr_words),
              "ds_engine_instrumentation_init (size)");
        instr_stride = round_up(4 * instr_words, 256);
        if (L.screen_w)
            check(ds_engine_instrumentation_init(engine, SITES, L.screen_w, L.screen_h, CANARY, nullptr, 0,
                                                 &instr_words_screen),
                  "ds_engine_instrumentation_init (size, the screen)");
    }
    // The screen pass's two timestamps, where the queue has them.
    {
        uint32_t n = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(vk.physical, &n, nullptr);
        std::vector<VkQueueFamilyProperties> families(n);
        vkGetPhysicalDeviceQueueFamilyProperties(vk.physical, &n, families.data());
        timestamps = L.screen_w && vk.family < n && families[vk.family].timestampValidBits > 0 &&
                     vk.props.limits.timestampComputeAndGraphics;
        if (timestamps && families[vk.family].timestampValidBits < 64)
            ts_mask = (1ull << families[vk.family].timestampValidBits) - 1;
        if (L.screen_w && !timestamps) std::printf("screen: the queue has no timestamps; the pass is not timed\n");
    }
    const uint32_t K = o.in_flight;
    slots.resize(K);
    frames.resize(K);
    for (uint32_t s = 0; s < K; s++) {
        FrameSlot &fs = slots[s];
        VkCommandPoolCreateInfo pci{};
        pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
        pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
        pci.queueFamilyIndex = vk.family;
        check_vk(vkCreateCommandPool(vk.device, &pci, nullptr, &fs.pool), "vkCreateCommandPool");
        // The holders of a frame's bound passes: run 305's two (0xe420 and 0x94 bytes) and the
        // gather pass's (0x100 each), each at a 256-byte boundary; their masks the same.
        uint64_t bytes = L.n_b * (round_up(0xe420, 256) + 256) + L.n_g * 2 * 256 + 4096;
        fs.holders.make(vk, bytes, false, true);
        fs.masks.make(vk, bytes, false, true);
        fs.logs.make(vk, std::max<uint64_t>(1, L.n_d) * LOG_STRIDE, false, true);
        if (o.instrumented)
            fs.instr.make(vk, std::max<uint64_t>(1, L.n_d) * instr_stride + round_up(4 * instr_words_screen, 256), true);
        if (timestamps) {
            VkQueryPoolCreateInfo qi{};
            qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
            qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
            qi.queryCount = 2;
            check_vk(vkCreateQueryPool(vk.device, &qi, nullptr, &fs.queries), "vkCreateQueryPool");
        }
        if (o.header) fs.headers.make(vk, std::max<uint64_t>(1, L.n_d) * 64 + 64, true);
        VkDescriptorPoolSize sizes[2] = {{SB, std::max<uint32_t>(1, 8 * L.n_b + 4 * L.n_g)},
                                         {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC, 1}};
        VkDescriptorPoolCreateInfo dpi{};
        dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
        dpi.maxSets = L.n_b + L.n_g + 1;
        dpi.poolSizeCount = 2;
        dpi.pPoolSizes = sizes;
        check_vk(vkCreateDescriptorPool(vk.device, &dpi, nullptr, &fs.dpool), "vkCreateDescriptorPool");
        auto allocate = [&](VkDescriptorSetLayout layout, uint32_t n, std::vector<VkDescriptorSet> &out) {
            out.resize(n);
            if (n == 0) return;
            std::vector<VkDescriptorSetLayout> layouts(n, layout);
            VkDescriptorSetAllocateInfo dai{};
            dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
            dai.descriptorPool = fs.dpool;
            dai.descriptorSetCount = n;
            dai.pSetLayouts = layouts.data();
            check_vk(vkAllocateDescriptorSets(vk.device, &dai, out.data()), "vkAllocateDescriptorSets");
        };
        allocate(bound_p.set_layout, L.n_b, fs.bsets);
        allocate(gather_p.set_layout, L.n_g, fs.gsets);
        std::vector<VkDescriptorSet> one;
        allocate(device_p.set_layout, 1, one);
        fs.dset = one[0];
        VkDescriptorBufferInfo bi{fs.logs.buffer, 0, LOG_STRIDE};
        VkWriteDescriptorSet w{};
        w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        w.dstSet = fs.dset;
        w.dstBinding = 0;
        w.descriptorCount = 1;
        w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC;
        w.pBufferInfo = &bi;
        vkUpdateDescriptorSets(vk.device, 1, &w, 0, nullptr);
    }
}

void Host::setup() {
    if (o.plain && (o.instrumented || o.header || o.lose || !o.listen.empty()))
        die("--plain runs no engine: no --instrumented, --header, --lose-device or --listen");
    if (o.instrumented && o.header) die("--instrumented and --header: the header form is the plain helper's");
    if (o.guest_threads > Layout::MAX_THREADS) die("--guest-threads: at most 12");
    if (o.in_flight < 1 || o.in_flight > 8) die("--frames-in-flight: 1 to 8");
    if (o.per_frame < 1 || o.per_frame * o.in_flight > 4000) die("--dispatches-per-frame: 1 to 4000 / frames in flight");
    if (o.lose) o.fence_timeout_ms = 2000;
    if (o.screen_w) {
        if (o.screen_w % 8 || o.screen_h % 8 || o.screen_w > 8192 || o.screen_h > 8192)
            die("--resolution WxH: multiples of 8 (8x8 tiles), at most 8192x8192");
        if (o.header) die("--resolution: the header form's header buffer is not sized for a screen");
        const uint64_t need = Layout::heap_mib_for(o.per_frame, o.in_flight, o.screen_w, o.screen_h);
        if (!o.guest_mib_given) o.guest_mib = std::max(o.guest_mib, need);
    }
    L.plan(o.per_frame, o.in_flight, o.guest_mib << 20, o.heap_sets, o.screen_w, o.screen_h);
    map_memory();
    vk.open(o.validation, o.instrumented);
    std::string rdna = EMULATOR_HOST_RDNA_DIR;
    if (const char *d = std::getenv("EMULATOR_HOST_RDNA_DIR")) rdna = d;
    bound_code.load(rdna, "bound");
    device_code.load(rdna, "device");
    if (device_code.sites.size() != SITES) die("rdna/device.s does not label 9 sites");
    {
        // What the translator says of each of the device-addressed program's sites (device.spvasm's
        // site numbers): its pc, kind, load or store, and bytes.
        const uint32_t kinds[SITES] = {DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL, DS_ACCESS_FLAT,
                                       DS_ACCESS_FLAT,   DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL,
                                       DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL};
        const uint32_t stores[SITES] = {0, 0, 1, 1, 1, 1, 0, 1, 1};
        for (uint32_t i = 0; i < SITES; i++)
            sites[i] = ds_site{DEVICE_PROGRAM + device_code.sites[i], kinds[i], stores[i], i == 0 ? 16u : 4u, 0};
    }
    if (!o.plain) open_engine();
    std::printf("device %s (%s), minStorageBufferOffsetAlignment %llu, validation layer %s, %s helper, "
                "VK_EXT_device_fault %s\n",
                vk.name.c_str(), vk.lavapipe ? "lavapipe" : "not lavapipe",
                static_cast<unsigned long long>(vk.props.limits.minStorageBufferOffsetAlignment),
                o.validation ? "on" : "off",
                o.plain ? "raw (no engine)" : o.instrumented ? "instrumented" : o.header ? "header-form" : "plain",
                vk.device_fault ? "on" : "off");
    std::printf("frames: %u dispatches (%u device-addressed, %u gather, %u bound, %u refused), %u in flight, "
                "%u guest threads, %u toggles, %s\n",
                L.per_frame, L.n_d, L.n_g, L.n_b, L.n_r, o.in_flight, o.guest_threads, o.toggles,
                o.plain ? "plain (no engine)" : "through dispatchscope");
    if (L.screen_w)
        std::printf("screen: the first device-addressed pass of each frame covers %ux%u (%llu lanes), timed on the "
                    "device; guest heap %llu MiB\n",
                    L.screen_w, L.screen_h, static_cast<unsigned long long>(L.screen_lanes()),
                    static_cast<unsigned long long>(o.guest_mib));
    first_contents();
    make_device_objects();
    for (uint32_t t = 0; t < o.guest_threads; t++) {
        threads.emplace_back(new GuestThread);
        GuestThread &g = *threads.back();
        g.id = t;
        g.rng = 0x9E3779B97F4A7C15ull ^ (0x1000193ull * (t + 1));
        g.th = std::thread([this, &g] { guest_main(g); });
    }
}

// --- the game's thread: events ------------------------------------------------------------------

// An event from the game's thread: one answered DS_WAIT completes what it names (its fence first)
// and is applied again. --plain has no engine to tell.
void Host::game_apply(const ds_event &e, const char *what) {
    if (!engine) return;
    for (;;) {
        ds_status st = ds_engine_apply(engine, &e);
        if (st == DS_OK) return;
        if (st != DS_WAIT) check(st, what);
        game_waits++;
        complete_through(waits_for(ds_last_error()));
    }
}

// The write-watch guards a page of the shared region (D824): the engine is told first (an event
// that may wait for a dispatch in flight), then the page is made read-only.
void Host::guard_page(uint64_t g) {
    game_apply(event(DS_EVENT_GUARD, g, g + PAGE), "guard");
    std::lock_guard<std::mutex> lock(emu.watch);
    if (mprotect(emu.host_of(g), PAGE, PROT_READ) != 0) die("mprotect (guard)");
    emu.guard_of(g)->store(1);
}

// ... and lifts it: the page first, then the event (which never waits).
void Host::unguard_page(uint64_t g) {
    {
        std::lock_guard<std::mutex> lock(emu.watch);
        if (!emu.unguard_locked(g)) die("mprotect (unguard)");
    }
    game_apply(event(DS_EVENT_UNGUARD, g, g + PAGE), "unguard");
}

Buffer *Host::import_for(uint64_t guest, uint64_t bytes, uint64_t &offset) {
    if (arena_import.buffer && guest >= arena_import_guest && guest + bytes <= arena_import_guest + arena_import.bytes) {
        offset = guest - arena_import_guest;
        return &arena_import;
    }
    if (shared_import.buffer && guest >= shared_import_guest &&
        guest + bytes <= shared_import_guest + shared_import.bytes) {
        offset = guest - shared_import_guest;
        return &shared_import;
    }
    die("guest " + hex(guest) + " (" + std::to_string(bytes) + " bytes) is in none of the host's imports");
}

uint64_t Host::alloc(Buffer &b, uint64_t &used, uint64_t bytes) {
    uint64_t off = round_up(used, 256);
    if (off + bytes > b.bytes) die("a frame's holder pool is too small");
    used = off + bytes;
    return off;
}

std::vector<FrameRec *> Host::active_frames() {
    std::vector<FrameRec *> out;
    for (FrameRec &f : frames)
        if (f.active) out.push_back(&f);
    std::sort(out.begin(), out.end(), [](FrameRec *a, FrameRec *b) { return a->number < b->number; });
    return out;
}

// --- the game's thread: a frame -----------------------------------------------------------------

void Host::run() {
    const uint32_t K = o.in_flight;
    for (long n = 0; o.frames == 0 || n < o.frames; n++) {
        Clock::time_point t = Clock::now();
        if (n > 0) {
            // Frame n-1's period; a frame already ended (--serial) had it measured to its end.
            FrameRec &p = frames[(n - 1) % K];
            const double period = std::chrono::duration<double, std::milli>(t - previous_begin).count();
            if (p.active && p.number == n - 1) p.period_ms = period;
            else if (n - 1 > 0) frame_ms.push_back(period);
        }
        previous_begin = t;
        // Frame n reuses frame n-K's resources: its fence first, then its completes, in order.
        FrameRec &f = frames[n % K];
        if (f.active) finish(f);
        serve_drain();
        record(n, t);
        // With a debugger free to attach, a game's pace: a frame every 16 ms.
        if (!o.listen.empty()) std::this_thread::sleep_until(t + std::chrono::milliseconds(16));
    }
    finish_all();
}

void Host::finish_all() {
    for (FrameRec *f : active_frames()) finish(*f);
}

// M5 over mapped memory: a guest thread's event that waited twice asks the game's thread to let
// every frame in flight finish before it records another (nothing device-addressed in flight).
void Host::serve_drain() {
    {
        std::lock_guard<std::mutex> lock(sync_m);
        if (drain_requests == 0) return;
    }
    drains++;
    finish_all();
    game_apply(event(DS_EVENT_RETIRE, 0, 0), "retire");
    std::unique_lock<std::mutex> lock(sync_m);
    if (!sync_cv.wait_for(lock, std::chrono::seconds(30), [&] { return drain_requests == 0 || lost; }))
        die("a guest thread's event did not apply in 30 s with nothing in flight");
}

void Host::record(long number, Clock::time_point t) {
    const uint32_t s = static_cast<uint32_t>(number % o.in_flight);
    FrameRec &f = frames[s];
    FrameSlot &fs = slots[s];
    f = FrameRec{};
    f.number = number;
    f.slot = s;
    f.arena = static_cast<uint32_t>(number % L.arenas);
    f.active = f.recording = true;
    f.t_begin = t;
    for (const Step &st : schedule(L, o.plain, o.lose && number == o.lose_at)) {
        Rec r;
        r.step = st;
        f.recs.push_back(std::move(r));
    }
    check_vk(vkResetCommandPool(vk.device, fs.pool, 0), "vkResetCommandPool");
    fs.holders_used = fs.masks_used = 0;
    {
        std::lock_guard<std::mutex> lock(sync_m);
        frame_started = number;
    }
    sync_cv.notify_all();
    t_stats = &f.stats;
    const Clock::time_point recording = Clock::now();
    begin_frame_memory(f);
    open_segment(f);
    for (size_t i = 0; i < f.recs.size(); i++) {
        record_one(f, i);
        // --serial: submitted and completed before the next is prepared.
        if (o.serial) complete_through(f.recs[i].index);
    }
    close_segment(f);
    f.recording = false;
    f.record_ns += ns_between(recording, Clock::now());
    t_stats = nullptr;
    if (f.n_done == f.recs.size()) end_frame(f);
}

// What the emulator does to guest memory as a frame starts: its textures made and the two over the
// shared region guarded, a CPU write through the write-watch, a write through the shared alias, a
// copy deferred (C3).
void Host::begin_frame_memory(FrameRec &f) {
    const uint32_t a = f.arena;
    struct Made {
        const char *name;
        uint64_t start;
        bool guarded;
    };
    std::vector<Made> made = {{"out-tex", L.out(a, 0, 0), false},  // the device's output: C2 drops it
                              {"bvh-tex", L.leaf(2), false},        // only read: stays trusted
                              {"cpu-tex", L.sh_cpu(a), true},       // the CPU writes it: a fault
                              {"idle-tex", L.idle(), false}};       // nothing writes it
    // O8's write-back drops it (guarded where the sets are the shared region's; over the heap a
    // guard would wait for every device-addressed dispatch in flight).
    if (L.n_b) made.push_back({"holder-tex", L.set_b(a, 0), !o.heap_sets});
    for (const Made &m : made) {
        uint32_t id = next_target++;
        {
            std::lock_guard<std::mutex> lock(emu.watch);
            emu.textures.push_back(Texture{m.name, f.number, m.start, m.start + PAGE, id, true, -1});
        }
        ds_event e = event(DS_EVENT_ADD_TARGET, m.start, m.start + PAGE);
        e.target_id = id;
        e.name = m.name;
        game_apply(e, "add target");
        if (m.guarded) guard_page(m.start);
    }
    // The fences keep the compiler from moving the stores out of the window the SIGSEGV handler
    // accepts them in (an optimised build did, and the fault was fatal).
    const uint64_t cpu = L.sh_cpu(a);
    const uint32_t faults = emu.cpu_faults.load();
    uint32_t words[16];
    for (uint32_t i = 0; i < 16; i++) words[i] = 1000 * static_cast<uint32_t>(f.number) + 3 * i + 1;
    t_cpu_writing = 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    for (uint32_t i = 0; i < 16; i++) std::memcpy(emu.host_of(cpu + 4 * i), &words[i], 4);  // faults once
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_cpu_writing = 0;
    for (uint32_t i = 0; i < 16; i++) {
        ref_prep.set(cpu + 4 * i, words[i]);
        ref_done.set(cpu + 4 * i, words[i]);
    }
    if (emu.cpu_faults.load() > faults) {  // the handler lifted the guard it caught (D824)
        {
            std::lock_guard<std::mutex> lock(emu.watch);
            emu.note(cpu, CAUSE_CPU);
            emu.distrust(cpu, cpu + PAGE, CAUSE_CPU);
        }
        game_apply(event(DS_EVENT_UNGUARD, cpu, cpu + PAGE), "unguard");
    }
    ds_event w = event(DS_EVENT_WRITE, cpu, cpu);
    w.n_bytes = 64;
    game_apply(w, "write");
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t v = 0x5a000000 + 0x100 * static_cast<uint32_t>(f.number) + i;
        std::memcpy(emu.shared.alias + 4 * i, &v, 4);
        ref_prep.set(L.SH + 4 * i, v);
        ref_done.set(L.SH + 4 * i, v);
    }
    w = event(DS_EVENT_WRITE, L.SH, L.SH);
    w.n_bytes = 16;
    game_apply(w, "write (shared)");
    // C3: a copy deferred into words the unit's first bound pass reads (set A), written before
    // the next dispatch that may read it. Into memory a device-addressed pass maps it would make
    // that prepare wait for every one in flight (it could read those bytes); the shared region is
    // left out of the mappings, and no pass in flight has this arena's set A.
    uint32_t copy[16];
    for (uint32_t i = 0; i < 16; i++) copy[i] = 7 * static_cast<uint32_t>(f.number) + 0x70000 + i + 0x100 * a;
    const uint64_t at = L.copy_at(a);
    if (engine) {
        ds_event c = event(DS_EVENT_DEFER_COPY, at, at);
        c.bytes = reinterpret_cast<const uint8_t *>(copy);
        c.n_bytes = sizeof copy;
        game_apply(c, "defer copy");
    } else {
        host_write(reinterpret_cast<uint64_t>(emu.host_of(at)), reinterpret_cast<const uint8_t *>(copy), sizeof copy,
                   CAUSE_WRITE);
    }
    for (uint32_t i = 0; i < 16; i++) {
        ref_prep.set(at + 4 * i, copy[i]);
        ref_done.set(at + 4 * i, copy[i]);
    }
    // --import-holders: the bound sets are the shared pages themselves: the device stores there,
    // so the write-watch lifts holder-tex's guard first (its stores drop it, by the masks).
    if (o.import_holders && L.n_b && !o.heap_sets) unguard_page(L.set_b(a, 0));
}

Segment &Host::open_segment(FrameRec &f) {
    FrameSlot &fs = slots[f.slot];
    if (fs.segs.size() <= f.n_segs) {
        Segment sg;
        VkCommandBufferAllocateInfo cai{};
        cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
        cai.commandPool = fs.pool;
        cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cai.commandBufferCount = 1;
        check_vk(vkAllocateCommandBuffers(vk.device, &cai, &sg.cmd), "vkAllocateCommandBuffers");
        VkFenceCreateInfo fci{};
        fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
        check_vk(vkCreateFence(vk.device, &fci, nullptr, &sg.fence), "vkCreateFence");
        fs.segs.push_back(sg);
    }
    Segment &sg = fs.segs[f.n_segs++];
    if (sg.submitted) check_vk(vkResetFences(vk.device, 1, &sg.fence), "vkResetFences");
    sg.recorded_any = sg.submitted = sg.waited = false;
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check_vk(vkBeginCommandBuffer(sg.cmd, &bi), "vkBeginCommandBuffer");
    return sg;
}

// Ends the segment being recorded and submits it with its fence: one vkQueueSubmit a frame, unless
// a DS_WAIT made the frame submit what it had recorded early.
void Host::close_segment(FrameRec &f) {
    Segment &sg = slots[f.slot].segs[f.n_segs - 1];
    // The host reads what the device wrote (its own buffers and the imported guest pages).
    barrier(sg.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    check_vk(vkEndCommandBuffer(sg.cmd), "vkEndCommandBuffer");
    if (!sg.recorded_any) {
        sg.waited = true;  // nothing ran: nothing to wait for
        return;
    }
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &sg.cmd;
    VkResult r = vkQueueSubmit(vk.queue, 1, &si, sg.fence);
    if (r == VK_ERROR_DEVICE_LOST) lost_device(f, r, "vkQueueSubmit");
    check_vk(r, "vkQueueSubmit");
    sg.submitted = true;
    f.submissions++;
}

void Host::wait_segment(FrameRec &f, uint32_t s) {
    Segment &sg = slots[f.slot].segs[s];
    if (sg.waited) return;
    if (!sg.submitted) die("a dispatch's segment was never submitted");
    const Clock::time_point t0 = Clock::now();
    VkResult r = vkWaitForFences(vk.device, 1, &sg.fence, VK_TRUE, uint64_t(o.fence_timeout_ms) * 1000000ull);
    f.wait_ns += ns_between(t0, Clock::now());
    if (r == VK_TIMEOUT || r == VK_ERROR_DEVICE_LOST) lost_device(f, r, "vkWaitForFences");
    check_vk(r, "vkWaitForFences");
    sg.waited = true;
    f.fence_waits++;
}

// --- the game's thread: a pass ----------------------------------------------------------------

// ds_engine_prepare on the game's thread, timed. A device-addressed pass holds the memory map (so
// that it and guest thread 0's change of the read-only region come one after the other). DS_WAIT
// (a chain the device cannot serve) submits what the frame recorded, completes what it names after
// its fence, and prepares again.
void Host::prepare(FrameRec &f, Rec &r, const ds_dispatch &d, ds_prepared &p, bool memory_map) {
    for (;;) {
        Clock::time_point t0 = Clock::now();
        ds_status st;
        {
            std::unique_lock<std::mutex> lock(mm, std::defer_lock);
            if (memory_map) {
                lock.lock();
                r.ro_locked = ro_locked;
            }
            st = ds_engine_prepare(engine, &d, &p);
        }
        r.engine_ns += ns_between(t0, Clock::now());
        if (st == DS_OK) break;
        if (st == DS_DEVICE_LOST) lost_device(f, VK_ERROR_DEVICE_LOST, std::string("ds_engine_prepare: ") + ds_last_error());
        if (st != DS_WAIT) check(st, "ds_engine_prepare");
        std::string why = ds_last_error();
        game_waits++;
        if (f.notes.size() < 20) f.notes.push_back("prepare waited: " + why.substr(0, 200));
        complete_through(waits_for(why));
    }
    r.index = p.index;
    r.mode = p.mode;
    r.n_refusals = p.n_refusals;
    by_index[r.index] = {f.slot, static_cast<uint32_t>(&r - f.recs.data())};
}

void Host::record_one(FrameRec &f, size_t i) {
    FrameSlot &fs = slots[f.slot];
    Rec &r = f.recs[i];
    r.value = value_of(f.number, static_cast<uint32_t>(i));
    r.seg = f.n_segs - 1;
    switch (r.step.kind) {
        case KIND_D: record_device(f, fs, r, i); break;
        case KIND_H: record_hang(f, fs, r); break;
        case KIND_G:
        case KIND_B: record_bound(f, fs, r, i); break;
        case KIND_R: record_refused(f, r); break;
    }
    r.seg = f.n_segs - 1;
}

void Host::record_device(FrameRec &f, FrameSlot &fs, Rec &r, size_t) {
    const uint32_t a = f.arena, u = r.step.unit, sub = r.step.sub, ord = r.step.ordinal;
    r.screen = L.screen_w && ord == 0;
    if (r.screen) r.grid_w = L.screen_w, r.grid_h = L.screen_h;
    const uint64_t root = L.root(a, u, sub), out = r.screen ? L.screen_out(a) : L.out(a, u, sub);
    r.out_addr = out;
    r.ro_addr = o.plain ? L.sink(a, u, sub) : L.ro_at(a, ord);
    r.sh_addr = o.plain ? L.sink(a, u, sub) + 0x80 : L.SH;
    uint32_t push[32] = {};
    if (!o.plain) {
        ds_dispatch d{};
        d.size = sizeof d;
        d.program = DEVICE_PROGRAM;
        d.reasons = 1 | 2;  // D753, D758
        ds_prepared p;
        std::memset(&p, 0, sizeof p);
        p.size = sizeof p;
        p.bindings = r.plans;
        p.bindings_capacity = 4;
        prepare(f, r, d, p, true);
        if (p.mode != DS_MODE_DEVICE_ADDRESSED || p.table_address == 0 || p.marks_address == 0)
            f.fail("the pass is not device-addressed with a table and marks");
        // C3: the frame's deferred copy is in guest memory now, before the device may read it.
        if (ord == 0)
            for (uint32_t w = 0; w < 16; w++)
                if (emu.word(L.copy_at(a) + 4 * w) != ref_prep.get(L.copy_at(a) + 4 * w))
                    f.fail("C3: the deferred copy is not in guest memory at the first device-addressed prepare");
        for (int w = 0; w < 32; w++) push[w] = (p.push_mask >> w) & 1 ? p.push[w] : 0;
        push[9] = static_cast<uint32_t>(__builtin_ctzll(p.chunk_bytes ? p.chunk_bytes : 1));
        if (o.header) {
            uint64_t at = ord * 64ull;
            std::memcpy(fs.headers.ptr + at, &p.push[16], 64);
            // Words 16-29 are the program's own again: garbage here, to show the helper reads none.
            for (int w = 16; w < 30; w++) push[w] = 0xdeadbeefu;
            push[30] = static_cast<uint32_t>(fs.headers.address + at);
            push[31] = static_cast<uint32_t>((fs.headers.address + at) >> 32);
        }
        if (o.instrumented) {
            const uint64_t at = instr_at(r);
            uint64_t n = instr_n(r);
            Clock::time_point t0 = Clock::now();
            check(ds_engine_instrumentation_init(engine, SITES, r.grid_w, r.grid_h, CANARY,
                                                 reinterpret_cast<uint32_t *>(fs.instr.ptr + at), instr_n(r), &n),
                  "ds_engine_instrumentation_init");
            r.engine_ns += ns_between(t0, Clock::now());
            push[DS_PUSH_INSTRUMENT] = static_cast<uint32_t>(fs.instr.address + at);
            push[DS_PUSH_INSTRUMENT + 1] = static_cast<uint32_t>((fs.instr.address + at) >> 32);
        }
    } else {
        r.index = plain_next++;
        r.mode = DS_MODE_DEVICE_ADDRESSED;
        by_index[r.index] = {f.slot, static_cast<uint32_t>(&r - f.recs.data())};
        push[9] = 16;
        push[22] = static_cast<uint32_t>(raw_offset);  // the raw helper: device = guest + this
        push[23] = static_cast<uint32_t>(raw_offset >> 32);
    }
    const uint64_t words[4] = {root, out, r.ro_addr, r.sh_addr};
    for (int w = 0; w < 4; w++) {
        push[2 * w] = static_cast<uint32_t>(words[w]);
        push[2 * w + 1] = static_cast<uint32_t>(words[w] >> 32);
    }
    push[8] = r.value;
    push[10] = r.grid_w / 8;  // workgroups a row
    push[11] = static_cast<uint32_t>(r.lanes());
    std::memset(fs.logs.ptr + ord * LOG_STRIDE, 0xff, 16);
    Segment &sg = fs.segs[f.n_segs - 1];
    sg.recorded_any = true;
    barrier(sg.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    vkCmdBindPipeline(sg.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, device_p.pipeline);
    uint32_t dyn = static_cast<uint32_t>(ord * LOG_STRIDE);
    vkCmdBindDescriptorSets(sg.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, device_p.layout, 0, 1, &fs.dset, 1, &dyn);
    vkCmdPushConstants(sg.cmd, device_p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 128, push);
    // The screen pass between two timestamps (the device's own clock: its time alone, whatever the
    // frame's other passes and the game's thread do).
    if (r.screen && timestamps) {
        vkCmdResetQueryPool(sg.cmd, fs.queries, 0, 2);
        vkCmdWriteTimestamp(sg.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, fs.queries, 0);
    }
    vkCmdDispatch(sg.cmd, r.grid_w / 8, r.grid_h / 8, 1);
    if (r.screen && timestamps) vkCmdWriteTimestamp(sg.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, fs.queries, 1);
    f.dispatches++;
    // What it leaves, from the reference as every earlier pass left it.
    Reach reach{&emu, o.plain, r.ro_locked, L.RO + L.ro_lock_bytes};
    ref_device(ref_prep, reach, root, out, r.ro_addr, r.sh_addr, r.value, static_cast<uint32_t>(r.lanes()), r.expect,
               r.log);
    apply_writes(ref_prep, r.expect);
}

// --lose-device: the pass that hangs (lavapipe) or faults (another driver) the device.
void Host::record_hang(FrameRec &f, FrameSlot &fs, Rec &r) {
    ds_dispatch d{};
    d.size = sizeof d;
    d.program = HANG_PROGRAM;
    d.reasons = 1;  // D753
    ds_prepared p;
    std::memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = r.plans;
    p.bindings_capacity = 4;
    prepare(f, r, d, p, true);
    f.hang_index = r.index;
    uint32_t push[32] = {};
    for (int w = 0; w < 32; w++) push[w] = (p.push_mask >> w) & 1 ? p.push[w] : 0;
    const uint64_t out = L.hang_out(f.arena);
    const uint64_t words[3] = {BAD_COUNT, out, WILD};
    for (int w = 0; w < 3; w++) {
        push[2 * w] = static_cast<uint32_t>(words[w]);
        push[2 * w + 1] = static_cast<uint32_t>(words[w] >> 32);
    }
    push[6] = vk.lavapipe ? 0 : 1;
    push[7] = 0xdeadu;
    Segment &sg = fs.segs[f.n_segs - 1];
    sg.recorded_any = true;
    barrier(sg.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    vkCmdBindPipeline(sg.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, hang_p.pipeline);
    uint32_t dyn = 0;
    vkCmdBindDescriptorSets(sg.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, hang_p.layout, 0, 1, &fs.dset, 1, &dyn);
    vkCmdPushConstants(sg.cmd, hang_p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 128, push);
    // llvmpipe caps one invocation's loop turns at 65,535: the grid makes the pass long there.
    vkCmdDispatch(sg.cmd, 65535, 2, 1);
    f.dispatches++;
    std::printf("lose-device: frame %ld records dispatch %llu (program %s) that %s\n", f.number,
                static_cast<unsigned long long>(r.index), hex(HANG_PROGRAM).c_str(),
                vk.lavapipe ? "spins on a loop bound read from an address no reservation holds"
                            : "stores through a wild device address");
}

// A slot in struct form, with the in-place flag where the emulator binds it over guest pages.
ds_slot make_slot(uint32_t index, uint64_t base, uint64_t size, bool written, bool in_place) {
    ds_slot s = ds_example::slot(index, base, size, written);
    if (in_place) s.flags |= DS_SLOT_IN_PLACE;
    return s;
}

// The plans the O-rules give the bound passes (what --plain binds; the engine's must agree).
uint32_t known_plans(Kind kind, uint64_t x, uint64_t y, ds_slot_plan *out) {
    auto plan = [](uint32_t slot, uint32_t holder, uint64_t start, uint64_t end, uint64_t off, uint64_t range,
                   uint32_t written) {
        return ds_slot_plan{slot, holder, start, end, off, range, off, written, 0};
    };
    if (kind == KIND_G) {  // x = src, y = dst
        out[0] = plan(0, 0, x, x + 0x100, 0, 0x100, 0);
        out[1] = plan(1, 1, y, y + 0x100, 0, 0x100, 1);
        return 2;
    }
    // Run 305's: set A (x) widened to 0xe420 (O5), slot 1 at 0xe400 (O6); set B (y), slot 3 at 0x10.
    out[0] = plan(0, 0, x, x + 0xe420, 0, 0xe420, 1);
    out[1] = plan(1, 0, x, x + 0xe420, 0xe400, 0x20, 1);
    out[2] = plan(2, 2, y, y + 0x94, 0, 0x94, 0);
    out[3] = plan(3, 2, y, y + 0x94, 0x10, 0x84, 1);
    return 4;
}

// A holder's buffer: a copy (uploaded now from the guest's pages into the frame's pool) or, bound
// in place, the guest's pages in the host's import; and its write masks, zeroed.
void Host::holder(FrameSlot &fs, Rec &r, uint32_t h, bool in_place) {
    const ds_slot_plan &b = r.plans[h];
    const uint64_t bytes = round_up(b.buffer_end - b.buffer_start, 4);
    r.in_place[h] = in_place;
    if (in_place) {
        import_for(b.buffer_start, bytes, r.data_off[h]);
    } else {
        r.data_off[h] = alloc(fs.holders, fs.holders_used, bytes);
        std::memcpy(fs.holders.ptr + r.data_off[h], emu.host_of(b.buffer_start), b.buffer_end - b.buffer_start);
    }
    r.mask_off[h] = alloc(fs.masks, fs.masks_used, bytes);
    std::memset(fs.masks.ptr + r.mask_off[h], 0, bytes);
}

// The carries a pass's copy holders take before it (ds_engine_prepared_carries, or --plain's own):
// behind a barrier from earlier shader writes to transfer, each copy (a barrier between two, so
// the newest lands last), then one from transfer writes to the pass.
void Host::record_carries(FrameRec &f, FrameSlot &fs, Rec &r, const std::vector<ds_carry> &carries) {
    if (carries.empty()) return;
    VkCommandBuffer cmd = fs.segs[f.n_segs - 1].cmd;
    barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    for (size_t k = 0; k < carries.size(); k++) {
        const ds_carry &c = carries[k];
        if (c.slot >= 4 || r.in_place[c.slot]) die("a carry into a holder that is no copy");
        if (k > 0)
            barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
        VkBuffer src;
        uint64_t src_off;
        if (c.from == DS_CARRY_FROM_HOLDER) {
            auto it = by_index.find(c.after);
            if (it == by_index.end()) die("a carry from dispatch " + std::to_string(c.after) + ", not in flight");
            Rec &from = frames[it->second.first].recs[it->second.second];
            if (c.from_slot >= 4 || from.in_place[c.from_slot]) die("a carry from a holder that is no copy");
            src = slots[it->second.first].holders.buffer;
            src_off = from.data_off[c.from_slot] + c.from_offset;
        } else {
            src = import_for(c.from_offset, c.bytes, src_off)->buffer;
        }
        if (c.from == DS_CARRY_FROM_HOLDER) f.carries_holder++;
        else f.carries_guest++;
        VkBufferCopy region{src_off, r.data_off[c.slot] + c.offset, c.bytes};
        vkCmdCopyBuffer(cmd, src, fs.holders.buffer, 1, &region);
    }
    barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    f.carries += static_cast<uint32_t>(carries.size());
}

// Each slot's descriptor as its plan says: its holder's buffer at the slot's offset, its masks at
// the same offset in the mask buffer (O6, O9).
void Host::bind_sets(FrameSlot &fs, Rec &r, VkDescriptorSet set) {
    VkDescriptorBufferInfo infos[8];
    const uint32_t n = r.n_plans;
    for (uint32_t i = 0; i < n; i++) {
        const ds_slot_plan &b = r.plans[i];
        const uint32_t h = b.holder;
        VkBuffer data = fs.holders.buffer;
        if (r.in_place[h]) {
            uint64_t unused = 0;
            data = import_for(r.plans[h].buffer_start, 4, unused)->buffer;
        }
        infos[b.slot] = {data, r.data_off[h] + b.offset_bytes, b.range_bytes};
        infos[n + b.slot] = {fs.masks.buffer, r.mask_off[h] + b.mask_offset_bytes, b.range_bytes};
    }
    VkWriteDescriptorSet w[2]{};
    for (int k = 0; k < 2; k++) {
        w[k].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        w[k].dstSet = set;
        w[k].dstBinding = static_cast<uint32_t>(k);
        w[k].descriptorCount = n;
        w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w[k].pBufferInfo = infos + n * k;
    }
    vkUpdateDescriptorSets(vk.device, 2, w, 0, nullptr);
}

// G (gather) and B (run 305's shapes): bound passes.
void Host::record_bound(FrameRec &f, FrameSlot &fs, Rec &r, size_t i) {
    const uint32_t a = f.arena, u = r.step.unit, sub = r.step.sub;
    const bool gather = r.step.kind == KIND_G;
    uint64_t x, y;
    bool in_place_sets;
    if (gather) {
        x = sub == 0 ? L.out(a, u, 1) : L.gdst(a, u, 0);  // what an earlier D or G of the unit wrote
        y = L.gdst(a, u, sub);
        in_place_sets = false;
    } else {
        x = L.set_a(a, u);
        y = L.set_b(a, u);
        in_place_sets = o.import_holders;
    }
    ds_slot_plan known[4];
    const uint32_t n = known_plans(r.step.kind, x, y, known);
    std::vector<ds_carry> carries;
    if (!o.plain) {
        ds_slot slots4[4];
        if (gather) {
            slots4[0] = make_slot(0, x, 0x100, false, false);
            slots4[1] = make_slot(1, y, 0x100, true, true);
        } else {
            slots4[0] = make_slot(0, x, 0xe40f, true, in_place_sets);
            slots4[1] = make_slot(1, x + 0xe400, 0x20, true, in_place_sets);
            slots4[2] = make_slot(2, y, 0x94, false, in_place_sets);
            slots4[3] = make_slot(3, y + 0x10, 4, true, in_place_sets);
        }
        ds_dispatch d{};
        d.size = sizeof d;
        d.program = gather ? GATHER_PROGRAM : BOUND_PROGRAM;
        d.slots = slots4;
        d.n_slots = n;
        ds_prepared p;
        std::memset(&p, 0, sizeof p);
        p.size = sizeof p;
        p.bindings = r.plans;
        p.bindings_capacity = 4;
        prepare(f, r, d, p, false);
        r.n_plans = p.n_bindings;
        if (p.mode != DS_MODE_BOUND || p.n_bindings != n || std::memcmp(r.plans, known, n * sizeof known[0]) != 0)
            die(format("dispatch %llu (%s) is not planned as the O-rules say (mode %u, %u bindings)",
                       static_cast<unsigned long long>(r.index), gather ? "gather" : "bound", p.mode, p.n_bindings));
        if (p.n_carries) {
            carries.resize(p.n_carries);
            uint32_t got = 0;
            Clock::time_point t0 = Clock::now();
            check(ds_engine_prepared_carries(engine, r.index, carries.data(), p.n_carries, &got),
                  "ds_engine_prepared_carries");
            r.engine_ns += ns_between(t0, Clock::now());
            carries.resize(got);
        }
    } else {
        r.index = plain_next++;
        r.mode = DS_MODE_BOUND;
        r.n_plans = n;
        std::memcpy(r.plans, known, n * sizeof known[0]);
        by_index[r.index] = {f.slot, static_cast<uint32_t>(&r - f.recs.data())};
        // The host's own carries: the gather pass's source re-read from guest memory on the device
        // (earlier passes of the frame wrote it in place); a bound pass's sets from the unit's
        // previous bound pass's holders (written back only after the fence).
        if (gather) {
            carries.push_back(ds_carry{0, DS_CARRY_FROM_GUEST, 0, 0x100, 0, x, 0, 0});
        } else if (!in_place_sets) {
            for (size_t k = i; k-- > 0;) {
                const Rec &prev = f.recs[k];
                if (prev.step.kind != KIND_B || prev.step.unit != u) continue;
                carries.push_back(ds_carry{0, DS_CARRY_FROM_HOLDER, 0, 0xe420, prev.index, 0, 0, 0});
                carries.push_back(ds_carry{2, DS_CARRY_FROM_HOLDER, 0, 0x94, prev.index, 0, 2, 0});
                break;
            }
        }
    }
    if (gather) {
        holder(fs, r, 0, false);
        holder(fs, r, 1, true);
    } else {
        holder(fs, r, 0, in_place_sets);
        holder(fs, r, 2, in_place_sets);
    }
    record_carries(f, fs, r, carries);
    VkDescriptorSet set = gather ? fs.gsets[r.step.ordinal] : fs.bsets[r.step.ordinal];
    bind_sets(fs, r, set);
    const Pipeline &pl = gather ? gather_p : bound_p;
    uint32_t push[32] = {r.value};
    Segment &sg = fs.segs[f.n_segs - 1];
    sg.recorded_any = true;
    barrier(sg.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    vkCmdBindPipeline(sg.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pl.pipeline);
    vkCmdBindDescriptorSets(sg.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pl.layout, 0, 1, &set, 0, nullptr);
    vkCmdPushConstants(sg.cmd, pl.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 128, push);
    vkCmdDispatch(sg.cmd, 1, 1, 1);
    f.dispatches++;
    if (gather) ref_gather(ref_prep, x, y, r.value, r.expect);
    else ref_bound(ref_prep, x, y, r.value, r.expect);
    apply_writes(ref_prep, r.expect);
}

// R: a member 0x24 into its holder; O7 refuses it by name. Prepared, never run, completed in order.
void Host::record_refused(FrameRec &f, Rec &r) {
    const uint64_t base = L.H + Layout::O7_BASE;
    ds_slot s[2] = {make_slot(0, base, 0x100, true, false), make_slot(1, base + 0x24, 0x10, true, false)};
    ds_dispatch d{};
    d.size = sizeof d;
    d.program = O7_PROGRAM;
    d.slots = s;
    d.n_slots = 2;
    ds_prepared p;
    std::memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.bindings = r.plans;
    p.bindings_capacity = 4;
    prepare(f, r, d, p, false);
    if (p.mode != DS_MODE_REFUSED || p.n_bindings != 0) f.fail("the misaligned member was not refused");
    f.refusals += p.n_refusals;
}

// --- the game's thread: after the fence -------------------------------------------------------

// Completes the frame's passes in the order prepared, up to dispatch `upto`, each after its
// segment's fence.
void Host::advance(FrameRec &f, uint64_t upto) {
    t_stats = &f.stats;
    const Clock::time_point t0 = Clock::now();
    const uint64_t waited = f.wait_ns;
    while (f.n_done < f.recs.size()) {
        Rec &r = f.recs[f.n_done];
        if (r.index == UINT64_MAX || r.index > upto) break;
        if (r.step.kind != KIND_R) wait_segment(f, r.seg);
        complete_one(f, r);
        f.n_done++;
    }
    f.complete_ns += ns_between(t0, Clock::now()) - (f.wait_ns - waited);
    t_stats = nullptr;
}

void Host::complete_one(FrameRec &f, Rec &r) {
    FrameSlot &fs = slots[f.slot];
    std::vector<std::pair<uint64_t, uint64_t>> handed;
    if (r.screen && timestamps) {
        uint64_t t[2] = {};
        check_vk(vkGetQueryPoolResults(vk.device, fs.queries, 0, 2, sizeof t, t, sizeof t[0],
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                 "vkGetQueryPoolResults");
        f.screen_us = static_cast<double>((t[1] - t[0]) & ts_mask) * vk.props.limits.timestampPeriod / 1000.0;
    }
    if (!o.plain) {
        ds_completion c;
        std::memset(&c, 0, sizeof c);
        c.size = sizeof c;
        c.index = r.index;
        ds_holder_run runs[4];
        uint32_t n_runs = 0;
        ds_instrumentation in;
        std::memset(&in, 0, sizeof in);
        if (r.step.kind == KIND_D && o.instrumented) {
            // The instrumented buffer goes to complete as the device left it, with the sites: the
            // report's section then has every site's counts and each escape with its pc and class.
            in.size = sizeof in;
            in.n_sites = SITES;
            in.sites = sites;
            in.width = r.grid_w;
            in.height = r.grid_h;
            in.words = reinterpret_cast<const uint32_t *>(fs.instr.ptr + instr_at(r));
            in.n_words = instr_n(r);
            c.instrumentation = &in;
        }
        if (r.step.kind == KIND_B || r.step.kind == KIND_G) {
            // O8: each written holder that is a copy; one bound in place is the guest's own pages.
            for (uint32_t i = 0; i < r.n_plans; i++) {
                const ds_slot_plan &b = r.plans[i];
                if (b.slot != b.holder || r.in_place[b.slot]) continue;
                bool written = false;
                for (uint32_t k = 0; k < r.n_plans; k++)
                    if (r.plans[k].holder == b.slot && r.plans[k].written) written = true;
                if (!written) continue;
                const uint64_t bytes = b.buffer_end - b.buffer_start;
                runs[n_runs++] = ds_holder_run{b.slot, 0, fs.holders.ptr + r.data_off[b.slot], bytes,
                                               fs.masks.ptr + r.mask_off[b.slot], bytes};
            }
        }
        c.n_holders = n_runs;
        c.holders = runs;
        t_handed = &handed;
        Clock::time_point t0 = Clock::now();
        ds_status st = ds_engine_complete(engine, &c);
        r.engine_ns += ns_between(t0, Clock::now());
        t_handed = nullptr;
        if (st == DS_DEVICE_LOST) lost_device(f, VK_ERROR_DEVICE_LOST, std::string("ds_engine_complete: ") + ds_last_error());
        check(st, "ds_engine_complete");
    } else if (r.step.kind == KIND_B || r.step.kind == KIND_G) {
        plain_write_back(fs, r);
    }
    switch (r.step.kind) {
        case KIND_D: check_device(f, fs, r, handed); break;
        case KIND_B:
        case KIND_G: in_place_stores(f, fs, r); break;
        case KIND_R:
            if (!f.noted_o7) {
                f.noted_o7 = true;
                const char *json = nullptr;
                check(ds_engine_report_json(engine, &json, nullptr), "report");
                if (std::string(json ? json : "").find("\"O7\"") == std::string::npos)
                    f.fail("the refusal does not name O7");
            }
            break;
        case KIND_H: break;
    }
    if (o.print_reports && engine) {
        const char *json = nullptr;
        check(ds_engine_report_json(engine, &json, nullptr), "report");
        std::printf("report: %s\n", json ? json : "");
    }
    apply_writes(ref_done, r.expect);
    by_index.erase(r.index);
    f.engine_ns += r.engine_ns;
    f.engine_dispatches++;
    if (f.number > 0) engine_ns.push_back(r.engine_ns);
    {
        std::lock_guard<std::mutex> lock(sync_m);
        completed_upto = std::max(completed_upto, r.index + 1);
    }
    sync_cv.notify_all();
}

// A device-addressed pass after its fence: its stores are in the host's own pages already; the
// misses it logged are the ones the reference predicts; C2 handed off its output's chunk and the
// read-only region's where its store landed, never the shared region.
void Host::check_device(FrameRec &f, FrameSlot &fs, Rec &r, const std::vector<std::pair<uint64_t, uint64_t>> &handed) {
    uint32_t logged = 0, predicted = 0;
    for (uint32_t g = 0; g < 4; g++) {
        uint32_t got = fs.logs.word(r.step.ordinal * LOG_STRIDE + 4 * g);
        logged += __builtin_popcount(got);
        predicted += __builtin_popcount(r.log[g]);
        if (got != r.log[g])
            f.fail(format("dispatch %llu: lane %u logged misses 0x%x, predicted 0x%x",
                          static_cast<unsigned long long>(r.index), g, got, r.log[g]));
    }
    f.escapes += logged;
    f.predicted += predicted;
    if (o.plain) return;
    auto was_handed = [&](uint64_t guest) {
        for (auto &[s, e] : handed)
            if (guest >= s && guest < e) return true;
        return false;
    };
    if (!was_handed(r.out_addr)) f.fail("C2: the output's chunk was not handed off");
    if (was_handed(r.ro_addr) == r.ro_locked) f.fail("C2: the read-only region's hand-off is wrong");
    if (was_handed(r.sh_addr)) f.fail("C2: the shared region was handed off");
    if (o.instrumented) {
        // The lean instrumented library (spirv-helper's default): every access counted by site
        // and route (this program's own counts, dispatchscope_count at each lane's end), every
        // escape counted by its site, and each escaping lane's first escape in the log, in the
        // order the lanes ended. What the reference predicts of each: sites 0, 1 and 4 once a
        // lane, 2 (LDS) and 3 (scratch) twice, 5 to 8 once for lanes 0-3; lane g's escapes are
        // its misses (r.log[g]: 1 site 5's store, 2 site 6's load, 4 site 8's store), its first
        // the lowest bit's.
        const uint64_t at = instr_at(r);
        const uint64_t lanes = r.lanes();
        auto wide = [&](uint32_t w) {
            return (static_cast<uint64_t>(fs.instr.word(at + 4 * (w + 1))) << 32) | fs.instr.word(at + 4 * w);
        };
        auto site_counter = [&](uint32_t s, uint32_t k) { return wide(SITES_AT + SITE_WORDS * s + 2 * k); };
        uint64_t want[SITES][4] = {};
        uint64_t want_escapes[SITES] = {};
        for (uint32_t s : {0u, 1u, 4u}) want[s][ROUTE_GUEST] = lanes;
        want[2][ROUTE_LDS] = 2 * lanes;
        want[3][ROUTE_SCRATCH] = 2 * lanes;
        for (uint32_t s = 5; s < SITES; s++) want[s][ROUTE_GUEST] = 4;
        const uint32_t miss_site[3] = {5, 6, 8};
        uint32_t first_site[4], escaping = 0;
        uint64_t escapes = 0;
        for (uint32_t g = 0; g < 4; g++) {
            first_site[g] = ~0u;
            for (uint32_t b = 0; b < 3; b++) {
                if (!(r.log[g] & (1u << b))) continue;
                want_escapes[miss_site[b]]++;
                escapes++;
                if (first_site[g] == ~0u) first_site[g] = miss_site[b];
            }
            if (first_site[g] != ~0u) escaping++;
        }
        for (uint32_t s = 0; s < SITES; s++) {
            for (uint32_t k = 0; k < 4; k++)
                if (site_counter(s, k) != want[s][k])
                    f.fail(format("instrumented: dispatch %llu: site %u route %u counted %llu accesses, predicted %llu",
                                  static_cast<unsigned long long>(r.index), s, k,
                                  static_cast<unsigned long long>(site_counter(s, k)),
                                  static_cast<unsigned long long>(want[s][k])));
            if (site_counter(s, SITE_ESCAPES) != want_escapes[s])
                f.fail(format("instrumented: dispatch %llu: site %u counted %llu escapes, predicted %llu",
                              static_cast<unsigned long long>(r.index), s,
                              static_cast<unsigned long long>(site_counter(s, SITE_ESCAPES)),
                              static_cast<unsigned long long>(want_escapes[s])));
        }
        // The log: one entry for each escaping lane, its first escape, none twice.
        const uint32_t n = fs.instr.word(at + 4 * COUNTER_ESCAPES);
        if (n != escaping) f.fail(format("instrumented: %u escapes offered to the log, %u lanes escaped", n, escaping));
        bool seen[4] = {};
        for (uint32_t i = 0; i < n && i < ESC_CAP; i++) {
            uint64_t e = at + 4 * (ESCAPES_AT + 8 * i);
            const uint32_t wg = fs.instr.word(e), g = fs.instr.word(e + 4), site = fs.instr.word(e + 8);
            const uint64_t addr = (static_cast<uint64_t>(fs.instr.word(e + 16)) << 32) | fs.instr.word(e + 12);
            const uint32_t op = fs.instr.word(e + 20), mask = fs.instr.word(e + 24);
            const bool lane_ok = wg == 0 && g < 4 && !seen[g] && site == first_site[g];
            const uint64_t where = site == 5 ? r.ro_addr + 4 * g : site == 6 ? r.sh_addr + 4 * g : r.sh_addr + 4 * (64 + g);
            const bool store = site != 6;
            if (!lane_ok || addr != where || op != (4u | (store ? 1u << 16 : 0u)) || mask != 0xf)
                f.fail(format("instrumented: an escape no one predicted: workgroup %u lane %u site %u at %s "
                              "(size and store 0x%x, bytes 0x%x)",
                              wg, g, site, hex(addr).c_str(), op, mask));
            if (g < 4) seen[g] = true;
        }
        const uint32_t canary = fs.instr.word(at + 4 * COUNTER_CANARY);
        if (canary != 1) f.fail(format("instrumented: the canary escaped %u times (the positive control: once)", canary));
        if (!f.noted_instrumented) {
            f.noted_instrumented = true;
            f.notes.push_back(format("instrumented: %llu escapes counted by site (5: %llu, 6: %llu, 8: %llu), "
                                     "%u lanes' first in the device's log of dispatch %llu, %u predicted, "
                                     "canary escapes %u",
                                     static_cast<unsigned long long>(escapes),
                                     static_cast<unsigned long long>(site_counter(5, SITE_ESCAPES)),
                                     static_cast<unsigned long long>(site_counter(6, SITE_ESCAPES)),
                                     static_cast<unsigned long long>(site_counter(8, SITE_ESCAPES)), n,
                                     static_cast<unsigned long long>(r.index), escaping, canary));
            // The report's section names each escape by its site's pc: the shared region's load
            // (site 6) escapes every pass.
            const char *json = nullptr;
            check(ds_engine_report_json(engine, &json, nullptr), "report");
            std::string rep = json ? json : "";
            std::string pc6 = "\"pc\":\"" + hex(sites[6].pc) + "\"";
            if (rep.find("\"instrumented\"") == std::string::npos || rep.find(pc6) == std::string::npos)
                f.fail("instrumented: the report's section does not name site 6's pc " + hex(sites[6].pc));
        }
    }
    if (!f.noted_left_out) {
        f.noted_left_out = true;
        const char *json = nullptr;
        check(ds_engine_report_json(engine, &json, nullptr), "report");
        std::string left = left_out_names(json);
        f.notes.push_back("left out by name: " + left);
        if (left.find("private") == std::string::npos && left.find("Private") == std::string::npos)
            f.fail("the shared region is not left out by name");
    }
}

// A holder bound in place: its stores are in the guest's pages already. The write-watch learns of
// them from the masks (O9), as it would from a hand-off, and tells the engine (a host write of
// those pages: D824 notes, D720 distrusts).
void Host::in_place_stores(FrameRec &, FrameSlot &fs, Rec &r) {
    for (uint32_t i = 0; i < r.n_plans; i++) {
        const ds_slot_plan &b = r.plans[i];
        if (b.slot != b.holder || !r.in_place[b.slot]) continue;
        uint64_t told = ~0ull;
        for (uint64_t w = 0; 4 * w < b.buffer_end - b.buffer_start; w++) {
            if (fs.masks.word(r.mask_off[b.slot] + 4 * w) == 0) continue;
            uint64_t g = (b.buffer_start + 4 * w) & ~(PAGE - 1);
            if (g == told) continue;
            told = g;
            {
                std::lock_guard<std::mutex> lock(emu.watch);
                emu.note(g, CAUSE_BOUND);
                emu.distrust(g, g + PAGE, CAUSE_BOUND);
            }
            ds_event wr = event(DS_EVENT_WRITE, g, g);
            wr.n_bytes = PAGE;
            game_apply(wr, "write (stores in place)");
        }
    }
}

// --plain's own O8: each copy holder's masked words written back through the write-watch, in runs.
void Host::plain_write_back(FrameSlot &fs, Rec &r) {
    for (uint32_t i = 0; i < r.n_plans; i++) {
        const ds_slot_plan &b = r.plans[i];
        if (b.slot != b.holder || r.in_place[b.slot]) continue;
        const uint64_t words = (b.buffer_end - b.buffer_start) / 4;
        const uint8_t *data = fs.holders.ptr + r.data_off[b.slot];
        for (uint64_t w = 0; w < words;) {
            if (fs.masks.word(r.mask_off[b.slot] + 4 * w) == 0) {
                w++;
                continue;
            }
            uint64_t end = w;
            while (end < words && fs.masks.word(r.mask_off[b.slot] + 4 * end) != 0) end++;
            uint64_t host = reinterpret_cast<uint64_t>(emu.host_of(b.buffer_start + 4 * w));
            if (host_write(host, data + 4 * w, 4 * (end - w), CAUSE_WRITE) != 0) die("the plain write-back failed");
            w = end;
        }
    }
}

void Host::finish(FrameRec &f) {
    advance(f, UINT64_MAX);
    end_frame(f);
}

// Every dispatch up to `index` completed, oldest frame first; the frame being recorded submits
// what it recorded so far (a second submission that frame).
void Host::complete_through(uint64_t index) {
    for (FrameRec *f : active_frames()) {
        if (f->n_done < f->recs.size() && f->recs[f->n_done].index > index) break;
        if (f->recording && f->n_segs > 0) {
            close_segment(*f);
            open_segment(*f);
        }
        advance(*f, index);
        if (!f->recording && f->n_done == f->recs.size()) end_frame(*f);
    }
}

// A frame's end, after its last complete: its textures (which lost their trust, and why), every
// guest word against the reference, one line.
void Host::end_frame(FrameRec &f) {
    t_stats = &f.stats;
    std::vector<Texture> mine;
    {
        std::lock_guard<std::mutex> lock(emu.watch);
        for (const Texture &t : emu.textures)
            if (t.frame == f.number) mine.push_back(t);
        emu.textures.erase(std::remove_if(emu.textures.begin(), emu.textures.end(),
                                          [&](const Texture &t) { return t.frame == f.number; }),
                           emu.textures.end());
    }
    std::string dropped;
    for (const Texture &t : mine) {
        int want = -1;
        if (t.name == "out-tex" && !o.plain && L.n_d) want = CAUSE_HAND_OFF;
        if (t.name == "cpu-tex") want = CAUSE_CPU;
        if (t.name == "holder-tex") want = o.import_holders ? CAUSE_BOUND : CAUSE_WRITE;
        if (t.dropped_by != want)
            f.fail(format("texture %s: dropped by %s, want %s", t.name.c_str(),
                          t.dropped_by < 0 ? "nothing" : cause_name(t.dropped_by),
                          want < 0 ? "nothing" : cause_name(want)));
        if (t.dropped_by >= 0)
            dropped += std::string(dropped.empty() ? "" : ",") + t.name + ":" + cause_name(t.dropped_by);
        ds_event r = event(DS_EVENT_REMOVE_TARGET, 0, 0);
        r.target_id = t.id;
        game_apply(r, "remove target");
        std::atomic<uint8_t> *g = emu.guard_of(t.start);
        if (g && g->load()) unguard_page(t.start);
    }
    if (o.plain && f.number == 0 && L.n_d)
        f.notes.push_back("plain: out-tex stays trusted over words the device wrote (nothing hands them off, C2)");
    if (emu.unexpected_faults.load()) f.fail("a SIGSEGV outside the write-watch");
    uint64_t checked = 0;
    const Clock::time_point checking = Clock::now();
    const uint32_t mismatches = check_memory(f, checked);
    f.check_ns = ns_between(checking, Clock::now());
    const double ms = f.period_ms >= 0 ? f.period_ms
                                       : std::chrono::duration<double, std::milli>(Clock::now() - f.t_begin).count();
    // The frame time: the game loop's period from this frame's start to the next one's (the first
    // frame, which compiles the pipelines, and a last one with no next left out).
    if (f.number > 0 && f.period_ms >= 0) frame_ms.push_back(ms);
    if (f.number > 0) {
        if (f.screen_us >= 0) screen_us.push_back(f.screen_us);
        record_ms.push_back(f.record_ns / 1e6);
        wait_ms.push_back(f.wait_ns / 1e6);
        complete_ms.push_back(f.complete_ns / 1e6);
        check_ms.push_back(f.check_ns / 1e6);
    }
    uint8_t attached = 0;
    if (engine) check(ds_engine_attached(engine, &attached), "attached");
    const uint64_t w = waits.load() + game_waits.load();
    const uint64_t new_waits = w - waits_reported, new_drains = drains - drains_reported;
    waits_reported = w;
    drains_reported = drains;
    const double engine_us = f.engine_dispatches ? f.engine_ns / 1000.0 / f.engine_dispatches : 0;
    const bool ok = f.failures == 0 && mismatches == 0;
    const std::string screen = f.screen_us >= 0 ? format(" screen_us=%.1f", f.screen_us) : "";
    std::printf("frame %ld: time_ms=%.2f engine_us=%.1f%s dispatches=%u refusals=%u escapes=%u predicted=%u carries=%u "
                "carries_guest=%u carries_holder=%u submissions=%u fence_waits=%u waits=%llu drains=%llu hand_offs=%u pages_written=%u (cpu %u, "
                "host-write %u, hand-off %u, m2 %u, bound-store %u) committed=%u textures_dropped=%s mismatches=%u "
                "checked_words=%llu checks=%s%s\n",
                f.number, ms, engine_us, screen.c_str(), f.dispatches, f.refusals, f.escapes, f.predicted, f.carries, f.carries_guest,
                f.carries_holder, f.submissions,
                f.fence_waits, static_cast<unsigned long long>(new_waits), static_cast<unsigned long long>(new_drains),
                f.stats.hand_offs, f.stats.written(-1), f.stats.written(CAUSE_CPU), f.stats.written(CAUSE_WRITE),
                f.stats.written(CAUSE_HAND_OFF), f.stats.written(CAUSE_M2), f.stats.written(CAUSE_BOUND),
                f.stats.pages_committed, dropped.empty() ? "none" : dropped.c_str(), mismatches,
                static_cast<unsigned long long>(checked), ok ? "ok" : "FAILED", attached ? " (debugger attached)" : "");
    for (auto &n : f.notes) std::printf("  %s\n", n.c_str());
    failures_total += f.failures + (mismatches > 8 ? mismatches - 8 : 0);
    mismatches_total += mismatches;
    submissions_total += f.submissions;
    fence_waits_total += f.fence_waits;
    checked_total += checked;
    carries_total += f.carries;
    dispatches_total += f.recs.size();
    frames_done++;
    f.active = false;
    t_stats = nullptr;
    if (active_frames().empty()) game_apply(event(DS_EVENT_RETIRE, 0, 0), "retire");
}

// Every guest word against the reference as the completed passes left it (the words of frames
// still in flight next time; a huge heap's untouched pages a window a frame), and each guest
// thread's words against what it wrote.
uint32_t Host::check_memory(FrameRec &f, uint64_t &checked) {
    std::vector<char> busy(L.arenas, 0);
    for (FrameRec &g : frames)
        if (g.active && &g != &f) busy[g.arena] = 1;
    static const uint8_t zero[PAGE] = {};
    uint32_t mismatches = 0;
    auto page = [&](uint64_t guest, const uint8_t *host) {
        int ar = L.arena_of(guest);
        if (ar >= 0 && busy[ar] && !emu.ro.holds(guest)) return;
        const uint32_t *want = ref_done.find(guest);
        if (std::memcmp(host, want ? reinterpret_cast<const void *>(want) : zero, PAGE) == 0) {
            checked += PAGE / 4;
            return;
        }
        for (uint32_t w = 0; w < PAGE / 4; w++) {
            const uint64_t a = guest + 4 * w;
            if (L.guest_owned(a)) continue;
            int war = L.arena_of(a);
            if (war >= 0 && busy[war]) continue;
            checked++;
            uint32_t got;
            std::memcpy(&got, host + 4 * w, 4);
            const uint32_t exp = want ? want[w] : 0;
            if (got != exp && ++mismatches <= 8)
                f.fail(format("guest %s holds 0x%x, the reference 0x%x", hex(a).c_str(), got, exp));
        }
    };
    std::vector<uint8_t> committed;
    {
        std::lock_guard<std::mutex> lock(emu.watch);
        committed = emu.committed;
    }
    const uint64_t pages = L.heap_bytes / PAGE;
    auto heap_page = [&](uint64_t p) {
        const uint64_t guest = L.H + p * PAGE;
        if (committed[p]) page(guest, emu.heap.host + p * PAGE);
        else if (ref_done.has(guest) && ++mismatches <= 8)
            f.fail("guest " + hex(guest) + " is not committed, but a pass or the CPU wrote it");
    };
    if (L.heap_bytes <= (256ull << 20)) {
        for (uint64_t p = 0; p < pages; p++) heap_page(p);
    } else {
        std::vector<uint64_t> written;
        ref_done.each_page([&](uint64_t g, const uint32_t *) {
            if (emu.heap.holds(g)) written.push_back((g - L.H) / PAGE);
        });
        for (uint64_t p : written) heap_page(p);
        for (uint64_t k = 0; k < 16384; k++) {
            const uint64_t p = (window_page + k) % pages;
            if (!ref_done.has(L.H + p * PAGE)) heap_page(p);
        }
        window_page = (window_page + 16384) % pages;
    }
    for (uint64_t p = 0; p < L.ro_bytes / PAGE; p++) page(L.RO + p * PAGE, emu.ro.host + p * PAGE);
    for (uint64_t p = 0; p < L.shared_bytes / PAGE; p++) page(L.SH + p * PAGE, emu.shared.host + p * PAGE);
    for (auto &t : threads) {
        std::lock_guard<std::mutex> lock(t->m);
        for (auto &[a, v] : t->expect) {
            checked++;
            if (emu.word(a) != v && ++mismatches <= 8)
                f.fail(format("guest %s holds 0x%x, guest thread %u wrote 0x%x", hex(a).c_str(), emu.word(a), t->id, v));
        }
    }
    return mismatches;
}

// The fence said the device is lost (or it did not signal in time: a hung device): the engine is
// told (with the device's fault report where it has VK_EXT_device_fault), its report printed, and
// the process ends without touching the device again (status 4).
void Host::lost_device(FrameRec &f, VkResult r, const std::string &what) {
    if (!engine) die(format("%s: %s on frame %ld (--plain: no engine to report to)", what.c_str(), vk_name(r), f.number));
    uint32_t n = 0;
    check(ds_engine_in_flight(engine, &n), "ds_engine_in_flight");
    std::string status =
        r == VK_TIMEOUT
            ? format("%s: VK_TIMEOUT after %u ms on frame %ld's fence: the device is hung", what.c_str(),
                     o.fence_timeout_ms, f.number)
            : format("%s: %s on frame %ld", what.c_str(), vk_name(r), f.number);
    ds_device_fault fault;
    std::memset(&fault, 0, sizeof fault);
    fault.size = sizeof fault;
    std::vector<ds_fault_address> addresses;
    std::string description;
    bool have_fault = false;
    if (vk.get_fault_info && r == VK_ERROR_DEVICE_LOST) {
        VkDeviceFaultCountsEXT counts{};
        counts.sType = VK_STRUCTURE_TYPE_DEVICE_FAULT_COUNTS_EXT;
        if (vk.get_fault_info(vk.device, &counts, nullptr) == VK_SUCCESS) {
            std::vector<VkDeviceFaultAddressInfoEXT> infos(counts.addressInfoCount);
            std::vector<VkDeviceFaultVendorInfoEXT> vendor(counts.vendorInfoCount);
            counts.vendorBinarySize = 0;
            VkDeviceFaultInfoEXT info{};
            info.sType = VK_STRUCTURE_TYPE_DEVICE_FAULT_INFO_EXT;
            info.pAddressInfos = infos.data();
            info.pVendorInfos = vendor.data();
            VkResult fr = vk.get_fault_info(vk.device, &counts, &info);
            if (fr == VK_SUCCESS || fr == VK_INCOMPLETE) {
                description = info.description;
                for (uint32_t i = 0; i < counts.addressInfoCount; i++)
                    addresses.push_back(ds_fault_address{static_cast<uint32_t>(infos[i].addressType), 0,
                                                         infos[i].reportedAddress, infos[i].addressPrecision});
                fault.description = description.c_str();
                fault.n_addresses = static_cast<uint32_t>(addresses.size());
                fault.addresses = addresses.data();
                have_fault = true;
            }
            std::printf("lost: vkGetDeviceFaultInfoEXT: %s, %u addresses, \"%s\"\n", vk_name(fr),
                        counts.addressInfoCount, description.c_str());
        }
    }
    check(ds_engine_device_lost(engine, status.c_str(), have_fault ? &fault : nullptr), "ds_engine_device_lost");
    const char *json = nullptr;
    size_t len = 0;
    check(ds_engine_loss_report_json(engine, &json, &len), "ds_engine_loss_report_json");
    std::string report(json, len);
    std::printf("lost: %s\n", status.c_str());
    std::printf("lost: %u dispatches in flight (frames in flight:", n);
    for (FrameRec *g : active_frames()) std::printf(" %ld", g->number);
    std::printf(")\n");
    for (FrameRec *g : active_frames())
        if (g->hang_index != UINT64_MAX)
            std::printf("lost: the pass that %s is dispatch %llu (program %s, frame %ld)\n",
                        vk.lavapipe ? "hangs" : "faults", static_cast<unsigned long long>(g->hang_index),
                        hex(HANG_PROGRAM).c_str(), g->number);
    for (const std::string &s : json_strings(report, "findings")) std::printf("lost: finding: %s\n", s.c_str());
    std::printf("loss report:\n%s\nend of loss report\n", report.c_str());
    {
        std::lock_guard<std::mutex> lock(sync_m);
        lost = true;
    }
    sync_cv.notify_all();
    for (auto &t : threads)
        if (t->th.joinable()) t->th.join();
    std::fflush(stdout);
    std::fflush(stderr);
    // The device may still be running the pass: nothing of it (or the engine on it) is destroyed.
    _exit(EXIT_LOST);
}

// --- the guest threads -------------------------------------------------------------------------

void Host::guest_fail(const std::string &what) {
    guest_failures++;
    std::lock_guard<std::mutex> lock(notes_m);
    if (guest_notes.size() < 20) guest_notes.push_back(what);
}

// An event from a guest thread: one answered DS_WAIT waits for the dispatch it names to complete
// (the game's thread signals each complete) and is applied again; one that waits a second time
// asks the game's thread to drain (nothing in flight) first. `attempt` runs under the memory map
// where it changes the read-only region.
bool Host::apply_waiting(const std::function<ds_status()> &attempt, bool memory_map) {
    bool drain = false, ok = false;
    for (int n = 0;; n++) {
        ds_status st;
        std::string err;
        {
            std::unique_lock<std::mutex> lock(mm, std::defer_lock);
            if (memory_map) lock.lock();
            st = attempt();
            if (st != DS_OK) err = ds_last_error();
        }
        if (st == DS_OK) {
            ok = true;
            break;
        }
        if (st != DS_WAIT) {
            guest_fail(format("an event failed: status %d: %s", st, err.c_str()));
            break;
        }
        waits++;
        const uint64_t index = waits_for(err);
        std::unique_lock<std::mutex> lock(sync_m);
        if (n >= 1 && !drain) {
            drain = true;
            drain_requests++;
            sync_cv.notify_all();
        }
        sync_cv.wait(lock, [&] { return completed_upto > index || stop || lost; });
        if (lost || completed_upto <= index) break;
    }
    if (drain) {
        {
            std::lock_guard<std::mutex> lock(sync_m);
            drain_requests--;
        }
        sync_cv.notify_all();
    }
    return ok;
}

// Guest thread 0 makes the read-only region's pages read-only (the guest's protection lowered:
// M5 waits for every device-addressed pass in flight) or read-write again (never waits).
void Host::set_read_only(bool lock) {
    const uint64_t start = L.RO, end = L.RO + L.ro_lock_bytes;
    if (lock) {
        apply_waiting(
            [&]() -> ds_status {
                ds_event p = event(DS_EVENT_PROTECT, start, end);
                p.flags = DS_EVENT_READABLE;
                ds_status st = ds_engine_apply(engine, &p);
                if (st != DS_OK) return st;
                ds_event hp = event(DS_EVENT_HOST_PROTECT, start, end);
                hp.protection = 1;
                st = ds_engine_apply(engine, &hp);
                if (st != DS_OK) return st;
                if (mprotect(emu.ro.host, end - start, PROT_READ) != 0) die("mprotect (read-only)");
                ro_locked = true;
                return DS_OK;
            },
            true);
    } else {
        std::lock_guard<std::mutex> l(mm);
        if (mprotect(emu.ro.host, end - start, PROT_READ | PROT_WRITE) != 0) die("mprotect (read-write)");
        ds_event hp = event(DS_EVENT_HOST_PROTECT, start, end);
        hp.protection = 2;
        ds_status st = ds_engine_apply(engine, &hp);
        ds_event p = event(DS_EVENT_PROTECT, start, end);
        p.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE;
        if (st == DS_OK) st = ds_engine_apply(engine, &p);
        if (st != DS_OK) guest_fail(format("raising the read-only region: status %d: %s", st, ds_last_error()));
        ro_locked = false;
    }
}

void Host::guest_main(GuestThread &g) {
    long last = -1;
    for (;;) {
        long frame;
        {
            std::unique_lock<std::mutex> lock(sync_m);
            sync_cv.wait(lock, [&] { return stop || lost || frame_started > last; });
            if (stop || lost) return;
            frame = frame_started;
        }
        last = frame;
        guest_frame(g, frame);
    }
}

// What a guest thread does while a frame is recorded and others run: lifts last frame's guards,
// writes words beside the passes' (and in the words of holders no pass reads or writes), guards
// pages of the shared region (one in a bound set's holder: a frame in flight's set waits, M5),
// and thread 0 changes the read-only region's protection every --lock-every frames.
void Host::guest_frame(GuestThread &g, long frame) {
    // Thread 0 makes the region read-only (its event waits, then asks for a drain) and keeps it so
    // for --lock-every / 2 frames recorded after it applied, then read-write again as long.
    if (g.id == 0 && engine && o.lock_every > 1) {
        const long half = o.lock_every / 2;
        if (g.next_change == 0) g.next_change = half;
        if (!g.ro_locked && frame >= g.next_change) {
            set_read_only(true);
            std::lock_guard<std::mutex> lock(sync_m);
            g.ro_locked = true;
            g.next_change = frame_started + 1 + half;
        } else if (g.ro_locked && frame >= g.next_change) {
            set_read_only(false);
            g.ro_locked = false;
            g.next_change = frame + half;
        }
    }
    for (uint64_t p : g.guarded) {
        {
            std::lock_guard<std::mutex> lock(emu.watch);
            if (!emu.unguard_locked(p)) die("mprotect (unguard)");
        }
        if (engine) {
            ds_event e = event(DS_EVENT_UNGUARD, p, p + PAGE);
            apply_waiting([&] { return ds_engine_apply(engine, &e); }, false);
        }
    }
    g.guarded.clear();
    for (uint32_t i = 0; i < 16; i++) {
        const uint32_t a = next_rng(g.rng) % L.arenas, u = next_rng(g.rng) % L.units;
        const uint64_t addr = i % 2 == 0 ? L.guest_words(a, u, g.id) + 4 * (next_rng(g.rng) % 64)
                                         : L.sh_write(a, u, g.id) + 4 * (next_rng(g.rng) % 512);
        const uint32_t v = static_cast<uint32_t>(next_rng(g.rng));
        {
            std::lock_guard<std::mutex> lock(g.m);
            std::memcpy(emu.host_of(addr), &v, 4);
            g.expect[addr] = v;
        }
        if (engine) {
            ds_event w = event(DS_EVENT_WRITE, addr, addr);
            w.n_bytes = 4;
            apply_waiting([&] { return ds_engine_apply(engine, &w); }, false);
        }
    }
    const uint32_t T = o.guest_threads;
    const uint32_t n = o.toggles / T + (g.id < o.toggles % T ? 1 : 0);
    for (uint32_t i = 0; i < n; i++) {
        const bool in_set = i == 0 && !o.import_holders && !o.heap_sets && g.id < 6 && L.n_b;
        const uint64_t page = in_set ? L.sh_toggle(next_rng(g.rng) % L.arenas, next_rng(g.rng) % L.units, g.id)
                                     : L.sh_watch(g.id, next_rng(g.rng) % Layout::WATCH_PAGES);
        if (std::find(g.guarded.begin(), g.guarded.end(), page) != g.guarded.end()) continue;
        if (engine) {
            ds_event e = event(DS_EVENT_GUARD, page, page + PAGE);
            if (!apply_waiting([&] { return ds_engine_apply(engine, &e); }, false)) return;
        }
        {
            std::lock_guard<std::mutex> lock(emu.watch);
            if (mprotect(emu.host_of(page), PAGE, PROT_READ) != 0) die("mprotect (guard)");
            emu.guard_of(page)->store(1);
        }
        g.guarded.push_back(page);
    }
}

// --- the end ---------------------------------------------------------------------------------

int Host::teardown() {
    {
        std::lock_guard<std::mutex> lock(sync_m);
        stop = true;
    }
    sync_cv.notify_all();
    for (auto &t : threads)
        if (t->th.joinable()) t->th.join();
    for (auto &t : threads)
        for (uint64_t p : t->guarded) {
            std::lock_guard<std::mutex> lock(emu.watch);
            emu.unguard_locked(p);
        }
    vkDeviceWaitIdle(vk.device);
    if (engine) check(ds_engine_destroy(engine), "ds_engine_destroy");
    for (FrameSlot &fs : slots) {
        for (Segment &sg : fs.segs) vkDestroyFence(vk.device, sg.fence, nullptr);
        vkDestroyCommandPool(vk.device, fs.pool, nullptr);
        vkDestroyDescriptorPool(vk.device, fs.dpool, nullptr);
        if (fs.queries) vkDestroyQueryPool(vk.device, fs.queries, nullptr);
        for (Buffer *b : {&fs.holders, &fs.masks, &fs.logs, &fs.instr, &fs.headers}) b->destroy(vk);
    }
    arena_import.destroy(vk);
    shared_import.destroy(vk);
    for (Pipeline *p : {&hang_p, &bound_p, &gather_p, &device_p}) p->destroy(vk);
    vk.close();
    const uint32_t messages = g_validation_messages.load();
    // The figures of the run: over every frame but the first, and the process's peak resident
    // memory (VmHWM: the guest's pages, the driver's share and dispatchscope's).
    auto quantile = [](std::vector<double> v, double q) {
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
    };
    std::vector<double> ens(engine_ns.begin(), engine_ns.end());
    long hwm_kib = 0;
    {
        std::ifstream status("/proc/self/status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind("VmHWM:", 0) == 0) hwm_kib = std::strtol(line.c_str() + 6, nullptr, 10);
    }
    const double frames_n = frames_done ? static_cast<double>(frames_done) : 1.0;
    // --resolution: the screen pass's device time over every frame but the first (its variant:
    // the raw helper with --plain, the helper, or the instrumented helper).
    const std::string screen_figures =
        L.screen_w ? format("screen=%ux%u screen_variant=%s screen_us_median=%.1f screen_us_min=%.1f screen_frames=%zu ",
                            L.screen_w, L.screen_h,
                            o.plain ? "raw" : o.instrumented ? "instrumented" : "helper", quantile(screen_us, 0.5),
                            screen_us.empty() ? 0.0 : *std::min_element(screen_us.begin(), screen_us.end()),
                            screen_us.size())
                   : "";
    std::printf("summary: mode=%s frames=%ld dispatches_per_frame=%u frames_in_flight=%u guest_threads=%u "
                "submissions_per_frame=%.2f fence_waits_per_frame=%.2f mismatches=%llu checked_words=%llu waits=%llu "
                "drains=%llu carries_per_frame=%.1f frame_ms_median=%.3f frame_ms_p95=%.3f "
                "engine_ns_per_dispatch_median=%.0f engine_ns_per_dispatch_p95=%.0f record_ms_median=%.3f "
                "fence_wait_ms_median=%.3f complete_ms_median=%.3f check_ms_median=%.3f peak_rss_mib=%.1f guest_mib=%llu toggles=%u "
                "%sdevice=\"%s\"\n",
                o.plain ? "plain" : "engine", frames_done, L.per_frame, o.in_flight, o.guest_threads,
                submissions_total / frames_n, fence_waits_total / frames_n,
                static_cast<unsigned long long>(mismatches_total), static_cast<unsigned long long>(checked_total),
                static_cast<unsigned long long>(waits.load() + game_waits.load()),
                static_cast<unsigned long long>(drains), carries_total / frames_n, quantile(frame_ms, 0.5),
                quantile(frame_ms, 0.95), quantile(ens, 0.5), quantile(ens, 0.95), quantile(record_ms, 0.5),
                quantile(wait_ms, 0.5), quantile(complete_ms, 0.5), quantile(check_ms, 0.5), hwm_kib / 1024.0,
                static_cast<unsigned long long>(o.guest_mib), o.toggles, screen_figures.c_str(), vk.name.c_str());
    for (auto &n : guest_notes) std::printf("  guest thread: %s\n", n.c_str());
    const uint64_t failures = failures_total + guest_failures.load();
    std::printf("validation messages: %u\n", messages);
    std::printf("%llu failures\n", static_cast<unsigned long long>(failures));
    return failures || messages ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    Options o;
    auto number = [&](int &i) { return std::strtoull(argv[++i], nullptr, 10); };
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool more = i + 1 < argc;
        if (a == "--listen" && more) o.listen = argv[++i];
        else if (a == "--token" && more) o.token = argv[++i];
        else if (a == "--frames" && more) o.frames = static_cast<long>(number(i));
        else if (a == "--dispatches-per-frame" && more) o.per_frame = static_cast<uint32_t>(number(i));
        else if (a == "--frames-in-flight" && more) o.in_flight = static_cast<uint32_t>(number(i));
        else if (a == "--guest-threads" && more) o.guest_threads = static_cast<uint32_t>(number(i));
        else if (a == "--guest-mib" && more) o.guest_mib = number(i), o.guest_mib_given = true;
        else if (a == "--resolution" && more) {
            unsigned w = 0, h = 0;
            if (std::sscanf(argv[++i], "%ux%u", &w, &h) != 2 || !w || !h) die("--resolution WxH, e.g. 1920x1080");
            o.screen_w = w, o.screen_h = h;
        }
        else if (a == "--toggles" && more) o.toggles = static_cast<uint32_t>(number(i));
        else if (a == "--lock-every" && more) o.lock_every = static_cast<uint32_t>(number(i));
        else if (a == "--plain") o.plain = true;
        else if (a == "--lose-device") o.lose = true;
        else if (a == "--instrumented") o.instrumented = true;
        else if (a == "--header") o.header = true;
        else if (a == "--validation") o.validation = true;
        else if (a == "--print-reports") o.print_reports = true;
        else if (a == "--import-holders") o.import_holders = true;
        else if (a == "--heap-sets") o.heap_sets = true;
        else if (a == "--serial") o.serial = true;
        else
            die("usage: emulator-host [--frames N] [--dispatches-per-frame N] [--frames-in-flight K] "
                "[--guest-threads T] [--plain] [--lose-device] [--listen ADDR] [--token T] [--guest-mib N] "
                "[--toggles N] [--lock-every N] [--instrumented | --header] [--import-holders] [--heap-sets] "
                "[--serial] [--resolution WxH] [--validation] [--print-reports]");
    }
    if (o.guest_mib < 2 || o.guest_mib > 16384) die("--guest-mib: 2 to 16384");
    Host host(o);
    host.setup();
    host.run();
    return host.teardown();
}
