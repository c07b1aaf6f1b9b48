//! The sending side: every VM of the process is served in turn in one loop, so many VMs are
//! really busy at the same time from one core (separate busy-polling processes sharing a core
//! would take turns of milliseconds and never compete inside the switch). Pacing is in software
//! from the TSC: each VM may send what its phase's rate allows since the phase began.

use serde::Serialize;
use slaswitch_dpdk::{rdtsc, EthPort, MbufBatch, Mempool, MAX_BURST};

use super::run_for::RunFor;
use super::sink::{Sink, SinkRecord};
use slaswitch_traffic::frames::{
    ip_for, mac_for, restamp_tsc, sender_id, stamp, write_frame, FLOWS_PER_ADDRESS, PAYLOAD, STAMP_LEN,
};
use slaswitch_traffic::phase::{Phase, Size, IMIX_PATTERN};

/// One emulated VM that sends.
pub struct GenVm {
    /// Its name.
    pub name: String,
    /// Its virtio-user device.
    pub port: EthPort,
    /// What it sends, and when.
    pub phases: Vec<Phase>,
    /// Its device's tx queues: bursts go to each in turn, as a guest's vCPUs spread its flows.
    queues: u16,
    /// Descriptors per ring: a visit of [`run`]'s loop offers at most this many frames a queue.
    ring_descriptors: u16,
    next_queue: u16,
    mac: [u8; 6],
    ip: [u8; 4],
    id: u16,
    seq: u64,
    flow: u32,
    imix_pos: usize,
    /// (phase index, packets sent in it)
    current: Option<(usize, u64)>,
    /// Frames of each size the active phase sends, built once per phase: a packet is a copy of
    /// its template with the flow's port and the stamp patched in.
    templates: Vec<(u16, Vec<u8>)>,
    /// Frames the ring took at the last burst, if it refused some: the next burst builds at
    /// most [`BUILD_AHEAD_OF_ROOM`] more than that (see [`GenVm::step`]).
    last_room: Option<usize>,
    /// With [`GenVm::keep_refused`], in full-speed phases (no rate): frames the ring refused,
    /// oldest first, sent before any new one is built (see [`GenVm::send_pending`]).
    pending: MbufBatch,
    /// Keep refused frames instead of freeing them (`slaswitch-tenant gen --keep-refused`).
    pub keep_refused: bool,
    /// Packets sent.
    pub sent_packets: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Sends the ring refused (full).
    pub tx_full: u64,
    interval_packets: u64,
    interval_bytes: u64,
    interval_tx_full: u64,
}

/// What a VM sent in one interval.
#[derive(Clone, Debug, Serialize)]
pub struct GenRecord {
    /// The interval's end, seconds since the start.
    pub t_secs: f64,
    /// The VM.
    pub vm: String,
    /// Packets sent in the interval.
    pub packets: u64,
    /// Bytes sent in the interval.
    pub bytes: u64,
    /// Thousands of packets per second.
    pub kpps: f64,
    /// Megabits per second of frames.
    pub mbps: f64,
    /// Packets the VM's ring had no room for in the interval (or that it did not build
    /// because the ring had refused frames at its last burst): the VM was backlogged.
    pub tx_ring_full: u64,
}

impl GenVm {
    /// Sends its bursts over `queues` tx queues in turn (its device has that many).
    pub fn with_queues(mut self, queues: u16) -> GenVm {
        self.queues = queues.max(1);
        self
    }

    /// Its rings hold `descriptors` each (what one visit of [`run`]'s loop may offer a queue).
    pub fn with_ring(mut self, descriptors: u16) -> GenVm {
        self.ring_descriptors = descriptors.max(MAX_BURST as u16);
        self
    }

    /// The most frames one visit of [`run`]'s loop offers: its rings' worth. A VM catching up
    /// still fills an undrained ring in one visit; one whose ring the switch drains about as
    /// fast as it is filled would otherwise stay for as long as that lasts while the other VMs
    /// of the core wait, as no hypervisor lets a vCPU do, and a flood would starve its
    /// neighbours on the VM core, where the switch's QoS cannot reach.
    fn visit_frames(&self) -> u64 {
        u64::from(self.ring_descriptors) * u64::from(self.queues)
    }

    /// The tx queue of the next burst.
    fn take_queue(&mut self) -> u16 {
        let q = self.next_queue;
        self.next_queue = (q + 1) % self.queues;
        q
    }

    /// A VM named `name` on `port` that will send `phases`.
    pub fn new(name: &str, port: EthPort, phases: Vec<Phase>) -> GenVm {
        GenVm {
            name: name.to_string(),
            port,
            phases,
            queues: 1,
            ring_descriptors: 1024,
            next_queue: 0,
            mac: mac_for(name),
            ip: ip_for(name),
            id: sender_id(name),
            seq: 0,
            flow: 0,
            imix_pos: 0,
            current: None,
            templates: Vec::new(),
            last_room: None,
            pending: MbufBatch::new(),
            keep_refused: false,
            sent_packets: 0,
            sent_bytes: 0,
            tx_full: 0,
            interval_packets: 0,
            interval_bytes: 0,
            interval_tx_full: 0,
        }
    }

    fn next_size(&mut self, size: Size) -> u16 {
        match size {
            Size::Fixed(s) => s,
            Size::Imix => {
                self.imix_pos = (self.imix_pos + 1) % IMIX_PATTERN.len();
                IMIX_PATTERN[self.imix_pos]
            }
        }
    }

    /// Sends what the active phase allows at `t_secs`; returns packets sent.
    fn step(&mut self, pool: &Mempool, t_secs: f64, tsc: u64) -> usize {
        let Some(idx) = self.phases.iter().position(|p| t_secs >= p.start_secs && t_secs < p.end_secs()) else {
            self.current = None;
            self.drop_pending();
            return 0;
        };
        if self.current.map(|(i, _)| i) != Some(idx) {
            self.current = Some((idx, 0));
            self.drop_pending();
            let p = &self.phases[idx];
            let sizes: Vec<u16> = match p.size {
                Size::Fixed(s) => vec![s],
                Size::Imix => vec![60, 590, 1514],
            };
            self.templates = sizes
                .into_iter()
                .map(|len| {
                    let mut f = vec![0u8; usize::from(len)];
                    write_frame(&mut f, self.mac, self.ip, p.dst_mac, p.dst_ip, 0);
                    if let Some(m) = p.malformed {
                        let cut = m.apply(&mut f);
                        f.truncate(cut);
                    }
                    (len, f)
                })
                .collect();
        }
        let phase = &self.phases[idx];
        let due = phase.due_packets(t_secs - phase.start_secs);
        // A paced VM the shared core kept waiting catches up now, burst after burst, as an
        // application does once its vCPU runs again; a full ring, or a ring's worth offered
        // in this visit (`visit_frames`), ends the catching up.
        let mut sent = 0;
        let mut offered = 0u64;
        loop {
            let sent_in_phase = self.current.expect("set").1;
            let want = match due {
                None => MAX_BURST,
                Some(due) => due.saturating_sub(sent_in_phase).min(MAX_BURST as u64) as usize,
            };
            if want == 0 {
                return sent;
            }
            let (n, full) = self.burst(pool, idx, want, due.is_none(), tsc);
            sent += n;
            offered += want as u64;
            if full || due.is_none() || offered >= self.visit_frames() {
                return sent;
            }
        }
    }

    /// Sends one burst of `want` frames of phase `idx`; returns what the ring took and whether it
    /// refused any.
    fn burst(&mut self, pool: &Mempool, idx: usize, want: usize, full_speed: bool, tsc: u64) -> (usize, bool) {
        let phase = &self.phases[idx];
        let (size, flows, dst_mac, dst_ip, malformed) =
            (phase.size, phase.flows, phase.dst_mac, phase.dst_ip, phase.malformed);
        let keep = full_speed && self.keep_refused;
        if !self.pending.is_empty() {
            let offered = self.pending.len();
            let sent = self.send_pending(tsc);
            return (sent, sent < offered);
        }
        // A ring that refused frames last time is full or nearly so: build only a little more
        // than it took then, as an application stops writing to a full socket, instead of
        // building a whole burst to free most of it again. What is not built counts as refused
        // (and as offered, below), as if the ring had refused it.
        // Refused frames kept (below), nothing built is wasted.
        let build = if keep { want } else { self.last_room.map_or(want, |room| want.min(room + BUILD_AHEAD_OF_ROOM)) };
        let mut batch = MbufBatch::new();
        if !batch.alloc(pool, build) {
            return (0, true);
        }
        let mut bytes = 0u64;
        for m in batch.as_mut_slice() {
            let len = self.next_size(size);
            let flow = self.flow;
            self.flow = (self.flow + 1) % flows;
            let template = &self.templates.iter().find(|(l, _)| *l == len).expect("template per size").1;
            // A malformed frame may be cut shorter than its size.
            let template_len = template.len();
            m.set_len_within(template_len as u16, 2048);
            let buf = m.data_mut();
            // Only the headers and the stamp's place are written: the payload after them is
            // whatever the buffer held, as a VM's application data is nothing to its switch,
            // which copies every byte of it all the same. Writing it would cost the VMs' core
            // about what a large frame costs the PMD, and one core of VMs could then not
            // overload a PMD with large frames.
            let written = template_len.min(HEADERS_AND_STAMP_BYTES);
            buf[..written].copy_from_slice(&template[..written]);
            if malformed.is_some() {
                // One flow: a malformed frame has no ports to vary.
            } else if flow >= FLOWS_PER_ADDRESS {
                // Beyond them the source address changes too, and with it the IP checksum.
                write_frame(buf, self.mac, self.ip, dst_mac, dst_ip, flow);
            } else if flow != 0 {
                buf[34..36].copy_from_slice(&(1024 + flow as u16).to_be_bytes());
            }
            self.seq += 1;
            stamp(buf, self.id, self.seq, tsc);
            bytes += template_len as u64;
        }
        let q = self.take_queue();
        let sent = batch.tx_burst_queue(&self.port, q);
        if sent < build {
            let unsent_bytes: u64 = batch.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
            bytes -= unsent_bytes;
            if keep {
                // Nothing is pending here: pending frames go out first, on a call of their own.
                std::mem::swap(&mut self.pending, &mut batch);
            }
        }
        self.last_room = (sent < build).then_some(sent);
        self.tx_full += (want - sent) as u64;
        self.interval_tx_full += (want - sent) as u64;
        // Count what was offered against the pace, so a full ring does not make the VM burst later.
        if let Some((_, n)) = self.current.as_mut() {
            *n += want as u64;
        }
        self.sent_packets += sent as u64;
        self.sent_bytes += bytes;
        self.interval_packets += sent as u64;
        self.interval_bytes += bytes;
        (sent, sent < want)
    }

    /// A full-speed VM whose ring refused frames offers them again, restamped, before it builds
    /// new ones, as a VM's driver holds what its device had no room for. Building a burst and
    /// freeing most of it whenever the ring was full was, with freeing the frames the switch
    /// had taken, most of the emulated VMs' core (perf, docs/results/c2qos-overhead.md): in the host's slow
    /// phases the 28 VMs on one core then could not keep the switch's PMD busy. Opt-in (the
    /// overhead benchmark's): the experiments' reports were made with refused frames freed.
    fn send_pending(&mut self, tsc: u64) -> usize {
        let mut bytes: u64 = self.pending.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum();
        for m in self.pending.as_mut_slice() {
            restamp_tsc(m.data_mut(), tsc);
        }
        let offered = self.pending.len();
        let q = self.take_queue();
        let sent = self.pending.tx_burst_queue(&self.port, q);
        bytes -= self.pending.as_slice().iter().map(|m| u64::from(m.pkt_len())).sum::<u64>();
        self.tx_full += (offered - sent) as u64;
        self.interval_tx_full += (offered - sent) as u64;
        self.sent_packets += sent as u64;
        self.sent_bytes += bytes;
        self.interval_packets += sent as u64;
        self.interval_bytes += bytes;
        sent
    }

    fn drop_pending(&mut self) {
        self.pending.clear();
    }
}

/// A sink the generator's loop also drains, and what it does with each record.
pub type SharedSink<'a, 's> = Option<(&'a mut Sink<'s>, &'a mut dyn FnMut(&SinkRecord))>;

/// Runs every VM's phases for as long as `run_for` says, reporting each `interval_secs`. With a
/// `sink`, the same loop also receives on the sink VMs, so senders and receiver share one core
/// without the kernel's time slices between them.
pub fn run(
    vms: &mut [GenVm],
    mut sink: SharedSink<'_, '_>,
    pool: &Mempool,
    tsc_hz: u64,
    run_for: RunFor<'_>,
    interval_secs: f64,
    mut report: impl FnMut(&GenRecord),
) {
    let start = rdtsc();
    let hz = tsc_hz as f64;
    let mut next_report = interval_secs;
    let mut next_link_check = 0.1;
    loop {
        let tsc = rdtsc();
        let t = (tsc - start) as f64 / hz;
        if run_for.over(t) {
            break;
        }
        if t >= next_link_check {
            // Asking for the link status is what lets a virtio-user device in server mode take
            // the switch's new connection after the switch restarts (a VM's driver does the same).
            for vm in vms.iter() {
                vm.port.link_up();
            }
            next_link_check = t + 0.1;
        }
        for vm in vms.iter_mut() {
            vm.step(pool, t, tsc);
            // The sink is polled after every sender, not once per round of them: a round of
            // many senders at full speed is long, and a frame waiting in the sink's ring for
            // it would count that as latency through the switch.
            if let Some((s, _)) = sink.as_mut() {
                s.poll();
            }
        }
        if let Some((s, _)) = sink.as_mut() {
            s.poll();
        }
        // Drain anything the switch sends back (e.g. floods) so the rings do not fill.
        let mut rx = MbufBatch::new();
        for vm in vms.iter() {
            rx.rx_burst(&vm.port, MAX_BURST);
            rx.clear();
        }
        if t >= next_report {
            for vm in vms.iter_mut() {
                report(&GenRecord {
                    t_secs: next_report,
                    vm: vm.name.clone(),
                    packets: vm.interval_packets,
                    bytes: vm.interval_bytes,
                    kpps: vm.interval_packets as f64 / interval_secs / 1e3,
                    mbps: vm.interval_bytes as f64 * 8.0 / interval_secs / 1e6,
                    tx_ring_full: vm.interval_tx_full,
                });
                vm.interval_tx_full = 0;
                vm.interval_packets = 0;
                vm.interval_bytes = 0;
            }
            if let Some((s, sink_report)) = sink.as_mut() {
                s.end_interval(next_report, interval_secs, pool, |r| sink_report(r));
            }
            next_report += interval_secs;
        }
    }
    // Stay up a little after sending stops, as a VM's driver does after its application
    // stops: the frames still in the TX rings are the switch's to take, and leaving at once
    // tears the rings down under them (a PMD the host had descheduled for a moment lost the
    // last 3745 of 107155 frames that way in a CI run). The sink keeps receiving meanwhile.
    let linger_end = rdtsc() + (LINGER_SECS * hz) as u64;
    let mut rx = MbufBatch::new();
    while rdtsc() < linger_end {
        if let Some((s, _)) = sink.as_mut() {
            s.poll();
        }
        for vm in vms.iter() {
            rx.rx_burst(&vm.port, MAX_BURST);
            rx.clear();
        }
    }
    for vm in vms.iter_mut() {
        vm.drop_pending();
    }
}

/// How long the generator stays up after its phases end (see the end of [`run`]).
const LINGER_SECS: f64 = 0.5;

/// After a burst the ring cut short, the next one builds at most this many frames more than
/// the ring took: enough to find room the switch made meanwhile, few enough that a full ring
/// costs the VM's core little (the emulated VMs share one core; frames built and freed
/// unsent were time the other VMs did not get).
const BUILD_AHEAD_OF_ROOM: usize = 8;

/// The bytes of a frame the generator writes: Ethernet, IPv4 and UDP headers, and the stamp.
const HEADERS_AND_STAMP_BYTES: usize = PAYLOAD + STAMP_LEN;
