//! Reading the baselines' own text output, and turning cumulative counters into per-interval
//! samples.

use slaswitch_testbed::driver::Reading;
use slaswitch_testbed::samples::{from_csv, from_readings, to_csv};
use slaswitch_testbed::switch_ovs::{parse_meter_drops, parse_pmd_stats, parse_port_flows, parse_rxq_usage};

#[test]
fn ovs_flow_counters_per_input_port() {
    let text = " cookie=0x0, duration=3.1s, table=0, n_packets=1200, n_bytes=76800, priority=1,in_port=2 actions=meter:2,NORMAL
 cookie=0x0, duration=3.1s, table=0, n_packets=7, n_bytes=448, priority=1,in_port=\"vm2\" actions=NORMAL
 cookie=0x0, duration=3.1s, table=0, n_packets=5, n_bytes=300, priority=1000,tcp,nw_src=172.16.0.0/8 actions=NORMAL
 cookie=0x0, duration=3.1s, table=0, n_packets=9, n_bytes=900, priority=0 actions=NORMAL";
    let flows = parse_port_flows(text);
    assert_eq!(flows, vec![("2".to_string(), 1200.0, 76800.0), ("vm2".to_string(), 7.0, 448.0)]);
}

#[test]
fn ovs_pmd_stats_and_rxq_usage() {
    let text = "pmd thread numa_id 0 core_id 0:
  packets received: 1000
  packet recirculations: 0
  avg. datapath passes per packet: 1.00
  phwol hits: 0
  mfex opt hits: 0
  simple match hits: 0
  emc hits: 200
  smc hits: 0
  megaflow hits: 790
  avg. subtable lookups per megaflow hit: 1.00
  miss with success upcall: 10
  miss with failed upcall: 0
  avg. packets per output batch: 32.00
  idle cycles: 500 (33.33%)
  processing cycles: 1000 (66.67%)
  avg cycles per packet: 1.50 (1500/1000)
  avg processing cycles per packet: 1.00 (1000/1000)
main thread:
  packets received: 0";
    let stats = parse_pmd_stats(text);
    assert_eq!(stats, vec![(0, vec![500.0, 1000.0, 1000.0, 200.0, 0.0, 790.0, 10.0])]);
    let usage = parse_rxq_usage("pmd thread numa_id 0 core_id 0:\n  isolated : false\n  port: vm1               queue-id:  0 (enabled)   pmd usage: 45 %\n  port: up                queue-id:  0 (enabled)   pmd usage: NOT AVAIL\n");
    assert_eq!(usage, vec![("vm1".to_string(), 45.0)]);
}

#[test]
fn counters_become_rates_and_shares() {
    let at = |busy: f64, idle: f64, rx: f64, port_busy: f64| {
        vec![
            Reading::counter("pmd0", "busy_cycles", busy),
            Reading::counter("pmd0", "idle_cycles", idle),
            Reading::counter("vm1", "rx_packets", rx),
            Reading::counter("vm1", "rx_bytes", rx * 64.0),
            Reading::counter("vm1", "busy_cycles", port_busy),
            Reading::gauge("vm1", "pmd_usage_avg60s_pct", 40.0),
        ]
    };
    let readings = vec![at(0.0, 0.0, 0.0, 0.0), at(750.0, 250.0, 100_000.0, 500.0)];
    let samples = from_readings(&[0.5, 1.5], &readings, "slaswitch", "run");
    let get = |subject: &str, metric: &str| samples.iter().find(|s| s.subject == subject && s.metric == metric).map(|s| s.value);
    assert_eq!(get("pmd0", "busy_pct"), Some(75.0));
    assert_eq!(get("vm1", "rx_kpps"), Some(100.0));
    assert_eq!(get("vm1", "rx_mbps"), Some(51.2));
    assert_eq!(get("vm1", "pmd_share_pct"), Some(50.0));
    assert_eq!(get("vm1", "cycles_per_packet"), Some(0.005));
    assert_eq!(get("vm1", "pmd_usage_avg60s_pct"), Some(40.0));
    assert!(samples.iter().all(|s| s.t_secs == 1.5 && s.source == "switch"));
    // The CSV form reads back to the same samples.
    assert_eq!(from_csv(&to_csv(&samples)).unwrap(), samples);
    assert!(from_csv("a,b\n").is_err());
}

#[test]
fn ovs_meter_drops_per_meter() {
    let text = "OFPST_METER reply (OF1.3) (xid=0x2):
meter:2 flow_count:1 packet_in_count:361943 byte_in_count:23164352 duration:5s bands:
0: packet_count:324853 byte_count:20790592
meter:3 flow_count:1 packet_in_count:10 byte_in_count:640 duration:5s bands:
0: packet_count:0 byte_count:0
";
    assert_eq!(parse_meter_drops(text), vec![(2, 324853.0, 20790592.0), (3, 0.0, 0.0)]);
}
