//! The megaflow tier against a naive scan of the rules: under random rule sets, random traffic and
//! random rule changes (revalidated), every answer the cache gives is the one the rules give.

use proptest::prelude::*;
use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::megaflow::MegaflowCache;
use slaswitch_classifier::security_group::security_group_rules;
use slaswitch_classifier::*;

/// Addresses close to each other, so prefixes of different lengths overlap.
const ADDRESSES: [[u8; 4]; 6] =
    [[10, 0, 0, 0], [10, 1, 0, 0], [10, 1, 2, 0], [10, 1, 2, 3], [172, 16, 0, 0], [192, 168, 1, 0]];
const LENGTHS: [u8; 6] = [1, 8, 12, 16, 24, 32];
const PORTS: [u16; 3] = [80, 443, 8080];

fn ip_text(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

fn prefix() -> impl Strategy<Value = Option<(usize, usize)>> {
    prop::option::of((0..ADDRESSES.len(), 0..LENGTHS.len()))
}

/// A rule's text from small domains: overlapping matches and tied priorities are common.
fn rule_text() -> impl Strategy<Value = String> {
    (
        0u32..6,
        prop::option::of(1u16..4),
        prop::option::of(prop::bool::ANY),
        prefix(),
        prefix(),
        prop::option::of(0..PORTS.len()),
        prop::option::of(1u16..5),
    )
        .prop_map(|(priority, in_port, tcp, src, dst, port, output)| {
            let mut t = format!("priority={priority}");
            if let Some(p) = in_port {
                t += &format!(",in_port={p}");
            }
            let l4 = tcp.map(|tcp| if tcp { "tcp" } else { "udp" });
            t += &match l4 {
                Some(p) => format!(",{p}"),
                None if src.is_some() || dst.is_some() => ",ip".into(),
                None => String::new(),
            };
            if let Some((a, l)) = src {
                t += &format!(",nw_src={}/{}", ip_text(ADDRESSES[a]), LENGTHS[l]);
            }
            if let Some((a, l)) = dst {
                t += &format!(",nw_dst={}/{}", ip_text(ADDRESSES[a]), LENGTHS[l]);
            }
            if let (Some(p), Some(_)) = (port, l4) {
                t += &format!(",tp_dst={}", PORTS[p]);
            }
            t += &match output {
                Some(p) => format!(",actions=output:{p}"),
                None => ",actions=drop".into(),
            };
            t
        })
}

fn rule(text: &str) -> Rule {
    Rule::parse(text, &|p: &str| p.parse().ok()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A packet near the rules' addresses: one of them with its low bits perturbed.
fn packet() -> impl Strategy<Value = FlowKey> {
    (1u16..4, prop::bool::ANY, 0..ADDRESSES.len(), any::<u16>(), 0..ADDRESSES.len(), any::<u16>(), 0..4usize).prop_map(
        |(in_port, tcp, s, s_low, d, d_low, port)| {
            let ip = |a: [u8; 4], low: u16| {
                let mut x = [0u8; 16];
                x[..4].copy_from_slice(&a);
                x[1] ^= (low >> 12) as u8;
                x[2] ^= (low >> 6) as u8 & 0x3f;
                x[3] ^= low as u8 & 0x3f;
                x
            };
            let mut k = FlowKey::ZERO;
            k.set_in_port(in_port);
            k.set_eth_type(0x0800);
            k.set_ip_version(4);
            k.set_ip_proto(if tcp { 6 } else { 17 });
            k.set_ip_src(ip(ADDRESSES[s], s_low));
            k.set_ip_dst(ip(ADDRESSES[d], d_low));
            k.set_l4_src(1000);
            k.set_l4_dst(*PORTS.get(port).unwrap_or(&1234));
            k
        },
    )
}

/// Checks the cache's answer for `key` against the rules, and that `other`, taken under the
/// answer's mask from `key`, gets the same answer from the rules: the data plane reuses an answer
/// for the packets after it that agree with its key on that mask.
fn check(
    cache: &mut MegaflowCache,
    c: &Classifier,
    rules: &[Rule],
    key: &FlowKey,
    other: &FlowKey,
) -> Result<(), TestCaseError> {
    let answer = cache.resolve(c, key);
    let got = answer.rule;
    let mut mixed = *other;
    for i in 0..flow_key::WORDS {
        mixed.0[i] = (key.0[i] & answer.mask.0[i]) | (other.0[i] & !answer.mask.0[i]);
    }
    prop_assert_eq!(c.lookup(&mixed).unwrap_or(NO_RULE), got);
    prop_assert_eq!(got, c.lookup(key).unwrap_or(NO_RULE));
    let priority = (got != NO_RULE).then(|| c.rule(got).priority);
    prop_assert_eq!(priority, rule::scan_priority(rules, key));
    if got != NO_RULE {
        prop_assert!(c.rule(got).matcher.matches(key));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn megaflows_answer_as_a_naive_scan_through_rule_changes(
        texts in prop::collection::vec(rule_text(), 1..24),
        changes in prop::collection::vec((prop::bool::ANY, rule_text(), any::<prop::sample::Index>()), 1..6),
        packets in prop::collection::vec(packet(), 1..80),
    ) {
        let mut rules: Vec<Rule> = texts.iter().map(|t| rule(t)).collect();
        let mut c = Classifier::new(rules.clone());
        let mut cache = MegaflowCache::new();
        for (p, next) in packets.iter().zip(packets.iter().cycle().skip(1)) {
            check(&mut cache, &c, &rules, p, next)?;
        }
        for (add, text, at) in changes {
            if add || rules.is_empty() {
                rules.push(rule(&text));
            } else {
                rules.remove(at.index(rules.len()));
            }
            c = Classifier::new(rules.clone());
            cache.revalidate(&c);
            // Twice: the first pass may answer from revalidated entries or install new ones,
            // the second answers from the cache.
            for (p, next) in packets.iter().chain(&packets).zip(packets.iter().cycle().skip(1)) {
                check(&mut cache, &c, &rules, p, next)?;
            }
        }
    }

    #[test]
    fn keys_that_agree_on_the_wildcards_get_the_same_answer(
        texts in prop::collection::vec(rule_text(), 1..24),
        key in packet(),
        other in packet(),
    ) {
        let c = Classifier::new(texts.iter().map(|t| rule(t)).collect());
        let mut wildcards = FlowKey::ZERO;
        let answer = c.lookup_wc(&key, &mut wildcards);
        // `other` with every bit under the wildcards taken from `key`.
        let mut mixed = other;
        for i in 0..flow_key::WORDS {
            mixed.0[i] = (key.0[i] & wildcards.0[i]) | (other.0[i] & !wildcards.0[i]);
        }
        prop_assert_eq!(c.lookup(&mixed), answer);
    }
}

fn udp_from(src: [u8; 4], sport: u16) -> FlowKey {
    let f = parse::build::udp4([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], src, [192, 168, 1, 1], sport, 80, 64);
    parse_frame(&f, 1).unwrap()
}

#[test]
fn a_wide_security_group_gives_few_wide_megaflows() {
    // 100 source prefixes of every length from /8 to /32: without prefix tracking each source
    // address would need a megaflow of its own.
    let c = Classifier::new(security_group_rules(99));
    let mut cache = MegaflowCache::new();
    let mut full_lookups = 0;
    for i in 0..10_000u32 {
        let key = udp_from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], (i % 60000) as u16);
        if !cache.resolve(&c, &key).cached {
            full_lookups += 1;
        }
    }
    assert_eq!(full_lookups, 1, "{} megaflows in {} masks", cache.len(), cache.mask_count());
    assert_eq!(cache.len(), 1);
}

#[test]
fn revalidation_keeps_what_still_holds_and_drops_what_does_not() {
    let p = |s: &str| rule(s);
    let before =
        Classifier::new(vec![p("priority=10,ip,nw_dst=192.168.0.0/16,actions=output:2"), p("priority=0,actions=drop")]);
    let mut cache = MegaflowCache::new();
    let a = udp_from([10, 0, 0, 1], 1);
    let mut wildcards = FlowKey::ZERO;
    let v = before.lookup_wc(&a, &mut wildcards).unwrap();
    cache.insert(&a, &wildcards, v);
    // A rule on another input port's traffic: the flow's answer holds under its mask.
    let after = Classifier::new(vec![
        p("priority=20,in_port=2,actions=drop"),
        p("priority=10,ip,nw_dst=192.168.0.0/16,actions=output:2"),
        p("priority=0,actions=drop"),
    ]);
    let r = cache.revalidate(&after);
    assert_eq!((r.kept, r.removed), (0, 1), "the new rule looks at in_port, which the entry wildcards");
    cache.insert(
        &a,
        &{
            let mut w = FlowKey::ZERO;
            after.lookup_wc(&a, &mut w);
            w
        },
        after.lookup(&a).unwrap(),
    );
    // Same rules, renumbered: kept, with the new rule id.
    let renumbered = Classifier::new(vec![
        p("priority=0,actions=drop"),
        p("priority=20,in_port=2,actions=drop"),
        p("priority=10,ip,nw_dst=192.168.0.0/16,actions=output:2"),
    ]);
    let r = cache.revalidate(&renumbered);
    assert_eq!((r.kept, r.removed), (1, 0));
    assert_eq!(cache.lookup(&a), renumbered.lookup(&a));
    assert_eq!(renumbered.rule(cache.lookup(&a).unwrap()).actions, vec![Action::Output(2)]);
}
