//! TCP segmentation in software (what a NIC's TSO does, and Linux's GSO): one TCP segment of
//! up to 64 KB with its headers becomes frames of at most `mss` payload bytes each, every one
//! with its own IP length, IPv4 identification and header checksum, TCP sequence number, flags
//! and a whole TCP checksum. FIN and PSH stay on the last frame only, CWR on the first only
//! (RFC 3168 Sec. 6.1.2), as Linux's `tcp_gso_segment` does.

use crate::checksum::{ipv4_header_checksum, pseudo_header, Checksum};
use crate::headers::{be16, Headers, Ip, L4};

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Why a frame cannot be segmented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentError {
    /// Not TCP over IPv4 or IPv6 with all headers in the first buffer.
    NotTcp,
    /// A segment size of 0.
    ZeroMss,
    /// The frame is shorter than its headers.
    Truncated,
}

/// A frame's bytes, read in order from the buffers that hold it.
pub struct Chain<'a, I: Iterator<Item = &'a [u8]>> {
    pieces: I,
    cur: &'a [u8],
}

impl<'a, I: Iterator<Item = &'a [u8]>> Chain<'a, I> {
    /// A reader at the first byte of `pieces`.
    pub fn new(pieces: I) -> Chain<'a, I> {
        Chain { pieces, cur: &[] }
    }

    /// Fills `dst` with the next bytes; false when the frame ends first.
    #[inline]
    pub fn read(&mut self, mut dst: &mut [u8]) -> bool {
        while !dst.is_empty() {
            if self.cur.is_empty() {
                match self.pieces.next() {
                    Some(p) => self.cur = p,
                    None => return false,
                }
                continue;
            }
            let n = dst.len().min(self.cur.len());
            dst[..n].copy_from_slice(&self.cur[..n]);
            self.cur = &self.cur[n..];
            dst = &mut dst[n..];
        }
        true
    }

    /// Moves past the next `n` bytes; false when the frame ends first.
    pub fn skip(&mut self, mut n: usize) -> bool {
        while n > 0 {
            if self.cur.is_empty() {
                match self.pieces.next() {
                    Some(p) => self.cur = p,
                    None => return false,
                }
                continue;
            }
            let k = n.min(self.cur.len());
            self.cur = &self.cur[k..];
            n -= k;
        }
        true
    }
}

/// How one large TCP frame splits: its headers, the segment size and the payload's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments {
    /// The frame's headers, copied to every segment.
    pub headers: Headers,
    mss: usize,
    payload: usize,
}

impl Segments {
    /// Plans the segmentation of a frame of `frame_len` bytes whose first bytes are `head`, into
    /// frames of at most `mss` payload bytes.
    pub fn plan(head: &[u8], frame_len: usize, mss: u16) -> Result<Segments, SegmentError> {
        let headers = Headers::parse(head).filter(|h| h.l4 == L4::Tcp).ok_or(SegmentError::NotTcp)?;
        if mss == 0 {
            return Err(SegmentError::ZeroMss);
        }
        let payload = frame_len.checked_sub(headers.len()).ok_or(SegmentError::Truncated)?;
        Ok(Segments { headers, mss: usize::from(mss), payload })
    }

    /// Frames it makes (at least one).
    pub fn count(&self) -> usize {
        self.payload.div_ceil(self.mss).max(1)
    }

    /// Payload bytes of frame `i`.
    fn payload_of(&self, i: usize) -> usize {
        (self.payload - (i * self.mss).min(self.payload)).min(self.mss)
    }

    /// Bytes of frame `i`.
    pub fn frame_len(&self, i: usize) -> usize {
        self.headers.len() + self.payload_of(i)
    }

    /// Bytes of all its frames: what the wire carries.
    pub fn wire_bytes(&self) -> u64 {
        (self.headers.len() * self.count() + self.payload) as u64
    }

    /// Writes frame `i` into `dst` (exactly [`Self::frame_len`] bytes): the headers from `head`,
    /// adjusted, then the next payload bytes from `payload`, a reader positioned where frame
    /// `i`'s payload starts (past the headers for frame 0, then where frame `i - 1` left it).
    /// False when the payload ends early.
    pub fn write<'a, I: Iterator<Item = &'a [u8]>>(
        &self,
        i: usize,
        head: &[u8],
        payload: &mut Chain<'a, I>,
        dst: &mut [u8],
    ) -> bool {
        let h = &self.headers;
        let hl = h.len();
        let n = self.payload_of(i);
        debug_assert_eq!(dst.len(), hl + n);
        dst[..hl].copy_from_slice(&head[..hl]);
        if !payload.read(&mut dst[hl..hl + n]) {
            return false;
        }
        let (ip, tcp) = (usize::from(h.l2_len), usize::from(h.l2_len + h.l3_len));
        let l4_len = usize::from(h.l4_len) + n;
        match h.ip {
            Ip::V4 => {
                put16(dst, ip + 2, (usize::from(h.l3_len) + l4_len) as u16);
                put16(dst, ip + 4, be16(head, ip + 4).wrapping_add(i as u16));
                put16(dst, ip + 10, 0);
                let sum = ipv4_header_checksum(&dst[ip..tcp]);
                put16(dst, ip + 10, sum);
            }
            Ip::V6 => put16(dst, ip + 4, (usize::from(h.l3_len) - 40 + l4_len) as u16),
        }
        let seq = u32::from_be_bytes(head[tcp + 4..tcp + 8].try_into().expect("4 bytes"));
        dst[tcp + 4..tcp + 8].copy_from_slice(&seq.wrapping_add((i * self.mss) as u32).to_be_bytes());
        if i + 1 < self.count() {
            dst[tcp + 13] &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            dst[tcp + 13] &= !TCP_CWR;
        }
        put16(dst, tcp + 16, 0);
        let mut c: Checksum = pseudo_header(dst, h, l4_len);
        c.add(&dst[tcp..]);
        put16(dst, tcp + 16, c.finish());
        true
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
