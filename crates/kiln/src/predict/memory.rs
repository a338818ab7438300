//! One function's memory model (OFC §5): a decision tree that classifies an invocation's
//! features into memory intervals (16 MB wide, from 0 to the booked size), trained on the
//! invocations kiln has seen, and used only once it is mature (§5.3).
//!
//! - **Classes.** Class `k` is the interval `[k·w, (k+1)·w)` MB of the invocation's peak.
//! - **Maturity.** Every invocation is also a test of the current tree: of the last
//!   `min_samples` predictions (at most [`WINDOW`]), at least 90% must be exact or over, and at
//!   least half of the under-predictions within one interval.
//! - **Use.** A mature model predicts the interval *above* the tree's (so that the
//!   under-predictions within one interval become exact): the limit is `(k + 2)·w`, at most
//!   the booked size.
//! - **Retraining.** The tree is retrained from the whole training set every
//!   [`RETRAIN_EVERY`] new samples. Before maturity every invocation is a sample; after, only
//!   under-predictions (counted [`UNDER_WEIGHT`] times, and replacing the samples of the same
//!   features that needed less) and far over-predictions (more than [`FAR_OVER`] intervals)
//!   are, as OFC keeps its dataset small but valuable.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::tree::decision_tree_classifier::{
    DecisionTreeClassifier, DecisionTreeClassifierParameters,
};

use super::features::{Features, Schema};

/// Predictions the maturity criterion looks at.
pub const WINDOW: usize = 100;
/// New samples between retrainings.
pub const RETRAIN_EVERY: usize = 10;
/// Weight of an under-prediction in the training set (its row is repeated).
pub const UNDER_WEIGHT: u32 = 3;
/// An over-prediction by more than this many intervals is added to the training set.
pub const FAR_OVER: i64 = 6;
/// The training set's bound: the oldest samples go first.
const MAX_SAMPLES: usize = 2_000;

type Tree = DecisionTreeClassifier<f64, u32, DenseMatrix<f64>, Vec<u32>>;

/// A trained classifier: a tree, or the one class every sample had (a tree needs two).
pub enum Classifier {
    Tree(Box<Tree>),
    Constant(u32),
}

impl Classifier {
    /// Trains on `rows` (each of the schema's width) and their classes.
    pub fn train(rows: &[Vec<f64>], classes: &[u32], width: usize) -> Option<Classifier> {
        let first = *classes.first()?;
        if classes.iter().all(|&c| c == first) || width == 0 {
            return Some(Classifier::Constant(first));
        }
        let values: Vec<f64> = rows.iter().flatten().copied().collect();
        let x = DenseMatrix::new(rows.len(), width, values, false).ok()?;
        let params = DecisionTreeClassifierParameters {
            seed: Some(7),
            ..Default::default()
        };
        Tree::fit(&x, &classes.to_vec(), params)
            .ok()
            .map(|t| Classifier::Tree(Box::new(t)))
    }

    /// The class of one row.
    pub fn classify(&self, row: Vec<f64>) -> Option<u32> {
        match self {
            Classifier::Constant(c) => Some(*c),
            Classifier::Tree(tree) => {
                let width = row.len();
                let x = DenseMatrix::new(1, width, row, false).ok()?;
                tree.predict(&x).ok()?.first().copied()
            }
        }
    }
}

/// One invocation the model learns from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    pub features: Features,
    pub class: u32,
    pub weight: u32,
}

/// How the predictions of the current tree compared with what invocations used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Exact,
    Over,
    /// Under by one interval.
    UnderByOne,
    Under,
}

/// A function's memory model, as kept on disk (the tree is rebuilt from the samples).
#[derive(Serialize, Deserialize)]
pub struct MemoryModel {
    pub interval_mb: u32,
    pub booked_mb: u32,
    pub min_samples: usize,
    pub schema: Schema,
    pub samples: Vec<Sample>,
    pub window: VecDeque<Outcome>,
    pub mature: bool,
    /// Invocations seen, and samples added since the last training.
    pub seen: u64,
    pub fresh: usize,
    #[serde(skip)]
    pub classifier: Option<Classifier>,
}

/// What [`MemoryModel::observe`] learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// How the tree's prediction compared (none before the first training).
    pub outcome: Option<Outcome>,
    /// The model should be trained again.
    pub retrain: bool,
}

impl MemoryModel {
    pub fn new(interval_mb: u32, booked_mb: u32, min_samples: usize) -> Self {
        MemoryModel {
            interval_mb: interval_mb.max(1),
            booked_mb,
            min_samples,
            schema: Schema::default(),
            samples: Vec::new(),
            window: VecDeque::new(),
            mature: false,
            seen: 0,
            fresh: 0,
            classifier: None,
        }
    }

    /// The class of a peak of `mb`.
    pub fn class_of(&self, mb: u64) -> u32 {
        (mb / u64::from(self.interval_mb)).min(u64::from(u32::MAX)) as u32
    }

    /// The tree's class for `features`, if trained.
    pub fn classify(&self, features: &Features) -> Option<u32> {
        let classifier = self.classifier.as_ref()?;
        let mut row = Vec::with_capacity(self.schema.width());
        self.schema.row(features, &mut row);
        classifier.classify(row)
    }

    /// The memory limit for an invocation with `features`: `None` until the model is mature,
    /// or when the prediction would not be below the booked size.
    pub fn predict(&self, features: &Features) -> Option<u32> {
        if !self.mature {
            return None;
        }
        let class = self.classify(features)?;
        let limit = (u64::from(class) + 2) * u64::from(self.interval_mb);
        (limit < u64::from(self.booked_mb)).then_some(limit as u32)
    }

    /// Learns from one invocation that peaked at `peak_mb` (or was killed for memory, which
    /// counts as needing the booked size).
    pub fn observe(&mut self, features: Features, peak_mb: u64, oom: bool) -> Observed {
        self.seen += 1;
        let truth = if oom {
            self.class_of(u64::from(self.booked_mb))
        } else {
            self.class_of(peak_mb)
        };
        let predicted = self.classify(&features);
        let diff = predicted.map(|p| i64::from(p) - i64::from(truth));
        let outcome = diff.map(|diff| match diff {
            0 => Outcome::Exact,
            d if d > 0 => Outcome::Over,
            -1 => Outcome::UnderByOne,
            _ => Outcome::Under,
        });
        if let Some(outcome) = outcome {
            self.window.push_back(outcome);
            if self.window.len() > self.window_len() {
                self.window.pop_front();
            }
        }
        let weight = match (outcome, diff) {
            _ if !self.mature => Some(1),
            (Some(Outcome::Under | Outcome::UnderByOne), _) => Some(UNDER_WEIGHT),
            (_, Some(d)) if d > FAR_OVER => Some(1),
            _ => None,
        };
        if let Some(weight) = weight {
            if matches!(outcome, Some(Outcome::Under | Outcome::UnderByOne)) {
                // The same conditions now need more: what was learnt of them no longer holds
                // (OFC's monitor corrects the model at once, not after many more failures).
                self.samples
                    .retain(|s| s.features != features || s.class >= truth);
            }
            self.schema.learn(&features);
            self.samples.push(Sample {
                features,
                class: truth,
                weight,
            });
            if self.samples.len() > MAX_SAMPLES {
                let excess = self.samples.len() - MAX_SAMPLES;
                self.samples.drain(..excess);
            }
            self.fresh += 1;
        }
        if !self.mature && self.seen >= self.min_samples as u64 && self.criterion_met() {
            self.mature = true;
        }
        let retrain = self.fresh >= RETRAIN_EVERY
            || (self.mature && weight.is_some())
            || (self.classifier.is_none() && !self.samples.is_empty());
        Observed { outcome, retrain }
    }

    /// The predictions the criterion looks at: the last `min_samples`, at most [`WINDOW`].
    fn window_len(&self) -> usize {
        WINDOW.min(self.min_samples).max(1)
    }

    /// OFC's maturation criterion over the last predictions.
    pub fn criterion_met(&self) -> bool {
        let n = self.window.len();
        if n < self.window_len() {
            return false;
        }
        let count = |o: Outcome| self.window.iter().filter(|&&x| x == o).count();
        let eo = count(Outcome::Exact) + count(Outcome::Over);
        let under = count(Outcome::Under) + count(Outcome::UnderByOne);
        eo * 10 >= n * 9 && (under == 0 || count(Outcome::UnderByOne) * 2 >= under)
    }

    /// The training set as rows of the current schema, each repeated by its weight.
    pub fn training_set(&self) -> (Vec<Vec<f64>>, Vec<u32>, usize) {
        let mut rows = Vec::new();
        let mut classes = Vec::new();
        for sample in &self.samples {
            let mut row = Vec::new();
            self.schema.row(&sample.features, &mut row);
            for _ in 0..sample.weight {
                rows.push(row.clone());
                classes.push(sample.class);
            }
        }
        (rows, classes, self.schema.width())
    }

    /// Trains the tree from the training set now (blocking: milliseconds for thousands of rows).
    pub fn retrain(&mut self) {
        let (rows, classes, width) = self.training_set();
        self.classifier = Classifier::train(&rows, &classes, width);
        self.fresh = 0;
    }

    /// The share of exact-or-over predictions in the window.
    pub fn exact_or_over(&self) -> Option<f64> {
        let n = self.window.len();
        (n > 0).then(|| {
            self.window
                .iter()
                .filter(|o| matches!(o, Outcome::Exact | Outcome::Over))
                .count() as f64
                / n as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(mb: u32, mode: &str) -> Features {
        Features::of_event(format!(r#"{{"mb": {mb}, "mode": "{mode}"}}"#).as_bytes()).0
    }

    /// A function whose peak is 20 MB of runtime plus what the event asks for, twice as much in
    /// mode "double".
    fn peak(mb: u32, mode: &str) -> u64 {
        20 + u64::from(if mode == "double" { 2 * mb } else { mb })
    }

    fn train(model: &mut MemoryModel, n: usize) {
        for i in 0..n {
            // Ten sizes, each in both modes: features repeat, as a function's inputs do.
            let (mb, mode) = (
                (i / 2 % 10 * 17) as u32,
                if i % 2 == 0 { "double" } else { "x" },
            );
            let observed = model.observe(event(mb, mode), peak(mb, mode), false);
            if observed.retrain {
                model.retrain();
            }
        }
    }

    #[test]
    fn a_model_matures_on_a_learnable_function_and_predicts_the_next_interval_up() {
        let mut model = MemoryModel::new(16, 1024, 100);
        assert_eq!(model.predict(&event(10, "x")), None, "not before maturity");
        train(&mut model, 60);
        assert!(!model.mature, "not before min_samples");
        train(&mut model, 300);
        assert!(model.mature, "EO {:?}", model.exact_or_over());
        assert!(model.exact_or_over().unwrap() >= 0.9);
        // 20 + 2·34 = 88 MB is class 5 ([80, 96)); the limit is the interval above: 112 MB.
        assert_eq!(model.predict(&event(34, "double")), Some(112));
        // 20 + 34 = 54 MB is class 3 ([48, 64)): 80 MB.
        assert_eq!(model.predict(&event(34, "x")), Some(80));
        // A prediction at or above the booked size is no prediction.
        let mut small = MemoryModel::new(16, 64, 10);
        for _ in 0..40 {
            if small.observe(event(40, "x"), 60, false).retrain {
                small.retrain();
            }
        }
        assert!(small.mature);
        assert_eq!(small.predict(&event(40, "x")), None);
    }

    #[test]
    fn an_unpredictable_function_is_sized_to_the_most_it_was_seen_to_use() {
        let mut model = MemoryModel::new(16, 1024, 100);
        let mut state = 12345u64;
        let mut most = 0;
        for _ in 0..500 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let peak = 20 + (state >> 33) % 700;
            most = most.max(peak);
            if model.observe(event(1, "x"), peak, false).retrain {
                model.retrain();
            }
        }
        // Each under-prediction replaced what the same features needed before: the model
        // keeps the largest, and every prediction is at least that.
        let limit = model.predict(&event(1, "x")).expect("mature");
        assert!(
            u64::from(limit) > most,
            "{limit} MB for a peak of {most} MB"
        );
    }

    #[test]
    fn after_maturity_only_under_and_far_over_predictions_are_kept_and_oom_counts_as_booked() {
        let mut model = MemoryModel::new(16, 1024, 100);
        train(&mut model, 400);
        assert!(model.mature);
        let before = model.samples.len();
        // As predicted: not kept.
        model.observe(event(34, "x"), peak(34, "x"), false);
        assert_eq!(model.samples.len(), before);
        // Killed for memory: the truth is the booked size, an under-prediction, kept weighted.
        let observed = model.observe(event(34, "x"), 0, true);
        assert_eq!(observed.outcome, Some(Outcome::Under));
        assert!(observed.retrain);
        let last = model.samples.last().unwrap();
        assert_eq!((last.class, last.weight), (64, UNDER_WEIGHT));
        model.retrain();
        assert_eq!(
            model.predict(&event(34, "x")),
            None,
            "now it needs the booked size"
        );
    }

    #[test]
    fn a_model_survives_a_round_trip_through_json() {
        let mut model = MemoryModel::new(16, 1024, 100);
        train(&mut model, 300);
        let text = serde_json::to_string(&model).unwrap();
        let mut back: MemoryModel = serde_json::from_str(&text).unwrap();
        back.schema = back.schema.loaded();
        back.retrain();
        assert!(back.mature);
        assert_eq!(
            back.predict(&event(34, "double")),
            model.predict(&event(34, "double"))
        );
    }
}
