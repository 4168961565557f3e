//! The seed sweep CI runs: many runs drawn from seeds (faults, kills, pauses, collector
//! restarts, joins, leaves, deployments), invariants checked after every event. `CEP_SWEEP_SEEDS` sets how
//! many (default 1,000); `cargo run --release -p cep-testkit --bin sweep` runs long sweeps.

use cep_testkit::sweep::{sweep, Scenario};

#[test]
fn a_thousand_seeded_runs_keep_every_invariant() {
    let seeds = std::env::var("CEP_SWEEP_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000);
    let (failures, total) = sweep(0, seeds, 1, |_| {});
    let report: Vec<String> = failures.iter().map(ToString::to_string).collect();
    assert!(failures.is_empty(), "{} of {seeds} seeds failed:\n{}", failures.len(), report.join("\n"));
    assert!(
        total.failovers.1 > 0 && total.outputs > 0 && total.deployments > 0,
        "the sweep restored killed workers, switched rules and checked outputs: {total:?}"
    );
    assert!(
        total.rejoins > 0 && total.turns_at_max_unsaved > 0 && total.collector_resumes > 1,
        "the sweep started killed workers again, held workers at their bound and restarted a collector more than once: {total:?}"
    );
}

#[test]
fn a_seed_draws_the_same_run_every_time() {
    for seed in [0, 1, 99] {
        let (first, again) = (Scenario::from_seed(seed), Scenario::from_seed(seed));
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert_eq!(first.run(), again.run(), "seed {seed}");
    }
}
