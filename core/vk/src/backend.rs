//! [`VulkanBackend`]: the [`Backend`] trait on a Vulkan device.
//!
//! Imports (M1–M5) go through page-aligned host mirrors of the guest pieces, imported with
//! `VK_EXT_external_memory_host` and bound to buffers with device addresses. The chunk table goes to
//! device-local memory when it fits the budget, else host-visible memory (T6). A job runs as one or
//! more dispatches of the replay shader (see [`crate::spirv`]), serially, in stream order, and comes
//! back as the same [`Outcome`] the CPU reference gives.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use crate::device::{Buf, Commands, Context, ContextOptions};
use crate::host::HostAlloc;
use crate::spirv::{push, record};
use crate::{VkError, check};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::{Backend, BackendError};
use dispatchscope_core::chunk_table::{ChunkTable, SLOT_BYTES, TableSlot};
use dispatchscope_core::exec::{AccessOutcome, Job, Outcome, Planned};
use dispatchscope_core::input::{DeviceLimits, Format, Op, words_for};
use dispatchscope_core::memory::GuestMemory;
use dispatchscope_core::report::Placement;

/// One imported piece: its mirror, the imported memory over it and the buffer bound to that.
struct Import {
    guest: ByteRange,
    mirror: HostAlloc,
    memory: vk::DeviceMemory,
    buffer: vk::Buffer,
    device_base: u64,
    /// Guest pages (addresses) whose mirror bytes may be non-zero.
    touched: BTreeSet<u64>,
}

/// The table as placed on the device (T6).
struct PlacedTable {
    buf: Buf,
    slots: Vec<TableSlot>,
    placement: Placement,
    /// Bytes per chunk when it was placed.
    chunk_bytes: u64,
    /// The release epoch the table's entries were last checked against.
    checked_epoch: u64,
}

/// The Vulkan backend. See the module docs of [`super`].
pub struct VulkanBackend {
    ctx: Arc<Context>,
    imports: BTreeMap<u64, Import>,
    by_guest: BTreeMap<u64, u64>,
    table: Option<PlacedTable>,
    /// The one command buffer every upload and dispatch is recorded into, and its fence.
    commands: Commands,
    aux: Option<Buf>,
    dummy: Option<Buf>,
    calls: u64,
    execute_calls: u64,
    /// Moves whenever an import is released (a new import leaves every checked entry sound).
    epoch: u64,
    /// A submitted dispatch not yet waited for (M5: a release waits for it).
    in_flight: bool,
    dispatches: u64,
    last_bindings: Vec<(Option<u32>, u64)>,
    import_time: ImportTime,
}

/// Where the time of imports went.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImportTime {
    /// Allocating page-aligned mirrors and copying guest bytes into them.
    pub mirror: Duration,
    /// The Vulkan calls of the imports.
    pub vulkan: Duration,
}

impl std::fmt::Debug for VulkanBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanBackend")
            .field("device", &self.ctx.info().name)
            .field("imports", &self.imports.len())
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

/// A job encoded for the replay shader.
struct Encoded {
    /// Each slot's binding offset, in the order first used.
    slot_offsets: Vec<(Option<u32>, u64)>,
    records: Vec<u32>,
    values: Vec<u32>,
    segments: Vec<Segment>,
    lds_regions: usize,
    scratch_regions: usize,
}

/// Consecutive accesses that one dispatch replays, with the slot bindings they use.
struct Segment {
    first: u32,
    count: u32,
    /// Per descriptor index: (holder, member offset in bytes).
    bindings: Vec<(usize, u64)>,
}

/// Byte offsets of the regions of the per-job auxiliary buffer.
#[derive(Default)]
struct AuxLayout {
    records: u64,
    values: u64,
    out: u64,
    log: u64,
    marks: u64,
    lds: u64,
    scratch: u64,
    empty_table: u64,
    end: u64,
    lds_stride: u64,
    scratch_stride: u64,
}

const EMPTY_TABLE_SLOTS: u64 = 16;

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// What the lookup helper reads of the placed table from the push block (T2, T3).
#[derive(Clone, Copy)]
struct TablePush {
    /// The table's device address.
    address: u64,
    chunk_shift: u32,
    capacity_log2: u32,
    probe_bound: u32,
    /// The hash's multiplier ([`ChunkTable::multiplier`]).
    multiplier: u64,
}

impl VulkanBackend {
    /// Opens a context and a backend on it.
    pub fn new(opts: &ContextOptions) -> Result<Self, VkError> {
        Self::on(Context::new(opts)?)
    }

    /// A fresh backend (no imports, no table) on an open context.
    pub fn on(ctx: Arc<Context>) -> Result<Self, VkError> {
        let commands = Commands::new(&ctx)?;
        Ok(Self {
            ctx,
            imports: BTreeMap::new(),
            by_guest: BTreeMap::new(),
            table: None,
            commands,
            aux: None,
            dummy: None,
            calls: 0,
            execute_calls: 0,
            epoch: 0,
            in_flight: false,
            dispatches: 0,
            last_bindings: Vec::new(),
            import_time: ImportTime::default(),
        })
    }

    /// The context this backend runs on.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Vulkan calls made by `execute` (not counted in [`Backend::calls`]).
    pub fn execute_calls(&self) -> u64 {
        self.execute_calls
    }

    /// Replay dispatches submitted so far (a job with more slots than one dispatch binds takes several).
    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// Imports alive.
    pub fn n_imports(&self) -> usize {
        self.imports.len()
    }

    /// Time spent importing so far, split between the mirror copies and the Vulkan calls.
    pub fn import_time(&self) -> ImportTime {
        self.import_time
    }

    /// The mirror of the import at `device_base`: the bench fills it in place.
    #[cfg(feature = "bench")]
    pub(crate) fn mirror_mut(&mut self, device_base: u64) -> Option<&mut [u8]> {
        let imp = self.imports.get_mut(&device_base)?;
        let n = imp.guest.size_bytes() as usize;
        imp.mirror.bytes_mut().get_mut(..n)
    }

    /// O6: the slot bindings of the last job, in the order first used: each slot (None for an
    /// access with no slot) and the byte offset in its holder's buffer its descriptor was bound at.
    pub fn last_slot_bindings(&self) -> &[(Option<u32>, u64)] {
        &self.last_bindings
    }

    /// M5: waits for the dispatch in flight, if any.
    fn wait_in_flight(&mut self) -> Result<(), VkError> {
        if !self.in_flight {
            return Ok(());
        }
        self.calls += 1;
        // SAFETY: the fence belongs to this device.
        check("vkWaitForFences", unsafe {
            self.ctx
                .device
                .wait_for_fences(&[self.commands.fence], true, 60_000_000_000)
        })?;
        self.in_flight = false;
        Ok(())
    }

    /// M1: imports the mirror of `piece` and returns the device address of its first byte.
    fn import_piece(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, VkError> {
        let info = &self.ctx.info;
        let align = info.min_imported_host_pointer_alignment.max(1);
        let bytes = align_up(piece.size_bytes().max(1), align);
        let refused = |host: u64, why: String| VkError::ImportRefused {
            piece,
            bytes,
            host,
            why,
        };
        if bytes > info.max_memory_allocation_size {
            return Err(refused(
                0,
                format!(
                    "{bytes:#x} bytes is over maxMemoryAllocationSize {:#x}",
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
        memory.read_bytes(piece.start, dst);
        let page = memory.page_bytes();
        let touched: BTreeSet<u64> = mirror.bytes()[..size]
            .chunks(page as usize)
            .enumerate()
            .filter(|(_, c)| c.iter().any(|&b| b != 0))
            .map(|(i, _)| piece.start + i as u64 * page)
            .collect();
        let copied = Instant::now();
        self.import_time.mirror += copied - started;
        let host = mirror.addr();
        let (memory_obj, buffer, device_base) = self
            .import_host(&mirror, bytes)
            .map_err(|e| refused(host, e.to_string()))?;
        self.import_time.vulkan += copied.elapsed();
        self.imports.insert(
            device_base,
            Import {
                guest: piece,
                mirror,
                memory: memory_obj,
                buffer,
                device_base,
                touched,
            },
        );
        self.by_guest.insert(piece.start, device_base);
        Ok(device_base)
    }

    /// The Vulkan half of an import: host pointer properties, imported memory, a buffer bound to
    /// it, its device address.
    fn import_host(
        &mut self,
        mirror: &HostAlloc,
        bytes: u64,
    ) -> Result<(vk::DeviceMemory, vk::Buffer, u64), VkError> {
        let ctx = Arc::clone(&self.ctx);
        let d = &ctx.device;
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        self.calls += 1;
        // SAFETY: ash 0.38 has no wrapper for this call, so it goes through the extension's function
        // table; the device has VK_EXT_external_memory_host enabled, the pointer is the start of a
        // live allocation aligned to minImportedHostPointerAlignment, and props lives across the call.
        let r = unsafe {
            (ctx.host_import.fp().get_memory_host_pointer_properties_ext)(
                d.handle(),
                handle,
                mirror.as_ptr().cast(),
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
        self.calls += 1;
        // SAFETY: the create info and its chain live across the call.
        let buffer = check("vkCreateBuffer", unsafe { d.create_buffer(&create, None) })?;
        self.calls += 1;
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
            .host_pointer(mirror.as_ptr().cast());
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(bytes)
            .memory_type_index(type_index)
            .push_next(&mut import)
            .push_next(&mut flags);
        self.calls += 1;
        // SAFETY: the host pointer and size are multiples of minImportedHostPointerAlignment, the
        // type is one the driver reported for this pointer, and the mirror outlives the memory
        // (release frees the memory before dropping the mirror).
        let memory = check("vkAllocateMemory", unsafe {
            d.allocate_memory(&alloc, None)
        })
        .map_err(fail)?;
        self.calls += 1;
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
        self.calls += 1;
        // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage and memory allocated with DEVICE_ADDRESS.
        let address = unsafe {
            d.get_buffer_device_address(&vk::BufferDeviceAddressInfo::default().buffer(buffer))
        };
        Ok((memory, buffer, address))
    }

    fn destroy_import(&mut self, imp: Import) {
        self.calls += 2;
        // SAFETY: the caller waited for any dispatch reading the import; the buffer goes before
        // its memory, and the memory before the mirror it imports (dropped at the end).
        unsafe {
            self.ctx.device.destroy_buffer(imp.buffer, None);
            self.ctx.device.free_memory(imp.memory, None);
        }
        drop(imp);
    }

    /// The import holding device bytes `start..start + len`, and the offset of `start` in it.
    fn import_at(&self, start: u64, len: u64) -> Option<(&Import, u64)> {
        let (_, imp) = self.imports.range(..=start).next_back()?;
        let off = start - imp.device_base;
        (off.checked_add(len)? <= imp.guest.size_bytes()).then_some((imp, off))
    }

    /// Checks that every table entry lies in a live import (a dangling one would be a wild host
    /// pointer in the shader).
    fn check_entries(&self, slots: &[TableSlot], chunk_bytes: u64) -> Result<(), VkError> {
        for (slot, s) in slots.iter().enumerate() {
            self.check_slot(slot, s, chunk_bytes)?;
        }
        Ok(())
    }

    /// One slot of [`Self::check_entries`].
    fn check_slot(&self, slot: usize, s: &TableSlot, chunk_bytes: u64) -> Result<(), VkError> {
        if s.is_empty() || self.import_at(s.device_addr, chunk_bytes).is_some() {
            return Ok(());
        }
        Err(VkError::DanglingChunk {
            slot,
            guest_chunk: s.guest_chunk,
            device_addr: s.device_addr,
            chunk_bytes,
        })
    }

    fn place(&mut self, table: &ChunkTable, budget: u64) -> Result<(u64, Placement), VkError> {
        self.wait_in_flight()?;
        let chunk = table.chunk_bytes();
        let size = (table.capacity() * SLOT_BYTES) as u64;
        let placement = if size <= budget {
            Placement::DeviceLocal
        } else {
            Placement::HostVisible
        };
        // The slots that differ from the copy on the device, when that copy is still sound (no
        // import released since it was checked, same size and chunk): only those are checked and
        // written. Otherwise every slot is.
        let changed: Option<Vec<usize>> = self
            .table
            .as_ref()
            .filter(|p| {
                p.checked_epoch == self.epoch
                    && p.slots.len() == table.capacity()
                    && p.chunk_bytes == chunk
                    && p.placement == placement
            })
            .map(|p| {
                p.slots
                    .iter()
                    .zip(table.slots())
                    .enumerate()
                    .filter(|(_, (a, b))| a != b)
                    .map(|(i, _)| i)
                    .collect()
            });
        match &changed {
            Some(slots) => {
                for &i in slots {
                    if let Some(s) = table.slots().get(i) {
                        self.check_slot(i, s, chunk)?;
                    }
                }
            }
            None => self.check_entries(table.slots(), chunk)?,
        }
        let reuse =
            matches!(&self.table, Some(t) if t.buf.size == size && t.placement == placement);
        if !reuse {
            if let Some(old) = self.table.take() {
                let ctx = Arc::clone(&self.ctx);
                ctx.destroy_buffer(old.buf, &mut self.calls);
            }
            let ctx = Arc::clone(&self.ctx);
            let host =
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
            let buf = match placement {
                // T6: device-local where it fits; written directly when that memory is also
                // host-visible (lavapipe's one memory type, unified-memory and ReBAR devices),
                // through a staging copy otherwise.
                Placement::DeviceLocal if !ctx.stage_table => ctx
                    .buffer(size, "the chunk table", local | host, true, &mut self.calls)
                    .or_else(|_| {
                        ctx.buffer(size, "the chunk table", local, false, &mut self.calls)
                    })?,
                Placement::DeviceLocal => {
                    ctx.buffer(size, "the chunk table", local, false, &mut self.calls)?
                }
                Placement::HostVisible => {
                    ctx.host_buffer(size, "the chunk table", &mut self.calls)?
                }
            };
            self.table = Some(PlacedTable {
                buf,
                slots: Vec::new(),
                placement,
                chunk_bytes: chunk,
                checked_epoch: self.epoch,
            });
        }
        let epoch = self.epoch;
        let Some(t) = self.table.as_mut() else {
            return Err(VkError::TableNotPlaced {
                capacity: table.capacity(),
            });
        };
        let address = t.buf.address;
        let write_all = !reuse || changed.is_none();
        t.slots = table.slots().to_vec();
        t.chunk_bytes = chunk;
        t.checked_epoch = epoch;
        if t.buf.mapped() {
            let dst = t.buf.bytes_mut();
            let mut put = |i: usize, s: &TableSlot| {
                if let Some(d) = dst.get_mut(i * SLOT_BYTES..(i + 1) * SLOT_BYTES) {
                    d[..8].copy_from_slice(&s.guest_chunk.to_le_bytes());
                    d[8..].copy_from_slice(&s.device_addr.to_le_bytes());
                }
            };
            match changed.as_deref() {
                Some(slots) if !write_all => {
                    for &i in slots {
                        if let Some(s) = table.slots().get(i) {
                            put(i, s);
                        }
                    }
                }
                _ => {
                    for (i, s) in table.slots().iter().enumerate() {
                        put(i, s);
                    }
                }
            }
        } else {
            let raw = t.buf.raw;
            self.staging_upload(raw, &table.to_le_bytes())?;
        }
        Ok((address, placement))
    }

    /// Copies `bytes` into a device-local buffer through a host-visible staging buffer.
    fn staging_upload(&mut self, dst: vk::Buffer, bytes: &[u8]) -> Result<(), VkError> {
        let ctx = Arc::clone(&self.ctx);
        let mut staging = ctx.host_buffer(bytes.len() as u64, "a staging copy", &mut self.calls)?;
        if let Some(s) = staging.bytes_mut().get_mut(..bytes.len()) {
            s.copy_from_slice(bytes);
        }
        let d = &ctx.device;
        let region = [vk::BufferCopy::default().size(bytes.len() as u64)];
        let cmd = self.commands.cmd;
        self.calls += 5;
        // SAFETY: the command buffer is not pending (every submit is waited for); both buffers are
        // live and large enough.
        let recorded = unsafe {
            crate::begin_one_time(d, cmd)
                .map(|_| d.cmd_copy_buffer(cmd, staging.raw, dst, &region))
                .and_then(|_| check("vkEndCommandBuffer", d.end_command_buffer(cmd)))
        };
        let r = recorded.and_then(|_| self.commands.submit_and_wait());
        ctx.destroy_buffer(staging, &mut self.calls);
        r
    }

    /// Copies every guest page with contents into its import's mirror where they differ, and zeroes
    /// mirror pages the guest no longer holds contents for.
    fn sync_mirrors(&mut self, memory: &GuestMemory) {
        let page = memory.page_bytes();
        let mut seen: HashSet<u64> = HashSet::new();
        for (addr, bytes) in memory.content_pages() {
            let Some((_, &base)) = self.by_guest.range(..=addr).next_back() else {
                continue;
            };
            let Some(imp) = self.imports.get_mut(&base) else {
                continue;
            };
            if !imp.guest.contains(addr) {
                continue;
            }
            let off = (addr - imp.guest.start) as usize;
            let len = (imp.guest.end - addr).min(page) as usize;
            if let (Some(dst), Some(src)) = (
                imp.mirror.bytes_mut().get_mut(off..off + len),
                bytes.get(..len),
            ) && dst != src
            {
                dst.copy_from_slice(src);
            }
            imp.touched.insert(addr);
            seen.insert(addr);
        }
        for imp in self.imports.values_mut() {
            let stale: Vec<u64> = imp
                .touched
                .iter()
                .copied()
                .filter(|p| !seen.contains(p))
                .collect();
            for p in stale {
                let off = (p - imp.guest.start) as usize;
                let len = (imp.guest.end - p).min(page) as usize;
                if let Some(dst) = imp.mirror.bytes_mut().get_mut(off..off + len) {
                    dst.fill(0);
                }
                imp.touched.remove(&p);
            }
        }
    }

    /// C1: copies back into guest memory the bytes of every marked chunk that differ from it.
    fn copy_back(&mut self, marks: &[(usize, u32)], chunk: u64, memory: &mut GuestMemory) {
        let page = memory.page_bytes();
        let mut old = vec![0u8; chunk as usize];
        // The chunks the device stored to, by the placed copy of the table (the one it read).
        let marked: Vec<u64> = match &self.table {
            Some(t) => marks
                .iter()
                .filter_map(|&(slot, _)| t.slots.get(slot))
                .map(|s| s.device_addr)
                .collect(),
            None => Vec::new(),
        };
        for device_addr in marked {
            let Some((imp, off)) = self.import_at(device_addr, chunk) else {
                continue;
            };
            let guest = imp.guest.start + off;
            let base = imp.device_base;
            let Some(new) = imp.mirror.bytes().get(off as usize..(off + chunk) as usize) else {
                continue;
            };
            memory.read_bytes(guest, &mut old);
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
                memory.write_bytes(guest + start as u64, &new[start..i]);
                wrote.push(guest + start as u64);
            }
            if let Some(imp) = self.imports.get_mut(&base) {
                for g in wrote {
                    imp.touched.insert(g & !(page - 1));
                }
            }
        }
    }

    fn encode(&self, job: &Job<'_>) -> Result<Encoded, VkError> {
        let align = self.ctx.info.min_storage_buffer_offset_alignment.max(4);
        let k = self.ctx.info.slot_descriptors as usize;
        let padded = |h: usize| {
            job.holders
                .get(h)
                .map_or(0, |r| r.size_bytes().div_ceil(4) * 4)
        };
        // O6: each slot binds its holder at its member offset: exact from an access with no index
        // (offset in the slot = the access's offset), else the lowest offset its accesses reach,
        // aligned down to minStorageBufferOffsetAlignment.
        let mut exact: HashMap<(Option<u32>, usize), u64> = HashMap::new();
        let mut lowest: HashMap<(Option<u32>, usize), u64> = HashMap::new();
        for pa in &job.accesses {
            if let Planned::Bound { holder, offset } = pa.route {
                let key = (pa.access.slot, holder);
                let low = lowest.entry(key).or_insert(offset);
                *low = (*low).min(offset);
                if pa.access.index.is_none()
                    && let Some(m) = offset.checked_sub(pa.access.offset.unwrap_or(0))
                {
                    let e = exact.entry(key).or_insert(m);
                    *e = (*e).min(m);
                }
            }
        }
        let member = |key: (Option<u32>, usize)| -> u64 {
            let low = lowest.get(&key).copied().unwrap_or(0);
            match exact.get(&key) {
                Some(&m) if m % align == 0 && m <= low => m,
                _ => low / align * align,
            }
        };
        let mut records = Vec::with_capacity(job.accesses.len() * record::WORDS);
        let mut values = Vec::new();
        let mut segments: Vec<Segment> = Vec::new();
        let mut cur = Segment {
            first: 0,
            count: 0,
            bindings: Vec::new(),
        };
        let mut cur_keys: Vec<(Option<u32>, usize)> = Vec::new();
        let mut lds: HashMap<u32, u32> = HashMap::new();
        let mut scratch: HashMap<(u32, u32, u32), u32> = HashMap::new();
        let mut slot_offsets: Vec<(Option<u32>, u64)> = Vec::new();
        for (i, pa) in job.accesses.iter().enumerate() {
            let a = pa.access;
            let bad = |why: String| VkError::BadAccess { access: i, why };
            if a.size_bytes == 0 || a.size_bytes > 64 {
                return Err(bad(format!(
                    "{} bytes; an access is 1 to 64 bytes",
                    a.size_bytes
                )));
            }
            let size = u64::from(a.size_bytes);
            let (route, addr, bind) = match pa.route {
                Planned::Bound { holder, offset } => {
                    let key = (a.slot, holder);
                    let m = member(key);
                    if !slot_offsets.contains(&(a.slot, m)) {
                        slot_offsets.push((a.slot, m));
                    }
                    if offset + size > padded(holder) {
                        return Err(bad(format!(
                            "bytes {offset:#x}..{:#x} of holder {holder} pass its {:#x} bytes",
                            offset + size,
                            padded(holder)
                        )));
                    }
                    let idx = match cur_keys.iter().position(|&x| x == key) {
                        Some(p) => p,
                        None => {
                            if cur_keys.len() == k {
                                let next = Segment {
                                    first: i as u32,
                                    count: 0,
                                    bindings: Vec::new(),
                                };
                                segments.push(std::mem::replace(&mut cur, next));
                                cur_keys.clear();
                            }
                            cur_keys.push(key);
                            cur.bindings.push((holder, m));
                            cur_keys.len() - 1
                        }
                    };
                    (record::BOUND, offset - m, idx as u32)
                }
                Planned::Device { address } => {
                    if address.checked_add(size).is_none() {
                        return Err(bad(format!(
                            "{size} bytes at {address:#x} pass the end of the address space"
                        )));
                    }
                    (record::DEVICE, address, 0)
                }
                Planned::Lds { offset } => {
                    if offset + size > u64::from(job.lds_bytes) {
                        return Err(bad(format!(
                            "LDS bytes {offset:#x}..{:#x} pass the {:#x} bytes a workgroup has",
                            offset + size,
                            job.lds_bytes
                        )));
                    }
                    let n = lds.len() as u32;
                    (record::LDS, offset, *lds.entry(a.workgroup).or_insert(n))
                }
                Planned::Scratch { offset } => {
                    if offset + size > u64::from(job.scratch_bytes_per_lane) {
                        return Err(bad(format!(
                            "scratch bytes {offset:#x}..{:#x} pass the {:#x} bytes a lane has",
                            offset + size,
                            job.scratch_bytes_per_lane
                        )));
                    }
                    let n = scratch.len() as u32;
                    let r = *scratch.entry((a.workgroup, a.wave, a.lane)).or_insert(n);
                    (record::SCRATCH, offset, r)
                }
            };
            let unorm = pa.format == Some(Format::R8G8B8A8Unorm);
            let store = a.op == Op::Store;
            let vbase = values.len() as u32;
            if store {
                let nv = if unorm { 4 } else { words_for(a.size_bytes) };
                values.extend((0..nv).map(|j| a.values.get(j).copied().unwrap_or(0)));
            }
            let w0 = route
                | if store { record::STORE } else { 0 }
                | if unorm { record::UNORM } else { 0 };
            records.extend_from_slice(&[
                w0,
                a.size_bytes,
                addr as u32,
                (addr >> 32) as u32,
                bind,
                vbase,
                0,
                0,
            ]);
            cur.count += 1;
        }
        segments.push(cur);
        Ok(Encoded {
            slot_offsets,
            records,
            values,
            segments,
            lds_regions: lds.len(),
            scratch_regions: scratch.len(),
        })
    }

    fn aux_layout(job: &Job<'_>, enc: &Encoded, capacity: usize) -> AuxLayout {
        let n = job.accesses.len() as u64;
        let mut l = AuxLayout::default();
        let mut at = 0u64;
        let mut take = |bytes: u64| {
            let here = at;
            at = align_up(at + bytes.max(16), 256);
            here
        };
        l.records = take(enc.records.len() as u64 * 4);
        l.values = take(enc.values.len() as u64 * 4);
        l.out = take(n * (record::OUT_WORDS as u64) * 4);
        l.log = take(record::LOG_HEADER_BYTES + n * record::LOG_ENTRY_BYTES);
        l.marks = take(capacity as u64 * 4);
        l.lds_stride = align_up(u64::from(job.lds_bytes).max(16), 16);
        l.scratch_stride = align_up(u64::from(job.scratch_bytes_per_lane).max(16), 16);
        l.lds = take(enc.lds_regions as u64 * l.lds_stride);
        l.scratch = take(enc.scratch_regions as u64 * l.scratch_stride);
        l.empty_table = take(EMPTY_TABLE_SLOTS * SLOT_BYTES as u64);
        l.end = at;
        l
    }

    fn ensure_aux(&mut self, bytes: u64) -> Result<(), VkError> {
        if self.aux.as_ref().is_some_and(|a| a.size >= bytes) {
            return Ok(());
        }
        let ctx = Arc::clone(&self.ctx);
        if let Some(old) = self.aux.take() {
            ctx.destroy_buffer(old, &mut self.execute_calls);
        }
        let size = bytes.next_power_of_two().max(1 << 16);
        self.aux = Some(ctx.host_buffer(size, "the replay's buffers", &mut self.execute_calls)?);
        Ok(())
    }

    fn run(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<Outcome, VkError> {
        let has_device = job
            .accesses
            .iter()
            .any(|pa| matches!(pa.route, Planned::Device { .. }));
        // T3/T6: the table the device reads; a job without device accesses does not read it.
        let mut table_push = None;
        if has_device && let Some(t) = table {
            let Some(placed) = self.table.as_ref() else {
                return Err(VkError::TableNotPlaced {
                    capacity: t.capacity(),
                });
            };
            // The device reads the placed copy; the engine must hand over the table it placed. A
            // full comparison costs a pass over the table, so release builds compare the shape.
            let same = placed.slots.len() == t.capacity()
                && (!cfg!(debug_assertions) || placed.slots.as_slice() == t.slots());
            if !same {
                return Err(VkError::TableNotPlaced {
                    capacity: t.capacity(),
                });
            }
            // Imports changed since the placed copy was checked: check it again, so that no
            // entry the shader may follow points at a released mirror.
            if placed.checked_epoch != self.epoch {
                self.check_entries(&placed.slots, t.chunk_bytes())?;
                if let Some(p) = self.table.as_mut() {
                    p.checked_epoch = self.epoch;
                }
            }
            table_push = Some(TablePush {
                address: self.table.as_ref().map_or(0, |p| p.buf.address),
                chunk_shift: t.chunk_shift(),
                capacity_log2: t.capacity_log2(),
                probe_bound: t.probe_bound(),
                multiplier: t.multiplier(),
            });
        }
        if has_device {
            self.sync_mirrors(memory);
        }
        let enc = self.encode(job)?;
        self.last_bindings = enc.slot_offsets.clone();
        let capacity = table.map_or(0, ChunkTable::capacity);
        let layout = Self::aux_layout(job, &enc, capacity);
        self.ensure_aux(layout.end)?;
        let ctx = Arc::clone(&self.ctx);
        // Holders (O8): one buffer each, uploaded from the widened range, with its write mask.
        let mut holders: Vec<(Buf, Buf)> = Vec::new();
        let result = (|| {
            for h in &job.holders {
                let size = h.size_bytes();
                let padded = size.div_ceil(4) * 4;
                let mut data = ctx.host_buffer(padded, "a holder", &mut self.execute_calls)?;
                let mask = match ctx.host_buffer(padded, "a write mask", &mut self.execute_calls) {
                    Ok(m) => m,
                    Err(e) => {
                        ctx.destroy_buffer(data, &mut self.execute_calls);
                        return Err(e);
                    }
                };
                if let Some(dst) = data.bytes_mut().get_mut(..size as usize) {
                    memory.read_bytes(h.start, dst);
                }
                holders.push((data, mask));
            }
            self.fill_aux(&enc, &layout, table.is_none() && has_device)?;
            if !job.accesses.is_empty() {
                self.submit(&enc, &layout, &holders, table_push)?;
            }
            Ok(())
        })();
        let outcome = result.and_then(|()| self.read_outcome(job, table, &layout, &holders));
        for (data, mask) in holders {
            ctx.destroy_buffer(data, &mut self.execute_calls);
            ctx.destroy_buffer(mask, &mut self.execute_calls);
        }
        let outcome = outcome?;
        if has_device && let Some(t) = table {
            self.copy_back(&outcome.marks, t.chunk_bytes(), memory);
        }
        Ok(outcome)
    }

    fn fill_aux(&mut self, enc: &Encoded, l: &AuxLayout, empty_table: bool) -> Result<(), VkError> {
        let Some(aux) = self.aux.as_mut() else {
            return Ok(());
        };
        let bytes = aux.bytes_mut();
        let Some(used) = bytes.get_mut(..l.end as usize) else {
            return Ok(());
        };
        used.fill(0);
        let put = |dst: &mut [u8], at: u64, words: &[u32]| {
            for (i, w) in words.iter().enumerate() {
                let o = at as usize + i * 4;
                if let Some(d) = dst.get_mut(o..o + 4) {
                    d.copy_from_slice(&w.to_le_bytes());
                }
            }
        };
        put(used, l.records, &enc.records);
        put(used, l.values, &enc.values);
        if empty_table {
            let o = l.empty_table as usize;
            if let Some(d) = used.get_mut(o..o + (EMPTY_TABLE_SLOTS as usize) * SLOT_BYTES) {
                d.fill(0xff);
            }
        }
        Ok(())
    }

    fn submit(
        &mut self,
        enc: &Encoded,
        l: &AuxLayout,
        holders: &[(Buf, Buf)],
        table: Option<TablePush>,
    ) -> Result<(), VkError> {
        let ctx = Arc::clone(&self.ctx);
        let d = &ctx.device;
        let k = ctx.info.slot_descriptors;
        let aux_addr = self.aux.as_ref().map_or(0, |a| a.address);
        if self.dummy.is_none() {
            self.dummy =
                Some(ctx.host_buffer(16, "an unused slot binding", &mut self.execute_calls)?);
        }
        let dummy = self.dummy.as_ref().map_or(vk::Buffer::null(), |b| b.raw);
        let n_sets = enc.segments.len() as u32;
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(2 * k * n_sets)];
        self.execute_calls += 1;
        // SAFETY: plain object creation; destroyed below after the fence.
        let pool = check("vkCreateDescriptorPool", unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(n_sets)
                    .pool_sizes(&sizes),
                None,
            )
        })?;
        let r = (|| {
            let layouts = vec![ctx.replay.set_layout; n_sets as usize];
            self.execute_calls += 1;
            // SAFETY: the pool has room for n_sets sets of this layout.
            let sets = check("vkAllocateDescriptorSets", unsafe {
                d.allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(pool)
                        .set_layouts(&layouts),
                )
            })?;
            // O6/O9: each slot binds its holder's buffer at the member offset, its mask at the same.
            let infos: Vec<(Vec<vk::DescriptorBufferInfo>, Vec<vk::DescriptorBufferInfo>)> = enc
                .segments
                .iter()
                .map(|seg| {
                    let mut data = Vec::with_capacity(k as usize);
                    let mut mask = Vec::with_capacity(k as usize);
                    for j in 0..k as usize {
                        match seg
                            .bindings
                            .get(j)
                            .and_then(|&(h, m)| holders.get(h).map(|b| (b, m)))
                        {
                            Some(((db, mb), m)) => {
                                data.push(
                                    vk::DescriptorBufferInfo::default()
                                        .buffer(db.raw)
                                        .offset(m)
                                        .range(vk::WHOLE_SIZE),
                                );
                                mask.push(
                                    vk::DescriptorBufferInfo::default()
                                        .buffer(mb.raw)
                                        .offset(m)
                                        .range(vk::WHOLE_SIZE),
                                );
                            }
                            None => {
                                let unused = vk::DescriptorBufferInfo::default()
                                    .buffer(dummy)
                                    .offset(0)
                                    .range(vk::WHOLE_SIZE);
                                data.push(unused);
                                mask.push(unused);
                            }
                        }
                    }
                    (data, mask)
                })
                .collect();
            let mut writes = Vec::new();
            for (set, (data, mask)) in sets.iter().zip(&infos) {
                writes.push(
                    vk::WriteDescriptorSet::default()
                        .dst_set(*set)
                        .dst_binding(0)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(data),
                );
                writes.push(
                    vk::WriteDescriptorSet::default()
                        .dst_set(*set)
                        .dst_binding(1)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(mask),
                );
            }
            self.execute_calls += 1;
            // SAFETY: every set, buffer and range written is live; no set is in use yet.
            unsafe { d.update_descriptor_sets(&writes, &[]) };
            let mut words = [0u32; 32];
            let put64 = |w: &mut [u32; 32], at: u32, v: u64| {
                w[at as usize] = v as u32;
                w[at as usize + 1] = (v >> 32) as u32;
            };
            put64(&mut words, push::RECORDS, aux_addr + l.records);
            put64(&mut words, push::VALUES, aux_addr + l.values);
            put64(&mut words, push::OUT, aux_addr + l.out);
            put64(&mut words, push::LOG, aux_addr + l.log);
            put64(&mut words, push::MARKS, aux_addr + l.marks);
            put64(&mut words, push::LDS, aux_addr + l.lds);
            put64(&mut words, push::SCRATCH, aux_addr + l.scratch);
            words[push::LDS_STRIDE as usize] = l.lds_stride as u32;
            words[push::SCRATCH_STRIDE as usize] = l.scratch_stride as u32;
            // No table: an empty one of 16 slots, so every lookup misses (T4). A job without device
            // accesses reads neither.
            let t = table.unwrap_or(TablePush {
                address: aux_addr + l.empty_table,
                chunk_shift: 12,
                capacity_log2: 4,
                probe_bound: 1,
                multiplier: 1,
            });
            put64(&mut words, push::TABLE, t.address);
            words[push::CHUNK_SHIFT as usize] = t.chunk_shift;
            words[push::CAPACITY_LOG2 as usize] = t.capacity_log2;
            words[push::PROBE_BOUND as usize] = t.probe_bound;
            put64(&mut words, push::MULTIPLIER, t.multiplier);
            self.execute_calls += 4;
            let cmd = self.commands.cmd;
            // SAFETY: the command buffer is not pending (every submit is waited for).
            unsafe {
                crate::begin_one_time(d, cmd)?;
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, ctx.replay.raw);
            }
            let barrier = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(
                    vk::AccessFlags::SHADER_READ
                        | vk::AccessFlags::SHADER_WRITE
                        | vk::AccessFlags::HOST_READ,
                )];
            for (seg, set) in enc.segments.iter().zip(&sets) {
                words[push::FIRST as usize] = seg.first;
                words[push::COUNT as usize] = seg.count;
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                self.execute_calls += 4;
                // SAFETY: recording into a command buffer in the recording state, with live
                // objects; the push block is 128 bytes, the layout's range.
                unsafe {
                    d.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        ctx.replay.layout,
                        0,
                        &[*set],
                        &[],
                    );
                    d.cmd_push_constants(
                        cmd,
                        ctx.replay.layout,
                        vk::ShaderStageFlags::COMPUTE,
                        0,
                        &bytes,
                    );
                    d.cmd_dispatch(cmd, 1, 1, 1);
                    d.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::HOST,
                        vk::DependencyFlags::empty(),
                        &barrier,
                        &[],
                        &[],
                    );
                }
                self.dispatches += 1;
            }
            self.execute_calls += 3;
            // SAFETY: the command buffer is in the recording state.
            check("vkEndCommandBuffer", unsafe { d.end_command_buffer(cmd) })?;
            self.in_flight = true;
            let r = self.commands.submit_and_wait();
            if r.is_ok() {
                self.in_flight = false;
            }
            r
        })();
        self.execute_calls += 1;
        // SAFETY: the fence has signalled (or the submit failed), so no set of the pool is in use.
        unsafe { d.destroy_descriptor_pool(pool, None) };
        r
    }

    fn read_outcome(
        &self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        l: &AuxLayout,
        holders: &[(Buf, Buf)],
    ) -> Result<Outcome, VkError> {
        let empty: [u8; 0] = [];
        let aux = self.aux.as_ref().map_or(&empty[..], |a| a.bytes());
        let word = |at: u64| -> u32 {
            let o = at as usize;
            aux.get(o..o + 4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let n = job.accesses.len() as u64;
        let logged = u64::from(word(l.log)).min(n);
        let mut escaped: HashMap<u32, u64> = HashMap::new();
        for e in 0..logged {
            let at = l.log + record::LOG_HEADER_BYTES + e * record::LOG_ENTRY_BYTES;
            let addr = u64::from(word(at + 4)) | (u64::from(word(at + 8)) << 32);
            escaped.insert(word(at), addr);
        }
        let slot = |w: u32| (w != record::NO_SLOT).then_some(w as usize);
        let mut accesses = Vec::with_capacity(job.accesses.len());
        for (i, pa) in job.accesses.iter().enumerate() {
            let a = pa.access;
            let o = l.out + i as u64 * (record::OUT_WORDS as u64) * 4;
            let values = match a.op {
                Op::Store => a.values.clone(),
                Op::Load => {
                    let nv = pa
                        .format
                        .map_or(words_for(a.size_bytes), Format::components);
                    (0..nv as u64).map(|j| word(o + j * 4)).collect()
                }
            };
            let res = if matches!(pa.route, Planned::Device { .. }) {
                let s0 = slot(word(o + 64));
                AccessOutcome {
                    values,
                    device_address: s0
                        .map(|_| u64::from(word(o + 72)) | (u64::from(word(o + 76)) << 32)),
                    slots: [s0, slot(word(o + 68))],
                    escaped_at: escaped.get(&(i as u32)).copied(),
                }
            } else {
                AccessOutcome {
                    values,
                    ..AccessOutcome::default()
                }
            };
            accesses.push(res);
        }
        let marks = match table {
            Some(t) => (0..t.capacity())
                .filter_map(|s| {
                    let n = word(l.marks + s as u64 * 4);
                    (n > 0).then_some((s, n))
                })
                .collect(),
            None => Vec::new(),
        };
        let mut out_holders = Vec::with_capacity(holders.len());
        let mut masks = Vec::with_capacity(holders.len());
        for (h, (data, mask)) in job.holders.iter().zip(holders) {
            let padded = (h.size_bytes().div_ceil(4) * 4) as usize;
            out_holders.push(
                data.bytes()
                    .get(..padded)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default(),
            );
            masks.push((0..padded / 4).map(|w| mask.word(w)).collect());
        }
        Ok(Outcome {
            accesses,
            marks,
            holders: out_holders,
            masks,
        })
    }
}

impl Backend for VulkanBackend {
    fn name(&self) -> String {
        self.ctx.device_name()
    }

    fn limits(&self) -> Option<DeviceLimits> {
        Some(self.ctx.limits())
    }

    fn import(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, BackendError> {
        if piece.is_empty() {
            self.calls += 1;
            return Err(BackendError::Import {
                piece,
                why: "an empty piece".into(),
            });
        }
        Ok(self.import_piece(piece, memory)?)
    }

    fn release(&mut self, device_base: u64) -> Result<(), BackendError> {
        // M5: a release waits for any dispatch still reading the mapping.
        self.wait_in_flight()?;
        let Some(imp) = self.imports.remove(&device_base) else {
            self.calls += 1;
            return Err(VkError::UnknownImport { device_base }.into());
        };
        self.by_guest.remove(&imp.guest.start);
        self.destroy_import(imp);
        self.epoch += 1;
        Ok(())
    }

    fn place_table(
        &mut self,
        table: &ChunkTable,
        budget_bytes: u64,
    ) -> Result<(u64, Placement), BackendError> {
        let bytes = (table.capacity() * SLOT_BYTES) as u64;
        self.place(table, budget_bytes)
            .map_err(|e| BackendError::Table {
                bytes,
                why: e.to_string(),
            })
    }

    fn execute(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<Outcome, BackendError> {
        puffin::profile_function!();
        Ok(self.run(job, table, memory)?)
    }

    fn calls(&self) -> u64 {
        self.calls
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        let _ = self.wait_in_flight();
        let ctx = Arc::clone(&self.ctx);
        let imports: Vec<Import> = std::mem::take(&mut self.imports).into_values().collect();
        for imp in imports {
            self.destroy_import(imp);
        }
        let mut n = 0;
        if let Some(t) = self.table.take() {
            ctx.destroy_buffer(t.buf, &mut n);
        }
        if let Some(b) = self.aux.take() {
            ctx.destroy_buffer(b, &mut n);
        }
        if let Some(b) = self.dummy.take() {
            ctx.destroy_buffer(b, &mut n);
        }
        // The commands are destroyed with the fields: nothing is pending on them (waited above).
    }
}
