//! P1: a flat address routes by its high 32 bits before it reaches guest memory.
//!
//! Pure arithmetic; the apertures come from [`crate::DeviceLimits`] (a capture states the values it
//! ran with; the defaults are 0x80000000 for LDS and 0x70000000 for scratch).

use crate::report::Route;

/// Routes a flat address by P1: to LDS or scratch at the address's low 32 bits, or to guest
/// memory by device address ([`Route::Device`]).
#[inline]
pub fn route_flat(address: u64, lds_aperture: u64, scratch_aperture: u64) -> Route {
    let high = address >> 32;
    let offset = address & 0xffff_ffff;
    if high == lds_aperture {
        Route::Lds { offset }
    } else if high == scratch_aperture {
        Route::Scratch { offset }
    } else {
        Route::Device { address }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p1_routes_by_high_half() {
        let r = |a| route_flat(a, 0x8000_0000, 0x7000_0000);
        assert_eq!(r(0x8000_0000_0000_0040), Route::Lds { offset: 0x40 });
        assert_eq!(r(0x7000_0000_0000_0100), Route::Scratch { offset: 0x100 });
        assert_eq!(
            r(0x7fff_ffff_0000_0000),
            Route::Device {
                address: 0x7fff_ffff_0000_0000
            }
        );
        assert_eq!(
            r(0x0000_4000_03e1_9200),
            Route::Device {
                address: 0x4000_03e1_9200
            }
        );
    }
}
