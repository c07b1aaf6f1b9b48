//! The parsed fields of a packet as seven 64-bit words, so masking is seven ANDs and hashing is
//! seven multiply-rotates. A mask is a `FlowKey` too.
//!
//! Word layout:
//! * 0: in_port (bits 0-15), eth_type (16-31), vlan_tci (32-47, with 0x1000 set when tagged),
//!   ip_proto (48-55), ip version (56-59: 4 or 6, 0 for none)
//! * 1: eth_dst (bits 0-47), l4 src port (48-63)
//! * 2: eth_src (bits 0-47), l4 dst port (48-63)
//! * 3-4: IP source (IPv4 in the low 32 bits of word 3), 5-6: IP destination

use std::hash::{Hash, Hasher};

/// 64-bit words in a flow key.
pub const WORDS: usize = 7;

/// The fields a rule can match, packed into words so masking and hashing are word-wise.
#[derive(Clone, Copy, Debug, Default, PartialOrd, Ord)]
pub struct FlowKey(pub [u64; WORDS]);

impl PartialEq for FlowKey {
    /// Branchless: the derived comparison of a 56-byte array calls `memcmp`, a visible share of
    /// a PMD thread's time with many flows.
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        let mut diff = 0;
        for i in 0..WORDS {
            diff |= self.0[i] ^ other.0[i];
        }
        diff == 0
    }
}

impl Eq for FlowKey {}

/// Set in the stored VLAN TCI when the frame carried an 802.1Q tag (TCI 0 is a valid tag).
pub const VLAN_PRESENT: u16 = 0x1000;

fn mac_bits(mac: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&mac);
    u64::from_le_bytes(b)
}

fn mac_of(bits: u64) -> [u8; 6] {
    let b = bits.to_le_bytes();
    [b[0], b[1], b[2], b[3], b[4], b[5]]
}

/// The bits of a MAC address in its word.
pub(crate) const LOW48: u64 = (1 << 48) - 1;

/// A key's fields in the units of its words, each in a slot of its own, as the parser collects
/// them; [`KeyFields::key`] packs them once. Setting them in the key as found would have the
/// parser read back words it had just stored in part (a port beside a MAC), which the core's
/// store forwarding cannot serve: a stall on every frame.
#[derive(Default)]
pub(crate) struct KeyFields {
    pub(crate) eth_dst: u64,
    pub(crate) eth_src: u64,
    pub(crate) vlan_tci: u16,
    pub(crate) eth_type: u16,
    pub(crate) ip_version: u8,
    pub(crate) ip_proto: u8,
    pub(crate) ip_src: [u64; 2],
    pub(crate) ip_dst: [u64; 2],
    pub(crate) l4_src: u16,
    pub(crate) l4_dst: u16,
}

impl KeyFields {
    /// The key of a frame from `in_port` with these fields, in the layout the module names.
    #[inline(always)]
    pub(crate) fn key(&self, in_port: u16) -> FlowKey {
        FlowKey([
            u64::from(in_port)
                | u64::from(self.eth_type) << 16
                | u64::from(self.vlan_tci) << 32
                | u64::from(self.ip_proto) << 48
                | u64::from(self.ip_version & 0xf) << 56,
            self.eth_dst | u64::from(self.l4_src) << 48,
            self.eth_src | u64::from(self.l4_dst) << 48,
            self.ip_src[0],
            self.ip_src[1],
            self.ip_dst[0],
            self.ip_dst[1],
        ])
    }
}

impl FlowKey {
    /// The key with every field zero (and the mask that matches anything).
    pub const ZERO: FlowKey = FlowKey([0; WORDS]);

    /// The mask that keeps every bit: an exact match.
    pub const EXACT: FlowKey = FlowKey([u64::MAX; WORDS]);

    /// The key with only the bits `mask` keeps.
    #[inline]
    pub fn masked(&self, mask: &FlowKey) -> FlowKey {
        let mut out = [0u64; WORDS];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.0[i] & mask.0[i];
        }
        FlowKey(out)
    }

    /// True when this key under `mask` equals `value` (an already masked key): branchless, for
    /// the small tables that compare instead of hashing.
    #[inline(always)]
    pub fn masked_eq(&self, mask: &FlowKey, value: &FlowKey) -> bool {
        let mut diff = 0;
        for i in 0..WORDS {
            diff |= (self.0[i] & mask.0[i]) ^ value.0[i];
        }
        diff == 0
    }

    /// Adds `other`'s bits to this mask.
    #[inline]
    pub fn or(&mut self, other: &FlowKey) {
        for i in 0..WORDS {
            self.0[i] |= other.0[i];
        }
    }

    /// True when every bit of `self` is set in `mask` too.
    #[inline]
    pub fn within(&self, mask: &FlowKey) -> bool {
        (0..WORDS).all(|i| self.0[i] & !mask.0[i] == 0)
    }

    /// Adds the bits of `ip` (16 bytes, as [`FlowKey::ip_src`] reads) to the source IP's words.
    #[inline]
    pub fn or_ip_src(&mut self, ip: [u8; 16]) {
        let (a, b) = ip_words(ip);
        self.0[3] |= a;
        self.0[4] |= b;
    }

    /// Adds the bits of `ip` to the destination IP's words.
    #[inline]
    pub fn or_ip_dst(&mut self, ip: [u8; 16]) {
        let (a, b) = ip_words(ip);
        self.0[5] |= a;
        self.0[6] |= b;
    }

    /// A fast, well-mixed 64-bit hash: multiply-rotate per word in two independent chains (so
    /// the multiplies overlap), then mixed together.
    #[inline]
    pub fn hash64(&self) -> u64 {
        const K: u64 = 0xff51_afd7_ed55_8ccd;
        let w = &self.0;
        let mut a: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut b: u64 = 0xc2b2_ae3d_27d4_eb4f;
        a = (a ^ w[0]).wrapping_mul(K).rotate_left(29);
        b = (b ^ w[1]).wrapping_mul(K).rotate_left(31);
        a = (a ^ w[2]).wrapping_mul(K).rotate_left(29);
        b = (b ^ w[3]).wrapping_mul(K).rotate_left(31);
        a = (a ^ w[4]).wrapping_mul(K).rotate_left(29);
        b = (b ^ w[5]).wrapping_mul(K).rotate_left(31);
        a = (a ^ w[6]).wrapping_mul(K).rotate_left(29);
        let h = (a ^ b.rotate_left(17)).wrapping_mul(K);
        h ^ (h >> 32)
    }

    // Field accessors: setters and getters for building rules and keys.
    /// The port the packet came in on.
    pub fn in_port(&self) -> u16 {
        self.0[0] as u16
    }
    /// Sets the input port.
    pub fn set_in_port(&mut self, v: u16) {
        self.0[0] = (self.0[0] & !0xffff) | u64::from(v);
    }
    /// The Ethernet type (after any VLAN tag).
    pub fn eth_type(&self) -> u16 {
        (self.0[0] >> 16) as u16
    }
    /// Sets the Ethernet type.
    pub fn set_eth_type(&mut self, v: u16) {
        self.0[0] = (self.0[0] & !(0xffff << 16)) | (u64::from(v) << 16);
    }
    /// The VLAN tag's TCI (0 without a tag).
    pub fn vlan_tci(&self) -> u16 {
        (self.0[0] >> 32) as u16
    }
    /// Sets the VLAN TCI.
    pub fn set_vlan_tci(&mut self, v: u16) {
        self.0[0] = (self.0[0] & !(0xffff << 32)) | (u64::from(v) << 32);
    }
    /// The IP protocol (TCP 6, UDP 17, ...).
    pub fn ip_proto(&self) -> u8 {
        (self.0[0] >> 48) as u8
    }
    /// Sets the IP protocol.
    pub fn set_ip_proto(&mut self, v: u8) {
        self.0[0] = (self.0[0] & !(0xff << 48)) | (u64::from(v) << 48);
    }
    /// 4 or 6, or 0 for a frame without IP.
    pub fn ip_version(&self) -> u8 {
        ((self.0[0] >> 56) & 0xf) as u8
    }
    /// Sets the IP version.
    pub fn set_ip_version(&mut self, v: u8) {
        self.0[0] = (self.0[0] & !(0xf << 56)) | (u64::from(v & 0xf) << 56);
    }
    /// The destination MAC.
    pub fn eth_dst(&self) -> [u8; 6] {
        mac_of(self.0[1] & LOW48)
    }
    /// Sets the destination MAC.
    pub fn set_eth_dst(&mut self, mac: [u8; 6]) {
        self.0[1] = (self.0[1] & !LOW48) | mac_bits(mac);
    }
    /// The source MAC.
    pub fn eth_src(&self) -> [u8; 6] {
        mac_of(self.0[2] & LOW48)
    }
    /// Sets the source MAC.
    pub fn set_eth_src(&mut self, mac: [u8; 6]) {
        self.0[2] = (self.0[2] & !LOW48) | mac_bits(mac);
    }
    /// The TCP/UDP/SCTP source port (ICMP: type).
    pub fn l4_src(&self) -> u16 {
        (self.0[1] >> 48) as u16
    }
    /// Sets the L4 source port.
    pub fn set_l4_src(&mut self, v: u16) {
        self.0[1] = (self.0[1] & LOW48) | (u64::from(v) << 48);
    }
    /// The TCP/UDP/SCTP destination port (ICMP: code).
    pub fn l4_dst(&self) -> u16 {
        (self.0[2] >> 48) as u16
    }
    /// Sets the L4 destination port.
    pub fn set_l4_dst(&mut self, v: u16) {
        self.0[2] = (self.0[2] & LOW48) | (u64::from(v) << 48);
    }
    /// IP source as 16 bytes (IPv4: the first 4 bytes, the rest zero).
    pub fn ip_src(&self) -> [u8; 16] {
        ip_of(self.0[3], self.0[4])
    }
    /// Sets the source IP (IPv4 in the last four bytes).
    pub fn set_ip_src(&mut self, ip: [u8; 16]) {
        (self.0[3], self.0[4]) = ip_words(ip);
    }
    /// The destination IP (IPv4 in the last four bytes).
    pub fn ip_dst(&self) -> [u8; 16] {
        ip_of(self.0[5], self.0[6])
    }
    /// Sets the destination IP.
    pub fn set_ip_dst(&mut self, ip: [u8; 16]) {
        (self.0[5], self.0[6]) = ip_words(ip);
    }
}

fn ip_words(ip: [u8; 16]) -> (u64, u64) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&ip[..8]);
    b.copy_from_slice(&ip[8..]);
    (u64::from_le_bytes(a), u64::from_le_bytes(b))
}

fn ip_of(a: u64, b: u64) -> [u8; 16] {
    let mut ip = [0u8; 16];
    ip[..8].copy_from_slice(&a.to_le_bytes());
    ip[8..].copy_from_slice(&b.to_le_bytes());
    ip
}

impl Hash for FlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash64());
    }
}

/// A hasher for maps keyed by [`FlowKey`]: the key already hashed itself.
#[derive(Default, Clone, Copy)]
pub struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A hash map builder for keys that are hashes already.
pub type BuildPreHashed = std::hash::BuildHasherDefault<PreHashed>;
