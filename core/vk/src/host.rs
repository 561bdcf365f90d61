//! Page-aligned host allocations: the mirrors that guest pieces are imported from.
//!
//! [`dispatchscope_core::memory::GuestMemory`] keeps sparse per-page contents, not page-aligned host allocations,
//! so each imported piece gets a mirror here, aligned to the import alignment, that the driver reads
//! and writes through `VK_EXT_external_memory_host`. Nothing here calls Vulkan.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

use crate::VkError;

/// Zeroed host memory with a fixed alignment, freed on drop.
#[derive(Debug)]
pub(crate) struct HostAlloc {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a HostAlloc owns its allocation exclusively (like a Box<[u8]>); moving it to another thread
// moves that ownership, and the device only reads it while the owner waits on the dispatch's fence.
unsafe impl Send for HostAlloc {}

impl HostAlloc {
    /// `bytes` (rounded up to `align`) of zeroed memory aligned to `align` (a power of two).
    pub(crate) fn zeroed(bytes: u64, align: u64) -> Result<Self, VkError> {
        let err = VkError::HostAlloc { bytes, align };
        let size =
            usize::try_from(bytes.max(1).div_ceil(align) * align).map_err(|_| err.clone())?;
        let layout =
            Layout::from_size_align(size, usize::try_from(align).map_err(|_| err.clone())?)
                .map_err(|_| err.clone())?;
        // SAFETY: the layout has a non-zero size (at least one alignment unit).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(err)?;
        Ok(Self { ptr, layout })
    }

    /// Bytes allocated.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// The host address of the first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The raw pointer, for the driver.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: ptr points at `len` initialised (zeroed at allocation) bytes owned by self; the
        // device writes them only during a dispatch, which the owner waits for before reading.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, writable.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference on the host.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout and is freed once; the backend frees the
        // imported VkDeviceMemory over it before dropping it (see `Import::destroy`).
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    #[test]
    fn mirrors_are_aligned_zeroed_and_rounded_up() {
        let mut a = HostAlloc::zeroed(0x1234, 0x1000).unwrap();
        assert_eq!(a.addr() % 0x1000, 0);
        assert_eq!(a.len(), 0x2000);
        assert!(a.bytes().iter().all(|&b| b == 0));
        a.bytes_mut()[5] = 7;
        assert_eq!(a.bytes()[5], 7);
    }
}
