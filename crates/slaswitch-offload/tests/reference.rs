//! Segmentation and checksums against a plain reference, on random frames split into random
//! buffers: IPv4 (with options) and IPv6 (with extension headers), one VLAN tag or none, TCP with
//! options and UDP, Ethernet padding, payloads up to 64 KB.

use proptest::prelude::*;
use slaswitch_offload::{l4_checksum, Chain, Headers, Ip, Segments, L4};

/// RFC 1071 word by word, the slow and obvious way.
fn reference_sum(bytes: &[u8]) -> u32 {
    let mut sum = 0u32;
    for pair in bytes.chunks(2) {
        let word = u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
        sum += word;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// The reference L4 checksum: the pseudo-header built as bytes, then the L4 bytes.
fn reference_l4(frame: &[u8], ip_at: usize, v6: bool, l4_at: usize, l4_len: usize, proto: u8, csum_at: usize) -> u16 {
    let mut pseudo = Vec::new();
    if v6 {
        pseudo.extend_from_slice(&frame[ip_at + 8..ip_at + 40]);
        pseudo.extend_from_slice(&(l4_len as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, proto]);
    } else {
        pseudo.extend_from_slice(&frame[ip_at + 12..ip_at + 20]);
        pseudo.extend_from_slice(&[0, proto]);
        pseudo.extend_from_slice(&(l4_len as u16).to_be_bytes());
    }
    let mut l4 = frame[l4_at..l4_at + l4_len].to_vec();
    l4[csum_at - l4_at] = 0;
    l4[csum_at - l4_at + 1] = 0;
    pseudo.extend_from_slice(&l4);
    let sum = !(reference_sum(&pseudo) as u16);
    if proto == 17 && sum == 0 {
        0xffff
    } else {
        sum
    }
}

/// A random frame's shape.
#[derive(Clone, Debug)]
struct Shape {
    vlan: bool,
    v6: bool,
    ip_options_words: usize,
    v6_ext: Vec<u8>,
    tcp: bool,
    tcp_options_words: usize,
    payload: Vec<u8>,
    padding: usize,
    seed: u8,
    flags: u8,
}

/// Builds the frame; returns it with where the IP and L4 headers start.
fn build(s: &Shape) -> (Vec<u8>, usize, usize) {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if s.vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    f.extend_from_slice(if s.v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    let ip_at = f.len();
    let proto = if s.tcp { 6u8 } else { 17u8 };
    let l4_hdr = if s.tcp { 20 + 4 * s.tcp_options_words } else { 8 };
    let l4_len = l4_hdr + s.payload.len();
    if s.v6 {
        let first_next = if s.v6_ext.is_empty() { proto } else { s.v6_ext[0] };
        let ext_len: usize = s.v6_ext.len() * 8;
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&((ext_len + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[first_next, 64]);
        f.extend((0..32).map(|i| s.seed.wrapping_mul(i as u8).wrapping_add(i as u8)));
        for (k, _) in s.v6_ext.iter().enumerate() {
            let next = *s.v6_ext.get(k + 1).unwrap_or(&proto);
            f.extend_from_slice(&[next, 0, 1, 2, 3, 4, 5, 6]);
        }
    } else {
        let ihl = 5 + s.ip_options_words;
        f.extend_from_slice(&[0x40 | ihl as u8, 0]);
        f.extend_from_slice(&((ihl * 4 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[s.seed, 0x21, 0x40, 0, 64, proto, 0, 0]);
        f.extend((0..8).map(|i| s.seed.wrapping_add(i)));
        f.extend((0..4 * s.ip_options_words).map(|_| 1u8));
    }
    let l4_at = f.len();
    if s.tcp {
        f.extend_from_slice(&[0x1f, 0x90, 0xc0, 0x01, 0xff, 0xff, 0xfe, s.seed, 0, 0, 0, 9]);
        f.push(((5 + s.tcp_options_words) as u8) << 4);
        f.push(s.flags);
        f.extend_from_slice(&[0x20, 0, 0x12, 0x34, 0, 0]);
        f.extend((0..4 * s.tcp_options_words).map(|_| 1u8));
    } else {
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[0x55, 0x66]);
    }
    f.extend_from_slice(&s.payload);
    f.extend((0..s.padding).map(|_| 0xeeu8));
    (f, ip_at, l4_at)
}

fn shape(max_payload: usize, tcp_only: bool) -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        any::<bool>(),
        0usize..=10,
        prop::collection::vec(prop::sample::select(vec![0u8, 43, 60]), 0..3),
        any::<bool>(),
        0usize..=10,
        prop::collection::vec(any::<u8>(), 0..max_payload),
        0usize..8,
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(move |(vlan, v6, ipo, ext, tcp, tcpo, payload, padding, seed, flags)| Shape {
            vlan,
            v6,
            ip_options_words: ipo,
            v6_ext: ext,
            tcp: tcp || tcp_only,
            tcp_options_words: tcpo,
            payload,
            padding,
            seed,
            flags,
        })
}

/// `frame` cut at the given points (sorted, deduplicated, inside it).
fn pieces<'a>(frame: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (frame.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut at = 0;
    for p in points {
        out.push(&frame[at..p]);
        at = p;
    }
    out.push(&frame[at..]);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn l4_checksum_matches_the_reference(s in shape(3000, false), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let (frame, ip_at, l4_at) = build(&s);
        let h = Headers::parse(&frame).expect("a TCP or UDP frame");
        prop_assert_eq!(usize::from(h.l2_len), ip_at);
        prop_assert_eq!(usize::from(h.l2_len + h.l3_len), l4_at);
        prop_assert_eq!(h.ip, if s.v6 { Ip::V6 } else { Ip::V4 });
        let l4_len = h.l4_len_by_ip(&frame).expect("lengths");
        prop_assert_eq!(l4_len, frame.len() - s.padding - l4_at);
        let proto = h.l4.proto();
        let csum_at = l4_at + h.l4.checksum_offset();
        let ours = l4_checksum(&frame, &h, l4_len, pieces(&frame, &cuts));
        prop_assert_eq!(ours, reference_l4(&frame, ip_at, s.v6, l4_at, l4_len, proto, csum_at));
    }

    #[test]
    fn segments_match_the_reference(
        s in shape(70_000, true),
        mss in 1u16..9000,
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let s = Shape { padding: 0, ..s };
        let (frame, ip_at, l4_at) = build(&s);
        let plan = Segments::plan(&frame, frame.len(), mss).expect("a TCP frame");
        let h = plan.headers;
        let hl = h.len();
        let mss = usize::from(mss);
        prop_assert_eq!(plan.count(), s.payload.len().div_ceil(mss).max(1));
        let mut chain = Chain::new(pieces(&frame, &cuts).into_iter());
        prop_assert!(chain.skip(hl));
        let mut payload = Vec::new();
        let mut wire = 0u64;
        let seq0 = u32::from_be_bytes(frame[l4_at + 4..l4_at + 8].try_into().unwrap());
        for i in 0..plan.count() {
            let mut seg = vec![0u8; plan.frame_len(i)];
            prop_assert!(plan.write(i, &frame, &mut chain, &mut seg));
            wire += seg.len() as u64;
            let n = seg.len() - hl;
            prop_assert!(n <= mss);
            payload.extend_from_slice(&seg[hl..]);
            // Lengths and the IPv4 header checksum.
            if s.v6 {
                prop_assert_eq!(usize::from(u16::from_be_bytes([seg[ip_at + 4], seg[ip_at + 5]])), seg.len() - ip_at - 40);
            } else {
                prop_assert_eq!(usize::from(u16::from_be_bytes([seg[ip_at + 2], seg[ip_at + 3]])), seg.len() - ip_at);
                prop_assert_eq!(reference_sum(&seg[ip_at..l4_at]) as u16, 0xffff, "IPv4 header checksum");
                let id0 = u16::from_be_bytes([frame[ip_at + 4], frame[ip_at + 5]]);
                prop_assert_eq!(u16::from_be_bytes([seg[ip_at + 4], seg[ip_at + 5]]), id0.wrapping_add(i as u16));
            }
            // Sequence numbers, flags, the TCP checksum.
            let seq = u32::from_be_bytes(seg[l4_at + 4..l4_at + 8].try_into().unwrap());
            prop_assert_eq!(seq, seq0.wrapping_add((i * mss) as u32));
            let last = i + 1 == plan.count();
            let mut want_flags = s.flags;
            if !last { want_flags &= !0x09; }
            if i > 0 { want_flags &= !0x80; }
            prop_assert_eq!(seg[l4_at + 13], want_flags);
            let csum = u16::from_be_bytes([seg[l4_at + 16], seg[l4_at + 17]]);
            prop_assert_eq!(csum, reference_l4(&seg, ip_at, s.v6, l4_at, seg.len() - l4_at, 6, l4_at + 16));
            // Everything else in the headers is the original's.
            let mut a = seg[..hl].to_vec();
            let mut b = frame[..hl].to_vec();
            for at in [ip_at + 2, ip_at + 3, ip_at + 4, ip_at + 5, ip_at + 10, ip_at + 11, l4_at + 4, l4_at + 5, l4_at + 6, l4_at + 7, l4_at + 13, l4_at + 16, l4_at + 17] {
                a[at] = 0;
                b[at] = 0;
            }
            prop_assert_eq!(a, b);
        }
        prop_assert_eq!(payload, s.payload.clone());
        prop_assert_eq!(wire, plan.wire_bytes());
        let mut rest = [0u8; 1];
        prop_assert!(!chain.read(&mut rest), "the whole frame was read");
    }
}

#[test]
fn udp_and_fragments_are_not_segmented() {
    let s = Shape {
        vlan: false,
        v6: false,
        ip_options_words: 0,
        v6_ext: vec![],
        tcp: false,
        tcp_options_words: 0,
        payload: vec![0; 100],
        padding: 0,
        seed: 1,
        flags: 0,
    };
    let (frame, _, _) = build(&s);
    assert!(Segments::plan(&frame, frame.len(), 50).is_err());
    assert_eq!(Headers::parse(&frame).map(|h| h.l4), Some(L4::Udp));
    let mut frag = frame.clone();
    frag[14 + 6] = 0x20; // more fragments
    assert!(Headers::parse(&frag).is_none());
}
