//! The imported guest pieces (M1–M5): [`Imports`] gives each piece a page-aligned host mirror
//! (`host`), imports it with `VK_EXT_external_memory_host`, binds a buffer with a device address to
//! it, and frees it on release.
//!
//! In host mode (guest memory that is the emulator's own pages, `dispatchscope_core::host`) there
//! is no mirror: the piece's host pages themselves are imported (zero-copy), so device stores land
//! in the emulator's memory and nothing is copied either way; such an import is refused by name
//! when its host address or size is not a multiple of `minImportedHostPointerAlignment`.
//!
//! Otherwise it keeps the mirrors and guest memory in step: before a dispatch that reads guest memory
//! by device address every guest page with contents is copied into its mirror, and after one the
//! bytes of the chunks it marked are copied back (C1). It never decides what to import: the engine's
//! mappings say which pieces, and the backend waits for any dispatch in flight before a release (M5).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use crate::device::Context;
use crate::host::HostAlloc;
use crate::{VkError, check};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::memory::GuestMemory;

/// Where the time of imports went.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImportTime {
    /// Allocating page-aligned mirrors and copying guest bytes into them.
    pub mirror: Duration,
    /// The Vulkan calls of the imports.
    pub vulkan: Duration,
    /// Guest bytes copied into or out of mirrors (0 in host mode: the pages are imported as
    /// they are).
    pub bytes_copied: u64,
    /// Imports of the emulator's own pages, zero-copy (host mode).
    pub zero_copy: u64,
}

/// One imported piece: its mirror, the imported memory over it and the buffer bound to that.
pub(crate) struct Import {
    pub(crate) guest: ByteRange,
    /// The mirror imported, or `None` for the emulator's own pages (host mode).
    mirror: Option<HostAlloc>,
    memory: vk::DeviceMemory,
    buffer: vk::Buffer,
    pub(crate) device_base: u64,
    /// Guest pages (addresses) whose mirror bytes may be non-zero.
    touched: BTreeSet<u64>,
}

/// Every live import, by device base and by guest start. Destroys what is left on drop; the owner
/// waits for any dispatch reading them first.
pub(crate) struct Imports {
    ctx: Arc<Context>,
    by_base: BTreeMap<u64, Import>,
    /// Device base by guest start.
    by_guest: BTreeMap<u64, u64>,
    /// Moves whenever an import is released (a new import leaves every checked entry sound).
    epoch: u64,
    time: ImportTime,
}

impl Imports {
    /// None yet.
    pub(crate) fn new(ctx: &Arc<Context>) -> Self {
        Self {
            ctx: Arc::clone(ctx),
            by_base: BTreeMap::new(),
            by_guest: BTreeMap::new(),
            epoch: 0,
            time: ImportTime::default(),
        }
    }

    /// Imports alive.
    pub(crate) fn len(&self) -> usize {
        self.by_base.len()
    }

    /// The release epoch: it moves whenever an import is released.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Time spent importing so far.
    pub(crate) fn time(&self) -> ImportTime {
        self.time
    }

    /// M1: imports the mirror of `piece` and returns the device address of its first byte.
    pub(crate) fn import(
        &mut self,
        piece: ByteRange,
        memory: &GuestMemory,
        calls: &mut u64,
    ) -> Result<u64, VkError> {
        let info = &self.ctx.info;
        let align = info.min_imported_host_pointer_alignment.max(1);
        let bytes = piece.size_bytes().max(1).div_ceil(align) * align;
        let refused = |host: u64, why: String| VkError::ImportRefused {
            piece,
            bytes,
            host,
            why,
        };
        // In host mode the emulator's own pages are imported where they lie, and the check there
        // names their real host address; a mirror has none until it is made.
        if memory.host().is_some() {
            return self.import_in_place(piece, memory, calls);
        }
        if bytes > info.max_memory_allocation_size {
            return Err(refused(
                0,
                format!(
                    "{bytes:#x} bytes is over maxMemoryAllocationSize {:#x} (a mirror, not yet made)",
                    info.max_memory_allocation_size
                ),
            ));
        }
        let started = Instant::now();
        let mut mirror = HostAlloc::zeroed(bytes, align)?;
        let size = piece.size_bytes() as usize;
        let Some(dst) = mirror.bytes_mut().get_mut(..size) else {
            return Err(refused(0, "the mirror is shorter than the piece".into()));
        };
        memory
            .read_bytes(piece.start, dst)
            .map_err(|e| VkError::HostRead(Box::new(e)))?;
        self.time.bytes_copied += size as u64;
        let page = memory.page_bytes();
        let touched: BTreeSet<u64> = mirror.bytes()[..size]
            .chunks(page as usize)
            .enumerate()
            .filter(|(_, c)| c.iter().any(|&b| b != 0))
            .map(|(i, _)| piece.start + i as u64 * page)
            .collect();
        let copied = Instant::now();
        self.time.mirror += copied - started;
        let host = mirror.addr();
        let (memory_obj, buffer, device_base) = self
            .import_host(mirror.as_ptr(), bytes, calls)
            .map_err(|e| keep_kind_or(e, |e| refused(host, e.to_string())))?;
        self.time.vulkan += copied.elapsed();
        self.by_base.insert(
            device_base,
            Import {
                guest: piece,
                mirror: Some(mirror),
                memory: memory_obj,
                buffer,
                device_base,
                touched,
            },
        );
        self.by_guest.insert(piece.start, device_base);
        Ok(device_base)
    }

    /// M1 in host mode: imports the emulator's own pages behind `piece` where they lie. The
    /// engine checked the process's real mapping of them first (M3, `dispatchscope_core::host`).
    fn import_in_place(
        &mut self,
        piece: ByteRange,
        memory: &GuestMemory,
        calls: &mut u64,
    ) -> Result<u64, VkError> {
        let align = self.ctx.info.min_imported_host_pointer_alignment.max(1);
        let bytes = piece.size_bytes();
        let refused = |host: u64, why: String| VkError::ImportRefused {
            piece,
            bytes,
            host,
            why,
        };
        let Some((host, left)) = memory.host_address(piece.start) else {
            return Err(refused(
                0,
                "no reservation names a host address for it".into(),
            ));
        };
        if left < bytes {
            return Err(refused(
                host,
                "the piece passes its reservation's end".into(),
            ));
        }
        if !host.is_multiple_of(align) || !bytes.is_multiple_of(align) {
            return Err(refused(
                host,
                format!(
                    "host {host:#x} and size {bytes:#x} must be multiples of minImportedHostPointerAlignment {align:#x}"
                ),
            ));
        }
        if bytes > self.ctx.info.max_memory_allocation_size {
            return Err(refused(
                host,
                format!(
                    "{bytes:#x} bytes is over maxMemoryAllocationSize {:#x}",
                    self.ctx.info.max_memory_allocation_size
                ),
            ));
        }
        let started = Instant::now();
        let (memory_obj, buffer, device_base) = self
            .import_host(host as *mut u8, bytes, calls)
            .map_err(|e| keep_kind_or(e, |e| refused(host, e.to_string())))?;
        self.time.vulkan += started.elapsed();
        self.time.zero_copy += 1;
        self.by_base.insert(
            device_base,
            Import {
                guest: piece,
                mirror: None,
                memory: memory_obj,
                buffer,
                device_base,
                touched: BTreeSet::new(),
            },
        );
        self.by_guest.insert(piece.start, device_base);
        Ok(device_base)
    }

    /// The Vulkan half of an import: host pointer properties, imported memory, a buffer bound to
    /// it, its device address. `ptr` is aligned to minImportedHostPointerAlignment and its
    /// `bytes` stay mapped until the import is released.
    fn import_host(
        &self,
        ptr: *mut u8,
        bytes: u64,
        calls: &mut u64,
    ) -> Result<(vk::DeviceMemory, vk::Buffer, u64), VkError> {
        let ctx = &self.ctx;
        let d = &ctx.device;
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        *calls += 1;
        // SAFETY: ash 0.38 has no wrapper for this call, so it goes through the extension's function
        // table; the device has VK_EXT_external_memory_host enabled, the pointer is the start of a
        // live allocation aligned to minImportedHostPointerAlignment, and props lives across the call.
        let r = unsafe {
            (ctx.host_import.fp().get_memory_host_pointer_properties_ext)(
                d.handle(),
                handle,
                ptr.cast(),
                &mut props,
            )
        };
        check("vkGetMemoryHostPointerPropertiesEXT", r.result())?;
        let mut ext = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let create = vk::BufferCreateInfo::default()
            .size(bytes)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut ext);
        *calls += 1;
        // SAFETY: the create info and its chain live across the call.
        let buffer = check("vkCreateBuffer", unsafe { d.create_buffer(&create, None) })?;
        *calls += 1;
        // SAFETY: the buffer belongs to this device.
        let req = unsafe { d.get_buffer_memory_requirements(buffer) };
        let bits = props.memory_type_bits & req.memory_type_bits;
        let type_index = ctx
            .memory_type(bits, vk::MemoryPropertyFlags::HOST_COHERENT)
            .or_else(|| ctx.memory_type(bits, vk::MemoryPropertyFlags::empty()));
        let fail = |e: VkError| {
            // SAFETY: the buffer is unused.
            unsafe { d.destroy_buffer(buffer, None) };
            e
        };
        let Some(type_index) = type_index else {
            return Err(fail(VkError::NoMemoryType {
                what: "an imported host allocation",
                type_bits: props.memory_type_bits,
                wanted: "usable by a storage buffer",
            }));
        };
        if req.size > bytes {
            return Err(fail(VkError::NoMemoryType {
                what: "an imported host allocation",
                type_bits: bits,
                wanted: "whose buffer fits the import",
            }));
        }
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(handle)
            .host_pointer(ptr.cast());
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(bytes)
            .memory_type_index(type_index)
            .push_next(&mut import)
            .push_next(&mut flags);
        *calls += 1;
        // SAFETY: the host pointer and size are multiples of minImportedHostPointerAlignment, the
        // type is one the driver reported for this pointer, and the mirror outlives the memory
        // (release frees the memory before dropping the mirror).
        let memory = check("vkAllocateMemory", unsafe {
            d.allocate_memory(&alloc, None)
        })
        .map_err(fail)?;
        *calls += 1;
        // SAFETY: the memory fits the buffer's requirements at offset 0.
        if let Err(e) = check("vkBindBufferMemory", unsafe {
            d.bind_buffer_memory(buffer, memory, 0)
        }) {
            // SAFETY: neither is in use.
            unsafe {
                d.destroy_buffer(buffer, None);
                d.free_memory(memory, None);
            }
            return Err(e);
        }
        *calls += 1;
        // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage and memory allocated with DEVICE_ADDRESS.
        let address = unsafe {
            d.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer))
        };
        Ok((memory, buffer, address))
    }

    /// M4/M5: releases the import at `device_base`; the caller has waited for any dispatch reading
    /// it. Moves the epoch.
    pub(crate) fn release(&mut self, device_base: u64, calls: &mut u64) -> Result<(), VkError> {
        let Some(imp) = self.by_base.remove(&device_base) else {
            *calls += 1;
            return Err(VkError::UnknownImport { device_base });
        };
        self.by_guest.remove(&imp.guest.start);
        self.destroy(imp, calls);
        self.epoch += 1;
        Ok(())
    }

    fn destroy(&self, imp: Import, calls: &mut u64) {
        *calls += 2;
        // SAFETY: the caller waited for any dispatch reading the import; the buffer goes before
        // its memory, and the memory before the mirror it imports (dropped at the end).
        unsafe {
            self.ctx.device.destroy_buffer(imp.buffer, None);
            self.ctx.device.free_memory(imp.memory, None);
        }
        drop(imp);
    }

    /// The import holding device bytes `start..start + len`, and the offset of `start` in it.
    pub(crate) fn at(&self, start: u64, len: u64) -> Option<(&Import, u64)> {
        let (_, imp) = self.by_base.range(..=start).next_back()?;
        let off = start - imp.device_base;
        (off.checked_add(len)? <= imp.guest.size_bytes()).then_some((imp, off))
    }

    /// The mirror of the import at `device_base`: the bench fills it in place.
    #[cfg(feature = "bench")]
    pub(crate) fn mirror_mut(&mut self, device_base: u64) -> Option<&mut [u8]> {
        let imp = self.by_base.get_mut(&device_base)?;
        let n = imp.guest.size_bytes() as usize;
        imp.mirror.as_mut()?.bytes_mut().get_mut(..n)
    }

    /// Copies every guest page with contents into its import's mirror where they differ, and zeroes
    /// mirror pages the guest no longer holds contents for.
    pub(crate) fn sync_mirrors(&mut self, memory: &GuestMemory) {
        let page = memory.page_bytes();
        let mut seen: HashSet<u64> = HashSet::new();
        for (addr, bytes) in memory.content_pages() {
            let Some((_, &base)) = self.by_guest.range(..=addr).next_back() else {
                continue;
            };
            let Some(imp) = self.by_base.get_mut(&base) else {
                continue;
            };
            if !imp.guest.contains(addr) {
                continue;
            }
            let off = (addr - imp.guest.start) as usize;
            let len = (imp.guest.end - addr).min(page) as usize;
            let Some(mirror) = imp.mirror.as_mut() else {
                continue;
            };
            if let (Some(dst), Some(src)) =
                (mirror.bytes_mut().get_mut(off..off + len), bytes.get(..len))
                && dst != src
            {
                dst.copy_from_slice(src);
                self.time.bytes_copied += len as u64;
            }
            imp.touched.insert(addr);
            seen.insert(addr);
        }
        for imp in self.by_base.values_mut() {
            let stale: Vec<u64> = imp
                .touched
                .iter()
                .copied()
                .filter(|p| !seen.contains(p))
                .collect();
            for p in stale {
                let off = (p - imp.guest.start) as usize;
                let len = (imp.guest.end - p).min(page) as usize;
                if let Some(dst) = imp
                    .mirror
                    .as_mut()
                    .and_then(|m| m.bytes_mut().get_mut(off..off + len))
                {
                    dst.fill(0);
                }
                imp.touched.remove(&p);
            }
        }
    }

    /// C1: copies back into guest memory the bytes of every marked chunk (by its device address,
    /// `chunk` bytes each) that differ from it.
    pub(crate) fn copy_back(&mut self, marked: &[(u64, u64)], memory: &mut GuestMemory) {
        let page = memory.page_bytes();
        let mut old = Vec::new();
        let mut copied = 0u64;
        for &(device_addr, chunk) in marked {
            old.resize(chunk as usize, 0);
            let Some((imp, off)) = self.at(device_addr, chunk) else {
                continue;
            };
            let guest = imp.guest.start + off;
            let base = imp.device_base;
            // The emulator's own pages hold the device's stores already: nothing to copy.
            let Some(mirror) = imp.mirror.as_ref() else {
                continue;
            };
            let Some(new) = mirror.bytes().get(off as usize..(off + chunk) as usize) else {
                continue;
            };
            // A mirror is simulated memory's (host mode imports in place), which reads infallibly.
            if memory.read_bytes(guest, &mut old).is_err() {
                continue;
            }
            let mut i = 0usize;
            let mut wrote = Vec::new();
            while i < new.len() {
                if new[i] == old[i] {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < new.len() && new[i] != old[i] {
                    i += 1;
                }
                // Simulated memory takes every byte.
                let _landed = memory.write_bytes(guest + start as u64, &new[start..i]);
                copied += (i - start) as u64;
                wrote.push(guest + start as u64);
            }
            if let Some(imp) = self.by_base.get_mut(&base) {
                for g in wrote {
                    imp.touched.insert(g & !(page - 1));
                }
            }
        }
        self.time.bytes_copied += copied;
    }
}

/// `e` itself where it is a lost device or exhausted memory (its kind outlives the import it
/// failed), else `refused(e)`: the import refused, named.
fn keep_kind_or(e: VkError, refused: impl FnOnce(VkError) -> VkError) -> VkError {
    if e.is_lost_or_out_of_memory() {
        e
    } else {
        refused(e)
    }
}

impl Drop for Imports {
    fn drop(&mut self) {
        let mut n = 0;
        for imp in std::mem::take(&mut self.by_base).into_values() {
            self.destroy(imp, &mut n);
        }
    }
}
