//! slaswitch-tenant: one or many emulated VMs attached to the switch over vhost-user (DPDK
//! virtio-user, the frontend protocol QEMU's guests speak).
//!
//!   slaswitch-tenant --vm vm1=/var/run/slaswitch/vm1.sock [--vm ...] gen --phase "rate=1mpps,size=64" [--phase ...]
//!   slaswitch-tenant --vm sink=/var/run/slaswitch/sink.sock sink --source vm1 --source vm2
//!   slaswitch-tenant --vm vm1=... --vm up=... gen --sink up --phase ...   (senders and sink in one loop)
//!   slaswitch-tenant --vm idle1=... [--vm ...] idle                        (attached, sending nothing)
//!
//! Common options: --core N (default 1), --ring N (virtio ring, up to 32768; the mbuf pool is sized
//! to match), --duration S (SIGTERM or SIGINT end the run sooner, its totals still printed),
//! --interval S (default 1), --out FILE, --format json|csv, --file-prefix NAME, --link-timeout
//! S, --virtio-ring split|packed. gen --keep-refused: at full speed a VM keeps the frames its ring
//! refused and offers them again before building new ones. Append ",server" to a socket when the
//! switch port is a vhost-user-client (the VM side then listens). A socket written
//! `af_packet:IFACE` attaches the VM to a kernel interface instead (a veth or tap in a Linux
//! bridge or VDE2 switch).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use slaswitch::signals::stop_on_signals;
use slaswitch::tenant::frames::{mac_for, mac_text};
use slaswitch::tenant::generator::{self, GenVm};
use slaswitch::tenant::phase::Phase;
use slaswitch::tenant::run_for::RunFor;
use slaswitch::tenant::sink::{self, SinkVm};
use slaswitch::tenant::{parse_ring_descriptors, VirtioRing};
use slaswitch_dpdk::{remove_vdev, Eal, EthPort, Mempool, PortSetup};

/// One or many emulated VMs attached to a switch over vhost-user (or af_packet).
#[derive(Parser, Debug)]
#[command(name = "slaswitch-tenant", version)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Args, Debug)]
struct Common {
    /// NAME=SOCKET[,server], or NAME=af_packet:IFACE; repeat for several VMs.
    #[arg(long = "vm", global = true, value_parser = parse_vm)]
    vms: Vec<Vm>,
    /// The core the VMs run on.
    #[arg(long, global = true, default_value_t = 1)]
    core: usize,
    /// Queue pairs of each VM's virtio device (its switch port needs as many, `queues=N`); a
    /// generator sends its bursts on each in turn.
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    queues: u16,
    /// Descriptors per virtio ring: a power of two from 64 to 32768.
    #[arg(long = "ring", global = true, default_value_t = 1024, value_parser = parse_ring_descriptors)]
    ring_descriptors: u16,
    /// The virtio ring layout: `split` (QEMU's default) or `packed` (packed ring, in-order
    /// completion, no mergeable buffers: the fastest layout DPDK's vhost library serves, so
    /// one generator core can keep a PMD busy).
    #[arg(long = "virtio-ring", global = true, value_enum, default_value_t = VirtioRing::Split)]
    virtio_ring: VirtioRing,
    #[arg(long = "duration", global = true, default_value_t = 10.0)]
    duration_secs: f64,
    #[arg(long = "interval", global = true, default_value_t = 1.0)]
    interval_secs: f64,
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    #[arg(long, global = true, default_value = "json", value_parser = ["json", "csv"])]
    format: String,
    #[arg(long, global = true)]
    file_prefix: Option<String>,
    /// Seconds to wait for every VM's link.
    #[arg(long = "link-timeout", global = true, default_value_t = 15.0)]
    link_timeout_secs: f64,
    /// Names of the senders a sink expects (besides this process's own generators).
    #[arg(long = "source", global = true)]
    sources: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Send: phases of rate, size and flows per VM.
    Gen {
        #[arg(long = "phase")]
        phases: Vec<Phase>,
        /// A file of phases, one per line (# comments).
        #[arg(long)]
        script: Option<PathBuf>,
        /// VMs of this process that receive instead (senders and sink in one loop).
        #[arg(long = "sink")]
        sinks: Vec<String>,
        /// At full speed, keep the frames the ring refused and offer them again first.
        #[arg(long)]
        keep_refused: bool,
    },
    /// Receive on every VM and measure rate and one-way latency.
    Sink,
    /// Keep every VM attached and sending nothing, for --duration: idle neighbours whose ports
    /// the switch still polls. Sleeps between looks at the links, so it takes no core.
    Idle,
}

fn main() {
    let cli: Cli = slaswitch_config::cli::parse_args(None);
    if let Err(e) = run(cli) {
        eprintln!("slaswitch-tenant: {e:#}");
        std::process::exit(1);
    }
}

#[derive(Clone, Debug)]
struct Vm {
    name: String,
    socket: String,
    server: bool,
}

fn parse_vm(s: &str) -> Result<Vm, String> {
    let (name, rest) = s.split_once('=').ok_or_else(|| format!("--vm {s}: use NAME=SOCKET[,server]"))?;
    let (socket, server) = match rest.strip_suffix(",server") {
        Some(p) => (p.to_string(), true),
        None => (rest.to_string(), false),
    };
    if name.is_empty() || socket.is_empty() {
        return Err(format!("--vm {s}: use NAME=SOCKET[,server]"));
    }
    Ok(Vm { name: name.to_string(), socket, server })
}

/// What `gen` runs: its phases, the sink VMs among this process's, whether refused frames stay.
struct GenPlan {
    phases: Vec<Phase>,
    sinks: Vec<String>,
    keep_refused: bool,
}

/// What the process does with its VMs.
enum Plan {
    Gen(GenPlan),
    Sink,
    Idle,
}

/// Checks the command line as a whole.
fn check(cli: Cli) -> anyhow::Result<(Common, Plan)> {
    let c = cli.common;
    if c.vms.is_empty() {
        bail!("at least one --vm NAME=SOCKET is needed");
    }
    let (mut phases, script, sinks, keep_refused) = match cli.mode {
        Mode::Gen { phases, script, sinks, keep_refused } => (phases, script, sinks, keep_refused),
        Mode::Sink => return Ok((c, Plan::Sink)),
        Mode::Idle => return Ok((c, Plan::Idle)),
    };
    if let Some(script) = script {
        let text = std::fs::read_to_string(&script).with_context(|| format!("--script {}", script.display()))?;
        for (i, line) in
            text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        {
            phases.push(line.parse().with_context(|| format!("{}:{}", script.display(), i + 1))?);
        }
    }
    if let Some(name) = sinks.iter().find(|n| !c.vms.iter().any(|v| &v.name == *n)) {
        bail!("--sink {name} is not one of this process's --vm");
    }
    if !sinks.is_empty() && c.format == "csv" {
        bail!("--sink with --format csv: sender and sink records differ, use --format json");
    }
    if phases.is_empty() {
        bail!("gen needs at least one --phase (or --script)");
    }
    if let Some(vm) = phases.iter().filter_map(|p| p.vm.as_ref()).find(|vm| !c.vms.iter().any(|v| &v.name == *vm)) {
        bail!("a phase names vm={vm}, which is not one of this process's --vm");
    }
    Ok((c, Plan::Gen(GenPlan { phases, sinks, keep_refused })))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let (c, gen) = check(cli)?;
    let (eal, pool, ports) = attach(&c)?;
    let mut records = Records::new(&c)?;
    // From here on a signal ends the run early, its totals reported; while attaching it still
    // ends the process.
    let stop = stop_on_signals().context("installing the SIGTERM and SIGINT handlers")?;
    let run_for = RunFor { duration_secs: c.duration_secs, stop: &stop };
    let tsc_hz = eal.tsc_hz();
    let start_unix_secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let summary = match &gen {
        Plan::Gen(gen) => run_gen(&c, gen, &ports, &pool, tsc_hz, run_for, &mut records),
        Plan::Idle => run_idle(&ports, run_for),
        Plan::Sink => {
            let sinks: Vec<SinkVm> =
                c.vms.iter().zip(&ports).map(|(vm, (_, port))| SinkVm { name: vm.name.clone(), port: *port }).collect();
            let totals = sink::run(&sinks, &c.sources, &pool, tsc_hz, run_for, c.interval_secs, |r| {
                records.emit(serde_json::to_value(r).expect("record"))
            });
            json!({"mode": "sink", "totals": totals})
        }
    };
    let mut summary = summary;
    summary["core"] = json!(c.core);
    summary["start_unix_secs"] = json!(start_unix_secs);
    records.finish(&c, start_unix_secs, &summary)?;
    println!("{summary}");
    if c.vms.iter().any(|v| v.server) {
        // DPDK 22.11's virtio-user aborts when a server-mode device that has reconnected is
        // closed ("Reconnect callback call failed"); with --in-memory there is nothing to clean.
        let _ = std::io::stdout().flush();
        // SAFETY: ends the process without running DPDK's teardown.
        unsafe { libc::_exit(0) };
    }
    for (dev, port) in ports {
        let _ = port.stop_close();
        let _ = remove_vdev(&dev);
    }
    drop(pool);
    drop(eal);
    Ok(())
}

/// Keeps the VMs attached for the run, looking at their links (which lets a server-mode
/// device take a restarted switch's connection) and freeing anything sent to them.
fn run_idle(ports: &[Device], run_for: RunFor<'_>) -> serde_json::Value {
    let start = std::time::Instant::now();
    let mut received = 0u64;
    let mut rx = slaswitch_dpdk::MbufBatch::new();
    while !run_for.over(start.elapsed().as_secs_f64()) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        for (_, port) in ports {
            port.link_up();
            received += rx.rx_burst(port, slaswitch_dpdk::MAX_BURST) as u64;
            rx.clear();
        }
    }
    json!({"mode": "idle", "vms": ports.len(), "received_packets": received})
}

/// A VM's DPDK device: its vdev name and port.
type Device = (String, EthPort);

/// Starts EAL on the VMs' core and brings up one device per VM, waiting for their links.
fn attach(c: &Common) -> anyhow::Result<(Eal, Mempool, Vec<Device>)> {
    let ring = c.ring_descriptors;
    let prefix = c.file_prefix.clone().unwrap_or_else(|| format!("tenant{}", std::process::id()));
    // --in-memory: hugepages backed by memfd, shared with the switch over vhost-user, and nothing
    // left in /dev/hugepages however the process ends.
    let eal_args: Vec<String> = [
        "slaswitch-tenant",
        "--file-prefix",
        &prefix,
        "--no-pci",
        "--in-memory",
        "--single-file-segments",
        "--log-level",
        "*:warning",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let eal = Eal::init(c.core, &eal_args)?;
    let mbufs = (c.vms.len() as u32 * (2 * u32::from(ring) + 1024)).next_power_of_two() - 1;
    let pool = Mempool::new(&eal, "tenant_pool", mbufs, 256, 2048 + 128)
        .with_context(|| format!("asked for {mbufs} mbufs for {} VMs with {ring}-descriptor rings", c.vms.len()))?;
    let mut ports = Vec::new();
    for (i, vm) in c.vms.iter().enumerate() {
        let (dev, args) = device(i, vm, ring, c.queues, c.virtio_ring);
        let port = EthPort::create_vdev(&eal, &dev, &args).with_context(|| format!("VM {}", vm.name))?;
        let setup = PortSetup { rx_ring: ring, tx_ring: ring, queues: c.queues, ..PortSetup::default() };
        port.setup_with(&pool, &setup).with_context(|| format!("VM {}", vm.name))?;
        ports.push((dev, port));
    }
    let waited = std::time::Instant::now();
    while !ports.iter().all(|(_, p)| p.link_up()) && waited.elapsed().as_secs_f64() < c.link_timeout_secs {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for ((_, p), vm) in ports.iter().zip(&c.vms) {
        if !p.link_up() {
            eprintln!(
                "slaswitch-tenant: VM {}: link still down after {} s (is the switch port there?)",
                vm.name, c.link_timeout_secs
            );
        }
    }
    Ok((eal, pool, ports))
}

/// The DPDK device of VM number `i`: virtio-user on its vhost-user socket (with a control
/// queue to enable its queue pairs when it has several), or af_packet.
fn device(i: usize, vm: &Vm, ring: u16, queues: u16, layout: VirtioRing) -> (String, String) {
    match vm.socket.strip_prefix("af_packet:") {
        // The kernel interface has its own MAC; frames carry the VM's MAC anyway, and the
        // interface is put in promiscuous mode by the driver.
        Some(iface) => (
            format!("net_af_packet{i}"),
            format!("iface={iface},qpairs={queues},blocksz=4096,framesz=2048,framecnt={ring}"),
        ),
        None => (
            format!("net_virtio_user{i}"),
            format!(
                "path={},queues={queues}{},queue_size={ring},mac={}{}{}",
                vm.socket,
                if queues > 1 { ",cq=1" } else { "" },
                mac_text(mac_for(&vm.name)),
                if vm.server { ",server=1" } else { "" },
                layout.vdev_args()
            ),
        ),
    }
}

/// Runs the generators (and the sink VMs among them) and returns the summary.
fn run_gen(
    c: &Common,
    gen: &GenPlan,
    ports: &[Device],
    pool: &Mempool,
    tsc_hz: u64,
    run_for: RunFor<'_>,
    records: &mut Records,
) -> serde_json::Value {
    let is_sink = |name: &str| gen.sinks.iter().any(|s| s == name);
    let mut gens: Vec<GenVm> = c
        .vms
        .iter()
        .zip(ports)
        .filter(|(vm, _)| !is_sink(&vm.name))
        .map(|(vm, (_, port))| {
            let phases = gen.phases.iter().filter(|p| p.vm.as_deref().is_none_or(|n| n == vm.name)).cloned().collect();
            let mut g = GenVm::new(&vm.name, *port, phases).with_queues(c.queues).with_ring(c.ring_descriptors);
            g.keep_refused = gen.keep_refused;
            g
        })
        .collect();
    let sinks: Vec<SinkVm> = c
        .vms
        .iter()
        .zip(ports)
        .filter(|(vm, _)| is_sink(&vm.name))
        .map(|(vm, (_, port))| SinkVm { name: vm.name.clone(), port: *port })
        .collect();
    let sources: Vec<String> = gens.iter().map(|g| g.name.clone()).chain(c.sources.iter().cloned()).collect();
    let mut sink = (!sinks.is_empty()).then(|| sink::Sink::new(&sinks, &sources, pool, tsc_hz));
    let mut sink_records = Vec::new();
    let mut on_sink_record = |r: &sink::SinkRecord| sink_records.push(serde_json::to_value(r).expect("record"));
    let sink_arg = sink.as_mut().map(|s| (s, &mut on_sink_record as &mut dyn FnMut(&sink::SinkRecord)));
    generator::run(&mut gens, sink_arg, pool, tsc_hz, run_for, c.interval_secs, |r| {
        records.emit(serde_json::to_value(r).expect("record"))
    });
    records.sink_records = sink_records;
    let vms: Vec<_> = gens
        .iter()
        .map(|g| {
            json!({"vm": g.name, "mac": mac_text(mac_for(&g.name)), "sent_packets": g.sent_packets,
                   "sent_bytes": g.sent_bytes, "tx_ring_full": g.tx_full})
        })
        .collect();
    json!({"mode": "gen", "vms": vms, "sink_totals": sink.map(|s| s.totals())})
}

/// Where the per-interval records go: CSV rows as they come, or one JSON document at the end.
struct Records {
    out: Box<dyn Write>,
    csv: bool,
    csv_header: bool,
    records: Vec<serde_json::Value>,
    sink_records: Vec<serde_json::Value>,
}

impl Records {
    fn new(c: &Common) -> anyhow::Result<Records> {
        let out: Box<dyn Write> = match &c.out {
            Some(path) => Box::new(std::fs::File::create(path).with_context(|| format!("--out {}", path.display()))?),
            None => Box::new(std::io::sink()),
        };
        Ok(Records { out, csv: c.format == "csv", csv_header: false, records: Vec::new(), sink_records: Vec::new() })
    }

    fn emit(&mut self, rec: serde_json::Value) {
        if !self.csv {
            self.records.push(rec);
            return;
        }
        let obj = rec.as_object().expect("records are objects");
        if !self.csv_header {
            let _ = writeln!(self.out, "{}", obj.keys().cloned().collect::<Vec<_>>().join(","));
            self.csv_header = true;
        }
        let row: Vec<String> = obj
            .values()
            .map(|v| match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            })
            .collect();
        let _ = writeln!(self.out, "{}", row.join(","));
    }

    /// Writes the JSON document (JSON format with --out).
    fn finish(mut self, c: &Common, start_unix_secs: f64, summary: &serde_json::Value) -> anyhow::Result<()> {
        if self.csv || c.out.is_none() {
            return Ok(());
        }
        let doc = json!({"interval_secs": c.interval_secs, "start_unix_secs": start_unix_secs, "records": self.records,
                         "sink_records": self.sink_records, "summary": summary});
        Ok(writeln!(self.out, "{}", serde_json::to_string_pretty(&doc).expect("JSON"))?)
    }
}
