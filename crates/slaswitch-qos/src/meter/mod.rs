//! Baseline meters, applied per packet after rx the way OVS ingress policing is (seed 000 Sec. II,
//! Fig. 1): byte meters srTCM (RFC 2697) and trTCM (RFC 2698), and a packets-per-second bucket.
//! These are what C2QoS is compared with, and what its NIC-bottleneck fallback engages (Sec. VII).

pub mod srtcm;
pub mod token_bucket;
pub mod trtcm;

pub use srtcm::{Srtcm, SrtcmParams};
pub use token_bucket::TokenBucket;
pub use trtcm::{Trtcm, TrtcmParams};

/// A meter's verdict on a packet (RFC 2697/2698).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Within the committed rate.
    Green,
    /// Beyond the committed rate, within the excess or peak.
    Yellow,
    /// Beyond both.
    Red,
}

/// A packets-per-second limit: one token per packet.
#[derive(Clone, Copy, Debug)]
pub struct PacketRateMeter {
    bucket: TokenBucket,
}

impl PacketRateMeter {
    /// A meter of `rate_pps` with a burst of `burst_packets`, full at `now_ns`.
    pub fn new(rate_pps: u64, burst_packets: u64, now_ns: u64) -> Self {
        PacketRateMeter { bucket: TokenBucket::new(rate_pps, burst_packets, now_ns) }
    }

    /// True when a packet may pass at `now_ns` (and takes its token).
    #[inline]
    pub fn allow(&mut self, now_ns: u64) -> bool {
        self.bucket.refill(now_ns);
        self.bucket.try_take(1)
    }
}

/// The policer a port applies after rx. OVS ingress policing passes only green (it configures
/// srTCM with EBS 0); a trTCM policer passes green and yellow and drops red.
#[derive(Clone, Copy, Debug)]
pub enum IngressPolicer {
    /// Byte rate, single rate three colour (RFC 2697).
    Srtcm(Srtcm),
    /// Byte rate, two rate three colour (RFC 2698).
    Trtcm(Trtcm),
    /// Packet rate.
    PacketRate(PacketRateMeter),
}

impl IngressPolicer {
    /// True when the packet may pass.
    #[inline]
    pub fn allow(&mut self, len_bytes: u32, now_ns: u64) -> bool {
        match self {
            IngressPolicer::Srtcm(m) => m.color(len_bytes, now_ns) == Color::Green,
            IngressPolicer::Trtcm(m) => m.color(len_bytes, now_ns) != Color::Red,
            IngressPolicer::PacketRate(m) => m.allow(now_ns),
        }
    }
}
