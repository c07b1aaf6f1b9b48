//! ANCS, the advanced network credit scheduler (seed 002 Sec. 3, Fig. 3).
//!
//! Credits are bytes. Every accounting period (30 ms by default, Sec. 3.2) each interface (vif)
//! receives `CreditFair`, its weight's share of what the link carries in a period, raised to
//! `MinimumCredit` and capped at `MaximumCredit` (Sec. 3.3), with the difference taken from or
//! given to the others (weighted water-filling). Requests are served round robin; a vif whose
//! credit is below its head packet's size waits for the next period (Sec. 3.2).
//!
//! Work conservation (Sec. 3.4), as we read Fig. 3: at each period a vif's credit is reset to its
//! `CreditPeak` (its allocation for this period). What an *idle* vif (no pending request at the
//! end of the period) left unused becomes `CreditLeft`, is collected in `CreditNext`, and is
//! handed out in the next period by weight to the vifs that have pending requests (Sec. 3.1 ii:
//! "yields unused network resources to other VMs that have pending network requests"), never past
//! their `MaximumCredit`. Credit a *backlogged* vif could not spend is dropped: it was left because
//! the link was full, not because capacity was spare, and recycling it over-commits the next
//! period (the shares then drift towards equal, since round robin decides who gets the link;
//! `tests/egress_ancs.rs`). Credit no backlogged vif can take is dropped too:
//! credit is a rate, and storing it would let a burst exceed the link.
//!
//! Round robin, as we implement it: a visit lets a vif spend up to 1/`VISITS_PER_PERIOD` of its
//! period's credit (at least one packet), so every backlogged vif spends its credit at the pace of
//! its allocation and all run out together at the end of the period. With one packet per visit the
//! small vifs ran dry early and the largest one was left holding credit at the period's end, a
//! bias of about 1% against high weights.
//!
//! Policies change at run time with [`Ancs::set_policy`]; a new maximum applies at once to the
//! credit a vif holds, everything else from the next period.

use std::collections::VecDeque;

use super::fill::{weighted_fill, Claim};
use super::{Dequeued, EgressScheduler, PacketQueues, QueueIndex};
use crate::QosError;
use crate::NS_PER_SEC;

/// Round-robin visits over which a vif's period credit is spread.
const VISITS_PER_PERIOD: f64 = 64.0;

/// The per-vif performance policy (Sec. 3.3); min and max may be combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AncsPolicy {
    /// The vif's share of the link relative to the others.
    pub weight: u32,
    /// MinimumCredit: the rate it gets whatever the others do.
    pub min_rate_bps: Option<u64>,
    /// MaximumCredit: the rate it never exceeds.
    pub max_rate_bps: Option<u64>,
}

impl AncsPolicy {
    /// A policy with a weight only.
    pub fn weighted(weight: u32) -> Self {
        AncsPolicy { weight, min_rate_bps: None, max_rate_bps: None }
    }
}

/// ANCS's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AncsConfig {
    /// The link's rate, bits per second.
    pub link_rate_bps: u64,
    /// Accounting period (seed 002: 30 ms).
    pub period_ns: u64,
}

impl AncsConfig {
    /// The paper's 30 ms period on a link of `link_rate_bps`.
    pub fn new(link_rate_bps: u64) -> Self {
        AncsConfig { link_rate_bps, period_ns: 30_000_000 }
    }
    fn bytes_per_period(&self, rate_bps: u64) -> f64 {
        rate_bps as f64 / 8.0 * self.period_ns as f64 / NS_PER_SEC as f64
    }
}

#[derive(Clone, Debug)]
struct Vif {
    policy: AncsPolicy,
    remain_credit: f64,
    credit_fair: f64,
    credit_peak: f64,
    /// In the round-robin ring or the out-of-credit list.
    listed: bool,
}

/// Figures of one vif, for reports and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AncsVifView {
    /// Its policy.
    pub policy: AncsPolicy,
    /// Credit left in this period.
    pub remain_credit_bytes: f64,
    /// Its fair credit per period.
    pub credit_fair_bytes: f64,
    /// The most credit it may hold.
    pub credit_peak_bytes: f64,
}

/// ANCS (seed 002): credit-based scheduling of vifs' packets onto one link.
pub struct Ancs<T> {
    config: AncsConfig,
    queues: PacketQueues<T>,
    vifs: Vec<Option<Vif>>,
    /// Backlogged vifs in round-robin order.
    ring: VecDeque<QueueIndex>,
    /// Backlogged vifs whose credit is below their head packet until the next period.
    out_of_credit: Vec<QueueIndex>,
    credit_next: f64,
    next_period_ns: u64,
    /// Bytes the vif at the front of the ring may still send in its current visit.
    visit_budget: f64,
}

impl<T> Ancs<T> {
    /// A scheduler with no vif, its period started at `now_ns`.
    pub fn new(config: AncsConfig, now_ns: u64) -> Result<Self, QosError> {
        if config.period_ns == 0 || config.link_rate_bps == 0 {
            return Err(QosError::Unusable("ANCS needs a positive link rate and accounting period"));
        }
        Ok(Ancs {
            config,
            queues: PacketQueues::default(),
            vifs: Vec::new(),
            ring: VecDeque::new(),
            out_of_credit: Vec::new(),
            credit_next: 0.0,
            next_period_ns: now_ns,
            visit_budget: 0.0,
        })
    }

    /// Its settings.
    pub fn config(&self) -> AncsConfig {
        self.config
    }

    /// Adds a vif or changes its policy. Refused (and nothing changes) when the minimums would
    /// exceed the link, or a minimum exceeds the vif's own maximum.
    pub fn set_policy(&mut self, queue: QueueIndex, policy: AncsPolicy, limit_packets: usize) -> Result<(), QosError> {
        if let (Some(min), Some(max)) = (policy.min_rate_bps, policy.max_rate_bps) {
            if min > max {
                return Err(QosError::MinAboveMax { queue, min_bps: min, max_bps: max });
            }
        }
        let other_minimums: u64 = self
            .vifs
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != queue)
            .filter_map(|(_, v)| v.as_ref()?.policy.min_rate_bps)
            .sum();
        let total_min = other_minimums + policy.min_rate_bps.unwrap_or(0);
        if total_min > self.config.link_rate_bps {
            return Err(QosError::MinimumsAboveLink { total_bps: total_min, link_bps: self.config.link_rate_bps });
        }
        if queue >= self.vifs.len() {
            self.vifs.resize(queue + 1, None);
        }
        let max_credit = policy.max_rate_bps.map(|r| self.config.bytes_per_period(r));
        match &mut self.vifs[queue] {
            Some(vif) => {
                vif.policy = policy;
                if let Some(max) = max_credit {
                    vif.remain_credit = vif.remain_credit.min(max);
                }
            }
            slot => *slot = Some(Vif { policy, remain_credit: 0.0, credit_fair: 0.0, credit_peak: 0.0, listed: false }),
        }
        self.queues.add(queue, limit_packets);
        self.recompute_fair();
        // A new vif must not wait a whole period for its first credit, and no vif keeps more
        // than its new fair share of the current period.
        for (i, vif) in self.vifs.iter_mut().enumerate() {
            let Some(vif) = vif else { continue };
            if i == queue && vif.credit_peak == 0.0 {
                vif.credit_peak = vif.credit_fair;
                vif.remain_credit = vif.credit_fair;
            }
            vif.remain_credit = vif.remain_credit.min(vif.credit_fair);
        }
        Ok(())
    }

    /// Removes a vif; returns its queued packets (with their lengths) for the caller to free.
    pub fn remove(&mut self, queue: QueueIndex) -> Vec<(u32, T)> {
        if let Some(slot) = self.vifs.get_mut(queue) {
            *slot = None;
        }
        if self.ring.front() == Some(&queue) {
            self.visit_budget = 0.0;
        }
        self.ring.retain(|&q| q != queue);
        self.out_of_credit.retain(|&q| q != queue);
        let packets = self.queues.remove(queue);
        self.recompute_fair();
        packets
    }

    /// A vif's figures (`None`: no such vif).
    pub fn view(&self, queue: QueueIndex) -> Option<AncsVifView> {
        let v = self.vifs.get(queue)?.as_ref()?;
        Some(AncsVifView {
            policy: v.policy,
            remain_credit_bytes: v.remain_credit,
            credit_fair_bytes: v.credit_fair,
            credit_peak_bytes: v.credit_peak,
        })
    }

    fn claims(&self, indices: &[QueueIndex], with_floor: bool) -> Vec<Claim> {
        indices
            .iter()
            .map(|&i| {
                let p = self.vifs[i].as_ref().expect("listed vif").policy;
                Claim {
                    weight: f64::from(p.weight),
                    floor: if with_floor {
                        p.min_rate_bps.map_or(0.0, |r| self.config.bytes_per_period(r))
                    } else {
                        0.0
                    },
                    ceiling: p.max_rate_bps.map_or(f64::INFINITY, |r| self.config.bytes_per_period(r)),
                }
            })
            .collect()
    }

    /// CreditFair of every vif: the link's bytes per period split by weight within min and max.
    fn recompute_fair(&mut self) {
        let indices: Vec<QueueIndex> = (0..self.vifs.len()).filter(|&i| self.vifs[i].is_some()).collect();
        let claims = self.claims(&indices, true);
        let fair = weighted_fill(&claims, self.config.bytes_per_period(self.config.link_rate_bps));
        for (&i, f) in indices.iter().zip(fair) {
            self.vifs[i].as_mut().expect("vif").credit_fair = f;
        }
    }

    /// One accounting period (Fig. 3), run lazily when a dequeue finds the period over.
    fn account(&mut self) {
        self.recompute_fair();
        // CreditNext from the previous period goes to backlogged vifs by weight, each up to its
        // maximum minus what it already gets.
        let backlogged: Vec<QueueIndex> =
            (0..self.vifs.len()).filter(|&i| self.vifs[i].is_some() && self.queues.is_backlogged(i)).collect();
        let mut claims = self.claims(&backlogged, false);
        for (c, &i) in claims.iter_mut().zip(&backlogged) {
            c.ceiling = (c.ceiling - self.vifs[i].as_ref().expect("vif").credit_fair).max(0.0);
        }
        let bonus = weighted_fill(&claims, self.credit_next);
        let mut bonus_of = vec![0.0; self.vifs.len()];
        for (&i, b) in backlogged.iter().zip(bonus) {
            bonus_of[i] = b;
        }
        let mut credit_next = 0.0;
        for (i, vif) in self.vifs.iter_mut().enumerate() {
            let Some(vif) = vif else { continue };
            if !self.queues.is_backlogged(i) {
                // CreditLeft: what an idle vif did not use goes to CreditNext (Sec. 3.4).
                credit_next += vif.remain_credit.max(0.0);
            }
            vif.credit_peak = vif.credit_fair + bonus_of[i];
            // A debt (frames the link's latency class sent ahead) is paid from this period's
            // credit, at most a period's worth; without one this is Fig. 3's reset.
            let debt = vif.remain_credit.min(0.0).max(-vif.credit_peak);
            vif.remain_credit = vif.credit_peak + debt;
        }
        self.credit_next = credit_next;
        for q in self.out_of_credit.drain(..) {
            self.ring.push_back(q);
        }
    }
}

impl<T> Ancs<T> {
    /// Starts the periods that have begun by `now_ns`.
    fn roll_period(&mut self, now_ns: u64) {
        if now_ns >= self.next_period_ns {
            self.account();
            let periods = (now_ns - self.next_period_ns) / self.config.period_ns + 1;
            self.next_period_ns += periods * self.config.period_ns;
        }
    }
}

impl<T> EgressScheduler<T> for Ancs<T> {
    fn enqueue(&mut self, queue: QueueIndex, len_bytes: u32, item: T, _now_ns: u64) -> Result<(), T> {
        self.queues.push(queue, len_bytes, item)?;
        let vif = self.vifs[queue].as_mut().expect("a queue exists only with its vif");
        if !vif.listed {
            vif.listed = true;
            self.ring.push_back(queue);
        }
        Ok(())
    }

    fn dequeue(&mut self, now_ns: u64) -> Option<Dequeued<T>> {
        self.roll_period(now_ns);
        while let Some(&queue) = self.ring.front() {
            let Some(len) = self.queues.head_len(queue) else {
                self.ring.pop_front();
                self.visit_budget = 0.0;
                if let Some(Some(vif)) = self.vifs.get_mut(queue) {
                    vif.listed = false;
                }
                continue;
            };
            let vif = self.vifs[queue].as_mut().expect("listed vif");
            let len_f = f64::from(len);
            if vif.remain_credit < len_f {
                self.ring.pop_front();
                self.visit_budget = 0.0;
                self.out_of_credit.push(queue);
                continue;
            }
            if self.visit_budget <= 0.0 {
                // A new visit: this vif's slice of its period credit.
                self.visit_budget = (vif.credit_peak / VISITS_PER_PERIOD).max(len_f);
            }
            vif.remain_credit -= len_f;
            self.visit_budget -= len_f;
            let (len_bytes, item) = self.queues.pop(queue).expect("head exists");
            if !self.queues.is_backlogged(queue) {
                vif.listed = false;
                self.ring.pop_front();
                self.visit_budget = 0.0;
            } else if self.visit_budget <= 0.0 {
                self.ring.rotate_left(1);
            }
            return Some(Dequeued { queue, len_bytes, item });
        }
        None
    }

    fn dequeue_from(&mut self, queue: QueueIndex, now_ns: u64) -> Option<Dequeued<T>> {
        self.roll_period(now_ns);
        let vif = self.vifs.get_mut(queue)?.as_mut()?;
        let (len_bytes, item) = self.queues.pop(queue)?;
        // Paid from its period's credit like any departure; a debt delays its next turn. Its
        // place in the round robin stays and is skipped if found empty.
        vif.remain_credit -= f64::from(len_bytes);
        Some(Dequeued { queue, len_bytes, item })
    }

    fn queues(&self) -> &PacketQueues<T> {
        &self.queues
    }

    fn drop_head(&mut self, queue: QueueIndex) -> Option<(u32, T)> {
        // The ring finds an emptied vif at its next visit and unlists it.
        self.queues.pop(queue)
    }
}
