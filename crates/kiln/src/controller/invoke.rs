//! Invoke: a function or a sequence, synchronously, queued (Event) or not at all (DryRun).
//!
//! [`Controller::run`] is one invocation on the node agent, in steps: the event's features →
//! the memory limit its function's model predicts → the object cache's admission → the call
//! (again at MemorySize if it was killed for memory under a prediction) → what the memory and
//! cache-benefit models learn → metrics and logs.

use bytes::Bytes;
use chrono::Utc;

use super::{Controller, ControllerError, Entry};
use super::{MAX_ASYNC_PAYLOAD, MAX_SYNC_PAYLOAD};
use crate::agent::{AgentError, InvokeOutcome, InvokeRequest, RouteHints};
use crate::function::{self, InstanceSpec, InvocationTags, MemorySizing, Shadow, SharedSpec};
use crate::metrics::Metrics;
use crate::objects::cache::IoTimes;
use crate::predict;

/// How an invocation should be run (Lambda's InvocationType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationType {
    RequestResponse,
    Event,
    DryRun,
}

/// The result of Invoke.
pub enum Invoked {
    Done {
        outcome: InvokeOutcome,
        request_id: String,
        /// The version that ran: `$LATEST` or a number (an alias's pick).
        version: String,
    },
    Queued {
        request_id: String,
    },
    DryRun,
}

/// How long an invocation waits for its version's start paths to be built: Lambda's bound of
/// an init phase. Past it, it starts on whatever path there is.
const PREPARATION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An input object's model features: `object.size`, and for images `object.width`,
/// `object.height`, `object.format`.
fn object_features(
    known: &crate::objects::ObjectFeatures,
) -> Vec<(String, predict::features::Value)> {
    use predict::features::Value;
    let mut out = vec![("size".to_string(), Value::Number(known.size as f64))];
    if let Some(media) = &known.media {
        out.push(("width".into(), Value::Number(media.width as f64)));
        out.push(("height".into(), Value::Number(media.height as f64)));
        out.push(("format".into(), Value::Nominal(media.format.clone())));
    }
    out
}

/// An invocation's payload, checked: within `limit` bytes (for invocation type `kind`), and
/// JSON; an empty one is `{}`.
pub(super) fn checked_payload(
    payload: Bytes,
    limit: usize,
    kind: &str,
) -> Result<Bytes, ControllerError> {
    if payload.len() > limit {
        return Err(ControllerError::TooLarge(format!(
            "{} byte payload is too large for the {kind} invocation type (limit {limit} bytes)",
            payload.len()
        )));
    }
    let payload = if payload.iter().all(u8::is_ascii_whitespace) {
        Bytes::from_static(b"{}")
    } else {
        payload
    };
    if serde_json::from_slice::<serde::de::IgnoredAny>(&payload).is_err() {
        return Err(ControllerError::InvalidRequestContent(
            "Could not parse request body into json: Could not parse payload into json: Unexpected character".into(),
        ));
    }
    Ok(payload)
}

/// How an invocation runs, beyond its type.
#[derive(Debug, Clone, Default)]
pub struct InvokeOptions {
    /// A shadow run: its writes have no visible effect (burst offloading).
    pub shadow: bool,
    /// Where the invocation's writes are recorded (burst offloading's fallback).
    pub ledger: Option<crate::function::LedgerRef>,
}

impl Controller {
    /// Invoke. `source` is where a function with sessions finds the request's session id (its
    /// `json` defaults to the payload).
    pub async fn invoke(
        &self,
        name: &str,
        payload: Bytes,
        kind: InvocationType,
        client_context: Option<String>,
        source: crate::session::HintSource<'_>,
    ) -> Result<Invoked, ControllerError> {
        self.invoke_with(
            name,
            payload,
            kind,
            client_context,
            source,
            InvokeOptions::default(),
        )
        .await
    }

    /// [`Controller::invoke`] with options. A shadow run of a sequence or an Event is refused.
    pub async fn invoke_with(
        &self,
        name: &str,
        payload: Bytes,
        kind: InvocationType,
        client_context: Option<String>,
        source: crate::session::HintSource<'_>,
        options: InvokeOptions,
    ) -> Result<Invoked, ControllerError> {
        if options.shadow
            && (kind != InvocationType::RequestResponse || self.sequence(name).is_some())
        {
            return Err(ControllerError::InvalidParameter(
                "only a function's synchronous invocation can be a shadow run".into(),
            ));
        }
        if let Some(sequence) = self.sequence(name) {
            if !self.table().contains_key(name) {
                return match kind {
                    InvocationType::DryRun => Ok(Invoked::DryRun),
                    InvocationType::Event => {
                        let payload = checked_payload(payload, MAX_ASYNC_PAYLOAD, "Event")?;
                        self.enqueue_event(&sequence.name, &payload)
                    }
                    InvocationType::RequestResponse => {
                        let payload =
                            checked_payload(payload, MAX_SYNC_PAYLOAD, "RequestResponse")?;
                        let ran = self
                            .invoke_sequence(&sequence, payload, client_context)
                            .await?;
                        Ok(Invoked::Done {
                            outcome: ran.outcome,
                            request_id: ran.request_id,
                            version: crate::function::versions::latest(),
                        })
                    }
                };
            }
        }
        let (entry, version) = self.invocation_target(name)?;
        let payload = if kind == InvocationType::Event {
            checked_payload(payload, MAX_ASYNC_PAYLOAD, "Event")?
        } else {
            checked_payload(payload, MAX_SYNC_PAYLOAD, "RequestResponse")?
        };
        let hints = route_hints(&entry.spec, source, &payload)?;
        let request_id = function::new_request_id().to_string();
        match kind {
            InvocationType::DryRun => Ok(Invoked::DryRun),
            // A version's event runs that version; an alias's picks when it is delivered.
            InvocationType::Event => match self.function_ref(name)?.qualifier {
                Some(q) if q != crate::function::versions::LATEST => {
                    self.enqueue_event(&format!("{}:{q}", entry.function.name), &payload)
                }
                _ => self.enqueue_event(&entry.function.name, &payload),
            },
            InvocationType::RequestResponse => {
                let request = InvokeRequest {
                    request_id: request_id.clone(),
                    payload,
                    trace_id: trace_id(),
                    client_context,
                    hints,
                    tags: InvocationTags {
                        shadow: if options.shadow {
                            Shadow::Yes
                        } else {
                            Shadow::No
                        },
                        ledger: options.ledger.clone(),
                        ..Default::default()
                    },
                };
                let outcome = self.run(&entry, request).await?;
                Ok(Invoked::Done {
                    outcome,
                    request_id,
                    version,
                })
            }
        }
    }

    /// Queues a schedule's firing for time `at` as an Event invocation of `name` (a function,
    /// a qualified one, or a sequence), recorded with the event in one transaction (see
    /// `schedules`): a crash leaves the firing either queued and recorded or neither.
    pub fn enqueue_firing(
        &self,
        name: &str,
        payload: Bytes,
        schedule: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Invoked, ControllerError> {
        let payload = checked_payload(payload, MAX_ASYNC_PAYLOAD, "Event")?;
        let target = match self.sequence(name) {
            Some(sequence) if !self.table().contains_key(name) => sequence.name.clone(),
            _ => {
                let (entry, _) = self.invocation_target(name)?;
                match self.function_ref(name)?.qualifier {
                    Some(q) if q != crate::function::versions::LATEST => {
                        format!("{}:{q}", entry.function.name)
                    }
                    _ => entry.function.name.clone(),
                }
            }
        };
        self.queue(&target, &payload, Some((schedule, at)))
    }

    /// Queues an Event invocation of `target` (a function or a sequence) durably: it is
    /// acknowledged once it is in SQLite, and delivered by the queue.
    pub(super) fn enqueue_event(
        &self,
        target: &str,
        payload: &[u8],
    ) -> Result<Invoked, ControllerError> {
        self.queue(target, payload, None)
    }

    fn queue(
        &self,
        target: &str,
        payload: &[u8],
        firing: Option<(&str, chrono::DateTime<chrono::Utc>)>,
    ) -> Result<Invoked, ControllerError> {
        let request_id = function::new_request_id().to_string();
        let registry = &self.events;
        tokio::task::block_in_place(|| match firing {
            Some((schedule, at)) => {
                registry.enqueue_firing(&request_id, target, payload, schedule, &at)
            }
            None => registry.enqueue(&request_id, target, payload),
        })?;
        self.metrics
            .async_events
            .get_or_create(&crate::metrics::OutcomeLabels {
                outcome: "queued".into(),
            })
            .inc();
        self.queue_wakeup.notify_one();
        Ok(Invoked::Queued { request_id })
    }

    /// Runs one invocation on the agent, at the memory its function's model predicts, and
    /// records its log and metrics. An invocation killed for memory under a predicted limit is
    /// run again at once at MemorySize: the caller never sees an under-prediction.
    ///
    /// The steps: the event's features (only for a function whose memory is predicted or a
    /// node with an object cache) → the predicted limit → the cache's admission → the call →
    /// what the models learn → metrics and logs.
    pub(super) async fn run(
        &self,
        entry: &Entry,
        mut request: InvokeRequest,
    ) -> Result<InvokeOutcome, ControllerError> {
        // A version whose package is still being extracted or whose start paths are still being
        // built (`Pending`) is waited for, within Lambda's bound of an init: its first
        // invocations then take the hot path. While an update's package is being extracted, or
        // after its extraction failed, the code that ran before the update runs, as on Lambda.
        let mut entry = entry;
        if entry.deferred.load(std::sync::atomic::Ordering::Relaxed) {
            match &entry.fallback {
                Some(previous) if self.unpacks.pending(&entry.spec.code_sha256) => {
                    entry = previous;
                }
                _ => self.wait_unpacked(entry, PREPARATION_WAIT).await?,
            }
        }
        if let Some(preparing) = entry.preparing(&*self.agent) {
            preparing.wait(PREPARATION_WAIT).await;
        }
        let spec = &entry.spec;
        let features = self.features(spec, &request.payload);
        self.predict(spec, features.as_ref(), &mut request);
        let io_before = self.admit(spec, features.as_ref(), &mut request);
        let result = self.call(entry, request, features.as_ref()).await;
        if let Ok(outcome) = &result {
            self.learn_benefit(spec, features.as_ref(), io_before, outcome);
            self.learn(spec, features, outcome);
        }
        self.record(entry, result)
    }

    /// The event's model features, where a model or the cache will read them.
    fn features(&self, spec: &SharedSpec, payload: &[u8]) -> Option<predict::Features> {
        let wanted = self.predictor.applies(spec.memory_mb) || self.config.object_cache.is_some();
        wanted.then(|| {
            let (mut features, object) = predict::Features::of_event(payload);
            // The input object's size and media metadata, as far as kiln knows them (a remote
            // backing store is asked nothing on the invocation's path).
            if let Some(known) =
                object.and_then(|o| self.config.object_features.object(&o.bucket, &o.key))
            {
                features.add_object(object_features(&known));
            }
            features
        })
    }

    /// The memory limit the function's model predicts for this invocation, if it is sized.
    fn predict(
        &self,
        spec: &SharedSpec,
        features: Option<&predict::Features>,
        request: &mut InvokeRequest,
    ) {
        request.hints.memory_mb = features
            .filter(|_| spec.memory_sizing == MemorySizing::Predicted)
            .and_then(|f| self.predictor.predict(&spec.function, spec.memory_mb, f));
    }

    /// The object cache's admission of this invocation's objects; returns the function's
    /// object-store times before it ran, for what the benefit model learns after.
    fn admit(
        &self,
        spec: &SharedSpec,
        features: Option<&predict::Features>,
        request: &mut InvokeRequest,
    ) -> Option<IoTimes> {
        let (cache, features) = (self.config.object_cache.as_ref()?, features?);
        // The invocation's own decision travels with it to its sandbox's object store; the
        // function's latest one covers requests that cannot be told apart.
        let decision = match cache.configured_admission() {
            // The configuration decides (`--object-cache-admission all`, a draining cache).
            Some(true) => "all",
            Some(false) => "none",
            None => {
                let admit = self.predictor.benefits(&spec.function, features);
                cache.set_admission(spec.name(), admit.unwrap_or(true));
                request.tags.admit = admit;
                match admit {
                    Some(true) => "admit",
                    Some(false) => "bypass",
                    None => "learning",
                }
            }
        };
        self.metrics
            .cache_admissions
            .get_or_create(&crate::metrics::DecisionLabels {
                function: spec.name().to_string(),
                decision: decision.into(),
            })
            .inc();
        Some(cache.io_times(spec.name()))
    }

    /// Runs the invocation on the agent; once more at MemorySize if it was killed for memory
    /// under a predicted limit (the model learns from the kill).
    async fn call(
        &self,
        entry: &Entry,
        mut request: InvokeRequest,
        features: Option<&predict::Features>,
    ) -> Result<InvokeOutcome, AgentError> {
        let spec = &entry.spec;
        let result = self.agent.invoke(spec.clone(), request.clone()).await;
        let Ok(outcome) = &result else {
            return result;
        };
        if request.hints.memory_mb.is_some() {
            entry.series.sized(&self.metrics).inc();
        }
        if let Some(write) = outcome.limit_write {
            self.metrics
                .memory_limit_writes
                .observe(write.as_secs_f64());
        }
        if !(outcome.out_of_memory && request.hints.memory_mb.is_some()) {
            return result;
        }
        tracing::info!(
            function = %spec.function,
            request_id = %request.request_id,
            "killed for memory at the predicted {} MB; running it again at {} MB",
            request.hints.memory_mb.unwrap_or_default(),
            spec.memory_mb
        );
        self.metrics
            .prediction_retries
            .get_or_create(&Metrics::function(spec.name()))
            .inc();
        self.learn(spec, features.cloned(), outcome);
        // At MemorySize, and booked at it: the routing hint and the reservation follow the limit.
        request.hints.memory_mb = None;
        self.agent.invoke(spec.clone(), request).await
    }

    /// Tells the function's cache-benefit model how the invocation's time split between the
    /// object store and the rest.
    fn learn_benefit(
        &self,
        spec: &SharedSpec,
        features: Option<&predict::Features>,
        io_before: Option<IoTimes>,
        outcome: &InvokeOutcome,
    ) {
        let (Some(cache), Some(before), Some(features)) =
            (self.config.object_cache.as_ref(), io_before, features)
        else {
            return;
        };
        // The invocation's Extract + Load, as the backing store would have served them, and
        // the rest of its time (concurrent invocations of the function share the counters).
        let after = cache.io_times(spec.name());
        let served_ms = after.served_ns.saturating_sub(before.served_ns) as f64 / 1e6;
        let backend_ms = after.backend_ns.saturating_sub(before.backend_ns) as f64 / 1e6;
        let duration_ms = outcome.duration.as_secs_f64() * 1e3;
        self.predictor.observe_benefit(
            &spec.function,
            features.clone(),
            predict::Etl {
                extract_load_ms: backend_ms,
                transform_ms: (duration_ms - served_ms).max(0.0),
            },
            // The first run in a new instance. A hot fork's zygote ran the function's init and
            // warm-up, but not its handler's first calls (an SDK client's first request
            // resolves and connects): it counts as a first run too.
            outcome.cold_start.is_some(),
        );
    }

    /// Counts the invocation in the metrics and hands its log to the log writer.
    fn record(
        &self,
        entry: &Entry,
        result: Result<InvokeOutcome, AgentError>,
    ) -> Result<InvokeOutcome, ControllerError> {
        let spec = &entry.spec;
        match result {
            Ok(outcome) => {
                entry.series.invocations(&self.metrics).inc();
                if outcome.function_error {
                    entry.series.errors(&self.metrics).inc();
                }
                if let Some(path) = outcome.cold_start {
                    self.metrics
                        .cold_starts
                        .get_or_create(&crate::metrics::StartLabels {
                            function: spec.name().to_string(),
                            path: path.as_str().into(),
                        })
                        .inc();
                }
                entry
                    .series
                    .duration(&self.metrics)
                    .observe(outcome.duration.as_secs_f64());
                entry
                    .series
                    .note_memory(outcome.max_memory_mb, outcome.memory_limit_mb);
                self.logs.append(spec.name(), outcome.log.clone());
                Ok(outcome)
            }
            Err(e) => {
                if matches!(e, AgentError::ThrottledNode | AgentError::ThrottledReserved) {
                    self.metrics
                        .throttles
                        .get_or_create(&Metrics::function(spec.name()))
                        .inc();
                }
                Err(e.into())
            }
        }
    }

    /// Tells the function's memory model what an invocation used; a training it calls for runs
    /// on the blocking pool.
    fn learn(
        &self,
        spec: &SharedSpec,
        features: Option<predict::Features>,
        outcome: &InvokeOutcome,
    ) {
        let Some(features) = features else {
            return;
        };
        let training = self.predictor.observe(
            &spec.function,
            spec.memory_mb,
            features,
            outcome.max_memory_mb,
            outcome.out_of_memory,
        );
        if let Some(training) = training {
            tokio::task::spawn_blocking(move || training.run());
        }
    }
}

/// An X-Ray style trace header, which Lambda hands every invocation.
pub(super) fn trace_id() -> String {
    let mut buf = uuid::Uuid::encode_buffer();
    let id = function::new_request_id().simple().encode_lower(&mut buf);
    format!(
        "Root=1-{:08x}-{};Parent={};Sampled=0",
        Utc::now().timestamp(),
        &id[..24],
        &id[16..32]
    )
}

/// The routing hints of a request to `spec`: its session id, if the function has sessions and
/// the request names one.
pub(crate) fn route_hints(
    spec: &InstanceSpec,
    source: crate::session::HintSource<'_>,
    payload: &[u8],
) -> Result<RouteHints, ControllerError> {
    let Some(sessions) = &spec.sessions else {
        return Ok(RouteHints::default());
    };
    let source = crate::session::HintSource {
        json: Some(source.json.unwrap_or(payload)),
        ..source
    };
    let session = crate::session::extract(&sessions.hint, &source)
        .map_err(|e| ControllerError::InvalidParameter(format!("Invalid session id: {e}")))?;
    Ok(RouteHints {
        session,
        memory_mb: None,
    })
}
