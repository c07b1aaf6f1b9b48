//! Short TCP flows and their completion times: the workload of seed 003 Sec. 6.2 (Fig. 7), where
//! a VM opens 8 KB and 32 KB flows every 10 ms or 100 ms beside a neighbour's long flows.
//! Written here because no packaged tool opens flows open-loop on a schedule and reports each
//! one's completion time (iperf3, qperf and sockperf keep one connection).
//!
//! A flow is a new connection: the client connects, writes the flow's bytes, closes its side,
//! and waits for the server's one-byte answer; its completion time runs from before the
//! connect to that answer (handshake included, as a short flow's user sees it).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a flow may take before it counts as not completed.
pub const FLOW_TIMEOUT: Duration = Duration::from_secs(5);

/// One workload: flows of `size_bytes`, one started every `interval`, for `duration`.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Bytes each flow carries.
    pub size_bytes: usize,
    /// Time between flow starts (open loop: a slow flow does not delay the next).
    pub interval: Duration,
    /// How long flows are started.
    pub duration: Duration,
}

/// Completion times of one workload's flows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowTimes {
    /// Flows started.
    pub started: usize,
    /// Completion times of the flows that completed, microseconds, sorted.
    pub fct_us: Vec<f64>,
}

impl FlowTimes {
    /// The `p`-th percentile (0-100) of the completion times (nearest rank).
    pub fn percentile_us(&self, p: f64) -> Option<f64> {
        if self.fct_us.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * self.fct_us.len() as f64).ceil() as usize;
        Some(self.fct_us[rank.clamp(1, self.fct_us.len()) - 1])
    }

    /// The mean completion time.
    pub fn mean_us(&self) -> Option<f64> {
        (!self.fct_us.is_empty()).then(|| self.fct_us.iter().sum::<f64>() / self.fct_us.len() as f64)
    }
}

/// Serves flows on `listener` until the process ends: reads each connection to its end, then
/// answers one byte.
pub fn serve(listener: TcpListener) -> std::io::Result<()> {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        std::thread::spawn(move || {
            let _ = conn.set_nodelay(true);
            let _ = conn.set_read_timeout(Some(FLOW_TIMEOUT));
            let mut buf = [0u8; 16384];
            while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
            let _ = conn.write_all(&[1]);
        });
    }
    Ok(())
}

/// One flow to `server`: its completion time, or None if it failed or timed out.
pub fn one_flow(server: SocketAddr, size_bytes: usize) -> Option<Duration> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&server, FLOW_TIMEOUT).ok()?;
    s.set_nodelay(true).ok()?;
    s.set_read_timeout(Some(FLOW_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(FLOW_TIMEOUT)).ok()?;
    let chunk = [0x5au8; 16384];
    let mut left = size_bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n]).ok()?;
        left -= n;
    }
    s.shutdown(Shutdown::Write).ok()?;
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).ok()?;
    Some(start.elapsed())
}

/// Runs `w` against `server`: a flow every `interval` on its own thread, then waits for the
/// stragglers (at most `FLOW_TIMEOUT`).
pub fn run(server: SocketAddr, w: &Workload) -> FlowTimes {
    let times = Arc::new(Mutex::new(Vec::new()));
    let begin = Instant::now();
    let mut handles = Vec::new();
    let mut k: u32 = 0;
    loop {
        let due = begin + w.interval * k;
        if due >= begin + w.duration {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (times, size) = (Arc::clone(&times), w.size_bytes);
        handles.push(std::thread::spawn(move || {
            if let Some(d) = one_flow(server, size) {
                times.lock().expect("not poisoned").push(d.as_secs_f64() * 1e6);
            }
        }));
        k += 1;
    }
    for h in handles {
        let _ = h.join();
    }
    let mut fct_us = std::mem::take(&mut *times.lock().expect("not poisoned"));
    fct_us.sort_by(f64::total_cmp);
    FlowTimes { started: k as usize, fct_us }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_completes_on_loopback_and_carries_its_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(listener));
        let w = Workload {
            size_bytes: 32 * 1024,
            interval: Duration::from_millis(5),
            duration: Duration::from_millis(100),
        };
        let t = run(addr, &w);
        assert_eq!(t.started, 20);
        assert_eq!(t.fct_us.len(), 20, "every flow answered");
        assert!(t.percentile_us(50.0).unwrap() <= t.percentile_us(99.0).unwrap());
    }

    #[test]
    fn a_flow_to_a_closed_port_does_not_complete() {
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        assert_eq!(one_flow(addr, 100), None);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let t = FlowTimes { started: 4, fct_us: vec![1.0, 2.0, 3.0, 4.0] };
        assert_eq!(t.percentile_us(50.0), Some(2.0));
        assert_eq!(t.percentile_us(99.0), Some(4.0));
        assert_eq!(t.percentile_us(0.0), Some(1.0));
        assert_eq!(t.mean_us(), Some(2.5));
        assert_eq!(FlowTimes::default().percentile_us(50.0), None);
    }
}
