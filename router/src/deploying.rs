//! The run's rules: the file it starts with, and deployments while it runs. A deployment is
//! checked here first; one that does not check is refused with its errors and the running
//! rules stay. An accepted one travels to every worker as a marker in the data stream, so
//! every worker switches between the same two ticks of each stream.

use cep_core::control::{Deploy, Deployed, RulesText};
use cep_core::results::RulesEpoch;
use cep_query::RulesSource;
use std::collections::BTreeMap;

/// The rules in force and every switch so far.
#[derive(Debug)]
pub struct Deployments {
    current: RulesText,
    history: Vec<RulesEpoch>,
}

impl Deployments {
    /// The rules a run starts with; `Err` is the rendered errors of a file that does not check.
    pub fn start(source: &RulesSource) -> Result<Self, String> {
        let rules = source.compile().map_err(|error| error.to_string())?;
        let current = RulesText { epoch: 0, origin: source.origin.clone(), text: source.text.clone() };
        let history = vec![RulesEpoch {
            epoch: 0,
            origin: source.origin.clone(),
            queries: rules.names().map(str::to_string).collect(),
            at: BTreeMap::new(),
        }];
        Ok(Deployments { current, history })
    }

    /// The rules in force (the latest accepted), as they travel to workers.
    pub fn current(&self) -> &RulesText {
        &self.current
    }

    /// The rules the run started with and every deployment since, with its switch points.
    pub fn history(&self) -> &[RulesEpoch] {
        &self.history
    }

    /// Checks a deployment; `Err` is what to answer the deployer.
    pub fn check(&self, deploy: &Deploy) -> Result<Vec<String>, String> {
        let source = RulesSource { origin: deploy.origin.clone(), text: deploy.text.clone() };
        let rules =
            source.compile().map_err(|error| format!("rules refused, the running rules stay:\n{}", error.render()))?;
        Ok(rules.names().map(str::to_string).collect())
    }

    /// Records an accepted deployment that takes effect at `at` (per stream, the first
    /// sequence number under the new rules; empty before the run starts) and returns the
    /// marker to send and the answer.
    pub fn accept(&mut self, deploy: Deploy, queries: Vec<String>, at: BTreeMap<u32, u64>) -> (RulesText, Deployed) {
        let epoch = self.current.epoch + 1;
        self.current = RulesText { epoch, origin: deploy.origin.clone(), text: deploy.text };
        self.history.push(RulesEpoch { epoch, origin: deploy.origin, queries, at: at.clone() });
        (self.current.clone(), Deployed { epoch, at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_that_does_not_check_is_refused_and_the_rules_stay() {
        let mut deployments = Deployments::start(&RulesSource::reference()).unwrap();
        let bad = Deploy { origin: "bad.rules".into(), text: "@name('x') SELECT nope FROM StockTick;".into() };
        let error = deployments.check(&bad).unwrap_err();
        assert!(error.contains("bad.rules:1:19: unknown field `nope`"), "{error}");
        assert_eq!(deployments.current().epoch, 0);

        let good = Deploy { origin: "good.rules".into(), text: "@name('x') SELECT * FROM StockTick;".into() };
        let queries = deployments.check(&good).unwrap();
        let (marker, answer) = deployments.accept(good, queries, BTreeMap::from([(0, 10)]));
        assert_eq!((marker.epoch, answer.epoch), (1, 1));
        assert_eq!(deployments.history().len(), 2);
        assert_eq!(deployments.history()[1].queries, vec!["x".to_string()]);
    }
}
