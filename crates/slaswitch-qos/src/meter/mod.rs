//! Baseline meters, applied per packet after rx the way OVS ingress policing is (seed 000 Sec. II,
//! Fig. 1): byte meters srTCM (RFC 2697) and trTCM (RFC 2698), and a packets-per-second bucket.
//! These are what C2QoS is compared with, and what its NIC-bottleneck fallback engages (Sec. VII).

pub mod srtcm;
pub mod token_bucket;
pub mod trtcm;

pub use srtcm::{Srtcm, SrtcmParams};
pub use token_bucket::TokenBucket;
pub use trtcm::{Trtcm, TrtcmParams};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    Green,
    Yellow,
    Red,
}

/// A packets-per-second limit: one token per packet.
#[derive(Clone, Copy, Debug)]
pub struct PacketRateMeter {
    bucket: TokenBucket,
}

impl PacketRateMeter {
    pub fn new(rate_pps: u64, burst_packets: u64, now_ns: u64) -> Self {
        PacketRateMeter { bucket: TokenBucket::new(rate_pps, burst_packets, now_ns) }
    }

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
    Srtcm(Srtcm),
    Trtcm(Trtcm),
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
