//! What identifies a build's XDP program and the layout of the maps it shares with the agent.
//!
//! Two numbers, because they change for different reasons:
//! * [`PROGRAM_VERSION`]: bumped when the program's behaviour changes. The program stores
//!   [`PROGRAM_STAMP`] (the version under a magic high half) when it writes a log record, so
//!   the constant is an instruction immediate: a bump changes the program's tag, which is what
//!   the loader compares to decide whether a running program must be swapped. Set it at build
//!   time with `ANNOUNCER_XDP_VERSION=<n>` (decimal) to produce "a newer build whose program
//!   differs" without editing code (upgrade drills, the end-to-end upgrade test); the loader
//!   can also stamp another version into this build's object ([`stamp_bytes`]), which is how
//!   the kernel tests obtain a differing program without a second build.
//! * [`MAP_LAYOUT_VERSION`]: bumped when a pinned map's key or value layout changes meaning
//!   without changing size. The loader pins it in the [`LAYOUT`](crate::maps::LAYOUT) map next to
//!   the others and migrates pinned maps whose version, type, key/value size or capacity differ.

/// The build-time override, if any (`ANNOUNCER_XDP_VERSION`).
const OVERRIDE: Option<&str> = option_env!("ANNOUNCER_XDP_VERSION");

/// Version of this build's XDP program (1 unless `ANNOUNCER_XDP_VERSION` says otherwise).
pub const PROGRAM_VERSION: u32 = match OVERRIDE {
    Some(s) => parse_decimal(s),
    None => 1,
};

/// High half of [`PROGRAM_STAMP`]: makes the 64-bit immediate unique in the object.
pub const STAMP_MAGIC: u32 = 0xA11C_E5D7;

/// What the program stores when it logs: [`STAMP_MAGIC`] in the high half, the version in the
/// low half. Too wide for a 32-bit immediate, so it is one `ld_imm64` instruction in the object.
pub const PROGRAM_STAMP: u64 = stamp(PROGRAM_VERSION);

/// The stamp of `version`.
pub const fn stamp(version: u32) -> u64 {
    ((STAMP_MAGIC as u64) << 32) | version as u64
}

/// Version of the pinned maps' layout (see the module docs).
pub const MAP_LAYOUT_VERSION: u32 = 2;

/// The 16 bytes of the `ld_imm64` instruction that loads `stamp(version)` into a register,
/// without its first byte (opcode) and second (registers): bytes 2..16 of the instruction pair.
/// The loader searches an object for these to stamp another version into it.
pub const fn stamp_bytes(version: u32) -> [u8; 14] {
    let lo = version.to_le_bytes();
    let hi = STAMP_MAGIC.to_le_bytes();
    [
        0, 0, lo[0], lo[1], lo[2], lo[3], // off, imm (low half)
        0, 0, 0, 0, hi[0], hi[1], hi[2],
        hi[3], // second slot: code, regs, off, imm (high half)
    ]
}

const fn parse_decimal(s: &str) -> u32 {
    let b = s.as_bytes();
    assert!(!b.is_empty(), "ANNOUNCER_XDP_VERSION is empty");
    let mut v: u32 = 0;
    let mut i = 0;
    while i < b.len() {
        assert!(
            b[i].is_ascii_digit(),
            "ANNOUNCER_XDP_VERSION must be a decimal number"
        );
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_keeps_the_version_in_the_low_half() {
        assert_eq!(stamp(7) as u32, 7);
        assert_eq!((stamp(7) >> 32) as u32, STAMP_MAGIC);
        assert_eq!(parse_decimal("42"), 42);
    }
}
