//! Structured rule sets, packets and rule changes: the megaflow cache, revalidated after each
//! change, answers every packet as a scan of the rules would.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::rule::scan_priority;
use slaswitch_classifier::{Classifier, FlowKey, MegaflowCache, Rule};

#[derive(Arbitrary, Debug)]
struct RuleSpec {
    priority: u8,
    in_port: Option<u8>,
    tcp: Option<bool>,
    src: Option<([u8; 4], u8)>,
    dst: Option<([u8; 4], u8)>,
    tp_dst: Option<u16>,
    output: Option<u8>,
}

#[derive(Arbitrary, Debug)]
struct Packet {
    in_port: u8,
    tcp: bool,
    src: [u8; 4],
    dst: [u8; 4],
    tp_dst: u16,
}

#[derive(Arbitrary, Debug)]
struct Input {
    rules: Vec<RuleSpec>,
    packets: Vec<Packet>,
    changes: Vec<(Option<RuleSpec>, u8)>,
}

fn ip([a, b, c, d]: [u8; 4]) -> String {
    format!("{a}.{b}.{c}.{d}")
}

fn rule(s: &RuleSpec) -> Rule {
    let mut t = format!("priority={}", s.priority % 8);
    if let Some(p) = s.in_port {
        t += &format!(",in_port={}", p % 4);
    }
    t += match s.tcp {
        Some(true) => ",tcp",
        Some(false) => ",udp",
        None => ",ip",
    };
    for (field, prefix) in [("nw_src", s.src), ("nw_dst", s.dst)] {
        if let Some((a, len)) = prefix {
            t += &format!(",{field}={}/{}", ip(a), len % 33);
        }
    }
    if let (Some(port), Some(_)) = (s.tp_dst, s.tcp) {
        t += &format!(",tp_dst={}", port % 4);
    }
    t += &match s.output {
        Some(p) => format!(",actions=output:{p}"),
        None => ",actions=drop".into(),
    };
    Rule::parse(&t, &|p| p.parse().ok()).expect("generated rule parses")
}

fn key(p: &Packet) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(u16::from(p.in_port % 4));
    k.set_eth_type(0x0800);
    k.set_ip_version(4);
    k.set_ip_proto(if p.tcp { 6 } else { 17 });
    let v4 = |a: [u8; 4]| {
        let mut x = [0u8; 16];
        x[..4].copy_from_slice(&a);
        x
    };
    k.set_ip_src(v4(p.src));
    k.set_ip_dst(v4(p.dst));
    k.set_l4_dst(p.tp_dst % 4);
    k
}

fn check_all(cache: &mut MegaflowCache, c: &Classifier, rules: &[Rule], packets: &[Packet]) {
    for (p, next) in packets.iter().chain(packets).zip(packets.iter().cycle().skip(1)) {
        let k = key(p);
        let answer = cache.resolve(c, &k);
        let got = answer.rule;
        assert_eq!(got, c.lookup(&k).unwrap_or(NO_RULE));
        // The data plane gives the answer to a following packet that agrees on its mask.
        let mut mixed = key(next);
        for i in 0..mixed.0.len() {
            mixed.0[i] = (k.0[i] & answer.mask.0[i]) | (mixed.0[i] & !answer.mask.0[i]);
        }
        assert_eq!(c.lookup(&mixed).unwrap_or(NO_RULE), got);
        assert_eq!((got != NO_RULE).then(|| c.rule(got).priority), scan_priority(rules, &k));
    }
}

fuzz_target!(|input: Input| {
    let mut rules: Vec<Rule> = input.rules.iter().take(32).map(rule).collect();
    let packets = &input.packets[..input.packets.len().min(64)];
    let mut c = Classifier::new(rules.clone());
    let mut cache = MegaflowCache::new();
    check_all(&mut cache, &c, &rules, packets);
    for (change, at) in input.changes.iter().take(8) {
        match change {
            Some(spec) => rules.push(rule(spec)),
            None if !rules.is_empty() => {
                rules.remove(usize::from(*at) % rules.len());
            }
            None => continue,
        }
        c = Classifier::new(rules.clone());
        cache.revalidate(&c);
        check_all(&mut cache, &c, &rules, packets);
    }
});
