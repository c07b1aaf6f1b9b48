//! Where a frame's headers end: Ethernet (one 802.1Q tag at most), IPv4 or IPv6 (with
//! hop-by-hop, routing and destination-options extension headers), then TCP or UDP. This is all
//! segmentation and checksum completion need; the classifier's parser builds flow keys instead.

const ETH_TYPE_IPV4: u16 = 0x0800;
const ETH_TYPE_IPV6: u16 = 0x86dd;
const ETH_TYPE_VLAN: u16 = 0x8100;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The IP version of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ip {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// The L4 protocol of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl L4 {
    /// Its IP protocol number.
    pub fn proto(self) -> u8 {
        match self {
            L4::Tcp => PROTO_TCP,
            L4::Udp => PROTO_UDP,
        }
    }

    /// Where its checksum field is in its header.
    pub fn checksum_offset(self) -> usize {
        match self {
            L4::Tcp => 16,
            L4::Udp => 6,
        }
    }
}

/// The header lengths of a TCP or UDP frame over IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Ethernet header bytes (14, or 18 with a tag).
    pub l2_len: u16,
    /// IP header bytes, IPv6's extension headers included.
    pub l3_len: u16,
    /// TCP or UDP header bytes.
    pub l4_len: u16,
    /// IPv4 or IPv6.
    pub ip: Ip,
    /// TCP or UDP.
    pub l4: L4,
}

impl Headers {
    /// Bytes of all headers.
    pub fn len(&self) -> usize {
        usize::from(self.l2_len + self.l3_len + self.l4_len)
    }

    /// Never: a frame has at least an Ethernet header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The L4 header and payload's length as the IP header states it (Ethernet padding after
    /// it is not part of it); `None` when the IP header claims less than its own headers.
    pub fn l4_len_by_ip(&self, head: &[u8]) -> Option<usize> {
        let ip = usize::from(self.l2_len);
        let l3 = usize::from(self.l3_len);
        match self.ip {
            Ip::V4 => usize::from(be16(head, ip + 2)).checked_sub(l3),
            Ip::V6 => (usize::from(be16(head, ip + 4)) + 40).checked_sub(l3),
        }
    }

    /// Parses the headers at the start of `head` (a frame's first bytes); `None` for anything
    /// but TCP or UDP over IP with all headers in `head`, and for IP fragments.
    pub fn parse(head: &[u8]) -> Option<Headers> {
        let mut l2 = 14usize;
        let mut eth_type = be16_checked(head, 12)?;
        if eth_type == ETH_TYPE_VLAN {
            eth_type = be16_checked(head, 16)?;
            l2 = 18;
        }
        let l3 = head.get(l2..)?;
        let (ip, l3_len, proto) = match eth_type {
            ETH_TYPE_IPV4 => ipv4(l3)?,
            ETH_TYPE_IPV6 => ipv6(l3)?,
            _ => return None,
        };
        let l4_bytes = l3.get(l3_len..)?;
        let (l4, l4_len) = match proto {
            PROTO_TCP => (L4::Tcp, usize::from(*l4_bytes.get(12)? >> 4) * 4),
            PROTO_UDP => (L4::Udp, 8),
            _ => return None,
        };
        if l4_bytes.len() < l4_len || (l4 == L4::Tcp && l4_len < 20) {
            return None;
        }
        Some(Headers { l2_len: l2 as u16, l3_len: l3_len as u16, l4_len: l4_len as u16, ip, l4 })
    }
}

fn ipv4(l3: &[u8]) -> Option<(Ip, usize, u8)> {
    let ihl = usize::from(*l3.first()? & 0xf) * 4;
    if l3[0] >> 4 != 4 || ihl < 20 || l3.len() < ihl {
        return None;
    }
    let fragment = be16(l3, 6) & 0x3fff;
    if fragment != 0 {
        return None;
    }
    Some((Ip::V4, ihl, l3[9]))
}

fn ipv6(l3: &[u8]) -> Option<(Ip, usize, u8)> {
    if l3.len() < 40 || l3[0] >> 4 != 6 {
        return None;
    }
    let (mut next, mut len) = (l3[6], 40usize);
    // Hop-by-hop, routing, destination options: (length + 1) * 8 bytes each. A fragment
    // header (44) or anything else ends the walk.
    while matches!(next, 0 | 43 | 60) {
        let ext = l3.get(len..len + 2)?;
        next = ext[0];
        len += (usize::from(ext[1]) + 1) * 8;
    }
    Some((Ip::V6, len, next))
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be16_checked(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}
