//! P1: a flat address routes by its high 32 bits before it reaches guest memory.
//!
//! Pure arithmetic; the apertures come from [`crate::DeviceLimits`] (a capture states the values it
//! ran with; the defaults are 0x80000000 for LDS and 0x70000000 for scratch).

use serde::{Deserialize, Serialize};

use crate::addr::hex;

/// Where a flat address goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "to")]
pub enum FlatRoute {
    /// The workgroup's LDS, at this byte offset.
    Lds {
        /// Byte offset in LDS (the address's low 32 bits).
        #[serde(with = "hex")]
        offset: u64,
    },
    /// The lane's scratch memory, at this byte offset.
    Scratch {
        /// Byte offset in the lane's scratch (the address's low 32 bits).
        #[serde(with = "hex")]
        offset: u64,
    },
    /// Guest memory, by device address.
    Guest {
        /// The guest address.
        #[serde(with = "hex")]
        address: u64,
    },
}

/// Routes a flat address by P1.
#[inline]
pub fn route_flat(address: u64, lds_aperture: u64, scratch_aperture: u64) -> FlatRoute {
    let high = address >> 32;
    let offset = address & 0xffff_ffff;
    if high == lds_aperture {
        FlatRoute::Lds { offset }
    } else if high == scratch_aperture {
        FlatRoute::Scratch { offset }
    } else {
        FlatRoute::Guest { address }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p1_routes_by_high_half() {
        let r = |a| route_flat(a, 0x8000_0000, 0x7000_0000);
        assert_eq!(r(0x8000_0000_0000_0040), FlatRoute::Lds { offset: 0x40 });
        assert_eq!(
            r(0x7000_0000_0000_0100),
            FlatRoute::Scratch { offset: 0x100 }
        );
        assert_eq!(
            r(0x7fff_ffff_0000_0000),
            FlatRoute::Guest {
                address: 0x7fff_ffff_0000_0000
            }
        );
        assert_eq!(
            r(0x0000_4000_03e1_9200),
            FlatRoute::Guest {
                address: 0x4000_03e1_9200
            }
        );
    }
}
