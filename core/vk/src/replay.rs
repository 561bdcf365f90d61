//! The replay dispatch: one prepared job run as one or more dispatches of the replay shader
//! ([`crate::spirv`]), serially, in stream order, and read back as the same [`Outcome`] the CPU
//! reference gives.
//!
//! [`Replay`] owns the per-job auxiliary buffer (records, store values, outputs, the escape log of
//! T4, the mark words of C1, the LDS and scratch regions, an empty table) and uploads each holder
//! from its widened range with a write mask beside it (O8). Each segment's descriptor set binds
//! every slot's holder at its member offset and its mask at the same offset (O6, O9). It never
//! touches the imports or the table: the backend syncs the mirrors before and copies marked chunks
//! back after (C1).

use std::collections::HashMap;
use std::sync::Arc;

use ash::vk;

use crate::buffer::Buf;
use crate::commands::Commands;
use crate::device::Context;
use crate::encode::{Encoded, Segment, encode};
use crate::push::PushBlock;
use crate::spirv::{push, record};
use crate::table::{EMPTY_TABLE_SLOTS, TablePush};
use crate::{VkError, check};
use dispatchscope_core::chunk_table::{
    ChunkTable, MARK_BLOCK_SLOTS, SLOT_BYTES, mark_buffer_words,
};
use dispatchscope_core::exec::{AccessOutcome, Job, Outcome, Planned};
use dispatchscope_core::input::{Format, Op, words_for};
use dispatchscope_core::memory::GuestMemory;

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

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl AuxLayout {
    /// The regions `job`, encoded as `enc`, needs, with a mark word for each of `capacity` slots
    /// and their summary (C1, `mark_buffer_words`).
    fn of(job: &Job<'_>, enc: &Encoded, capacity: usize) -> Self {
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
        l.marks = take(mark_buffer_words(capacity) as u64 * 4);
        l.lds_stride = align_up(u64::from(job.lds_bytes).max(16), 16);
        l.scratch_stride = align_up(u64::from(job.scratch_bytes_per_lane).max(16), 16);
        l.lds = take(enc.lds_regions as u64 * l.lds_stride);
        l.scratch = take(enc.scratch_regions as u64 * l.scratch_stride);
        l.empty_table = take(EMPTY_TABLE_SLOTS * SLOT_BYTES as u64);
        l.end = at;
        l
    }
}

/// O8: one holder's buffer, uploaded from its widened range, and its write mask.
struct Holder {
    data: Buf,
    mask: Buf,
}

/// The replay's buffers and counters. Destroys its buffers on drop; the owner waits for any
/// dispatch using them first.
pub(crate) struct Replay {
    ctx: Arc<Context>,
    aux: Option<Buf>,
    /// What a descriptor of a slot a segment does not use binds.
    dummy: Option<Buf>,
    /// Vulkan calls made by the replay.
    pub(crate) calls: u64,
    /// Dispatches submitted.
    pub(crate) dispatches: u64,
    /// O6: the slot bindings of the last job.
    pub(crate) last_bindings: Vec<(Option<u32>, u64)>,
}

/// A storage-buffer descriptor of `buffer` from `offset` to its end.
fn whole(buffer: vk::Buffer, offset: u64) -> vk::DescriptorBufferInfo {
    vk::DescriptorBufferInfo::default()
        .buffer(buffer)
        .offset(offset)
        .range(vk::WHOLE_SIZE)
}

impl Replay {
    /// No buffers yet.
    pub(crate) fn new(ctx: &Arc<Context>) -> Self {
        Self {
            ctx: Arc::clone(ctx),
            aux: None,
            dummy: None,
            calls: 0,
            dispatches: 0,
            last_bindings: Vec::new(),
        }
    }

    /// Runs `job` with the holders read from `memory`. `table` is the job's chunk table, whose push
    /// words are `table_push` when the job reads it; `empty_table` gives the shader an empty one
    /// instead (a job with device accesses and no table: every lookup misses, T4).
    pub(crate) fn run(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        table_push: Option<TablePush>,
        empty_table: bool,
        memory: &GuestMemory,
        commands: &mut Commands,
    ) -> Result<Outcome, VkError> {
        let info = &self.ctx.info;
        let enc = encode(
            job,
            info.min_storage_buffer_offset_alignment,
            info.slot_descriptors as usize,
        )?;
        self.last_bindings = enc.slot_offsets.clone();
        let capacity = table.map_or(0, ChunkTable::capacity);
        let layout = AuxLayout::of(job, &enc, capacity);
        self.ensure_aux(layout.end)?;
        let ctx = Arc::clone(&self.ctx);
        let mut holders: Vec<Holder> = Vec::new();
        let result = (|| {
            for h in &job.holders {
                let size = h.size_bytes();
                let padded = size.div_ceil(4) * 4;
                let mut data = ctx.host_buffer(padded, "a holder", &mut self.calls)?;
                let mask = match ctx.host_buffer(padded, "a write mask", &mut self.calls) {
                    Ok(m) => m,
                    Err(e) => {
                        ctx.destroy_buffer(data, &mut self.calls);
                        return Err(e);
                    }
                };
                if let Some(dst) = data.bytes_mut().get_mut(..size as usize)
                    && let Err(e) = memory.read_bytes(h.start, dst)
                {
                    ctx.destroy_buffer(data, &mut self.calls);
                    ctx.destroy_buffer(mask, &mut self.calls);
                    return Err(VkError::HostRead(Box::new(e)));
                }
                holders.push(Holder { data, mask });
            }
            self.fill_aux(&enc, &layout, empty_table);
            if !job.accesses.is_empty() {
                self.submit(&enc, &layout, &holders, table_push, commands)?;
            }
            Ok(())
        })();
        let outcome = result.and_then(|()| self.read_outcome(job, table, &layout, &holders));
        for h in holders {
            ctx.destroy_buffer(h.data, &mut self.calls);
            ctx.destroy_buffer(h.mask, &mut self.calls);
        }
        outcome
    }

    fn ensure_aux(&mut self, bytes: u64) -> Result<(), VkError> {
        if self.aux.as_ref().is_some_and(|a| a.size >= bytes) {
            return Ok(());
        }
        let ctx = Arc::clone(&self.ctx);
        if let Some(old) = self.aux.take() {
            ctx.destroy_buffer(old, &mut self.calls);
        }
        let size = bytes.next_power_of_two().max(1 << 16);
        self.aux = Some(ctx.host_buffer(size, "the replay's buffers", &mut self.calls)?);
        Ok(())
    }

    /// Zeroes the used part of the auxiliary buffer and writes the records, the values and, where
    /// asked, the empty table (every slot the empty key).
    fn fill_aux(&mut self, enc: &Encoded, l: &AuxLayout, empty_table: bool) {
        let Some(aux) = self.aux.as_mut() else {
            return;
        };
        let bytes = aux.bytes_mut();
        let Some(used) = bytes.get_mut(..l.end as usize) else {
            return;
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
    }

    /// The push block of every segment but its first access and count: the auxiliary regions and
    /// the table (T3; with no table, the empty one in the auxiliary buffer).
    fn push_block(&self, l: &AuxLayout, table: Option<TablePush>) -> PushBlock {
        let aux_addr = self.aux.as_ref().map_or(0, |a| a.address);
        let mut words = PushBlock::default();
        words.set64(push::RECORDS, aux_addr + l.records);
        words.set64(push::VALUES, aux_addr + l.values);
        words.set64(push::OUT, aux_addr + l.out);
        words.set64(push::LOG, aux_addr + l.log);
        words.set64(push::MARKS, aux_addr + l.marks);
        words.set64(push::LDS, aux_addr + l.lds);
        words.set64(push::SCRATCH, aux_addr + l.scratch);
        words.set(push::LDS_STRIDE, l.lds_stride as u32);
        words.set(push::SCRATCH_STRIDE, l.scratch_stride as u32);
        // No table: an empty one of 16 slots, so every lookup misses (T4). A job without device
        // accesses reads neither.
        table
            .unwrap_or(TablePush::empty(aux_addr + l.empty_table))
            .write(&mut words);
        words
    }

    /// Records one dispatch per segment into a descriptor pool of its own, submits them and waits.
    fn submit(
        &mut self,
        enc: &Encoded,
        l: &AuxLayout,
        holders: &[Holder],
        table: Option<TablePush>,
        commands: &mut Commands,
    ) -> Result<(), VkError> {
        let ctx = Arc::clone(&self.ctx);
        let d = &ctx.device;
        let k = ctx.info.slot_descriptors;
        if self.dummy.is_none() {
            self.dummy = Some(ctx.host_buffer(16, "an unused slot binding", &mut self.calls)?);
        }
        let n_sets = enc.segments.len() as u32;
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(2 * k * n_sets)];
        self.calls += 1;
        // SAFETY: plain object creation; destroyed below after the fence.
        let pool = check("vkCreateDescriptorPool", unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(n_sets)
                    .pool_sizes(&sizes),
                None,
            )
        })?;
        let r = self
            .descriptor_sets(pool, &enc.segments, holders)
            .and_then(|sets| {
                let words = self.push_block(l, table);
                self.record(&enc.segments, &sets, words, commands)
            });
        self.calls += 1;
        // SAFETY: the fence has signalled (or the submit failed), so no set of the pool is in use.
        unsafe { d.destroy_descriptor_pool(pool, None) };
        r
    }

    /// O6/O9: one set per segment from `pool`, each slot binding its holder's buffer at the member
    /// offset and its mask at the same; a slot the segment does not use binds the dummy buffer.
    fn descriptor_sets(
        &mut self,
        pool: vk::DescriptorPool,
        segments: &[Segment],
        holders: &[Holder],
    ) -> Result<Vec<vk::DescriptorSet>, VkError> {
        let ctx = Arc::clone(&self.ctx);
        let d = &ctx.device;
        let k = ctx.info.slot_descriptors as usize;
        let dummy = self.dummy.as_ref().map_or(vk::Buffer::null(), |b| b.raw);
        let layouts = vec![ctx.replay.set_layout; segments.len()];
        self.calls += 1;
        // The pool has room for n_sets (one per segment) sets of this layout.
        let sets = crate::pipeline::allocate_sets(d, pool, &layouts)?;
        let infos: Vec<[Vec<vk::DescriptorBufferInfo>; 2]> = segments
            .iter()
            .map(|seg| {
                let mut data = Vec::with_capacity(k);
                let mut mask = Vec::with_capacity(k);
                for j in 0..k {
                    let bound = seg
                        .bindings
                        .get(j)
                        .and_then(|&(h, m)| holders.get(h).map(|b| (b, m)));
                    let (d, m) = match bound {
                        Some((h, m)) => (whole(h.data.raw, m), whole(h.mask.raw, m)),
                        None => (whole(dummy, 0), whole(dummy, 0)),
                    };
                    data.push(d);
                    mask.push(m);
                }
                [data, mask]
            })
            .collect();
        let mut writes = Vec::new();
        for (set, pair) in sets.iter().zip(&infos) {
            for (binding, buffers) in (0u32..).zip(pair) {
                writes.push(
                    vk::WriteDescriptorSet::default()
                        .dst_set(*set)
                        .dst_binding(binding)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(buffers),
                );
            }
        }
        self.calls += 1;
        // SAFETY: every set, buffer and range written is live; no set is in use yet.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        Ok(sets)
    }

    /// Records a dispatch of the replay per segment, with a barrier after each, then submits the
    /// command buffer and waits for it (in flight meanwhile, M5).
    fn record(
        &mut self,
        segments: &[Segment],
        sets: &[vk::DescriptorSet],
        mut words: PushBlock,
        commands: &mut Commands,
    ) -> Result<(), VkError> {
        let ctx = Arc::clone(&self.ctx);
        let d = &ctx.device;
        self.calls += 4;
        let cmd = commands.cmd;
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
        for (seg, set) in segments.iter().zip(sets) {
            words.set(push::FIRST, seg.first);
            words.set(push::COUNT, seg.count);
            let bytes = words.bytes();
            self.calls += 4;
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
        self.calls += 3;
        // SAFETY: the command buffer is in the recording state.
        check("vkEndCommandBuffer", unsafe { d.end_command_buffer(cmd) })?;
        commands.submit_dispatch()
    }

    /// Reads the outcome back: each access's values, slots and device address, the escapes (T4),
    /// the marks of `table`'s slots (C1), and each holder's bytes and write mask (O9).
    fn read_outcome(
        &self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        l: &AuxLayout,
        holders: &[Holder],
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
        // C1 as the backend reads it: only the blocks the summary names (a mark the shader left
        // without its summary word is lost here, as it would be there).
        let marks = match table {
            Some(t) => {
                let slots = t.capacity();
                let summary = l.marks + slots as u64 * 4;
                (0..slots.div_ceil(MARK_BLOCK_SLOTS))
                    .filter(|b| word(summary + *b as u64 * 4) != 0)
                    .flat_map(|b| b * MARK_BLOCK_SLOTS..((b + 1) * MARK_BLOCK_SLOTS).min(slots))
                    .filter_map(|s| {
                        let n = word(l.marks + s as u64 * 4);
                        (n > 0).then_some((s, n))
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let mut out_holders = Vec::with_capacity(holders.len());
        let mut masks = Vec::with_capacity(holders.len());
        for (h, Holder { data, mask }) in job.holders.iter().zip(holders) {
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
            failures: Vec::new(),
            accesses,
            marks,
            holders: out_holders,
            masks,
        })
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        for b in [self.aux.take(), self.dummy.take()].into_iter().flatten() {
            self.ctx.destroy_buffer(b, &mut 0);
        }
    }
}
