//! Per-port ingress policing, the baseline C2QoS is measured against (seed 000 Sec. II, Fig. 1):
//! a byte-rate srTCM and a packet-rate bucket applied to each received batch before
//! classification, the way OVS-DPDK polices in its rx path. Options carry OVS's names and units
//! so one scenario configures both switches with the same numbers:
//!
//! | option                          | unit  | meaning                                      |
//! |---------------------------------|-------|----------------------------------------------|
//! | `ingress_policing_rate`         | kbps  | committed rate, 0 or absent: no byte policer |
//! | `ingress_policing_burst`        | kb    | committed burst (0 or absent: 8000 kb)       |
//! | `ingress_policing_kpkts_rate`   | kpps  | packet rate, 0 or absent: no packet policer  |
//! | `ingress_policing_kpkts_burst`  | kpkts | packet burst (0 or absent: 16 kpkts)         |
//!
//! Like OVS-DPDK's policer the byte meter counts a frame without its 14-byte Ethernet header,
//! and passes only green (srTCM with EBS 0).

use std::collections::BTreeMap;

use slaswitch_qos::meter::{PacketRateMeter, Srtcm, SrtcmParams};

/// The options of this module.
pub const POLICING_OPTIONS: &[&str] =
    &["ingress_policing_rate", "ingress_policing_burst", "ingress_policing_kpkts_rate", "ingress_policing_kpkts_burst"];

/// Default burst when none is given, as OVS documents for `ingress_policing_burst`.
const DEFAULT_BURST_KB: u64 = 8000;
const DEFAULT_BURST_KPKTS: u64 = 16;
const ETHERNET_HEADER_BYTES: u32 = 14;

/// A port's ingress policing, in OVS's units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicingSpec {
    /// Byte rate, kbit/s (0: none).
    pub rate_kbps: u64,
    /// Byte burst, kbit.
    pub burst_kb: u64,
    /// Packet rate, kpackets/s (0: none).
    pub rate_kpps: u64,
    /// Packet burst, kpackets.
    pub burst_kpkts: u64,
}

/// A policing figure, 0 (off) when not given; at most 2^40 of its unit.
fn number(options: &BTreeMap<String, String>, key: &str) -> Result<u64, crate::error::ConfigError> {
    Ok(crate::ranges::number_in(options, key, 0..=1u64 << 40)?.unwrap_or(0))
}

impl PolicingSpec {
    /// The port's policing, `None` when it has none.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Option<PolicingSpec>, crate::error::ConfigError> {
        let s = PolicingSpec {
            rate_kbps: number(options, "ingress_policing_rate")?,
            burst_kb: number(options, "ingress_policing_burst")?,
            rate_kpps: number(options, "ingress_policing_kpkts_rate")?,
            burst_kpkts: number(options, "ingress_policing_kpkts_burst")?,
        };
        Ok((s.rate_kbps > 0 || s.rate_kpps > 0).then_some(s))
    }

    /// The meters, full at `now_ns`.
    pub fn policer(&self, now_ns: u64) -> Policer {
        let burst_kb = if self.burst_kb == 0 { DEFAULT_BURST_KB } else { self.burst_kb };
        let burst_kpkts = if self.burst_kpkts == 0 { DEFAULT_BURST_KPKTS } else { self.burst_kpkts };
        Policer {
            bytes: (self.rate_kbps > 0).then(|| {
                let params = SrtcmParams {
                    cir_bytes_per_sec: self.rate_kbps * 1000 / 8,
                    cbs_bytes: burst_kb * 1000 / 8,
                    ebs_bytes: 0,
                };
                Srtcm::new(params, now_ns)
            }),
            packets: (self.rate_kpps > 0)
                .then(|| PacketRateMeter::new(self.rate_kpps * 1000, burst_kpkts * 1000, now_ns)),
        }
    }
}

/// One port's meters (the PMD that polls the port owns it).
#[derive(Clone, Copy, Debug)]
pub struct Policer {
    bytes: Option<Srtcm>,
    packets: Option<PacketRateMeter>,
}

impl Policer {
    /// True when a frame of `frame_len` bytes may pass.
    #[inline]
    pub fn allow(&mut self, frame_len: u32, now_ns: u64) -> bool {
        if let Some(p) = self.packets.as_mut() {
            if !p.allow(now_ns) {
                return false;
            }
        }
        match self.bytes.as_mut() {
            Some(m) => {
                m.color(frame_len.saturating_sub(ETHERNET_HEADER_BYTES), now_ns) == slaswitch_qos::meter::Color::Green
            }
            None => true,
        }
    }
}
