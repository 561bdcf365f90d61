//! Submissions: [`Commands`], a command pool with one command buffer and a fence, for one
//! submission at a time, and [`begin_one_time`], the start every recording shares.
//!
//! Every submission here is waited for before the next is recorded; the replay's dispatch is also
//! marked in flight while it runs, so that a release can wait for it (M5). The staging copy that
//! uploads a device-local chunk table (T6) is the one one-time submit made here.

use std::sync::Arc;
#[cfg(any(feature = "demo", test))]
use std::time::{Duration, Instant};

use ash::vk;

use crate::device::Context;
use crate::{VkError, check};

/// How long a wait on a fence may take: ten minutes. A device's own watchdog ends a hung dispatch
/// long before; the bound is for lavapipe, which compiles a pipeline's shaders on its first
/// dispatch, and whose first full-screen traversal pass has taken a minute on a loaded 2-core
/// machine.
const WAIT_NS: u64 = 600_000_000_000;

/// Resets `cmd` and begins it for one submit, the start every recording here shares.
///
/// # Safety
/// `cmd` must come from a pool of `device` and must not be pending (its last submit waited for).
pub unsafe fn begin_one_time(device: &ash::Device, cmd: vk::CommandBuffer) -> Result<(), VkError> {
    // SAFETY: the caller guarantees `cmd` is `device`'s and not pending.
    unsafe {
        check(
            "vkResetCommandBuffer",
            device.reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty()),
        )?;
        check(
            "vkBeginCommandBuffer",
            device.begin_command_buffer(
                cmd,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            ),
        )
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
    /// A submitted dispatch not yet waited for (M5: a release waits for it).
    in_flight: bool,
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
            in_flight: false,
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

    /// Submits the recorded command buffer and waits for it, holding the queue.
    pub(crate) fn submit_and_wait(&self) -> Result<(), VkError> {
        let d = &self.ctx.device;
        let cmds = [self.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let queue = self.ctx.queue.lock().map_err(|_| VkError::QueuePoisoned {
            call: "vkQueueSubmit",
        })?;
        // SAFETY: the command buffer is recorded and executable; the fence is unsignalled; the
        // queue is externally synchronised by the lock held here.
        check("vkQueueSubmit", unsafe {
            d.queue_submit(*queue, &submit, self.fence)
        })?;
        // SAFETY: the fence belongs to this device; the bound is far longer than any replay takes.
        check("vkWaitForFences", unsafe {
            d.wait_for_fences(&[self.fence], true, WAIT_NS)
        })?;
        // SAFETY: the fence has signalled, so nothing waits on it.
        check("vkResetFences", unsafe { d.reset_fences(&[self.fence]) })
    }

    /// Ends the recording with a barrier that makes what `stages` wrote (`writes`) visible to the
    /// host, submits it and waits: the end of every recording whose results the host reads back.
    /// Returns the host's time for the submit and the wait.
    ///
    /// # Safety
    /// [`Self::cmd`] must be in the recording state, and every object it uses must stay live until
    /// this returns.
    #[cfg(any(feature = "demo", test))]
    pub(crate) unsafe fn finish_for_host(
        &self,
        stages: vk::PipelineStageFlags,
        writes: vk::AccessFlags,
    ) -> Result<Duration, VkError> {
        let d = &self.ctx.device;
        // SAFETY: the caller guarantees the command buffer is recording.
        unsafe {
            d.cmd_pipeline_barrier(
                self.cmd,
                stages,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[vk::MemoryBarrier::default()
                    .src_access_mask(writes)
                    .dst_access_mask(vk::AccessFlags::HOST_READ)],
                &[],
                &[],
            );
            check("vkEndCommandBuffer", d.end_command_buffer(self.cmd))?;
        }
        let started = Instant::now();
        self.submit_and_wait()?;
        Ok(started.elapsed())
    }

    /// [`Self::submit_and_wait`] for a dispatch that reads imports: in flight until the wait
    /// succeeds, so that a failed wait leaves it for [`Self::wait_in_flight`].
    pub(crate) fn submit_dispatch(&mut self) -> Result<(), VkError> {
        self.in_flight = true;
        let r = self.submit_and_wait();
        if r.is_ok() {
            self.in_flight = false;
        }
        r
    }

    /// M5: waits for the dispatch in flight, if any; one Vulkan call into `calls`.
    pub(crate) fn wait_in_flight(&mut self, calls: &mut u64) -> Result<(), VkError> {
        if !self.in_flight {
            return Ok(());
        }
        *calls += 1;
        // SAFETY: the fence belongs to this device; the bound is far longer than any replay takes.
        check("vkWaitForFences", unsafe {
            self.ctx
                .device
                .wait_for_fences(&[self.fence], true, WAIT_NS)
        })?;
        self.in_flight = false;
        Ok(())
    }

    /// Copies `bytes` into the device-local buffer `dst` through a host-visible staging buffer, in
    /// one submit waited for (T6 where device-local memory is not host-visible).
    pub(crate) fn upload(
        &self,
        dst: vk::Buffer,
        bytes: &[u8],
        calls: &mut u64,
    ) -> Result<(), VkError> {
        let ctx = &self.ctx;
        let mut staging = ctx.host_buffer(bytes.len() as u64, "a staging copy", calls)?;
        if let Some(s) = staging.bytes_mut().get_mut(..bytes.len()) {
            s.copy_from_slice(bytes);
        }
        let d = &ctx.device;
        let region = [vk::BufferCopy::default().size(bytes.len() as u64)];
        let cmd = self.cmd;
        *calls += 5;
        // SAFETY: the command buffer is not pending (every submit is waited for); both buffers are
        // live and large enough.
        let recorded = unsafe {
            begin_one_time(d, cmd)
                .map(|_| d.cmd_copy_buffer(cmd, staging.raw, dst, &region))
                .and_then(|_| check("vkEndCommandBuffer", d.end_command_buffer(cmd)))
        };
        let r = recorded.and_then(|_| self.submit_and_wait());
        if r.is_err() {
            // The copy may still run after a failed wait: the staging buffer outlives it.
            ctx.wait_queue_idle();
        }
        ctx.destroy_buffer(staging, calls);
        r
    }
}

impl Commands {
    /// Copies `data` into the device-local buffer `dst` in pieces, each `(dst_offset, src_offset)`
    /// of `piece` bytes, through one staging buffer and one submit waited for: the table's changed
    /// slots (T6), in proportion to what changed.
    pub(crate) fn upload_slots(
        &self,
        dst: vk::Buffer,
        data: &[u8],
        pieces: &[(usize, usize)],
        piece: usize,
        calls: &mut u64,
    ) -> Result<(), VkError> {
        if pieces.is_empty() {
            return Ok(());
        }
        let ctx = &self.ctx;
        let mut staging = ctx.host_buffer(data.len() as u64, "a staging copy", calls)?;
        if let Some(s) = staging.bytes_mut().get_mut(..data.len()) {
            s.copy_from_slice(data);
        }
        // Neighbouring slots go as one region.
        let mut regions: Vec<vk::BufferCopy> = Vec::with_capacity(pieces.len());
        for &(dst_offset, src_offset) in pieces {
            match regions.last_mut() {
                Some(r)
                    if r.dst_offset + r.size == dst_offset as u64
                        && r.src_offset + r.size == src_offset as u64 =>
                {
                    r.size += piece as u64;
                }
                _ => regions.push(
                    vk::BufferCopy::default()
                        .src_offset(src_offset as u64)
                        .dst_offset(dst_offset as u64)
                        .size(piece as u64),
                ),
            }
        }
        let d = &ctx.device;
        let cmd = self.cmd;
        *calls += 5;
        // SAFETY: the command buffer is not pending (every submit is waited for); both buffers are
        // live and every region lies inside them (the slots' offsets, the staging copy's bytes).
        let recorded = unsafe {
            begin_one_time(d, cmd)
                .map(|_| d.cmd_copy_buffer(cmd, staging.raw, dst, &regions))
                .and_then(|_| check("vkEndCommandBuffer", d.end_command_buffer(cmd)))
        };
        let r = recorded.and_then(|_| self.submit_and_wait());
        if r.is_err() {
            ctx.wait_queue_idle();
        }
        ctx.destroy_buffer(staging, calls);
        r
    }
}

impl Drop for Commands {
    fn drop(&mut self) {
        if self.in_flight {
            // A wait that failed left the dispatch running: nothing it uses is freed under it.
            self.ctx.wait_queue_idle();
        }
        // SAFETY: the owner waited for every submission, so nothing is pending on the fence or the
        // buffer; destroying a null fence does nothing; the pool frees its buffer.
        unsafe {
            self.ctx.device.destroy_fence(self.fence, None);
            self.ctx.device.destroy_command_pool(self.pool, None);
        }
    }
}
