//! Rule syntax, classifier semantics (priorities, masks), the exact-match cache and MAC learning.

use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::parse::build::udp4;
use slaswitch_classifier::security_group::security_group_rules;
use slaswitch_classifier::*;

fn ports(name: &str) -> Option<u16> {
    match name {
        "vm1" => Some(1),
        "vm2" => Some(2),
        "uplink" => Some(3),
        n => n.parse().ok(),
    }
}
fn rule(text: &str) -> Rule {
    Rule::parse(text, &ports).unwrap_or_else(|e| panic!("{text}: {e}"))
}
fn key(src: [u8; 4], dst: [u8; 4], dport: u16, in_port: u16) -> FlowKey {
    parse_frame(&udp4([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 8], src, dst, 1000, dport, 64), in_port).unwrap()
}

#[test]
fn highest_priority_match_wins_across_masks() {
    let c = Classifier::new(vec![
        rule("priority=10,ip,nw_dst=10.0.0.0/8,actions=output:vm1"),
        rule("priority=20,ip,nw_dst=10.1.0.0/16,actions=output:vm2"),
        rule("priority=30,udp,nw_dst=10.1.2.0/24,tp_dst=53,actions=drop"),
        rule("priority=5,in_port=uplink,actions=normal"),
    ]);
    assert_eq!(c.subtable_count(), 4);
    let action = |k: &FlowKey| c.lookup(k).map(|id| c.rule(id).actions[0]);
    assert_eq!(action(&key([1, 1, 1, 1], [10, 9, 9, 9], 80, 1)), Some(Action::Output(1)));
    assert_eq!(action(&key([1, 1, 1, 1], [10, 1, 9, 9], 80, 1)), Some(Action::Output(2)));
    assert_eq!(action(&key([1, 1, 1, 1], [10, 1, 2, 3], 53, 1)), Some(Action::Drop));
    assert_eq!(action(&key([1, 1, 1, 1], [10, 1, 2, 3], 54, 1)), Some(Action::Output(2)));
    assert_eq!(action(&key([1, 1, 1, 1], [11, 0, 0, 1], 80, 3)), Some(Action::Normal));
    assert_eq!(action(&key([1, 1, 1, 1], [11, 0, 0, 1], 80, 1)), None);
}

#[test]
fn a_masked_transport_port_matches_a_block_of_ports() {
    let c = Classifier::new(vec![
        rule("priority=20,udp,tp_dst=0x400/0xffc0,actions=output:vm2"),
        rule("priority=10,ip,actions=drop"),
    ]);
    let action = |dport: u16| c.lookup(&key([1, 1, 1, 1], [10, 0, 0, 1], dport, 1)).map(|id| c.rule(id).actions[0]);
    assert_eq!(action(1024), Some(Action::Output(2)));
    assert_eq!(action(1087), Some(Action::Output(2)));
    assert_eq!(action(1088), Some(Action::Drop));
    assert_eq!(action(1023), Some(Action::Drop));
    assert!(Rule::parse("udp,tp_dst=80/0x1ffff,actions=drop", &ports).unwrap_err().to_string().contains("tp_dst"));
}

#[test]
fn same_match_and_priority_replaces_and_deletes() {
    let c = Classifier::new(vec![
        rule("priority=10,in_port=1,actions=output:2"),
        rule("priority=10,in_port=1,actions=drop"),
    ]);
    assert_eq!(c.rules().len(), 1);
    assert_eq!(c.rules()[0].actions, vec![Action::Drop]);
    let c = Classifier::new(vec![
        rule("priority=10,in_port=1,actions=output:2"),
        rule("priority=11,in_port=1,actions=drop"),
        rule("in_port=2,actions=drop"),
    ]);
    let m = c.rules()[0].matcher;
    let (kept, removed) = c.without(Some(&m), None);
    assert_eq!((kept.len(), removed), (1, 2));
    let (kept, removed) = c.without(Some(&m), Some(11));
    assert_eq!((kept.len(), removed), (2, 1));
}

#[test]
fn rule_syntax_errors_name_the_problem() {
    let err = |t: &str| Rule::parse(t, &ports).unwrap_err().to_string();
    assert!(err("in_port=1").contains("actions="));
    assert!(err("in_port=nosuch,actions=drop").contains("no port named 'nosuch'"));
    assert!(err("nw_dst=10.0.0.0/8,actions=drop").contains("need ip"));
    assert!(err("ip,nw_dst=10.0.0.0/40,actions=drop").contains("/40"));
    assert!(err("tp_dst=80,actions=drop").contains("tcp, udp"));
    assert!(err("dl_src=zz:00:00:00:00:00,actions=drop").contains("MAC"));
    assert!(err("frobnicate=1,actions=drop").contains("frobnicate"));
    assert!(err("actions=output:1,drop").contains("drop cannot"));
    assert!(err("priority=70000,actions=drop").contains("priority"));
    assert_eq!(
        Rule::parse("ip,nw_src=10.0.0.300,actions=drop", &ports).unwrap_err(),
        RuleError::Value { field: "nw_src".into(), value: "10.0.0.300".into(), expected: "an IPv4 address".into() }
    );
}

#[test]
fn rules_print_back_to_text_that_parses_to_the_same_rule() {
    for text in [
        "priority=100,in_port=vm1,tcp,nw_src=10.0.0.0/24,tp_dst=80,actions=output:uplink",
        "priority=7,dl_dst=02:00:00:00:00:01,dl_vlan=10,actions=normal",
        "priority=9,ipv6,ipv6_dst=fe80::/10,actions=drop",
        "priority=2,in_port=vm1,udp,tp_src=0x400/0xffc0,actions=output:uplink",
    ] {
        let r = rule(text);
        let names = |p: u16| match p {
            1 => "vm1".to_string(),
            3 => "uplink".to_string(),
            n => n.to_string(),
        };
        let again = rule(&r.to_text(&names));
        assert_eq!(again, r, "{text} -> {}", r.to_text(&names));
    }
}

#[test]
fn exact_match_cache_hits_and_is_invalidated_when_rules_change() {
    let mut emc = ExactMatchCache::new();
    let k = key([1, 2, 3, 4], [5, 6, 7, 8], 80, 1);
    let h = k.hash64();
    assert_eq!(emc.lookup(&k, h), None);
    emc.insert(&k, h, 3);
    assert_eq!(emc.lookup(&k, h), Some(3));
    let other = key([1, 2, 3, 5], [5, 6, 7, 8], 80, 1);
    assert_eq!(emc.lookup(&other, other.hash64()), None, "a different flow never hits");
    emc.invalidate();
    assert_eq!(emc.lookup(&k, h), None, "a rule change empties the cache");
    emc.insert(&k, h, NO_RULE);
    assert_eq!(emc.lookup(&k, h), Some(NO_RULE));
    assert_eq!((emc.hits, emc.misses), (2, 3));
}

#[test]
fn many_flows_overflow_the_cache_and_one_flow_does_not() {
    let c = Classifier::new(security_group_rules(99));
    assert_eq!(c.subtable_count(), 100);
    let mut emc = ExactMatchCache::new();
    let mut run = |flows: usize, packets: usize| {
        let (h0, m0) = (emc.hits, emc.misses);
        for i in 0..packets {
            let f = i % flows;
            let k = key([10, (f >> 8) as u8, f as u8, 1], [192, 168, 0, 1], 80, 1);
            let h = k.hash64();
            if emc.lookup(&k, h).is_none() {
                emc.insert(&k, h, c.lookup(&k).unwrap_or(NO_RULE));
            }
        }
        (emc.hits - h0) as f64 / ((emc.hits - h0) + (emc.misses - m0)) as f64
    };
    assert!(run(1, 10_000) > 0.99);
    assert!(run(50_000, 100_000) < 0.3, "50k flows must mostly miss an 8192-entry cache");
}

#[test]
fn mac_learning_learns_ages_and_flushes() {
    let mut t = MacTable::new(4, 100);
    let a = [2, 0, 0, 0, 0, 1];
    t.learn(a, 0, 1, 0);
    assert_eq!(t.lookup(a, 0, 50), Some(1));
    assert_eq!(t.lookup(a, 5, 50), None, "VLANs are separate");
    t.learn(a, 0, 2, 60);
    assert_eq!(t.lookup(a, 0, 100), Some(2), "a move is relearned");
    assert_eq!(t.lookup(a, 0, 200), None, "aged out");
    t.learn([1, 0, 0, 0, 0, 1], 0, 1, 0);
    assert!(t.is_empty() || t.lookup([1, 0, 0, 0, 0, 1], 0, 0).is_none(), "multicast sources are not learned");
    for i in 0..10u8 {
        t.learn([2, 0, 0, 0, 1, i], 0, 3, 300);
    }
    assert_eq!(t.len(), 4, "capacity holds");
    t.flush_port(3);
    assert!(t.is_empty());
}

mod against_a_naive_scan {
    use proptest::prelude::*;
    use slaswitch_classifier::*;

    /// A rule over a few fields with small value ranges, so packets often match several rules.
    fn rule(prio: u32, src_bits: u32, src: u8, dport: Option<u16>, in_port: Option<u16>) -> Rule {
        let mut text = format!("priority={prio},udp,nw_src=10.{src}.0.0/{src_bits}");
        if let Some(p) = dport {
            text.push_str(&format!(",tp_dst={p}"));
        }
        if let Some(p) = in_port {
            text.push_str(&format!(",in_port={p}"));
        }
        text.push_str(",actions=drop");
        Rule::parse(&text, &|s: &str| s.parse().ok()).unwrap()
    }

    proptest! {
        /// The highest-priority matching rule, found by tuple space search (with both the
        /// hashed and the linear subtables), equals what a scan over every rule finds.
        #[test]
        fn lookup_finds_the_highest_priority_match(
            rules in prop::collection::vec((0u32..50, prop::sample::select(vec![8u32, 16]), 0u8..4, prop::option::of(0u16..3), prop::option::of(1u16..3)), 1..40),
            packets in prop::collection::vec((0u8..4, 0u8..4, 0u16..3, 1u16..3), 50),
        ) {
            let rules: Vec<Rule> = rules.into_iter().map(|(p, b, s, d, i)| rule(p, b, s, d, i)).collect();
            let c = Classifier::new(rules);
            for (a, b, dport, in_port) in packets {
                let f = parse::build::udp4([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [10, a, b, 1], [10, 9, 9, 9], 5, dport, 64);
                let key = parse_frame(&f, in_port).unwrap();
                let naive = c.rules().iter().filter(|r| r.matcher.matches(&key)).map(|r| r.priority).max();
                let found = c.lookup(&key).map(|id| c.rule(id).priority);
                prop_assert_eq!(found, naive);
            }
        }
    }
}

#[test]
fn rules_on_the_input_port_alone_answer_by_port() {
    let c = Classifier::new(vec![rule("in_port=1,actions=output:2"), rule("priority=1,actions=drop")]);
    let (one, other) = (c.by_in_port(1).unwrap(), c.by_in_port(5).unwrap());
    assert_eq!(c.rule(one.unwrap()).actions, vec![Action::Output(2)]);
    assert_eq!(c.rule(other.unwrap()).actions, vec![Action::Drop]);
    // A rule that looks at anything else needs the full lookup.
    let c = Classifier::new(vec![rule("in_port=1,actions=output:2"), rule("ip,actions=drop")]);
    assert_eq!(c.by_in_port(1), None);
    assert_eq!(Classifier::new(vec![]).by_in_port(1), None);
}
