//! Per-invocation memory prediction (OFC §5): each function's invocations are sized to what
//! they will use rather than what was booked, and what the sandbox does not need can be lent
//! (to the opportunistic cache, later).
//!
//! The controller asks [`Predictor::predict`] before an invocation and hands the limit to the
//! agent with the request (`InvokeRequest::memory_limit_mb`); it tells
//! [`Predictor::observe`] what the invocation used afterwards. A function's model is
//! `memory::MemoryModel`; it predicts nothing until it is mature, and an invocation killed for
//! memory under a predicted limit is retried at once with the booked size (the controller does
//! it, `controller::Controller::run`), so a user never sees an under-prediction fail.
//!
//! Models live in memory and in `DATA_DIR/models/FUNCTION.json` (the memory model) and
//! `FUNCTION.benefit.json` (the cache-benefit model's training set), written after each
//! training, so a restarted kiln keeps what it learnt. A new code or memory size starts a
//! function's models afresh.

pub mod benefit;
pub mod features;
pub mod memory;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use benefit::BenefitModel;
pub use benefit::Etl;
pub use features::Features;
use memory::{Classifier, MemoryModel};

use crate::sync::LockExt;

/// How the node predicts.
#[derive(Debug, Clone)]
pub struct PredictorConfig {
    /// Off: every invocation runs at its booked size.
    pub enabled: bool,
    /// The width of a memory class, in MB (OFC: 16).
    pub interval_mb: u32,
    /// Invocations a model must have seen before its maturity is judged (OFC: 100).
    pub min_samples: usize,
}

impl Default for PredictorConfig {
    fn default() -> Self {
        PredictorConfig {
            enabled: true,
            interval_mb: 16,
            min_samples: 100,
        }
    }
}

/// A model as `kiln status` and the metrics show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    pub function: String,
    pub mature: bool,
    pub invocations: u64,
    pub samples: usize,
    /// Exact-or-over predictions among the last ones, once there are any.
    pub exact_or_over: Option<f64>,
    /// The share of recent invocations that benefited from the object cache (its
    /// cache-benefit model), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_benefit: Option<f64>,
    /// The invocations the cache-benefit model learnt from (first runs of new processes are
    /// skipped while the function has others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_benefit_samples: Option<u64>,
    /// The features the model has seen (`payload_bytes`, `arg.NAME`, `object.size`, …).
    pub features: Vec<String>,
}

/// The node's memory models, one per function.
pub struct Predictor {
    config: PredictorConfig,
    dir: PathBuf,
    models: Mutex<HashMap<String, Arc<Mutex<MemoryModel>>>>,
    benefit: Mutex<HashMap<String, BenefitModel>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.locked()
}

impl Predictor {
    /// Keeps the models in `dir` (created when the first one is written).
    pub fn new(config: PredictorConfig, dir: &Path) -> Self {
        Predictor {
            config,
            dir: dir.to_path_buf(),
            models: Mutex::new(HashMap::new()),
            benefit: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, function: &str) -> PathBuf {
        self.dir.join(format!("{function}.json"))
    }

    /// The model of `function` for `booked_mb`: the one in memory, else the one on disk,
    /// else a new one. A model of another booked size is replaced.
    fn model(&self, function: &str, booked_mb: u32) -> Arc<Mutex<MemoryModel>> {
        let mut models = lock(&self.models);
        if let Some(model) = models.get(function) {
            if lock(model).booked_mb == booked_mb {
                return model.clone();
            }
        }
        let loaded = std::fs::read(self.path(function))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<MemoryModel>(&bytes).ok())
            .filter(|m| m.booked_mb == booked_mb && m.interval_mb == self.config.interval_mb)
            .map(|mut m| {
                m.schema = std::mem::take(&mut m.schema).loaded();
                m.min_samples = self.config.min_samples;
                m.retrain();
                m
            });
        let model = Arc::new(Mutex::new(loaded.unwrap_or_else(|| {
            MemoryModel::new(self.config.interval_mb, booked_mb, self.config.min_samples)
        })));
        models.insert(function.to_string(), model.clone());
        model
    }

    /// Whether invocations of a function booked at `booked_mb` can be sized: prediction is on
    /// and there is room for at least two classes below the booked size.
    pub fn applies(&self, booked_mb: u32) -> bool {
        self.config.enabled && booked_mb > 2 * self.config.interval_mb
    }

    /// The memory limit for an invocation of `function` with `features`, when its model is
    /// mature and predicts less than `booked_mb`.
    pub fn predict(&self, function: &str, booked_mb: u32, features: &Features) -> Option<u32> {
        if !self.applies(booked_mb) {
            return None;
        }
        lock(&self.model(function, booked_mb)).predict(features)
    }

    /// Learns from an invocation that peaked at `peak_mb` (or was killed for memory). Cheap;
    /// when the model should be trained again it returns the [`Training`] to run, off the
    /// request's path (milliseconds).
    #[must_use]
    pub fn observe(
        &self,
        function: &str,
        booked_mb: u32,
        features: Features,
        peak_mb: u64,
        oom: bool,
    ) -> Option<Training> {
        if !self.applies(booked_mb) {
            return None;
        }
        let model = self.model(function, booked_mb);
        // The training set is taken under the lock and the tree trained outside it, so that
        // predictions of the function do not wait for a training.
        let (rows, classes, width) = {
            let mut m = lock(&model);
            if !m.observe(features, peak_mb, oom).retrain {
                return None;
            }
            m.fresh = 0;
            m.training_set()
        };
        Some(Training {
            model,
            rows,
            classes,
            width,
            dir: self.dir.clone(),
            path: self.path(function),
        })
    }

    fn benefit_path(&self, function: &str) -> PathBuf {
        self.dir.join(format!("{function}.benefit.json"))
    }

    /// Runs `f` on `function`'s cache-benefit model: the one in memory, else the one on disk,
    /// else a new one.
    fn with_benefit<R>(&self, function: &str, f: impl FnOnce(&mut BenefitModel) -> R) -> R {
        let mut models = lock(&self.benefit);
        let model = models.entry(function.to_string()).or_insert_with(|| {
            std::fs::read(self.benefit_path(function))
                .ok()
                .and_then(|bytes| serde_json::from_slice::<BenefitModel>(&bytes).ok())
                .map(BenefitModel::loaded)
                .unwrap_or_default()
        });
        f(model)
    }

    /// Whether caching the objects of an invocation of `function` with `features` pays off;
    /// `None` until its cache-benefit model has seen enough invocations.
    pub fn benefits(&self, function: &str, features: &Features) -> Option<bool> {
        self.with_benefit(function, |m| m.predict(features))
    }

    /// Teaches `function`'s cache-benefit model one invocation's phases. After a retraining the
    /// model is saved, off the caller's path, at most every 30 s.
    pub fn observe_benefit(&self, function: &str, features: Features, etl: Etl, first_run: bool) {
        let saved = self.with_benefit(function, |m| {
            let retrained = m.observe(features, etl, first_run);
            (retrained && m.save_due(std::time::Instant::now()))
                .then(|| serde_json::to_vec(m).ok())
                .flatten()
        });
        let Some(json) = saved else { return };
        let (dir, path) = (self.dir.clone(), self.benefit_path(function));
        let save = move || {
            if let Err(e) = write_atomically(&dir, &path, &json) {
                tracing::warn!(path = %path.display(), "the cache-benefit model could not be saved: {e}");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(save)),
            Err(_) => save(),
        }
    }

    /// Saves the cache-benefit models retrained since their last save (at shutdown: between
    /// saves, a model is saved at most every 30 s).
    pub fn save_models(&self) {
        let unsaved: Vec<(String, Vec<u8>)> = lock(&self.benefit)
            .iter_mut()
            .filter_map(|(f, m)| {
                let json = m.take_unsaved().then(|| serde_json::to_vec(&*m).ok())??;
                Some((f.clone(), json))
            })
            .collect();
        for (function, json) in unsaved {
            let path = self.benefit_path(&function);
            if let Err(e) = write_atomically(&self.dir, &path, &json) {
                tracing::warn!(path = %path.display(), "the cache-benefit model could not be saved: {e}");
            }
        }
    }

    /// Forgets `function`'s models (its code or memory changed, or it was deleted).
    pub fn forget(&self, function: &str) {
        lock(&self.benefit).remove(function);
        lock(&self.models).remove(function);
        let _ = std::fs::remove_file(self.path(function));
        let _ = std::fs::remove_file(self.benefit_path(function));
    }

    /// The models in memory.
    pub fn status(&self) -> Vec<ModelStatus> {
        let benefit = lock(&self.benefit);
        let models = lock(&self.models);
        let mut status: Vec<ModelStatus> = models
            .iter()
            .map(|(function, model)| model_status(function, &lock(model), benefit.get(function)))
            .collect();
        status.sort_by(|a, b| a.function.cmp(&b.function));
        status
    }

    /// Each model's maturity and its share of exact-or-over predictions (the console's
    /// history of a model's accuracy).
    pub fn accuracies(&self) -> HashMap<String, (bool, Option<f64>)> {
        let models = lock(&self.models);
        models
            .iter()
            .map(|(function, model)| {
                let m = lock(model);
                (function.clone(), (m.mature, m.exact_or_over()))
            })
            .collect()
    }

    /// One function's model, if it has one.
    pub fn status_of(&self, function: &str) -> Option<ModelStatus> {
        let benefit = lock(&self.benefit);
        let models = lock(&self.models);
        let model = models.get(function)?;
        let status = model_status(function, &lock(model), benefit.get(function));
        Some(status)
    }
}

fn model_status(function: &str, m: &MemoryModel, benefit: Option<&BenefitModel>) -> ModelStatus {
    ModelStatus {
        function: function.to_string(),
        mature: m.mature,
        invocations: m.seen,
        samples: m.samples.len(),
        exact_or_over: m.exact_or_over(),
        cache_benefit: benefit.and_then(BenefitModel::benefiting),
        cache_benefit_samples: benefit.map(|b| b.seen),
        features: m.schema.names().to_vec(),
    }
}

/// A training of one model, taken from its training set: [`Training::run`] fits the tree,
/// installs it and saves the model.
pub struct Training {
    model: Arc<Mutex<MemoryModel>>,
    rows: Vec<Vec<f64>>,
    classes: Vec<u32>,
    width: usize,
    dir: PathBuf,
    path: PathBuf,
}

impl Training {
    /// Blocking: milliseconds for a few thousand rows.
    pub fn run(self) {
        let classifier = Classifier::train(&self.rows, &self.classes, self.width);
        let json = {
            let mut m = lock(&self.model);
            m.classifier = classifier;
            serde_json::to_vec(&*m)
        };
        if let Ok(json) = json {
            if let Err(e) = write_atomically(&self.dir, &self.path, &json) {
                tracing::warn!(path = %self.path.display(), "the memory model could not be saved: {e}");
            }
        }
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that a crash leaves the
/// old model or the new one.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(mb: u32) -> Features {
        Features::of_event(format!(r#"{{"mb": {mb}}}"#).as_bytes()).0
    }

    #[test]
    fn a_model_is_kept_across_a_restart_and_forgotten_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let config = PredictorConfig {
            min_samples: 20,
            ..Default::default()
        };
        let predictor = Predictor::new(config.clone(), dir.path());
        for i in 0..200u32 {
            let mb = i % 100;
            if let Some(training) =
                predictor.observe("f", 512, features(mb), 20 + u64::from(mb), false)
            {
                training.run();
            }
        }
        let predicted = predictor.predict("f", 512, &features(50));
        assert_eq!(predicted, Some(96), "{:?}", predictor.status());
        // Another booked size is another model.
        assert_eq!(predictor.predict("f", 1024, &features(50)), None);
        for i in 0..200u32 {
            let mb = i % 100;
            if let Some(training) =
                predictor.observe("f", 512, features(mb), 20 + u64::from(mb), false)
            {
                training.run();
            }
        }
        let restarted = Predictor::new(config.clone(), dir.path());
        assert_eq!(restarted.predict("f", 512, &features(50)), Some(96));
        restarted.forget("f");
        assert_eq!(
            Predictor::new(config, dir.path()).predict("f", 512, &features(50)),
            None
        );
        // Too small to size, or prediction off: nothing is predicted or kept.
        assert!(!predictor.applies(32));
        let off = Predictor::new(
            PredictorConfig {
                enabled: false,
                ..Default::default()
            },
            dir.path(),
        );
        assert!(off.observe("g", 512, features(1), 30, false).is_none());
        assert!(off.status().is_empty());
    }

    #[test]
    fn a_cache_benefit_model_is_kept_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let predictor = Predictor::new(PredictorConfig::default(), dir.path());
        // Small inputs are dominated by the store, large ones by the transform.
        let etl = |mb: u32| Etl {
            extract_load_ms: 10.0,
            transform_ms: f64::from(mb),
        };
        for i in 0..40u32 {
            let mb = if i % 2 == 0 { 1 } else { 100 };
            predictor.observe_benefit("f", features(mb), etl(mb), false);
        }
        assert_eq!(predictor.benefits("f", &features(1)), Some(true));
        assert_eq!(predictor.benefits("f", &features(100)), Some(false));
        predictor.save_models();
        let restarted = Predictor::new(PredictorConfig::default(), dir.path());
        assert_eq!(restarted.benefits("f", &features(1)), Some(true));
        assert_eq!(restarted.benefits("f", &features(100)), Some(false));
        restarted.forget("f");
        let again = Predictor::new(PredictorConfig::default(), dir.path());
        assert_eq!(again.benefits("f", &features(1)), None);
    }
}
