//! A context over the host's own Vulkan objects: an emulator already owns the instance, device
//! and queue its dispatches run on, and lends them to the backend instead of the backend opening
//! its own ([`Context::from_host`]).

use std::ffi::CString;
use std::sync::{Arc, Mutex};

use ash::vk;

use super::{Context, ValidationLog};
use crate::pipeline::Pipeline;
use crate::{VkError, VulkanBackend, spirv};

/// What the host enabled when it created its device, as far as the backend needs to know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnabledFeatures {
    /// `shaderInt64`.
    pub shader_int64: bool,
    /// `shaderStorageBufferArrayDynamicIndexing`.
    pub shader_storage_buffer_array_dynamic_indexing: bool,
    /// `bufferDeviceAddress` (Vulkan 1.2 or VK_KHR_buffer_device_address).
    pub buffer_device_address: bool,
}

/// The host's Vulkan objects, lent to a context that never destroys them.
#[derive(Clone, Debug)]
pub struct HostDevice {
    /// The loader's (or driver's) `vkGetInstanceProcAddr`.
    pub get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    /// The instance.
    pub instance: vk::Instance,
    /// The physical device the device was made from.
    pub physical_device: vk::PhysicalDevice,
    /// The device.
    pub device: vk::Device,
    /// A queue of `queue_family` that can run compute work.
    pub queue: vk::Queue,
    /// The queue's family.
    pub queue_family: u32,
    /// The `apiVersion` the instance was created with.
    pub api_version: u32,
    /// The device extensions enabled at creation.
    pub enabled_extensions: Vec<CString>,
    /// The features enabled at creation.
    pub features: EnabledFeatures,
}

impl Context {
    /// A context over the host's instance, device and queue. Checks that the physical device has
    /// and the device was created with what the backend needs (Vulkan 1.2 on both sides,
    /// VK_EXT_external_memory_host, bufferDeviceAddress, shaderInt64,
    /// shaderStorageBufferArrayDynamicIndexing, a compute queue), and refuses by name what is
    /// missing ([`VkError::HostDeviceLacks`]).
    ///
    /// # Safety
    /// The handles must be valid, belong together (the device made from the physical device of
    /// the instance, the queue from the device's family `queue_family`), and outlive the context;
    /// the host must not use `queue` from another thread while the backend submits to it.
    pub unsafe fn from_host(host: &HostDevice) -> Result<Arc<Self>, VkError> {
        let static_fn = ash::StaticFn {
            get_instance_proc_addr: host.get_instance_proc_addr,
        };
        // SAFETY: `get_instance_proc_addr` is the host's loader entry point, valid for the
        // process; ash loads the global functions through it.
        let entry = unsafe { ash::Entry::from_static_fn(static_fn) };
        // SAFETY: the instance is live and was made through this loader, as the caller promises.
        let instance = unsafe { ash::Instance::load(entry.static_fn(), host.instance) };
        let mut lacks = Vec::new();
        if host.api_version < vk::API_VERSION_1_2 {
            lacks.push(format!(
                "an instance made for Vulkan 1.2 (its apiVersion is {}.{})",
                vk::api_version_major(host.api_version),
                vk::api_version_minor(host.api_version)
            ));
        }
        let info = match Self::inspect(&instance, host.physical_device)? {
            Ok((_, info)) => Some(info),
            Err(why) => {
                lacks.push(format!("a physical device with what D964 needs ({why})"));
                None
            }
        };
        // SAFETY: a plain query of the physical device.
        let families =
            unsafe { instance.get_physical_device_queue_family_properties(host.physical_device) };
        if !families
            .get(host.queue_family as usize)
            .is_some_and(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        {
            lacks.push(format!(
                "a compute queue (family {} is not one)",
                host.queue_family
            ));
        }
        let enabled =
            |name: &std::ffi::CStr| host.enabled_extensions.iter().any(|e| e.as_c_str() == name);
        if !enabled(ash::ext::external_memory_host::NAME) {
            lacks.push("VK_EXT_external_memory_host enabled on the device".to_owned());
        }
        let f = host.features;
        for (on, name) in [
            (f.buffer_device_address, "bufferDeviceAddress"),
            (f.shader_int64, "shaderInt64"),
            (
                f.shader_storage_buffer_array_dynamic_indexing,
                "shaderStorageBufferArrayDynamicIndexing",
            ),
        ] {
            if !on {
                lacks.push(format!("{name} enabled on the device"));
            }
        }
        let Some(mut info) = info.filter(|_| lacks.is_empty()) else {
            return Err(VkError::HostDeviceLacks {
                lacks: lacks.join("; "),
            });
        };
        // What the host enabled is all that may be used: it does not say whether it enabled
        // shaderBufferInt64Atomics, so no module made for this context takes it.
        info.buffer_int64_atomics = false;
        // The family the host chose, whose timestamps are the ones this queue has.
        if let Some(family) = families.get(host.queue_family as usize) {
            info.timestamp_valid_bits = family.timestamp_valid_bits;
        }
        // SAFETY: the device is live and was made from this instance, as the caller promises.
        let device = unsafe { ash::Device::load(instance.fp_v1_0(), host.device) };
        let host_import = ash::ext::external_memory_host::Device::new(&instance, &device);
        let mut ctx = Context {
            _entry: entry,
            instance,
            messenger: None,
            log: Arc::new(ValidationLog::default()),
            device,
            host_import,
            pipeline_executables: None,
            queue: Mutex::new(host.queue),
            queue_family: host.queue_family,
            info,
            replay: Pipeline::null(),
            stage_table: false,
            owned: false,
        };
        let words = spirv::replay_module(ctx.info.slot_descriptors)?;
        ctx.replay = Pipeline::new(&ctx.device, &words, c"main", ctx.info.slot_descriptors)?;
        Ok(Arc::new(ctx))
    }
}

impl VulkanBackend {
    /// A backend on the host's own Vulkan objects ([`Context::from_host`]).
    ///
    /// # Safety
    /// As [`Context::from_host`].
    pub unsafe fn on_host(host: &HostDevice) -> Result<Self, VkError> {
        // SAFETY: the caller promises what from_host needs.
        Self::on(unsafe { Context::from_host(host) }?)
    }
}
