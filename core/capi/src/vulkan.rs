//! The emulator's own Vulkan device: an engine whose backend runs on the instance, device and
//! queue the emulator created, instead of opening its own.

use std::ffi::{CStr, c_char, c_void};

use ash::vk;
use ash::vk::Handle;
use dispatchscope_vk::{EnabledFeatures, HostDevice, VulkanBackend};

use crate::engine::{ds_engine, insert_engine};
use crate::ffi::{Failure, boundary, check_size, ds_status, null, slice_arg};

/// The Vulkan objects an emulator created and lends to an engine, which uses them until it is
/// destroyed and never destroys them. The device must have been created with what D964 needs
/// enabled: Vulkan 1.2, `VK_EXT_external_memory_host`, `bufferDeviceAddress`, `shaderInt64` and
/// `shaderStorageBufferArrayDynamicIndexing`; what is missing is refused by name.
///
/// The engine submits to `queue` inside its dispatch calls: the emulator must not submit to the
/// same queue from another thread during them (Vulkan's external synchronisation of queues).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_vulkan_device {
    /// `sizeof(ds_vulkan_device)`.
    pub size: u32,
    /// The `PFN_vkGetInstanceProcAddr` of the loader (or driver) the emulator used.
    pub get_instance_proc_addr: *const c_void,
    /// The `VkInstance`.
    pub instance: *mut c_void,
    /// The `VkPhysicalDevice` the device was made from.
    pub physical_device: *mut c_void,
    /// The `VkDevice`.
    pub device: *mut c_void,
    /// A `VkQueue` of `queue_family_index` that can run compute work.
    pub queue: *mut c_void,
    /// The queue's family.
    pub queue_family_index: u32,
    /// The `apiVersion` the instance was created with (`VK_API_VERSION_1_2` or later).
    pub api_version: u32,
    /// The device extensions enabled at `vkCreateDevice`, `n_enabled_extensions` of them.
    pub enabled_extensions: *const *const c_char,
    /// How many.
    pub n_enabled_extensions: usize,
    /// The `VkPhysicalDeviceFeatures2` chain passed to `vkCreateDevice` (its `pNext`), so the
    /// engine can check what was enabled; null if the device was made with `pEnabledFeatures`
    /// only, which cannot enable `bufferDeviceAddress` (refused).
    pub enabled_features: *const c_void,
}

/// Reads what `chain` (a `VkPhysicalDeviceFeatures2` and its `pNext` chain) enables.
///
/// # Safety
/// `chain` must be null or a valid `VkPhysicalDeviceFeatures2` whose chain is valid.
unsafe fn enabled_features(chain: *const c_void) -> EnabledFeatures {
    let mut found = EnabledFeatures::default();
    let mut next = chain.cast::<vk::BaseInStructure<'_>>();
    while !next.is_null() {
        // SAFETY: every structure of a valid chain starts with sType and pNext, and is of the type
        // its sType names.
        unsafe {
            match (*next).s_type {
                vk::StructureType::PHYSICAL_DEVICE_FEATURES_2 => {
                    let f = &*next.cast::<vk::PhysicalDeviceFeatures2<'_>>();
                    found.shader_int64 |= f.features.shader_int64 == vk::TRUE;
                    found.shader_storage_buffer_array_dynamic_indexing |=
                        f.features.shader_storage_buffer_array_dynamic_indexing == vk::TRUE;
                }
                vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
                    let f = &*next.cast::<vk::PhysicalDeviceVulkan12Features<'_>>();
                    found.buffer_device_address |= f.buffer_device_address == vk::TRUE;
                }
                vk::StructureType::PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES => {
                    let f = &*next.cast::<vk::PhysicalDeviceBufferDeviceAddressFeatures<'_>>();
                    found.buffer_device_address |= f.buffer_device_address == vk::TRUE;
                }
                _ => {}
            }
            next = (*next).p_next;
        }
    }
    found
}

/// Creates an engine whose backend runs on the emulator's own Vulkan device (see
/// [`ds_vulkan_device`]) and writes its handle to `*out`. The planner uses the device's own
/// storage-buffer limits (O7). A device without what the backend needs is `DS_ENGINE`, naming
/// what it lacks.
///
/// # Safety
/// `device` must be null (an error) or point at a `ds_vulkan_device` of valid, live Vulkan
/// handles that outlive the engine; `out` must be null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_create_vulkan(
    device: *const ds_vulkan_device,
    out: *mut ds_engine,
) -> ds_status {
    boundary(|| {
        // SAFETY: the caller's promises, passed on.
        let backend = unsafe { backend_of(device) }?;
        insert_engine(backend, out)
    })
}

/// A backend on the emulator's own device, every handle and extension checked.
///
/// # Safety
/// As [`ds_engine_create_vulkan`] for `device`.
pub(crate) unsafe fn backend_of(device: *const ds_vulkan_device) -> Result<VulkanBackend, Failure> {
    if device.is_null() {
        return Err(null("device"));
    }
    // SAFETY: non-null; every version of the struct starts with its size.
    let size = unsafe { (*device).size };
    check_size::<ds_vulkan_device>("ds_vulkan_device", "ds_vulkan_device", size)?;
    // SAFETY: the size matches, and the caller promises it points at a `ds_vulkan_device`.
    let d = unsafe { *device };
    if d.get_instance_proc_addr.is_null() {
        return Err(null("device.get_instance_proc_addr"));
    }
    for (what, p) in [
        ("device.instance", d.instance),
        ("device.physical_device", d.physical_device),
        ("device.device", d.device),
        ("device.queue", d.queue),
    ] {
        if p.is_null() {
            return Err(null(what));
        }
    }
    // SAFETY: the caller promises `n_enabled_extensions` NUL-terminated names.
    let names = unsafe {
        slice_arg(
            d.enabled_extensions,
            d.n_enabled_extensions,
            "device.enabled_extensions",
        )
    }?;
    let mut enabled_extensions = Vec::with_capacity(names.len());
    for (i, &n) in names.iter().enumerate() {
        if n.is_null() {
            return Err(null(&format!("device.enabled_extensions[{i}]")));
        }
        // SAFETY: non-null and NUL-terminated, as the caller promises.
        enabled_extensions.push(unsafe { CStr::from_ptr(n) }.to_owned());
    }
    // SAFETY: the caller promises a valid chain or null.
    let features = unsafe { enabled_features(d.enabled_features) };
    // SAFETY: a PFN_vkGetInstanceProcAddr is a function pointer of exactly this type.
    let gipa: vk::PFN_vkGetInstanceProcAddr = unsafe {
        std::mem::transmute::<*const c_void, vk::PFN_vkGetInstanceProcAddr>(
            d.get_instance_proc_addr,
        )
    };
    let host = HostDevice {
        get_instance_proc_addr: gipa,
        instance: vk::Instance::from_raw(d.instance as u64),
        physical_device: vk::PhysicalDevice::from_raw(d.physical_device as u64),
        device: vk::Device::from_raw(d.device as u64),
        queue: vk::Queue::from_raw(d.queue as u64),
        queue_family: d.queue_family_index,
        api_version: d.api_version,
        enabled_extensions,
        features,
    };
    // SAFETY: the caller promises live handles that outlive the engine.
    unsafe { VulkanBackend::on_host(&host) }.map_err(|e| Failure::new(ds_status::DS_ENGINE, e))
}
