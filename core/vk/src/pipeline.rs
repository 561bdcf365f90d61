//! The compute pipelines: the replay's (built once per [`crate::Context`]) and the benchmark's,
//! each over a validated module with the replay's descriptor set layout (two arrays of storage
//! buffers, O6–O9) and the 128-byte push block (T3).

use std::ffi::CStr;

use ash::vk;

use crate::{VkError, check};

/// Allocates one descriptor set a layout of `layouts` from `pool`: every
/// `vkAllocateDescriptorSets` of this crate (the replay's sets a segment, the pass's one set).
pub(crate) fn allocate_sets(
    d: &ash::Device,
    pool: vk::DescriptorPool,
    layouts: &[vk::DescriptorSetLayout],
) -> Result<Vec<vk::DescriptorSet>, VkError> {
    // SAFETY: the pool and layouts are live objects of `d`; a pool without room for the sets is
    // VK_ERROR_OUT_OF_POOL_MEMORY, which `check` names.
    check("vkAllocateDescriptorSets", unsafe {
        d.allocate_descriptor_sets(
            &vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(pool)
                .set_layouts(layouts),
        )
    })
}

/// One compute pipeline over a translated module, with its layouts.
pub(crate) struct Pipeline {
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) raw: vk::Pipeline,
}

impl Pipeline {
    /// No pipeline: null handles, which destroy as nothing.
    pub(crate) fn null() -> Self {
        Self {
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            raw: vk::Pipeline::null(),
        }
    }
}

impl Pipeline {
    /// Builds a compute pipeline on device `d` from a validated module, with the replay's
    /// descriptor set layout (two arrays of `slots` storage buffers) and a 128-byte push block.
    pub(crate) fn new(
        d: &ash::Device,
        words: &[u32],
        entry: &CStr,
        slots: u32,
    ) -> Result<Pipeline, VkError> {
        Self::build(d, words, entry, slots, vk::PipelineCreateFlags::empty())
    }

    /// [`Pipeline::new`] on `ctx`'s device, made with `flags` (`DISPATCH_BASE` for a dispatch
    /// from a base workgroup), with the driver's statistics of the compiled shader
    /// (VK_KHR_pipeline_executable_properties: name and value, e.g. its registers) where the
    /// driver gives them; none elsewhere.
    #[cfg(feature = "demo")]
    pub(crate) fn with_statistics(
        ctx: &crate::Context,
        words: &[u32],
        entry: &CStr,
        slots: u32,
        flags: vk::PipelineCreateFlags,
    ) -> Result<(Pipeline, Vec<(String, String)>), VkError> {
        let Some(pe) = &ctx.pipeline_executables else {
            return Ok((
                Self::build(&ctx.device, words, entry, slots, flags)?,
                Vec::new(),
            ));
        };
        let p = Self::build(
            &ctx.device,
            words,
            entry,
            slots,
            flags | vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR,
        )?;
        let info = vk::PipelineExecutableInfoKHR::default()
            .pipeline(p.raw)
            .executable_index(0);
        // SAFETY: the pipeline was made with CAPTURE_STATISTICS on a device with the extension;
        // ash sizes the output by the driver's count.
        let stats = unsafe { pe.get_pipeline_executable_statistics(&info) };
        let stats = stats
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let name = s
                    .name_as_c_str()
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default();
                // SAFETY: the union's member is the one `format` names.
                let value = unsafe {
                    match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            (s.value.b32 != 0).to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                        _ => s.value.f64.to_string(),
                    }
                };
                (name, value)
            })
            .collect();
        Ok((p, stats))
    }

    pub(crate) fn build(
        d: &ash::Device,
        words: &[u32],
        entry: &CStr,
        slots: u32,
        flags: vk::PipelineCreateFlags,
    ) -> Result<Pipeline, VkError> {
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
        // SAFETY: `words` is a module spirv-val accepts for this environment: one this crate built,
        // which the tests validate for every input its builder takes (`spirv/every_module_test.rs`),
        // or one `library::link`/`inline` validated; the tests run with the validation layer on.
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
            .flags(flags)
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

    /// Destroys the pipeline, which was made on device `d` by [`Pipeline::new`].
    pub(crate) fn destroy(&self, d: &ash::Device) {
        // SAFETY: the pipeline's objects were made on this device, and no command buffer using
        // them is pending (callers wait on their fences first).
        unsafe {
            d.destroy_pipeline(self.raw, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
