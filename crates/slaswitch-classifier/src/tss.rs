//! The wildcard classifier: tuple space search (Srinivasan et al., SIGCOMM 1999), as OVS's
//! dpcls does. Rules with the same mask share a subtable, a hash table from masked key to the
//! rules with that value (highest priority first). A lookup masks the packet once per subtable and
//! probes its table; subtables are visited in order of their best priority, so the walk stops as
//! soon as no remaining subtable can beat what was found. Cost grows with the number of distinct
//! masks, which is why a cache sits in front of it.
//!
//! Prefix tracking (`prefix_trie`) skips a subtable whose source or destination prefix length no
//! rule can match for the packet, and [`Classifier::lookup_wc`] reports which key bits the answer
//! depended on: the mask of the megaflow that caches it (`megaflow`).
//!
//! The structure is immutable once built: the control plane builds a new one when rules change and
//! hands it to the PMD threads, which swap it in between batches (no lock on the hot path).

use std::collections::HashMap;

use crate::flow_key::{BuildPreHashed, FlowKey};
use crate::prefix_trie::{prefix_len, prefix_mask, PrefixTrie, PrefixWalk};
use crate::rule::{Match, Rule};

/// A rule's index in [`Classifier::rules`].
pub type RuleId = u32;

/// Subtables with at most this many distinct values are searched by comparing each value
/// instead of hashing: a security-group rule set has many masks with one or two values each, and
/// comparing a few values costs less than hashing the masked key once per subtable
/// (`cargo bench -p slaswitch-classifier --bench lookup`; `docs/results/benchmarks.md`).
const LINEAR_MAX: usize = 4;

#[derive(Clone, Debug)]
struct Subtable {
    mask: FlowKey,
    max_priority: u32,
    /// Masked key -> rule ids, highest priority first.
    entries: HashMap<FlowKey, Vec<RuleId>, BuildPreHashed>,
    /// The same entries as (masked key, best rule) when there are few of them.
    linear: Vec<(FlowKey, RuleId)>,
    /// Its prefix length on the source and destination IP, when the mask there is a non-empty
    /// prefix: what prefix tracking can rule out.
    prefix_bits: [Option<u8>; 2],
}

/// The IP fields prefix tracking follows: source, then destination.
const SRC: usize = 0;
const DST: usize = 1;

fn ip_field(key: &FlowKey, field: usize) -> [u8; 16] {
    if field == SRC {
        key.ip_src()
    } else {
        key.ip_dst()
    }
}

impl Subtable {
    #[inline]
    fn best(&self, key: &FlowKey) -> Option<RuleId> {
        if self.entries.len() <= LINEAR_MAX {
            self.linear.iter().find(|(value, _)| key.masked_eq(&self.mask, value)).map(|(_, id)| *id)
        } else {
            self.entries.get(&key.masked(&self.mask)).map(|ids| ids[0])
        }
    }
}

/// Tuple space search over the rules: one table per distinct mask, searched in order of their
/// best priority, so a lookup stops once no remaining table can beat the match found.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    rules: Vec<Rule>,
    subtables: Vec<Subtable>,
    /// When every rule matches on nothing but the input port, the answer per input port (the
    /// same idea as OVS 3's "simple match"): no hash and no exact-match cache needed.
    by_in_port: Option<Vec<Option<RuleId>>>,
    /// The rules' source and destination prefixes.
    tries: [PrefixTrie; 2],
}

impl Classifier {
    /// Builds the classifier. A later rule with the same match and priority as an earlier one
    /// replaces it (`add-flow` of an existing flow modifies it, as in OpenFlow).
    pub fn new(rules: Vec<Rule>) -> Classifier {
        let mut unique: Vec<Rule> = Vec::with_capacity(rules.len());
        for r in rules {
            match unique.iter_mut().find(|u| u.priority == r.priority && u.matcher == r.matcher) {
                Some(existing) => *existing = r,
                None => unique.push(r),
            }
        }
        let mut subtables: Vec<Subtable> = Vec::new();
        for (id, rule) in unique.iter().enumerate() {
            let mask = rule.matcher.mask;
            let st = match subtables.iter_mut().position(|s| s.mask == mask) {
                Some(i) => &mut subtables[i],
                None => {
                    let prefix_bits =
                        [SRC, DST].map(|f| prefix_len(&ip_field(&mask, f)).filter(|&n| n > 0).map(|n| n as u8));
                    subtables.push(Subtable {
                        mask,
                        max_priority: 0,
                        entries: HashMap::default(),
                        linear: Vec::new(),
                        prefix_bits,
                    });
                    subtables.last_mut().expect("just pushed")
                }
            };
            st.max_priority = st.max_priority.max(rule.priority);
            st.entries.entry(rule.matcher.key).or_default().push(id as RuleId);
        }
        for st in &mut subtables {
            for ids in st.entries.values_mut() {
                ids.sort_by_key(|&id| std::cmp::Reverse(unique[id as usize].priority));
            }
            st.linear = st.entries.iter().map(|(k, ids)| (*k, ids[0])).collect();
        }
        subtables.sort_by_key(|s| std::cmp::Reverse(s.max_priority));
        let mut tries = [PrefixTrie::default(), PrefixTrie::default()];
        for st in &subtables {
            for f in [SRC, DST] {
                if let Some(n) = st.prefix_bits[f] {
                    for value in st.entries.keys() {
                        tries[f].insert(&ip_field(value, f), n.into());
                    }
                }
            }
        }
        let mut c = Classifier { rules: unique, subtables, by_in_port: None, tries };
        let in_port_only = |m: &FlowKey| m.0[0] & !0xffff == 0 && m.0[1..].iter().all(|&w| w == 0);
        if !c.rules.is_empty() && c.rules.iter().all(|r| in_port_only(&r.matcher.mask)) {
            let table = (0..=u16::MAX as usize)
                .take(1024)
                .map(|p| {
                    let mut k = FlowKey::ZERO;
                    k.set_in_port(p as u16);
                    c.lookup(&k)
                })
                .collect();
            c.by_in_port = Some(table);
        }
        c
    }

    /// `Some(answer)` when the rules depend on the input port alone (ports 0 to 1023), so the
    /// caller can skip hashing and caching; `None` when a full lookup is needed.
    #[inline]
    pub fn by_in_port(&self, in_port: u16) -> Option<Option<RuleId>> {
        self.by_in_port.as_ref().and_then(|t| t.get(in_port as usize).copied())
    }

    /// Every rule, in the order they were given.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// One rule by its id.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id as usize]
    }

    /// Distinct masks, one hash table each.
    pub fn subtable_count(&self) -> usize {
        self.subtables.len()
    }

    /// The highest-priority rule matching `key`, if any.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<RuleId> {
        let mut ignored = FlowKey::ZERO;
        self.lookup_wc(key, &mut ignored)
    }

    /// [`Classifier::lookup`], also adding to `wildcards` every key bit the answer depended on:
    /// any key that agrees with `key` on those bits gets the same answer. The masks of the
    /// subtables it searched, and for a subtable prefix tracking ruled out, only the leading
    /// address bits that ruled it out.
    #[inline]
    pub fn lookup_wc(&self, key: &FlowKey, wildcards: &mut FlowKey) -> Option<RuleId> {
        let mut best: Option<(u32, RuleId)> = None;
        let mut walks: [Option<PrefixWalk>; 2] = [None, None];
        // Per IP field, the most leading bits a skipped subtable depended on.
        let mut skipped_bits = [0usize; 2];
        for st in &self.subtables {
            if best.is_some_and(|(p, _)| p >= st.max_priority) {
                break;
            }
            if let Some((f, bits)) = self.ruled_out(st, key, &mut walks) {
                skipped_bits[f] = skipped_bits[f].max(bits);
                continue;
            }
            wildcards.or(&st.mask);
            if let Some(id) = st.best(key) {
                let p = self.rules[id as usize].priority;
                if best.is_none_or(|(bp, _)| p > bp) {
                    best = Some((p, id));
                }
            }
        }
        if skipped_bits[SRC] > 0 {
            wildcards.or_ip_src(prefix_mask(skipped_bits[SRC]));
        }
        if skipped_bits[DST] > 0 {
            wildcards.or_ip_dst(prefix_mask(skipped_bits[DST]));
        }
        best.map(|(_, id)| id)
    }

    /// When no rule has `st`'s prefix length on an IP field that contains the key's address:
    /// that field, and how many of its leading bits decided it.
    #[inline]
    fn ruled_out(&self, st: &Subtable, key: &FlowKey, walks: &mut [Option<PrefixWalk>; 2]) -> Option<(usize, usize)> {
        for f in [SRC, DST] {
            let Some(len) = st.prefix_bits[f] else { continue };
            let walk = walks[f].get_or_insert_with(|| self.tries[f].walk(&ip_field(key, f)));
            if !walk.has_length(len.into()) {
                return Some((f, walk.bits_for(len.into())));
            }
        }
        None
    }

    /// Rules whose match equals `matcher` (and priority, if given): what `del-flows --strict` and
    /// `del-flows` with a match remove.
    pub fn without(&self, matcher: Option<&Match>, priority: Option<u32>) -> (Vec<Rule>, usize) {
        let mut kept = Vec::new();
        let mut removed = 0;
        for r in &self.rules {
            let hit = matcher.is_none_or(|m| &r.matcher == m) && priority.is_none_or(|p| r.priority == p);
            if hit {
                removed += 1;
            } else {
                kept.push(r.clone());
            }
        }
        (kept, removed)
    }
}
