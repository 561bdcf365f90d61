//! The one error type of the backend, [`VkError`], and [`check`], the one mapping every `vk::Result`
//! passes through on its way to a [`VkError::Call`] that names the call, the code and its meaning.
//!
//! Each message names the offending value (the piece, the slot, the module); nothing here calls Vulkan.

use ash::vk;
use thiserror::Error;

use dispatchscope_core::addr::ByteRange;

/// A failure of the Vulkan backend. Each message names the call, the piece, the module or the value.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VkError {
    /// The Vulkan loader library could not be loaded.
    #[error("no Vulkan loader could be loaded (libvulkan.so.1; Debian: libvulkan1): {why}")]
    NoLoader {
        /// The loader's error.
        why: String,
    },
    /// No device has what the backend needs.
    #[error(
        "no Vulkan device supports Vulkan 1.2 with VK_EXT_external_memory_host, bufferDeviceAddress, shaderInt64 and shaderStorageBufferArrayDynamicIndexing (Debian: mesa-vulkan-drivers gives lavapipe); devices seen: {seen}"
    )]
    NoDevice {
        /// Each device seen and what it lacked.
        seen: String,
    },
    /// The host's own device ([`crate::Context::from_host`]) lacks what the backend needs.
    #[error("the emulator's Vulkan device cannot run dispatchscope's backend: it lacks {lacks}")]
    HostDeviceLacks {
        /// Everything it lacks, named.
        lacks: String,
    },
    /// Validation was asked for, but the layer is not installed.
    #[error(
        "the validation layer VK_LAYER_KHRONOS_validation was asked for but is not installed (Debian: vulkan-validationlayers)"
    )]
    NoValidationLayer,
    /// A Vulkan call failed.
    #[error("{call} failed with {code}: {meaning}")]
    Call {
        /// The Vulkan function.
        call: &'static str,
        /// The `VkResult` it returned, kept so that callers match on it (a lost device, memory
        /// exhausted) rather than on its name.
        result: vk::Result,
        /// The `VkResult` name.
        code: String,
        /// What the code means.
        meaning: &'static str,
    },
    /// The queue's lock was poisoned: another thread panicked while it held the queue.
    #[error(
        "{call}: the queue's lock is poisoned (another thread panicked while it held the queue)"
    )]
    QueuePoisoned {
        /// The call that wanted the queue.
        call: &'static str,
    },
    /// Guest bytes the pass needs could not be read from the emulator's memory (host mode): the
    /// pass does not run on made-up bytes.
    #[error("{0}")]
    HostRead(Box<dispatchscope_core::host::HostError>),
    /// The driver refused to import a piece (M1, M3).
    #[error(
        "importing guest piece {piece} ({bytes:#x} bytes at host address {host:#x}) failed: {why}"
    )]
    ImportRefused {
        /// The guest piece.
        piece: ByteRange,
        /// Bytes imported (the piece rounded up to minImportedHostPointerAlignment).
        bytes: u64,
        /// The host address of the mirror.
        host: u64,
        /// Why.
        why: String,
    },
    /// No memory type fits.
    #[error(
        "no memory type for {what}: the driver allows types {type_bits:#b}, none of them {wanted}"
    )]
    NoMemoryType {
        /// What the memory is for.
        what: &'static str,
        /// The allowed memory-type bits.
        type_bits: u32,
        /// The properties wanted.
        wanted: &'static str,
    },
    /// The host could not allocate a page-aligned mirror.
    #[error("the host could not allocate {bytes:#x} bytes aligned to {align:#x}")]
    HostAlloc {
        /// Bytes.
        bytes: u64,
        /// Alignment.
        align: u64,
    },
    /// A module could not be built.
    #[error("building SPIR-V module {module}: {why}")]
    Build {
        /// The module.
        module: &'static str,
        /// Why.
        why: String,
    },
    /// A module failed spirv-val, or an executable of SPIRV-Tools did not run (feature `tools`:
    /// the debugger's tools and the tests, never an engine call).
    #[error("SPIR-V module {module} failed validation (spirv-val, Debian: spirv-tools): {why}")]
    Invalid {
        /// The module.
        module: &'static str,
        /// spirv-val's message.
        why: String,
    },
    /// A table entry points outside every live import: the shader would dereference a dangling host
    /// pointer (on lavapipe a device address is the raw host pointer), so the job is not run.
    #[error(
        "table slot {slot} maps guest chunk {guest_chunk:#x} to device {device_addr:#x}..{end:#x}, which no live import holds (T2)",
        end = device_addr + chunk_bytes
    )]
    DanglingChunk {
        /// The table slot.
        slot: usize,
        /// The chunk.
        guest_chunk: u64,
        /// Its device address.
        device_addr: u64,
        /// Bytes per chunk.
        chunk_bytes: u64,
    },
    /// The job addresses the chunk table, but the table differs from the one placed.
    #[error(
        "the chunk table of {capacity} slots handed to execute is not the one placed on the device (T6: place_table after every change)"
    )]
    TableNotPlaced {
        /// Slots of the table handed over.
        capacity: usize,
    },
    /// An access the replay cannot carry out safely: it would leave its buffer.
    #[error("access {access}: {why}")]
    BadAccess {
        /// The access index.
        access: usize,
        /// Why.
        why: String,
    },
    /// No import starts at this device address.
    #[error("no import starts at device address {device_base:#x}")]
    UnknownImport {
        /// The address.
        device_base: u64,
    },
}

/// The name and meaning of a `VkResult`: the one mapping every Vulkan error passes through.
pub fn describe(result: vk::Result) -> (String, &'static str) {
    let (name, meaning) = match result {
        vk::Result::SUCCESS => ("VK_SUCCESS", "success"),
        vk::Result::NOT_READY => ("VK_NOT_READY", "a fence or query has not yet completed"),
        vk::Result::TIMEOUT => ("VK_TIMEOUT", "a wait did not complete in the time allowed"),
        vk::Result::INCOMPLETE => ("VK_INCOMPLETE", "a return array was too small"),
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => (
            "VK_ERROR_OUT_OF_HOST_MEMORY",
            "a host memory allocation failed",
        ),
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => (
            "VK_ERROR_OUT_OF_DEVICE_MEMORY",
            "a device memory allocation failed",
        ),
        vk::Result::ERROR_INITIALIZATION_FAILED => (
            "VK_ERROR_INITIALIZATION_FAILED",
            "initialization of an object could not be completed",
        ),
        vk::Result::ERROR_DEVICE_LOST => (
            "VK_ERROR_DEVICE_LOST",
            "the logical or physical device has been lost",
        ),
        vk::Result::ERROR_MEMORY_MAP_FAILED => (
            "VK_ERROR_MEMORY_MAP_FAILED",
            "mapping a memory object failed",
        ),
        vk::Result::ERROR_LAYER_NOT_PRESENT => (
            "VK_ERROR_LAYER_NOT_PRESENT",
            "a requested layer is not present",
        ),
        vk::Result::ERROR_EXTENSION_NOT_PRESENT => (
            "VK_ERROR_EXTENSION_NOT_PRESENT",
            "a requested extension is not supported",
        ),
        vk::Result::ERROR_FEATURE_NOT_PRESENT => (
            "VK_ERROR_FEATURE_NOT_PRESENT",
            "a requested feature is not supported",
        ),
        vk::Result::ERROR_INCOMPATIBLE_DRIVER => (
            "VK_ERROR_INCOMPATIBLE_DRIVER",
            "the requested Vulkan version is not supported by the driver",
        ),
        vk::Result::ERROR_TOO_MANY_OBJECTS => (
            "VK_ERROR_TOO_MANY_OBJECTS",
            "too many objects of the type have been created",
        ),
        vk::Result::ERROR_FORMAT_NOT_SUPPORTED => (
            "VK_ERROR_FORMAT_NOT_SUPPORTED",
            "a requested format is not supported",
        ),
        vk::Result::ERROR_FRAGMENTED_POOL => (
            "VK_ERROR_FRAGMENTED_POOL",
            "a pool allocation failed due to fragmentation",
        ),
        vk::Result::ERROR_OUT_OF_POOL_MEMORY => (
            "VK_ERROR_OUT_OF_POOL_MEMORY",
            "a descriptor pool has no room left",
        ),
        vk::Result::ERROR_INVALID_EXTERNAL_HANDLE => (
            "VK_ERROR_INVALID_EXTERNAL_HANDLE",
            "the driver refused the external handle (here: the host pointer of an import)",
        ),
        vk::Result::ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS => (
            "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
            "a buffer could not be given the device address asked for",
        ),
        vk::Result::ERROR_UNKNOWN => (
            "VK_ERROR_UNKNOWN",
            "an unknown error, from the driver or the application",
        ),
        other => {
            return (
                format!("VkResult({})", other.as_raw()),
                "a result this backend does not name",
            );
        }
    };
    (name.to_owned(), meaning)
}

/// Turns the result of the Vulkan call `call` into a named [`VkError`].
pub fn check<T>(call: &'static str, result: Result<T, vk::Result>) -> Result<T, VkError> {
    result.map_err(|r| {
        let (code, meaning) = describe(r);
        VkError::Call {
            call,
            result: r,
            code,
            meaning,
        }
    })
}

impl VkError {
    /// Whether this is a lost device or exhausted memory (of the device, or of the host: a
    /// `VkResult` that says so, or a mirror the host could not allocate): the failures whose kind
    /// survives whatever the backend was doing (an import, placing the table), so that
    /// [`dispatchscope_core::backend::BackendError`] says [`DeviceLost`] or [`OutOfMemory`]
    /// rather than what was being done.
    ///
    /// [`DeviceLost`]: dispatchscope_core::backend::BackendError::DeviceLost
    /// [`OutOfMemory`]: dispatchscope_core::backend::BackendError::OutOfMemory
    pub fn is_lost_or_out_of_memory(&self) -> bool {
        matches!(
            self,
            VkError::Call {
                result: vk::Result::ERROR_DEVICE_LOST
                    | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
                    | vk::Result::ERROR_OUT_OF_HOST_MEMORY,
                ..
            } | VkError::HostAlloc { .. }
        )
    }
}

impl From<VkError> for dispatchscope_core::backend::BackendError {
    fn from(e: VkError) -> Self {
        match e {
            VkError::ImportRefused { piece, .. } => {
                dispatchscope_core::backend::BackendError::Import {
                    piece,
                    why: e.to_string(),
                }
            }
            VkError::UnknownImport { device_base } => {
                dispatchscope_core::backend::BackendError::UnknownImport { device_base }
            }
            VkError::Call {
                call,
                result: vk::Result::ERROR_DEVICE_LOST,
                ..
            } => dispatchscope_core::backend::BackendError::DeviceLost {
                call: call.to_owned(),
            },
            VkError::Call {
                call,
                result:
                    vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY,
                ref code,
                ..
            } => dispatchscope_core::backend::BackendError::OutOfMemory {
                what: format!("{call} answered {code}"),
            },
            VkError::HostRead(h) => dispatchscope_core::backend::BackendError::Host(h),
            VkError::HostAlloc { .. } => dispatchscope_core::backend::BackendError::OutOfMemory {
                what: e.to_string(),
            },
            other => dispatchscope_core::backend::BackendError::Execute(Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vulkan_error_is_named() {
        let e = check::<()>(
            "vkAllocateMemory",
            Err(vk::Result::ERROR_INVALID_EXTERNAL_HANDLE),
        );
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("vkAllocateMemory failed with VK_ERROR_INVALID_EXTERNAL_HANDLE: the driver refused the external handle (here: the host pointer of an import)".to_owned())
        );
        let (code, _) = describe(vk::Result::from_raw(-12345));
        assert_eq!(code, "VkResult(-12345)");
    }

    #[test]
    fn a_refused_import_names_the_piece() {
        let piece = ByteRange::new(0x7400_5b80_0000, 0x7400_5b90_0000);
        let e: dispatchscope_core::backend::BackendError = VkError::ImportRefused {
            piece,
            bytes: 0x10_0000,
            host: 0x7f00_0000_0000,
            why: "vkAllocateMemory failed with VK_ERROR_INVALID_EXTERNAL_HANDLE: the driver refused the external handle (here: the host pointer of an import)".into(),
        }
        .into();
        let dispatchscope_core::backend::BackendError::Import { piece: p, why } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(*p, piece);
        assert!(why.contains("importing guest piece"), "{why}");
        assert!(why.contains("VK_ERROR_INVALID_EXTERNAL_HANDLE"), "{why}");
    }

    /// A lost device and exhausted memory keep their kind from the `VkResult` up to the engine's
    /// error (and from there to the report's failure and the C ABI's status); anything else is a
    /// failure to execute, named.
    #[test]
    fn a_lost_device_and_exhausted_memory_keep_their_kind() {
        use dispatchscope_core::backend::BackendError;
        let of = |r: vk::Result| -> BackendError {
            check::<()>("vkQueueSubmit", Err(r)).unwrap_err().into()
        };
        assert!(matches!(
            of(vk::Result::ERROR_DEVICE_LOST),
            BackendError::DeviceLost { call } if call == "vkQueueSubmit"
        ));
        for r in [
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        ] {
            assert!(matches!(of(r), BackendError::OutOfMemory { .. }), "{r:?}");
        }
        assert!(matches!(
            of(vk::Result::ERROR_UNKNOWN),
            BackendError::Execute(e) if matches!(
                e.downcast_ref::<VkError>(),
                Some(VkError::Call { result: vk::Result::ERROR_UNKNOWN, .. })
            )
        ));
        let poisoned: BackendError = VkError::QueuePoisoned {
            call: "vkQueueSubmit",
        }
        .into();
        assert!(matches!(
            poisoned,
            BackendError::Execute(e)
                if matches!(e.downcast_ref::<VkError>(), Some(VkError::QueuePoisoned { .. }))
        ));
        let mirror: BackendError = VkError::HostAlloc {
            bytes: 0x1000,
            align: 0x1000,
        }
        .into();
        assert!(
            matches!(mirror, BackendError::OutOfMemory { .. }),
            "{mirror:?}"
        );
    }
}
