//! The Internet checksum (RFC 1071): a ones'-complement sum of 16-bit words. It is summed eight
//! bytes at a time in the machine's byte order and swapped once at the end, which RFC 1071
//! Sec. 2(B) shows gives the same result; pieces that start at an odd offset are swapped before
//! they are added, so a frame in several buffers sums like one.

use crate::headers::{Headers, Ip, L4};

/// A running Internet checksum over bytes added in order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Checksum {
    /// The sum so far, in the machine's byte order, not yet folded.
    acc: u64,
    /// Whether the bytes added so far are an odd number.
    odd: bool,
}

impl Checksum {
    /// An empty sum.
    pub fn new() -> Checksum {
        Checksum::default()
    }

    /// Adds `bytes`, as if they followed the bytes added before.
    #[inline]
    pub fn add(&mut self, bytes: &[u8]) {
        let mut part = native_sum(bytes);
        if self.odd {
            part = part.swap_bytes();
        }
        self.acc += u64::from(part);
        self.odd ^= bytes.len() % 2 == 1;
    }

    /// Adds a 16-bit word given in host order, as it would stand in a header (network order).
    /// The sum so far must be of an even number of bytes.
    #[inline]
    pub fn add_u16(&mut self, word: u16) {
        debug_assert!(!self.odd, "a word added at an odd offset");
        self.acc += u64::from(u16::from_ne_bytes(word.to_be_bytes()));
    }

    /// The folded sum, in host order (not inverted).
    #[inline]
    pub fn folded(&self) -> u16 {
        u16::from_be_bytes(fold(self.acc).to_ne_bytes())
    }

    /// The checksum to store: the inverted folded sum, in host order.
    #[inline]
    pub fn finish(&self) -> u16 {
        !self.folded()
    }
}

/// Folds a 64-bit sum of 16-bit words into 16 bits with end-around carries.
#[inline]
fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The folded ones'-complement sum of `bytes` read as 16-bit words in the machine's order, an
/// odd last byte padded with zero.
#[inline]
fn native_sum(bytes: &[u8]) -> u16 {
    // Two 32-bit halves per 8 bytes: each addition is below 2^33, so 2^30 of them cannot
    // overflow, far more than a 64 KB frame has.
    let mut acc = 0u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        let w = u64::from_ne_bytes(tail);
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    fold(acc)
}

/// The IPv4 header checksum of `header` (its checksum field included, so a zeroed field gives
/// the value to store and a correct one gives 0).
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let mut c = Checksum::new();
    c.add(header);
    c.finish()
}

/// The TCP or UDP checksum of a frame whose headers are `h`: the pseudo-header of its IP header
/// (in `head`, the frame's first bytes), then `l4_len` bytes of its L4 header and payload, read
/// from `pieces` (the whole frame, in order, from its first byte) with the checksum field taken
/// as zero. UDP's 0 is sent as 0xffff (RFC 768).
pub fn l4_checksum<'a>(head: &[u8], h: &Headers, l4_len: usize, pieces: impl IntoIterator<Item = &'a [u8]>) -> u16 {
    let mut c = pseudo_header(head, h, l4_len);
    let start = usize::from(h.l2_len + h.l3_len);
    let field = start + h.l4.checksum_offset();
    let end = start + l4_len;
    let mut at = 0usize;
    for piece in pieces {
        let (lo, hi) = (at, at + piece.len());
        at = hi;
        if hi <= start || lo >= end {
            continue;
        }
        let s = &piece[start.saturating_sub(lo)..(end - lo).min(piece.len())];
        let s_lo = lo.max(start);
        // The checksum field counts as zero: sum around the part of it in this piece.
        let s_hi = s_lo + s.len();
        let (f_lo, f_hi) = (field.clamp(s_lo, s_hi) - s_lo, (field + 2).clamp(s_lo, s_hi) - s_lo);
        c.add(&s[..f_lo]);
        c.add(&[0u8, 0u8][..f_hi - f_lo]);
        c.add(&s[f_hi..]);
    }
    let sum = c.finish();
    if h.l4 == L4::Udp && sum == 0 {
        0xffff
    } else {
        sum
    }
}

/// The pseudo-header's sum (RFC 793 for IPv4, RFC 8200 Sec. 8.1 for IPv6) for an L4 length of
/// `l4_len` bytes.
pub(crate) fn pseudo_header(head: &[u8], h: &Headers, l4_len: usize) -> Checksum {
    let ip = usize::from(h.l2_len);
    let mut c = Checksum::new();
    match h.ip {
        Ip::V4 => {
            c.add(&head[ip + 12..ip + 20]);
            c.add_u16(u16::from(h.l4.proto()));
            c.add_u16(l4_len as u16);
        }
        Ip::V6 => {
            c.add(&head[ip + 8..ip + 40]);
            c.add_u16((l4_len >> 16) as u16);
            c.add_u16(l4_len as u16);
            c.add_u16(u16::from(h.l4.proto()));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 Sec. 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let mut c = Checksum::new();
        c.add(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(c.folded(), 0xddf2);
    }

    #[test]
    fn pieces_at_odd_offsets_sum_like_one() {
        let bytes: Vec<u8> = (0..101u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut whole = Checksum::new();
        whole.add(&bytes);
        let mut split = Checksum::new();
        split.add(&bytes[..3]);
        split.add(&bytes[3..50]);
        split.add(&bytes[50..]);
        assert_eq!(whole.folded(), split.folded());
    }
}
