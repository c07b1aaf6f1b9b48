//! Part of the egress stage: frames that carry their sender's offloads (a virtio-net guest's
//! partial checksums and TCP segments of up to 64 KB) on their way to a port. A guest that
//! negotiated taking them gets them as they are, flagged for its vhost port to tell it so; every
//! other port (tap, af_packet, a paced link, a guest without those features) gets whole
//! checksums and frames cut to the segment size, made in software by `slaswitch_offload`. The
//! work happens here, in the egress stage of the batch's own port, so C2QoS charges its cycles to
//! the port whose frames needed it. Frames longer than the port's MTU allows are dropped here
//! and counted on the port (`mtu_request`; OVS-DPDK drops them in its send path likewise).

use slaswitch_dpdk::{ol_flags, rdtsc, virtio_features, Mbuf, MbufBatch, OffloadRequest, MAX_BURST};
use slaswitch_offload::{l4_checksum, Chain, Headers, Ip, Segments, L4};

use crate::counters::OffloadTotals;
use crate::pmd_config::{PmdConfig, TxPort};

/// What a port takes of a frame's offloads.
#[derive(Clone, Copy, Debug, Default)]
struct Takes {
    partial_checksums: bool,
    tso4: bool,
    tso6: bool,
}

impl Takes {
    /// Asks a vhost port's guest what it negotiated (once per burst that needs it: the guest
    /// may reconnect with other features).
    fn of(tx: &TxPort) -> Takes {
        let Some(tso) = tx.vhost_tso else { return Takes::default() };
        if tx.paced.is_some() {
            return Takes::default();
        }
        let f = tx.eth.vhost_features();
        let csum = f & virtio_features::GUEST_CSUM != 0;
        Takes {
            partial_checksums: csum,
            tso4: tso && csum && f & virtio_features::GUEST_TSO4 != 0,
            tso6: tso && csum && f & virtio_features::GUEST_TSO6 != 0,
        }
    }

    fn tso(&self, ip: Ip) -> bool {
        match ip {
            Ip::V4 => self.tso4,
            Ip::V6 => self.tso6,
        }
    }
}

/// The bytes a frame puts on the wire: a large TCP segment's once cut into frames (so meters
/// count what the port's link carries), any other frame's own length.
#[inline]
pub(super) fn wire_len(m: &Mbuf) -> u32 {
    if m.ol_flags() & ol_flags::RX_LRO == 0 {
        return m.pkt_len();
    }
    match m.offload_request() {
        OffloadRequest::Segment { mss } => Segments::plan(m.data(), m.pkt_len() as usize, mss)
            .map_or(m.pkt_len(), |plan| plan.wire_bytes().min(u64::from(u32::MAX)) as u32),
        _ => m.pkt_len(),
    }
}

/// The receive flags under which a frame may carry an offload request.
const ASKS: u64 = ol_flags::RX_LRO | ol_flags::RX_L4_CKSUM_MASK;

/// What one rx batch's frames may need at egress, gathered while classification reads each
/// frame's first cache line anyway, so a batch that needs nothing skips [`needs_care`]'s pass.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BatchCare {
    longest_bytes: u32,
    asks: u64,
}

impl BatchCare {
    #[inline(always)]
    pub(crate) fn note(&mut self, m: &Mbuf) {
        self.longest_bytes = self.longest_bytes.max(m.pkt_len());
        self.asks |= m.ol_flags() & ASKS;
    }

    /// False when no frame noted can need care on a port that takes `max_frame_bytes`.
    #[inline]
    pub(crate) fn may_need(&self, max_frame_bytes: u32) -> bool {
        self.asks != 0 || self.longest_bytes > max_frame_bytes
    }
}

/// Whether any frame of `batch` asks for an offload or is longer than `max_frame_bytes`, the
/// port's MTU allows (one look at each frame's first cache line).
#[inline]
pub(super) fn needs_care(batch: &MbufBatch, max_frame_bytes: u32) -> bool {
    batch.as_slice().iter().any(|m| {
        m.pkt_len() > max_frame_bytes || (m.ol_flags() & ASKS != 0 && m.offload_request() != OffloadRequest::None)
    })
}

/// Sends `pending` to `tx` through `send` (in batches of at most [`MAX_BURST`]), each frame made
/// into what the port takes; frames longer than its MTU allows are dropped and counted on it.
/// Counts the offload work in `totals`.
pub(super) fn send_prepared(
    cfg: &PmdConfig,
    tx: &TxPort,
    pending: &mut MbufBatch,
    totals: &mut OffloadTotals,
    send: &mut dyn FnMut(&mut MbufBatch),
) {
    let takes = Takes::of(tx);
    let mut out = Out { batch: MbufBatch::new(), send, max_frame_bytes: tx.max_frame_bytes, mtu_drops: 0 };
    for mut m in pending.drain() {
        match m.offload_request() {
            OffloadRequest::None => out.push(m),
            OffloadRequest::Checksum => {
                // Not TCP or UDP over IP (no headers): the vhost library completed it already.
                match Headers::parse(m.data()) {
                    Some(h) if takes.partial_checksums => mark(&mut m, &h, 0),
                    Some(h) if complete_checksum(&mut m, &h) => totals.checksums += 1,
                    _ => {}
                }
                out.push(m);
            }
            OffloadRequest::Segment { mss } => match Segments::plan(m.data(), m.pkt_len() as usize, mss) {
                // Its frames would be longer than the port's MTU allows, however sent.
                Ok(plan) if plan.frame_len(0) as u32 > out.max_frame_bytes => out.mtu_drops += 1,
                Ok(plan) if takes.tso(plan.headers.ip) => {
                    mark(&mut m, &plan.headers, mss);
                    out.push_whole(m);
                }
                Ok(plan) => segment(cfg, &m, &plan, &mut out, totals),
                Err(_) => totals.drops += 1,
            },
        }
    }
    out.flush();
    if out.mtu_drops > 0 {
        tx.counters.tx_mtu_dropped.fetch_add(out.mtu_drops, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Flags a frame for a guest that takes its offloads: its vhost port writes them into the
/// virtio-net header (checksum start and offset; GSO type and size when `mss` is not 0).
fn mark(m: &mut Mbuf, h: &Headers, mss: u16) {
    let mut flags = match (h.l4, mss) {
        (L4::Tcp, 0) => ol_flags::TX_TCP_CKSUM,
        (L4::Tcp, _) => ol_flags::TX_TCP_SEG | ol_flags::TX_TCP_CKSUM,
        (L4::Udp, _) => ol_flags::TX_UDP_CKSUM,
    };
    flags |= match h.ip {
        Ip::V4 => ol_flags::TX_IPV4 | if mss > 0 { ol_flags::TX_IP_CKSUM } else { 0 },
        Ip::V6 => ol_flags::TX_IPV6,
    };
    m.set_tx_offload(h.l2_len as u8, h.l3_len, h.l4_len as u8, mss, flags);
}

/// Completes a partial TCP/UDP checksum in place; false when the IP header's length does not
/// fit the frame (left as it is; the receiver drops it as the sender's mistake).
fn complete_checksum(m: &mut Mbuf, h: &Headers) -> bool {
    let head = m.data();
    let Some(l4_len) = h.l4_len_by_ip(head) else { return false };
    if h.len() - usize::from(h.l4_len) + l4_len > m.pkt_len() as usize {
        return false;
    }
    let sum = l4_checksum(head, h, l4_len, m.pieces());
    let at = usize::from(h.l2_len + h.l3_len) + h.l4.checksum_offset();
    m.data_mut()[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

/// Cuts the large TCP segment `m` into frames of fresh mbufs, which go out through `out`; `m`
/// itself is freed by the caller.
fn segment(cfg: &PmdConfig, m: &Mbuf, plan: &Segments, out: &mut Out<'_>, totals: &mut OffloadTotals) {
    let head = m.data();
    let mut chain = Chain::new(m.pieces());
    if !chain.skip(plan.headers.len()) {
        totals.drops += 1;
        return;
    }
    let (n, mut i) = (plan.count(), 0);
    while i < n {
        // Sending a full batch is the port's cost, not segmentation's: done before the clock.
        let k = (n - i).min(out.room());
        let start = rdtsc();
        let mut fresh = MbufBatch::new();
        if !fresh.alloc(&cfg.pool, k) {
            totals.drops += 1;
            return;
        }
        for mut seg in fresh.drain() {
            let len = plan.frame_len(i);
            if !seg.set_len(len as u16) || !plan.write(i, head, &mut chain, seg.data_mut()) {
                totals.drops += 1;
                return;
            }
            totals.segment_bytes += len as u64;
            // No longer than the first frame, which the caller checked against the MTU.
            out.push_whole(seg);
            i += 1;
        }
        totals.segment_cycles += rdtsc().wrapping_sub(start);
    }
    totals.segmented += 1;
    totals.segments += n as u64;
}

/// Frames on their way to one port, sent a batch at a time; those longer than its MTU allows
/// are dropped and counted.
struct Out<'a> {
    batch: MbufBatch,
    send: &'a mut dyn FnMut(&mut MbufBatch),
    max_frame_bytes: u32,
    mtu_drops: u64,
}

impl Out<'_> {
    /// Room left before the batch goes (sending it first when full).
    fn room(&mut self) -> usize {
        if self.batch.len() == MAX_BURST {
            self.flush();
        }
        MAX_BURST - self.batch.len()
    }

    /// Queues `m`, or drops it when it is longer than the port's MTU allows.
    fn push(&mut self, m: Mbuf) {
        if m.pkt_len() > self.max_frame_bytes {
            self.mtu_drops += 1;
            return;
        }
        self.push_whole(m);
    }

    /// Queues `m`, whose frames the caller checked against the MTU.
    fn push_whole(&mut self, m: Mbuf) {
        self.room();
        if self.batch.push(m).is_err() {
            unreachable!("room() made room");
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() {
            (self.send)(&mut self.batch);
            self.batch.clear();
        }
    }
}
