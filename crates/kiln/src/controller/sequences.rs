//! Sequences (OpenWhisk's): a name for a list of functions (or of other sequences, expanded in
//! place), invoked as one function, synchronously or as an Event. Each function's answer is the
//! next one's event; the last answer is the sequence's; a function error stops it. The objects the intermediate stages write go to the object cache only and
//! are dropped when the run ends, and the final stage's outputs are dropped from the cache once
//! written back (OFC §6.3): the run's storage tag rides with each stage's invocation
//! (`InvokeRequest::storage`).
//!
//! A queued (Event) run that fails or is throttled after its first stage resumes at that
//! stage on its retry, with the input it had, when the run's intermediate outputs are still
//! held for it ([`RESUME_WITHIN`]); else the retry runs the whole sequence again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::registry::{Progress, QueuedEvent};
use super::replica::Record;
use super::{Controller, ControllerError};
use crate::agent::{InvokeOutcome, InvokeRequest};
use crate::function::{self, InvocationTags, Stage, StorageTag};
use crate::sync::LockExt;

/// Functions in one sequence, at most (OpenWhisk's default limit).
pub const MAX_STAGES: usize = 50;

/// A queued run's intermediate outputs wait in memory for a retry due at most this far
/// ahead; a later retry runs the sequence again from the start.
pub const RESUME_WITHIN: Duration = Duration::from_secs(600);
/// How long past its due time a retry may still find them (the queue may be behind).
const RESUME_GRACE: Duration = Duration::from_secs(300);

pub use super::registry::Sequence;

/// The answer of a sequence's run: its last stage's, or the stage's that failed.
pub(super) struct Ran {
    pub outcome: InvokeOutcome,
    /// The request id of the stage that answered.
    pub request_id: String,
}

impl Controller {
    /// Creates or replaces sequence `name`. Its stages must exist, as functions or as other
    /// sequences (which run in its place, as OpenWhisk's nested sequences do), and must not
    /// lead back to `name`; the name must not be a function's.
    pub fn put_sequence(
        &self,
        name: &str,
        functions: Vec<String>,
    ) -> Result<Sequence, ControllerError> {
        if !function::valid_name(name) {
            return Err(ControllerError::InvalidParameter(format!(
                "Sequence name '{name}' must match [a-zA-Z0-9-_]+ and have 1 to 64 characters"
            )));
        }
        if functions.is_empty() || functions.len() > MAX_STAGES {
            return Err(ControllerError::InvalidParameter(format!(
                "A sequence has 1 to {MAX_STAGES} functions, not {}",
                functions.len()
            )));
        }
        let _mutation = self.mutation.locked();
        if self.table().contains_key(name) {
            return Err(ControllerError::Conflict(format!(
                "A function is named {name}: a sequence cannot be"
            )));
        }
        for f in &functions {
            if !self.table().contains_key(f.as_str()) && !self.sequences().contains_key(f) {
                return Err(ControllerError::InvalidParameter(format!(
                    "Sequence {name} names {f}, which is neither a function nor a sequence"
                )));
            }
        }
        // The stages as they will run, with the new definition in place of the old one.
        self.stages_of(name, &functions)?;
        let sequence = Sequence {
            name: name.to_string(),
            functions,
            last_modified: Utc::now(),
        };
        let Some(version) = self.registry.put_sequence(&sequence)? else {
            return Err(ControllerError::Conflict(format!(
                "A function is named {name}: a sequence cannot be"
            )));
        };
        self.versions.set(Record::Sequence, name, version);
        self.sequences_mut()
            .insert(sequence.name.clone(), Arc::new(sequence.clone()));
        Ok(sequence)
    }

    pub fn sequence(&self, name: &str) -> Option<Arc<Sequence>> {
        self.sequences().get(name).cloned()
    }

    pub fn list_sequences(&self) -> Vec<Sequence> {
        let mut all: Vec<Sequence> = self.sequences().values().map(|s| (**s).clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Deletes sequence `name` (its functions stay); false if there was none.
    pub fn delete_sequence(&self, name: &str) -> Result<bool, ControllerError> {
        let _mutation = self.mutation.locked();
        let (deleted, kept) = self.registry.delete_sequence(name)?;
        if let Some(version) = deleted {
            self.versions.set(Record::Sequence, name, version);
        }
        let existed = deleted.is_some();
        self.sequences_mut().remove(name);
        for run in kept {
            self.end_run(&run);
        }
        Ok(existed)
    }

    /// Runs `sequence` on `payload`: its last stage's answer, or the stage's that failed.
    pub(super) async fn invoke_sequence(
        &self,
        sequence: &Sequence,
        payload: Bytes,
        client_context: Option<String>,
    ) -> Result<Ran, ControllerError> {
        let run = function::new_request_id().to_string();
        let (result, _) = self
            .run_stages(sequence, &run, 0, payload, client_context)
            .await;
        self.end_run(&run);
        result
    }

    /// Delivers a queued event of `sequence`: from where its last delivery stopped if that
    /// run can resume (its stage is the same function, its intermediates still held), else
    /// from the start. Returns the answer and, if the run stopped after its first stage,
    /// where: the caller keeps the run for the retry ([`Controller::keep_run`]) or ends it.
    pub(super) async fn deliver_sequence(
        &self,
        sequence: &Sequence,
        event: &QueuedEvent,
    ) -> (Result<Ran, ControllerError>, Option<Progress>) {
        let functions = self.stages_of(&sequence.name, &sequence.functions).ok();
        let resume = event.resume.as_ref().filter(|p| {
            p.until > Utc::now()
                && functions
                    .as_ref()
                    .and_then(|f| f.get(..=p.stage as usize))
                    .is_some_and(|path| path == p.path.as_slice())
                && self.claim_run(&p.run)
        });
        if let Some(gone) = event.resume.as_ref().filter(|_| resume.is_none()) {
            self.end_run(&gone.run);
        }
        let (run, from, payload) = match resume {
            Some(p) => {
                tracing::info!(sequence = %sequence.name, run = %p.run, "resuming at stage {}", p.stage);
                (p.run.clone(), p.stage as usize, p.payload.clone())
            }
            None => (
                function::new_request_id().to_string(),
                0,
                event.payload.clone(),
            ),
        };
        let (result, stopped) = self
            .run_stages(sequence, &run, from, payload.into(), None)
            .await;
        if stopped.is_none() {
            self.end_run(&run);
        }
        (result, stopped)
    }

    /// A run's intermediate outputs go (OFC §6.3).
    pub(super) fn end_run(&self, run: &str) {
        if let Some(cache) = &self.config.object_cache {
            let dropped = cache.end_run(run);
            if dropped > 0 {
                tracing::debug!(run = %run, "dropped {dropped} intermediate objects");
            }
        }
    }

    /// Takes a kept run for the retry that resumes it, if what it kept is all still there
    /// (without a cache, intermediates are in the backing store).
    fn claim_run(&self, run: &str) -> bool {
        let cache = self.config.object_cache.as_ref();
        cache.is_none_or(|c| c.claim_run(run))
    }

    /// Keeps a run that stopped for its retry, due at `retry_at`: the progress to record, or
    /// None, the run ended, when the retry is further off than [`RESUME_WITHIN`] or the
    /// cache has no room to keep it (the retry then starts over).
    pub(super) fn keep_for_retry(
        &self,
        stopped: &Progress,
        retry_at: DateTime<Utc>,
    ) -> Option<Progress> {
        let retry_in = (retry_at - Utc::now()).to_std().unwrap_or_default();
        let until = Instant::now() + retry_in + RESUME_GRACE;
        let cache = self.config.object_cache.as_ref();
        if retry_in > RESUME_WITHIN || !cache.is_none_or(|c| c.keep_run(&stopped.run, until)) {
            self.end_run(&stopped.run);
            return None;
        }
        let grace = chrono::TimeDelta::from_std(RESUME_GRACE).unwrap_or_default();
        Some(Progress {
            until: retry_at + grace,
            ..stopped.clone()
        })
    }

    /// The functions sequence `name` (whose stages are `stages`) runs, in order: nested
    /// sequences expanded, at most [`MAX_STAGES`] in all.
    pub(super) fn stages_of(
        &self,
        name: &str,
        stages: &[String],
    ) -> Result<Vec<String>, ControllerError> {
        fn expand(
            sequences: &std::collections::HashMap<String, Arc<Sequence>>,
            table_has: &dyn Fn(&str) -> bool,
            path: &mut Vec<String>,
            stages: &[String],
            out: &mut Vec<String>,
        ) -> Result<(), ControllerError> {
            for stage in stages {
                if table_has(stage) {
                    out.push(stage.clone());
                } else if path.contains(stage) {
                    return Err(ControllerError::InvalidParameter(format!(
                        "Sequence {} leads back to itself: {} → {stage}",
                        path[0],
                        path.join(" → ")
                    )));
                } else if let Some(inner) = sequences.get(stage) {
                    path.push(stage.clone());
                    expand(sequences, table_has, path, &inner.functions, out)?;
                    path.pop();
                } else {
                    return Err(ControllerError::NotFound(format!(
                        "Sequence {} names {stage}, which is neither a function nor a sequence",
                        path.last().map(String::as_str).unwrap_or_default()
                    )));
                }
                if out.len() > MAX_STAGES {
                    return Err(ControllerError::InvalidParameter(format!(
                        "Sequence {} runs more than {MAX_STAGES} functions",
                        path[0]
                    )));
                }
            }
            Ok(())
        }
        let table = self.table();
        let table_has = |f: &str| table.contains_key(f);
        let mut out = Vec::new();
        expand(
            &self.sequences(),
            &table_has,
            &mut vec![name.to_string()],
            stages,
            &mut out,
        )?;
        Ok(out)
    }

    /// Runs `sequence`'s stages from `from` on `payload`. On a failure or an error at a
    /// stage after the first, also returns where it stopped.
    async fn run_stages(
        &self,
        sequence: &Sequence,
        run: &str,
        from: usize,
        payload: Bytes,
        client_context: Option<String>,
    ) -> (Result<Ran, ControllerError>, Option<Progress>) {
        let functions = match self.stages_of(&sequence.name, &sequence.functions) {
            Ok(functions) => functions,
            Err(e) => return (Err(e), None),
        };
        let mut at = (from, payload);
        let result = self
            .run_from(sequence, &functions, run, &mut at, client_context)
            .await;
        let failed = result
            .as_ref()
            .map_or(true, |ran| ran.outcome.function_error);
        let (stage, input) = at;
        let stopped = (failed && stage > 0 && stage < functions.len()).then(|| Progress {
            run: run.to_string(),
            stage: stage as u32,
            path: functions[..=stage].to_vec(),
            payload: input.to_vec(),
            // Set when the run is kept for its retry.
            until: Utc::now(),
        });
        (result, stopped)
    }

    /// Runs `functions` from stage `at.0` on input `at.1`; leaves in `at` the last stage
    /// that ran and its input.
    async fn run_from(
        &self,
        sequence: &Sequence,
        functions: &[String],
        run: &str,
        at: &mut (usize, Bytes),
        client_context: Option<String>,
    ) -> Result<Ran, ControllerError> {
        let last = functions.len().saturating_sub(1);
        let mut answer = None;
        for (i, name) in functions.iter().enumerate().skip(at.0) {
            at.0 = i;
            let payload = at.1.clone();
            let entry = self.entry(name)?;
            let source = crate::session::HintSource {
                json: Some(&payload),
                ..Default::default()
            };
            let hints = super::route_hints(&entry.spec, source, &payload)?;
            let request = InvokeRequest {
                request_id: function::new_request_id().to_string(),
                payload,
                trace_id: super::trace_id(),
                client_context: client_context.clone(),
                hints,
                tags: InvocationTags {
                    storage: Some(StorageTag {
                        run: run.to_string(),
                        stage: if i == last {
                            Stage::Final
                        } else {
                            Stage::Intermediate
                        },
                    }),
                    ..Default::default()
                },
            };
            let request_id = request.request_id.clone();
            let outcome = self.run(&entry, request).await?;
            let stop = outcome.function_error;
            if !stop {
                at.1 = if outcome.body.iter().all(u8::is_ascii_whitespace) {
                    Bytes::from_static(b"{}")
                } else {
                    outcome.body.clone()
                };
            }
            answer = Some(Ran {
                outcome,
                request_id,
            });
            if stop {
                break;
            }
        }
        answer.ok_or_else(|| {
            ControllerError::InvalidParameter(format!(
                "Sequence {} runs no function",
                sequence.name
            ))
        })
    }
}
