//! C2TB, the CPU-cycle token bucket (seed 000, Sec. IV-A; seed 001 Sec. III-B).
//!
//! Tokens are CPU cycles. Each port's bucket fills at `C_alloc` cycles per second (strict mode), or
//! at `C_alloc + C_idle,i` where the idle part of the cores' capacity is handed out by weight
//! (MIN-MAX mode, Fig. 7). A bucket may go negative: the PMD runs a whole batch when the bucket is
//! positive and subtracts the cycles the batch really took afterwards (Sec. IV-A-2), because how
//! much a batch will cost is not known before it runs.
//!
//! Tokens that overflow a full bucket are redistributed by weight to the MIN-MAX ports
//! (Algorithm 1). Two refill modes give the same long-run shares (tested in `tests/c2tb_hbs.rs`):
//! * [`RefillMode::Periodic`]: Algorithm 1 over every port once per interval (the paper's manager
//!   thread, woken every 50 us). O(ports) per interval.
//! * [`RefillMode::Lazy`]: a port is refilled from the TSC delta when it is considered, so no
//!   manager thread is needed and a decision costs O(1). Overflow is redistributed through a
//!   running "cycles per unit of weight" accumulator: each MIN-MAX port collects
//!   `weight * (accumulator - what it had seen)` at its next refill, which is Algorithm 1's
//!   weight-proportional split without visiting every port.
//!
//! Reading taken of Algorithm 1 (the extracted text is ambiguous): line 6-7 read literally
//! (`unused = sum * w_i; sum -= unused`) would give later VMs a share of a shrinking pool, which is
//! not weight-proportional and contradicts the prose ("each VM will get some overflowed CPU cycles
//! based on its weight"). We split the pool collected in the previous update by weight ratio.
//! Only MIN-MAX ports receive redistributed cycles; a strict port is held to `C_alloc`, but its own
//! overflow does feed the pool (idle cycles are idle whoever owned them).
//!
//! Second reading: Algorithm 1 redistributes every overflow, but the prose motivates it with VMs
//! that are "sleeping and no traffic is generated". A port can also overflow while backlogged,
//! when its batches are cheap and round-robin polling reaches it too rarely; giving those cycles
//! away hands them to the ports that crowd it out. Measured with the Fig. 7 allocations, all four
//! ports busy and batch costs 6.4k/9k/3k/12k cycles: the 0.4 G port got 0.22 G, i.e. plain round
//! robin. So only the overflow of a port whose last poll found less than a full batch (it has no
//! backlog) is redistributed; a backlogged port's overflow is dropped, which keeps the others at
//! their maximum and lets the PMD come back to it sooner.

use super::PortIndex;

/// How a port's CPU share is limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleLimit {
    /// No C2TB: the port is always eligible (the plain OVS behaviour).
    Unlimited,
    /// Exactly `cycles_per_sec` of tokens per second, nothing more (C2TB strict).
    Strict {
        /// The allocation, cycles per second.
        cycles_per_sec: u64,
    },
    /// At least `cycles_per_sec`, plus a weight-proportional part of the idle capacity and of
    /// other ports' overflow (C2TB MIN-MAX, Fig. 7 and Algorithm 1).
    MinMax {
        /// The guaranteed allocation, cycles per second.
        cycles_per_sec: u64,
        /// The port's share of idle cycles and overflow, relative to the other MIN-MAX ports.
        weight: u32,
    },
}

impl CycleLimit {
    /// The cycles per second allocated (0 for an unlimited port).
    pub fn alloc_cycles_per_sec(&self) -> u64 {
        match *self {
            CycleLimit::Unlimited => 0,
            CycleLimit::Strict { cycles_per_sec } | CycleLimit::MinMax { cycles_per_sec, .. } => cycles_per_sec,
        }
    }
    /// MIN-MAX weight, 0 for strict and unlimited ports.
    fn minmax_weight(&self) -> u32 {
        match *self {
            CycleLimit::MinMax { weight, .. } => weight,
            _ => 0,
        }
    }
}

/// When buckets are refilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefillMode {
    /// Refill a port from the TSC delta when it is considered (no manager thread).
    Lazy,
    /// Run Algorithm 1 over all ports every `interval_tsc` cycles.
    Periodic {
        /// TSC cycles between two runs.
        interval_tsc: u64,
    },
}

/// Settings shared by all buckets of one PMD.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct C2tbConfig {
    /// TSC frequency: converts `cycles_per_sec` into tokens per TSC tick.
    pub tsc_hz: u64,
    /// Cycles per second the ports of this PMD share (one core: its TSC rate).
    pub capacity_cycles_per_sec: u64,
    /// Largest number of tokens a bucket holds (Algorithm 1's `bucket_depth`).
    pub bucket_depth_cycles: u64,
    /// When buckets are refilled.
    pub refill: RefillMode,
}

impl C2tbConfig {
    /// The bucket depth a switch runs with unless told otherwise, in microseconds of the core.
    pub const DEFAULT_BUCKET_DEPTH_US: u64 = 100;
    /// The depths a switch may be given (`slaswitchd --c2tb-bucket-us`), in microseconds.
    pub const BUCKET_DEPTH_US: std::ops::RangeInclusive<u64> = 1..=1_000_000;

    /// `depth_us` if it is in [`Self::BUCKET_DEPTH_US`], else the error every caller names
    /// it with (the daemon's option, a scenario's key).
    pub fn check_bucket_depth_us(depth_us: u64) -> Result<u64, crate::QosError> {
        let (lo, hi) = Self::BUCKET_DEPTH_US.into_inner();
        if Self::BUCKET_DEPTH_US.contains(&depth_us) {
            Ok(depth_us)
        } else {
            Err(crate::QosError::setting(depth_us.to_string(), format!("from {lo} to {hi} microseconds")))
        }
    }

    /// One core at `tsc_hz`, a bucket depth of [`Self::DEFAULT_BUCKET_DEPTH_US`], lazy refill.
    pub fn one_core(tsc_hz: u64) -> Self {
        Self::one_core_with_depth_us(tsc_hz, Self::DEFAULT_BUCKET_DEPTH_US)
    }

    /// One core at `tsc_hz`, buckets holding `depth_us` microseconds of it, lazy refill.
    pub fn one_core_with_depth_us(tsc_hz: u64, depth_us: u64) -> Self {
        C2tbConfig {
            tsc_hz,
            capacity_cycles_per_sec: tsc_hz,
            bucket_depth_cycles: Self::depth_cycles(tsc_hz, depth_us),
            refill: RefillMode::Lazy,
        }
    }

    /// `depth_us` microseconds of a core at `tsc_hz`, in cycles.
    pub fn depth_cycles(tsc_hz: u64, depth_us: u64) -> u64 {
        tsc_hz.saturating_mul(depth_us) / 1_000_000
    }
}

/// A port's own bucket depth is kept in units of this many cycles (up to about 100 ms of a
/// 2.6 GHz core).
pub const DEPTH_UNIT_CYCLES: u64 = 1 << DEPTH_UNIT_BITS;
const DEPTH_UNIT_BITS: u32 = 12;

/// Tokens are kept in units of 2^-16 cycle: the fraction a refill earns is kept, not truncated
/// (a port refilled 100,000 times a second would lose up to 0.1% of a small allocation to
/// truncation), and a charge is one shift and one subtraction.
const TOKEN_FRACTION_BITS: u32 = 16;
/// Rates are tokens per TSC tick with 32 fraction bits below the token's own 16.
const RATE_FRACTION_BITS: u32 = 32;
/// Largest token count a bucket holds, in whole cycles: keeps every product below within
/// 128 bits and every balance within `i64` (2^46 cycles is hours of a core).
const MAX_CYCLES: i64 = 1 << 46;

/// A bucket's depth in tokens: its own `units`, or `pool_depth` when it has none (0).
#[inline]
fn depth_tokens(units: u16, pool_depth: i64) -> i64 {
    if units == 0 {
        pool_depth
    } else {
        i64::from(units) << (DEPTH_UNIT_BITS + TOKEN_FRACTION_BITS)
    }
}

#[inline]
fn to_tokens(cycles: u64) -> i64 {
    (cycles.min(MAX_CYCLES as u64) as i64) << TOKEN_FRACTION_BITS
}

#[inline]
fn to_cycles(tokens: i64) -> f64 {
    tokens as f64 / f64::from(1u32 << TOKEN_FRACTION_BITS)
}

/// Tokens as whole cycles in 32 bits, saturated.
fn to_whole_cycles(tokens: i64) -> i32 {
    (tokens >> TOKEN_FRACTION_BITS).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// Tokens per tick, with `RATE_FRACTION_BITS` fraction bits, earned by one cycle per second on a
/// TSC of `tsc_hz`.
fn per_cycle_per_sec(tsc_hz: u64) -> u64 {
    ((1u128 << (TOKEN_FRACTION_BITS + RATE_FRACTION_BITS)) / u128::from(tsc_hz.max(1))) as u64
}

/// `ticks * rate >> RATE_FRACTION_BITS`, in tokens, saturated to [`MAX_CYCLES`].
#[inline]
fn earned_tokens(ticks: u64, tokens_per_tick: u64) -> i64 {
    let tokens = (u128::from(ticks) * u128::from(tokens_per_tick)) >> RATE_FRACTION_BITS;
    tokens.min((MAX_CYCLES as u128) << TOKEN_FRACTION_BITS) as i64
}

/// One port's bucket. Its owner decides where it lives: [`CycleBuckets`] keeps them in a vector,
/// the HBS scheduler in each port's own record, so that a decision touches one place per port
/// (in the data plane every batch evicts the scheduler from the core's caches, and
/// each separate array cost a miss). An `Unlimited` bucket is no bucket: never charged, always
/// eligible.
///
/// Fixed point, not floating point: refilling, charging and working out a wait are one long
/// dependency chain on every decision, and integer adds, shifts and one 64x64-bit multiply
/// are several times shorter than the float conversions, multiplies and compares they
/// replace (the overhead budget; `perf annotate` of the decision bench put half of
/// `requeue`'s samples on that chain).
#[derive(Clone, Debug)]
pub struct Bucket {
    limit: CycleLimit,
    /// The port's last poll filled a whole batch: its overflow is not idle capacity.
    backlogged: bool,
    /// Its own depth in units of [`DEPTH_UNIT_CYCLES`], 0 for the pool's
    /// ([`CyclePool::set_depth`]). 16 bits keep the port's record within two cache lines.
    own_depth_units: u16,
    /// Balance in 2^-16 cycles; may be negative (Sec. IV-A-2).
    tokens: i64,
    /// `C_alloc + C_idle,i` in tokens per TSC tick (`RATE_FRACTION_BITS` fraction bits), and
    /// the inverse in ticks per token, so a wait is a multiply, not a division.
    tokens_per_tick: u64,
    ticks_per_token: u64,
    last_refill_tsc: u64,
    /// Value of the overflow accumulator at this port's last refill (lazy mode).
    overflow_seen_per_weight: u64,
    /// Tokens the bucket may hold above its depth: what it earned while the host stalled the
    /// PMD ([`CyclePool::credit_stall`]), shrinking as the port spends it.
    stall_credit: i64,
    /// MIN-MAX: the balance the bucket would have filling at `C_alloc` alone, charged the same
    /// batches. Not positive: the port has spent its allocation and runs on idle cycles
    /// ([`Bucket::beyond_allocation`]). Whole cycles in 32 bits, saturating: it only needs
    /// its sign and the record has room for no more.
    committed: i32,
}

impl Bucket {
    /// The bucket of a port without a limit.
    pub const UNLIMITED: Bucket = Bucket {
        limit: CycleLimit::Unlimited,
        backlogged: false,
        own_depth_units: 0,
        tokens: 0,
        tokens_per_tick: 0,
        ticks_per_token: 0,
        last_refill_tsc: 0,
        overflow_seen_per_weight: 0,
        stall_credit: 0,
        committed: 0,
    };

    /// The port's limit.
    pub fn limit(&self) -> CycleLimit {
        self.limit
    }

    /// True for a strict or MIN-MAX port.
    pub fn is_limited(&self) -> bool {
        self.limit != CycleLimit::Unlimited
    }

    /// MIN-MAX weight, 0 for strict ports (they receive no redistributed cycles). Derived, not
    /// stored: it keeps the HBS port record within two cache lines.
    #[inline]
    fn weight(&self) -> u32 {
        self.limit.minmax_weight()
    }

    /// Current tokens (cycles); `None` for an unlimited port.
    pub fn tokens(&self) -> Option<f64> {
        self.is_limited().then(|| to_cycles(self.tokens))
    }

    /// Ticks until the bucket is positive again, counting only its own generation rate
    /// (redistributed overflow can only make it sooner): 0 if it may run now, `u64::MAX / 2`
    /// if never.
    #[inline]
    pub fn wait_ticks(&self) -> u64 {
        if self.tokens > 0 || !self.is_limited() {
            0
        } else if self.tokens_per_tick == 0 {
            u64::MAX / 2
        } else {
            let debt = u128::from(self.tokens.unsigned_abs());
            let ticks = (debt * u128::from(self.ticks_per_token)) >> RATE_FRACTION_BITS;
            (ticks.min(u128::from(u64::MAX / 4)) as u64) + 1
        }
    }

    /// The cycles the bucket covers (as of its last refill): it holds more than any `c` below
    /// this (`u64::MAX` for an unlimited bucket, 0 for one that holds nothing).
    #[inline]
    pub fn covered_cycles(&self) -> u64 {
        if !self.is_limited() {
            return u64::MAX;
        }
        let whole = (1i64 << TOKEN_FRACTION_BITS) - 1;
        (self.tokens.max(0).saturating_add(whole) >> TOKEN_FRACTION_BITS) as u64
    }

    /// The cycles the bucket owes (0 when it holds tokens, or is unlimited), plus the one
    /// [`Bucket::forgive_debt`] leaves it with.
    pub fn debt_cycles(&self) -> u64 {
        if !self.is_limited() || self.tokens > 0 {
            return 0;
        }
        // Whole cycles, rounded up, in integers: a float ceil is a libm call on baseline x86-64.
        let whole = (1u64 << TOKEN_FRACTION_BITS) - 1;
        ((self.tokens.unsigned_abs() + whole) >> TOKEN_FRACTION_BITS) + 1
    }

    /// Clears a debt: the bucket holds one cycle, so the port may run. Returns the cycles
    /// forgiven (`crate::cpu::latency_class`).
    pub fn forgive_debt(&mut self) -> u64 {
        let forgiven = self.debt_cycles();
        if forgiven > 0 {
            self.tokens = to_tokens(1);
        }
        forgiven
    }

    /// A MIN-MAX port that has spent its allocation (`C_alloc`) and now runs on its share of
    /// idle cycles and overflow. HBS serves such a port after every port still within its
    /// allocation (`docs/deviations.md`, C2TB's tiers).
    #[inline]
    pub fn beyond_allocation(&self) -> bool {
        matches!(self.limit, CycleLimit::MinMax { .. }) && self.committed <= 0
    }

    /// Subtracts the cycles a batch really used (Sec. IV-A-2: tokens may go negative), and
    /// records whether the batch was full (the port is backlogged).
    #[inline]
    pub fn charge(&mut self, cycles: u64, backlogged: bool, depth_tokens: i64) {
        if !self.is_limited() {
            return;
        }
        self.tokens = self.tokens.saturating_sub(to_tokens(cycles)).max(-(MAX_CYCLES << TOKEN_FRACTION_BITS));
        self.committed = self.committed.saturating_sub(cycles.min(i32::MAX as u64) as i32);
        self.backlogged = backlogged;
        if self.stall_credit > 0 {
            // Only what is still above the depth remains credit.
            self.stall_credit = self.stall_credit.min((self.tokens - depth_tokens).max(0));
        }
    }
}

/// Wherever a PMD's buckets live: lets [`CyclePool`] visit all of them (rate changes, stalls,
/// Algorithm 1) without knowing the owner's layout.
pub trait BucketSet {
    /// The port's bucket, created unlimited if the port has none yet.
    fn bucket_mut(&mut self, port: PortIndex) -> &mut Bucket;
    /// Calls `visit` on every limited bucket.
    fn each_bucket(&mut self, visit: impl FnMut(&mut Bucket));
}

impl BucketSet for Vec<Bucket> {
    fn bucket_mut(&mut self, port: PortIndex) -> &mut Bucket {
        if port >= self.len() {
            self.resize(port + 1, Bucket::UNLIMITED);
        }
        &mut self[port]
    }
    fn each_bucket(&mut self, visit: impl FnMut(&mut Bucket)) {
        self.iter_mut().filter(|b| b.is_limited()).for_each(visit);
    }
}

/// What the buckets of one PMD share: its cycles (capacity, the idle part `C_idle`) and the
/// overflow being redistributed (Algorithm 1).
#[derive(Clone, Debug)]
pub struct CyclePool {
    /// Refill is lazy (copied from `config` so the hot path tests a flag, not an enum).
    lazy: bool,
    /// `config.bucket_depth_cycles` in tokens.
    depth_tokens: i64,
    /// Sum of the MIN-MAX weights.
    total_weight: u64,
    /// Lazy mode: overflowed tokens handed out so far, per unit of MIN-MAX weight (wrapping:
    /// only differences are used).
    overflow_per_weight: u64,
    config: C2tbConfig,
    allocated_cycles_per_sec: u64,
    idle_cycles_per_sec: f64,
    /// Periodic mode: tokens that overflowed in the last update (Algorithm 1 `sum_unused_cc`).
    pending_overflow: i64,
    last_update_tsc: u64,
    /// Tokens per tick (`RATE_FRACTION_BITS` fraction bits) that one cycle per second earns: a
    /// bucket's committed balance fills at `C_alloc` times this.
    tokens_per_tick_per_cycle_per_sec: u64,
}

impl CyclePool {
    /// A pool with no buckets, its clock started at `now_tsc`.
    pub fn new(config: C2tbConfig, now_tsc: u64) -> Self {
        assert!(config.tsc_hz > 0, "tsc_hz must be positive");
        CyclePool {
            lazy: config.refill == RefillMode::Lazy,
            depth_tokens: to_tokens(config.bucket_depth_cycles),
            total_weight: 0,
            overflow_per_weight: 0,
            config,
            allocated_cycles_per_sec: 0,
            idle_cycles_per_sec: config.capacity_cycles_per_sec as f64,
            pending_overflow: 0,
            last_update_tsc: now_tsc,
            tokens_per_tick_per_cycle_per_sec: per_cycle_per_sec(config.tsc_hz),
        }
    }

    /// The pool's settings.
    pub fn config(&self) -> &C2tbConfig {
        &self.config
    }

    /// Refill is lazy (no manager thread).
    #[inline]
    pub fn is_lazy(&self) -> bool {
        self.lazy
    }

    /// Sum of `C_alloc` over all ports: what admission control compares with the capacity.
    pub fn allocated_cycles_per_sec(&self) -> u64 {
        self.allocated_cycles_per_sec
    }

    /// Capacity not promised to any port (`C_idle` of Fig. 7), shared by MIN-MAX weight.
    pub fn idle_cycles_per_sec(&self) -> f64 {
        self.idle_cycles_per_sec
    }

    /// The bucket's guaranteed and maximum generation rates in cycles per second:
    /// (`C_alloc`, `C_alloc + C_idle,i`). Redistributed overflow comes on top of the second.
    pub fn rates_cycles_per_sec(&self, b: &Bucket) -> Option<(u64, f64)> {
        let scale = f64::from(1u32 << TOKEN_FRACTION_BITS) * (1u64 << RATE_FRACTION_BITS) as f64;
        b.is_limited()
            .then(|| (b.limit.alloc_cycles_per_sec(), b.tokens_per_tick as f64 / scale * self.config.tsc_hz as f64))
    }

    /// Sets (or adds) a port's limit. Every bucket is first brought up to `now_tsc` so the
    /// change does not rewrite history. `Unlimited` removes the bucket.
    pub fn set_limit(&mut self, set: &mut impl BucketSet, port: PortIndex, limit: CycleLimit, now_tsc: u64) {
        self.settle_all(set, now_tsc);
        self.replace_limit(set, port, limit, now_tsc);
        self.recompute_rates(set);
    }

    /// Sets several ports' limits and depths at once (see [`CyclePool::set_limit`] and
    /// [`CyclePool::set_depth`]): the buckets are settled and the rates worked out once, not
    /// once per port. Drift compensation moves every port's allocation in one window on the
    /// PMD thread, and whatever that costs, a latency-class port's frames wait out (seed 000
    /// Sec. IV-B: a class-1 wait is bounded by what runs before it).
    pub fn set_limits(
        &mut self,
        set: &mut impl BucketSet,
        changes: &[(PortIndex, CycleLimit, Option<u64>)],
        now_tsc: u64,
    ) {
        self.settle_all(set, now_tsc);
        for &(port, limit, depth_cycles) in changes {
            self.replace_limit(set, port, limit, now_tsc);
            self.replace_depth(set, port, depth_cycles);
        }
        self.recompute_rates(set);
    }

    /// [`CyclePool::set_limit`] on settled buckets, rates left to the caller.
    fn replace_limit(&mut self, set: &mut impl BucketSet, port: PortIndex, limit: CycleLimit, now_tsc: u64) {
        let bucket = set.bucket_mut(port);
        let previous_tokens = bucket.is_limited().then_some(bucket.tokens);
        let previous_committed = bucket.is_limited().then_some(bucket.committed);
        let own_depth_units = bucket.own_depth_units;
        *bucket = match limit {
            CycleLimit::Unlimited => Bucket::UNLIMITED,
            _ => Bucket {
                limit,
                // A new port starts with one full bucket; a changed one keeps its balance.
                tokens: previous_tokens.unwrap_or(self.depth_of_units(own_depth_units)),
                committed: previous_committed.unwrap_or(to_whole_cycles(self.depth_of_units(own_depth_units))),
                last_refill_tsc: now_tsc,
                overflow_seen_per_weight: self.overflow_per_weight,
                own_depth_units,
                ..Bucket::UNLIMITED
            },
        };
    }

    /// Changes the settings; every bucket's rate and depth follow.
    pub fn set_config(&mut self, set: &mut impl BucketSet, config: C2tbConfig, now_tsc: u64) {
        self.settle_all(set, now_tsc);
        self.config = config;
        self.tokens_per_tick_per_cycle_per_sec = per_cycle_per_sec(config.tsc_hz);
        self.lazy = config.refill == RefillMode::Lazy;
        self.depth_tokens = to_tokens(config.bucket_depth_cycles);
        self.recompute_rates(set);
    }

    /// Gives a port a depth of its own, `depth_cycles` (rounded up to [`DEPTH_UNIT_CYCLES`],
    /// at most `u16::MAX` units), or the pool's again (`None`): what it may save up while it
    /// has nothing to send (`docs/deviations.md`, bucket depth). A lower depth takes the
    /// tokens above it away.
    pub fn set_depth(&mut self, set: &mut impl BucketSet, port: PortIndex, depth_cycles: Option<u64>, now_tsc: u64) {
        self.settle_all(set, now_tsc);
        self.replace_depth(set, port, depth_cycles);
        self.recompute_rates(set);
    }

    /// [`CyclePool::set_depth`] on settled buckets, rates left to the caller.
    fn replace_depth(&self, set: &mut impl BucketSet, port: PortIndex, depth_cycles: Option<u64>) {
        let units = depth_cycles.map_or(0, |d| d.div_ceil(DEPTH_UNIT_CYCLES).clamp(1, u64::from(u16::MAX)) as u16);
        let b = set.bucket_mut(port);
        b.own_depth_units = units;
        let depth = self.depth_of_units(units);
        b.tokens = b.tokens.min(depth + b.stall_credit);
    }

    /// The depth of a bucket whose own depth is `units` (0: the pool's), in tokens.
    #[inline]
    fn depth_of_units(&self, units: u16) -> i64 {
        depth_tokens(units, self.depth_tokens)
    }

    /// Lazy mode: brings one bucket up to `now_tsc`. A no-op in periodic mode, where only
    /// [`CyclePool::update`] adds tokens.
    #[inline]
    pub fn refill(&mut self, b: &mut Bucket, now_tsc: u64) {
        if !self.lazy || !b.is_limited() {
            return;
        }
        let elapsed = now_tsc.saturating_sub(b.last_refill_tsc);
        b.last_refill_tsc = b.last_refill_tsc.max(now_tsc);
        self.refill_committed(b, elapsed);
        let mut tokens = b.tokens.saturating_add(earned_tokens(elapsed, b.tokens_per_tick));
        let weight = b.weight();
        if weight != 0 {
            let per_weight = self.overflow_per_weight.wrapping_sub(b.overflow_seen_per_weight);
            b.overflow_seen_per_weight = self.overflow_per_weight;
            let redistributed =
                (u128::from(per_weight) * u128::from(weight)).min((MAX_CYCLES as u128) << TOKEN_FRACTION_BITS);
            tokens = tokens.saturating_add(redistributed as i64);
        }
        let depth = self.depth_of_units(b.own_depth_units);
        let cap = depth + b.stall_credit;
        if tokens > cap {
            if self.total_weight > 0 && !b.backlogged {
                let overflow = (tokens - cap).min(MAX_CYCLES << TOKEN_FRACTION_BITS) as u64;
                self.overflow_per_weight = self.overflow_per_weight.wrapping_add(overflow / self.total_weight);
            }
            tokens = cap;
        }
        b.tokens = tokens;
        b.stall_credit = (tokens - depth).max(0);
    }

    /// Adds what `C_alloc` earned in `elapsed_ticks` to the committed balance, capped at the
    /// bucket's depth (and stall credit), as the bucket itself is.
    #[inline]
    fn refill_committed(&self, b: &mut Bucket, elapsed_ticks: u64) {
        let CycleLimit::MinMax { cycles_per_sec, .. } = b.limit else { return };
        let per_tick = cycles_per_sec.saturating_mul(self.tokens_per_tick_per_cycle_per_sec);
        let cap = to_whole_cycles(self.depth_of_units(b.own_depth_units) + b.stall_credit);
        let earned = to_whole_cycles(earned_tokens(elapsed_ticks, per_tick));
        b.committed = b.committed.saturating_add(earned).min(cap);
    }

    /// Brings a bucket up to date after a batch (or an empty poll) was charged to it, as
    /// [`CyclePool::refill`], except right after a refill: within `refill_skip_ticks` (an
    /// eighth of the depth at the port's rate) of the last one, a bucket still positive
    /// changes nothing a decision looks at (the port may run), so the refill waits. The next
    /// refill credits the whole elapsed time and caps it at the depth once, where refilling
    /// every time would have capped it at every step: a port may so spend up to an eighth of
    /// its depth more in a burst, never more over time than its rate. Overflow reaches the
    /// MIN-MAX ports (Algorithm 1) up to that window later, in one piece; the paper's manager
    /// thread hands it out every 50 us. Most decisions of a busy PMD take this path.
    #[inline]
    pub fn refill_after_batch(&mut self, b: &mut Bucket, now_tsc: u64) {
        if b.tokens > 0 && now_tsc.wrapping_sub(b.last_refill_tsc) < self.refill_skip_ticks(b) {
            return;
        }
        self.refill(b, now_tsc);
    }

    /// TSC ticks in which the port earns an eighth of its bucket's depth (0 in periodic mode,
    /// where only the manager's updates add tokens). Worked out per batch, not stored: the
    /// port's record has no room left (`hbs.rs`, its layout test).
    #[inline]
    fn refill_skip_ticks(&self, b: &Bucket) -> u64 {
        if !self.lazy {
            return 0;
        }
        let depth_eighth = (self.depth_of_units(b.own_depth_units) / 8) as u64;
        ((u128::from(depth_eighth) * u128::from(b.ticks_per_token)) >> RATE_FRACTION_BITS).min(u128::from(u32::MAX))
            as u64
    }

    /// Charges a batch's cycles (see [`Bucket::charge`]).
    #[inline]
    pub fn charge(&self, b: &mut Bucket, cycles: u64, backlogged: bool) {
        b.charge(cycles, backlogged, self.depth_of_units(b.own_depth_units));
    }

    /// Charges cycles the port caused outside its own batches, as [`Self::charge`] does a
    /// batch's; whether it is backlogged stays what its last batch said.
    pub fn charge_outside_batch(&self, b: &mut Bucket, cycles: u64) {
        let backlogged = b.backlogged;
        self.charge(b, cycles, backlogged);
    }

    /// The host stalled the PMD for `stall_ticks` (its vCPU preempted mid-batch): no port
    /// could be served, yet the buckets kept filling. Each bucket may hold what it earned in
    /// that time above its depth, so a backlogged port catches up afterwards instead of
    /// losing the stall's share of its allocation (`docs/deviations.md`, host stalls). Lazy refill only; at most one second's worth.
    pub fn credit_stall(&self, set: &mut impl BucketSet, stall_ticks: u64) {
        let ticks = stall_ticks.min(self.config.tsc_hz);
        set.each_bucket(|b| b.stall_credit = b.stall_credit.saturating_add(earned_tokens(ticks, b.tokens_per_tick)));
    }

    /// Periodic mode: runs Algorithm 1 if an interval has passed since the last update, using the
    /// real elapsed time as `invl`. Returns true when it ran.
    pub fn update(&mut self, set: &mut impl BucketSet, now_tsc: u64) -> bool {
        let RefillMode::Periodic { interval_tsc } = self.config.refill else { return false };
        let elapsed = now_tsc.saturating_sub(self.last_update_tsc);
        if elapsed < interval_tsc {
            return false;
        }
        self.last_update_tsc = now_tsc;
        self.run_algorithm_1(set, elapsed);
        true
    }

    /// Algorithm 1 (C2TB_UPDATE_CALLBACK), with `invl` the ticks since the last update.
    fn run_algorithm_1(&mut self, set: &mut impl BucketSet, invl_ticks: u64) {
        let pool_depth = self.depth_tokens;
        let unused_pool = u128::from(self.pending_overflow.max(0) as u64);
        let total_weight = u128::from(self.total_weight);
        let mut loop_unused: i64 = 0;
        let pool = &*self;
        set.each_bucket(|b| {
            pool.refill_committed(b, invl_ticks);
            let generated = earned_tokens(invl_ticks, b.tokens_per_tick);
            let unused = (unused_pool * u128::from(b.weight())).checked_div(total_weight).unwrap_or(0) as i64;
            b.tokens = b.tokens.saturating_add(generated).saturating_add(unused);
            let depth = depth_tokens(b.own_depth_units, pool_depth);
            if b.tokens > depth {
                if !b.backlogged {
                    loop_unused = loop_unused.saturating_add(b.tokens - depth);
                }
                b.tokens = depth;
            }
        });
        // With no MIN-MAX port the pool has nowhere to go and is dropped, as a full bucket drops.
        self.pending_overflow = loop_unused;
    }

    fn settle_all(&mut self, set: &mut impl BucketSet, now_tsc: u64) {
        match self.config.refill {
            RefillMode::Lazy => set.each_bucket(|b| self.refill(b, now_tsc)),
            RefillMode::Periodic { .. } => {
                self.update(set, now_tsc);
            }
        }
    }

    /// `C_idle` = capacity minus every port's `C_alloc`, split over MIN-MAX ports by weight (Fig. 7).
    fn recompute_rates(&mut self, set: &mut impl BucketSet) {
        let (mut allocated, mut total_weight) = (0u64, 0u64);
        set.each_bucket(|b| {
            allocated = allocated.saturating_add(b.limit.alloc_cycles_per_sec());
            total_weight += u64::from(b.weight());
        });
        self.allocated_cycles_per_sec = allocated;
        self.total_weight = total_weight;
        let idle = self.config.capacity_cycles_per_sec.saturating_sub(allocated);
        self.idle_cycles_per_sec = idle as f64;
        let tsc_hz = u128::from(self.config.tsc_hz);
        set.each_bucket(|b| {
            // C_alloc + C_idle * w / W as one fraction, so the idle share is not truncated.
            let denominator = u128::from(total_weight.max(1));
            let numerator =
                u128::from(b.limit.alloc_cycles_per_sec()) * denominator + u128::from(idle) * u128::from(b.weight());
            let per_tick = (numerator << (TOKEN_FRACTION_BITS + RATE_FRACTION_BITS)) / (tsc_hz * denominator);
            b.tokens_per_tick = per_tick.min(u128::from(u64::MAX)) as u64;
            // Ticks per token, with the same fraction bits: 2^(2*RATE) / tokens_per_tick,
            // rounded up so a port is never due before its rate has paid its debt.
            b.ticks_per_token = if per_tick > 0 {
                (1u128 << (2 * RATE_FRACTION_BITS)).div_ceil(per_tick).min(u128::from(u64::MAX)) as u64
            } else {
                0
            };
        });
    }
}

/// The cycle buckets of one PMD thread's ports, standing alone (the HBS scheduler keeps its
/// buckets in its own per-port records and uses [`CyclePool`] directly).
#[derive(Clone, Debug)]
pub struct CycleBuckets {
    pool: CyclePool,
    buckets: Vec<Bucket>,
}

impl CycleBuckets {
    /// Buckets with no port yet.
    pub fn new(config: C2tbConfig, now_tsc: u64) -> Self {
        CycleBuckets { pool: CyclePool::new(config, now_tsc), buckets: Vec::new() }
    }

    /// The cycles the buckets share.
    pub fn pool(&self) -> &CyclePool {
        &self.pool
    }

    /// Gives `port` a limit (a new port starts with a full bucket).
    pub fn set_limit(&mut self, port: PortIndex, limit: CycleLimit, now_tsc: u64) {
        self.pool.set_limit(&mut self.buckets, port, limit, now_tsc);
    }

    /// The port's limit (unlimited for an unknown port).
    pub fn limit(&self, port: PortIndex) -> CycleLimit {
        self.buckets.get(port).map_or(CycleLimit::Unlimited, |b| b.limit)
    }

    /// Current tokens (cycles); `None` for an unlimited port.
    pub fn tokens(&self, port: PortIndex) -> Option<f64> {
        self.buckets.get(port).and_then(Bucket::tokens)
    }

    /// Ticks until the port may run (0: now); see [`Bucket::wait_ticks`].
    pub fn wait_ticks(&self, port: PortIndex) -> u64 {
        self.buckets.get(port).map_or(0, Bucket::wait_ticks)
    }

    /// Charges `port` the cycles its batch took; `backlogged`: the batch was full.
    pub fn charge(&mut self, port: PortIndex, cycles: u64, backlogged: bool) {
        if let Some(b) = self.buckets.get_mut(port) {
            self.pool.charge(b, cycles, backlogged);
        }
    }

    /// Brings `port`'s bucket up to `now_tsc` (lazy refill).
    pub fn refill(&mut self, port: PortIndex, now_tsc: u64) {
        if let Some(b) = self.buckets.get_mut(port) {
            self.pool.refill(b, now_tsc);
        }
    }

    /// Credits every bucket with a stall's worth of tokens ([`CyclePool::credit_stall`]).
    pub fn credit_stall(&mut self, stall_ticks: u64) {
        self.pool.credit_stall(&mut self.buckets, stall_ticks);
    }

    /// Runs Algorithm 1 if a periodic update is due; true when it ran.
    pub fn update(&mut self, now_tsc: u64) -> bool {
        self.pool.update(&mut self.buckets, now_tsc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debt_counts_whole_cycles_rounded_up_plus_the_one_forgiveness_leaves() {
        let owing =
            |tokens: i64| Bucket { limit: CycleLimit::Strict { cycles_per_sec: 1 }, tokens, ..Bucket::UNLIMITED };
        assert_eq!(owing(0).debt_cycles(), 1);
        assert_eq!(owing(-to_tokens(5)).debt_cycles(), 6);
        assert_eq!(owing(-to_tokens(5) - 1).debt_cycles(), 7);
        assert_eq!(owing(-(MAX_CYCLES << TOKEN_FRACTION_BITS)).debt_cycles(), MAX_CYCLES as u64 + 1);
        assert_eq!(owing(1).debt_cycles(), 0);
        let mut b = owing(-to_tokens(5) - 1);
        assert_eq!(b.forgive_debt(), 7);
        assert_eq!(b.debt_cycles(), 0);
    }
}
