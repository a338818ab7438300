//! Sequences (OpenWhisk's): a name for a list of functions (or of other sequences, expanded in
//! place), invoked as one function, synchronously or as an Event. Each function's answer is the
//! next one's event; the last answer is the sequence's; a function error stops it. The objects the intermediate stages write go to the object cache only and
//! are dropped when the run ends, and the final stage's outputs are dropped from the cache once
//! written back (OFC §6.3): the run's storage tag rides with each stage's invocation
//! (`InvokeRequest::storage`).

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Controller, ControllerError};
use crate::agent::{InvokeOutcome, InvokeRequest};
use crate::function::{self, Stage, StorageTag};

/// Functions in one sequence, at most (OpenWhisk's default limit).
pub const MAX_STAGES: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Sequence {
    pub name: String,
    pub functions: Vec<String>,
    pub last_modified: DateTime<Utc>,
}

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
        let _mutation = self.mutation.lock().unwrap_or_else(|p| p.into_inner());
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
        self.registry
            .put_sequence(&sequence.name, &sequence.functions, &sequence.last_modified)?;
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
        let _mutation = self.mutation.lock().unwrap_or_else(|p| p.into_inner());
        let existed = self.registry.delete_sequence(name)?;
        self.sequences_mut().remove(name);
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
        let result = self
            .run_stages(sequence, &run, payload, client_context)
            .await;
        if let Some(cache) = &self.config.object_cache {
            let dropped = cache.end_run(&run);
            if dropped > 0 {
                tracing::debug!(sequence = %sequence.name, run = %run, "dropped {dropped} intermediate objects");
            }
        }
        result
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

    async fn run_stages(
        &self,
        sequence: &Sequence,
        run: &str,
        mut payload: Bytes,
        client_context: Option<String>,
    ) -> Result<Ran, ControllerError> {
        let functions = self.stages_of(&sequence.name, &sequence.functions)?;
        let last = functions.len().saturating_sub(1);
        let mut answer = None;
        for (i, name) in functions.iter().enumerate() {
            let entry = self.entry(name)?;
            let source = crate::session::HintSource {
                json: Some(&payload),
                ..Default::default()
            };
            let hints = super::route_hints(&entry.spec, source, &payload)?;
            let request = InvokeRequest {
                request_id: function::new_request_id().to_string(),
                payload: payload.clone(),
                trace_id: super::trace_id(),
                client_context: client_context.clone(),
                hints,
                memory_limit_mb: None,
                storage: Some(StorageTag {
                    run: run.to_string(),
                    stage: if i == last {
                        Stage::Final
                    } else {
                        Stage::Intermediate
                    },
                }),
                admit_objects: None,
            };
            let request_id = request.request_id.clone();
            let outcome = self.run(&entry.spec, request).await?;
            let stop = outcome.function_error;
            payload = if outcome.body.iter().all(u8::is_ascii_whitespace) {
                Bytes::from_static(b"{}")
            } else {
                outcome.body.clone()
            };
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
