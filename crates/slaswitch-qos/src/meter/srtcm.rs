//! Single-rate three-color marker, RFC 2697, colour-blind mode: the meter behind OVS-DPDK's
//! `ingress_policing_rate` (seed 000 Sec. V: "the original port ingress policy, implemented by
//! srTCM"). Committed bucket C (CIR, CBS), excess bucket E (EBS) fed by C's overflow.

use super::token_bucket::TokenBucket;
use super::Color;

/// srTCM's parameters (RFC 2697).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrtcmParams {
    /// Committed information rate, bytes per second.
    pub cir_bytes_per_sec: u64,
    /// Committed burst size, bytes.
    pub cbs_bytes: u64,
    /// Excess burst size, bytes.
    pub ebs_bytes: u64,
}

/// A single rate three colour marker (RFC 2697), colour-blind.
#[derive(Clone, Copy, Debug)]
pub struct Srtcm {
    committed: TokenBucket,
    excess: TokenBucket,
}

impl Srtcm {
    /// A meter whose buckets start full at `now_ns`.
    pub fn new(params: SrtcmParams, now_ns: u64) -> Self {
        Srtcm {
            committed: TokenBucket::new(params.cir_bytes_per_sec, params.cbs_bytes, now_ns),
            // E fills only with what overflows C, so it has no rate of its own.
            excess: TokenBucket::new(0, params.ebs_bytes, now_ns),
        }
    }

    /// The colour of a packet of `len_bytes` at `now_ns`.
    #[inline]
    pub fn color(&mut self, len_bytes: u32, now_ns: u64) -> Color {
        let overflow = self.committed.refill(now_ns);
        self.excess.add_scaled(overflow);
        let len = u64::from(len_bytes);
        if self.committed.try_take(len) {
            Color::Green
        } else if self.excess.try_take(len) {
            Color::Yellow
        } else {
            Color::Red
        }
    }
}
