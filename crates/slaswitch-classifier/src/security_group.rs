//! A security-group-like rule set with a chosen number of distinct masks, as a cloud host
//! carries: allow rules on source prefixes of every length, with and without a destination
//! prefix and a destination port, then a default `normal`. Every rule's action is `normal`, so
//! forwarding is unchanged while classification pays for the masks (seed 000 Fig. 5c; the test
//! bed issue asks for this to make a PMD core the bottleneck).

use crate::rule::Rule;

/// `masks` distinct masks (1 to 100), one rule each, plus the default rule (mask all-wildcard,
/// which adds one more subtable).
pub fn security_group_rules(masks: usize) -> Vec<Rule> {
    let resolve = |p: &str| p.parse::<u16>().ok();
    let mut rules = Vec::new();
    for i in 0..masks.min(100) {
        let src_prefix = 8 + (i % 25);
        let with_port = (i / 25) % 2 == 1;
        let with_dst = i / 50 == 1;
        let mut text = format!("priority={},tcp,nw_src=172.{}.0.0/{}", 1000 + i, 16 + i % 16, src_prefix);
        if with_dst {
            text.push_str(",nw_dst=192.168.0.0/16");
        }
        if with_port {
            text.push_str(&format!(",tp_dst={}", 8000 + i));
        }
        text.push_str(",actions=normal");
        rules.push(Rule::parse(&text, &resolve).expect("generated rule parses"));
    }
    rules.push(Rule::parse("priority=0,actions=normal", &resolve).expect("default rule parses"));
    rules
}
