//! A receiver-side rate meter with millisecond bins: bytes per source IPv4 address per bin, read
//! from a packet socket in the receiver's namespace with the kernel's receive timestamps. Seed
//! 003 Sec. 6.2 (Fig. 6) measures how fast a VM's rate converges at the receiving end; iperf3
//! reports at 100 ms at best and tcpdump's files would have to be parsed afterwards, hence this.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bytes received per source, per bin.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bins {
    /// Bin width, microseconds.
    pub bin_us: u64,
    /// Unix time of bin 0's start, microseconds.
    pub start_unix_us: u64,
    /// Frame bytes (Ethernet header included) per bin, per source.
    pub bytes: BTreeMap<Ipv4Addr, Vec<u64>>,
}

impl Bins {
    /// Adds a frame of `len` bytes from `src` received at `at_unix_us`.
    pub fn add(&mut self, src: Ipv4Addr, at_unix_us: u64, len: u64) {
        let Some(since) = at_unix_us.checked_sub(self.start_unix_us) else { return };
        let i = (since / self.bin_us) as usize;
        let v = self.bytes.entry(src).or_default();
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        v[i] += len;
    }

    /// A source's rate in bin `i`, Mbit/s.
    pub fn mbps(&self, src: &Ipv4Addr, i: usize) -> f64 {
        let b = self.bytes.get(src).and_then(|v| v.get(i)).copied().unwrap_or(0);
        b as f64 * 8.0 / self.bin_us as f64
    }

    /// The first bin a source sent in.
    pub fn first_bin(&self, src: &Ipv4Addr) -> Option<usize> {
        self.bytes.get(src)?.iter().position(|&b| b > 0)
    }
}

/// How a source's rate settled after an event (a neighbour starting): its steady rate, and
/// the bins from the event until its rate, averaged over `smooth` bins, came within
/// `tolerance` (a fraction) of that steady rate and stayed there for `hold` bins.
#[derive(Clone, Debug, PartialEq)]
pub struct Convergence {
    /// The source's mean rate over the steady window, Mbit/s.
    pub steady_mbps: f64,
    /// Bins from the event to the first bin of the first close-enough window.
    pub bins: Option<usize>,
}

/// `src`'s convergence after `event_bin`, its steady rate taken over `steady` bins starting
/// `settle` bins after the event.
pub fn convergence(
    b: &Bins,
    src: &Ipv4Addr,
    event_bin: usize,
    (settle, steady): (usize, usize),
    (smooth, hold): (usize, usize),
    tolerance: f64,
) -> Convergence {
    let mean = |from: usize, n: usize| (from..from + n).map(|i| b.mbps(src, i)).sum::<f64>() / n.max(1) as f64;
    let steady_mbps = mean(event_bin + settle, steady);
    let close = |i: usize| (mean(i, smooth) - steady_mbps).abs() <= tolerance * steady_mbps;
    let bins = (event_bin..event_bin + settle).find(|&i| (i..i + hold.max(1)).all(close)).map(|i| i - event_bin);
    Convergence { steady_mbps, bins }
}

fn now_unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Counts what interface `iface` receives, in bins of `bin`, until `stop` is set.
pub fn measure(iface: &str, bin: Duration, stop: &AtomicBool) -> std::io::Result<Bins> {
    let sock = PacketSocket::open(iface)?;
    let start = now_unix_us();
    let mut bins = Bins { bin_us: bin.as_micros().max(1) as u64, start_unix_us: start, bytes: BTreeMap::new() };
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let Some((len, at_us)) = sock.recv(&mut buf)? else { continue };
        if buf.len() < 30 || len < 30 {
            continue;
        }
        // An IPv4 frame (EtherType 0x0800, no VLAN): the source address at offset 26.
        if buf[12] == 0x08 && buf[13] == 0x00 {
            bins.add(Ipv4Addr::new(buf[26], buf[27], buf[28], buf[29]), at_us, len as u64);
        }
    }
    Ok(bins)
}

/// An AF_PACKET socket bound to one interface, receiving only what arrives on it.
struct PacketSocket(libc::c_int);

impl PacketSocket {
    fn open(iface: &str) -> std::io::Result<PacketSocket> {
        let name = std::ffi::CString::new(iface).map_err(|_| std::io::Error::other("interface name has a NUL"))?;
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket calls on a descriptor this struct owns; every pointer passed
        // refers to a live local of the size given.
        unsafe {
            let ifindex = libc::if_nametoindex(name.as_ptr());
            if ifindex == 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as libc::c_int);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let sock = PacketSocket(fd);
            let mut addr: libc::sockaddr_ll = std::mem::zeroed();
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_protocol = proto;
            addr.sll_ifindex = ifindex as i32;
            let size = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            if libc::bind(fd, &addr as *const _ as *const libc::sockaddr, size) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let one: libc::c_int = 1;
            let isize = std::mem::size_of::<libc::c_int>() as u32;
            libc::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one as *const _ as *const _, isize);
            let rcvbuf: libc::c_int = 16 << 20;
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf as *const _ as *const _, isize);
            let tv = libc::timeval { tv_sec: 0, tv_usec: 100_000 };
            let tsize = std::mem::size_of::<libc::timeval>() as u32;
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv as *const _ as *const _, tsize);
            Ok(sock)
        }
    }

    /// One frame: its length on the wire and the kernel's receive time (Unix µs); None when
    /// nothing came within the socket's timeout.
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<Option<(usize, u64)>> {
        // SAFETY: `buf` is live and its length is passed; MSG_TRUNC returns the frame's real
        // length while copying only what fits.
        let n = unsafe { libc::recv(self.0, buf.as_mut_ptr() as *mut _, buf.len(), libc::MSG_TRUNC) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: SIOCGSTAMPNS writes one timespec: the last received frame's kernel timestamp.
        let at_us = if unsafe { libc::ioctl(self.0, SIOCGSTAMPNS, &mut ts) } == 0 {
            ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
        } else {
            now_unix_us()
        };
        Ok(Some((n as usize, at_us)))
    }
}

/// The socket ioctl that returns the last frame's receive time (linux/sockios.h).
const SIOCGSTAMPNS: libc::c_ulong = 0x8907;

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this struct's own and closed once.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bins(rates: &[(Ipv4Addr, Vec<u64>)]) -> Bins {
        Bins { bin_us: 1000, start_unix_us: 0, bytes: rates.iter().cloned().collect() }
    }

    #[test]
    fn frames_land_in_their_bin() {
        let mut b = Bins { bin_us: 1000, start_unix_us: 10_000, bytes: BTreeMap::new() };
        let a = Ipv4Addr::new(10, 0, 0, 1);
        b.add(a, 10_500, 1500);
        b.add(a, 12_999, 125);
        b.add(a, 9_000, 64); // before the start: ignored
        assert_eq!(b.bytes[&a], vec![1500, 0, 125]);
        assert_eq!(b.mbps(&a, 0), 12.0);
        assert_eq!(b.first_bin(&a), Some(0));
    }

    #[test]
    fn convergence_counts_the_bins_until_the_rate_settles() {
        let y = Ipv4Addr::new(10, 0, 0, 2);
        // 10 idle bins, a ramp of 3 bins, then steady at 37,500 bytes per ms (300 Mbit/s).
        let mut v = vec![0u64; 10];
        v.extend([5_000, 15_000, 30_000]);
        v.extend(std::iter::repeat_n(37_500, 200));
        let b = bins(&[(y, v)]);
        let c = convergence(&b, &y, 10, (50, 100), (1, 10), 0.1);
        assert!((c.steady_mbps - 300.0).abs() < 1e-9);
        assert_eq!(c.bins, Some(3));
        // A lucky bin inside a swing does not count: it must hold.
        let mut v = vec![0u64; 10];
        v.extend([37_500, 5_000, 5_000]);
        v.extend(std::iter::repeat_n(37_500, 200));
        let c = convergence(&bins(&[(y, v)]), &y, 10, (50, 100), (1, 10), 0.1);
        assert_eq!(c.bins, Some(3));
        // Never settling within 1% of a rate it never holds: none.
        let mut v = vec![0u64; 10];
        v.extend((0..200).map(|i| if i % 2 == 0 { 10_000 } else { 60_000 }));
        let c = convergence(&bins(&[(y, v)]), &y, 10, (50, 100), (1, 1), 0.01);
        assert_eq!(c.bins, None);
    }
}
