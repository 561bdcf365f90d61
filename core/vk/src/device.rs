//! The Vulkan context: the instance (optionally with the Khronos validation layer and a messenger
//! that counts every message), the physical device chosen for what D964 needs, the logical device,
//! its one queue, and the limits the planner reads (O7, M1).
//!
//! One [`Context`] may serve many [`crate::VulkanBackend`]s (each with its own imports, table and
//! command buffer); it never plans or runs a job itself. Pipelines, buffers and submissions made on
//! it live in `pipeline`, `buffer` and `commands`.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;

mod from_host;
pub use from_host::{EnabledFeatures, HostDevice};

use crate::pipeline::Pipeline;
use crate::spirv;
use crate::{VkError, check};
use dispatchscope_core::input::DeviceLimits;

/// How to open a Vulkan context.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Enable VK_LAYER_KHRONOS_validation and count its messages ([`Context::validation_messages`]).
    /// An error if the layer is not installed.
    pub validation: bool,
    /// Place the chunk table in device-local memory that is not host-visible and upload it through a
    /// staging copy, as a discrete GPU needs, even where device-local memory is host-visible
    /// (lavapipe): so that path is tested where it would not otherwise run.
    pub stage_table: bool,
}

/// Validation messages, counted by the debug-utils messenger.
#[derive(Debug, Default)]
struct ValidationLog {
    count: AtomicU64,
    first: Mutex<Vec<String>>,
}

/// The most messages kept as text (all are counted).
const KEPT_MESSAGES: usize = 32;

/// What the validation messenger reports (warnings and errors of every type) and where: to
/// [`on_message`], with `log` as its user data. Used twice: chained into the instance's creation,
/// so that instance creation is reported too, and for the messenger itself.
fn messenger_info(log: &Arc<ValidationLog>) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message))
        .user_data(Arc::as_ptr(log) as *mut c_void)
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: `user` is the pointer of the Arc<ValidationLog> the context keeps alive for as long as
    // the messenger (and the instance) exist; `data` and its message are valid for this call, as
    // the Vulkan specification guarantees for a messenger callback.
    let (log, text) = unsafe {
        let log = &*(user as *const ValidationLog);
        let text = if data.is_null() || (*data).p_message.is_null() {
            String::from("(no message)")
        } else {
            CStr::from_ptr((*data).p_message)
                .to_string_lossy()
                .into_owned()
        };
        (log, text)
    };
    log.count.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut first) = log.first.lock()
        && first.len() < KEPT_MESSAGES
    {
        first.push(format!("{severity:?} {types:?}: {text}"));
    }
    vk::FALSE
}

/// What the backend knows of its device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The device's name, as the driver gives it.
    pub name: String,
    /// `VkPhysicalDeviceProperties::vendorID` (0x10de NVIDIA, 0x1002 AMD, 0x10005 Mesa's
    /// software devices).
    pub vendor_id: u32,
    /// `VkPhysicalDeviceProperties::apiVersion`, as "major.minor.patch".
    pub api_version: String,
    /// minStorageBufferOffsetAlignment (O7).
    pub min_storage_buffer_offset_alignment: u64,
    /// maxStorageBufferRange.
    pub max_storage_buffer_range: u64,
    /// minImportedHostPointerAlignment (M1).
    pub min_imported_host_pointer_alignment: u64,
    /// maxMemoryAllocationSize: the largest import.
    pub max_memory_allocation_size: u64,
    /// Storage-buffer descriptors the replay binds per slot array (half the per-stage limit, at most
    /// [`spirv::REPLAY_MAX_SLOTS`]).
    pub slot_descriptors: u32,
    /// Memory types, with their property flags.
    pub memory_types: Vec<vk::MemoryPropertyFlags>,
    /// The heap of each memory type.
    pub memory_heaps: Vec<u32>,
    /// Nanoseconds per timestamp tick (`timestampPeriod`).
    pub timestamp_period_ns: f64,
    /// The compute queue's `timestampValidBits` (0: no timestamps).
    pub timestamp_valid_bits: u32,
    /// Lanes per subgroup.
    pub subgroup_size: u32,
    /// Whether compute shaders have subgroup ballots (reported; no helper variant needs them).
    pub subgroup_ballot: bool,
    /// Whether compute shaders have subgroup arithmetic (`OpGroupNonUniformIAdd`, `UMax`): the
    /// instrumented helper's counts reduced over a subgroup (`Shape::subgroup_counts`).
    pub subgroup_arithmetic: bool,
    /// Whether the device has `shaderBufferInt64Atomics` (enabled at creation where it does): the
    /// instrumented helper's 64-bit counters added with one 64-bit atomic (`Shape::wide_atomics`).
    pub buffer_int64_atomics: bool,
    /// Whether the driver reports a pipeline's statistics (VK_KHR_pipeline_executable_properties:
    /// registers, spills, …), for the bench's account of what a module costs.
    pub pipeline_statistics: bool,
}

/// An open Vulkan device with the replay pipeline built.
pub struct Context {
    _entry: ash::Entry,
    instance: ash::Instance,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    log: Arc<ValidationLog>,
    pub(crate) device: ash::Device,
    pub(crate) host_import: ash::ext::external_memory_host::Device,
    /// VK_KHR_pipeline_executable_properties, where the driver has it.
    #[cfg_attr(
        not(feature = "demo"),
        allow(
            dead_code,
            reason = "only the demo's pass reads its pipelines' statistics"
        )
    )]
    pub(crate) pipeline_executables: Option<ash::khr::pipeline_executable_properties::Device>,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) info: DeviceInfo,
    pub(crate) replay: Pipeline,
    pub(crate) stage_table: bool,
    /// Whether this context made the instance and device (and so destroys them), or borrows the
    /// host's ([`Context::from_host`]).
    owned: bool,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.info.name)
            .field("validation", &self.messenger.is_some())
            .finish_non_exhaustive()
    }
}

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

fn version(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

impl Context {
    /// Opens the first device that has what the backend needs: Vulkan 1.2, VK_EXT_external_memory_host,
    /// bufferDeviceAddress, shaderInt64, shaderStorageBufferArrayDynamicIndexing and a compute queue.
    /// A machine with none gives [`VkError::NoDevice`] or [`VkError::NoLoader`], naming what it saw.
    pub fn new(opts: &ContextOptions) -> Result<Arc<Self>, VkError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers; this is how every
        // Vulkan program starts, and ash keeps the library loaded for the Entry's lifetime.
        let entry =
            unsafe { ash::Entry::load() }.map_err(|e| VkError::NoLoader { why: e.to_string() })?;
        let log = Arc::new(ValidationLog::default());
        if opts.validation {
            // SAFETY: a plain query of the loader.
            let layers = check("vkEnumerateInstanceLayerProperties", unsafe {
                entry.enumerate_instance_layer_properties()
            })?;
            if !layers
                .iter()
                .any(|l| l.layer_name_as_c_str().ok() == Some(VALIDATION_LAYER))
            {
                return Err(VkError::NoValidationLayer);
            }
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"dispatchscope")
            .api_version(vk::API_VERSION_1_2);
        let layer_ptrs = [VALIDATION_LAYER.as_ptr()];
        let ext_ptrs = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut chained = messenger_info(&log);
        let mut create = vk::InstanceCreateInfo::default().application_info(&app);
        if opts.validation {
            create = create
                .enabled_layer_names(&layer_ptrs)
                .enabled_extension_names(&ext_ptrs)
                .push_next(&mut chained);
        }
        // SAFETY: the create info and everything it points at live until the call returns; the
        // messenger's user data (the log) outlives the instance, which the Context owns.
        let instance = match unsafe { entry.create_instance(&create, None) } {
            // The loader says this when it finds no driver at all.
            Err(e @ vk::Result::ERROR_INCOMPATIBLE_DRIVER) => {
                return Err(VkError::NoDevice {
                    seen: format!(
                        "none: the loader found no Vulkan 1.2 driver (vkCreateInstance: {})",
                        crate::describe(e).0
                    ),
                });
            }
            r => check("vkCreateInstance", r)?,
        };
        let messenger = if opts.validation {
            let du = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = messenger_info(&log);
            // SAFETY: the instance was made with VK_EXT_debug_utils; the log outlives the messenger.
            match check("vkCreateDebugUtilsMessengerEXT", unsafe {
                du.create_debug_utils_messenger(&info, None)
            }) {
                Ok(m) => Some((du, m)),
                Err(e) => {
                    // SAFETY: nothing else was made from the instance yet.
                    unsafe { instance.destroy_instance(None) };
                    return Err(e);
                }
            }
        } else {
            None
        };
        // On a failure below: what was made above, child before parent.
        let undo = || {
            // SAFETY: the messenger and the instance were made above and nothing else refers to
            // them yet.
            unsafe {
                if let Some((du, m)) = &messenger {
                    du.destroy_debug_utils_messenger(*m, None);
                }
                instance.destroy_instance(None);
            }
        };
        let (physical, queue_family, info) = Self::pick(&instance).inspect_err(|_| undo())?;
        let device =
            Self::open_device(&instance, physical, queue_family, &info).inspect_err(|_| undo())?;
        // SAFETY: the queue family was created with one queue.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let host_import = ash::ext::external_memory_host::Device::new(&instance, &device);
        let pipeline_executables = info
            .pipeline_statistics
            .then(|| ash::khr::pipeline_executable_properties::Device::new(&instance, &device));
        // Built below, once the context can build pipelines; if that fails, dropping the context
        // destroys the null handles, which Vulkan allows.
        let replay = Pipeline::null();
        let mut ctx = Context {
            _entry: entry,
            instance,
            messenger,
            log,
            device,
            host_import,
            pipeline_executables,
            queue: Mutex::new(queue),
            queue_family,
            info,
            replay,
            stage_table: opts.stage_table,
            owned: true,
        };
        let words = spirv::replay_module(ctx.info.slot_descriptors)?;
        ctx.replay = Pipeline::new(&ctx.device, &words, c"main", ctx.info.slot_descriptors)?;
        Ok(Arc::new(ctx))
    }

    fn pick(instance: &ash::Instance) -> Result<(vk::PhysicalDevice, u32, DeviceInfo), VkError> {
        // SAFETY: a plain query of the instance.
        let devices = check("vkEnumeratePhysicalDevices", unsafe {
            instance.enumerate_physical_devices()
        })?;
        let mut seen = Vec::new();
        for pd in devices {
            match Self::inspect(instance, pd)? {
                Ok((family, info)) => return Ok((pd, family, info)),
                Err(lacks) => seen.push(lacks),
            }
        }
        Err(VkError::NoDevice {
            seen: if seen.is_empty() {
                "none".to_owned()
            } else {
                seen.join("; ")
            },
        })
    }

    /// What `pd` has of what the backend needs: its queue family and what the backend knows of
    /// it, or "NAME lacks …" naming everything it lacks.
    fn inspect(
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
    ) -> Result<Result<(u32, DeviceInfo), String>, VkError> {
        let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut host)
            .push_next(&mut maint3)
            .push_next(&mut subgroup);
        // SAFETY: p2 and its chain live across the call; the device came from this instance.
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        let props = p2.properties;
        let name = props
            .device_name_as_c_str()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unnamed device".to_owned());
        let mut lacks = Vec::new();
        if props.api_version < vk::API_VERSION_1_2 {
            lacks.push(format!("Vulkan 1.2 (has {})", version(props.api_version)));
        }
        // SAFETY: a plain query of the device.
        let exts = check("vkEnumerateDeviceExtensionProperties", unsafe {
            instance.enumerate_device_extension_properties(pd)
        })?;
        if !exts
            .iter()
            .any(|e| e.extension_name_as_c_str().ok() == Some(ash::ext::external_memory_host::NAME))
        {
            lacks.push("VK_EXT_external_memory_host".to_owned());
        }
        let has_executables = exts.iter().any(|e| {
            e.extension_name_as_c_str().ok() == Some(ash::khr::pipeline_executable_properties::NAME)
        });
        let mut executables = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
        if has_executables {
            f2 = f2.push_next(&mut executables);
        }
        if props.api_version >= vk::API_VERSION_1_2 {
            // SAFETY: f2 and its chain live across the call; Vulkan 1.2 knows the 1.2 struct.
            unsafe { instance.get_physical_device_features2(pd, &mut f2) };
        }
        let f10 = f2.features;
        if f10.shader_int64 == vk::FALSE {
            lacks.push("shaderInt64".to_owned());
        }
        if f10.shader_storage_buffer_array_dynamic_indexing == vk::FALSE {
            lacks.push("shaderStorageBufferArrayDynamicIndexing".to_owned());
        }
        if f12.buffer_device_address == vk::FALSE {
            lacks.push("bufferDeviceAddress".to_owned());
        }
        // SAFETY: a plain query of the device.
        let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        let family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE));
        if family.is_none() {
            lacks.push("a compute queue".to_owned());
        }
        if props.limits.max_push_constants_size < 128 {
            lacks.push(format!(
                "a 128-byte push block (has {})",
                props.limits.max_push_constants_size
            ));
        }
        match (lacks.is_empty(), family) {
            (true, Some(family)) => {
                // SAFETY: a plain query of the device.
                let mem = unsafe { instance.get_physical_device_memory_properties(pd) };
                let n = mem.memory_type_count as usize;
                let slots = props
                    .limits
                    .max_per_stage_descriptor_storage_buffers
                    .min(props.limits.max_descriptor_set_storage_buffers)
                    / 2;
                let info = DeviceInfo {
                    name,
                    vendor_id: props.vendor_id,
                    api_version: version(props.api_version),
                    min_storage_buffer_offset_alignment: props
                        .limits
                        .min_storage_buffer_offset_alignment,
                    max_storage_buffer_range: u64::from(props.limits.max_storage_buffer_range),
                    min_imported_host_pointer_alignment: host
                        .min_imported_host_pointer_alignment
                        .max(1),
                    max_memory_allocation_size: maint3.max_memory_allocation_size,
                    slot_descriptors: slots.clamp(1, spirv::REPLAY_MAX_SLOTS),
                    memory_types: mem.memory_types[..n]
                        .iter()
                        .map(|t| t.property_flags)
                        .collect(),
                    memory_heaps: mem.memory_types[..n].iter().map(|t| t.heap_index).collect(),
                    timestamp_period_ns: f64::from(props.limits.timestamp_period),
                    timestamp_valid_bits: families
                        .get(family)
                        .map_or(0, |f| f.timestamp_valid_bits),
                    subgroup_size: subgroup.subgroup_size,
                    pipeline_statistics: has_executables
                        && executables.pipeline_executable_info == vk::TRUE,
                    subgroup_ballot: subgroup
                        .supported_operations
                        .contains(vk::SubgroupFeatureFlags::BALLOT)
                        && subgroup
                            .supported_stages
                            .contains(vk::ShaderStageFlags::COMPUTE),
                    subgroup_arithmetic: subgroup.supported_operations.contains(
                        vk::SubgroupFeatureFlags::ARITHMETIC | vk::SubgroupFeatureFlags::VOTE,
                    ) && subgroup
                        .supported_stages
                        .contains(vk::ShaderStageFlags::COMPUTE),
                    buffer_int64_atomics: f12.shader_buffer_int64_atomics == vk::TRUE,
                };
                Ok(Ok((family as u32, info)))
            }
            _ => Ok(Err(format!("{name} lacks {}", lacks.join(", ")))),
        }
    }

    fn open_device(
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
        family: u32,
        info: &DeviceInfo,
    ) -> Result<ash::Device, VkError> {
        let pipeline_statistics = info.pipeline_statistics;
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&prio)];
        let features = vk::PhysicalDeviceFeatures::default()
            .shader_int64(true)
            .shader_storage_buffer_array_dynamic_indexing(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .buffer_device_address(true)
            .shader_buffer_int64_atomics(info.buffer_int64_atomics);
        let mut executables = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        let mut exts = vec![ash::ext::external_memory_host::NAME.as_ptr()];
        if pipeline_statistics {
            exts.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&exts)
            .enabled_features(&features)
            .push_next(&mut f12);
        if pipeline_statistics {
            create = create.push_next(&mut executables);
        }
        // SAFETY: the device supports every feature and extension asked for (checked in `pick`); the
        // create info lives across the call.
        check("vkCreateDevice", unsafe {
            instance.create_device(physical, &create, None)
        })
    }

    /// Waits until the queue has finished all it was given: what an owner does before it frees
    /// what a submission used, since a wait that failed (a timeout) leaves the submission running.
    /// A failure here (a lost device, a poisoned lock) is not reported: a lost device runs
    /// nothing, and the caller is already giving up.
    pub fn wait_queue_idle(&self) {
        if let Ok(queue) = self.queue.lock() {
            // SAFETY: the queue is this device's, externally synchronised by the lock held here.
            let _ = unsafe { self.device.queue_wait_idle(*queue) };
        }
    }

    /// What the device reports, for reports and the planner.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The device's real storage-buffer limits, named, for the planner (O7).
    pub fn limits(&self) -> DeviceLimits {
        DeviceLimits {
            name: self.device_name(),
            min_storage_buffer_offset_alignment: self.info.min_storage_buffer_offset_alignment,
            max_storage_buffer_range: self.info.max_storage_buffer_range,
            ..DeviceLimits::default()
        }
    }

    /// "vulkan: NAME (Vulkan X.Y.Z)".
    pub fn device_name(&self) -> String {
        format!(
            "vulkan: {} (Vulkan {})",
            self.info.name, self.info.api_version
        )
    }

    /// Validation messages counted so far (0 without validation).
    pub fn validation_messages(&self) -> u64 {
        self.log.count.load(Ordering::SeqCst)
    }

    /// The first validation messages, as text.
    pub fn validation_text(&self) -> Vec<String> {
        self.log.first.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Whether the validation layer is on.
    pub fn validating(&self) -> bool {
        self.messenger.is_some()
    }

    /// Sends one warning through VK_EXT_debug_utils to this context's messenger, so a test can see
    /// that [`Context::validation_messages`] counts what reaches it. Does nothing without validation.
    pub fn send_test_message(&self, text: &CStr) {
        let Some((du, _)) = &self.messenger else {
            return;
        };
        let data = vk::DebugUtilsMessengerCallbackDataEXT::default().message(text);
        // SAFETY: the instance has VK_EXT_debug_utils enabled, and `data` and its message live across
        // the call.
        unsafe {
            du.submit_debug_utils_message(
                vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION,
                &data,
            );
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every backend holding this context has been dropped (they hold an Arc), so nothing
        // this context made from the device remains in use once the device is idle.
        let _ = check("vkDeviceWaitIdle", unsafe {
            self.device.device_wait_idle()
        });
        self.replay.destroy(&self.device);
        if !self.owned {
            // The host's instance and device: the host destroys them.
            return;
        }
        // SAFETY: as above; children go before their parents.
        unsafe {
            self.device.destroy_device(None);
            if let Some((du, m)) = &self.messenger {
                du.destroy_debug_utils_messenger(*m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}
