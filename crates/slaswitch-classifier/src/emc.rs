//! The exact-match cache: 8192 entries keyed by the whole flow key (OVS's EMC size), two probe
//! positions per key taken from its hash. A free or stale slot is always filled; a live one is
//! replaced only with probability 1/100, as OVS's `emc-insert-inv-prob` does: with more flows
//! than entries, always replacing makes every flow evict another and nothing hits, while rare
//! replacement keeps a stable subset cached. It remembers which rule (or none) a flow matched, so a
//! hit skips the subtable walk. Changing the rules invalidates it in O(1) by bumping a
//! generation number that every entry carries.

use crate::flow_key::FlowKey;

/// Entries of one exact-match cache.
pub const EMC_ENTRIES: usize = 8192;
const MASK: usize = EMC_ENTRIES - 1;

/// What a cached flow resolves to.
pub const NO_RULE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Entry {
    key: FlowKey,
    generation: u32,
    value: u32,
}

/// One in this many inserts may evict a live entry.
pub const INSERT_INV_PROB: u32 = 100;

/// An exact-match cache: a flow key's hash straight to the rule it matched last time.
pub struct ExactMatchCache {
    entries: Box<[Entry]>,
    generation: u32,
    /// xorshift state deciding the rare evictions.
    rng: u32,
    /// Lookups that found their key.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
}

impl Default for ExactMatchCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactMatchCache {
    /// An empty cache.
    pub fn new() -> Self {
        // Generation 0 is never current, so the empty table holds no valid entry.
        ExactMatchCache {
            entries: vec![Entry { key: FlowKey::ZERO, generation: 0, value: NO_RULE }; EMC_ENTRIES].into_boxed_slice(),
            generation: 1,
            rng: 0x9e37_79b9,
            hits: 0,
            misses: 0,
        }
    }

    /// Forgets every entry (the rules changed).
    pub fn invalidate(&mut self) {
        self.generation = self.generation.wrapping_add(1).max(1);
    }

    #[inline]
    fn probes(hash: u64) -> (usize, usize) {
        (hash as usize & MASK, (hash >> 32) as usize & MASK)
    }

    /// Starts loading both probe slots of `hash` into the cache. The data plane calls it for a
    /// whole batch before the lookups, so the misses of many-flow traffic overlap.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        let (a, b) = Self::probes(hash);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetch never faults; the pointers are in bounds anyway.
        unsafe {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.entries.as_ptr().add(a).cast());
            _mm_prefetch::<_MM_HINT_T0>(self.entries.as_ptr().add(b).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (a, b);
    }

    /// The cached value for `key` (a rule id or [`NO_RULE`]), counting the hit or miss.
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey, hash: u64) -> Option<u32> {
        let (a, b) = Self::probes(hash);
        for i in [a, b] {
            let e = &self.entries[i];
            if e.generation == self.generation && e.key == *key {
                self.hits += 1;
                return Some(e.value);
            }
        }
        self.misses += 1;
        None
    }

    /// Caches `value` for `key` in a free or stale probe slot; when both are live, evicts one of
    /// them with probability 1/[`INSERT_INV_PROB`].
    #[inline]
    pub fn insert(&mut self, key: &FlowKey, hash: u64, value: u32) {
        let (a, b) = Self::probes(hash);
        let slot = if self.entries[a].generation != self.generation {
            a
        } else if self.entries[b].generation != self.generation {
            b
        } else {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 17;
            self.rng ^= self.rng << 5;
            if !self.rng.is_multiple_of(INSERT_INV_PROB) {
                return;
            }
            if hash & (1 << 20) == 0 {
                a
            } else {
                b
            }
        };
        self.entries[slot] = Entry { key: *key, generation: self.generation, value };
    }
}
