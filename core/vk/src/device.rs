//! The Vulkan context: instance (optionally with the Khronos validation layer and a messenger that
//! counts every message), the physical device chosen for what D964 needs, the logical device, the
//! queue, the replay pipeline, and the small buffer helpers the backend and the benchmark share.
//!
//! One [`Context`] may serve many [`crate::VulkanBackend`]s (each with its own imports, table and
//! command buffer); it never plans or runs a job itself.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;

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
    /// Storage-buffer descriptors the replay binds per slot array (half the per-stage limit, at most 16).
    pub slot_descriptors: u32,
    /// Memory types, with their property flags.
    pub memory_types: Vec<vk::MemoryPropertyFlags>,
    /// The heap of each memory type.
    pub memory_heaps: Vec<u32>,
}

/// The replay pipeline: one compute pipeline over the translated module.
pub(crate) struct Pipeline {
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) raw: vk::Pipeline,
}

/// A buffer with its own host-visible, coherent, mapped memory and a device address.
pub(crate) struct Buf {
    pub(crate) raw: vk::Buffer,
    pub(crate) memory: vk::DeviceMemory,
    ptr: *mut u8,
    pub(crate) size: u64,
    pub(crate) address: u64,
}

// SAFETY: a Buf owns its mapping exclusively; the pointer is only dereferenced through &self/&mut self
// while no dispatch that writes the buffer is in flight (the owner waits on the fence first).
unsafe impl Send for Buf {}

impl Buf {
    /// Whether the memory is mapped on the host.
    pub(crate) fn mapped(&self) -> bool {
        !self.ptr.is_null()
    }

    /// The mapped bytes (none when the memory is not mapped).
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: ptr maps `size` bytes of host-coherent memory owned by this Buf, and no dispatch
        // writing them is in flight while the host reads (the backend waits on its fence).
        unsafe { std::slice::from_raw_parts(self.ptr, self.size as usize) }
    }

    /// The mapped bytes, writable (none when the memory is not mapped).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: as in `bytes`; &mut self makes this the only host reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size as usize) }
    }

    /// Little-endian u32 at word index `w`.
    pub(crate) fn word(&self, w: usize) -> u32 {
        let b = self.bytes();
        let mut x = [0u8; 4];
        if let Some(s) = b.get(w * 4..w * 4 + 4) {
            x.copy_from_slice(s);
        }
        u32::from_le_bytes(x)
    }
}

/// An open Vulkan device with the replay pipeline built.
pub struct Context {
    _entry: ash::Entry,
    instance: ash::Instance,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    log: Arc<ValidationLog>,
    pub(crate) device: ash::Device,
    pub(crate) host_import: ash::ext::external_memory_host::Device,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) info: DeviceInfo,
    pub(crate) replay: Pipeline,
    pub(crate) stage_table: bool,
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
            Self::open_device(&instance, physical, queue_family).inspect_err(|_| undo())?;
        // SAFETY: the queue family was created with one queue.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let host_import = ash::ext::external_memory_host::Device::new(&instance, &device);
        let replay = Pipeline {
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            raw: vk::Pipeline::null(),
        };
        let mut ctx = Context {
            _entry: entry,
            instance,
            messenger,
            log,
            device,
            host_import,
            queue: Mutex::new(queue),
            queue_family,
            info,
            replay,
            stage_table: opts.stage_table,
        };
        let words = spirv::replay_module(ctx.info.slot_descriptors)?;
        ctx.replay = ctx.pipeline(&words, c"main", ctx.info.slot_descriptors)?;
        Ok(Arc::new(ctx))
    }

    fn pick(instance: &ash::Instance) -> Result<(vk::PhysicalDevice, u32, DeviceInfo), VkError> {
        // SAFETY: a plain query of the instance.
        let devices = check("vkEnumeratePhysicalDevices", unsafe {
            instance.enumerate_physical_devices()
        })?;
        let mut seen = Vec::new();
        for pd in devices {
            let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
            let mut maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
            let mut p2 = vk::PhysicalDeviceProperties2::default()
                .push_next(&mut host)
                .push_next(&mut maint3);
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
            if !exts.iter().any(|e| {
                e.extension_name_as_c_str().ok() == Some(ash::ext::external_memory_host::NAME)
            }) {
                lacks.push("VK_EXT_external_memory_host".to_owned());
            }
            let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
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
                        api_version: version(props.api_version),
                        min_storage_buffer_offset_alignment: props
                            .limits
                            .min_storage_buffer_offset_alignment,
                        max_storage_buffer_range: u64::from(props.limits.max_storage_buffer_range),
                        min_imported_host_pointer_alignment: host
                            .min_imported_host_pointer_alignment
                            .max(1),
                        max_memory_allocation_size: maint3.max_memory_allocation_size,
                        slot_descriptors: slots.clamp(1, 16),
                        memory_types: mem.memory_types[..n]
                            .iter()
                            .map(|t| t.property_flags)
                            .collect(),
                        memory_heaps: mem.memory_types[..n].iter().map(|t| t.heap_index).collect(),
                    };
                    return Ok((pd, family as u32, info));
                }
                _ => seen.push(format!("{name} lacks {}", lacks.join(", "))),
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

    fn open_device(
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
        family: u32,
    ) -> Result<ash::Device, VkError> {
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&prio)];
        let features = vk::PhysicalDeviceFeatures::default()
            .shader_int64(true)
            .shader_storage_buffer_array_dynamic_indexing(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().buffer_device_address(true);
        let exts = [ash::ext::external_memory_host::NAME.as_ptr()];
        let create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&exts)
            .enabled_features(&features)
            .push_next(&mut f12);
        // SAFETY: the device supports every feature and extension asked for (checked in `pick`); the
        // create info lives across the call.
        check("vkCreateDevice", unsafe {
            instance.create_device(physical, &create, None)
        })
    }

    /// Builds a compute pipeline from a validated module, with the replay's descriptor set layout
    /// (two arrays of `slots` storage buffers) and a 128-byte push block.
    pub(crate) fn pipeline(
        &self,
        words: &[u32],
        entry: &CStr,
        slots: u32,
    ) -> Result<Pipeline, VkError> {
        let d = &self.device;
        let bindings = [
            vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(slots)
                .stage_flags(vk::ShaderStageFlags::COMPUTE),
            vk::DescriptorSetLayoutBinding::default()
                .binding(1)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(slots)
                .stage_flags(vk::ShaderStageFlags::COMPUTE),
        ];
        // SAFETY: the create info lives across the call; the layout is destroyed in Drop.
        let set_layout = check("vkCreateDescriptorSetLayout", unsafe {
            d.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            )
        })?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(128)];
        let set_layouts = [set_layout];
        // SAFETY: as above.
        let layout = check("vkCreatePipelineLayout", unsafe {
            d.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default()
                    .set_layouts(&set_layouts)
                    .push_constant_ranges(&ranges),
                None,
            )
        });
        let layout = match layout {
            Ok(l) => l,
            Err(e) => {
                // SAFETY: made above, used by nothing.
                unsafe { d.destroy_descriptor_set_layout(set_layout, None) };
                return Err(e);
            }
        };
        // SAFETY: `words` is a module spirv-val accepted for this environment.
        let module = check("vkCreateShaderModule", unsafe {
            d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
        });
        let module = match module {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: made above, used by nothing.
                unsafe {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                }
                return Err(e);
            }
        };
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(entry);
        let create = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)];
        // SAFETY: the module and layout are valid; the shader module may go once the pipeline exists.
        let made = unsafe {
            let r = d.create_compute_pipelines(vk::PipelineCache::null(), &create, None);
            d.destroy_shader_module(module, None);
            r
        };
        match check("vkCreateComputePipelines", made.map_err(|(_, e)| e)) {
            Ok(p) => Ok(Pipeline {
                set_layout,
                layout,
                raw: p.first().copied().unwrap_or_default(),
            }),
            Err(e) => {
                // SAFETY: made above, used by nothing.
                unsafe {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                }
                Err(e)
            }
        }
    }

    /// Destroys a pipeline made by [`Context::pipeline`].
    pub(crate) fn destroy_pipeline(&self, p: &Pipeline) {
        // SAFETY: the pipeline's objects were made on this device, and no command buffer using
        // them is pending (callers wait on their fences first).
        unsafe {
            self.device.destroy_pipeline(p.raw, None);
            self.device.destroy_pipeline_layout(p.layout, None);
            self.device
                .destroy_descriptor_set_layout(p.set_layout, None);
        }
    }

    /// The first memory type among `type_bits` with all of `flags`.
    pub(crate) fn memory_type(
        &self,
        type_bits: u32,
        flags: vk::MemoryPropertyFlags,
    ) -> Option<u32> {
        self.info
            .memory_types
            .iter()
            .enumerate()
            .find(|(i, f)| type_bits & (1 << i) != 0 && f.contains(flags))
            .map(|(i, _)| i as u32)
    }

    /// A buffer of `size` bytes with its own host-visible, coherent memory, mapped, with a device
    /// address; usage STORAGE_BUFFER | SHADER_DEVICE_ADDRESS | TRANSFER_SRC | TRANSFER_DST.
    pub(crate) fn host_buffer(
        &self,
        size: u64,
        what: &'static str,
        calls: &mut u64,
    ) -> Result<Buf, VkError> {
        self.buffer(
            size,
            what,
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
            true,
            calls,
        )
    }

    /// A buffer with its own memory of the given properties; mapped when `mapped`.
    pub(crate) fn buffer(
        &self,
        size: u64,
        what: &'static str,
        flags: vk::MemoryPropertyFlags,
        mapped: bool,
        calls: &mut u64,
    ) -> Result<Buf, VkError> {
        let d = &self.device;
        let size = size.max(16);
        let create = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        *calls += 1;
        // SAFETY: the create info lives across the call.
        let raw = check("vkCreateBuffer", unsafe { d.create_buffer(&create, None) })?;
        *calls += 1;
        // SAFETY: raw is a buffer of this device.
        let req = unsafe { d.get_buffer_memory_requirements(raw) };
        let Some(type_index) = self.memory_type(req.memory_type_bits, flags) else {
            // SAFETY: raw is unused.
            unsafe { d.destroy_buffer(raw, None) };
            return Err(VkError::NoMemoryType {
                what,
                type_bits: req.memory_type_bits,
                wanted: if mapped {
                    "host-visible and coherent"
                } else {
                    "device-local"
                },
            });
        };
        let mut flags_info =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(type_index)
            .push_next(&mut flags_info);
        *calls += 1;
        // SAFETY: the allocate info and its chain live across the call.
        let memory = match check("vkAllocateMemory", unsafe {
            d.allocate_memory(&alloc, None)
        }) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: raw is unused.
                unsafe { d.destroy_buffer(raw, None) };
                return Err(e);
            }
        };
        let bound = (|| {
            *calls += 1;
            // SAFETY: memory fits the buffer's requirements (size, type, alignment at offset 0).
            check("vkBindBufferMemory", unsafe {
                d.bind_buffer_memory(raw, memory, 0)
            })?;
            let ptr = if mapped {
                *calls += 1;
                // SAFETY: the memory is host-visible and not mapped yet.
                check("vkMapMemory", unsafe {
                    d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                })? as *mut u8
            } else {
                std::ptr::null_mut()
            };
            *calls += 1;
            // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage and bound memory allocated with
            // the DEVICE_ADDRESS flag.
            let address = unsafe {
                d.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(raw))
            };
            Ok::<_, VkError>((ptr, address))
        })();
        match bound {
            Ok((ptr, address)) => {
                let mut b = Buf {
                    raw,
                    memory,
                    ptr,
                    size,
                    address,
                };
                if mapped {
                    b.bytes_mut().fill(0);
                }
                Ok(b)
            }
            Err(e) => {
                // SAFETY: neither is in use.
                unsafe {
                    d.destroy_buffer(raw, None);
                    d.free_memory(memory, None);
                }
                Err(e)
            }
        }
    }

    /// Destroys a buffer made by [`Context::buffer`]; the caller has waited for every dispatch using it.
    pub(crate) fn destroy_buffer(&self, b: Buf, calls: &mut u64) {
        *calls += 2;
        // SAFETY: the buffer and memory were made on this device and are no longer in use; freeing
        // the memory unmaps it.
        unsafe {
            self.device.destroy_buffer(b.raw, None);
            self.device.free_memory(b.memory, None);
        }
    }

    /// Submits one command buffer and waits for it, holding the queue.
    pub(crate) fn submit_and_wait(
        &self,
        cmd: vk::CommandBuffer,
        fence: vk::Fence,
    ) -> Result<(), VkError> {
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let queue = self.queue.lock().map_err(|_| VkError::Call {
            call: "vkQueueSubmit",
            code: "a poisoned queue lock".to_owned(),
            meaning: "another thread panicked while it held the queue",
        })?;
        // SAFETY: the command buffer is recorded and executable; the fence is unsignalled; the
        // queue is externally synchronised by the lock held here.
        check("vkQueueSubmit", unsafe {
            self.device.queue_submit(*queue, &submit, fence)
        })?;
        // SAFETY: the fence belongs to this device; a minute is far longer than any replay takes.
        check("vkWaitForFences", unsafe {
            self.device.wait_for_fences(&[fence], true, 60_000_000_000)
        })?;
        // SAFETY: the fence has signalled, so nothing waits on it.
        check("vkResetFences", unsafe {
            self.device.reset_fences(&[fence])
        })
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
        self.destroy_pipeline(&self.replay);
        // SAFETY: every backend holding this context has been dropped (they hold an Arc), so nothing
        // made from the device remains; children go before their parents.
        unsafe {
            let _ = check("vkDeviceWaitIdle", self.device.device_wait_idle());
            self.device.destroy_device(None);
            if let Some((du, m)) = &self.messenger {
                du.destroy_debug_utils_messenger(*m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// A command pool with one primary command buffer and a fence: what one submission at a time
/// needs. Made on a context, destroyed on drop; whoever submits waits before it is dropped.
pub(crate) struct Commands {
    ctx: Arc<Context>,
    pool: vk::CommandPool,
    /// The command buffer, re-recorded for each submission.
    pub(crate) cmd: vk::CommandBuffer,
    /// The fence a submission signals.
    pub(crate) fence: vk::Fence,
}

impl Commands {
    /// A pool whose buffer can be reset, its buffer and an unsignalled fence.
    pub(crate) fn new(ctx: &Arc<Context>) -> Result<Self, VkError> {
        let d = &ctx.device;
        // SAFETY: plain object creation on a live device; destroyed in Drop.
        let pool = check("vkCreateCommandPool", unsafe {
            d.create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(ctx.queue_family)
                    .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                None,
            )
        })?;
        // Owned from here: a failure below destroys the pool (and a null fence is no object).
        let mut commands = Commands {
            ctx: Arc::clone(ctx),
            pool,
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
        };
        // SAFETY: the pool is live.
        let cmds = check("vkAllocateCommandBuffers", unsafe {
            d.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
        })?;
        commands.cmd = cmds.first().copied().unwrap_or_default();
        // SAFETY: plain object creation.
        commands.fence = check("vkCreateFence", unsafe {
            d.create_fence(&vk::FenceCreateInfo::default(), None)
        })?;
        Ok(commands)
    }

    /// Submits the recorded command buffer and waits for it ([`Context::submit_and_wait`]).
    pub(crate) fn submit_and_wait(&self) -> Result<(), VkError> {
        self.ctx.submit_and_wait(self.cmd, self.fence)
    }
}

impl Drop for Commands {
    fn drop(&mut self) {
        // SAFETY: the owner waited for every submission, so nothing is pending on the fence or the
        // buffer; destroying a null fence does nothing; the pool frees its buffer.
        unsafe {
            self.ctx.device.destroy_fence(self.fence, None);
            self.ctx.device.destroy_command_pool(self.pool, None);
        }
    }
}
