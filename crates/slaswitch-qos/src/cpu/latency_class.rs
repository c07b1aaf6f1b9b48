//! Ours, an extension of HBS (seed 000 Sec. IV-B): a port of a latency class (priority 1 or 2)
//! that is within its purchase is not parked for lack of cycle tokens while the core has
//! cycles no port was promised.
//!
//! Why: HBS promises the top classes their latency while lower ones flood the core (Sec. IV-B,
//! Fig. 11c), and C2TB prices their purchase in cycles from the model's per-packet rows. A
//! light VM's batches hold one or two frames, each paying a batch's fixed work; when its
//! traffic costs more than it was priced at, it runs out of cycle tokens, and on a saturated
//! core (no idle cycles to lend) it waits behind the floods in the waiting queue, for
//! milliseconds, though it sends no more than it bought. The seed's own reading of a purchase
//! is bandwidth (Sec. III: the cycles are what that bandwidth needs), so a latency-class port
//! is held to its purchase in bytes as well as in cycles: while its bytes are within it, a
//! cycle debt is forgiven instead of parking the port.
//!
//! "Within its purchase": a byte bucket filling at the purchased rate, as deep as
//! [`BURST_NS`] of it (at least one batch of the largest frames), charged every batch's bytes.
//!
//! What is forgiven comes out of the cycles no port was promised: drift compensation hands
//! each latency-class port a share of what the compensated allocations leave of the core
//! ([`LatencyClass::set_cycle_budget`]), keeping at least [`FORGIVENESS_RESERVE_SHARE`] of the
//! latency-class allocations out of the others' reach, and a debt beyond it is not forgiven:
//! a latency-class VM priced below its real cost would otherwise take the difference from the
//! lowest classes' purchases, which HBS serves last.

use crate::meter::TokenBucket;
use crate::NS_PER_SEC;

/// Priority classes whose ports are latency-sensitive: 1 and 2.
pub const LATENCY_CLASSES: u8 = 2;
/// How far ahead of its rate a latency-class port may be and still be within its purchase.
pub const BURST_NS: u64 = 2_000_000;
/// A latency-class port's cycle budget holds this long of its share.
pub const BUDGET_NS: u64 = 10_000_000;
/// Share of the latency-class ports' compensated allocations that drift compensation keeps
/// unpromised to the other ports, so there is always something to forgive: the allocation
/// follows a light port's mean cost, and its one-frame batches cost more than that mean for
/// seconds at a time, while floods whose cost exceeds their price would otherwise be given
/// every cycle of the core. Ports that may borrow idle cycles still use it when the
/// latency-class ports do not.
pub const FORGIVENESS_RESERVE_SHARE: f64 = 0.5;
/// The budget holds at least one batch of the largest frames.
const MIN_BURST_BYTES: u64 = 32 * 1518;

/// Each latency-class port's byte budget and what has been forgiven it.
#[derive(Clone, Debug, Default)]
pub(crate) struct LatencyClass {
    /// Per port: its purchase as a byte bucket; `None` for a port that bought no bandwidth.
    budgets: Vec<Option<TokenBucket>>,
    /// Per port: cycles of debt forgiven so far.
    forgiven_cycles: Vec<u64>,
    /// Per port: the cycles it may still be forgiven, filling at its share of the cycles no
    /// port was promised; `None`: not bounded (no drift compensation to measure the core).
    cycle_budgets: Vec<Option<TokenBucket>>,
    /// Ports with a budget: none, and a batch's bytes are not looked at.
    ports: usize,
    /// Nanoseconds per TSC tick, [`NS_SHIFT`] fraction bits: a batch's clock without a division.
    ns_per_tick: u64,
}

/// Fraction bits of [`LatencyClass`]'s ticks-to-nanoseconds multiplier.
const NS_SHIFT: u32 = 32;

impl LatencyClass {
    pub(crate) fn new(tsc_hz: u64) -> LatencyClass {
        let ns_per_tick = ((u128::from(NS_PER_SEC) << NS_SHIFT) / u128::from(tsc_hz.max(1))) as u64;
        LatencyClass { ns_per_tick, ..Default::default() }
    }

    #[inline]
    fn ns(&self, tsc: u64) -> u64 {
        ((u128::from(tsc) * u128::from(self.ns_per_tick)) >> NS_SHIFT) as u64
    }

    /// Gives `port` a byte budget of `purchase_bps` (bits per second of frames), or none.
    pub(crate) fn set_purchase(&mut self, port: usize, purchase_bps: Option<u64>, now_tsc: u64) {
        if self.budgets.len() <= port {
            self.budgets.resize(port + 1, None);
            self.forgiven_cycles.resize(port + 1, 0);
            self.cycle_budgets.resize(port + 1, None);
        }
        let now_ns = self.ns(now_tsc);
        let budget = purchase_bps.filter(|&bps| bps > 0).map(|bps| {
            let bytes_per_sec = bps / 8;
            let burst = (u128::from(bytes_per_sec) * u128::from(BURST_NS) / u128::from(NS_PER_SEC)) as u64;
            TokenBucket::new(bytes_per_sec, burst.max(MIN_BURST_BYTES), now_ns)
        });
        // The same purchase keeps its bucket: a reconfiguration of other ports refills nothing.
        if self.budgets[port].map(|b| b.rate_per_sec()) != budget.map(|b| b.rate_per_sec()) {
            self.budgets[port] = budget;
        }
        self.ports = self.budgets.iter().filter(|b| b.is_some()).count();
    }

    /// Takes the port out.
    pub(crate) fn remove(&mut self, port: usize) {
        if let Some(b) = self.budgets.get_mut(port) {
            *b = None;
            self.forgiven_cycles[port] = 0;
            self.cycle_budgets[port] = None;
        }
        self.ports = self.budgets.iter().filter(|b| b.is_some()).count();
    }

    /// True when the port bought bandwidth.
    #[inline]
    pub(crate) fn has_purchase(&self, port: usize) -> bool {
        self.ports > 0 && self.budgets.get(port).is_some_and(|b| b.is_some())
    }

    /// Charges a batch's bytes to the port's budget (nothing beyond empty).
    #[inline]
    pub(crate) fn spend(&mut self, port: usize, bytes: u64, now_tsc: u64) {
        if self.ports == 0 {
            return;
        }
        let now_ns = self.ns(now_tsc);
        if let Some(Some(b)) = self.budgets.get_mut(port) {
            b.refill(now_ns);
            b.take(bytes.min(b.tokens()));
        }
    }

    /// True when the port has a budget and its bytes are within it now.
    #[inline]
    pub(crate) fn within_purchase(&mut self, port: usize, now_tsc: u64) -> bool {
        if self.ports == 0 {
            return false;
        }
        let now_ns = self.ns(now_tsc);
        match self.budgets.get_mut(port) {
            Some(Some(b)) => {
                b.refill(now_ns);
                b.tokens() > 0
            }
            _ => false,
        }
    }

    /// Bounds what the port may be forgiven to `cycles_per_sec` (`None`: unbounded), at most
    /// [`BUDGET_NS`] of it at once.
    pub(crate) fn set_cycle_budget(&mut self, port: usize, cycles_per_sec: Option<u64>, now_tsc: u64) {
        if self.cycle_budgets.len() <= port {
            return;
        }
        let now_ns = self.ns(now_tsc);
        let burst = |rate: u64| (u128::from(rate) * u128::from(BUDGET_NS) / u128::from(NS_PER_SEC)) as u64;
        self.cycle_budgets[port] = match (cycles_per_sec, self.cycle_budgets[port].take()) {
            (None, _) => None,
            (Some(rate), Some(mut b)) => {
                b.set_rate(rate, burst(rate), now_ns);
                Some(b)
            }
            (Some(rate), None) => Some(TokenBucket::new(rate, burst(rate), now_ns)),
        };
    }

    /// True when a debt of `debt_cycles` may be forgiven the port now: it is within its
    /// purchase and its cycle budget covers the debt (which it then pays).
    pub(crate) fn may_forgive(&mut self, port: usize, debt_cycles: u64, now_tsc: u64) -> bool {
        if !self.within_purchase(port, now_tsc) {
            return false;
        }
        let now_ns = self.ns(now_tsc);
        match self.cycle_budgets.get_mut(port) {
            Some(Some(b)) => {
                b.refill(now_ns);
                b.try_take(debt_cycles)
            }
            _ => true,
        }
    }

    /// Counts `cycles` of debt forgiven the port.
    pub(crate) fn forgave(&mut self, port: usize, cycles: u64) {
        self.forgiven_cycles[port] += cycles;
    }

    /// Cycles of debt forgiven the port so far.
    pub(crate) fn forgiven_cycles(&self, port: usize) -> u64 {
        self.forgiven_cycles.get(port).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_within_its_purchase_until_it_sends_more_than_its_rate_and_burst() {
        // 1 GHz TSC: a tick is a nanosecond. 8 Mbit/s: 1 MB/s, a 2 ms burst of 2000 bytes is
        // raised to one batch of the largest frames.
        let mut l = LatencyClass::new(1_000_000_000);
        l.set_purchase(3, Some(8_000_000), 0);
        assert!(l.within_purchase(3, 0));
        l.spend(3, MIN_BURST_BYTES, 0);
        assert!(!l.within_purchase(3, 0));
        // A millisecond earns 1000 bytes.
        assert!(l.within_purchase(3, 1_000_000));
        // Ports without a purchase never are.
        assert!(!l.within_purchase(2, 0));
        // A cycle budget of 1 M cycles a second holds 10 ms of it: 10,000 cycles.
        l.set_cycle_budget(3, Some(1_000_000), 1_000_000);
        assert!(l.may_forgive(3, 6_000, 1_000_000));
        assert!(!l.may_forgive(3, 6_000, 1_000_000), "only 4,000 cycles left");
        assert!(l.may_forgive(3, 6_000, 3_000_000), "2 ms later: 6,000 cycles");
        l.set_cycle_budget(3, None, 3_000_000);
        assert!(l.may_forgive(3, 1_000_000_000, 3_000_000));
        l.remove(3);
        assert!(!l.within_purchase(3, 10_000_000_000));
    }
}
