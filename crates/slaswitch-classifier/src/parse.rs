//! Defensive frame parsing: every length is checked before it is read, so a runt, a truncated
//! header or a lying length field yields a [`ParseError`] (counted per port and dropped by the
//! data plane), never an out-of-bounds read.
//!
//! Parsed: Ethernet II, one 802.1Q tag, IPv4 (options skipped by IHL, fragments other than the
//! first carry no L4 ports), IPv6 (fixed header; the next header is taken as the protocol), TCP,
//! UDP, SCTP ports and ICMP/ICMPv6 type and code (in the port fields, as OVS does).

use crate::flow_key::{FlowKey, KeyFields, LOW48, VLAN_PRESENT};

/// 802.1Q VLAN tag.
pub const ETH_TYPE_VLAN: u16 = 0x8100;
/// IPv4.
pub const ETH_TYPE_IPV4: u16 = 0x0800;
/// IPv6.
pub const ETH_TYPE_IPV6: u16 = 0x86dd;
/// ICMP.
pub const IP_PROTO_ICMP: u8 = 1;
/// TCP.
pub const IP_PROTO_TCP: u8 = 6;
/// UDP.
pub const IP_PROTO_UDP: u8 = 17;
/// ICMPv6.
pub const IP_PROTO_ICMPV6: u8 = 58;
/// SCTP.
pub const IP_PROTO_SCTP: u8 = 132;

/// Why a frame was dropped. The discriminant indexes the per-port error counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// Shorter than an Ethernet header (14 bytes).
    Runt = 0,
    /// An 802.1Q tag cut short.
    TruncatedVlan = 1,
    /// Fewer bytes than an IPv4 header, or than its IHL says.
    TruncatedIpv4 = 2,
    /// IPv4 version field not 4, or IHL below 5.
    BadIpv4Header = 3,
    /// IPv4 total length below the header length or beyond the frame.
    BadIpv4Length = 4,
    /// Fewer bytes than an IPv6 header, or a payload length beyond the frame.
    TruncatedIpv6 = 5,
    /// A TCP/UDP/SCTP/ICMP header cut short.
    TruncatedL4 = 6,
}

/// Kinds of [`ParseError`], for counters indexed by kind.
pub const PARSE_ERROR_KINDS: usize = 7;

impl ParseError {
    /// Every kind, in counter order.
    pub const ALL: [ParseError; PARSE_ERROR_KINDS] = [
        ParseError::Runt,
        ParseError::TruncatedVlan,
        ParseError::TruncatedIpv4,
        ParseError::BadIpv4Header,
        ParseError::BadIpv4Length,
        ParseError::TruncatedIpv6,
        ParseError::TruncatedL4,
    ];

    /// The kind's name in counters and metrics.
    pub fn name(self) -> &'static str {
        match self {
            ParseError::Runt => "runt",
            ParseError::TruncatedVlan => "truncated_vlan",
            ParseError::TruncatedIpv4 => "truncated_ipv4",
            ParseError::BadIpv4Header => "bad_ipv4_header",
            ParseError::BadIpv4Length => "bad_ipv4_length",
            ParseError::TruncatedIpv6 => "truncated_ipv6",
            ParseError::TruncatedL4 => "truncated_l4",
        }
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Where a parse puts the fields it reads: a key's fields, or nowhere (`()`), when only whether
/// the frame is well formed matters. One parser serves both, so they refuse exactly the same
/// frames. Addresses come in the key's units (a MAC's 48 bits, an IP's two words), read from the
/// frame straight into registers.
pub(crate) trait Fields {
    /// Ethernet destination and source, their six bytes in the low 48 bits (little endian).
    fn set_macs(&mut self, dst: u64, src: u64);
    /// The 802.1Q tag's TCI, with [`VLAN_PRESENT`].
    fn set_vlan_tci(&mut self, v: u16);
    /// The Ethernet type after any tag.
    fn set_eth_type(&mut self, v: u16);
    /// IP version and protocol.
    fn set_ip(&mut self, version: u8, proto: u8);
    /// IP source and destination as [`FlowKey::ip_src`]'s words (IPv4 in the first 4 bytes).
    fn set_ip_addrs(&mut self, src: [u64; 2], dst: [u64; 2]);
    /// L4 ports, or ICMP type and code.
    fn set_l4(&mut self, src: u16, dst: u16);
}

impl Fields for KeyFields {
    #[inline(always)]
    fn set_macs(&mut self, dst: u64, src: u64) {
        (self.eth_dst, self.eth_src) = (dst, src);
    }
    #[inline(always)]
    fn set_vlan_tci(&mut self, v: u16) {
        self.vlan_tci = v;
    }
    #[inline(always)]
    fn set_eth_type(&mut self, v: u16) {
        self.eth_type = v;
    }
    #[inline(always)]
    fn set_ip(&mut self, version: u8, proto: u8) {
        (self.ip_version, self.ip_proto) = (version, proto);
    }
    #[inline(always)]
    fn set_ip_addrs(&mut self, src: [u64; 2], dst: [u64; 2]) {
        (self.ip_src, self.ip_dst) = (src, dst);
    }
    #[inline(always)]
    fn set_l4(&mut self, src: u16, dst: u16) {
        (self.l4_src, self.l4_dst) = (src, dst);
    }
}

impl Fields for () {
    #[inline]
    fn set_macs(&mut self, _: u64, _: u64) {}
    #[inline]
    fn set_vlan_tci(&mut self, _: u16) {}
    #[inline]
    fn set_eth_type(&mut self, _: u16) {}
    #[inline]
    fn set_ip(&mut self, _: u8, _: u8) {}
    #[inline]
    fn set_ip_addrs(&mut self, _: [u64; 2], _: [u64; 2]) {}
    #[inline]
    fn set_l4(&mut self, _: u16, _: u16) {}
}

/// Parses `frame`, received on `in_port`, into a flow key.
#[inline]
pub fn parse_frame(frame: &[u8], in_port: u16) -> Result<FlowKey, ParseError> {
    parse_head(frame, frame.len(), in_port)
}

/// Parses a frame of `frame_len` bytes whose first bytes are `head` (the first buffer of a
/// chained one: its headers are there, the rest of its payload in the next buffers).
#[inline]
pub fn parse_head(head: &[u8], frame_len: usize, in_port: u16) -> Result<FlowKey, ParseError> {
    if let Some(fields) = plain_ipv4(head, frame_len) {
        return Ok(fields.key(in_port));
    }
    walk(head, frame_len, in_port)
}

/// [`parse_head`] by the parser's walk alone, header by header.
#[inline(always)]
fn walk(head: &[u8], frame_len: usize, in_port: u16) -> Result<FlowKey, ParseError> {
    let mut fields = KeyFields::default();
    parse_into(head, frame_len, &mut fields)?;
    Ok(fields.key(in_port))
}

/// Whether `frame` is well formed: exactly the frames [`parse_frame`] accepts, without building
/// a key (rules that look at the input port alone need none).
#[inline]
pub fn check_frame(frame: &[u8]) -> Result<(), ParseError> {
    check_head(frame, frame.len())
}

/// [`check_frame`] for a frame of `frame_len` bytes whose first bytes are `head`.
#[inline]
pub fn check_head(head: &[u8], frame_len: usize) -> Result<(), ParseError> {
    if plain_ipv4(head, frame_len).is_some() {
        return Ok(());
    }
    parse_into(head, frame_len, &mut ())
}

/// The fields of the frame a data plane mostly sees: untagged IPv4 without options, not a
/// later fragment, carrying UDP or TCP whose header is whole, with room for a TCP header in
/// `head`; `None` for any other frame. Four loads and a few compares instead of the parser's
/// walk: every frame it takes the walk accepts, with the same fields, and any other frame goes
/// to the walk.
#[inline(always)]
fn plain_ipv4(head: &[u8], frame_len: usize) -> Option<KeyFields> {
    const ETH: usize = 14;
    if head.len() < ETH + 20 + 20 {
        return None;
    }
    // Bytes 12-19: Ethernet type, version and IHL, TOS, total length, identification.
    let a = le64(head, 12);
    // Bytes 20-27: flags and fragment offset, TTL, protocol, checksum, source address.
    let b = le64(head, 20);
    let (ipv4_ihl5, fragment_offset) = (0x45_00_08, 0xff1f);
    if a & 0xff_ffff != ipv4_ihl5 || b & fragment_offset != 0 {
        return None;
    }
    let total_len = usize::from(((a >> 32) as u16).swap_bytes());
    let proto = (b >> 24) as u8;
    let l4_min = match proto {
        IP_PROTO_UDP => 8,
        IP_PROTO_TCP => 20,
        _ => return None,
    };
    if total_len < 20 + l4_min || total_len > frame_len.max(head.len()) - ETH {
        return None;
    }
    // Bytes 30-37: destination address, then the L4 ports.
    let c = le64(head, 30);
    Some(KeyFields {
        eth_dst: le64(head, 0) & LOW48,
        eth_src: le64(head, 6) & LOW48,
        vlan_tci: 0,
        eth_type: ETH_TYPE_IPV4,
        ip_version: 4,
        ip_proto: proto,
        ip_src: [u64::from(le32(head, 26)), 0],
        ip_dst: [c & 0xffff_ffff, 0],
        l4_src: ((c >> 32) as u16).swap_bytes(),
        l4_dst: ((c >> 48) as u16).swap_bytes(),
    })
}

/// Parses `frame` (the first bytes of a frame of `frame_len` bytes; headers must be in them).
#[inline(always)]
fn parse_into<K: Fields>(frame: &[u8], frame_len: usize, key: &mut K) -> Result<(), ParseError> {
    if frame.len() < 14 {
        return Err(ParseError::Runt);
    }
    key.set_macs(le64(frame, 0) & LOW48, le64(frame, 6) & LOW48);
    let mut eth_type = be16(frame, 12);
    let mut offset = 14;
    if eth_type == ETH_TYPE_VLAN {
        if frame.len() < 18 {
            return Err(ParseError::TruncatedVlan);
        }
        key.set_vlan_tci((be16(frame, 14) & 0xefff) | VLAN_PRESENT);
        eth_type = be16(frame, 16);
        offset = 18;
    }
    key.set_eth_type(eth_type);
    let l3 = &frame[offset..];
    let l3_len = frame_len.max(frame.len()) - offset;
    match eth_type {
        ETH_TYPE_IPV4 => parse_ipv4(l3, l3_len, key),
        ETH_TYPE_IPV6 => parse_ipv6(l3, l3_len, key),
        _ => Ok(()),
    }
}

/// `l3`: the IP header and what follows of it in the first buffer; `l3_len`: its length in the
/// whole frame.
#[inline(always)]
fn parse_ipv4<K: Fields>(l3: &[u8], l3_len: usize, key: &mut K) -> Result<(), ParseError> {
    if l3.len() < 20 {
        return Err(ParseError::TruncatedIpv4);
    }
    let version = l3[0] >> 4;
    let header_len = usize::from(l3[0] & 0xf) * 4;
    if version != 4 || header_len < 20 {
        return Err(ParseError::BadIpv4Header);
    }
    if l3.len() < header_len {
        return Err(ParseError::TruncatedIpv4);
    }
    let total_len = usize::from(be16(l3, 2));
    if total_len < header_len || total_len > l3_len {
        return Err(ParseError::BadIpv4Length);
    }
    let proto = l3[9];
    key.set_ip(4, proto);
    key.set_ip_addrs([u64::from(le32(l3, 12)), 0], [u64::from(le32(l3, 16)), 0]);
    // Only the first fragment carries the L4 header.
    let fragment_offset = be16(l3, 6) & 0x1fff;
    if fragment_offset == 0 {
        parse_l4(&l3[header_len..total_len.min(l3.len())], proto, key)?;
    }
    Ok(())
}

fn parse_ipv6<K: Fields>(l3: &[u8], l3_len: usize, key: &mut K) -> Result<(), ParseError> {
    if l3.len() < 40 || l3[0] >> 4 != 6 {
        return Err(ParseError::TruncatedIpv6);
    }
    let payload_len = usize::from(be16(l3, 4));
    if 40 + payload_len > l3_len {
        return Err(ParseError::TruncatedIpv6);
    }
    let proto = l3[6];
    key.set_ip(6, proto);
    key.set_ip_addrs([le64(l3, 8), le64(l3, 16)], [le64(l3, 24), le64(l3, 32)]);
    parse_l4(&l3[40..(40 + payload_len).min(l3.len())], proto, key)
}

#[inline(always)]
fn parse_l4<K: Fields>(l4: &[u8], proto: u8, key: &mut K) -> Result<(), ParseError> {
    match proto {
        IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP => {
            let min = match proto {
                IP_PROTO_TCP => 20,
                IP_PROTO_UDP => 8,
                _ => 12,
            };
            if l4.len() < min {
                return Err(ParseError::TruncatedL4);
            }
            key.set_l4(be16(l4, 0), be16(l4, 2));
        }
        IP_PROTO_ICMP | IP_PROTO_ICMPV6 => {
            if l4.len() < 4 {
                return Err(ParseError::TruncatedL4);
            }
            key.set_l4(u16::from(l4[0]), u16::from(l4[1]));
        }
        _ => {}
    }
    Ok(())
}

/// Builds a well-formed frame, for tests, benchmarks and the traffic generator.
pub mod build {
    /// An Ethernet + IPv4 + UDP frame of `frame_len` bytes (at least 42).
    pub fn udp4(
        dst_mac: [u8; 6],
        src_mac: [u8; 6],
        src_ip: [u8; 4],
        dst_ip: [u8; 4],
        src_port: u16,
        dst_port: u16,
        frame_len: usize,
    ) -> Vec<u8> {
        let frame_len = frame_len.max(42);
        let mut f = vec![0u8; frame_len];
        write_udp4(&mut f, dst_mac, src_mac, src_ip, dst_ip, src_port, dst_port);
        f
    }

    /// Writes Ethernet + IPv4 + UDP headers for a frame that fills `f` (at least 42 bytes).
    pub fn write_udp4(
        f: &mut [u8],
        dst_mac: [u8; 6],
        src_mac: [u8; 6],
        src_ip: [u8; 4],
        dst_ip: [u8; 4],
        src_port: u16,
        dst_port: u16,
    ) {
        let frame_len = f.len();
        assert!(frame_len >= 42, "a UDP/IPv4 frame needs 42 bytes");
        f[0..6].copy_from_slice(&dst_mac);
        f[6..12].copy_from_slice(&src_mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&((frame_len - 14) as u16).to_be_bytes());
        ip[4..8].fill(0);
        ip[8] = 64;
        ip[9] = 17;
        ip[10..12].fill(0);
        ip[12..16].copy_from_slice(&src_ip);
        ip[16..20].copy_from_slice(&dst_ip);
        let checksum = ipv4_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&checksum.to_be_bytes());
        let udp = &mut ip[20..];
        udp[0..2].copy_from_slice(&src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&((frame_len - 34) as u16).to_be_bytes());
        udp[6..8].fill(0);
    }

    /// The IPv4 header checksum of a header whose checksum field is zero.
    pub use slaswitch_offload::checksum::ipv4_header_checksum as ipv4_checksum;
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Frames shaped like untagged IPv4 without options (any other bytes random, its
        /// length, fragment, protocol and version fields anything, the first buffer cut
        /// anywhere, the frame any longer): the short way gives exactly the walk's key or error,
        /// and the key-less check refuses exactly what the walk refuses.
        #[test]
        fn the_short_way_agrees_with_the_walk(
            bytes in prop::collection::vec(any::<u8>(), 80),
            version_ihl in prop_oneof![Just(0x45u8), any::<u8>()],
            total_len in prop_oneof![0u16..80, any::<u16>()],
            fragment in prop_oneof![Just(0u16), any::<u16>()],
            proto in prop_oneof![Just(IP_PROTO_UDP), Just(IP_PROTO_TCP), any::<u8>()],
            head_len in 0usize..80,
            more in prop_oneof![Just(0usize), 0usize..100],
            in_port in any::<u16>(),
        ) {
            let mut f = bytes;
            f[12..14].copy_from_slice(&ETH_TYPE_IPV4.to_be_bytes());
            f[14] = version_ihl;
            f[16..18].copy_from_slice(&total_len.to_be_bytes());
            f[20..22].copy_from_slice(&fragment.to_be_bytes());
            f[23] = proto;
            let (head, frame_len) = (&f[..head_len], head_len + more);
            let walked = walk(head, frame_len, in_port);
            prop_assert_eq!(parse_head(head, frame_len, in_port), walked);
            prop_assert_eq!(check_head(head, frame_len), walked.map(|_| ()));
        }
    }
}
