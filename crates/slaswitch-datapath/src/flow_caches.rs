//! One rx port's classification caches, in the order a packet meets them: the exact-match cache,
//! then the megaflow cache, then the full classifier, whose answer fills both. While the port's
//! megaflows share a single mask, the exact-match cache is left out: one masked compare or hash
//! probe into a small table costs less than probing the 512 KiB exact-match table, which many
//! flows keep out of the CPU's caches. Each port has its
//! own, so a VM's many flows evict only its own entries (OVS shares an EMC per PMD, and a
//! many-flow VM there turns its neighbours' hits into misses: seed 000 Fig. 5c's cost lands on
//! them); OVS likewise keeps a datapath classifier per input port.

use slaswitch_classifier::{Classifier, ExactMatchCache, FlowKey, MegaflowCache};

use crate::counters::RxTotals;

/// The caches of one rx port.
pub(crate) struct FlowCaches {
    pub(crate) emc: ExactMatchCache,
    megaflows: MegaflowCache,
}

impl FlowCaches {
    pub(crate) fn new() -> FlowCaches {
        FlowCaches { emc: ExactMatchCache::new(), megaflows: MegaflowCache::new() }
    }

    /// The rules changed: the exact-match entries go (they name old rule ids), the megaflows are
    /// re-derived from the new rules and keep what still holds.
    pub(crate) fn rules_changed(&mut self, classifier: &Classifier) {
        self.emc.invalidate();
        self.megaflows.revalidate(classifier);
    }

    /// True while the exact-match cache is worth its probe: the megaflows need more than one
    /// mask table.
    #[inline]
    pub(crate) fn uses_emc(&self) -> bool {
        self.megaflows.mask_count() > 1
    }

    /// The rule `key` matches (`NO_RULE` if none) and the bits that answer depended on (every
    /// bit for an exact-match hit), counting which tier answered. A packet the megaflow cache
    /// answers counts as an exact-match miss also while that cache is left out: the miss share
    /// stays what the bandwidth-CPU model prices many flows by (seed 000 Sec. III-B), the packets
    /// that needed more than an exact match.
    #[inline]
    pub(crate) fn resolve(
        &mut self,
        classifier: &Classifier,
        key: &FlowKey,
        hash: u64,
        totals: &mut RxTotals,
    ) -> (u32, FlowKey) {
        let emc = self.uses_emc();
        if emc {
            if let Some(v) = self.emc.lookup(key, hash) {
                totals.emc_hits += 1;
                return (v, FlowKey::EXACT);
            }
        }
        totals.emc_misses += 1;
        let answer = self.megaflows.resolve(classifier, key);
        if answer.cached {
            totals.megaflow_hits += 1;
        } else {
            totals.megaflow_misses += 1;
        }
        if emc {
            self.emc.insert(key, hash, answer.rule);
        }
        (answer.rule, answer.mask)
    }

    /// Megaflows held.
    pub(crate) fn megaflow_count(&self) -> usize {
        self.megaflows.len()
    }
}
