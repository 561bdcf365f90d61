//! A decoder of AMD RDNA2 (gfx10.3) machine code.
