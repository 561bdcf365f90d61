//! The push block as the host fills it (T3): 32 little-endian words, written by the word indices of
//! [`crate::spirv::push`], a 64-bit value as two words, low first. Nothing here calls Vulkan.

/// Words in the push block: 128 bytes, the least every device gives.
pub(crate) const WORDS: usize = 32;

/// One push block, zeroed until written.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PushBlock([u32; WORDS]);

impl PushBlock {
    /// Word `at`.
    pub(crate) fn set(&mut self, at: u32, v: u32) {
        self.0[at as usize] = v;
    }

    /// Words `at` (the low half) and `at + 1` (the high half).
    pub(crate) fn set64(&mut self, at: u32, v: u64) {
        self.set(at, v as u32);
        self.set(at + 1, (v >> 32) as u32);
    }

    /// The block as `vkCmdPushConstants` takes it.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}
