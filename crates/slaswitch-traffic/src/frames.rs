//! What the emulated VMs put on the wire: UDP/IPv4 frames whose payload carries a magic number,
//! the sender's id, a sequence number and the TSC at transmission, so a sink on the same host
//! (same TSC) measures one-way latency.

use slaswitch_classifier::parse::build::write_udp4;

/// Marks a stamped payload.
pub const MAGIC: u32 = 0x5a5a_c0de;
/// Payload offset (after Ethernet 14 + IPv4 20 + UDP 8).
pub const PAYLOAD: usize = 42;
/// magic (4) + sender id (2) + sequence (8) + TSC (8).
pub const STAMP_LEN: usize = 22;

/// A VM's MAC address, derived from its name so every tool agrees on it.
pub fn mac_for(name: &str) -> [u8; 6] {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let b = h.to_be_bytes();
    [0x02, 0x5a, b[0], b[1], b[2], b[3]]
}

/// A VM's IPv4 address: 10.<id>.x.y from its MAC.
pub fn ip_for(name: &str) -> [u8; 4] {
    let m = mac_for(name);
    [10, m[3], m[4], m[5].max(1)]
}

/// The id a VM writes in its stamps, from its name.
pub fn sender_id(name: &str) -> u16 {
    let m = mac_for(name);
    u16::from_be_bytes([m[4], m[5]])
}

/// `02:5a:...` text of a MAC address.
pub fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Flows a VM sends from one source address (UDP source ports 1024 up); flow numbers beyond
/// change the address's last byte too.
pub const FLOWS_PER_ADDRESS: u32 = 60000;

/// Writes a whole frame for flow `flow` of a VM into `buf` (its length is the frame length).
pub fn write_frame(buf: &mut [u8], src_mac: [u8; 6], src_ip: [u8; 4], dst_mac: [u8; 6], dst_ip: [u8; 4], flow: u32) {
    // Flows differ in the UDP source port, then in the source address's last byte.
    let port = 1024 + (flow % FLOWS_PER_ADDRESS) as u16;
    let mut ip = src_ip;
    ip[3] = ip[3].wrapping_add((flow / FLOWS_PER_ADDRESS) as u8);
    write_udp4(buf, dst_mac, src_mac, ip, dst_ip, port, 9);
}

/// Frames a hostile VM sends, one for each way the switch's parser refuses a frame
/// (`slaswitch_classifier::parse::ParseError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Malformed {
    /// 10 bytes, shorter than an Ethernet header.
    Runt,
    /// An 802.1Q tag cut short (16 bytes).
    TruncatedVlan,
    /// 10 bytes of an IPv4 header.
    TruncatedIpv4,
    /// IHL of 4 words, below the 5 a header needs.
    BadIhl,
    /// IP version 5.
    BadVersion,
    /// A total length beyond the frame.
    BadLength,
    /// 30 bytes of an IPv6 header.
    TruncatedIpv6,
    /// A UDP header cut to 4 bytes (the IPv4 total length says so).
    TruncatedL4,
}

impl Malformed {
    /// Every kind, by its name.
    pub const ALL: [(&'static str, Malformed); 8] = [
        ("runt", Malformed::Runt),
        ("truncated-vlan", Malformed::TruncatedVlan),
        ("truncated-ipv4", Malformed::TruncatedIpv4),
        ("bad-ihl", Malformed::BadIhl),
        ("bad-version", Malformed::BadVersion),
        ("bad-length", Malformed::BadLength),
        ("truncated-ipv6", Malformed::TruncatedIpv6),
        ("truncated-l4", Malformed::TruncatedL4),
    ];

    /// One of the names in [`Self::ALL`].
    pub fn parse(s: &str) -> Result<Malformed, crate::SpecError> {
        Self::ALL.iter().find(|(name, _)| *name == s).map(|(_, m)| *m).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
            crate::SpecError::new(format!("malformed={s}"), names.join(", "))
        })
    }

    /// Breaks a frame [`write_frame`] wrote; returns how many of its bytes to send.
    pub fn apply(self, buf: &mut [u8]) -> usize {
        match self {
            Malformed::Runt => return 10,
            Malformed::TruncatedVlan => {
                buf[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                return 16;
            }
            Malformed::TruncatedIpv4 => return 24,
            Malformed::BadIhl => buf[14] = 0x44,
            Malformed::BadVersion => buf[14] = 0x55,
            Malformed::BadLength => buf[16..18].copy_from_slice(&u16::MAX.to_be_bytes()),
            Malformed::TruncatedIpv6 => {
                buf[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                buf[14] = 0x60;
                return 44;
            }
            Malformed::TruncatedL4 => {
                buf[16..18].copy_from_slice(&24u16.to_be_bytes());
                return 38;
            }
        }
        buf.len()
    }
}

/// Stamps the payload; frames of 60 bytes or more always have room (42 + 22 = 64 > 60 is cut
/// to the frame: the TSC then goes unwritten and the sink counts without latency).
#[inline]
pub fn stamp(buf: &mut [u8], sender: u16, seq: u64, tsc: u64) {
    if buf.len() >= PAYLOAD + STAMP_LEN {
        buf[PAYLOAD..PAYLOAD + 4].copy_from_slice(&MAGIC.to_le_bytes());
        buf[PAYLOAD + 4..PAYLOAD + 6].copy_from_slice(&sender.to_le_bytes());
        buf[PAYLOAD + 6..PAYLOAD + 14].copy_from_slice(&seq.to_le_bytes());
        buf[PAYLOAD + 14..PAYLOAD + 22].copy_from_slice(&tsc.to_le_bytes());
    }
}

/// Rewrites a stamped frame's TSC: a frame that waited in its sender's queue is stamped with
/// when it really goes out.
#[inline]
pub fn restamp_tsc(buf: &mut [u8], tsc: u64) {
    if buf.len() >= PAYLOAD + STAMP_LEN {
        buf[PAYLOAD + 14..PAYLOAD + 22].copy_from_slice(&tsc.to_le_bytes());
    }
}

/// (sender id, sequence, TSC) if the frame carries a stamp.
#[inline]
pub fn read_stamp(frame: &[u8]) -> Option<(u16, u64, u64)> {
    let p = frame.get(PAYLOAD..PAYLOAD + STAMP_LEN)?;
    if u32::from_le_bytes(p[0..4].try_into().ok()?) != MAGIC {
        return None;
    }
    Some((
        u16::from_le_bytes(p[4..6].try_into().ok()?),
        u64::from_le_bytes(p[6..14].try_into().ok()?),
        u64::from_le_bytes(p[14..22].try_into().ok()?),
    ))
}
