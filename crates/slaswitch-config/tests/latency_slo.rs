//! Latency SLOs (`latency_p99_us`): admitted only above what the latency class can promise
//! with the purchases in force, refused naming the figures; an SLO needs a purchase and a
//! latency class.

use slaswitch_config::allocation::{example_model, plan, Candidate};
use slaswitch_config::port::{PortSpec, PortType};
use slaswitch_config::port_settings::PortSettings;

fn port(name: &str, opts: &[(&str, &str)]) -> (PortSpec, PortSettings) {
    let spec = PortSpec {
        name: name.into(),
        port_type: PortType::Null,
        number: 1,
        options: opts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let settings = spec.validate().unwrap();
    (spec, settings)
}

fn admit(ports: &[&(PortSpec, PortSettings)]) -> Result<(), String> {
    let candidates: Vec<Candidate> =
        ports.iter().map(|(spec, settings)| Candidate { spec, settings, pmd_core: 0 }).collect();
    plan(&candidates, Some(&example_model()), 1, 1_000_000_000, "vm1").map(|_| ()).map_err(|e| e.to_string())
}

fn vm(slo_us: &str) -> (PortSpec, PortSettings) {
    let opts = [("bandwidth_bps", "10M"), ("profile_packet_bytes", "64"), ("priority", "1")];
    port("vm1", &[opts.as_slice(), &[("latency_p99_us", slo_us)]].concat())
}

#[test]
fn an_slo_is_admitted_only_above_what_the_class_can_promise() {
    // The example model prices a 64-byte frame at 200 cycles: a batch of 32 is 6.4 us on a
    // 1 GHz core; the flood (no priced purchase) is taken to cost as much.
    let flood = port("flood", &[("cycles_per_sec", "500000000")]);
    admit(&[&vm("13"), &flood]).unwrap();
    let e = admit(&[&vm("12"), &flood]).unwrap_err();
    assert!(e.contains("vm1's latency_p99_us=12") && e.contains("12.8 us on the PMD on core 0"), "{e}");
    // A 100 Mbit/s paced uplink adds a full frame on the wire and its own: 2 x 1542 bytes.
    let up = port("up", &[("uplink", "true"), ("link_rate_bps", "100M")]);
    admit(&[&vm("300"), &flood, &up]).unwrap();
    let e = admit(&[&vm("200"), &flood, &up]).unwrap_err();
    assert!(e.contains("246.7 us on the uplink"), "{e}");
    // Another latency-class VM on the link: its burst is ahead too.
    let other = port("vm2", &[("bandwidth_bps", "50M"), ("profile_packet_bytes", "64"), ("priority", "2")]);
    let e = admit(&[&vm("300"), &flood, &up, &other]).unwrap_err();
    assert!(e.contains("on the uplink"), "{e}");
    let off = port("up", &[("uplink", "true"), ("link_rate_bps", "100M"), ("link_latency", "off")]);
    let e = admit(&[&vm("300"), &off]).unwrap_err();
    assert!(e.contains("latency_p99_us=300") && e.contains("link_latency=off"), "{e}");
}

#[test]
fn an_slo_needs_a_purchase_and_a_latency_class() {
    let spec = |opts: &[(&str, &str)]| PortSpec {
        name: "vm1".into(),
        port_type: PortType::Null,
        number: 1,
        options: opts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let e = spec(&[("latency_p99_us", "50")]).validate().unwrap_err().to_string();
    assert!(e.contains("latency_p99_us=50") && e.contains("bandwidth_bps"), "{e}");
    let e = spec(&[("latency_p99_us", "50"), ("bandwidth_bps", "1M")]).validate().unwrap_err().to_string();
    assert!(e.contains("latency_p99_us=50") && e.contains("priority 1 or 2 (this port has 8)"), "{e}");
    let e = spec(&[("latency_p99_us", "0"), ("bandwidth_bps", "1M")]).validate().unwrap_err().to_string();
    assert!(e.contains("latency_p99_us=0") && e.contains("from 1 to 1000000"), "{e}");
}
