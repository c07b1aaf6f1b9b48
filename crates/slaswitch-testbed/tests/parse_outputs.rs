//! Reading the baselines' own text output, and turning cumulative counters into per-interval
//! samples.

use slaswitch_testbed::driver::Reading;
use slaswitch_testbed::samples::{from_csv, from_readings, to_csv};
use slaswitch_testbed::switch_ovs::{
    parse_aggregate, parse_meter_drops, parse_pmd_stats, parse_port_flows, parse_rxq_usage,
};

#[test]
fn ovs_flow_counters_per_input_port() {
    let text = " cookie=0x0, duration=3.1s, table=0, n_packets=1200, n_bytes=76800, priority=1,in_port=2 actions=meter:2,NORMAL
 cookie=0x0, duration=3.1s, table=0, n_packets=7, n_bytes=448, priority=1,in_port=\"vm2\" actions=NORMAL
 cookie=0x0, duration=3.1s, table=0, n_packets=3, n_bytes=192, priority=2,udp,in_port=2,tp_src=0x400/0xffc0 actions=output:1
 cookie=0x0, duration=3.1s, table=0, n_packets=5, n_bytes=300, priority=1000,tcp,nw_src=172.16.0.0/8 actions=NORMAL
 cookie=0x0, duration=3.1s, table=0, n_packets=9, n_bytes=900, priority=0 actions=NORMAL";
    let flows = parse_port_flows(text);
    assert_eq!(flows, vec![("2".to_string(), 1203.0, 76992.0), ("vm2".to_string(), 7.0, 448.0)]);
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
    let usage = parse_rxq_usage("pmd thread numa_id 0 core_id 0:\n  isolated : false\n  port: vm1               queue-id:  0 (enabled)   pmd usage: 45 %\n  port: up                queue-id:  0 (enabled)   pmd usage: NOT AVAIL\npmd thread numa_id 0 core_id 1:\n  isolated : false\n  port: vm2               queue-id:  0 (enabled)   pmd usage:  3 %\n");
    assert_eq!(
        usage,
        vec![("vm1".to_string(), 0, Some(45.0)), ("up".to_string(), 0, None), ("vm2".to_string(), 1, Some(3.0))]
    );
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
    let get = |subject: &str, metric: &str| {
        samples.iter().find(|s| s.subject == subject && s.metric == metric).map(|s| s.value)
    };
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

#[test]
fn ovs_aggregate_of_rules() {
    let text = "OFPST_AGGREGATE reply (OF1.3) (xid=0x2): packet_count=9001 byte_count=576064 flow_count=60000\n";
    assert_eq!(parse_aggregate(text), Some((9001.0, 576064.0)));
    assert_eq!(parse_aggregate("OFPT_ERROR"), None);
}

use slaswitch_testbed::namespaces::{parse_iperf3, parse_output, parse_qperf, parse_sockperf, parse_wrk};

#[test]
fn iperf3_json_per_interval_and_total() {
    let text = r#"{"intervals": [{"sum": {"start": 0, "end": 1.0001, "bits_per_second": 2.0e9}}, {"sum": {"start": 1, "end": 2.0, "bits_per_second": 1.5e9}}],
                   "end": {"sum_sent": {"bits_per_second": 1.8e9, "end": 2.0}, "sum_received": {"end": 2.0, "bits_per_second": 1.75e9}}}"#;
    let s = parse_iperf3(text, "vm1");
    let v: Vec<(f64, &str, f64)> = s.iter().map(|x| (x.t_secs, x.metric.as_str(), x.value)).collect();
    assert_eq!(
        v,
        vec![
            (1.0001, "iperf3_mbps", 2000.0),
            (2.0, "iperf3_mbps", 1500.0),
            (2.0, "iperf3_longest_stall_s", 0.0),
            (2.0, "iperf3_received_mbps", 1750.0)
        ]
    );
    assert!(s.iter().all(|x| x.source == "app" && x.subject == "vm1"));
    assert!(parse_iperf3("iperf3: error - unable to connect", "vm1").is_empty());
}

/// iperf3's `intervals` entries for back-to-back intervals of `secs` at `rates` (bit/s).
fn iperf3_intervals(rates: &[f64], secs: f64) -> String {
    let one = |i: usize, r: f64| {
        let (start, end) = (i as f64 * secs, (i + 1) as f64 * secs);
        format!(r#"{{"sum": {{"start": {start}, "end": {end}, "bits_per_second": {r}}}}}"#)
    };
    rates.iter().enumerate().map(|(i, r)| one(i, *r)).collect::<Vec<_>>().join(",")
}

#[test]
fn iperf3_longest_stall_is_the_longest_run_of_near_empty_intervals() {
    // 0.1-s intervals at 100 Mbit/s, one empty interval, then a 0.3-s outage with a trickle.
    let rates = [100e6, 100e6, 0.0, 100e6, 1e6, 0.0, 2e6, 100e6, 100e6, 100e6];
    let text = format!(r#"{{"intervals": [{}], "end": {{}}}}"#, iperf3_intervals(&rates, 0.1));
    let s = parse_iperf3(&text, "vm1");
    let stall = s.iter().find(|x| x.metric == "iperf3_longest_stall_s").expect("a stall figure");
    assert!((stall.value - 0.3).abs() < 1e-9, "{}", stall.value);

    // Stalled for most of the run, and interrupted: the stall is measured against the rate it
    // had, and no receiver's total is made up.
    let rates = [100e6, 100e6, 100e6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let text = format!(
        r#"{{"intervals": [{}], "end": {{"sum_received": {{"end": 10, "bits_per_second": 0}}}}, "error": "interrupt - the client has terminated"}}"#,
        iperf3_intervals(&rates, 1.0)
    );
    let s = parse_iperf3(&text, "vm1");
    assert_eq!(s.iter().find(|x| x.metric == "iperf3_longest_stall_s").map(|x| x.value), Some(7.0));
    assert!(!s.iter().any(|x| x.metric == "iperf3_received_mbps"));
}

#[test]
fn wrk_latency_distribution_and_rate() {
    let text = "Running 10s test @ http://10.77.0.1/
  2 threads and 10 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   210.52us   80.11us   3.10ms   90.00%
  Latency Distribution
     50%  195.00us
     75%  230.00us
     90%    1.50ms
     99%    2.80ms
  98765 requests in 10.00s, 80.00MB read
Requests/sec:   9876.50
Transfer/sec:      8.00MB";
    let s = parse_wrk(text, "web", 10.0);
    let get = |m: &str| s.iter().find(|x| x.metric == m).map(|x| x.value);
    assert_eq!(get("wrk_lat_p50_us"), Some(195.0));
    assert_eq!(get("wrk_lat_p90_us"), Some(1500.0));
    assert_eq!(get("wrk_lat_p99_us"), Some(2800.0));
    assert_eq!(get("wrk_requests_per_sec"), Some(9876.5));
    assert_eq!(s.len(), 5);
}

#[test]
fn qperf_and_sockperf_results() {
    let q = parse_qperf("tcp_lat:\n    latency  =  26.5 us\ntcp_bw:\n    bw  =  1.25 GB/sec\n", "vm1", 5.0);
    assert_eq!(
        q.iter().map(|x| (x.metric.as_str(), x.value)).collect::<Vec<_>>(),
        vec![("qperf_tcp_lat_us", 26.5), ("qperf_tcp_bw_mbps", 10000.0)]
    );
    let text = "sockperf: Summary: Latency is 12.345 usec
sockperf: ---> <MAX> observation =   40.000
sockperf: ---> percentile 99.000 =   20.500
sockperf: ---> percentile 50.000 =   11.000";
    let s = parse_sockperf(text, "vm1", 5.0);
    assert_eq!(
        s.iter().map(|x| (x.metric.as_str(), x.value)).collect::<Vec<_>>(),
        vec![("sockperf_avg_lat_us", 12.345), ("sockperf_lat_p99_us", 20.5), ("sockperf_lat_p50_us", 11.0)]
    );
    assert!(parse_output("nginx -g 'daemon off;'", "whatever", "up", 1.0).is_empty());
}

#[test]
fn ping_summary_and_loss() {
    let text = "PING 10.77.0.1 (10.77.0.1) 56(84) bytes of data.

--- 10.77.0.1 ping statistics ---
1000 packets transmitted, 998 received, 0.2% packet loss, time 9990ms
rtt min/avg/max/mdev = 0.045/0.061/0.102/0.012 ms";
    let s = parse_output("sleep 1; ping -q -c 1000 10.77.0.1", text, "vm1", 10.0);
    let get = |m: &str| s.iter().find(|x| x.metric == m).map(|x| x.value);
    assert_eq!(get("ping_rtt_avg_us"), Some(61.0));
    assert_eq!(get("ping_rtt_max_us"), Some(102.0));
    assert_eq!(get("ping_loss_pct"), Some(0.2));
    assert_eq!(s.len(), 5);
}

#[test]
fn busybox_ping_summary_from_a_guest() {
    let text = "PING 10.77.0.1 (10.77.0.1): 56 data bytes

--- 10.77.0.1 ping statistics ---
20 packets transmitted, 19 packets received, 5% packet loss
round-trip min/avg/max = 1.359/3.428/30.742 ms";
    let s = parse_output("ping -q -i 0.2 -c 20 10.77.0.1", text, "vm1", 4.0);
    let get = |m: &str| s.iter().find(|x| x.metric == m).map(|x| x.value);
    assert_eq!(get("ping_rtt_min_us"), Some(1359.0));
    assert_eq!(get("ping_rtt_avg_us"), Some(3428.0));
    assert_eq!(get("ping_loss_pct"), Some(5.0));
    assert_eq!(s.len(), 4);
}

#[test]
fn short_flow_times_and_meter_rates() {
    let flows = r#"{"short_flows":[{"size_bytes":8192,"interval_ms":10,"started":100,"completed":98,"fct_mean_us":300.5,"fct_p50_us":250.0,"fct_p90_us":400.0,"fct_p99_us":900.0}]}"#;
    let s = parse_output("slaswitch-flows client --to 10.77.0.1:5300", flows, "x", 20.0);
    let get = |m: &str| s.iter().find(|x| x.metric == m).map(|x| x.value);
    assert_eq!(get("fct_8KB_10ms_mean_us"), Some(300.5));
    assert_eq!(get("fct_8KB_10ms_p99_us"), Some(900.0));
    assert_eq!(get("fct_8KB_10ms_incomplete"), Some(2.0));
    let meter = r#"{"meter":{"bin_us":1000,"event_secs":5.0,"sources":[{"name":"y","ip":"10.77.0.11","converge_ms":2.0,"steady_mbps":310.0,"fine_from_bin":4900,"fine_mbps":[0.0,300.0],"per_100ms_mbps":[0.0,305.0]}]}}"#;
    let s = parse_output("slaswitch-flows meter --name 10.77.0.11=y", meter, "server", 20.0);
    let fine: Vec<(f64, f64)> =
        s.iter().filter(|x| x.metric == "rate_fine_mbps").map(|x| (x.t_secs, x.value)).collect();
    assert_eq!(fine.len(), 2);
    assert!((fine[0].0 + 0.1).abs() < 1e-9 && (fine[1].0 + 0.099).abs() < 1e-9, "seconds since y started: {fine:?}");
    assert_eq!((fine[0].1, fine[1].1), (0.0, 300.0));
    assert!(s.iter().all(|x| x.subject == "y"), "samples name the sender, not the receiver");
    assert!(s.iter().any(|x| x.metric == "converge_ms" && x.value == 2.0));
    assert_eq!(s.iter().filter(|x| x.metric == "rate_100ms_mbps").count(), 2);
}
