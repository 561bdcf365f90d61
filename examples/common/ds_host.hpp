// What the two C++ hosts (examples/cpp-target, examples/emulator-host) share: of their own Vulkan
// setup, the first Vulkan 1.2 device with a compute queue, the device created with what
// dispatchscope's C ABI checks it was given (bufferDeviceAddress, shaderInt64, dynamically
// indexed arrays of storage buffers, VK_EXT_external_memory_host), and the handles the C ABI is
// told of; of the C ABI, a resolved slot in struct form. Each host keeps its instance (the emulator
// host's with layers and a messenger) and what it builds on the device.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <vector>

#include "dispatchscope.h"

namespace ds_example {

// A physical device with a compute queue family.
struct ComputeDevice {
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    uint32_t family = 0;
    VkPhysicalDeviceProperties props{};
};

// The first device of `instance` with Vulkan 1.2 and a compute queue family (`physical` is
// VK_NULL_HANDLE when there is none).
inline ComputeDevice find_compute_device(VkInstance instance) {
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance, &n, nullptr);
    std::vector<VkPhysicalDevice> devices(n);
    vkEnumeratePhysicalDevices(instance, &n, devices.data());
    for (VkPhysicalDevice pd : devices) {
        ComputeDevice found;
        vkGetPhysicalDeviceProperties(pd, &found.props);
        if (found.props.apiVersion < VK_API_VERSION_1_2) continue;
        uint32_t nq = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
        std::vector<VkQueueFamilyProperties> families(nq);
        vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, families.data());
        for (uint32_t f = 0; f < nq; f++) {
            if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                found.physical = pd;
                found.family = f;
                return found;
            }
        }
    }
    return ComputeDevice{};
}

// Creates the device on `d` with one queue of its compute family and what dispatchscope needs,
// filling `v12` and `features` (the caller keeps them: dispatchscope is told what vkCreateDevice
// was given) and enabling the `n_extensions` extensions in `extensions` (the first
// VK_EXT_external_memory_host). A feature struct the caller chains at `v12.pNext` (the emulator
// host's VkPhysicalDeviceFaultFeaturesEXT) is enabled with them.
inline VkResult create_compute_device(const ComputeDevice &d, VkPhysicalDeviceVulkan12Features &v12,
                                      VkPhysicalDeviceFeatures2 &features, const char *const *extensions,
                                      VkDevice *device, uint32_t n_extensions = 1) {
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = d.family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    v12.bufferDeviceAddress = VK_TRUE;
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &v12;
    features.features.shaderInt64 = VK_TRUE;
    features.features.shaderStorageBufferArrayDynamicIndexing = VK_TRUE;
    VkDeviceCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.pNext = &features;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = n_extensions;
    dci.ppEnabledExtensionNames = extensions;
    return vkCreateDevice(d.physical, &dci, nullptr, device);
}

// What `ds_engine_create_vulkan` is told of a host's device: `vk` has the members both hosts name
// alike (instance, physical, device, queue, family, extensions, features), and outlives the call;
// `n_extensions` of its extensions were enabled.
template <typename Device>
inline ds_vulkan_device vulkan_handles(const Device &vk, size_t n_extensions = 1) {
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
    handles.n_enabled_extensions = n_extensions;
    handles.enabled_features = &vk.features;
    return handles;
}

// A resolved slot of `size` bytes at `base`, read-only or written, its base from its descriptor.
inline ds_slot slot(uint32_t index, uint64_t base, uint64_t size, bool written) {
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

}  // namespace ds_example
