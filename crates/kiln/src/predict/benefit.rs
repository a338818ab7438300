//! The cache-benefit model (OFC §5.2): per function, whether caching an invocation's objects
//! pays off, from the same request features as the memory model.
//!
//! An invocation's label is OFC's rule over its Extract, Transform and Load times:
//! `(Tₑ + Tₗ) / (Tₑ + Tₜ + Tₗ) > 0.5`. kiln measures them itself: Tₑ + Tₗ is the time the
//! invocation's object-store calls would have taken at the backing store (the object cache
//! times each call, and prices the ones it answered from memory with its model of the backing
//! store's latency, `objects::cache::cost`), and Tₜ is the rest of the invocation. A decision
//! tree over the features learns the labels; until it has seen [`MIN_SAMPLES`] invocations it
//! predicts nothing and objects are admitted.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::features::{Features, Schema};
use super::memory::Classifier;

/// Invocations seen before the model predicts.
pub const MIN_SAMPLES: usize = 10;
/// New samples between retrainings.
const RETRAIN_EVERY: usize = 10;
/// The training set's bound: the oldest samples go first.
const MAX_SAMPLES: usize = 500;
/// A retrained model is saved at most this often: a save serializes the whole training set,
/// and at every retraining (every ten invocations) it was a fifth of kiln's CPU per invocation.
/// A crash loses at most this long of samples.
const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// First runs of new processes skipped in a row before they are taken as samples after all:
/// a function that starts cold every time runs like that.
const FIRST_RUNS_SKIPPED: u32 = 10;

/// OFC's threshold on the share of an invocation spent on the object store.
pub const THRESHOLD: f64 = 0.5;

/// One invocation's phases, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Etl {
    /// Extract + Load, as they would have been at the backing store.
    pub extract_load_ms: f64,
    pub transform_ms: f64,
}

impl Etl {
    /// The share of the invocation spent on the object store.
    pub fn share(&self) -> f64 {
        let total = self.extract_load_ms + self.transform_ms;
        if total <= 0.0 {
            0.0
        } else {
            self.extract_load_ms / total
        }
    }

    /// OFC's label.
    pub fn benefits(&self) -> bool {
        self.share() > THRESHOLD
    }
}

/// What is saved of a model is its training set; the tree is fitted again when it is read.
#[derive(Default, Serialize, Deserialize)]
pub struct BenefitModel {
    schema: Schema,
    samples: VecDeque<(Features, bool)>,
    #[serde(skip)]
    classifier: Option<Classifier>,
    #[serde(skip)]
    fresh: usize,
    /// First runs skipped since the last sample that was not one.
    #[serde(skip)]
    first_runs: u32,
    /// When it was last saved (or read back).
    #[serde(skip)]
    saved_at: Option<std::time::Instant>,
    /// Retrained since it was last saved.
    #[serde(skip)]
    unsaved: bool,
    pub seen: u64,
}

impl BenefitModel {
    /// Whether an invocation with `features` benefits from the cache; `None` while the model
    /// is young.
    pub fn predict(&self, features: &Features) -> Option<bool> {
        if (self.seen as usize) < MIN_SAMPLES {
            return None;
        }
        let classifier = self.classifier.as_ref()?;
        let mut row = Vec::with_capacity(self.schema.width());
        self.schema.row(features, &mut row);
        classifier.classify(row).map(|c| c == 1)
    }

    /// Learns one invocation's label; retrains every few samples (a tree over at most a few
    /// hundred rows: well under a millisecond). True if it retrained (the model is worth
    /// saving). `first_run`: the invocation was the first in a new runtime process, whose
    /// handler also loaded what it loads lazily and opened its connections (time that says
    /// nothing of how the function splits its time once warm): not a sample, unless the
    /// function has had nothing but first runs for a while.
    pub fn observe(&mut self, features: Features, etl: Etl, first_run: bool) -> bool {
        if first_run && self.first_runs < FIRST_RUNS_SKIPPED {
            self.first_runs += 1;
            return false;
        }
        if !first_run {
            self.first_runs = 0;
        }
        self.seen += 1;
        self.schema.learn(&features);
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((features, etl.benefits()));
        self.fresh += 1;
        if self.fresh >= RETRAIN_EVERY || self.classifier.is_none() {
            self.retrain();
            return true;
        }
        false
    }

    /// Whether a save is due at `now` (and if so, counts it as done).
    pub fn save_due(&mut self, now: std::time::Instant) -> bool {
        if self
            .saved_at
            .is_some_and(|at| now.duration_since(at) < SAVE_EVERY)
        {
            self.unsaved = true;
            return false;
        }
        self.saved_at = Some(now);
        self.unsaved = false;
        true
    }

    /// Whether it was retrained since its last save (and if so, counts the save as done).
    pub fn take_unsaved(&mut self) -> bool {
        std::mem::take(&mut self.unsaved)
    }

    /// Ready to predict after being read back: the schema's index and the tree are rebuilt.
    pub fn loaded(mut self) -> Self {
        self.schema = std::mem::take(&mut self.schema).loaded();
        self.retrain();
        self
    }

    fn retrain(&mut self) {
        self.fresh = 0;
        let width = self.schema.width();
        let mut rows = Vec::with_capacity(self.samples.len());
        let mut classes = Vec::with_capacity(self.samples.len());
        for (features, label) in &self.samples {
            let mut row = Vec::with_capacity(width);
            self.schema.row(features, &mut row);
            rows.push(row);
            classes.push(u32::from(*label));
        }
        self.classifier = Classifier::train(&rows, &classes, width);
    }

    /// The share of recent invocations that benefited.
    pub fn benefiting(&self) -> Option<f64> {
        if self.samples.is_empty() {
            return None;
        }
        let yes = self.samples.iter().filter(|(_, b)| *b).count();
        Some(yes as f64 / self.samples.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(size: u64) -> Features {
        Features::of_event(format!(r#"{{"size": {size}}}"#).as_bytes()).0
    }

    #[test]
    fn the_label_is_the_share_of_time_on_the_store() {
        let io_bound = Etl {
            extract_load_ms: 30.0,
            transform_ms: 5.0,
        };
        let cpu_bound = Etl {
            extract_load_ms: 30.0,
            transform_ms: 300.0,
        };
        assert!(io_bound.benefits());
        assert!(!cpu_bound.benefits());
        assert!(!Etl {
            extract_load_ms: 0.0,
            transform_ms: 0.0
        }
        .benefits());
    }

    #[test]
    fn it_learns_which_inputs_benefit() {
        let mut model = BenefitModel::default();
        // Small inputs are dominated by the store; large ones by the transform.
        for i in 0..40 {
            let size = if i % 2 == 0 { 10 } else { 10_000 };
            let etl = if size == 10 {
                Etl {
                    extract_load_ms: 25.0,
                    transform_ms: 2.0,
                }
            } else {
                Etl {
                    extract_load_ms: 40.0,
                    transform_ms: 900.0,
                }
            };
            assert!(i < MIN_SAMPLES || model.predict(&features(size)).is_some());
            model.observe(features(size), etl, false);
        }
        assert_eq!(model.predict(&features(10)), Some(true));
        assert_eq!(model.predict(&features(10_000)), Some(false));
        assert_eq!(model.benefiting(), Some(0.5));
    }

    #[test]
    fn first_runs_are_skipped_unless_a_function_has_nothing_else() {
        let mut model = BenefitModel::default();
        let etl = Etl {
            extract_load_ms: 25.0,
            transform_ms: 2.0,
        };
        model.observe(features(10), etl, true);
        model.observe(features(10), etl, false);
        assert_eq!(model.seen, 1, "a first run is no sample");
        // A function that starts cold every time: after FIRST_RUNS_SKIPPED, they count.
        for _ in 0..FIRST_RUNS_SKIPPED + 5 {
            model.observe(features(10), etl, true);
        }
        assert_eq!(model.seen, 1 + 5);
        // One warm run, and first runs are skipped again.
        model.observe(features(10), etl, false);
        model.observe(features(10), etl, true);
        assert_eq!(model.seen, 1 + 5 + 1);
    }
}
