//! The megaflow cache between the exact-match cache and the classifier, as OVS's datapath
//! classifier (dpcls) is: each entry is a key under the wildcard mask the classifier reported for
//! it ([`Classifier::lookup_wc`]), so one entry answers every flow that agrees on the bits the
//! rules looked at. Entries with the same mask share a hash table; a lookup probes the tables in
//! order of their recent hits, re-ranked every [`RANK_EVERY`] lookups (OVS re-sorts its subtables
//! each second; a count keeps this crate free of clocks).
//!
//! Two entries may overlap only when they give the same answer (each answer holds for every key
//! under its mask), so the first table that holds the key answers it. When the rules change,
//! [`MegaflowCache::revalidate`] asks the new classifier about each entry: it stays, with the
//! new answer, if the new answer depends on no bit its mask wildcards; otherwise it goes.

use std::collections::HashMap;

use crate::emc::NO_RULE;
use crate::flow_key::{BuildPreHashed, FlowKey};
use crate::tss::Classifier;

/// Entries one cache holds at most; inserting into a full cache empties it first (OVS's
/// datapath flow limit plays the same part).
pub const MEGAFLOW_MAX: usize = 32768;

/// Lookups between two re-rankings of the tables.
pub const RANK_EVERY: u32 = 1 << 14;

/// Tables with at most this many entries are searched by comparing each instead of hashing: a
/// wide security group leaves one or two megaflows per port, and comparing one costs less than
/// hashing the masked key.
const LINEAR_MAX: usize = 4;

#[derive(Clone, Debug)]
struct MaskTable {
    mask: FlowKey,
    /// Hits since the last ranking.
    hits: u64,
    /// Masked key -> rule id, or [`NO_RULE`].
    flows: HashMap<FlowKey, u32, BuildPreHashed>,
    /// The same entries while there are at most [`LINEAR_MAX`] of them.
    linear: Vec<(FlowKey, u32)>,
}

impl MaskTable {
    #[inline]
    fn get(&self, key: &FlowKey) -> Option<u32> {
        if self.flows.len() <= LINEAR_MAX {
            self.linear.iter().find(|(value, _)| key.masked_eq(&self.mask, value)).map(|(_, answer)| *answer)
        } else {
            self.flows.get(&key.masked(&self.mask)).copied()
        }
    }

    fn relist(&mut self) {
        self.linear.clear();
        if self.flows.len() <= LINEAR_MAX {
            self.linear.extend(self.flows.iter().map(|(k, v)| (*k, *v)));
        }
    }
}

/// An answer of [`MegaflowCache::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The rule `key` matches, or [`NO_RULE`].
    pub rule: u32,
    /// The bits the answer depended on: every key that agrees with this one on them matches the
    /// same rule.
    pub mask: FlowKey,
    /// True when the cache held the answer; false when the classifier was asked.
    pub cached: bool,
}

/// What a revalidation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Revalidation {
    /// Entries whose answer still holds under their mask (possibly a different rule).
    pub kept: usize,
    /// Entries the new rules made too wide, removed.
    pub removed: usize,
}

/// Wildcarded flows and the rule each resolves to.
#[derive(Clone, Debug, Default)]
pub struct MegaflowCache {
    tables: Vec<MaskTable>,
    len: usize,
    since_rank: u32,
    /// Times a full cache was emptied to take a new entry.
    pub flushes: u64,
}

impl MegaflowCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Distinct masks, one table each: what a lookup that misses probes.
    pub fn mask_count(&self) -> usize {
        self.tables.len()
    }

    /// The cached answer for `key` (a rule id or [`NO_RULE`]).
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey) -> Option<u32> {
        self.find(key).map(|(v, _)| v)
    }

    /// The cached answer for `key` and the mask of the entry that gave it.
    #[inline]
    fn find(&mut self, key: &FlowKey) -> Option<(u32, FlowKey)> {
        self.since_rank += 1;
        if self.since_rank >= RANK_EVERY {
            self.rank();
        }
        for t in &mut self.tables {
            if let Some(v) = t.get(key) {
                t.hits += 1;
                return Some((v, t.mask));
            }
        }
        None
    }

    /// The answer for `key` from the cache, or else from `classifier`, whose answer is cached
    /// under the bits it depended on.
    #[inline]
    pub fn resolve(&mut self, classifier: &Classifier, key: &FlowKey) -> Resolved {
        match self.find(key) {
            Some((rule, mask)) => Resolved { rule, mask, cached: true },
            None => self.fill(classifier, key),
        }
    }

    /// A miss: asks `classifier` and caches its answer. Kept out of line, so a hit, the data
    /// plane's common case, does not pay for the classifier's stack frame.
    #[cold]
    #[inline(never)]
    fn fill(&mut self, classifier: &Classifier, key: &FlowKey) -> Resolved {
        let mut wildcards = FlowKey::ZERO;
        let rule = classifier.lookup_wc(key, &mut wildcards).unwrap_or(NO_RULE);
        self.insert(key, &wildcards, rule);
        Resolved { rule, mask: wildcards, cached: false }
    }

    /// Caches `value` for every key that agrees with `key` on `wildcards`' bits.
    pub fn insert(&mut self, key: &FlowKey, wildcards: &FlowKey, value: u32) {
        if self.len >= MEGAFLOW_MAX {
            self.tables.clear();
            self.len = 0;
            self.flushes += 1;
        }
        let i = match self.tables.iter().position(|t| t.mask == *wildcards) {
            Some(i) => i,
            None => {
                self.tables.push(MaskTable {
                    mask: *wildcards,
                    hits: 0,
                    flows: HashMap::default(),
                    linear: Vec::new(),
                });
                self.tables.len() - 1
            }
        };
        let t = &mut self.tables[i];
        if t.flows.insert(key.masked(wildcards), value).is_none() {
            self.len += 1;
        }
        t.relist();
    }

    /// Puts the tables with the most hits since the last ranking first.
    #[cold]
    pub fn rank(&mut self) {
        self.tables.sort_by_key(|t| std::cmp::Reverse(t.hits));
        for t in &mut self.tables {
            t.hits = 0;
        }
        self.since_rank = 0;
    }

    /// Re-derives every entry from `classifier` (the new rules): an entry whose key's new answer
    /// depends only on bits its mask keeps stays with that answer; any other entry is removed.
    pub fn revalidate(&mut self, classifier: &Classifier) -> Revalidation {
        let mut done = Revalidation::default();
        for t in &mut self.tables {
            let mask = t.mask;
            t.flows.retain(|key, value| {
                let mut needed = FlowKey::ZERO;
                let answer = classifier.lookup_wc(key, &mut needed);
                let holds = needed.within(&mask);
                if holds {
                    *value = answer.unwrap_or(NO_RULE);
                    done.kept += 1;
                } else {
                    done.removed += 1;
                }
                holds
            });
            t.relist();
        }
        self.tables.retain(|t| !t.flows.is_empty());
        self.len = done.kept;
        done
    }
}
