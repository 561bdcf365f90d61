// An emulator-shaped host for dispatchscope (issue 27): a C++ frame loop whose guest memory is
// real pages and whose passes are its own modules on its own Vulkan device, every one of them run
// through dispatchscope's host path (ds_engine_prepare, this program's command buffer and fence,
// ds_engine_complete), with a debugger free to attach at any time (--listen).
//
//   emulator-host [--frames N] [--listen ADDR] [--token T] [--guest-mib N] [--toggles N] [--instrumented]
//                 [--header] [--validation] [--print-reports] [--import-holders]
//
// --header links the device-addressed pass with the helper's header form: its push block carries
// one 64-bit value for dispatchscope (words 30-31, the address of a 64-byte header holding
// ds_prepared.push[16..32]), as a push block as full as shadPS4's (120 of 128 bytes) allows.
//
// Guest memory:
// - the heap: --guest-mib MiB reserved with mmap at a host address this program chooses
//   (MAP_NORESERVE, PROT_NONE), committed lazily: the pages the CPU uses are committed at start,
//   the rest when dispatchscope asks (M2's commit callback makes them read-write and touches each,
//   so all of it is touched); a write-watch of real mprotect guards and a SIGSEGV handler notes
//   the pages the CPU writes and drops the trust of a small cache of textures made from guest pages
//   (D720, D824);
// - a region whose first page the guest makes read-only on odd frames (mprotect, and
//   DS_EVENT_PROTECT and DS_EVENT_HOST_PROTECT to say so) and read-write again on even ones;
// - a region backed by a shared memfd (mapped twice: the guest's view and the CPU's alias), which
//   M3 must leave out by name.
// Between frames the CPU writes guest memory (through the write-watch) and defers a copy (C3).
//
// The passes (SPIR-V assembled at build time from shaders/*.spvasm; the device-addressed one linked
// with spirv-link against `dispatchscope spirv-helper`):
// - bound: run 305's two shapes, bound exactly as ds_prepared.bindings say, the holders' data and
//   write masks handed to ds_engine_complete (O8); with --import-holders each holder is the guest's
//   own pages imported zero-copy (its write-watch guards released first), left out of the
//   completion, and the write-watch told of its stores from the write masks;
// - refused: a member 0x24 into its holder (O7); prepared, never run;
// - device-addressed: a two-level walk through computed addresses, LDS and scratch through flat
//   apertures (P1), stores through computed addresses (C1), and stores and loads that reach the
//   read-only page and the shared region (escapes, T4).
// Each pass's output is checked against what this program computes from the same memory; every
// escape the device logged against the ones it predicts. One line a frame:
//   frame N: time_ms=… dispatches=… refusals=… escapes=… hand_offs=… pages_written=… checks=ok
// and details after it. Exit status 1 if any check failed or the validation layer spoke.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "dispatchscope.h"

#ifndef EMULATOR_HOST_SPV_DIR
#define EMULATOR_HOST_SPV_DIR "spv"
#endif

namespace {

[[noreturn]] void die(const std::string &what) {
    std::fprintf(stderr, "emulator-host: %s\n", what.c_str());
    std::exit(2);
}

// Vulkan (or its validation layer) is not there: status 3, which a test may take as "skip".
[[noreturn]] void absent(const std::string &what) {
    std::fprintf(stderr, "emulator-host: %s\n", what.c_str());
    std::exit(3);
}

void check(ds_status status, const char *what) {
    if (status != DS_OK) die(std::string(what) + ": status " + std::to_string(status) + ": " + ds_last_error());
}

void check_vk(VkResult result, const char *what) {
    if (result != VK_SUCCESS) die(std::string(what) + " failed: VkResult " + std::to_string(result));
}

std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

constexpr uint64_t PAGE = 0x1000;

// ---------------------------------------------------------------------------------------------
// Vulkan: the emulator's own instance, device, queue, command buffer, fence.

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
    VkCommandPool pool = VK_NULL_HANDLE;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool validation_layer = false;
    // What vkCreateDevice was given, kept for dispatchscope to check.
    VkPhysicalDeviceVulkan12Features v12{};
    VkPhysicalDeviceFeatures2 features{};
    const char *extensions[1] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};

    void open(bool validation) {
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

        uint32_t nd = 0;
        vkEnumeratePhysicalDevices(instance, &nd, nullptr);
        std::vector<VkPhysicalDevice> devices(nd);
        vkEnumeratePhysicalDevices(instance, &nd, devices.data());
        for (VkPhysicalDevice pd : devices) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(pd, &p);
            if (p.apiVersion < VK_API_VERSION_1_2) continue;
            uint32_t nq = 0;
            vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
            std::vector<VkQueueFamilyProperties> families(nq);
            vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, families.data());
            for (uint32_t f = 0; f < nq; f++) {
                if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                    physical = pd;
                    family = f;
                    props = p;
                    name = p.deviceName;
                    break;
                }
            }
            if (physical != VK_NULL_HANDLE) break;
        }
        if (physical == VK_NULL_HANDLE) absent("no Vulkan 1.2 device with a compute queue");
        vkGetPhysicalDeviceMemoryProperties(physical, &memory);
        VkPhysicalDeviceExternalMemoryHostPropertiesEXT host_props{};
        host_props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT;
        VkPhysicalDeviceProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        p2.pNext = &host_props;
        vkGetPhysicalDeviceProperties2(physical, &p2);
        import_alignment = std::max<uint64_t>(host_props.minImportedHostPointerAlignment, 1);

        float priority = 1.0f;
        VkDeviceQueueCreateInfo qci{};
        qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
        qci.queueFamilyIndex = family;
        qci.queueCount = 1;
        qci.pQueuePriorities = &priority;
        v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
        v12.bufferDeviceAddress = VK_TRUE;
        features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        features.pNext = &v12;
        features.features.shaderInt64 = VK_TRUE;
        features.features.shaderStorageBufferArrayDynamicIndexing = VK_TRUE;
        VkDeviceCreateInfo dvci{};
        dvci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
        dvci.pNext = &features;
        dvci.queueCreateInfoCount = 1;
        dvci.pQueueCreateInfos = &qci;
        dvci.enabledExtensionCount = 1;
        dvci.ppEnabledExtensionNames = extensions;
        check_vk(vkCreateDevice(physical, &dvci, nullptr, &device), "vkCreateDevice");
        vkGetDeviceQueue(device, family, 0, &queue);

        VkCommandPoolCreateInfo pci{};
        pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
        pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pci.queueFamilyIndex = family;
        check_vk(vkCreateCommandPool(device, &pci, nullptr, &pool), "vkCreateCommandPool");
        VkCommandBufferAllocateInfo cai{};
        cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
        cai.commandPool = pool;
        cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cai.commandBufferCount = 1;
        check_vk(vkAllocateCommandBuffers(device, &cai, &cmd), "vkAllocateCommandBuffers");
        VkFenceCreateInfo fci{};
        fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
        check_vk(vkCreateFence(device, &fci, nullptr, &fence), "vkCreateFence");
    }

    uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want) const {
        for (uint32_t i = 0; i < memory.memoryTypeCount; i++)
            if ((bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & want) == want) return i;
        die("no memory type for the buffer");
    }

    void close() {
        if (device != VK_NULL_HANDLE) {
            vkDestroyFence(device, fence, nullptr);
            vkDestroyCommandPool(device, pool, nullptr);
            vkDestroyDevice(device, nullptr);
        }
        if (messenger != VK_NULL_HANDLE) {
            auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
            if (destroy) destroy(instance, messenger, nullptr);
        }
        if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
    }
};

// A host-visible, coherent buffer of the emulator's (not guest memory).
struct Buffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    uint8_t *ptr = nullptr;
    uint64_t bytes = 0;
    uint64_t address = 0;
    bool imported = false;

    void make(const Device &d, uint64_t size, bool device_address) {
        bytes = size;
        VkBufferCreateInfo bci{};
        bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bci.size = size;
        bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
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
        mai.memoryTypeIndex = d.memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                                    VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
        check_vk(vkAllocateMemory(d.device, &mai, nullptr, &memory), "vkAllocateMemory");
        check_vk(vkBindBufferMemory(d.device, buffer, memory, 0), "vkBindBufferMemory");
        void *p = nullptr;
        check_vk(vkMapMemory(d.device, memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
        ptr = static_cast<uint8_t *>(p);
        std::memset(ptr, 0, size);
        if (device_address) {
            VkBufferDeviceAddressInfo info{};
            info.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
            info.buffer = buffer;
            address = vkGetBufferDeviceAddress(d.device, &info);
        }
    }

    // The emulator's own guest pages as a buffer, zero-copy (VK_EXT_external_memory_host): `host`
    // and `size` aligned to the device's minImportedHostPointerAlignment.
    void import(const Device &d, uint8_t *host, uint64_t size) {
        bytes = size;
        ptr = host;
        VkExternalMemoryBufferCreateInfo ext{};
        ext.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
        ext.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
        VkBufferCreateInfo bci{};
        bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bci.pNext = &ext;
        bci.size = size;
        bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
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
        VkImportMemoryHostPointerInfoEXT imp{};
        imp.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT;
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
    }

    void destroy(const Device &d) {
        if (buffer == VK_NULL_HANDLE) return;
        vkDestroyBuffer(d.device, buffer, nullptr);
        if (!imported) vkUnmapMemory(d.device, memory);
        vkFreeMemory(d.device, memory, nullptr);
        *this = Buffer{};
    }

    uint32_t word(uint64_t i) const {
        uint32_t v;
        std::memcpy(&v, ptr + 4 * i, 4);
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

// A compute pipeline of one module, one descriptor set and a 128-byte push block.
struct Pass {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkDescriptorSet set = VK_NULL_HANDLE;

    void make(const Device &d, VkDescriptorPool pool, const std::string &spv,
              const std::vector<uint32_t> &binding_counts) {
        std::vector<VkDescriptorSetLayoutBinding> bindings;
        for (uint32_t i = 0; i < binding_counts.size(); i++) {
            VkDescriptorSetLayoutBinding b{};
            b.binding = i;
            b.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            b.descriptorCount = binding_counts[i];
            b.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
            bindings.push_back(b);
        }
        VkDescriptorSetLayoutCreateInfo sli{};
        sli.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
        sli.bindingCount = static_cast<uint32_t>(bindings.size());
        sli.pBindings = bindings.data();
        check_vk(vkCreateDescriptorSetLayout(d.device, &sli, nullptr, &set_layout), "vkCreateDescriptorSetLayout");
        VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
        VkPipelineLayoutCreateInfo pli{};
        pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
        pli.setLayoutCount = 1;
        pli.pSetLayouts = &set_layout;
        pli.pushConstantRangeCount = 1;
        pli.pPushConstantRanges = &range;
        check_vk(vkCreatePipelineLayout(d.device, &pli, nullptr, &layout), "vkCreatePipelineLayout");
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
        VkDescriptorSetAllocateInfo dai{};
        dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
        dai.descriptorPool = pool;
        dai.descriptorSetCount = 1;
        dai.pSetLayouts = &set_layout;
        check_vk(vkAllocateDescriptorSets(d.device, &dai, &set), "vkAllocateDescriptorSets");
    }

    // Records, submits and waits: the emulator's own dispatch on its own queue.
    void run(const Device &d, const uint32_t push[32], uint32_t groups) const {
        check_vk(vkResetCommandBuffer(d.cmd, 0), "vkResetCommandBuffer");
        VkCommandBufferBeginInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        check_vk(vkBeginCommandBuffer(d.cmd, &bi), "vkBeginCommandBuffer");
        vkCmdBindPipeline(d.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
        vkCmdBindDescriptorSets(d.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, nullptr);
        vkCmdPushConstants(d.cmd, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 128, push);
        vkCmdDispatch(d.cmd, groups, 1, 1);
        // The host reads what the device wrote (its own buffers and the imported guest pages).
        VkMemoryBarrier mb{};
        mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(d.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                             &mb, 0, nullptr, 0, nullptr);
        check_vk(vkEndCommandBuffer(d.cmd), "vkEndCommandBuffer");
        VkSubmitInfo si{};
        si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
        si.commandBufferCount = 1;
        si.pCommandBuffers = &d.cmd;
        check_vk(vkQueueSubmit(d.queue, 1, &si, d.fence), "vkQueueSubmit");
        check_vk(vkWaitForFences(d.device, 1, &d.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
        check_vk(vkResetFences(d.device, 1, &d.fence), "vkResetFences");
    }

    void destroy(const Device &d) {
        vkDestroyPipeline(d.device, pipeline, nullptr);
        vkDestroyPipelineLayout(d.device, layout, nullptr);
        vkDestroyDescriptorSetLayout(d.device, set_layout, nullptr);
    }
};

// ---------------------------------------------------------------------------------------------
// Guest memory: real pages, a write-watch, a texture cache.

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
    const char *name;
    uint64_t guest;
    uint64_t bytes;
    uint8_t *host;
    uint8_t *alias;  // the shared region's second view (the CPU's), else null
    int fd;
    bool lazy;
    bool shared;
};

struct PageState {
    bool committed;
    bool guarded;
    uint8_t written;  // bit per Cause, this frame
};

struct Texture {
    const char *name;
    uint64_t start, end;  // guest
    uint32_t id;
    bool trusted;
    int dropped_by;  // the cause of the last drop this frame, or -1
};

// What the SIGSEGV handler and the engine's callbacks touch. One emulator a process.
struct Emulator {
    Region heap{}, ro{}, shared{};
    std::vector<PageState> pages;  // the heap's
    std::vector<Texture> textures;
    volatile sig_atomic_t cpu_writing = 0;
    // This frame's counts.
    uint32_t cpu_faults = 0, unexpected_faults = 0, commits = 0, pages_committed = 0, releases = 0,
             host_writes = 0, hand_offs = 0;
    std::vector<std::pair<uint64_t, uint64_t>> handed_off;  // guest ranges

    uint8_t *host_of(uint64_t guest) const {
        for (const Region *r : {&heap, &ro, &shared})
            if (guest >= r->guest && guest < r->guest + r->bytes) return r->host + (guest - r->guest);
        return nullptr;
    }
    bool in_heap_host(uint64_t host) const {
        uint64_t h = reinterpret_cast<uint64_t>(heap.host);
        return host >= h && host < h + heap.bytes;
    }
    uint64_t heap_page_of_host(uint64_t host) const {
        return (host - reinterpret_cast<uint64_t>(heap.host)) / PAGE;
    }
    uint32_t heap_word(uint64_t off) const {
        uint32_t v;
        std::memcpy(&v, heap.host + off, 4);
        return v;
    }

    void distrust(uint64_t start, uint64_t end, int cause) {
        for (Texture &t : textures) {
            if (t.trusted && t.start < end && start < t.end) {
                t.trusted = false;
                t.dropped_by = cause;
            }
        }
    }

    void note_heap_pages(uint64_t host, uint64_t bytes, int cause) {
        uint64_t h0 = reinterpret_cast<uint64_t>(heap.host);
        for (uint64_t a = host & ~(PAGE - 1); a < host + bytes; a += PAGE) {
            if (!in_heap_host(a)) continue;
            pages[(a - h0) / PAGE].written |= static_cast<uint8_t>(1u << cause);
        }
    }

    uint32_t pages_written(int cause) const {
        uint32_t n = 0;
        for (const PageState &p : pages)
            if (cause < 0 ? p.written != 0 : (p.written >> cause) & 1) n++;
        return n;
    }
};

Emulator g_emu;

void on_segv(int sig, siginfo_t *info, void *) {
    uint64_t addr = reinterpret_cast<uint64_t>(info->si_addr);
    Emulator &e = g_emu;
    if (e.cpu_writing && e.in_heap_host(addr)) {
        uint64_t page = e.heap_page_of_host(addr);
        if (e.pages[page].guarded) {
            // D824: a CPU write into a guarded page: note it, drop textures over it, let it through.
            e.pages[page].guarded = false;
            e.pages[page].written |= 1u << CAUSE_CPU;
            e.cpu_faults++;
            uint64_t guest = e.heap.guest + page * PAGE;
            e.distrust(guest, guest + PAGE, CAUSE_CPU);
            mprotect(e.heap.host + page * PAGE, PAGE, PROT_READ | PROT_WRITE);
            return;
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

// The engine's calls into the emulator (ds_host_callbacks).
int32_t cb_write(void *, uint64_t host, const uint8_t *src, uint64_t bytes) {
    Emulator &e = g_emu;
    e.host_writes++;
    if (e.in_heap_host(host)) {
        uint64_t h0 = reinterpret_cast<uint64_t>(e.heap.host);
        for (uint64_t a = host & ~(PAGE - 1); a < host + bytes; a += PAGE) {
            PageState &p = e.pages[(a - h0) / PAGE];
            if (!p.committed) return -1;
            if (p.guarded) {
                if (mprotect(reinterpret_cast<void *>(a), PAGE, PROT_READ | PROT_WRITE) != 0) return -2;
                p.guarded = false;
            }
            p.written |= 1u << CAUSE_WRITE;
            uint64_t guest = e.heap.guest + (a - h0);
            e.distrust(guest, guest + PAGE, CAUSE_WRITE);
        }
    }
    std::memcpy(reinterpret_cast<void *>(host), src, bytes);
    return 0;
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
    e.commits++;
    if (!e.in_heap_host(host)) return 0;  // the other regions are committed from the start
    uint64_t h0 = reinterpret_cast<uint64_t>(e.heap.host);
    // Each stretch of uncommitted pages made read-write with one mprotect; the kernel gives a page
    // its memory on first touch (MAP_NORESERVE), so 16 GiB committed costs what it touches.
    uint64_t a = host & ~(PAGE - 1);
    while (a < host + bytes) {
        if (e.pages[(a - h0) / PAGE].committed) {
            a += PAGE;
            continue;
        }
        uint64_t end = a;
        while (end < host + bytes && !e.pages[(end - h0) / PAGE].committed) {
            e.pages[(end - h0) / PAGE].committed = true;
            e.pages_committed++;
            end += PAGE;
        }
        if (mprotect(reinterpret_cast<void *>(a), end - a, PROT_READ | PROT_WRITE) != 0) return -1;
        a = end;
    }
    return 0;
}

int32_t cb_release_guards(void *, uint64_t host, uint64_t bytes) {
    Emulator &e = g_emu;
    e.releases++;
    if (!e.in_heap_host(host)) return -3;  // only the heap is watched
    uint64_t h0 = reinterpret_cast<uint64_t>(e.heap.host);
    for (uint64_t a = host & ~(PAGE - 1); a < host + bytes; a += PAGE) {
        PageState &p = e.pages[(a - h0) / PAGE];
        if (!p.guarded) continue;
        if (mprotect(reinterpret_cast<void *>(a), PAGE, PROT_READ | PROT_WRITE) != 0) return -1;
        p.guarded = false;
        // M2: the pages are noted written (the engine does the same); a texture over them stays
        // trusted until a store is handed off (C2) or the CPU writes it.
        p.written |= 1u << CAUSE_M2;
    }
    return 0;
}

int32_t cb_hand_off(void *, uint64_t guest_start, uint64_t guest_end, uint64_t host) {
    Emulator &e = g_emu;
    e.hand_offs++;
    e.handed_off.push_back({guest_start, guest_end});
    e.note_heap_pages(host, guest_end - guest_start, CAUSE_HAND_OFF);
    e.distrust(guest_start, guest_end, CAUSE_HAND_OFF);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Events.

ds_event event(uint32_t kind, uint64_t start, uint64_t end) {
    ds_event e;
    std::memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.kind = kind;
    e.start = start;
    e.end = end;
    return e;
}

void apply(ds_engine engine, const ds_event &e, const char *what) { check(ds_engine_apply(engine, &e), what); }

// Guards every page of every texture (the write-watch), telling the engine (D824).
void guard_textures(ds_engine engine) {
    Emulator &e = g_emu;
    for (Texture &t : e.textures) {
        for (uint64_t g = t.start & ~(PAGE - 1); g < t.end; g += PAGE) {
            uint64_t page = (g - e.heap.guest) / PAGE;
            if (e.pages[page].guarded) continue;
            if (mprotect(e.heap.host + page * PAGE, PAGE, PROT_READ) != 0) die("mprotect (guard)");
            e.pages[page].guarded = true;
            apply(engine, event(DS_EVENT_GUARD, g, g + PAGE), "guard");
        }
    }
}

// Rebuilds the textures that lost their trust (D720: a new protected target each).
void rebuild_textures(ds_engine engine, uint32_t &next_id) {
    for (Texture &t : g_emu.textures) {
        if (t.trusted) continue;
        if (t.id != 0) {
            ds_event r = event(DS_EVENT_REMOVE_TARGET, 0, 0);
            r.target_id = t.id;
            apply(engine, r, "remove target");
        }
        t.id = next_id++;
        ds_event a = event(DS_EVENT_ADD_TARGET, t.start, t.end);
        a.target_id = t.id;
        a.name = t.name;
        apply(engine, a, "add target");
        t.trusted = true;
    }
}

ds_slot slot(uint32_t index, uint64_t base, uint64_t size, bool written) {
    ds_slot s{};
    s.size = sizeof s;
    s.slot = index;
    s.flags = DS_SLOT_RESOLVED | (written ? DS_SLOT_WRITTEN : 0u);
    s.base = base;
    s.size_bytes = size;
    s.alias_of = DS_NO_ALIAS;
    s.format = DS_FORMAT_NONE;
    s.base_source = DS_BASE_DESCRIPTOR;
    return s;
}

struct Frame {
    uint32_t dispatches = 0, refusals = 0, escapes = 0, escapes_predicted = 0, failures = 0;
    // The engine's CPU time on this (the game's) thread: inside ds_engine_prepare and
    // ds_engine_complete, and how many of each were called.
    double engine_us = 0;
    uint32_t engine_dispatches = 0;
    std::vector<std::string> notes;
    template <class F>
    ds_status engine_call(F call) {
        auto t = std::chrono::steady_clock::now();
        ds_status s = call();
        engine_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
        return s;
    }
    void fail(const std::string &what) {
        failures++;
        notes.push_back("MISMATCH " + what);
    }
};

// Finds every `"reason":"…"` of the report's left-out pieces, with their ranges.
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

}  // namespace

// The toggles' pages: xorshift64*, the same every run.
uint64_t rng() {
    static uint64_t s = 0x9E3779B97F4A7C15ull;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
}

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    std::string listen;
    const char *token = nullptr;
    long frames = 0;
    uint64_t guest_mib = 8;
    uint32_t toggles = 1000;
    bool instrumented = false, header = false, validation = false, print_reports = false, import_holders = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--listen" && i + 1 < argc) listen = argv[++i];
        else if (a == "--token" && i + 1 < argc) token = argv[++i];
        else if (a == "--frames" && i + 1 < argc) frames = std::strtol(argv[++i], nullptr, 10);
        else if (a == "--guest-mib" && i + 1 < argc) guest_mib = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--toggles" && i + 1 < argc) toggles = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
        else if (a == "--instrumented") instrumented = true;
        else if (a == "--header") header = true;
        else if (a == "--validation") validation = true;
        else if (a == "--print-reports") print_reports = true;
        else if (a == "--import-holders") import_holders = true;
        else
            die("usage: emulator-host [--frames N] [--listen ADDR] [--token T] [--guest-mib N] [--toggles N] "
                "[--instrumented] [--header] [--validation] [--print-reports] [--import-holders]");
    }
    if (guest_mib < 2 || guest_mib > 16384) die("--guest-mib: 2 to 16384");

    Emulator &emu = g_emu;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);

    // --- guest memory, at host addresses this program chooses -----------------------------------
    auto map_at = [](uint64_t host, uint64_t bytes, int prot, int flags, int fd) {
        void *p = mmap(reinterpret_cast<void *>(host), bytes, prot, flags | MAP_FIXED_NOREPLACE, fd, 0);
        if (p == MAP_FAILED || reinterpret_cast<uint64_t>(p) != host) die("mmap at " + hex(host) + " failed");
        return static_cast<uint8_t *>(p);
    };
    emu.heap = Region{"heap", 0x100000000ull, guest_mib << 20, nullptr, nullptr, -1, true, false};
    emu.heap.host = map_at(0x5e0000000000ull, emu.heap.bytes, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
    emu.pages.assign(emu.heap.bytes / PAGE, PageState{false, false, 0});
    emu.ro = Region{"read-only", 0x200000000ull, 0x10000, nullptr, nullptr, -1, false, false};
    emu.ro.host = map_at(0x5f0000000000ull, emu.ro.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    emu.shared = Region{"shared", 0x300000000ull, 0x10000, nullptr, nullptr, -1, false, true};
    emu.shared.fd = memfd_create("emulator-host-guest", MFD_CLOEXEC);
    if (emu.shared.fd < 0 || ftruncate(emu.shared.fd, static_cast<off_t>(emu.shared.bytes)) != 0) die("memfd");
    emu.shared.host = map_at(0x5f8000000000ull, emu.shared.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, emu.shared.fd);
    void *alias = mmap(nullptr, emu.shared.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, emu.shared.fd, 0);
    if (alias == MAP_FAILED) die("mmap (alias)");
    emu.shared.alias = static_cast<uint8_t *>(alias);

    // The heap's layout (offsets). The output lies alone in its 64 KiB (a chunk is at most 64 KiB,
    // T1, and C2 hands off whole chunks), so its hand-off reaches no other texture.
    const uint64_t H = emu.heap.guest;
    const uint64_t SET_A = 0x0, SET_B = 0x10000, O7_BASE = 0x11000, ROOT = 0x20000, CPU_PAGE = 0x21000,
                   COPY_PAGE = 0x22000, OUT = 0x30000, IDLE = 0x40000;
    const uint32_t LANES = 128, INSTANCES = 8;
    uint64_t bottoms[INSTANCES];
    uint32_t counts[INSTANCES];
    bottoms[0] = CPU_PAGE;
    bottoms[1] = COPY_PAGE;
    for (uint32_t k = 2; k < INSTANCES; k++) bottoms[k] = (emu.heap.bytes * k / INSTANCES) & ~(PAGE - 1);
    for (uint32_t k = 0; k < INSTANCES; k++) counts[k] = (k % 2) ? 5 + k : 16;

    // --- the device and the engine ---------------------------------------------------------------
    Device vk;
    vk.open(validation);
    ds_vulkan_device handles{};
    handles.size = sizeof handles;
    handles.get_instance_proc_addr = reinterpret_cast<void *>(&vkGetInstanceProcAddr);
    handles.instance = vk.instance;
    handles.physical_device = vk.physical;
    handles.device = vk.device;
    handles.queue = vk.queue;
    handles.queue_family_index = vk.family;
    handles.api_version = VK_API_VERSION_1_2;
    handles.enabled_extensions = vk.extensions;
    handles.n_enabled_extensions = 1;
    handles.enabled_features = &vk.features;
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
    ds_engine engine = 0;
    check(ds_engine_create_vulkan_host(&handles, &cb, &engine), "ds_engine_create_vulkan_host");
    if (!listen.empty()) {
        uint16_t port = 0;
        check(ds_engine_listen(engine, listen.c_str(), token, "emulator-host", &port), "ds_engine_listen");
        std::printf("listening on %s:%u (%s)\n", listen.substr(0, listen.rfind(':')).c_str(), port, vk.name.c_str());
    }
    // The guest's code of each program, handed over as an emulator first translates it.
    const uint64_t BOUND_PROGRAM = 0x400003e19200ull, O7_PROGRAM = 0x400003d88400ull,
                   DEVICE_PROGRAM = 0x74005b854a00ull;
    std::string rdna_dir = EMULATOR_HOST_RDNA_DIR;
    if (const char *d = std::getenv("EMULATOR_HOST_RDNA_DIR")) rdna_dir = d;
    GuestCode bound_code, device_code;
    bound_code.load(rdna_dir, "bound");
    device_code.load(rdna_dir, "device");
    check(ds_engine_add_program(engine, BOUND_PROGRAM, bound_code.bytes.data(), bound_code.bytes.size()),
          "ds_engine_add_program (bound)");
    check(ds_engine_add_program(engine, O7_PROGRAM, bound_code.bytes.data(), bound_code.bytes.size()),
          "ds_engine_add_program (O7)");
    check(ds_engine_add_program(engine, DEVICE_PROGRAM, device_code.bytes.data(), device_code.bytes.size()),
          "ds_engine_add_program (device-addressed)");
    // What the translator says of each of the device-addressed program's sites (device.spvasm's
    // site numbers): its pc, kind, load or store, and bytes.
    const uint32_t SITES = 9;
    if (device_code.sites.size() != SITES) die("rdna/device.s does not label 9 sites");
    ds_site sites[SITES];
    {
        const uint32_t kinds[SITES] = {DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL, DS_ACCESS_FLAT,
                                       DS_ACCESS_FLAT,   DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL,
                                       DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL, DS_ACCESS_GLOBAL};
        const uint32_t stores[SITES] = {0, 0, 1, 1, 1, 1, 0, 1, 1};
        for (uint32_t i = 0; i < SITES; i++)
            sites[i] = ds_site{DEVICE_PROGRAM + device_code.sites[i], kinds[i], stores[i], i == 0 ? 16u : 4u, 0};
    }
    std::printf("device %s, minStorageBufferOffsetAlignment %llu, validation layer %s, %s helper\n",
                vk.name.c_str(), static_cast<unsigned long long>(vk.props.limits.minStorageBufferOffsetAlignment),
                validation ? "on" : "off", instrumented ? "instrumented" : header ? "header-form" : "plain");

    // The reservations (host addresses named), and what the CPU commits itself.
    {
        ds_event r = event(DS_EVENT_RESERVE, emu.heap.guest, emu.heap.guest + emu.heap.bytes);
        r.host_address = reinterpret_cast<uint64_t>(emu.heap.host);
        r.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE;  // committed lazily
        apply(engine, r, "reserve heap");
        r = event(DS_EVENT_RESERVE, emu.ro.guest, emu.ro.guest + emu.ro.bytes);
        r.host_address = reinterpret_cast<uint64_t>(emu.ro.host);
        r.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
        apply(engine, r, "reserve read-only region");
        r = event(DS_EVENT_RESERVE, emu.shared.guest, emu.shared.guest + emu.shared.bytes);
        r.host_address = reinterpret_cast<uint64_t>(emu.shared.host);
        r.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED | DS_EVENT_SHARED;
        apply(engine, r, "reserve shared region");
    }
    auto cpu_commit = [&](uint64_t off, uint64_t bytes) {
        for (uint64_t a = off & ~(PAGE - 1); a < off + bytes; a += PAGE) {
            if (emu.pages[a / PAGE].committed) continue;
            if (mprotect(emu.heap.host + a, PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect (commit)");
            emu.pages[a / PAGE].committed = true;
            apply(engine, event(DS_EVENT_COMMIT, H + a, H + a + PAGE), "commit");
        }
    };
    cpu_commit(SET_A, 0x10000);
    cpu_commit(SET_B, 0x2000);
    cpu_commit(ROOT, 0x3000);
    cpu_commit(OUT, PAGE);
    cpu_commit(IDLE, PAGE);
    for (uint32_t k = 2; k < INSTANCES; k++) cpu_commit(bottoms[k], PAGE);
    auto put = [&](uint64_t off, uint32_t v) { std::memcpy(emu.heap.host + off, &v, 4); };
    // First contents (before any guard): the holders, the instance table, the bottom levels.
    for (uint64_t w = 0; w < 0xe420 / 4; w++) put(SET_A + 4 * w, static_cast<uint32_t>(0x1000 + w * 7));
    for (uint64_t w = 0; w < 0x100 / 4; w++) put(SET_B + 4 * w, static_cast<uint32_t>(0x50 + w));
    for (uint32_t k = 0; k < INSTANCES; k++) {
        uint64_t b = H + bottoms[k];
        put(ROOT + 16 * k, static_cast<uint32_t>(b));
        put(ROOT + 16 * k + 4, static_cast<uint32_t>(b >> 32));
        put(ROOT + 16 * k + 8, counts[k]);
        put(ROOT + 16 * k + 12, 100 * k);
        if (k >= 2)
            for (uint32_t i = 0; i < counts[k]; i++) put(bottoms[k] + 4 * i, 0x10000 * k + i);
    }
    for (uint32_t i = 0; i < 0x200 / 4; i++) {
        uint32_t v = 0x5a000000 + i;
        std::memcpy(emu.shared.alias + 4 * i, &v, 4);
    }
    {
        ds_event w = event(DS_EVENT_WRITE, H, H);
        w.start = H + SET_A;
        w.n_bytes = 0x12000;
        apply(engine, w, "write");
        w.start = H + ROOT;
        w.n_bytes = 0x3000;
        apply(engine, w, "write");
        for (uint32_t k = 2; k < INSTANCES; k++) {
            w.start = H + bottoms[k];
            w.n_bytes = 4 * counts[k];
            apply(engine, w, "write");
        }
        w.start = emu.shared.guest;
        w.n_bytes = 0x200;
        apply(engine, w, "write");
    }
    // The texture cache (D720): each made from guest pages, trusted until they are written.
    uint32_t next_target = 1;
    emu.textures = {
        {"out-tex", H + OUT, H + OUT + PAGE, 0, false, -1},        // the device's output: C2 drops it
        {"bvh-tex", H + ROOT, H + ROOT + PAGE, 0, false, -1},      // only read: stays trusted
        {"cpu-tex", H + CPU_PAGE, H + CPU_PAGE + PAGE, 0, false, -1},  // the CPU writes it: a fault
        {"holder-tex", H + SET_B, H + SET_B + PAGE, 0, false, -1},  // O8's write-back drops it
        {"idle-tex", H + IDLE, H + IDLE + PAGE, 0, false, -1},      // nothing writes it
    };
    rebuild_textures(engine, next_target);
    guard_textures(engine);

    // --- the passes -------------------------------------------------------------------------------
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 16};
    VkDescriptorPoolCreateInfo dpi{};
    dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpi.maxSets = 2;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    VkDescriptorPool dpool;
    check_vk(vkCreateDescriptorPool(vk.device, &dpi, nullptr, &dpool), "vkCreateDescriptorPool");
    std::string spv_dir = EMULATOR_HOST_SPV_DIR;
    if (const char *d = std::getenv("EMULATOR_HOST_SPV_DIR")) spv_dir = d;
    Pass bound, device;
    bound.make(vk, dpool, spv_dir + "/bound.spv", {4, 4});
    if (instrumented && header) die("--instrumented and --header: the header form is the plain helper's");
    device.make(vk, dpool,
                spv_dir + (instrumented ? "/device-instrumented.spv" : header ? "/device-header.spv" : "/device-helper.spv"),
                {1});
    // The header form's header: dispatchscope's push words 16-31, in a buffer of this program's.
    Buffer helper_header;
    if (header) helper_header.make(vk, 64, true);
    Buffer log;
    log.make(vk, 4 * LANES, false);
    {
        VkDescriptorBufferInfo bi{log.buffer, 0, VK_WHOLE_SIZE};
        VkWriteDescriptorSet w{};
        w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        w.dstSet = device.set;
        w.dstBinding = 0;
        w.descriptorCount = 1;
        w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w.pBufferInfo = &bi;
        vkUpdateDescriptorSets(vk.device, 1, &w, 0, nullptr);
    }
    // The instrumented helper's buffer: its layout is the engine's (9 sites over a 16 x 8 grid,
    // two 8 x 8 workgroups); its first words, made before each pass, carry the lanes an attached
    // debugger asked to capture. The escape log starts after the header and the sites.
    const uint32_t ESC_CAP = 48, ESCAPES_AT = 60 + SITES * 16, GRID_W = 16, GRID_H = 8;
    const uint64_t CANARY = 0x700000000ull;  // no reservation: the positive control must miss
    uint64_t instr_words = 0;
    check(ds_engine_instrumentation_init(engine, SITES, GRID_W, GRID_H, CANARY, nullptr, 0, &instr_words),
          "ds_engine_instrumentation_init (size)");
    Buffer instr;
    if (instrumented) instr.make(vk, 4ull * instr_words, true);

    long failures_total = 0;
    std::vector<double> frame_ms, dispatch_us;  // every frame but the first
    for (long frame = 0; frames == 0 || frame < frames; frame++) {
        auto t0 = std::chrono::steady_clock::now();
        Frame fr;
        emu.cpu_faults = emu.unexpected_faults = emu.commits = emu.pages_committed = emu.releases = 0;
        emu.host_writes = emu.hand_offs = 0;
        emu.handed_off.clear();
        for (PageState &p : emu.pages) p.written = 0;
        for (Texture &t : emu.textures) t.dropped_by = -1;
        const uint32_t f = static_cast<uint32_t>(frame);
        const bool ro_locked = frame % 2 == 1;

        // --- the write-watch over the whole heap: --toggles pages guarded as the frame starts and
        // released as it ends (the engine releases those its device-addressed pass maps first, M2)
        std::vector<uint64_t> toggled;
        {
            const uint64_t first = 0x100000 / PAGE, n = emu.heap.bytes / PAGE;
            auto busy = [&](uint64_t page) {
                for (uint32_t k = 0; k < INSTANCES; k++)
                    if (page >= bottoms[k] / PAGE && page <= bottoms[k] / PAGE + 1) return true;
                return false;
            };
            for (uint32_t i = 0; n > first && i < toggles; i++) {
                uint64_t page = first + rng() % (n - first);
                PageState &p = emu.pages[page];
                if (!p.committed || p.guarded || busy(page)) continue;
                if (mprotect(emu.heap.host + page * PAGE, PAGE, PROT_READ) != 0) die("mprotect (toggle)");
                p.guarded = true;
                apply(engine, event(DS_EVENT_GUARD, H + page * PAGE, H + (page + 1) * PAGE), "guard (toggle)");
                toggled.push_back(page);
            }
        }

        // --- between frames: the guest protects, the CPU writes, a copy is deferred (C3) ---------
        if (ro_locked) {
            if (mprotect(emu.ro.host, PAGE, PROT_READ) != 0) die("mprotect (read-only)");
            ds_event p = event(DS_EVENT_PROTECT, emu.ro.guest, emu.ro.guest + PAGE);
            p.flags = DS_EVENT_READABLE;
            apply(engine, p, "protect");
            ds_event hp = event(DS_EVENT_HOST_PROTECT, emu.ro.guest, emu.ro.guest + PAGE);
            hp.protection = 1;
            apply(engine, hp, "host protect");
        } else if (frame > 0) {
            if (mprotect(emu.ro.host, PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect (read-write)");
            ds_event hp = event(DS_EVENT_HOST_PROTECT, emu.ro.guest, emu.ro.guest + PAGE);
            hp.protection = 2;
            apply(engine, hp, "host protect");
            ds_event p = event(DS_EVENT_PROTECT, emu.ro.guest, emu.ro.guest + PAGE);
            p.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE;
            apply(engine, p, "protect");
        }
        // The fences keep the compiler from moving the guest's stores out of the window the
        // SIGSEGV handler accepts them in (an optimised build did, and the fault was fatal).
        emu.cpu_writing = 1;
        std::atomic_signal_fence(std::memory_order_seq_cst);
        const uint32_t faults_before = emu.cpu_faults;
        for (uint32_t i = 0; i < 16; i++) put(CPU_PAGE + 4 * i, 1000 * f + 3 * i + 1);  // faults once
        std::atomic_signal_fence(std::memory_order_seq_cst);
        emu.cpu_writing = 0;
        if (emu.cpu_faults > faults_before)  // the handler lifted the guard it caught (D824)
            apply(engine, event(DS_EVENT_UNGUARD, H + CPU_PAGE, H + CPU_PAGE + PAGE), "unguard");
        {
            ds_event w = event(DS_EVENT_WRITE, H + CPU_PAGE, H + CPU_PAGE);
            w.n_bytes = 64;
            apply(engine, w, "write");
            for (uint32_t i = 0; i < 4; i++) {
                uint32_t v = 0x5a000000 + 0x100 * f + i;
                std::memcpy(emu.shared.alias + 4 * i, &v, 4);
            }
            w = event(DS_EVENT_WRITE, emu.shared.guest, emu.shared.guest);
            w.n_bytes = 16;
            apply(engine, w, "write (shared)");
        }
        uint32_t copy[16];
        for (uint32_t i = 0; i < 16; i++) copy[i] = 7 * f + 0x70000 + i;
        {
            ds_event c = event(DS_EVENT_DEFER_COPY, H + COPY_PAGE, H + COPY_PAGE);
            c.bytes = reinterpret_cast<const uint8_t *>(copy);
            c.n_bytes = sizeof copy;
            apply(engine, c, "defer copy");
        }

        // --- the bound pass: run 305's shapes ---------------------------------------------------
        {
            ds_slot slots[] = {slot(0, H + SET_A, 0xe40f, true), slot(1, H + SET_A + 0xe400, 0x20, true),
                               slot(2, H + SET_B, 0x94, false), slot(3, H + SET_B + 0x10, 4, true)};
            ds_dispatch d{};
            d.size = sizeof d;
            d.program = BOUND_PROGRAM;
            d.slots = slots;
            d.n_slots = 4;
            ds_slot_plan plans[4];
            ds_prepared p;
            std::memset(&p, 0, sizeof p);
            p.size = sizeof p;
            p.bindings = plans;
            p.bindings_capacity = 4;
            check(fr.engine_call([&] { return ds_engine_prepare(engine, &d, &p); }), "prepare (bound)");
            fr.engine_dispatches++;
            if (p.mode != DS_MODE_BOUND || p.n_bindings != 4) fr.fail("the bound pass is not bound as two sets");
            // What the CPU says the pass will leave, from the same memory.
            std::vector<std::pair<uint64_t, uint32_t>> expect;
            for (uint32_t l = 0; l < 8; l++) {
                uint32_t v = (emu.heap_word(SET_A + 0xe400 + 4 * l) ^ emu.heap_word(SET_A + 4 * l)) + 0x305 + f;
                expect.push_back({SET_A + 0xe400 + 4 * l, v});
            }
            for (uint32_t l = 0; l < 64; l++)
                expect.push_back({SET_A + 4 * (64 + l), emu.heap_word(SET_A + 4 * (64 + l)) * 2 + l});
            uint32_t sum = 0;
            for (uint32_t k = 0; k < 37; k++) sum += emu.heap_word(SET_B + 4 * k);
            expect.push_back({SET_B + 0x10, sum + f});
            const uint32_t untouched_a = emu.heap_word(SET_A + 4 * 200), untouched_b = emu.heap_word(SET_B + 0x14);

            // One buffer a holder (and one for its masks): uploaded from the guest's pages, or with
            // --import-holders the guest's pages themselves, imported zero-copy (the descriptor then
            // starts `skew` bytes into the import, where the holder's first byte lies).
            Buffer data[4], masks[4];
            uint64_t skew[4] = {0, 0, 0, 0};
            std::vector<VkDescriptorBufferInfo> infos(8);
            const uint64_t align = vk.props.limits.minStorageBufferOffsetAlignment;
            for (uint32_t i = 0; i < p.n_bindings; i++) {
                const ds_slot_plan &b = plans[i];
                if (b.slot != b.holder || b.slot >= 4) continue;
                uint64_t bytes = (b.buffer_end - b.buffer_start + 3) & ~3ull;
                masks[b.slot].make(vk, bytes, false);
                uint64_t a = vk.import_alignment;
                uint64_t first = b.buffer_start & ~(a - 1), last = (b.buffer_end + a - 1) & ~(a - 1);
                if (import_holders && (b.buffer_start - first) % align == 0) {
                    // The device writes these pages: the write-watch's guards over them go first
                    // (a device store to a guarded page kills the process on lavapipe).
                    for (uint64_t g = first; g < last; g += PAGE) {
                        PageState &ps = emu.pages[(g - H) / PAGE];
                        if (!ps.guarded) continue;
                        if (mprotect(emu.host_of(g), PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect (unguard)");
                        ps.guarded = false;
                        ds_event hp = event(DS_EVENT_HOST_PROTECT, g, g + PAGE);
                        hp.protection = 2;
                        apply(engine, hp, "host protect (unguard)");
                    }
                    data[b.slot].import(vk, emu.host_of(first), last - first);
                    skew[b.slot] = b.buffer_start - first;
                } else {
                    data[b.slot].make(vk, bytes, false);
                    std::memcpy(data[b.slot].ptr, emu.host_of(b.buffer_start), b.buffer_end - b.buffer_start);
                }
            }
            bool sane = true;
            for (uint32_t i = 0; i < p.n_bindings; i++) {
                const ds_slot_plan &b = plans[i];
                if (b.slot >= 4 || b.holder >= 4 || data[b.holder].buffer == VK_NULL_HANDLE) {
                    sane = false;
                    continue;
                }
                infos[b.slot] = {data[b.holder].buffer, skew[b.holder] + b.offset_bytes, b.range_bytes};
                infos[4 + b.slot] = {masks[b.holder].buffer, b.mask_offset_bytes, b.range_bytes};
            }
            if (!sane) die("prepare's bindings are not the four slots over their holders");
            fr.notes.push_back(format("bound: slot 1 at 0x%llx of holder %u, slot 3 at 0x%llx of holder %u",
                                      static_cast<unsigned long long>(plans[1].offset_bytes), plans[1].holder,
                                      static_cast<unsigned long long>(plans[3].offset_bytes), plans[3].holder));
            VkWriteDescriptorSet w[2]{};
            for (int k = 0; k < 2; k++) {
                w[k].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
                w[k].dstSet = bound.set;
                w[k].dstBinding = static_cast<uint32_t>(k);
                w[k].descriptorCount = 4;
                w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
                w[k].pBufferInfo = infos.data() + 4 * k;
            }
            vkUpdateDescriptorSets(vk.device, 2, w, 0, nullptr);
            uint32_t push[32] = {f};
            bound.run(vk, push, 1);
            fr.dispatches++;
            ds_holder_run holders[4];
            uint32_t n_holders = 0;
            for (uint32_t i = 0; i < p.n_bindings; i++) {
                const ds_slot_plan &b = plans[i];
                if (b.slot != b.holder) continue;
                if (data[b.slot].imported) {
                    // Left out of the completion: the stores are in the guest's pages already. The
                    // write-watch learns of them from the masks (O9), as it would from a hand-off,
                    // and tells the engine (a host write of those pages: D824 notes, D720 distrusts).
                    uint64_t told = ~0ull;
                    for (uint64_t w = 0; 4 * w < b.buffer_end - b.buffer_start; w++) {
                        if (masks[b.slot].word(w) == 0) continue;
                        uint64_t g = (b.buffer_start + 4 * w) & ~(PAGE - 1);
                        emu.pages[(g - H) / PAGE].written |= 1u << CAUSE_BOUND;
                        emu.distrust(g, g + PAGE, CAUSE_BOUND);
                        if (g == told) continue;
                        told = g;
                        ds_event wr = event(DS_EVENT_WRITE, g, g);
                        wr.n_bytes = PAGE;
                        apply(engine, wr, "write (bound stores)");
                    }
                    continue;
                }
                holders[n_holders].slot = b.slot;
                holders[n_holders].reserved = 0;
                holders[n_holders].data = data[b.slot].ptr;
                holders[n_holders].data_bytes = b.buffer_end - b.buffer_start;
                holders[n_holders].masks = masks[b.slot].ptr;
                holders[n_holders].mask_bytes = b.buffer_end - b.buffer_start;
                n_holders++;
            }
            ds_completion c;
            std::memset(&c, 0, sizeof c);
            c.size = sizeof c;
            c.index = p.index;
            c.n_holders = n_holders;
            c.holders = holders;
            check(fr.engine_call([&] { return ds_engine_complete(engine, &c); }), "complete (bound)");
            for (uint32_t i = 0; i < 4; i++) {
                data[i].destroy(vk);
                masks[i].destroy(vk);
            }
            for (auto &[off, v] : expect)
                if (emu.heap_word(off) != v)
                    fr.fail(format("bound: guest %s holds 0x%x, the CPU computed 0x%x", hex(H + off).c_str(),
                                   emu.heap_word(off), v));
            if (emu.heap_word(SET_A + 4 * 200) != untouched_a || emu.heap_word(SET_B + 0x14) != untouched_b)
                fr.fail("bound: a word no store wrote changed (O8 writes back only the masked words)");
        }

        // --- a pass O7 refuses: a member 0x24 into its holder -----------------------------------
        {
            ds_slot slots[] = {slot(0, H + O7_BASE, 0x100, true), slot(1, H + O7_BASE + 0x24, 0x10, true)};
            ds_dispatch d{};
            d.size = sizeof d;
            d.program = O7_PROGRAM;
            d.slots = slots;
            d.n_slots = 2;
            ds_slot_plan plans[2];
            ds_prepared p;
            std::memset(&p, 0, sizeof p);
            p.size = sizeof p;
            p.bindings = plans;
            p.bindings_capacity = 2;
            check(fr.engine_call([&] { return ds_engine_prepare(engine, &d, &p); }), "prepare (O7)");
            fr.engine_dispatches++;
            if (p.mode != DS_MODE_REFUSED || p.n_bindings != 0) fr.fail("the misaligned member was not refused");
            ds_completion c;
            std::memset(&c, 0, sizeof c);
            c.size = sizeof c;
            c.index = p.index;
            check(fr.engine_call([&] { return ds_engine_complete(engine, &c); }), "complete (O7)");
            fr.refusals += p.n_refusals;
            const char *json = nullptr;
            check(ds_engine_report_json(engine, &json, nullptr), "report");
            std::string s = json ? json : "";
            if (s.find("\"O7\"") == std::string::npos) fr.fail("the refusal does not name O7");
        }

        // --- the device-addressed pass -------------------------------------------------------------
        {
            ds_dispatch d{};
            d.size = sizeof d;
            d.program = DEVICE_PROGRAM;
            d.reasons = 1 | 2;  // D753, D758
            ds_slot_plan plans[1];
            ds_prepared p;
            std::memset(&p, 0, sizeof p);
            p.size = sizeof p;
            p.bindings = plans;
            p.bindings_capacity = 1;
            check(fr.engine_call([&] { return ds_engine_prepare(engine, &d, &p); }), "prepare (device-addressed)");
            fr.engine_dispatches++;
            if (p.mode != DS_MODE_DEVICE_ADDRESSED || p.table_address == 0 || p.marks_address == 0)
                fr.fail("the pass is not device-addressed with a table and marks");
            // C3: the deferred copy is in guest memory now.
            for (uint32_t i = 0; i < 16; i++)
                if (emu.heap_word(COPY_PAGE + 4 * i) != copy[i]) fr.fail("C3: the deferred copy is not in guest memory");
            // The CPU's reference, from the same memory.
            uint32_t expect[LANES + 4];
            for (uint32_t g = 0; g < LANES; g++) {
                uint32_t k = g & 7;
                uint64_t bottom = (static_cast<uint64_t>(emu.heap_word(ROOT + 16 * k + 4)) << 32) |
                                  emu.heap_word(ROOT + 16 * k);
                uint32_t count = emu.heap_word(ROOT + 16 * k + 8), bias = emu.heap_word(ROOT + 16 * k + 12);
                uint32_t v = emu.heap_word(bottom - H + 4 * (g % count));
                expect[g] = (v + bias) * 3 + f;
            }
            for (uint32_t g = 0; g < 4; g++) expect[LANES + g] = 0 + 1;  // the shared load escapes: zero
            uint32_t ro_before[4], shared_before[4];
            std::memcpy(ro_before, emu.ro.host, 16);
            std::memcpy(shared_before, emu.shared.alias + 4 * 64, 16);
            std::memset(log.ptr, 0xff, log.bytes);

            uint32_t push[32];
            for (int w = 0; w < 32; w++) push[w] = (p.push_mask >> w) & 1 ? p.push[w] : 0;
            uint64_t words[4] = {H + ROOT, H + OUT, emu.ro.guest, emu.shared.guest};
            for (int w = 0; w < 4; w++) {
                push[2 * w] = static_cast<uint32_t>(words[w]);
                push[2 * w + 1] = static_cast<uint32_t>(words[w] >> 32);
            }
            push[8] = f;
            push[9] = static_cast<uint32_t>(__builtin_ctzll(p.chunk_bytes));
            if (header) {
                std::memcpy(helper_header.ptr, &p.push[16], 64);
                // Words 16-29 are the program's own again: garbage here, to show the helper reads
                // none of them.
                for (int w = 16; w < 30; w++) push[w] = 0xdeadbeefu;
                push[30] = static_cast<uint32_t>(helper_header.address);
                push[31] = static_cast<uint32_t>(helper_header.address >> 32);
            }
            if (instrumented) {
                check(ds_engine_instrumentation_init(engine, SITES, GRID_W, GRID_H, CANARY,
                                                     reinterpret_cast<uint32_t *>(instr.ptr), instr_words,
                                                     &instr_words),
                      "ds_engine_instrumentation_init");
                push[DS_PUSH_INSTRUMENT] = static_cast<uint32_t>(instr.address);
                push[DS_PUSH_INSTRUMENT + 1] = static_cast<uint32_t>(instr.address >> 32);
            }
            device.run(vk, push, LANES / 64);
            fr.dispatches++;
            // The device's stores are in the host's own pages already, before complete: no copy back.
            for (uint32_t g = 0; g < LANES + 4; g++)
                if (emu.heap_word(OUT + 4 * g) != expect[g])
                    fr.fail(format("device: out[%u] is 0x%x in the host's page, the CPU computed 0x%x", g,
                                   emu.heap_word(OUT + 4 * g), expect[g]));
            for (uint32_t g = 0; g < 4; g++) {
                uint32_t got, want = ro_locked ? ro_before[g] : (expect[g] ^ 0xabcd0000u);
                std::memcpy(&got, emu.ro.host + 4 * g, 4);
                if (got != want)
                    fr.fail(format("device: read-only region word %u is 0x%x, want 0x%x (%s)", g, got, want,
                                   ro_locked ? "the store must escape" : "the store must land"));
                std::memcpy(&got, emu.shared.alias + 4 * (64 + g), 4);
                if (got != shared_before[g]) fr.fail("device: a store reached the shared region");
            }
            // The escapes the device logged, against the ones predicted.
            const uint32_t predicted = (ro_locked ? 1u : 0u) | 2u | 4u;
            for (uint32_t g = 0; g < 4; g++) {
                uint32_t got = log.word(g);
                fr.escapes += __builtin_popcount(got);
                fr.escapes_predicted += __builtin_popcount(predicted);
                if (got != predicted)
                    fr.fail(format("device: lane %u logged misses 0x%x, predicted 0x%x", g, got, predicted));
            }
            if (instrumented) {
                uint32_t n = instr.word(16);
                std::string sites;
                uint32_t logged = 0;
                for (uint32_t i = 0; i < n && i < ESC_CAP; i++) {
                    uint32_t at = ESCAPES_AT + 8 * i;
                    uint64_t addr = (static_cast<uint64_t>(instr.word(at + 4)) << 32) | instr.word(at + 3);
                    uint32_t site = instr.word(at + 2);
                    bool ok = (site == 5 && ro_locked && addr >= emu.ro.guest && addr < emu.ro.guest + 16) ||
                              ((site == 6 || site == 8) && addr >= emu.shared.guest &&
                               addr < emu.shared.guest + emu.shared.bytes);
                    if (!ok) fr.fail(format("instrumented: an escape no one predicted: site %u at %s", site, hex(addr).c_str()));
                    logged++;
                }
                if (logged != fr.escapes_predicted)
                    fr.fail(format("instrumented: %u escapes logged, %u predicted", logged, fr.escapes_predicted));
                fr.notes.push_back(format("instrumented: %u escapes in the device's log, canary escapes %u", n,
                                          instr.word(18)));
            }
            ds_completion c;
            std::memset(&c, 0, sizeof c);
            c.size = sizeof c;
            c.index = p.index;
            // The instrumented buffer goes to complete as the device left it, with the sites: the
            // report's section then has every site's counts and each escape with its pc and class.
            ds_instrumentation in;
            std::memset(&in, 0, sizeof in);
            if (instrumented) {
                in.size = sizeof in;
                in.n_sites = SITES;
                in.sites = sites;
                in.width = GRID_W;
                in.height = GRID_H;
                in.words = reinterpret_cast<const uint32_t *>(instr.ptr);
                in.n_words = instr_words;
                c.instrumentation = &in;
            }
            check(fr.engine_call([&] { return ds_engine_complete(engine, &c); }), "complete (device-addressed)");
            const char *json = nullptr;
            check(ds_engine_report_json(engine, &json, nullptr), "report");
            if (print_reports) std::printf("report: %s\n", json ? json : "");
            if (instrumented) {
                // The report's section names each escape by its site's pc: the shared region's
                // load (site 6) escapes every frame; the listing shows that instruction.
                std::string r = json ? json : "";
                std::string pc6 = "\"pc\":\"" + hex(sites[6].pc) + "\"";
                if (r.find("\"instrumented\"") == std::string::npos || r.find(pc6) == std::string::npos)
                    fr.fail("instrumented: the report's section does not name site 6's pc " + hex(sites[6].pc));
            }
            std::string left = left_out_names(json);
            fr.notes.push_back("left out by name: " + left);
            if (left.find("not-private") == std::string::npos && left.find("NotPrivate") == std::string::npos &&
                left.find("private") == std::string::npos)
                fr.fail("the shared region is not left out by name");
            // C2: the hand-off named the output's chunk, and the read-only page's when it was writable.
            auto handed = [&](uint64_t guest) {
                for (auto &[s, e] : emu.handed_off)
                    if (guest >= s && guest < e) return true;
                return false;
            };
            if (!handed(H + OUT)) fr.fail("C2: the output's chunk was not handed off");
            if (handed(emu.ro.guest) == ro_locked) fr.fail("C2: the read-only page's hand-off is wrong");
            if (handed(emu.shared.guest)) fr.fail("C2: the shared region was handed off");
        }

        // --- the frame's write-watch and textures ------------------------------------------------
        for (Texture &t : emu.textures) {
            int want = -1;
            if (std::strcmp(t.name, "out-tex") == 0) want = CAUSE_HAND_OFF;
            if (std::strcmp(t.name, "cpu-tex") == 0) want = CAUSE_CPU;
            if (std::strcmp(t.name, "holder-tex") == 0) want = import_holders ? CAUSE_BOUND : CAUSE_WRITE;
            if (t.dropped_by != want)
                fr.fail(format("texture %s: dropped by %s, want %s", t.name,
                               t.dropped_by < 0 ? "nothing" : cause_name(t.dropped_by),
                               want < 0 ? "nothing" : cause_name(want)));
        }
        if (emu.unexpected_faults) fr.fail("a SIGSEGV outside the write-watch");
        std::string dropped;
        for (Texture &t : emu.textures)
            if (t.dropped_by >= 0) dropped += std::string(dropped.empty() ? "" : ",") + t.name + ":" + cause_name(t.dropped_by);
        for (uint64_t page : toggled) {
            PageState &p = emu.pages[page];
            if (!p.guarded) continue;  // released by the engine before a pass (M2)
            if (mprotect(emu.heap.host + page * PAGE, PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect (release)");
            p.guarded = false;
            apply(engine, event(DS_EVENT_UNGUARD, H + page * PAGE, H + (page + 1) * PAGE), "unguard (toggle)");
        }
        rebuild_textures(engine, next_target);
        guard_textures(engine);
        apply(engine, event(DS_EVENT_RETIRE, 0, 0), "retire");

        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        uint8_t attached = 0;
        check(ds_engine_attached(engine, &attached), "attached");
        const double engine_us = fr.engine_dispatches ? fr.engine_us / fr.engine_dispatches : 0;
        if (frame > 0) {
            frame_ms.push_back(ms);
            dispatch_us.push_back(engine_us);
        }
        std::printf("frame %ld: time_ms=%.2f engine_us=%.1f dispatches=%u refusals=%u escapes=%u predicted=%u hand_offs=%u "
                    "pages_written=%u (cpu %u, host-write %u, hand-off %u, m2 %u, bound-store %u) committed=%u "
                    "textures_dropped=%s checks=%s%s\n",
                    frame, ms, engine_us, fr.dispatches, fr.refusals, fr.escapes, fr.escapes_predicted, emu.hand_offs,
                    emu.pages_written(-1), emu.pages_written(CAUSE_CPU), emu.pages_written(CAUSE_WRITE),
                    emu.pages_written(CAUSE_HAND_OFF), emu.pages_written(CAUSE_M2), emu.pages_written(CAUSE_BOUND),
                    emu.pages_committed,
                    dropped.empty() ? "none" : dropped.c_str(), fr.failures ? "FAILED" : "ok",
                    attached ? " (debugger attached)" : "");
        for (auto &n : fr.notes) std::printf("  %s\n", n.c_str());
        failures_total += fr.failures;
        // With a debugger free to attach, a game's pace: a frame every 16 ms.
        if (!listen.empty()) std::this_thread::sleep_until(t0 + std::chrono::milliseconds(16));
    }

    check(ds_engine_destroy(engine), "ds_engine_destroy");
    log.destroy(vk);
    instr.destroy(vk);
    if (header) helper_header.destroy(vk);
    bound.destroy(vk);
    device.destroy(vk);
    vkDestroyDescriptorPool(vk.device, dpool, nullptr);
    vk.close();
    uint32_t messages = g_validation_messages.load();
    // The figures of the run: medians over every frame but the first, and the process's peak
    // resident memory (VmHWM: the guest's pages, the driver's share and dispatchscope's).
    auto median = [](std::vector<double> v) {
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    long hwm_kib = 0;
    {
        std::ifstream status("/proc/self/status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind("VmHWM:", 0) == 0) hwm_kib = std::strtol(line.c_str() + 6, nullptr, 10);
    }
    std::printf("summary: frames=%zu frame_ms_median=%.3f engine_us_per_dispatch_median=%.2f peak_rss_mib=%.1f guest_mib=%llu toggles=%u\n",
                frame_ms.size(), median(frame_ms), median(dispatch_us), hwm_kib / 1024.0,
                static_cast<unsigned long long>(guest_mib), toggles);
    std::printf("validation messages: %u\n", messages);
    std::printf("%ld failures\n", failures_total);
    return failures_total || messages ? 1 : 0;
}
