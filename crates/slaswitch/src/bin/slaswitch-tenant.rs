//! slaswitch-tenant: one or many emulated VMs attached to the switch over vhost-user (DPDK
//! virtio-user, the frontend protocol QEMU's guests speak).
//!
//!   slaswitch-tenant --vm vm1=/var/run/slaswitch/vm1.sock [--vm ...] gen --phase "rate=1mpps,size=64" [--phase ...]
//!   slaswitch-tenant --vm sink=/var/run/slaswitch/sink.sock sink --source vm1 --source vm2
//!   slaswitch-tenant --vm vm1=... --vm up=... gen --sink up --phase ...   (senders and sink in one loop)
//!
//! Common options: --core N (default 1), --ring N (virtio ring, up to 32768; the mbuf pool is sized
//! to match), --duration S, --interval S (default 1), --out FILE, --format json|csv,
//! --file-prefix NAME, --link-timeout S. gen --keep-refused: at full speed a VM keeps the frames
//! its ring refused and offers them again before building new ones. Append ",server" to a
//! socket when the switch port is a vhost-user-client (the VM side then listens). A socket
//! written `af_packet:IFACE` attaches the VM to a kernel interface instead (a veth or tap in a
//! Linux bridge or VDE2 switch).

use std::io::Write;

use serde_json::json;
use slaswitch::args::Args;
use slaswitch::tenant::frames::{mac_for, mac_text};
use slaswitch::tenant::generator::{self, GenVm};
use slaswitch::tenant::phase::Phase;
use slaswitch::tenant::sink::{self, SinkVm};
use slaswitch_dpdk::{remove_vdev, Eal, EthPort, Mempool};

fn main() {
    if let Err(e) = run() {
        eprintln!("slaswitch-tenant: {e}");
        std::process::exit(1);
    }
}

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

fn run() -> Result<(), String> {
    let a = Args::parse(
        std::env::args().skip(1),
        &[
            "vm",
            "core",
            "ring",
            "duration",
            "interval",
            "out",
            "format",
            "file-prefix",
            "phase",
            "script",
            "source",
            "sink",
            "link-timeout",
        ],
        &["help", "keep-refused"],
    )?;
    if a.flag("help") || a.positional.is_empty() {
        println!(
            "{}",
            include_str!("slaswitch-tenant.rs")
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .skip(2)
                .map(|l| l.trim_start_matches("//!"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return if a.flag("help") { Ok(()) } else { Err("say gen or sink".into()) };
    }
    let mode = a.positional[0].as_str();
    if mode != "gen" && mode != "sink" {
        return Err(format!("unknown mode '{mode}': gen or sink"));
    }
    let vms: Vec<Vm> = a.all("vm").iter().map(|s| parse_vm(s)).collect::<Result<_, _>>()?;
    if vms.is_empty() {
        return Err("at least one --vm NAME=SOCKET is needed".into());
    }
    let ring: u16 = a.parsed("ring", 1024)?;
    if !(64..=32768).contains(&ring) || !ring.is_power_of_two() {
        return Err(format!("--ring {ring}: a power of two from 64 to 32768"));
    }
    let duration: f64 = a.parsed("duration", 10.0)?;
    let interval: f64 = a.parsed("interval", 1.0)?;
    let format = a.get("format").unwrap_or("json");
    if format != "json" && format != "csv" {
        return Err(format!("--format {format}: json or csv"));
    }
    let mut phases: Vec<Phase> = a.all("phase").iter().map(|p| p.parse()).collect::<Result<_, _>>()?;
    if let Some(script) = a.get("script") {
        let text = std::fs::read_to_string(script).map_err(|e| format!("--script {script}: {e}"))?;
        for (i, line) in
            text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        {
            phases.push(line.parse().map_err(|e| format!("{script}:{}: {e}", i + 1))?);
        }
    }
    let sink_names = a.all("sink");
    for name in sink_names {
        if !vms.iter().any(|v| &v.name == name) {
            return Err(format!("--sink {name} is not one of this process's --vm"));
        }
    }
    if mode == "sink" && !sink_names.is_empty() {
        return Err("--sink belongs to gen mode (in sink mode every VM receives)".into());
    }
    if !sink_names.is_empty() && format == "csv" {
        return Err("--sink with --format csv: sender and sink records differ, use --format json".into());
    }
    if mode == "gen" && phases.is_empty() {
        return Err("gen needs at least one --phase (or --script)".into());
    }
    for p in &phases {
        if let Some(vm) = &p.vm {
            if !vms.iter().any(|v| &v.name == vm) {
                return Err(format!("a phase names vm={vm}, which is not one of this process's --vm"));
            }
        }
    }

    let core: usize = a.parsed("core", 1)?;
    let prefix = a.get("file-prefix").map(str::to_string).unwrap_or_else(|| format!("tenant{}", std::process::id()));
    // --in-memory: hugepages backed by memfd, shared with the switch over vhost-user, and nothing
    // left in /dev/hugepages however the process ends.
    let eal_args: Vec<String> = [
        "slaswitch-tenant",
        "-l",
        &core.to_string(),
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
    let eal = Eal::init(&eal_args).map_err(|e| e.to_string())?;
    let mbufs = (vms.len() as u32 * (2 * u32::from(ring) + 1024)).next_power_of_two() - 1;
    let pool = Mempool::new(&eal, "tenant_pool", mbufs, 256, 2048 + 128)
        .map_err(|e| format!("{e} (asked for {mbufs} mbufs for {} VMs with {ring}-descriptor rings)", vms.len()))?;
    let mut ports = Vec::new();
    for (i, vm) in vms.iter().enumerate() {
        let (dev, args) = match vm.socket.strip_prefix("af_packet:") {
            // The kernel interface has its own MAC; frames carry the VM's MAC anyway, and the
            // interface is put in promiscuous mode by the driver.
            Some(iface) => (
                format!("net_af_packet{i}"),
                format!("iface={iface},qpairs=1,blocksz=4096,framesz=2048,framecnt={ring}"),
            ),
            None => (
                format!("net_virtio_user{i}"),
                format!(
                    "path={},queues=1,queue_size={ring},mac={}{}{}",
                    vm.socket,
                    mac_text(mac_for(&vm.name)),
                    if vm.server { ",server=1" } else { "" },
                    std::env::var("SLASWITCH_TENANT_VDEV_EXTRA").unwrap_or_default()
                ),
            ),
        };
        let port = EthPort::create_vdev(&eal, &dev, &args).map_err(|e| format!("VM {}: {e}", vm.name))?;
        port.setup(ring, ring, &pool).map_err(|e| format!("VM {}: {e}", vm.name))?;
        ports.push((dev, port));
    }
    let timeout: f64 = a.parsed("link-timeout", 15.0)?;
    let waited = std::time::Instant::now();
    while !ports.iter().all(|(_, p)| p.link_up()) && waited.elapsed().as_secs_f64() < timeout {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for ((_, p), vm) in ports.iter().zip(&vms) {
        if !p.link_up() {
            eprintln!(
                "slaswitch-tenant: VM {}: link still down after {timeout} s (is the switch port there?)",
                vm.name
            );
        }
    }

    let mut out: Box<dyn Write> = match a.get("out") {
        Some(path) => Box::new(std::fs::File::create(path).map_err(|e| format!("--out {path}: {e}"))?),
        None => Box::new(std::io::sink()),
    };
    let mut records: Vec<serde_json::Value> = Vec::new();
    let mut csv_header = false;
    let mut emit = |rec: serde_json::Value| {
        if format == "csv" {
            let obj = rec.as_object().expect("records are objects");
            if !csv_header {
                let _ = writeln!(out, "{}", obj.keys().cloned().collect::<Vec<_>>().join(","));
                csv_header = true;
            }
            let row: Vec<String> = obj
                .values()
                .map(|v| match v {
                    serde_json::Value::Null => String::new(),
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                })
                .collect();
            let _ = writeln!(out, "{}", row.join(","));
        } else {
            records.push(rec);
        }
    };
    let tsc_hz = eal.tsc_hz();
    let start_unix_secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let mut sink_records: Vec<serde_json::Value> = Vec::new();
    let summary = if mode == "gen" {
        let is_sink = |name: &str| sink_names.iter().any(|s| s == name);
        let mut gens: Vec<GenVm> = vms
            .iter()
            .zip(&ports)
            .filter(|(vm, _)| !is_sink(&vm.name))
            .map(|(vm, (_, port))| {
                let mut g = GenVm::new(
                    &vm.name,
                    *port,
                    phases.iter().filter(|p| p.vm.as_deref().is_none_or(|n| n == vm.name)).cloned().collect(),
                );
                g.keep_refused = a.flag("keep-refused");
                g
            })
            .collect();
        let sinks: Vec<SinkVm> = vms
            .iter()
            .zip(&ports)
            .filter(|(vm, _)| is_sink(&vm.name))
            .map(|(vm, (_, port))| SinkVm { name: vm.name.clone(), port: *port })
            .collect();
        let sources: Vec<String> = gens.iter().map(|g| g.name.clone()).chain(a.all("source").iter().cloned()).collect();
        let mut sink = (!sinks.is_empty()).then(|| sink::Sink::new(&sinks, &sources, &pool, tsc_hz));
        let mut on_sink_record = |r: &sink::SinkRecord| sink_records.push(serde_json::to_value(r).expect("record"));
        let sink_arg = sink.as_mut().map(|s| (s, &mut on_sink_record as &mut dyn FnMut(&sink::SinkRecord)));
        generator::run(&mut gens, sink_arg, &pool, tsc_hz, duration, interval, |r| {
            emit(serde_json::to_value(r).expect("record"))
        });
        let totals = sink.map(|s| s.totals());
        json!({"mode": "gen", "core": core, "start_unix_secs": start_unix_secs,
               "vms": gens.iter().map(|g| json!({"vm": g.name, "mac": mac_text(mac_for(&g.name)), "sent_packets": g.sent_packets, "sent_bytes": g.sent_bytes, "tx_ring_full": g.tx_full})).collect::<Vec<_>>(),
               "sink_totals": totals})
    } else {
        let sinks: Vec<SinkVm> =
            vms.iter().zip(&ports).map(|(vm, (_, port))| SinkVm { name: vm.name.clone(), port: *port }).collect();
        let totals = sink::run(&sinks, a.all("source"), &pool, tsc_hz, duration, interval, |r| {
            emit(serde_json::to_value(r).expect("record"))
        });
        json!({"mode": "sink", "core": core, "start_unix_secs": start_unix_secs, "totals": totals})
    };
    if format == "json" && a.get("out").is_some() {
        let doc = json!({"interval_secs": interval, "start_unix_secs": start_unix_secs, "records": records, "sink_records": sink_records, "summary": summary});
        writeln!(out, "{}", serde_json::to_string_pretty(&doc).expect("JSON")).map_err(|e| e.to_string())?;
    }
    println!("{summary}");
    if vms.iter().any(|v| v.server) {
        // DPDK 22.11's virtio-user aborts when a server-mode device that has reconnected is
        // closed ("Reconnect callback call failed"); with --in-memory there is nothing to clean.
        use std::io::Write as _;
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
