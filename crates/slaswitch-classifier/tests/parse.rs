//! Frame parsing, including malformed frames.

use proptest::prelude::*;
use slaswitch_classifier::parse::build::udp4;
use slaswitch_classifier::parse::*;

const DST: [u8; 6] = [2, 0, 0, 0, 0, 1];
const SRC: [u8; 6] = [2, 0, 0, 0, 0, 2];

#[test]
fn parses_ethernet_ipv4_udp() {
    let f = udp4(DST, SRC, [10, 0, 0, 1], [10, 0, 0, 2], 1234, 80, 64);
    let k = parse_frame(&f, 7).unwrap();
    assert_eq!(k.in_port(), 7);
    assert_eq!(k.eth_dst(), DST);
    assert_eq!(k.eth_src(), SRC);
    assert_eq!(k.eth_type(), ETH_TYPE_IPV4);
    assert_eq!(k.ip_version(), 4);
    assert_eq!(k.ip_proto(), IP_PROTO_UDP);
    assert_eq!(&k.ip_src()[..4], &[10, 0, 0, 1]);
    assert_eq!(&k.ip_dst()[..4], &[10, 0, 0, 2]);
    assert_eq!((k.l4_src(), k.l4_dst()), (1234, 80));
}

#[test]
fn parses_vlan_tag_and_ipv6_tcp() {
    let mut f = vec![0u8; 18 + 40 + 20];
    f[0..6].copy_from_slice(&DST);
    f[6..12].copy_from_slice(&SRC);
    f[12..14].copy_from_slice(&ETH_TYPE_VLAN.to_be_bytes());
    f[14..16].copy_from_slice(&100u16.to_be_bytes());
    f[16..18].copy_from_slice(&ETH_TYPE_IPV6.to_be_bytes());
    let ip = &mut f[18..];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&20u16.to_be_bytes());
    ip[6] = IP_PROTO_TCP;
    ip[8] = 0xfe;
    ip[39] = 2;
    ip[40..42].copy_from_slice(&443u16.to_be_bytes());
    ip[42..44].copy_from_slice(&5555u16.to_be_bytes());
    let k = parse_frame(&f, 1).unwrap();
    assert_eq!(k.vlan_tci() & 0x0fff, 100);
    assert_eq!(k.eth_type(), ETH_TYPE_IPV6);
    assert_eq!(k.ip_proto(), IP_PROTO_TCP);
    assert_eq!(k.ip_src()[0], 0xfe);
    assert_eq!(k.ip_dst()[15], 2);
    assert_eq!((k.l4_src(), k.l4_dst()), (443, 5555));
}

#[test]
fn malformed_frames_are_rejected_with_the_reason() {
    let good = udp4(DST, SRC, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 64);
    assert_eq!(parse_frame(&good[..13], 1), Err(ParseError::Runt));
    assert_eq!(parse_frame(&[], 1), Err(ParseError::Runt));
    // IPv4 header cut short.
    assert_eq!(parse_frame(&good[..30], 1), Err(ParseError::TruncatedIpv4));
    // Version 5, then IHL 4 (16 bytes).
    let mut f = good.clone();
    f[14] = 0x55;
    assert_eq!(parse_frame(&f, 1), Err(ParseError::BadIpv4Header));
    f[14] = 0x44;
    assert_eq!(parse_frame(&f, 1), Err(ParseError::BadIpv4Header));
    // IHL 15 (60 bytes) in a 50-byte IPv4 packet.
    f[14] = 0x4f;
    assert_eq!(parse_frame(&f, 1), Err(ParseError::TruncatedIpv4));
    // Total length beyond the frame, and below the header.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&1500u16.to_be_bytes());
    assert_eq!(parse_frame(&f, 1), Err(ParseError::BadIpv4Length));
    f[16..18].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(parse_frame(&f, 1), Err(ParseError::BadIpv4Length));
    // UDP header cut short by the IPv4 total length.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&24u16.to_be_bytes());
    assert_eq!(parse_frame(&f, 1), Err(ParseError::TruncatedL4));
    // A VLAN tag with nothing after it.
    let mut f = good[..16].to_vec();
    f[12..14].copy_from_slice(&ETH_TYPE_VLAN.to_be_bytes());
    assert_eq!(parse_frame(&f, 1), Err(ParseError::TruncatedVlan));
    // IPv6 payload length beyond the frame.
    let mut f = vec![0u8; 14 + 40];
    f[12..14].copy_from_slice(&ETH_TYPE_IPV6.to_be_bytes());
    f[14] = 0x60;
    f[18..20].copy_from_slice(&8u16.to_be_bytes());
    assert_eq!(parse_frame(&f, 1), Err(ParseError::TruncatedIpv6));
}

#[test]
fn non_first_fragments_carry_no_ports() {
    let mut f = udp4(DST, SRC, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 64);
    f[20..22].copy_from_slice(&0x0010u16.to_be_bytes());
    let k = parse_frame(&f, 1).unwrap();
    assert_eq!((k.l4_src(), k.l4_dst()), (0, 0));
}

proptest! {
    /// Any bytes at all: parsing returns, never panics or reads out of bounds.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128), ethertype in prop::sample::select(vec![0x0800u16, 0x86dd, 0x8100, 0x0806])) {
        let mut f = bytes;
        if f.len() >= 14 { f[12..14].copy_from_slice(&ethertype.to_be_bytes()); }
        let _ = parse_frame(&f, 1);
        if f.len() >= 15 { f[14] = 0x45; let _ = parse_frame(&f, 1); }
    }
}
