//! The one token bucket every meter here is built from: `rate_per_sec` units (bytes or
//! packets) per second, at most `burst` units. Tokens are kept in units x 1e9 so that refilling
//! from a nanosecond delta is one multiply with no rounding drift.

use crate::NS_PER_SEC;

/// A token bucket in integer arithmetic: rate per second, burst, clock passed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    rate_per_sec: u64,
    burst: u64,
    /// Tokens times `NS_PER_SEC`.
    tokens_scaled: u64,
    last_ns: u64,
    /// Longest refill delta that matters (a full bucket from empty); caps the multiply.
    fill_ns: u64,
}

impl TokenBucket {
    /// A bucket that starts full, as RFC 2697/2698 meters do.
    pub fn new(rate_per_sec: u64, burst: u64, now_ns: u64) -> Self {
        assert!(burst <= u64::MAX / NS_PER_SEC, "burst of {burst} units is too large to meter");
        let fill_ns = burst.saturating_mul(NS_PER_SEC).checked_div(rate_per_sec).map_or(u64::MAX, |t| t + 1);
        TokenBucket { rate_per_sec, burst, tokens_scaled: burst * NS_PER_SEC, last_ns: now_ns, fill_ns }
    }

    /// Changes the rate and the depth at `now_ns`, keeping the tokens earned so far (at most
    /// the new depth).
    pub fn set_rate(&mut self, rate_per_sec: u64, burst: u64, now_ns: u64) {
        self.refill(now_ns);
        let tokens_scaled = self.tokens_scaled.min(burst.saturating_mul(NS_PER_SEC));
        *self = TokenBucket { tokens_scaled, ..TokenBucket::new(rate_per_sec, burst, now_ns) };
    }

    /// Its rate, tokens per second.
    pub fn rate_per_sec(&self) -> u64 {
        self.rate_per_sec
    }

    /// Its depth, tokens.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Whole tokens available now (after a refill).
    pub fn tokens(&self) -> u64 {
        self.tokens_scaled / NS_PER_SEC
    }

    /// Adds the tokens earned since the last refill; returns what overflowed (scaled), which
    /// srTCM hands to its second bucket.
    #[inline]
    pub fn refill(&mut self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_sub(self.last_ns).min(self.fill_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.add_scaled(elapsed.saturating_mul(self.rate_per_sec))
    }

    /// Adds tokens (scaled) up to the burst; returns the overflow (scaled).
    #[inline]
    pub fn add_scaled(&mut self, scaled: u64) -> u64 {
        let cap = self.burst * NS_PER_SEC;
        let total = self.tokens_scaled.saturating_add(scaled);
        self.tokens_scaled = total.min(cap);
        total - self.tokens_scaled
    }

    /// True when it holds `units` tokens.
    #[inline]
    pub fn has(&self, units: u64) -> bool {
        self.tokens_scaled >= units.saturating_mul(NS_PER_SEC)
    }

    /// Takes `units` tokens.
    #[inline]
    pub fn take(&mut self, units: u64) {
        self.tokens_scaled -= units * NS_PER_SEC;
    }

    /// Takes `units` if there are enough; true when taken.
    #[inline]
    pub fn try_take(&mut self, units: u64) -> bool {
        let ok = self.has(units);
        if ok {
            self.take(units);
        }
        ok
    }
}
