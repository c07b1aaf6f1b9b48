//! The scheduler of one paced link: any of the egress schedulers, chosen per link and swapped
//! live. It keeps every VM's settings for all of them ([`VmLinkPolicy`]: ANCS's weight, minimum
//! and maximum, SoftBW's guarantee, PIE-VDE's tenant), so swapping changes only who decides.
//!
//! A swap, or a change of the link's rate or periods, builds the new scheduler and moves every
//! waiting packet into it, VM by VM in arrival order: nothing is lost. Any other change (a VM's
//! policy, a tenant's weight, a VM added or removed) is applied in place, so the schedulers keep
//! their state (ANCS credits, SoftBW's accumulated errors and (S, T) deadlines).

use std::collections::BTreeMap;

use super::ancs::{Ancs, AncsConfig, AncsPolicy};
use super::fifo::Fifo;
use super::latency_lane::LatencyLane;
use super::pievde::PieVde;
use super::ratelimit::{RateLimit, RateLimitConfig};
use super::softbw::{Guarantee, SoftBw, SoftBwConfig};
use super::{Dequeued, EgressScheduler, QueueIndex};
use crate::QosError;
use crate::NS_PER_SEC;

/// Which scheduler decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerKind {
    /// First in, first out (a plain NIC queue).
    #[default]
    Fifo,
    /// ANCS (seed 002).
    Ancs,
    /// SoftBW (seed 003).
    SoftBw,
    /// PIE-VDE (seed 004).
    PieVde,
    /// ElasticSwitch-style rate limits (seed 003's baseline).
    RateLimit,
}

impl SchedulerKind {
    /// Every kind, in the order the CLI lists them.
    pub const ALL: [SchedulerKind; 5] = [
        SchedulerKind::Fifo,
        SchedulerKind::Ancs,
        SchedulerKind::SoftBw,
        SchedulerKind::PieVde,
        SchedulerKind::RateLimit,
    ];

    /// Its name in options and reports.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::Fifo => "fifo",
            SchedulerKind::Ancs => "ancs",
            SchedulerKind::SoftBw => "softbw",
            SchedulerKind::PieVde => "pievde",
            SchedulerKind::RateLimit => "ratelimit",
        }
    }

    /// Parses a name; the error lists the names allowed.
    pub fn parse(s: &str) -> Result<SchedulerKind, QosError> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| QosError::setting(s, format!("one of {}", Self::ALL.map(|k| k.name()).join(", "))))
    }
}

impl std::fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// The link's own settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSettings {
    /// Who decides.
    pub kind: SchedulerKind,
    /// Line rate, bits per second, counted as the schedulers count lengths (wire bytes).
    pub link_rate_bps: u64,
    /// ANCS's accounting period (seed 002 Sec. 3.2: 30 ms).
    pub ancs_period_ns: u64,
    /// How often the rate-limit baseline recomputes its limits (50 ms).
    pub ratelimit_period_ns: u64,
    /// PIE-VDE's turn, bytes (at least the largest frame).
    pub quantum_bytes: u32,
    /// A full queue drops its oldest frame for the new one (head drop) instead of the new one.
    pub head_drop: bool,
}

impl LinkSettings {
    /// FIFO on a link of `link_rate_bps` with the seeds' periods.
    pub fn new(link_rate_bps: u64) -> Self {
        LinkSettings {
            kind: SchedulerKind::Fifo,
            link_rate_bps,
            ancs_period_ns: 30_000_000,
            ratelimit_period_ns: 50_000_000,
            quantum_bytes: 1538,
            head_drop: false,
        }
    }

    /// True when going from `self` to `other` needs a new scheduler (not only new policies).
    fn rebuild_for(&self, other: &LinkSettings) -> bool {
        LinkSettings { head_drop: other.head_drop, ..*self } != *other
    }
}

/// One VM's settings for every scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmLinkPolicy {
    /// ANCS's weight, and the VM's weight among its tenant's VMs in PIE-VDE.
    pub weight: u32,
    /// ANCS's MinimumCredit as a rate.
    pub min_bps: Option<u64>,
    /// ANCS's MaximumCredit as a rate.
    pub max_bps: Option<u64>,
    /// SoftBW's guarantee, which the rate-limit baseline also honours.
    pub guarantee: Guarantee,
    /// PIE-VDE's tenant (an index of [`LinkPlan::tenants`]).
    pub tenant: usize,
    /// Frames its queue holds.
    pub limit_packets: usize,
    /// The link's latency class: its frames go ahead of the scheduler's choice up to this
    /// rate, wire bits/s ([`LatencyLane`]); `None`: it waits its turn.
    pub latency_bps: Option<u64>,
}

impl VmLinkPolicy {
    /// Weight 1, no minimum or maximum, fairness only, tenant 0.
    pub fn new(limit_packets: usize) -> Self {
        VmLinkPolicy {
            weight: 1,
            min_bps: None,
            max_bps: None,
            guarantee: Guarantee::Fairness,
            tenant: 0,
            limit_packets,
            latency_bps: None,
        }
    }

    /// The rate its SoftBW guarantee starts at (a dynamic one: S/T), 0 for fairness.
    pub fn guarantee_bps(&self) -> u64 {
        self.guarantee.initial_rate_bps()
    }

    fn ancs(&self) -> AncsPolicy {
        AncsPolicy { weight: self.weight, min_rate_bps: self.min_bps, max_rate_bps: self.max_bps }
    }
}

/// Everything a link's scheduler is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkPlan {
    /// The link's settings.
    pub settings: LinkSettings,
    /// PIE-VDE's tenants: index -> weight.
    pub tenants: BTreeMap<usize, u32>,
    /// The VMs' queues: index -> settings.
    pub vms: BTreeMap<QueueIndex, VmLinkPolicy>,
}

impl LinkPlan {
    /// Refuses a plan no scheduler could take, naming what is wrong.
    pub fn validate(&self) -> Result<(), QosError> {
        let s = &self.settings;
        if s.link_rate_bps == 0 || s.ancs_period_ns == 0 || s.ratelimit_period_ns == 0 || s.quantum_bytes == 0 {
            return Err(QosError::Unusable("a link needs a positive rate, periods and quantum"));
        }
        if let Some((&t, _)) = self.tenants.iter().find(|(_, &w)| w == 0) {
            return Err(QosError::TenantWeight(t));
        }
        for (&queue, vm) in &self.vms {
            if vm.weight == 0 || vm.limit_packets == 0 {
                return Err(QosError::Queue { queue, why: "weight and queue length must be at least 1" });
            }
            if let (Some(min_bps), Some(max_bps)) = (vm.min_bps, vm.max_bps) {
                if min_bps > max_bps {
                    return Err(QosError::MinAboveMax { queue, min_bps, max_bps });
                }
            }
            if !self.tenants.contains_key(&vm.tenant) {
                return Err(QosError::NoTenant { queue, tenant: vm.tenant });
            }
            match vm.guarantee {
                Guarantee::Strict { rate_bps: 0 } => {
                    return Err(QosError::Queue { queue, why: "a strict guarantee needs a rate" })
                }
                Guarantee::Dynamic { duration_ns: 0, .. } => {
                    return Err(QosError::Queue { queue, why: "a dynamic guarantee needs a time" })
                }
                _ => {}
            }
        }
        let minimums: u64 = self.vms.values().filter_map(|v| v.min_bps).sum();
        if minimums > s.link_rate_bps {
            return Err(QosError::MinimumsAboveLink { total_bps: minimums, link_bps: s.link_rate_bps });
        }
        Ok(())
    }
}

enum Inner<T> {
    Fifo(Fifo<T>),
    Ancs(Ancs<T>),
    SoftBw(SoftBw<T>),
    PieVde(PieVde<T>),
    RateLimit(RateLimit<T>),
}

/// What one VM's queue holds and where it stands in the scheduler in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueView {
    /// Frames waiting.
    pub packets: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The rate the scheduler in force guarantees it now (0: none): SoftBW's current rate,
    /// ANCS's fair credit as a rate, the baseline's guarantee.
    pub guarantee_bps: u64,
    /// The scheduler's own state of the VM.
    pub state: SchedulerState,
}

/// A scheduler's state of one VM.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerState {
    /// FIFO and PIE-VDE keep nothing per VM worth showing.
    None,
    /// ANCS: credit left this period and the period's credit, bytes.
    Ancs {
        /// Credit left.
        remain_credit_bytes: f64,
        /// This period's credit.
        credit_peak_bytes: f64,
    },
    /// SoftBW: accumulated inter-departure error and time-to-send.
    SoftBw {
        /// dtau, ns (positive: behind its guarantee).
        dtau_ns: f64,
        /// tts, ns (0: may send now).
        tts_ns: u64,
    },
    /// The baseline: its limit and the demand it was computed from.
    RateLimit {
        /// This period's limit.
        limit_bps: f64,
        /// The estimated demand.
        demand_bps: f64,
    },
}

/// Outcome of [`LinkScheduler::enqueue`].
#[derive(Debug, PartialEq, Eq)]
pub enum Queued<T> {
    /// The packet waits.
    Yes,
    /// The packet waits; the queue's oldest one was dropped for it (head drop).
    DroppedOldest(T),
    /// The queue was full (or unknown): the packet is handed back to be dropped.
    No(T),
}

/// Any egress scheduler on one link, reconfigured live.
pub struct LinkScheduler<T> {
    inner: Inner<T>,
    lane: LatencyLane,
    plan: LinkPlan,
}

fn build<T>(plan: &LinkPlan, now_ns: u64) -> Result<Inner<T>, QosError> {
    let s = plan.settings;
    Ok(match s.kind {
        SchedulerKind::Fifo => {
            let mut f = Fifo::new();
            for (&q, vm) in &plan.vms {
                f.set_queue(q, vm.limit_packets);
            }
            Inner::Fifo(f)
        }
        SchedulerKind::Ancs => {
            let mut a = Ancs::new(AncsConfig { link_rate_bps: s.link_rate_bps, period_ns: s.ancs_period_ns }, now_ns)?;
            for (&q, vm) in &plan.vms {
                a.set_policy(q, vm.ancs(), vm.limit_packets)?;
            }
            Inner::Ancs(a)
        }
        SchedulerKind::SoftBw => {
            let mut b = SoftBw::new(SoftBwConfig::new(s.link_rate_bps), now_ns)?;
            for (&q, vm) in &plan.vms {
                b.set_guarantee(q, vm.guarantee, vm.limit_packets, now_ns)?;
            }
            Inner::SoftBw(b)
        }
        SchedulerKind::PieVde => {
            let mut p = PieVde::new(s.quantum_bytes);
            for (&t, &w) in &plan.tenants {
                p.set_tenant(t, w)?;
            }
            for (&q, vm) in &plan.vms {
                p.set_vm(q, vm.tenant, vm.weight, vm.limit_packets)?;
            }
            Inner::PieVde(p)
        }
        SchedulerKind::RateLimit => {
            let config = RateLimitConfig { period_ns: s.ratelimit_period_ns, ..RateLimitConfig::new(s.link_rate_bps) };
            let mut r = RateLimit::new(config, now_ns)?;
            for (&q, vm) in &plan.vms {
                r.set_guarantee(q, vm.guarantee_bps(), vm.limit_packets, now_ns);
            }
            Inner::RateLimit(r)
        }
    })
}

impl<T> Inner<T> {
    fn sched(&mut self) -> &mut dyn EgressScheduler<T> {
        match self {
            Inner::Fifo(s) => s,
            Inner::Ancs(s) => s,
            Inner::SoftBw(s) => s,
            Inner::PieVde(s) => s,
            Inner::RateLimit(s) => s,
        }
    }

    fn remove(&mut self, queue: QueueIndex) -> Vec<(u32, T)> {
        match self {
            Inner::Fifo(s) => s.remove(queue),
            Inner::Ancs(s) => s.remove(queue),
            Inner::SoftBw(s) => s.remove(queue),
            Inner::PieVde(s) => s.remove_vm(queue),
            Inner::RateLimit(s) => s.remove(queue),
        }
    }

    /// Applies a VM's new or changed policy; `old` is what it had (`None`: new).
    fn apply_vm(
        &mut self,
        q: QueueIndex,
        vm: &VmLinkPolicy,
        old: Option<&VmLinkPolicy>,
        now_ns: u64,
    ) -> Result<(), QosError> {
        match self {
            Inner::Fifo(s) => s.set_queue(q, vm.limit_packets),
            Inner::Ancs(s) => s.set_policy(q, vm.ancs(), vm.limit_packets)?,
            Inner::SoftBw(s) => {
                // A new guarantee restarts an (S, T) deadline; keep it unless the guarantee changed.
                if old.is_none_or(|o| o.guarantee != vm.guarantee) {
                    s.set_guarantee(q, vm.guarantee, vm.limit_packets, now_ns)?;
                } else {
                    s.set_limit(q, vm.limit_packets);
                }
            }
            Inner::PieVde(s) => s.set_vm(q, vm.tenant, vm.weight, vm.limit_packets)?,
            Inner::RateLimit(s) => s.set_guarantee(q, vm.guarantee_bps(), vm.limit_packets, now_ns),
        }
        Ok(())
    }
}

impl<T> LinkScheduler<T> {
    /// A scheduler for `plan`, its clocks started at `now_ns`.
    pub fn new(plan: LinkPlan, now_ns: u64) -> Result<Self, QosError> {
        plan.validate()?;
        let inner = build(&plan, now_ns)?;
        let mut lane = LatencyLane::default();
        for (&q, vm) in &plan.vms {
            lane.set(q, vm.latency_bps, now_ns);
        }
        Ok(LinkScheduler { inner, lane, plan })
    }

    /// The plan in force.
    pub fn plan(&self) -> &LinkPlan {
        &self.plan
    }

    /// Takes a new plan. Refused whole (nothing changes) when it is invalid; otherwise no
    /// waiting packet is lost, except those of VMs the plan no longer has, which are returned
    /// for the caller to free.
    pub fn reconfigure(&mut self, plan: LinkPlan, now_ns: u64) -> Result<Vec<T>, QosError> {
        plan.validate()?;
        let mut freed = Vec::new();
        if self.plan.settings.rebuild_for(&plan.settings) {
            // Built with room for every waiting frame, then given the plan's own limits: a
            // queue made shorter than its backlog keeps its frames and takes no more.
            let mut roomy = plan.clone();
            for (q, vm) in roomy.vms.iter_mut() {
                let (waiting, _) = self.inner.sched().queue_backlog(*q);
                vm.limit_packets = vm.limit_packets.max(waiting);
            }
            let mut fresh = build(&roomy, now_ns)?;
            for &q in self.plan.vms.keys() {
                for (len, item) in self.inner.remove(q) {
                    if !plan.vms.contains_key(&q) {
                        freed.push(item);
                    } else if let Err(item) = fresh.sched().enqueue(q, len, item, now_ns) {
                        debug_assert!(false, "a queue built with room refused a frame");
                        freed.push(item);
                    }
                }
            }
            for (q, vm) in &plan.vms {
                let moving = &roomy.vms[q];
                if moving != vm {
                    fresh.apply_vm(*q, vm, Some(moving), now_ns)?;
                }
            }
            self.inner = fresh;
        } else {
            self.apply_in_place(&plan, now_ns, &mut freed)?;
        }
        for &q in self.plan.vms.keys().filter(|q| !plan.vms.contains_key(q)) {
            self.lane.set(q, None, now_ns);
        }
        for (&q, vm) in &plan.vms {
            if self.plan.vms.get(&q).map(|o| o.latency_bps) != Some(vm.latency_bps) {
                self.lane.set(q, vm.latency_bps, now_ns);
            }
        }
        self.plan = plan;
        Ok(freed)
    }

    fn apply_in_place(&mut self, plan: &LinkPlan, now_ns: u64, freed: &mut Vec<T>) -> Result<(), QosError> {
        for &q in self.plan.vms.keys().filter(|q| !plan.vms.contains_key(q)) {
            freed.extend(self.inner.remove(q).into_iter().map(|(_, item)| item));
        }
        if let Inner::PieVde(p) = &mut self.inner {
            for (&t, &w) in &plan.tenants {
                if self.plan.tenants.get(&t) != Some(&w) {
                    p.set_tenant(t, w)?;
                }
            }
        }
        for (&q, vm) in &plan.vms {
            let old = self.plan.vms.get(&q);
            if old != Some(vm) {
                self.inner.apply_vm(q, vm, old, now_ns)?;
            }
        }
        if let Inner::PieVde(p) = &mut self.inner {
            for &t in self.plan.tenants.keys().filter(|t| !plan.tenants.contains_key(t)) {
                p.remove_tenant(t)?;
            }
        }
        Ok(())
    }

    /// Queues a packet of `len_bytes` from VM `queue`.
    #[inline]
    pub fn enqueue(&mut self, queue: QueueIndex, len_bytes: u32, item: T, now_ns: u64) -> Queued<T> {
        let head_drop = self.plan.settings.head_drop;
        let sched = self.inner.sched();
        match sched.enqueue(queue, len_bytes, item, now_ns) {
            Ok(()) => Queued::Yes,
            Err(item) if head_drop => match sched.drop_head(queue) {
                Some((_, oldest)) => match sched.enqueue(queue, len_bytes, item, now_ns) {
                    Ok(()) => Queued::DroppedOldest(oldest),
                    Err(item) => {
                        // Cannot happen (a slot was just freed), but never lose track of a frame.
                        debug_assert!(false, "a freed slot refused a packet");
                        let _ = oldest;
                        Queued::No(item)
                    }
                },
                None => Queued::No(item),
            },
            Err(item) => Queued::No(item),
        }
    }

    /// The next packet onto the link now: a latency-class VM's within its purchase, else the
    /// scheduler's choice.
    #[inline]
    pub fn dequeue(&mut self, now_ns: u64) -> Option<Dequeued<T>> {
        let sched = self.inner.sched();
        if !self.lane.is_empty() {
            if let Some(d) = self.lane.dequeue(sched, now_ns) {
                return Some(d);
            }
        }
        sched.dequeue(now_ns)
    }

    /// Frames the latency class sent ahead of the scheduler's choice so far.
    pub fn sent_ahead(&self) -> u64 {
        self.lane.sent_ahead()
    }

    /// Packets waiting in all queues.
    pub fn backlog_packets(&mut self) -> usize {
        self.inner.sched().backlog_packets()
    }

    /// What VM `queue` has waiting and its state in the scheduler (`None`: no such VM).
    pub fn view(&mut self, queue: QueueIndex) -> Option<QueueView> {
        let vm = *self.plan.vms.get(&queue)?;
        let (packets, bytes) = self.inner.sched().queue_backlog(queue);
        let (guarantee_bps, state) = match &self.inner {
            Inner::Fifo(_) | Inner::PieVde(_) => (0, SchedulerState::None),
            Inner::Ancs(a) => {
                let v = a.view(queue)?;
                let period_s = self.plan.settings.ancs_period_ns as f64 / NS_PER_SEC as f64;
                (
                    (v.credit_fair_bytes * 8.0 / period_s) as u64,
                    SchedulerState::Ancs {
                        remain_credit_bytes: v.remain_credit_bytes,
                        credit_peak_bytes: v.credit_peak_bytes,
                    },
                )
            }
            Inner::SoftBw(b) => {
                let v = b.view(queue)?;
                let rate = if matches!(vm.guarantee, Guarantee::Fairness) { 0 } else { v.current_rate_bps };
                (rate, SchedulerState::SoftBw { dtau_ns: v.dtau_ns, tts_ns: v.tts_ns })
            }
            Inner::RateLimit(r) => {
                let v = r.view(queue)?;
                (v.guarantee_bps, SchedulerState::RateLimit { limit_bps: v.limit_bps, demand_bps: v.demand_bps })
            }
        };
        Some(QueueView { packets, bytes, guarantee_bps, state })
    }

    /// Every waiting packet, VM by VM (when the link goes away).
    pub fn into_packets(mut self) -> Vec<T> {
        let queues: Vec<QueueIndex> = self.plan.vms.keys().copied().collect();
        queues.into_iter().flat_map(|q| self.inner.remove(q)).map(|(_, item)| item).collect()
    }
}
