//! Buffers with memory of their own: [`Buf`], and the [`Context`] methods that make and destroy them
//! (the chunk table's, T6; the holders and write masks, O8–O9; the replay's records and results; the
//! benchmark's inputs). Imported host memory is not made here but in `imports` (M1).
//!
//! Each call that makes or destroys one counts its Vulkan calls into the `calls` it is handed, so the
//! backend can report what a dispatch cost.

use ash::vk;

use crate::device::Context;
use crate::{VkError, check};

/// A buffer with memory of its own and a device address; mapped on the host when that memory is
/// host-visible and coherent ([`Buf::mapped`]).
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
    /// No buffer: null handles, which destroy as nothing (what a struct leaves behind when it
    /// hands its buffers to [`Context::destroy_buffer`] on drop).
    #[cfg(feature = "demo")]
    pub(crate) fn null() -> Self {
        Self {
            raw: vk::Buffer::null(),
            memory: vk::DeviceMemory::null(),
            ptr: std::ptr::null_mut(),
            size: 0,
            address: 0,
        }
    }

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

impl Context {
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
}
