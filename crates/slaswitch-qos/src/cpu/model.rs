//! The bandwidth-CPU model (seed 000 Sec. III): how many PMD cycles per second a VM needs to
//! forward its purchased bandwidth.
//!
//! 1. Traffic characteristics (Sec. III-B): a table measured on the host, per packet size
//!    {64, 128, 256, 512, 1024, 1500} and {single, many} flows, of the cycles one packet costs
//!    in each stage (Eq. 1: ingress + classification + egress). A profile picks a row (sizes in
//!    between are interpolated linearly); packets per second times cycles per packet is
//!    C_single.
//! 2. Deployment (Sec. III-C): coefficients R_i for the number of VMs sharing the PMD, the VM's
//!    NUMA placement and the number of PMD cores, each from its own table.
//! 3. C_alloc = prod(R_i) * C_single (Sec. III-D).
//!
//! Ours, beside step 1: a batch term ([`BatchTerm`]). The rows are measured with full batches,
//! so they price a packet with a 32nd of a batch's fixed work (the poll, the descriptor rings,
//! the misses of a port the cache has forgotten). A light VM polled often sends batches of one
//! or two frames, each paying that whole fixed work; its profile says how many frames its
//! batches hold, and the purchase is priced at that size (`docs/deviations.md`, batch term).
//!
//! Bandwidth counts Ethernet frame bits as the switch counts them (header included, no FCS,
//! preamble or gap), the same bytes the policers and the statistics count.

use serde::{Deserialize, Serialize};

/// The packet sizes the paper measures (Sec. III-D).
pub const PROFILE_PACKET_SIZES: [u32; 6] = [64, 128, 256, 512, 1024, 1500];

/// How many flows a profile's traffic carries: it decides how often the exact-match cache misses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowCount {
    /// One flow: every packet after the first hits the exact-match cache.
    Single,
    /// Many flows (the paper randomises addresses and ports): the cache mostly misses.
    Many,
}

impl FlowCount {
    /// Parses `single` or `many`.
    pub fn parse(s: &str) -> Result<FlowCount, crate::QosError> {
        match s {
            "single" | "1" => Ok(FlowCount::Single),
            "many" | "multiple" => Ok(FlowCount::Many),
            _ => Err(crate::QosError::setting(format!("'{s}'"), "single or many")),
        }
    }

    /// `single` or `many`.
    pub fn name(&self) -> &'static str {
        match self {
            FlowCount::Single => "single",
            FlowCount::Many => "many",
        }
    }
}

/// Packets in a full batch: the PMD's burst size, at which the table's rows are measured.
pub const FULL_BATCH_PACKETS: u32 = 32;

/// What a tenant says its traffic looks like (part of its SLA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficProfile {
    /// Frame length, bytes without FCS.
    pub packet_bytes: u32,
    /// One flow or many.
    pub flows: FlowCount,
    /// Frames the VM's batches hold, 1 to [`FULL_BATCH_PACKETS`]: full batches for a VM that
    /// sends at or beyond what it bought, one or two for a light one polled often.
    #[serde(default = "full_batch_packets")]
    pub batch_packets: u32,
}

fn full_batch_packets() -> u32 {
    FULL_BATCH_PACKETS
}

impl TrafficProfile {
    /// A profile of full batches.
    pub fn new(packet_bytes: u32, flows: FlowCount) -> TrafficProfile {
        TrafficProfile { packet_bytes, flows, batch_packets: FULL_BATCH_PACKETS }
    }
}

/// One point of the batch term: a batch of `packets_per_batch` frames (a mean, as measured)
/// cost `overhead_cycles_per_batch` more than its frames' price in the table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchPoint {
    /// Frames per batch, as measured.
    pub packets_per_batch: f64,
    /// Cycles a batch cost beyond `packets_per_batch` times its row.
    pub overhead_cycles_per_batch: f64,
}

/// What a batch costs beyond its frames' price in the full-batch rows, by batch size:
/// measured by `slaswitch calibrate` on a light port beside backlogged ones (its port cold
/// in the caches, as a light VM's is under load). Zero at a full batch, where the rows were
/// measured; empty in a model calibrated before the term existed (no batch pricing).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchTerm {
    /// Points by batch size.
    pub points: Vec<BatchPoint>,
    /// How they were measured.
    #[serde(default)]
    pub method: String,
}

impl BatchTerm {
    /// The overhead of a batch of `packets` frames: the points interpolated, the first point's
    /// below it, falling linearly to zero at a full batch beyond the last.
    pub fn overhead_cycles_per_batch(&self, packets: f64) -> f64 {
        let full = f64::from(FULL_BATCH_PACKETS);
        let n = packets.clamp(1.0, full);
        // The points below a full batch, and the full batch itself at zero; no allocation
        // (drift compensation prices every port's window with it).
        let points = self
            .points
            .iter()
            .filter(|p| p.packets_per_batch < full)
            .map(|p| (p.packets_per_batch, p.overhead_cycles_per_batch.max(0.0)))
            .chain(std::iter::once((full, 0.0)));
        // (frames per batch, overhead) of the nearest points at or below and at or above `n`,
        // and of the first point.
        type Point = Option<(f64, f64)>;
        let (mut below, mut above, mut first): (Point, Point, Point) = (None, None, None);
        for p in points {
            if first.is_none_or(|f| p.0 < f.0) {
                first = Some(p);
            }
            if p.0 <= n && below.is_none_or(|b| p.0 > b.0) {
                below = Some(p);
            }
            if p.0 >= n && above.is_none_or(|a| p.0 < a.0) {
                above = Some(p);
            }
        }
        match (below, above) {
            (Some(a), Some(b)) if b.0 > a.0 => a.1 + (b.1 - a.1) * (n - a.0) / (b.0 - a.0),
            (Some(a), _) => a.1,
            // Below the first point: its overhead.
            _ => first.map_or(0.0, |f| if f.0 < full { f.1 } else { 0.0 }),
        }
    }

    /// The overhead per frame of batches of `packets` frames.
    pub fn overhead_cycles_per_packet(&self, packets: u32) -> f64 {
        let n = f64::from(packets.clamp(1, FULL_BATCH_PACKETS));
        self.overhead_cycles_per_batch(n) / n
    }
}

/// Cycles one packet costs in each stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageCycles {
    /// Cycles of the ingress stage.
    pub ingress: f64,
    /// Cycles of the classification stage.
    pub classification: f64,
    /// Cycles of the egress stage.
    pub egress: f64,
}

impl StageCycles {
    /// All three stages.
    pub fn total(&self) -> f64 {
        self.ingress + self.classification + self.egress
    }

    fn lerp(a: &StageCycles, b: &StageCycles, f: f64) -> StageCycles {
        StageCycles {
            ingress: a.ingress + (b.ingress - a.ingress) * f,
            classification: a.classification + (b.classification - a.classification) * f,
            egress: a.egress + (b.egress - a.egress) * f,
        }
    }
}

/// One measured row of the traffic table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    /// Frame length of the row, bytes without FCS.
    pub packet_bytes: u32,
    /// One flow or many.
    pub flows: FlowCount,
    /// What a packet cost, by stage.
    pub cycles_per_packet: StageCycles,
    /// The forwarding rate the row was measured at.
    pub measured_kpps: f64,
    /// Share of the row's packets that missed the exact-match cache while it was measured
    /// (models from before this was recorded: none, read as 0 for single and 1 for many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emc_miss_share: Option<f64>,
    /// What the calibration measured, when that was below the row of a smaller frame and the
    /// row was raised to it ([`raise_to_size_envelope`]); `None`: the row is as measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_cycles_per_packet: Option<StageCycles>,
}

/// Raises each stage of each row to at least the same stage of every smaller frame with the
/// same flow count (a running maximum over sizes), keeping what was measured in
/// `measured_cycles_per_packet` where it changed.
///
/// Why: a stage does per-packet work and per-byte work (the copies), so a larger frame never
/// costs it fewer cycles. A row that came out cheaper was measured in a mode of the host where
/// the frames stayed in the caches (two daemon instances have measured the same point at
/// costs a factor of three apart; `docs/results/bandwidth-model.md`). A row priced from the
/// cheap mode under-allocates whenever the traffic meets the dear one, by more than drift
/// compensation may make up (Fig. 11a). The VM-count factor is a running
/// maximum for the same reason (seed 000 Sec. III-D; `slaswitch calibrate`).
pub fn raise_to_size_envelope(entries: &mut [ModelEntry]) {
    for flows in [FlowCount::Single, FlowCount::Many] {
        let mut order: Vec<usize> = (0..entries.len()).filter(|&i| entries[i].flows == flows).collect();
        order.sort_by_key(|&i| entries[i].packet_bytes);
        let mut floor = StageCycles::default();
        for i in order {
            let measured = entries[i].cycles_per_packet;
            floor = StageCycles {
                ingress: floor.ingress.max(measured.ingress),
                classification: floor.classification.max(measured.classification),
                egress: floor.egress.max(measured.egress),
            };
            if floor != measured {
                entries[i].measured_cycles_per_packet.get_or_insert(measured);
                entries[i].cycles_per_packet = floor;
            }
        }
    }
}

/// A coefficient table: input value -> growth factor. Looked up by the largest input not
/// above the asked one (the paper's curves flatten; between points the lower one is used).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FactorTable {
    /// (input, factor) pairs, by input.
    pub points: Vec<(u32, f64)>,
    /// `measured` on this host, or `given` by the operator.
    pub source: String,
}

impl FactorTable {
    /// The factor for `input` (1 below the first point).
    pub fn lookup(&self, input: u32) -> f64 {
        self.points.iter().filter(|(x, _)| *x <= input).max_by_key(|(x, _)| *x).map_or(1.0, |(_, f)| *f)
    }
}

/// The whole model as stored by `slaswitch calibrate`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BandwidthModel {
    /// Where it was measured: CPU model, cores, TSC rate, software versions.
    pub machine: String,
    /// The TSC frequency of the host it was measured on.
    pub tsc_hz: u64,
    /// When it was measured, Unix seconds.
    pub measured_unix_secs: u64,
    /// How it was measured (cores, rule set, durations), for the report.
    pub method: String,
    /// The table: cycles per packet by frame size and flow count (Sec. III-B).
    pub entries: Vec<ModelEntry>,
    /// R for the number of VMs with a purchased bandwidth on one PMD.
    pub vm_count: FactorTable,
    /// R for a VM whose memory is on another NUMA node than its PMD (one point, input 1).
    pub numa_remote: FactorTable,
    /// R for the number of PMD cores of the switch.
    pub pmd_count: FactorTable,
    /// What a batch costs beyond its frames' rows, by batch size.
    #[serde(default)]
    pub batch: BatchTerm,
}

/// Where a VM sits, the inputs of the deployment coefficients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// VMs with a purchase on the PMD.
    pub vm_count: u32,
    /// The VM's memory is on another NUMA node than its PMD.
    pub numa_remote: bool,
    /// PMD cores of the switch.
    pub pmd_count: u32,
}

/// One applied coefficient, for `qos-show`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedFactor {
    /// Which coefficient.
    pub name: String,
    /// The input it was looked up at.
    pub input: u32,
    /// The factor applied.
    pub value: f64,
    /// `measured` or `given`.
    pub source: String,
}

/// The model's answer for one VM, with every step shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// The purchase, bits per second of frames.
    pub bandwidth_bps: u64,
    /// The profile it was priced for.
    pub profile: TrafficProfile,
    /// The purchase in packets per second of that profile.
    pub packets_per_sec: f64,
    /// The table rows used (one, or the two a size lies between).
    pub entries: Vec<ModelEntry>,
    /// What a packet of the profile costs, by stage, on one VM's PMD.
    pub cycles_per_packet: StageCycles,
    /// What a packet of the profile costs on top of its row in batches of the profile's size
    /// (the batch term's overhead per batch over the frames a batch holds).
    #[serde(default)]
    pub batch_cycles_per_packet: f64,
    /// C_single: the cycles per second the purchase needs with one VM on the PMD.
    pub c_single_cycles_per_sec: f64,
    /// The deployment coefficients R_i applied.
    pub factors: Vec<AppliedFactor>,
    /// C_alloc = prod(R_i) * C_single.
    pub cycles_per_sec: u64,
}

impl Allocation {
    /// prod(R_i): how much dearer than the single-VM row the deployment makes each packet.
    pub fn deployment_factor(&self) -> f64 {
        deployment_product(&self.factors)
    }
}

fn deployment_product(factors: &[AppliedFactor]) -> f64 {
    factors.iter().map(|f| f.value).product()
}

impl BandwidthModel {
    /// Cycles per packet for a profile: its row, or the interpolation of the two rows of the
    /// same flow count its size lies between.
    pub fn cycles_per_packet(
        &self,
        profile: &TrafficProfile,
    ) -> Result<(StageCycles, Vec<ModelEntry>), crate::QosError> {
        let mut rows: Vec<&ModelEntry> = self.entries.iter().filter(|e| e.flows == profile.flows).collect();
        rows.sort_by_key(|e| e.packet_bytes);
        let (first, last) = match (rows.first(), rows.last()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => return Err(crate::QosError::NoModelRows { flows: profile.flows.name() }),
        };
        if profile.packet_bytes < first.packet_bytes || profile.packet_bytes > last.packet_bytes {
            return Err(crate::QosError::OutsideModel {
                packet_bytes: profile.packet_bytes,
                min_bytes: first.packet_bytes,
                max_bytes: last.packet_bytes,
            });
        }
        if let Some(exact) = rows.iter().find(|e| e.packet_bytes == profile.packet_bytes) {
            return Ok((exact.cycles_per_packet, vec![**exact]));
        }
        let hi = rows.iter().position(|e| e.packet_bytes > profile.packet_bytes).expect("within range");
        let (a, b) = (rows[hi - 1], rows[hi]);
        let f = f64::from(profile.packet_bytes - a.packet_bytes) / f64::from(b.packet_bytes - a.packet_bytes);
        Ok((StageCycles::lerp(&a.cycles_per_packet, &b.cycles_per_packet, f), vec![*a, *b]))
    }

    /// The exact-match-cache miss share the `flows` rows were measured at (their mean).
    pub fn calibrated_miss_share(&self, flows: FlowCount) -> f64 {
        let (sum, n) = self
            .entries
            .iter()
            .filter(|e| e.flows == flows)
            .filter_map(|e| e.emc_miss_share)
            .fold((0.0, 0u32), |(sum, n), share| (sum + share, n + 1));
        if n == 0 {
            return if flows == FlowCount::Single { 0.0 } else { 1.0 };
        }
        sum / f64::from(n)
    }

    /// The total cycles of a `flows` row at `frame_bytes`: the rows around it interpolated,
    /// the nearest row outside the table. Allocates nothing: drift compensation asks it for
    /// every port in every window, on the PMD thread.
    fn row_total_at(&self, flows: FlowCount, frame_bytes: f64) -> Option<f64> {
        let (mut below, mut above): (Option<&ModelEntry>, Option<&ModelEntry>) = (None, None);
        for e in self.entries.iter().filter(|e| e.flows == flows) {
            let bytes = f64::from(e.packet_bytes);
            if bytes <= frame_bytes && below.is_none_or(|b| e.packet_bytes > b.packet_bytes) {
                below = Some(e);
            }
            if bytes >= frame_bytes && above.is_none_or(|a| e.packet_bytes < a.packet_bytes) {
                above = Some(e);
            }
        }
        match (below, above) {
            (Some(a), Some(b)) if a.packet_bytes < b.packet_bytes => {
                let f = (frame_bytes - f64::from(a.packet_bytes)) / f64::from(b.packet_bytes - a.packet_bytes);
                Some(a.cycles_per_packet.total() + (b.cycles_per_packet.total() - a.cycles_per_packet.total()) * f)
            }
            (Some(e), _) | (None, Some(e)) => Some(e.cycles_per_packet.total()),
            (None, None) => None,
        }
    }

    /// Cycles per packet the model expects for traffic as observed: `frame_bytes` on average,
    /// `miss_share` of packets missing the exact-match cache. Cost is linear in the miss share
    /// through the single-flow and many-flow rows at the miss shares they were measured at (a
    /// many-flow row predicts that row at the miss share it was measured at, not at all misses,
    /// which under-predicted many-flow traffic and over-allocated it, Fig. 11a);
    /// beyond the many-flow row's share the line is extended up to all misses. Sizes outside
    /// the table take its nearest row.
    pub fn predict_cycles_per_packet(&self, frame_bytes: f64, miss_share: f64) -> Option<f64> {
        let bytes = frame_bytes.round();
        let (single, many) = (self.row_total_at(FlowCount::Single, bytes)?, self.row_total_at(FlowCount::Many, bytes)?);
        let (miss_single, miss_many) =
            (self.calibrated_miss_share(FlowCount::Single), self.calibrated_miss_share(FlowCount::Many));
        let miss = miss_share.clamp(0.0, 1.0);
        // Rows measured at nearly the same miss share say nothing about a miss's cost.
        let along = if miss_many - miss_single < 0.05 {
            miss
        } else {
            ((miss - miss_single) / (miss_many - miss_single)).max(0.0)
        };
        Some(single + (many - single) * along)
    }

    /// [`BandwidthModel::predict_cycles_per_packet`] for a port that bought `profile`. A
    /// many-flow purchase is priced at the many-flow row, at the miss share that row was
    /// measured at, so its traffic is predicted there too: how many of its packets miss the
    /// cache moves with the cache's state (its neighbours' flows, the host), not with what it
    /// bought, and shows in the port's drift factor like any other drift (`docs/deviations.md`;
    /// predicting at each window's own share left such VMs short in Fig. 11b, and capping that
    /// noisy share at the row's put them over). A single-flow purchase is predicted at its traffic's real
    /// misses: switching to many flows buys it nothing.
    /// The profile's batch size is priced too: the batches a port really sends move its cost
    /// like its frames' sizes do, and show in its drift factor (a light VM that bought
    /// one-frame batches and is polled less often costs less, and is given less).
    pub fn predict_for_profile(&self, profile: &TrafficProfile, frame_bytes: f64, miss_share: f64) -> Option<f64> {
        let miss = match profile.flows {
            FlowCount::Many => self.calibrated_miss_share(FlowCount::Many),
            FlowCount::Single => miss_share,
        };
        let batch = self.batch.overhead_cycles_per_packet(profile.batch_packets);
        self.predict_cycles_per_packet(frame_bytes, miss).map(|c| c + batch)
    }

    /// C_alloc = prod(R_i) * C_single for a purchased bandwidth (seed 000 Sec. III-D).
    pub fn allocate(
        &self,
        bandwidth_bps: u64,
        profile: TrafficProfile,
        deployment: Deployment,
    ) -> Result<Allocation, crate::QosError> {
        if profile.packet_bytes == 0 {
            return Err(crate::QosError::setting("profile_packet_bytes=0", "above 0"));
        }
        if !(1..=FULL_BATCH_PACKETS).contains(&profile.batch_packets) {
            return Err(crate::QosError::setting(
                format!("profile_batch_packets={}", profile.batch_packets),
                format!("from 1 to {FULL_BATCH_PACKETS}"),
            ));
        }
        let (cycles_per_packet, entries) = self.cycles_per_packet(&profile)?;
        let batch_cycles_per_packet = self.batch.overhead_cycles_per_packet(profile.batch_packets);
        let packets_per_sec = bandwidth_bps as f64 / 8.0 / f64::from(profile.packet_bytes);
        let c_single = packets_per_sec * (cycles_per_packet.total() + batch_cycles_per_packet);
        let factor = |name: &str, table: &FactorTable, input: u32| AppliedFactor {
            name: name.into(),
            input,
            value: table.lookup(input),
            source: table.source.clone(),
        };
        let mut factors = vec![
            factor("vm_count", &self.vm_count, deployment.vm_count),
            factor("pmd_count", &self.pmd_count, deployment.pmd_count),
        ];
        if deployment.numa_remote {
            factors.push(factor("numa_remote", &self.numa_remote, 1));
        }
        let product = deployment_product(&factors);
        Ok(Allocation {
            bandwidth_bps,
            profile,
            packets_per_sec,
            entries,
            cycles_per_packet,
            batch_cycles_per_packet,
            c_single_cycles_per_sec: c_single,
            factors,
            cycles_per_sec: (c_single * product).ceil() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> BandwidthModel {
        let row = |bytes, flows, total: f64| ModelEntry {
            packet_bytes: bytes,
            flows,
            cycles_per_packet: StageCycles { ingress: total / 2.0, classification: total / 4.0, egress: total / 4.0 },
            measured_kpps: 1000.0,
            emc_miss_share: None,
            measured_cycles_per_packet: None,
        };
        BandwidthModel {
            machine: "test".into(),
            tsc_hz: 2_000_000_000,
            measured_unix_secs: 0,
            method: "test".into(),
            entries: vec![
                row(64, FlowCount::Single, 200.0),
                row(128, FlowCount::Single, 240.0),
                row(1500, FlowCount::Single, 800.0),
                row(64, FlowCount::Many, 400.0),
                row(1500, FlowCount::Many, 1000.0),
            ],
            vm_count: FactorTable { points: vec![(1, 1.0), (4, 1.14), (8, 1.2)], source: "measured".into() },
            numa_remote: FactorTable { points: vec![(1, 1.4)], source: "given".into() },
            pmd_count: FactorTable { points: vec![(1, 1.0), (2, 1.47)], source: "given".into() },
            batch: BatchTerm::default(),
        }
    }

    fn batch_term() -> BatchTerm {
        let point =
            |packets_per_batch, overhead_cycles_per_batch| BatchPoint { packets_per_batch, overhead_cycles_per_batch };
        BatchTerm { points: vec![point(4.0, 1200.0), point(1.0, 1500.0)], method: "test".into() }
    }

    #[test]
    fn the_batch_term_interpolates_its_points_and_vanishes_at_a_full_batch() {
        let b = batch_term();
        for (packets, overhead) in
            [(0.5, 1500.0), (1.0, 1500.0), (2.0, 1400.0), (4.0, 1200.0), (18.0, 600.0), (32.0, 0.0)]
        {
            assert!((b.overhead_cycles_per_batch(packets) - overhead).abs() < 1e-9, "{packets}: {overhead}");
        }
        assert!((b.overhead_cycles_per_packet(2) - 700.0).abs() < 1e-9);
        assert_eq!(BatchTerm::default().overhead_cycles_per_packet(1), 0.0);
    }

    #[test]
    fn a_purchase_of_small_batches_pays_each_batchs_overhead() {
        let mut m = model();
        m.batch = batch_term();
        let one_vm = Deployment { vm_count: 1, numa_remote: false, pmd_count: 1 };
        let full = m.allocate(1_000_000, TrafficProfile::new(64, FlowCount::Single), one_vm).unwrap();
        let light = TrafficProfile { batch_packets: 1, ..TrafficProfile::new(64, FlowCount::Single) };
        let one = m.allocate(1_000_000, light, one_vm).unwrap();
        assert_eq!(full.batch_cycles_per_packet, 0.0);
        assert!((one.batch_cycles_per_packet - 1500.0).abs() < 1e-9);
        // 1 Mbit/s of 64-byte frames: 1953.125 pps at 200 and at 200 + 1500 cycles.
        assert_eq!(full.cycles_per_sec, (1953.125f64 * 200.0).ceil() as u64);
        assert_eq!(one.cycles_per_sec, (1953.125f64 * 1700.0).ceil() as u64);
        // Its traffic is predicted at the batches it bought.
        assert!((m.predict_for_profile(&light, 64.0, 0.0).unwrap() - 1700.0).abs() < 1e-9);
        let bad = TrafficProfile { batch_packets: 0, ..light };
        assert!(m
            .allocate(1_000_000, bad, one_vm)
            .unwrap_err()
            .to_string()
            .contains("profile_batch_packets=0: from 1 to 32"));
    }

    #[test]
    fn exact_row_times_packet_rate() {
        let a = model()
            .allocate(
                1_000_000_000,
                TrafficProfile::new(1500, FlowCount::Single),
                Deployment { vm_count: 1, numa_remote: false, pmd_count: 1 },
            )
            .unwrap();
        let pps = 1e9 / 8.0 / 1500.0;
        assert!((a.packets_per_sec - pps).abs() < 1e-6);
        assert_eq!(a.cycles_per_sec, (pps * 800.0).ceil() as u64);
        assert_eq!(a.entries.len(), 1);
    }

    #[test]
    fn sizes_between_rows_interpolate() {
        let (c, rows) = model().cycles_per_packet(&TrafficProfile::new(96, FlowCount::Single)).unwrap();
        assert_eq!(rows.len(), 2);
        assert!((c.total() - 220.0).abs() < 1e-9);
    }

    #[test]
    fn coefficients_multiply_the_paper_example() {
        // Sec. III-C: 4 VMs, remote NUMA node, two PMD cores -> 1.4 * 1.14 * 1.47.
        let m = model();
        let p = TrafficProfile::new(64, FlowCount::Many);
        let single = m.allocate(100_000_000, p, Deployment { vm_count: 1, numa_remote: false, pmd_count: 1 }).unwrap();
        let all = m.allocate(100_000_000, p, Deployment { vm_count: 5, numa_remote: true, pmd_count: 2 }).unwrap();
        let expected = single.c_single_cycles_per_sec * 1.4 * 1.14 * 1.47;
        assert!((all.cycles_per_sec as f64 - expected).abs() <= 1.0, "{} vs {expected}", all.cycles_per_sec);
        assert_eq!(all.factors.len(), 3);
    }

    #[test]
    fn outside_the_table_is_refused() {
        let e = model().cycles_per_packet(&TrafficProfile::new(9000, FlowCount::Single)).unwrap_err().to_string();
        assert!(e.contains("64 to 1500"), "{e}");
    }

    #[test]
    fn predictions_place_each_row_at_the_miss_share_it_was_measured_at() {
        let mut m = model();
        // Recorded shares unknown: single at 0, many at 1.
        assert!((m.predict_cycles_per_packet(64.0, 0.5).unwrap() - 300.0).abs() < 1e-9);
        for e in &mut m.entries {
            e.emc_miss_share = Some(if e.flows == FlowCount::Many { 0.6 } else { 0.0 });
        }
        // Traffic like the many-flow row's predicts that row exactly, and the line goes on to
        // all misses.
        assert!((m.predict_cycles_per_packet(64.0, 0.6).unwrap() - 400.0).abs() < 1e-9);
        assert!((m.predict_cycles_per_packet(64.0, 0.3).unwrap() - 300.0).abs() < 1e-9);
        assert!((m.predict_cycles_per_packet(64.0, 0.9).unwrap() - 500.0).abs() < 1e-9);
    }

    #[test]
    fn a_many_flow_purchase_is_predicted_at_its_row() {
        let mut m = model();
        for e in &mut m.entries {
            e.emc_miss_share = Some(if e.flows == FlowCount::Many { 0.6 } else { 0.0 });
        }
        // A many-flow purchase: its row, whatever share of its packets missed.
        for miss in [0.0, 0.3, 0.9] {
            assert!(
                (m.predict_for_profile(&TrafficProfile::new(64, FlowCount::Many), 64.0, miss).unwrap() - 400.0).abs()
                    < 1e-9
            );
        }
        // A single-flow purchase: what its traffic costs.
        assert!(
            (m.predict_for_profile(&TrafficProfile::new(64, FlowCount::Single), 64.0, 0.9).unwrap() - 500.0).abs()
                < 1e-9
        );
        assert!(
            (m.predict_for_profile(&TrafficProfile::new(64, FlowCount::Single), 64.0, 0.3).unwrap() - 300.0).abs()
                < 1e-9
        );
    }

    #[test]
    fn a_row_cheaper_than_a_smaller_frame_is_raised_stage_by_stage_and_keeps_what_was_measured() {
        let row = |bytes, flows, ingress, classification| ModelEntry {
            packet_bytes: bytes,
            flows,
            cycles_per_packet: StageCycles { ingress, classification, egress: 13.0 },
            measured_kpps: 1.0,
            emc_miss_share: None,
            measured_cycles_per_packet: None,
        };
        // The AMD host's one-flow rows (1500 bytes measured cache-hot), and many-flow rows that
        // are already in order, listed out of order.
        let mut entries = vec![
            row(1500, FlowCount::Single, 116.0, 57.0),
            row(64, FlowCount::Single, 62.0, 56.0),
            row(1024, FlowCount::Single, 332.0, 56.0),
            row(64, FlowCount::Many, 68.0, 366.0),
            row(512, FlowCount::Many, 235.0, 370.0),
        ];
        raise_to_size_envelope(&mut entries);
        let priced = |bytes, flows| *entries.iter().find(|e| e.packet_bytes == bytes && e.flows == flows).unwrap();
        let big = priced(1500, FlowCount::Single);
        assert_eq!(big.cycles_per_packet, StageCycles { ingress: 332.0, classification: 57.0, egress: 13.0 });
        assert_eq!(
            big.measured_cycles_per_packet,
            Some(StageCycles { ingress: 116.0, classification: 57.0, egress: 13.0 })
        );
        // 1024 bytes: its classification (56) is raised to the 64-byte row's (56): unchanged.
        assert_eq!(priced(1024, FlowCount::Single).measured_cycles_per_packet, None);
        // The flow counts are separate envelopes: many-flow rows are not raised by one-flow ones.
        assert_eq!(priced(512, FlowCount::Many).measured_cycles_per_packet, None);
        assert_eq!(priced(64, FlowCount::Many).cycles_per_packet.ingress, 68.0);
    }
}
