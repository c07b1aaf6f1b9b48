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
        // The key-less check refuses exactly what the parser refuses, for the same reason.
        prop_assert_eq!(check_frame(&f), parse_frame(&f, 1).map(|_| ()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Untagged IPv4 without options, the frame the key-less check takes a short way for, with
    /// its length, fragment and protocol fields anything, its first buffer cut anywhere and the
    /// whole frame any longer: the check refuses exactly what the parser refuses.
    #[test]
    fn the_key_less_check_agrees_with_the_parser_on_plain_ipv4(
        total_len in prop_oneof![0u16..80, any::<u16>()],
        fragment in prop_oneof![Just(0u16), any::<u16>()],
        proto in prop_oneof![Just(IP_PROTO_UDP), Just(IP_PROTO_TCP), any::<u8>()],
        head_len in 0usize..80,
        more in prop_oneof![Just(0usize), 0usize..100],
    ) {
        let mut f = [0u8; 80];
        f[12..14].copy_from_slice(&ETH_TYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&total_len.to_be_bytes());
        f[20..22].copy_from_slice(&fragment.to_be_bytes());
        f[23] = proto;
        let head = &f[..head_len];
        let frame_len = head_len + more;
        prop_assert_eq!(check_head(head, frame_len), parse_head(head, frame_len, 1).map(|_| ()));
    }
}

/// A frame built field by field: `tags` 802.1Q tags, then IPv4 (header of `ihl` words) or
/// IPv6, then a TCP or UDP header with ports, then `payload` bytes (up to a jumbo frame).
fn build(tags: usize, v6: bool, ihl: u8, tcp: bool, payload: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(9100);
    f.extend_from_slice(&DST);
    f.extend_from_slice(&SRC);
    for i in 0..tags {
        f.extend_from_slice(&ETH_TYPE_VLAN.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    let l4_len = if tcp { 20 } else { 8 };
    let proto = if tcp { IP_PROTO_TCP } else { IP_PROTO_UDP };
    if v6 {
        f.extend_from_slice(&ETH_TYPE_IPV6.to_be_bytes());
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&((l4_len + payload) as u16).to_be_bytes());
        ip[6] = proto;
        ip[23] = 1;
        ip[39] = 2;
        f.extend_from_slice(&ip);
    } else {
        f.extend_from_slice(&ETH_TYPE_IPV4.to_be_bytes());
        let header = usize::from(ihl) * 4;
        let mut ip = vec![0u8; header.max(20)];
        ip[0] = 0x40 | ihl;
        ip[2..4].copy_from_slice(&((header + l4_len + payload).min(0xffff) as u16).to_be_bytes());
        ip[9] = proto;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        f.extend_from_slice(&ip[..header.max(20)]);
    }
    let mut l4 = vec![0u8; l4_len];
    l4[0..2].copy_from_slice(&4321u16.to_be_bytes());
    l4[2..4].copy_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&l4);
    f.resize(f.len() + payload, 0xab);
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Structure-aware frames: VLAN stacks, IPv4 with every IHL, IPv6, TCP and UDP, payloads up
    /// to jumbo size, each cut at any length. A whole well-formed frame (at most one tag, IHL
    /// at least 5) parses to its fields; a frame cut inside its headers is refused with a
    /// reason; nothing panics.
    #[test]
    fn built_frames_parse_whole_and_are_refused_cut(
        tags in 0usize..4,
        v6 in any::<bool>(),
        ihl in 0u8..16,
        tcp in any::<bool>(),
        payload in prop_oneof![0usize..64, 1400usize..1500, 8900usize..9000],
        cut in any::<prop::sample::Index>(),
    ) {
        let f = build(tags, v6, ihl, tcp, payload);
        let whole = parse_frame(&f, 3);
        prop_assert_eq!(check_frame(&f), whole.map(|_| ()));
        let well_formed = tags <= 1 && (v6 || ihl >= 5);
        if well_formed {
            let k = whole.unwrap();
            prop_assert_eq!(k.ip_version(), if v6 { 6 } else { 4 });
            prop_assert_eq!(k.ip_proto(), if tcp { IP_PROTO_TCP } else { IP_PROTO_UDP });
            prop_assert_eq!((k.l4_src(), k.l4_dst()), (4321, 80));
            prop_assert_eq!(k.vlan_tci() != 0, tags == 1);
        } else if tags <= 1 {
            prop_assert_eq!(whole, Err(ParseError::BadIpv4Header));
        } else if let Ok(k) = whole {
            // A second tag is not looked into: the frame is L2 only.
            prop_assert_eq!(k.eth_type(), ETH_TYPE_VLAN);
            prop_assert_eq!(k.ip_version(), 0);
        }
        let len = cut.index(f.len() + 1);
        let headers = 14 + 4 * tags.min(1) + if v6 { 40 } else { usize::from(ihl).max(5) * 4 } + if tcp { 20 } else { 8 };
        let cut_result = parse_frame(&f[..len], 3);
        prop_assert_eq!(check_frame(&f[..len]), cut_result.map(|_| ()));
        if len < 14 {
            prop_assert_eq!(cut_result, Err(ParseError::Runt));
        } else if well_formed && len < f.len() && len >= 14 + 4 * tags {
            // Cut anywhere after the L2 header: its lengths no longer fit, refused.
            prop_assert!(cut_result.is_err(), "cut at {} of {} (headers {}): {:?}", len, f.len(), headers, cut_result);
        }
    }
}
