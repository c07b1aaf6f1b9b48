//! Host-speed drift compensation for model-derived allocations (an extension of seed 000
//! Sec. III). The bandwidth-CPU model is a table of cycles per packet measured once. On a
//! shared host the work a TSC cycle does drifts (frequency, a busy sibling thread, memory
//! contention) from one minute to the next, so a fixed allocation of cycles buys a VM more or
//! less than it purchased. The paper's accuracy assumes a quiet server (`docs/deviations.md`;
//! the measurements in `docs/results/c2qos-experiments.md`).
//!
//! The PMD therefore compares, every window, the cycles its ports' batches really cost with what
//! the model predicts for the traffic they really carried (observed frame size, observed share
//! of exact-match-cache misses between the model's single-flow and many-flow rows). Only ports
//! whose allocation bound count: batches nearly full (the model is measured backlogged), or
//! the port waited for tokens in the window. The second takes in light ports whose small
//! batches cost more per packet than the backlogged rows say (a web VM polled often sends
//! one-packet batches dearer than its row, and waits for tokens it should have had). The
//! ratio, smoothed, scales the allocations that came from the model: one factor over all ports of the PMD (for ports not yet measured), and one per port,
//! which also corrects the error of the row its traffic falls in (the rows are measured minutes
//! apart, at different host speeds) and the cost its neighbours add (a one-flow VM's frames cost
//! more next to many-flow VMs that thrash the CPU caches).
//!
//! A port's factor is its own measured ratio, not held near the PMD's: a bound around the PMD's
//! factor left one-flow VMs short and many-flow VMs over (Fig. 11a). What a VM could gain from it is bounded: the prediction
//! uses the traffic as sent, not the profile, so switching to small frames or many flows buys
//! nothing (a VM that lies about its profile still gets cycles for its purchase, no more); the
//! cost left unexplained, which a port is compensated for, comes from the host or from the
//! neighbours, is capped at [`PORT_MAX_FACTOR`], and never overcommits the core (the datapath
//! caps the factors when they would exceed it: water-filling, ports whose traffic is beyond
//! their profile first).

/// The most a port's allocation may be scaled up (or 1/this down) for its measured cost.
pub const PORT_MAX_FACTOR: f64 = 3.0;
/// The same for a port of a kind the model was not calibrated on (`slaswitch calibrate`
/// drives vhost-user VMs): for it the whole difference in cost between kinds is unmodelled,
/// not only the host's drift: an af_packet frame from a namespace's TCP costs several times
/// the vhost-user row (Fig. 12's bulk VMs), more than [`PORT_MAX_FACTOR`] can give.
pub const UNCALIBRATED_KIND_MAX_FACTOR: f64 = 12.0;

/// The settings for a port's own compensator: a light port (a web server's 50 Mbit/s is
/// about 1700 frames per window) counts too. `calibrated_kind`: the model's rows were measured
/// on ports of this port's kind. `profile_batch_packets`: the batch size its purchase was
/// priced at; the prediction pays that batch's fixed work, so batches that full are measured
/// in every window, not only when the port waited for tokens (a latency-class VM that bought
/// one-frame batches would otherwise drift back to its price between waits, and wait again).
pub fn port_config(calibrated_kind: bool, profile_batch_packets: u32) -> DriftConfig {
    let max_factor = if calibrated_kind { PORT_MAX_FACTOR } else { UNCALIBRATED_KIND_MAX_FACTOR };
    let defaults = DriftConfig::default();
    let min_mean_batch = defaults.min_mean_batch.min(f64::from(profile_batch_packets.max(1)));
    DriftConfig { max_factor, min_packets: 200, min_mean_batch, ..defaults }
}

/// One port's traffic over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PortWindow {
    /// Packets received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Batches that carried packets.
    pub batches: u64,
    /// Cycles its batches cost (all three stages).
    pub cycles: u64,
    /// Share of its packets that missed the exact-match cache (0 to 1).
    pub miss_share: f64,
    /// The port waited for cycle tokens in the window: its allocation bound, whatever its
    /// batch size.
    pub token_limited: bool,
}

/// How a compensator weighs its windows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DriftConfig {
    /// Ports whose mean batch is below this many packets are left out.
    pub min_mean_batch: f64,
    /// Weight of a new window in the smoothed factor.
    pub smoothing: f64,
    /// The factor stays within [1/max, max].
    pub max_factor: f64,
    /// A window needs at least this many packets from qualifying ports.
    pub min_packets: u64,
    /// Share of the way back to 1 a factor above 1 goes per window with traffic but no full
    /// batches.
    pub relax: f64,
}

impl Default for DriftConfig {
    fn default() -> Self {
        DriftConfig { min_mean_batch: 24.0, smoothing: 0.2, max_factor: 2.0, min_packets: 2000, relax: 0.05 }
    }
}

/// Smooths the packets a predicted cycle really buys, not its inverse: a port held to `C`
/// cycles/s forwards `C / cost` packets/s, so over windows whose cost jitters what it gets is
/// the mean of `1 / cost`, and a factor that smoothed the cost itself overshoots the purchase
/// (Jensen's inequality: the mean of the inverse exceeds the inverse of the mean). The factor is the inverse of the
/// smoothed efficiency, a harmonic mean of the measured ratios.
#[derive(Clone, Copy, Debug)]
pub struct DriftCompensator {
    cfg: DriftConfig,
    /// Predicted over measured cycles, smoothed.
    efficiency: f64,
    windows: u64,
}

impl DriftCompensator {
    /// A compensator at factor 1 with no window seen.
    pub fn new(cfg: DriftConfig) -> Self {
        DriftCompensator { cfg, efficiency: 1.0, windows: 0 }
    }

    /// Measured cycles over predicted cycles (the harmonic mean of the windows' ratios,
    /// smoothed): allocations are multiplied by it.
    pub fn factor(&self) -> f64 {
        1.0 / self.efficiency
    }

    /// Windows that moved the factor.
    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// Feeds one window: each port's traffic and `predict(mean_frame_bytes, miss_share)`, the
    /// model's cycles per packet for it. Returns the new factor when the window counted.
    pub fn observe(&mut self, ports: &[PortWindow], predict: impl Fn(f64, f64) -> Option<f64>) -> Option<f64> {
        let (mut measured, mut predicted, mut packets) = (0.0, 0.0, 0u64);
        let mut light = false;
        for p in ports.iter().filter(|p| p.packets > 0) {
            if !p.token_limited && (p.packets as f64 / p.batches.max(1) as f64) < self.cfg.min_mean_batch {
                light = true;
                continue;
            }
            let Some(cpp) = predict(p.bytes as f64 / p.packets as f64, p.miss_share) else { continue };
            measured += p.cycles as f64;
            predicted += cpp * p.packets as f64;
            packets += p.packets;
        }
        if packets < self.cfg.min_packets || predicted <= 0.0 {
            // Traffic, but no full batches: the allocation does not bind, so nothing can be
            // measured. A factor left high would keep it from ever binding again (the port is
            // never backlogged, so never measured): drift back towards 1, until the port is
            // held and measurable again.
            if light && self.efficiency < 1.0 {
                self.efficiency = 1.0 - (1.0 - self.efficiency) * (1.0 - self.cfg.relax);
                return Some(self.factor());
            }
            return None;
        }
        let efficiency = (predicted / measured).clamp(1.0 / self.cfg.max_factor, self.cfg.max_factor);
        // The first windows are averaged plainly, then smoothed: a smoothed start from 1 would
        // leave a new port short of its purchase for seconds while the factor climbs.
        let weight = self.cfg.smoothing.max(1.0 / (self.windows + 1) as f64);
        self.efficiency += weight * (efficiency - self.efficiency);
        self.windows += 1;
        Some(self.factor())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(packets: u64, cycles_per_packet: f64) -> PortWindow {
        PortWindow {
            packets,
            bytes: packets * 512,
            batches: packets / 32,
            cycles: (packets as f64 * cycles_per_packet) as u64,
            miss_share: 0.0,
            token_limited: false,
        }
    }

    /// A window of `packets` one-frame batches of `frame_bytes`, each costing `cycles_per_packet`.
    fn one_frame_batches(packets: u64, frame_bytes: u64, cycles_per_packet: u64, token_limited: bool) -> PortWindow {
        PortWindow {
            packets,
            bytes: packets * frame_bytes,
            batches: packets,
            cycles: packets * cycles_per_packet,
            miss_share: 0.0,
            token_limited,
        }
    }

    #[test]
    fn follows_a_host_that_slows_down_and_ignores_light_ports() {
        let mut d = DriftCompensator::new(DriftConfig::default());
        let predict = |_: f64, _: f64| Some(1000.0);
        // The host runs 30% slow: the factor converges to 1.3.
        for _ in 0..40 {
            d.observe(&[full(100_000, 1300.0)], predict);
        }
        assert!((d.factor() - 1.3).abs() < 0.001, "{}", d.factor());
        // A light port (2-packet batches, costly per packet) does not move it.
        let light = PortWindow {
            packets: 10_000,
            bytes: 5_120_000,
            batches: 5_000,
            cycles: 50_000_000,
            miss_share: 0.0,
            token_limited: false,
        };
        for _ in 0..20 {
            d.observe(&[full(100_000, 1300.0), light], predict);
        }
        assert!((d.factor() - 1.3).abs() < 0.001, "{}", d.factor());
        // Too little traffic: no change at all.
        assert_eq!(d.observe(&[full(1000, 5000.0)], predict), None);
    }

    #[test]
    fn a_new_port_is_compensated_from_its_first_window() {
        // A port whose traffic costs 1.8x the model: its first measured window sets the factor,
        // so the purchase is not left short while a smoothed factor climbs.
        let mut d = DriftCompensator::new(port_config(true, 32));
        d.observe(&[full(100_000, 1800.0)], |_, _| Some(1000.0));
        assert!((d.factor() - 1.8).abs() < 1e-9, "{}", d.factor());
        // Later windows are smoothed: one window at 1.2x moves it by the running mean only.
        d.observe(&[full(100_000, 1200.0)], |_, _| Some(1000.0));
        let expected = 1.0 / ((1.0 / 1.8 + 1.0 / 1.2) / 2.0);
        assert!((d.factor() - expected).abs() < 1e-9, "{}", d.factor());
    }

    #[test]
    fn a_jittering_cost_buys_the_predicted_packets_on_average() {
        // Windows alternate between 20% cheaper and 20% dearer than predicted: the factor is
        // their harmonic mean, so the packets an allocation buys average out to the purchase.
        let mut d = DriftCompensator::new(DriftConfig { smoothing: 0.05, ..DriftConfig::default() });
        let mut bought = 0.0;
        for i in 0..400 {
            let cost = if i % 2 == 0 { 800.0 } else { 1200.0 };
            if i >= 200 {
                bought += 1000.0 * d.factor() / cost;
            }
            d.observe(&[full(100_000, cost)], |_, _| Some(1000.0));
        }
        let mean = bought / 200.0;
        assert!((mean - 1.0).abs() < 0.005, "{mean}");
    }

    #[test]
    fn a_light_port_held_by_its_tokens_is_measured() {
        // One-packet batches at twice the row's cost: ignored while the port gets all it
        // sends, measured once it waits for tokens.
        let mut d = DriftCompensator::new(port_config(true, 32));
        let light = |token_limited| one_frame_batches(1_700, 358, 2_000, token_limited);
        for _ in 0..10 {
            d.observe(&[light(false)], |_, _| Some(1000.0));
        }
        assert_eq!(d.windows(), 0);
        for _ in 0..40 {
            d.observe(&[light(true)], |_, _| Some(1000.0));
        }
        assert!((d.factor() - 2.0).abs() < 0.01, "{}", d.factor());
    }

    #[test]
    fn a_port_priced_for_one_frame_batches_is_measured_whether_or_not_it_waited() {
        // It bought one-frame batches and sends them at 1.7x their price: every window counts,
        // so the factor stays at 1.7 between waits instead of relaxing back to its price.
        let mut d = DriftCompensator::new(port_config(true, 1));
        let light = |token_limited| one_frame_batches(500, 64, 1_700, token_limited);
        d.observe(&[light(true)], |_, _| Some(1000.0));
        for _ in 0..40 {
            d.observe(&[light(false)], |_, _| Some(1000.0));
        }
        assert!((d.factor() - 1.7).abs() < 1e-9, "{}", d.factor());
        // Priced for full batches, the same port relaxes between waits.
        let mut full_priced = DriftCompensator::new(port_config(true, 32));
        full_priced.observe(&[light(true)], |_, _| Some(1000.0));
        for _ in 0..40 {
            full_priced.observe(&[light(false)], |_, _| Some(1000.0));
        }
        assert!(full_priced.factor() < 1.1, "{}", full_priced.factor());
    }

    #[test]
    fn a_factor_that_stops_binding_drifts_back() {
        let mut d = DriftCompensator::new(DriftConfig::default());
        for _ in 0..30 {
            d.observe(&[full(100_000, 1500.0)], |_, _| Some(1000.0));
        }
        assert!(d.factor() > 1.45);
        // The port now gets all it sends: small batches only.
        let light = PortWindow {
            packets: 50_000,
            bytes: 25_600_000,
            batches: 10_000,
            cycles: 100_000_000,
            miss_share: 0.0,
            token_limited: false,
        };
        for _ in 0..100 {
            d.observe(&[light], |_, _| Some(1000.0));
        }
        assert!(d.factor() < 1.01, "{}", d.factor());
    }

    #[test]
    fn the_prediction_sees_the_traffic_as_sent() {
        // Cost grows with frame size and misses; a port sending what the model predicts keeps
        // the factor at 1 whatever its size.
        let predict = |bytes: f64, miss: f64| Some(200.0 + bytes + 1000.0 * miss);
        let mut d = DriftCompensator::new(DriftConfig::default());
        let port = |bytes: u64, miss: f64| PortWindow {
            packets: 64_000,
            bytes: 64_000 * bytes,
            batches: 2_000,
            cycles: (64_000.0 * (200.0 + bytes as f64 + 1000.0 * miss)) as u64,
            miss_share: miss,
            token_limited: false,
        };
        for _ in 0..10 {
            d.observe(&[port(64, 1.0), port(1500, 0.0)], predict);
        }
        assert!((d.factor() - 1.0).abs() < 1e-3, "{}", d.factor());
    }
}
