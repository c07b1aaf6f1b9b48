//! The rule set: flows added and deleted all or none, installed on every PMD at once with the
//! counters of the rules that stay kept.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use slaswitch_classifier::{Classifier, Rule};

use super::Datapath;
use crate::counters::RuleCounters;
use crate::error::DatapathError;

/// A flow and what it matched.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlowStats {
    /// The flow as `add-flow` text.
    pub flow: String,
    /// Its priority.
    pub priority: u32,
    /// Packets it matched.
    pub packets: u64,
    /// Bytes it matched.
    pub bytes: u64,
}

impl Datapath {
    /// Every rule, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// A port's number from its name or number, as a flow's text gives it.
    pub(super) fn resolve_port(&self) -> impl Fn(&str) -> Option<u16> + '_ {
        move |s| self.port_number(s)
    }

    /// Installs a new rule set, keeping the counters of rules that stay.
    pub(super) fn install_rules(&mut self, rules: Vec<Rule>) -> Result<(), DatapathError> {
        let classifier = Arc::new(Classifier::new(rules));
        let counters = RuleCounters::new(classifier.rules().len());
        for (i, r) in classifier.rules().iter().enumerate() {
            if let Some(j) =
                self.classifier.rules().iter().position(|o| o.priority == r.priority && o.matcher == r.matcher)
            {
                counters.packets[i].store(self.rule_counters.packets[j].load(Relaxed), Relaxed);
                counters.bytes[i].store(self.rule_counters.bytes[j].load(Relaxed), Relaxed);
            }
        }
        let (old_classifier, old_counters, old_rules) =
            (self.classifier.clone(), self.rule_counters.clone(), self.rules.clone());
        self.rules = classifier.rules().to_vec();
        self.classifier = classifier;
        self.rule_counters = Arc::new(counters);
        if let Err(e) = self.push_configs() {
            self.classifier = old_classifier;
            self.rule_counters = old_counters;
            self.rules = old_rules;
            let _ = self.push_configs();
            return Err(e);
        }
        Ok(())
    }

    /// Adds flows given as `add-flow` text, all or none; returns how many.
    pub fn add_flows(&mut self, texts: &[String]) -> Result<usize, DatapathError> {
        let mut new_rules = Vec::new();
        {
            let resolve = self.resolve_port();
            for t in texts {
                new_rules
                    .push(Rule::parse(t, &resolve).map_err(|cause| DatapathError::Flow { flow: t.clone(), cause })?);
            }
        }
        let mut rules = self.rules.clone();
        rules.extend(new_rules);
        let n = texts.len();
        self.install_rules(rules)?;
        Ok(n)
    }

    /// Deletes every rule, or those whose match equals `matcher` (and priority, when `strict`).
    pub fn del_flows(&mut self, matcher: Option<&str>, strict: bool) -> Result<usize, DatapathError> {
        let parsed = match matcher {
            None => None,
            Some(m) => {
                let resolve = self.resolve_port();
                let text = if m.contains("actions=") { m.to_string() } else { format!("{m},actions=drop") };
                Some(
                    Rule::parse(&text, &resolve)
                        .map_err(|cause| DatapathError::Match { matcher: m.to_string(), cause })?,
                )
            }
        };
        let (kept, removed) = self
            .classifier
            .without(parsed.as_ref().map(|r| &r.matcher), parsed.as_ref().filter(|_| strict).map(|r| r.priority));
        if removed > 0 {
            self.install_rules(kept)?;
        }
        Ok(removed)
    }

    /// Every flow with its counters.
    pub fn dump_flows(&self) -> Vec<FlowStats> {
        let names = |n: u16| self.port_name(n);
        self.classifier
            .rules()
            .iter()
            .enumerate()
            .map(|(i, r)| FlowStats {
                flow: r.to_text(&names),
                priority: r.priority,
                packets: self.rule_counters.packets[i].load(Relaxed),
                bytes: self.rule_counters.bytes[i].load(Relaxed),
            })
            .collect()
    }

    /// Flows as text with port names, in a form `add_flows` reads back (for persistence).
    pub fn flow_texts(&self) -> Vec<String> {
        self.dump_flows().into_iter().map(|f| f.flow).collect()
    }
}
