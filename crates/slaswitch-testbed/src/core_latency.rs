//! How far apart the host placed two of this guest's cores: the round trip of a cache line
//! between two threads pinned to them, one writing a count and the other echoing it back.
//!
//! A guest's vCPUs are threads of the host, which may run them on cores that share a
//! last-level cache or on cores that do not (another CCX or socket), and move them between the
//! two while the guest runs. Every cost that crosses the two cores moves with the placement: a
//! VM's frames reach the PMD through cache lines the other core wrote (the vhost-user ring and
//! the frames' bytes), so a benchmark that compares switches must compare them at the same
//! placement. The round trip, measured while nothing else runs on the two cores, tells which.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Round trips timed together: one sample. Enough that reading the clock costs nothing beside
/// them, few enough that a sample the host interrupted is one of many.
const TRIPS_PER_SAMPLE: u32 = 256;

/// A round trip the echoing thread has not answered within this long means it is not running.
const ECHO_TIMEOUT: Duration = Duration::from_secs(2);

/// What a measurement found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoreLatency {
    /// The writing thread's core, then the echoing thread's.
    pub cores: [usize; 2],
    /// The samples' median round trip, in ns.
    pub round_trip_ns: f64,
    /// The fastest sample's round trip, in ns.
    pub min_round_trip_ns: f64,
    /// Samples of [`TRIPS_PER_SAMPLE`] round trips each.
    pub samples: usize,
}

/// Each counter on a cache line of its own (and the next line, which the core may fetch with
/// it), so the two threads share nothing else.
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

#[derive(Default)]
struct Shared {
    ping: Line,
    pong: Line,
    stop: AtomicBool,
}

/// Bounces a cache line between `cores[0]` and `cores[1]` for `length`; the round trips' median
/// and minimum.
pub fn measure(cores: [usize; 2], length: Duration) -> anyhow::Result<CoreLatency> {
    let shared = Arc::new(Shared::default());
    let echo = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || -> std::io::Result<()> {
            // Stopping tells the writing thread that no echo will come.
            let pinned = slaswitch_dpdk::pin_current_thread(cores[1]).inspect_err(|_| shared.stop.store(true, Relaxed));
            pinned?;
            echo(&shared);
            Ok(())
        })
    };
    let pinger = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
            let pinned = slaswitch_dpdk::pin_current_thread(cores[0]);
            let samples = pinned.map_err(anyhow::Error::from).and_then(|()| ping(&shared, length));
            shared.stop.store(true, Relaxed);
            samples
        })
    };
    let samples = pinger.join().map_err(|_| anyhow::anyhow!("the thread on core {} panicked", cores[0]))?;
    shared.stop.store(true, Relaxed);
    echo.join()
        .map_err(|_| anyhow::anyhow!("the thread on core {} panicked", cores[1]))?
        .map_err(|e| anyhow::anyhow!("pinning the echoing thread to core {}: {e}", cores[1]))?;
    let mut samples = samples.map_err(|e| anyhow::anyhow!("core {}: {e:#}", cores[0]))?;
    samples.sort_by(f64::total_cmp);
    Ok(CoreLatency {
        cores,
        round_trip_ns: samples[samples.len() / 2],
        min_round_trip_ns: samples[0],
        samples: samples.len(),
    })
}

/// Answers every new count on `ping` with the same count on `pong`, until `stop`.
fn echo(shared: &Shared) {
    let mut seen = 0;
    while !shared.stop.load(Relaxed) {
        let count = shared.ping.0.load(Relaxed);
        if count != seen {
            seen = count;
            shared.pong.0.store(count, Relaxed);
        }
    }
}

/// Writes counts and waits for each to come back, for `length` after one untimed trip (the
/// echoing thread may still be starting); each sample's ns per round trip.
fn ping(shared: &Shared, length: Duration) -> anyhow::Result<Vec<f64>> {
    let mut count = 0u64;
    let trip = |count: &mut u64| -> anyhow::Result<()> {
        *count += 1;
        shared.ping.0.store(*count, Relaxed);
        let mut spins = 0u32;
        let mut since: Option<Instant> = None;
        while shared.pong.0.load(Relaxed) != *count {
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(1 << 16) {
                continue;
            }
            if shared.stop.load(Relaxed) {
                anyhow::bail!("the echoing thread stopped");
            }
            if since.get_or_insert_with(Instant::now).elapsed() > ECHO_TIMEOUT {
                anyhow::bail!("the echoing thread did not answer within {ECHO_TIMEOUT:?}");
            }
        }
        Ok(())
    };
    trip(&mut count)?;
    let started = Instant::now();
    let mut samples = Vec::new();
    while samples.is_empty() || started.elapsed() < length {
        let t0 = Instant::now();
        for _ in 0..TRIPS_PER_SAMPLE {
            trip(&mut count)?;
        }
        samples.push(t0.elapsed().as_nanos() as f64 / f64::from(TRIPS_PER_SAMPLE));
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_between_two_cores_is_timed() {
        let online = slaswitch_datapath::pmd::online_cores();
        assert!(online >= 2, "this test needs two cores; the machine has {online}");
        let l = measure([0, 1], Duration::from_millis(20)).expect("measure");
        assert_eq!(l.cores, [0, 1]);
        assert!(l.samples >= 1);
        assert!(l.min_round_trip_ns > 0.0 && l.min_round_trip_ns <= l.round_trip_ns, "{l:?}");
        // A cache line's round trip between two cores takes tens of ns at least, and the
        // echoing thread answers long before the timeout.
        assert!(l.round_trip_ns > 10.0 && l.round_trip_ns < 2e9, "{l:?}");
    }

    #[test]
    fn a_core_that_does_not_exist_is_named() {
        let e = measure([0, 4096], Duration::from_millis(5)).unwrap_err();
        assert!(format!("{e:#}").contains("core 4096"), "{e:#}");
    }
}
