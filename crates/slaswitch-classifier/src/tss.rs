//! The wildcard classifier: tuple space search (Srinivasan et al., SIGCOMM 1999), as OVS's
//! dpcls does. Rules with the same mask share a subtable, a hash table from masked key to the
//! rules with that value (highest priority first). A lookup masks the packet once per subtable and
//! probes its table; subtables are visited in order of their best priority, so the walk stops as
//! soon as no remaining subtable can beat what was found. Cost grows with the number of distinct
//! masks, which is why a cache sits in front of it.
//!
//! The structure is immutable once built: the control plane builds a new one when rules change and
//! hands it to the PMD threads, which swap it in between batches (no lock on the hot path).

use std::collections::HashMap;

use crate::flow_key::{BuildPreHashed, FlowKey};
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
}

impl Subtable {
    #[inline]
    fn best(&self, key: &FlowKey) -> Option<RuleId> {
        if self.entries.len() <= LINEAR_MAX {
            for (value, id) in &self.linear {
                let mut diff = 0;
                for i in 0..crate::flow_key::WORDS {
                    diff |= (key.0[i] & self.mask.0[i]) ^ value.0[i];
                }
                if diff == 0 {
                    return Some(*id);
                }
            }
            None
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
                    subtables.push(Subtable { mask, max_priority: 0, entries: HashMap::default(), linear: Vec::new() });
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
        let mut c = Classifier { rules: unique, subtables, by_in_port: None };
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
        let mut best: Option<(u32, RuleId)> = None;
        for st in &self.subtables {
            if best.is_some_and(|(p, _)| p >= st.max_priority) {
                break;
            }
            if let Some(id) = st.best(key) {
                let p = self.rules[id as usize].priority;
                if best.is_none_or(|(bp, _)| p > bp) {
                    best = Some((p, id));
                }
            }
        }
        best.map(|(_, id)| id)
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
