//! The Internet checksum (RFC 1071) and the IPv6 pseudo-header (RFC 8200 §8.1).
//!
//! Sums are kept in a `u64` so that no realistic packet can overflow them before [`fold`].

/// Adds `data` as big-endian 16-bit words to `sum`; an odd last byte is padded with zero.
pub fn add_bytes(mut sum: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u64::from(u16::from_be_bytes([*b, 0]));
    }
    sum
}

/// Adds a 16-byte address as eight words. Written as a fixed loop so the eBPF build unrolls it.
#[inline(always)]
pub fn add_addr16(mut sum: u64, addr: &[u8; 16]) -> u64 {
    let mut i = 0;
    while i < 16 {
        sum += ((addr[i] as u64) << 8) | addr[i + 1] as u64;
        i += 2;
    }
    sum
}

/// The IPv6 pseudo-header's contribution: source, destination, upper-layer length, next header.
#[inline(always)]
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], upper_len: u32, next_header: u8) -> u64 {
    let sum = add_addr16(add_addr16(0, src), dst);
    sum + u64::from(upper_len >> 16) + u64::from(upper_len & 0xffff) + u64::from(next_header)
}

/// Folds carries into 16 bits (the one's-complement sum, not yet inverted).
#[inline(always)]
pub const fn fold(mut sum: u64) -> u16 {
    // Four rounds suffice for any u64.
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The checksum to store: the complement of the folded sum.
#[inline(always)]
pub const fn finish(sum: u64) -> u16 {
    !fold(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(add_bytes(0, &data)), 0xddf2);
    }

    #[test]
    fn a_filled_checksum_verifies_to_zero() {
        let mut data = [0x12u8, 0x34, 0, 0, 0xab, 0xcd, 0xef];
        let c = finish(add_bytes(0, &data));
        data[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(finish(add_bytes(0, &data)), 0);
    }
}
