//! The MAC learning table behind the `normal` action: source MAC (and VLAN) -> port it was seen
//! on, with aging and a size cap. Each PMD thread keeps its own table (no lock on the hot path).

use std::collections::HashMap;

/// A hasher for MAC-table keys: one multiply-and-shift, enough for keys that are MACs.
#[derive(Default, Clone, Copy)]
pub struct MixU64(u64);

impl std::hash::Hasher for MixU64 {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
}

type Map = HashMap<u64, (u16, u64), std::hash::BuildHasherDefault<MixU64>>;

/// MAC learning: (MAC, VLAN) to the port it was last seen on, aged out after a while.
pub struct MacTable {
    map: Map,
    capacity: usize,
    max_age: u64,
}

fn key(mac: [u8; 6], vlan: u16) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&mac);
    u64::from_le_bytes(b) | (u64::from(vlan & 0x0fff) << 48)
}

/// True for a group (multicast or broadcast) address.
pub fn is_multicast(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 1
}

impl MacTable {
    /// `max_age` in the caller's time unit (the data plane passes TSC ticks).
    pub fn new(capacity: usize, max_age: u64) -> Self {
        MacTable { map: Map::default(), capacity, max_age }
    }

    /// Sets how long an entry lives, in the clock's units.
    pub fn set_max_age(&mut self, max_age: u64) {
        self.max_age = max_age;
    }

    /// Addresses known.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no address is known.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Records that `mac` was seen on `port` at `now`. Multicast sources are never learned.
    #[inline]
    pub fn learn(&mut self, mac: [u8; 6], vlan: u16, port: u16, now: u64) {
        if is_multicast(mac) {
            return;
        }
        let k = key(mac, vlan);
        if let Some(e) = self.map.get_mut(&k) {
            *e = (port, now);
            return;
        }
        if self.map.len() >= self.capacity {
            self.expire(now);
            if self.map.len() >= self.capacity {
                return;
            }
        }
        self.map.insert(k, (port, now));
    }

    /// The port `mac` was last seen on, unless that was longer ago than the aging time.
    #[inline]
    pub fn lookup(&self, mac: [u8; 6], vlan: u16, now: u64) -> Option<u16> {
        self.map.get(&key(mac, vlan)).filter(|&&(_, seen)| now.saturating_sub(seen) <= self.max_age).map(|&(p, _)| p)
    }

    /// Forgets the addresses older than the maximum age at `now`.
    pub fn expire(&mut self, now: u64) {
        let max_age = self.max_age;
        self.map.retain(|_, &mut (_, seen)| now.saturating_sub(seen) <= max_age);
    }

    /// Forgets everything learned on `port` (it was removed).
    pub fn flush_port(&mut self, port: u16) {
        self.map.retain(|_, &mut (p, _)| p != port);
    }
}
