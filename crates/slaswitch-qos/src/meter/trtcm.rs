//! Two-rate three-color marker, RFC 2698, colour-blind mode (OVS's `trtcm-policer`):
//! peak bucket P (PIR, PBS) and committed bucket C (CIR, CBS), each with its own rate.

use super::token_bucket::TokenBucket;
use super::Color;

/// trTCM's parameters (RFC 2698).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrtcmParams {
    /// Committed information rate, bytes per second.
    pub cir_bytes_per_sec: u64,
    /// Committed burst size, bytes.
    pub cbs_bytes: u64,
    /// Peak information rate, bytes per second.
    pub pir_bytes_per_sec: u64,
    /// Peak burst size, bytes.
    pub pbs_bytes: u64,
}

/// A two rate three colour marker (RFC 2698), colour-blind.
#[derive(Clone, Copy, Debug)]
pub struct Trtcm {
    committed: TokenBucket,
    peak: TokenBucket,
}

impl Trtcm {
    /// A meter whose buckets start full at `now_ns`; refuses a peak below the committed rate.
    pub fn new(params: TrtcmParams, now_ns: u64) -> Result<Self, crate::QosError> {
        if params.pir_bytes_per_sec < params.cir_bytes_per_sec {
            return Err(crate::QosError::PeakBelowCommitted {
                pir_bytes_per_sec: params.pir_bytes_per_sec,
                cir_bytes_per_sec: params.cir_bytes_per_sec,
            });
        }
        Ok(Trtcm {
            committed: TokenBucket::new(params.cir_bytes_per_sec, params.cbs_bytes, now_ns),
            peak: TokenBucket::new(params.pir_bytes_per_sec, params.pbs_bytes, now_ns),
        })
    }

    /// The colour of a packet of `len_bytes` at `now_ns`.
    #[inline]
    pub fn color(&mut self, len_bytes: u32, now_ns: u64) -> Color {
        self.committed.refill(now_ns);
        self.peak.refill(now_ns);
        let len = u64::from(len_bytes);
        if !self.peak.has(len) {
            Color::Red
        } else if !self.committed.has(len) {
            self.peak.take(len);
            Color::Yellow
        } else {
            self.peak.take(len);
            self.committed.take(len);
            Color::Green
        }
    }
}
