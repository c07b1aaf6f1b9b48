//! Any bytes as a frame: the parser never panics or reads out of bounds, keeps the input port,
//! and a frame it accepts is classified (through the megaflow cache) as a scan of the rules
//! would classify it.
#![no_main]

use std::cell::RefCell;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use slaswitch_classifier::emc::NO_RULE;
use slaswitch_classifier::rule::scan_priority;
use slaswitch_classifier::security_group::security_group_rules;
use slaswitch_classifier::{check_frame, parse_frame, Classifier, MegaflowCache, Rule};

/// The 100-mask security group, plus rules on ports, VLANs and IPv6, as a host carries.
fn classifier() -> &'static Classifier {
    static C: OnceLock<Classifier> = OnceLock::new();
    C.get_or_init(|| {
        let mut rules = security_group_rules(100);
        for text in [
            "priority=2000,udp,tp_dst=53,actions=drop",
            "priority=1500,in_port=3,dl_vlan=100,actions=output:1",
            "priority=1400,ipv6,ipv6_src=fe80::/10,actions=drop",
            "priority=1300,tcp6,ipv6_dst=2001:db8::/32,tp_dst=443,actions=output:2",
        ] {
            rules.push(Rule::parse(text, &|p| p.parse().ok()).expect("rule parses"));
        }
        Classifier::new(rules)
    })
}

thread_local! {
    static CACHE: RefCell<MegaflowCache> = RefCell::new(MegaflowCache::new());
}

fuzz_target!(|data: &[u8]| {
    let Some((&port, frame)) = data.split_first() else { return };
    let in_port = u16::from(port % 8);
    let parsed = parse_frame(frame, in_port);
    // The key-less check the data plane runs on input-port-only rules refuses exactly the same.
    assert_eq!(check_frame(frame), parsed.map(|_| ()));
    let Ok(key) = parsed else { return };
    assert_eq!(key.in_port(), in_port);
    let c = classifier();
    let rule = CACHE.with(|cache| cache.borrow_mut().resolve(c, &key).rule);
    assert_eq!(rule, c.lookup(&key).unwrap_or(NO_RULE));
    let priority = (rule != NO_RULE).then(|| c.rule(rule).priority);
    assert_eq!(priority, scan_priority(c.rules(), &key));
});
