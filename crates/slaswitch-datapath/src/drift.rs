//! Drift compensation of model-derived allocations on one PMD thread (an extension of seed 000
//! Sec. III; the maths is [`slaswitch_qos::cpu::drift`] and [`slaswitch_qos::cpu::water_fill`]):
//! every window, what each port's batches really cost against what the model predicts for the
//! traffic they carried, and the allocations scaled to match within what the core can give.
//! Beside it, every port's purchase ledger ([`slaswitch_qos::cpu::promise`]) raises the
//! allocation of a held port until the bytes it was short are paid back, on a shorter window.
//! Runs between passes, never in the hot loop.

use std::collections::BTreeMap;

use slaswitch_qos::cpu::drift::port_config;
use slaswitch_qos::cpu::latency_class::LATENCY_CLASSES;
use slaswitch_qos::cpu::water_fill::{fit_allocations, CompensatedPort, FittedPort, DELIVERABLE_CORE_SHARE};
use slaswitch_qos::cpu::{
    BandwidthModel, CycleLimit, DriftCompensator, DriftConfig, LedgerWindow, PortScheduler, PortWindow, PromiseConfig,
    PurchaseLedger,
};

use crate::counters::{PmdCounters, RxTotals};
use crate::pmd_config::{ModelCycles, PmdConfig, RxPort};

/// What a drift window reads of the PMD thread.
pub(crate) struct DriftInputs<'a> {
    pub(crate) cfg: &'a PmdConfig,
    /// Per rx port, its running totals.
    pub(crate) totals: &'a [RxTotals],
    /// The PMD's stalled cycles so far.
    pub(crate) stalled_cycles: u64,
    pub(crate) counters: &'a PmdCounters,
}

/// Drift-compensation windows per second.
const DRIFT_WINDOWS_PER_SEC: u64 = 10;
/// Purchase-ledger windows per second: a shortfall is seen and paid back well inside the
/// second a promise is judged over.
const LEDGER_WINDOWS_PER_SEC: u64 = 200;
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

/// A model-derived port's allocation factors in force: drift compensation's, and the raise
/// paying what it is owed of its purchase.
#[derive(Clone, Copy, Debug)]
struct Scaled {
    drift: f64,
    raise: f64,
}

/// One model-derived port's compensation.
struct PortDrift {
    compensator: DriftCompensator,
    /// The factor last applied to its allocation (drift and the ledger's raise).
    applied: f64,
    /// Its traffic costs more per byte than its profile: when the core cannot give every port
    /// its compensation, such a port's goes first, and it is owed nothing of its purchase.
    beyond_profile: bool,
    /// What it is owed of its purchase, and the raise that pays it back (as granted).
    ledger: PurchaseLedger,
    raise: f64,
}

impl PortDrift {
    fn new(p: &RxPort, m: &ModelCycles) -> PortDrift {
        PortDrift {
            compensator: DriftCompensator::new(port_config(m.calibrated_kind, m.profile.batch_packets)),
            applied: 1.0,
            beyond_profile: false,
            ledger: new_ledger(p, m),
            raise: 1.0,
        }
    }
}

/// A port's purchase ledger: strict ports are held to their purchase in bytes too.
fn new_ledger(p: &RxPort, m: &ModelCycles) -> PurchaseLedger {
    let strict = matches!(p.cpu_qos.limit, CycleLimit::Strict { .. });
    PurchaseLedger::new(m.purchase_bps, strict, PromiseConfig::default())
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
    /// stalled it: cycles no port can be given.
    last_stalled_cycles: u64,
    stall_share: f64,
    /// The purchase ledgers' window: its start, and per rx port its totals and waits then.
    ledger_start_tsc: u64,
    ledger_last: Vec<RxTotals>,
    ledger_last_waits: Vec<u64>,
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
            ledger_start_tsc: now,
            ledger_last: cfg.rx_ports.iter().map(|p| p.counters.rx()).collect(),
            ledger_last_waits: vec![0; cfg.rx_ports.len()],
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

    /// Between passes: at the end of a ledger window, feeds each port's purchase ledger; at the
    /// end of a drift window, feeds drift compensation; then scales each model-derived
    /// allocation whose factor moved (tokens are kept).
    pub(crate) fn tick(&mut self, now: u64, pmd: DriftInputs, sched: Option<&mut PortScheduler>) {
        let hz = pmd.cfg.tsc_hz;
        let ledgers_due = now.saturating_sub(self.ledger_start_tsc) >= hz / LEDGER_WINDOWS_PER_SEC;
        let drift_due = now.saturating_sub(self.window_start_tsc) >= hz / DRIFT_WINDOWS_PER_SEC;
        if !ledgers_due && !drift_due {
            return;
        }
        let Some(s) = sched else {
            if drift_due {
                self.drift_window(now, &pmd, None);
            }
            return;
        };
        self.ensure_ports(pmd.cfg);
        let mut moved = ledgers_due && self.ledger_window(now, &pmd, s);
        moved |= drift_due && self.drift_window(now, &pmd, Some(s));
        if moved {
            self.apply(now, pmd.cfg, s);
        }
    }

    /// Every model-derived port has its compensation state.
    fn ensure_ports(&mut self, cfg: &PmdConfig) {
        for p in &cfg.rx_ports {
            if let Some(m) = &p.model_cycles {
                self.ports.entry(p.number).or_insert_with(|| PortDrift::new(p, m));
            }
        }
    }

    /// Feeds each model-derived port's purchase ledger the window that ends now; true when a
    /// raise moved.
    fn ledger_window(&mut self, now: u64, pmd: &DriftInputs, s: &mut PortScheduler) -> bool {
        let secs = now.saturating_sub(self.ledger_start_tsc) as f64 / pmd.cfg.tsc_hz as f64;
        self.ledger_start_tsc = now;
        let waits: Vec<u64> =
            pmd.cfg.rx_ports.iter().map(|p| s.view(usize::from(p.number)).map_or(0, |v| v.waits)).collect();
        let fresh = self.ledger_last.len() == pmd.totals.len() && self.ledger_last_waits.len() == waits.len();
        let last = std::mem::replace(&mut self.ledger_last, pmd.totals.to_vec());
        let last_waits = std::mem::replace(&mut self.ledger_last_waits, waits);
        if !fresh {
            return false;
        }
        let mut moved = false;
        for (i, p) in pmd.cfg.rx_ports.iter().enumerate() {
            let Some(entry) = self.ports.get_mut(&p.number).filter(|_| p.model_cycles.is_some()) else { continue };
            let (t, l) = (&pmd.totals[i], &last[i]);
            let window = LedgerWindow {
                secs,
                bytes: t.rx_bytes - l.rx_bytes,
                packets: t.rx_packets - l.rx_packets,
                batches: t.batches - l.batches,
                waited: self.ledger_last_waits[i] > last_waits[i],
                within_profile: !entry.beyond_profile,
                full_batch_packets: s.burst_packets(usize::from(p.number)),
            };
            let asked = entry.ledger.observe(&window);
            moved |= asked != entry.raise;
            let purchase_bps = p.model_cycles.map_or(0, |m| m.purchase_bps);
            s.set_beyond_purchase(usize::from(p.number), window.bytes as f64 * 8.0 > purchase_bps as f64 * secs);
        }
        moved
    }

    /// Feeds the drift window that ends now; true when the ports' factors were observed.
    fn drift_window(&mut self, now: u64, pmd: &DriftInputs, s: Option<&PortScheduler>) -> bool {
        let window_ticks = now - self.window_start_tsc;
        self.window_start_tsc = now;
        let stalled = pmd.stalled_cycles;
        let window_stall_share =
            (stalled.saturating_sub(self.last_stalled_cycles) as f64 / window_ticks.max(1) as f64).min(1.0);
        self.last_stalled_cycles = stalled;
        self.stall_share += STALL_SHARE_SMOOTHING * (window_stall_share - self.stall_share);
        let (Some(model), Some(s)) = (pmd.cfg.model.as_ref(), s) else {
            self.last = pmd.totals.to_vec();
            return false;
        };
        if self.last.len() != pmd.totals.len() {
            self.last = pmd.totals.to_vec();
            return false;
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
        self.last = pmd.totals.to_vec();
        let predict = |bytes: f64, miss: f64| model.predict_cycles_per_packet(bytes, miss);
        if let Some(f) = self.pmd.observe(&windows, predict) {
            pmd.counters.publish_drift_factor(f);
        }
        for (p, w) in pmd.cfg.rx_ports.iter().zip(&windows) {
            let Some(m) = p.model_cycles else { continue };
            let entry = self.ports.get_mut(&p.number).expect("ensure_ports");
            entry
                .compensator
                .observe(std::slice::from_ref(w), |bytes, miss| predicted_port_cost(model, &m, bytes, miss));
            if w.packets >= BEYOND_PROFILE_MIN_PACKETS {
                entry.beyond_profile = beyond_profile(model, &m, w);
            }
        }
        true
    }

    /// Scales each model-derived allocation to its factor in force (drift and raise, within
    /// what the core can give) where it moved, and publishes the factors.
    fn apply(&mut self, now: u64, cfg: &PmdConfig, s: &mut PortScheduler) {
        let (factors, spare_cycles_per_sec) = self.scaled_factors(cfg);
        forgiveness_budgets(cfg, s, spare_cycles_per_sec, now);
        let mut changes = Vec::new();
        for p in &cfg.rx_ports {
            let (Some(m), Some(&Scaled { drift, raise })) = (p.model_cycles, factors.get(&p.number)) else { continue };
            let entry = self.ports.get_mut(&p.number).expect("ensure_ports");
            entry.ledger.granted(raise);
            entry.raise = raise;
            p.counters.publish_drift_factor(drift);
            p.counters.publish_owed(entry.ledger.owed_bytes(), raise);
            let factor = drift * raise;
            if (factor - entry.applied).abs() >= DRIFT_STEP {
                entry.applied = factor;
                changes.push((
                    usize::from(p.number),
                    compensated_limit(p, m, factor),
                    cfg.bucket_depth_cycles(p, drift),
                ));
            }
        }
        if !changes.is_empty() {
            s.set_limits(&changes, now);
        }
    }

    /// Each model-derived port's drift factor and its ledger's raise, fitted into what the
    /// core can give beside the fixed allocations ([`fit_allocations`]), and the cycles per
    /// second left after all of them, which no port was promised.
    fn scaled_factors(&self, cfg: &PmdConfig) -> (BTreeMap<u16, Scaled>, f64) {
        let (numbers, ports): (Vec<u16>, Vec<FittedPort>) = cfg
            .rx_ports
            .iter()
            .filter_map(|p| {
                let m = p.model_cycles?;
                let own = self.ports.get(&p.number);
                let port = CompensatedPort {
                    base: m.cycles_per_sec as f64,
                    factor: self.factor_of(p.number, &m),
                    beyond_profile: own.is_some_and(|d| d.beyond_profile),
                };
                let raise = own.map_or(1.0, |d| d.ledger.raise());
                let latency_class = p.cpu_qos.priority <= LATENCY_CLASSES && p.purchase_bps.is_some();
                Some((p.number, FittedPort { port, raise, latency_class }))
            })
            .unzip();
        let fixed: f64 = cfg
            .rx_ports
            .iter()
            .filter(|p| p.model_cycles.is_none())
            .map(|p| p.cpu_qos.limit.alloc_cycles_per_sec() as f64)
            .sum();
        let room = (cfg.tsc_hz as f64 * (DELIVERABLE_CORE_SHARE - self.stall_share) - fixed).max(0.0);
        let fitted = fit_allocations(&ports, room);
        let factors =
            numbers.into_iter().zip(fitted.factors).map(|(n, (drift, raise))| (n, Scaled { drift, raise })).collect();
        (factors, fitted.spare_cycles_per_sec)
    }

    /// After a reconfiguration: ports start from their totals; allocations from the model take
    /// their current factor at once; ports gone are forgotten.
    /// `now`: the scheduler's clock (see `crate::probe`).
    pub(crate) fn reset(&mut self, cfg: &PmdConfig, sched: Option<&mut PortScheduler>, now: u64) {
        self.last = cfg.rx_ports.iter().map(|p| p.counters.rx()).collect();
        self.ports.retain(|n, _| cfg.rx_ports.iter().any(|p| p.number == *n && p.model_cycles.is_some()));
        for p in &cfg.rx_ports {
            // A changed purchase or mode starts a new ledger.
            if let (Some(m), Some(e)) = (&p.model_cycles, self.ports.get_mut(&p.number)) {
                let fresh = new_ledger(p, m);
                if (e.ledger.purchase_bytes_per_sec(), e.ledger.is_strict())
                    != (fresh.purchase_bytes_per_sec(), fresh.is_strict())
                {
                    (e.ledger, e.raise) = (fresh, 1.0);
                }
            }
        }
        self.ledger_start_tsc = now;
        self.ledger_last = self.last.clone();
        let (factors, _) = self.scaled_factors(cfg);
        let Some(s) = sched else {
            self.ledger_last_waits = vec![0; cfg.rx_ports.len()];
            return;
        };
        self.ledger_last_waits =
            cfg.rx_ports.iter().map(|p| s.view(usize::from(p.number)).map_or(0, |v| v.waits)).collect();
        for p in &cfg.rx_ports {
            if let Some(m) = p.model_cycles {
                let Scaled { drift, raise } = factors[&p.number];
                if let Some(e) = self.ports.get_mut(&p.number) {
                    (e.applied, e.raise) = (drift * raise, raise);
                }
                let _ = s.set_limit(usize::from(p.number), compensated_limit(p, m, drift * raise), now);
                s.set_bucket_depth(usize::from(p.number), cfg.bucket_depth_cycles(p, drift), now);
            }
        }
    }
}

/// Shares the cycles no port was promised among the latency-class ports: what each may be
/// forgiven beyond its allocation (`slaswitch_qos::cpu::latency_class`).
fn forgiveness_budgets(cfg: &PmdConfig, s: &mut PortScheduler, spare_cycles_per_sec: f64, now: u64) {
    let latency: Vec<usize> =
        cfg.rx_ports.iter().map(|p| usize::from(p.number)).filter(|&n| s.is_latency_class(n)).collect();
    if latency.is_empty() {
        return;
    }
    let share = (spare_cycles_per_sec / latency.len() as f64) as u64;
    for port in latency {
        s.set_forgiveness_budget(port, Some(share), now);
    }
}

/// The port's traffic in `w` costs more per byte, by the model, than the profile it bought.
fn beyond_profile(model: &BandwidthModel, m: &ModelCycles, w: &PortWindow) -> bool {
    let predict = |bytes: f64, miss: f64| model.predict_cycles_per_packet(bytes, miss);
    let mean_bytes = w.bytes as f64 / w.packets.max(1) as f64;
    let profile_bytes = f64::from(m.profile.packet_bytes);
    let per_byte = |cycles: Option<f64>, bytes: f64| cycles.map(|c| c / bytes.max(1.0));
    let sent = per_byte(predict(mean_bytes, w.miss_share), mean_bytes);
    let bought = per_byte(predict(profile_bytes, model.calibrated_miss_share(m.profile.flows)), profile_bytes);
    matches!((sent, bought), (Some(sent), Some(bought)) if sent > BEYOND_PROFILE_COST_RATIO * bought)
}

/// What the model says a port's packets of this size and miss share cost where it is
/// deployed: the row times prod(R_i), which its allocation already pays. The compensator
/// measures against this, so a coefficient that the traffic bears out is not paid twice
/// (every VM of Fig. 11b got its VM-count coefficient over its purchase that way).
fn predicted_port_cost(model: &BandwidthModel, m: &ModelCycles, frame_bytes: f64, miss_share: f64) -> Option<f64> {
    model.predict_for_profile(&m.profile, frame_bytes, miss_share).map(|c| c * m.deployment_factor)
}

/// A model-derived port's cycle limit with its drift factor applied (its mode and weight kept).
fn compensated_limit(p: &RxPort, m: ModelCycles, factor: f64) -> CycleLimit {
    p.cpu_qos.with_cycles(((m.cycles_per_sec as f64) * factor).round().max(1.0) as u64).limit
}

#[cfg(test)]
mod tests {
    use super::predicted_port_cost;
    use crate::pmd_config::ModelCycles;
    use slaswitch_config::allocation::example_model as model;
    use slaswitch_qos::cpu::drift::port_config;
    use slaswitch_qos::cpu::{DriftCompensator, FlowCount, PortWindow, TrafficProfile};

    #[test]
    fn a_port_whose_packets_cost_what_its_deployment_factor_says_needs_no_compensation() {
        // Two VMs: the allocation pays 1.1x the 200-cycle row, and the packets really cost that.
        let model = model();
        let profile = TrafficProfile::new(64, FlowCount::Single);
        let m = ModelCycles {
            cycles_per_sec: 1_000_000,
            purchase_bps: 100_000_000,
            profile,
            calibrated_kind: true,
            deployment_factor: 1.1,
        };
        assert!((predicted_port_cost(&model, &m, 64.0, 0.0).unwrap() - 220.0).abs() < 1e-9);
        let window = PortWindow {
            packets: 100_000,
            bytes: 6_400_000,
            batches: 3_125,
            cycles: 22_000_000,
            miss_share: 0.0,
            token_limited: true,
        };
        let mut compensator = DriftCompensator::new(port_config(true, 32));
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
}
