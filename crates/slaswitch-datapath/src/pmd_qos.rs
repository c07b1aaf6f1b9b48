//! The C2QoS side of a PMD thread (seed 000 Sec. IV): keeping its port scheduler in line with
//! the configuration, publishing each port's standing for `qos-show`, and drift compensation
//! of model-derived allocations ([`slaswitch_qos::cpu::drift`]). The hot loop itself stays in
//! [`crate::pmd`]; everything here runs between passes.

use std::collections::BTreeMap;

use slaswitch_qos::cpu::drift::port_config;
use slaswitch_qos::cpu::{
    BandwidthModel, C2tbConfig, CycleLimit, DriftCompensator, DriftConfig, HbsConfig, PortPlace, PortScheduler,
    PortWindow, WaitCounts,
};

use crate::counters::{CpuQosState, PmdTotals, RxTotals};
use crate::pmd::{ModelCycles, Pmd, PmdConfig, RxPort};

/// Drift-compensation windows per second.
const DRIFT_WINDOWS_PER_SEC: u64 = 10;
/// Drift-scaled allocations of a PMD stay within this share of its core (admission control
/// allows up to the whole core at the calibrated speed), less the share the host is measured
/// to take by stalling the PMD. The rest is the PMD's own: idle polls, publishing, draining
/// paced ports.
const DRIFT_MAX_CORE_SHARE: f64 = 0.95;
/// Weight of a new window in the smoothed share of time the host stalled the PMD.
const STALL_SHARE_SMOOTHING: f64 = 0.2;
/// Allocations follow the drift factor only when it moved by more than this.
const DRIFT_STEP: f64 = 0.005;
/// A port's traffic is beyond its profile when, by the model, it costs this much more per byte
/// than the profile it bought (Fig. 10's floods: 64-byte frames on a 1024-byte purchase cost
/// about 10x per byte).
const BEYOND_PROFILE_COST_RATIO: f64 = 1.25;
/// Packets a window needs before it says whether a port's traffic is beyond its profile.
const BEYOND_PROFILE_MIN_PACKETS: u64 = 200;

/// One model-derived port's compensation.
struct PortDrift {
    compensator: DriftCompensator,
    /// The factor last applied to its allocation.
    applied: f64,
    /// Its traffic costs more per byte than its profile: when the core cannot give every port
    /// its compensation, such a port's goes first.
    beyond_profile: bool,
}

/// Drift compensation's state in one PMD ([`slaswitch_qos::cpu::drift`]).
pub(crate) struct Drift {
    pmd: DriftCompensator,
    /// Per port number, for ports whose allocation comes from the model.
    ports: BTreeMap<u16, PortDrift>,
    window_start_tsc: u64,
    /// Per rx port: its totals at the window's start.
    last: Vec<RxTotals>,
    /// Per port number: times it had waited for tokens at the window's start.
    last_waits: BTreeMap<u16, u64>,
    /// The PMD's stalled cycles at the window's start, and the smoothed share of time the host
    /// stalled it (3-7% on this host: cycles no port can be given).
    last_stalled_cycles: u64,
    stall_share: f64,
}

impl Drift {
    pub(crate) fn new(now: u64, cfg: &PmdConfig) -> Drift {
        Drift {
            pmd: DriftCompensator::new(DriftConfig::default()),
            ports: Default::default(),
            window_start_tsc: now,
            last: cfg.rx_ports.iter().map(|p| p.counters.rx()).collect(),
            last_waits: BTreeMap::new(),
            last_stalled_cycles: 0,
            stall_share: 0.0,
        }
    }

    /// The factor in force for `number`: its own once measured, the PMD's until then. The
    /// PMD's compares costs with the bare rows, so it is divided by the deployment factor the
    /// port's allocation already holds.
    fn factor_of(&self, number: u16, m: &ModelCycles) -> f64 {
        match self.ports.get(&number) {
            Some(p) if p.compensator.windows() > 0 => p.compensator.factor(),
            _ => self.pmd.factor() / m.deployment_factor.max(f64::MIN_POSITIVE),
        }
    }

    /// At the end of a window: feeds it and scales each model-derived allocation whose factor
    /// moved (tokens are kept).
    pub(crate) fn tick(&mut self, now: u64, pmd: &Pmd, sched: &mut Option<PortScheduler>) {
        if now.saturating_sub(self.window_start_tsc) < pmd.cfg.tsc_hz / DRIFT_WINDOWS_PER_SEC {
            return;
        }
        let window_ticks = now - self.window_start_tsc;
        self.window_start_tsc = now;
        let stalled = pmd.pmd_totals.stalled_cycles;
        let window_stall_share =
            (stalled.saturating_sub(self.last_stalled_cycles) as f64 / window_ticks.max(1) as f64).min(1.0);
        self.last_stalled_cycles = stalled;
        self.stall_share += STALL_SHARE_SMOOTHING * (window_stall_share - self.stall_share);
        let (Some(model), Some(s)) = (pmd.cfg.model.as_ref(), sched.as_mut()) else {
            self.last = pmd.totals.clone();
            return;
        };
        if self.last.len() != pmd.totals.len() {
            self.last = pmd.totals.clone();
            return;
        }
        let windows: Vec<PortWindow> = pmd
            .totals
            .iter()
            .zip(&self.last)
            .zip(&pmd.cfg.rx_ports)
            .map(|((t, l), p)| {
                let (hits, misses) = (t.emc_hits - l.emc_hits, t.emc_misses - l.emc_misses);
                let waits = s.view(usize::from(p.number)).map_or(0, |v| v.waits);
                let waited = self.last_waits.insert(p.number, waits).is_some_and(|before| waits > before);
                PortWindow {
                    packets: t.rx_packets - l.rx_packets,
                    bytes: t.rx_bytes - l.rx_bytes,
                    batches: t.batches - l.batches,
                    cycles: t.busy_cycles() - l.busy_cycles(),
                    miss_share: if hits + misses == 0 { 0.0 } else { misses as f64 / (hits + misses) as f64 },
                    token_limited: waited,
                }
            })
            .collect();
        self.last = pmd.totals.clone();
        let predict = |bytes: f64, miss: f64| model.predict_cycles_per_packet(bytes, miss);
        if let Some(f) = self.pmd.observe(&windows, predict) {
            pmd.counters.publish_drift_factor(f);
        }
        for (p, w) in pmd.cfg.rx_ports.iter().zip(&windows) {
            let Some(m) = p.model_cycles else { continue };
            let entry = self.ports.entry(p.number).or_insert_with(|| PortDrift {
                compensator: DriftCompensator::new(port_config(m.calibrated_kind)),
                applied: 1.0,
                beyond_profile: false,
            });
            entry
                .compensator
                .observe(std::slice::from_ref(w), |bytes, miss| predicted_port_cost(model, &m, bytes, miss));
            if w.packets >= BEYOND_PROFILE_MIN_PACKETS {
                let mean_bytes = w.bytes as f64 / w.packets as f64;
                let profile_bytes = f64::from(m.profile.packet_bytes);
                let per_byte = |cycles: Option<f64>, bytes: f64| cycles.map(|c| c / bytes.max(1.0));
                let sent = per_byte(predict(mean_bytes, w.miss_share), mean_bytes);
                let bought =
                    per_byte(predict(profile_bytes, model.calibrated_miss_share(m.profile.flows)), profile_bytes);
                if let (Some(sent), Some(bought)) = (sent, bought) {
                    entry.beyond_profile = sent > BEYOND_PROFILE_COST_RATIO * bought;
                }
            }
        }
        let factors = self.scaled_factors(&pmd.cfg);
        for p in &pmd.cfg.rx_ports {
            let (Some(m), Some(&factor)) = (p.model_cycles, factors.get(&p.number)) else { continue };
            p.counters.publish_drift_factor(factor);
            let entry = self.ports.get_mut(&p.number).expect("observed above");
            if (factor - entry.applied).abs() >= DRIFT_STEP {
                entry.applied = factor;
                let _ = s.set_limit(usize::from(p.number), compensated_limit(p, m, factor), now);
            }
        }
    }

    /// Each model-derived port's factor, capped when the compensated allocations and the fixed
    /// ones would add up to more than the core can give them ([`factor_caps`]).
    fn scaled_factors(&self, cfg: &PmdConfig) -> BTreeMap<u16, f64> {
        let ports: Vec<(u16, CompensatedPort)> = cfg
            .rx_ports
            .iter()
            .filter_map(|p| {
                let m = p.model_cycles?;
                let base = m.cycles_per_sec as f64;
                let beyond_profile = self.ports.get(&p.number).is_some_and(|d| d.beyond_profile);
                Some((p.number, CompensatedPort { base, factor: self.factor_of(p.number, &m), beyond_profile }))
            })
            .collect();
        let fixed: f64 = cfg
            .rx_ports
            .iter()
            .filter(|p| p.model_cycles.is_none())
            .map(|p| p.cpu_qos.limit.alloc_cycles_per_sec() as f64)
            .sum();
        let room = (cfg.tsc_hz as f64 * (DRIFT_MAX_CORE_SHARE - self.stall_share) - fixed).max(0.0);
        let caps = factor_caps(&ports.iter().map(|&(_, c)| c).collect::<Vec<_>>(), room);
        ports.into_iter().zip(caps).map(|((n, c), cap)| (n, c.factor.min(cap))).collect()
    }

    /// After a reconfiguration: ports start from their totals; allocations from the model take
    /// their current factor at once; ports gone are forgotten.
    /// `now`: the scheduler's clock (see `crate::compare`).
    pub(crate) fn reset(&mut self, cfg: &PmdConfig, sched: &mut Option<PortScheduler>, now: u64) {
        self.last = cfg.rx_ports.iter().map(|p| p.counters.rx()).collect();
        self.ports.retain(|n, _| cfg.rx_ports.iter().any(|p| p.number == *n && p.model_cycles.is_some()));
        let factors = self.scaled_factors(cfg);
        if let Some(s) = sched.as_mut() {
            for p in &cfg.rx_ports {
                if let Some(m) = p.model_cycles {
                    let factor = factors[&p.number];
                    if let Some(e) = self.ports.get_mut(&p.number) {
                        e.applied = factor;
                    }
                    let _ = s.set_limit(usize::from(p.number), compensated_limit(p, m, factor), now);
                }
            }
        }
    }
}

/// What the model says a port's packets of this size and miss share cost where it is
/// deployed: the row times prod(R_i), which its allocation already pays. The compensator
/// measures against this, so a coefficient that the traffic bears out is not paid twice
/// (the AMD host's 16-VM coefficient of 1.30 gave every VM 30% over its purchase, Fig. 11b).
fn predicted_port_cost(model: &BandwidthModel, m: &ModelCycles, frame_bytes: f64, miss_share: f64) -> Option<f64> {
    model.predict_for_profile(m.profile.flows, frame_bytes, miss_share).map(|c| c * m.deployment_factor)
}

/// A model-derived port's cycle limit with its drift factor applied (its mode and weight kept).
fn compensated_limit(p: &RxPort, m: ModelCycles, factor: f64) -> CycleLimit {
    p.cpu_qos.with_cycles(((m.cycles_per_sec as f64) * factor).round().max(1.0) as u64).limit
}

/// A model-derived allocation being compensated: its base cycles, its factor, and whether its
/// traffic is beyond the profile it bought.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CompensatedPort {
    pub base: f64,
    pub factor: f64,
    pub beyond_profile: bool,
}

/// Each port's factor cap when the compensated allocations must fit in `room` cycles/s.
///
/// Compensation is there so that a VM sending what it bought gets its purchase on a host
/// slower than at calibration. When the core cannot give every port its compensation, the
/// ports whose traffic is beyond their profile give theirs up first, down to their base
/// allocation (what their purchase buys at the calibrated speed, as admission control
/// priced it): the seed's guarantee binds for the profile bought (seed 000 Sec. III). Only
/// then do the ports within their profile lose compensation, and below a factor of 1 everyone
/// loses the same share: the host is too slow for what was admitted. Within a group the cap
/// is one level (water-filling from the top, [`water_level`]): the ports whose measured cost
/// exceeds the model the most give up first.
///
/// Before the profile tier, one level for all ports let Fig. 10's innocent VM, whose cost the
/// neighbours' floods had raised most, lose 11.8% on a slow host while the floods kept theirs.
/// (Scaling every factor down together, the first version, cost it 48%.)
pub(crate) fn factor_caps(ports: &[CompensatedPort], room: f64) -> Vec<f64> {
    let need = |beyond: bool, cap: f64| -> f64 {
        ports.iter().filter(|p| p.beyond_profile == beyond).map(|p| p.base * p.factor.min(cap)).sum()
    };
    let group = |beyond: bool, cap: f64| -> Vec<(f64, f64)> {
        ports.iter().filter(|p| p.beyond_profile == beyond).map(|p| (p.base, p.factor.min(cap))).collect()
    };
    let (within_full, beyond_at_base) = (need(false, f64::INFINITY), need(true, 1.0));
    let (within_cap, beyond_cap) = if within_full + beyond_at_base <= room {
        // Everyone within profile keeps all of it; the others share what is left.
        (f64::INFINITY, water_level(&group(true, f64::INFINITY), room - within_full))
    } else if need(false, 1.0) + beyond_at_base <= room {
        (water_level(&group(false, f64::INFINITY), room - beyond_at_base), 1.0)
    } else {
        let all: Vec<(f64, f64)> = group(false, f64::INFINITY).into_iter().chain(group(true, 1.0)).collect();
        let level = water_level(&all, room);
        (level, level.min(1.0))
    };
    ports.iter().map(|p| if p.beyond_profile { beyond_cap } else { within_cap }).collect()
}

/// The highest factor level `L` such that `sum(base * min(factor, L))` fits in `room`
/// (`f64::INFINITY` when everything fits). When even a level of 1 does not fit, the level is
/// the common share below 1 that does.
pub(crate) fn water_level(ports: &[(f64, f64)], room: f64) -> f64 {
    let need = |level: f64| -> f64 { ports.iter().map(|&(base, f)| base * f.min(level)).sum() };
    if need(f64::INFINITY) <= room {
        return f64::INFINITY;
    }
    let base_sum: f64 = ports.iter().map(|&(b, _)| b).sum();
    let floor = ports.iter().map(|&(_, f)| f).fold(f64::INFINITY, f64::min);
    if need(floor) >= room {
        // Every factor is cut to the same level: room / sum(base), below the lowest factor.
        return if base_sum > 0.0 { room / base_sum } else { 0.0 };
    }
    // need() is continuous and increasing in the level: bisect between the lowest factor
    // (fits) and the highest (does not).
    let (mut lo, mut hi) = (floor, ports.iter().map(|&(_, f)| f).fold(0.0, f64::max));
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        if need(mid) <= room {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::{factor_caps, predicted_port_cost, water_level, CompensatedPort};
    use crate::allocation::tests::model;
    use crate::pmd::ModelCycles;
    use slaswitch_qos::cpu::drift::port_config;
    use slaswitch_qos::cpu::{DriftCompensator, FlowCount, PortWindow, TrafficProfile};

    #[test]
    fn a_port_whose_packets_cost_what_its_deployment_factor_says_needs_no_compensation() {
        // Two VMs: the allocation pays 1.1x the 200-cycle row, and the packets really cost that.
        let model = model();
        let profile = TrafficProfile { packet_bytes: 64, flows: FlowCount::Single };
        let m = ModelCycles { cycles_per_sec: 1_000_000, profile, calibrated_kind: true, deployment_factor: 1.1 };
        assert!((predicted_port_cost(&model, &m, 64.0, 0.0).unwrap() - 220.0).abs() < 1e-9);
        let window = PortWindow {
            packets: 100_000,
            bytes: 6_400_000,
            batches: 3_125,
            cycles: 22_000_000,
            miss_share: 0.0,
            token_limited: true,
        };
        let mut compensator = DriftCompensator::new(port_config(true));
        for _ in 0..20 {
            compensator.observe(&[window], |bytes, miss| predicted_port_cost(&model, &m, bytes, miss));
        }
        assert!((compensator.factor() - 1.0).abs() < 0.01, "factor {}", compensator.factor());
        // Packets that cost the bare row are cheaper than the allocation assumed.
        let cheap = PortWindow { cycles: 20_000_000, ..window };
        for _ in 0..40 {
            compensator.observe(&[cheap], |bytes, miss| predicted_port_cost(&model, &m, bytes, miss));
        }
        assert!((compensator.factor() - 1.0 / 1.1).abs() < 0.01, "factor {}", compensator.factor());
    }

    #[test]
    fn ports_beyond_their_profile_give_up_compensation_before_the_others() {
        // Fig. 10 on a slow host: every port needs 1.3x; VM1 sends its profile, the three
        // others flood 64-byte frames; room for 1.2x all round.
        let port = |base, beyond_profile| CompensatedPort { base, factor: 1.3, beyond_profile };
        let ports = [port(833.0, false), port(833.0, true), port(208.0, true), port(208.0, true)];
        let caps = factor_caps(&ports, 2500.0);
        assert_eq!(caps[0], f64::INFINITY, "the VM within its profile keeps its compensation");
        let given: f64 = ports.iter().zip(&caps).map(|(p, &c)| p.base * p.factor.min(c)).sum();
        assert!((given - 2500.0).abs() < 0.01, "{given}");
        assert!(caps[1] > 1.0 && caps[1] < 1.3, "{caps:?}");
        // Less room: the floods are held to their base, VM1 takes what is left.
        let caps = factor_caps(&ports, 1249.0 + 833.0 * 1.1);
        assert_eq!(caps[1], 1.0);
        assert!((caps[0] - 1.1).abs() < 1e-6, "{caps:?}");
        // Not even the bases fit: everyone at the same share.
        let caps = factor_caps(&ports, 1000.0);
        assert!(caps.iter().all(|&c| (c - 1000.0 / 2082.0).abs() < 1e-9), "{caps:?}");
        // With nobody beyond its profile this is plain water-filling.
        let honest: Vec<CompensatedPort> =
            ports.iter().map(|p| CompensatedPort { beyond_profile: false, ..*p }).collect();
        let caps = factor_caps(&honest, 2500.0);
        assert!(caps.iter().all(|&c| (c - 2500.0 / 2082.0).abs() < 1e-6), "{caps:?}");
    }

    #[test]
    fn the_costliest_ports_give_up_their_compensation_first() {
        // Fig. 10's shape: a well-behaved VM at 1.2, two floods at 2.0, room for about 1.2 each.
        let ports = [(833.0, 1.2), (833.0, 2.0), (208.0, 1.3), (208.0, 2.0)];
        let level = water_level(&ports, 2500.0);
        assert!((1.19..1.21).contains(&level), "{level}");
        let given: f64 = ports.iter().map(|&(b, f)| b * f.min(level)).sum();
        assert!((given - 2500.0).abs() < 0.01, "{given}");
        // Enough room: nobody is capped.
        assert_eq!(water_level(&ports, 1e9), f64::INFINITY);
        // Not even the lowest factor fits: everyone at the same share.
        let level = water_level(&ports, 1000.0);
        assert!((level - 1000.0 / 2082.0).abs() < 1e-9, "{level}");
    }
}

/// Publishes each port's standing in the scheduler for `qos-show`.
pub(crate) fn publish_scheduler(sched: Option<&PortScheduler>, cfg: &PmdConfig) {
    for p in &cfg.rx_ports {
        let state = match sched.and_then(|s| s.view(usize::from(p.number))) {
            Some(v) => CpuQosState {
                tokens_cycles: v.tokens,
                class: v.current_priority,
                place: match v.place {
                    PortPlace::Ready { .. } => "ready",
                    PortPlace::Resting => "resting",
                    PortPlace::Waiting => "waiting",
                    PortPlace::InService => "in-service",
                },
            },
            None => CpuQosState::default(),
        };
        p.counters.publish_cpu_qos(&state);
    }
}

/// Carries the scheduler's wait counts into the PMD's totals, which outlive the scheduler
/// (it is dropped when no port has C2QoS settings).
#[derive(Default)]
pub(crate) struct WaitTally(WaitCounts);

impl WaitTally {
    /// Adds what the scheduler counted since the last call; call before the scheduler may be
    /// dropped and after.
    pub(crate) fn fold(&mut self, sched: Option<&PortScheduler>, totals: &mut PmdTotals) {
        let Some(s) = sched else {
            self.0 = WaitCounts::default();
            return;
        };
        let now = s.wait_counts();
        totals.qos_owed += now.owed - self.0.owed;
        totals.qos_parked += now.parked - self.0.parked;
        self.0 = now;
    }
}

/// Which of a PMD's rx ports HBS schedules and which it polls in plain round robin.
#[derive(Default)]
pub(crate) struct PortSplit {
    /// Port numbers in the scheduler: those with C2QoS settings.
    pub(crate) scheduled: Vec<u16>,
    /// Rx port indices of the ports without C2QoS settings (typically the uplink).
    pub(crate) round_robin: Vec<usize>,
}

/// Brings the scheduler in line with the configuration: created when a port first has C2QoS
/// settings, dropped when none has; ports added, removed and updated in place otherwise, so
/// the others keep their tokens. Scheduler port indices are port numbers.
///
/// Only ports with C2QoS settings enter HBS; the others are polled once per pass beside it, as
/// the PMD polls every port without C2QoS. Seed 000 Sec. V replaces the polling of *VM* ports by
/// HBS; a port nobody configured, such as the uplink, carries every tenant's return traffic
/// (responses, TCP ACKs), and putting it in the lowest class starved it behind MIN-MAX ports
/// that always hold tokens: nginx's responses waited behind the bulk VMs in Fig. 12.
/// `now`: the scheduler's clock (see `crate::compare`).
pub(crate) fn sync_scheduler(sched: &mut Option<PortScheduler>, cfg: &PmdConfig, split: &mut PortSplit, now: u64) {
    split.round_robin = (0..cfg.rx_ports.len()).filter(|&i| !cfg.rx_ports[i].cpu_qos.is_set()).collect();
    if !cfg.rx_ports.iter().any(|p| p.cpu_qos.is_set()) {
        *sched = None;
        split.scheduled.clear();
        return;
    }
    let c2tb = C2tbConfig::one_core_with_depth_us(cfg.tsc_hz, cfg.c2tb_bucket_us);
    let s = sched.get_or_insert_with(|| PortScheduler::new(c2tb, HbsConfig::default(), now));
    for &number in split.scheduled.iter() {
        if !cfg.rx_ports.iter().any(|p| p.number == number && p.cpu_qos.is_set()) {
            s.remove_port(usize::from(number), now);
        }
    }
    for p in cfg.rx_ports.iter().filter(|p| p.cpu_qos.is_set()) {
        let n = usize::from(p.number);
        let result = if s.contains(n) {
            s.set_limit(n, p.cpu_qos.limit, now).and_then(|()| s.set_priority(n, p.cpu_qos.priority, now))
        } else {
            s.add_port(n, p.cpu_qos.priority, p.cpu_qos.limit, now)
        };
        // Settings were validated by the control plane; a refusal here is a bug.
        debug_assert!(result.is_ok(), "{result:?}");
    }
    split.scheduled = cfg.rx_ports.iter().filter(|p| p.cpu_qos.is_set()).map(|p| p.number).collect();
}
