//! The `kiln` session imports: a guest's reads and writes reach the request's session state.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{compiled_fixture, error_type, invoke, load_wat, request, shared};
use kiln_wasm::PreInit;
use kiln_wasm::{SessionState, StateError, ValueKind};

/// The simplest embedder: the state in a map, with one savepoint for a transaction.
#[derive(Default)]
struct MapState {
    map: Mutex<BTreeMap<String, Bytes>>,
    savepoint: Mutex<Option<BTreeMap<String, Bytes>>>,
}

impl SessionState for MapState {
    fn id(&self) -> &str {
        "s1"
    }
    fn get(&self, key: &str) -> Option<Bytes> {
        self.map.lock().unwrap().get(key).cloned()
    }
    fn put(&self, key: &str, _: ValueKind, value: Bytes) -> Result<(), StateError> {
        if value.len() > 1024 {
            return Err(StateError::LimitExceeded("over 1024 bytes".into()));
        }
        self.map.lock().unwrap().insert(key.into(), value);
        Ok(())
    }
    fn delete(&self, key: &str) -> Result<(), StateError> {
        self.map.lock().unwrap().remove(key);
        Ok(())
    }
    fn keys(&self) -> Vec<String> {
        self.map.lock().unwrap().keys().cloned().collect()
    }
    fn begin(&self) -> Result<(), StateError> {
        *self.savepoint.lock().unwrap() = Some(self.map.lock().unwrap().clone());
        Ok(())
    }
    fn end(&self, commit: bool) -> Result<(), StateError> {
        let saved = self
            .savepoint
            .lock()
            .unwrap()
            .take()
            .ok_or_else(|| StateError::Invalid("no transaction".into()))?;
        if !commit {
            *self.map.lock().unwrap() = saved;
        }
        Ok(())
    }
}

/// The body of a successful request of `state`'s session.
fn answer(module: &kiln_wasm::FunctionModule, state: &Arc<MapState>) -> String {
    let mut req = request(b"{}");
    req.session = Some(state.clone());
    let response = invoke(module, req);
    assert_eq!(
        response.error,
        None,
        "{}",
        String::from_utf8_lossy(&response.logs)
    );
    String::from_utf8_lossy(&response.body).into_owned()
}

#[test]
fn a_guest_reads_and_writes_its_sessions_state_across_fresh_instances() {
    let module = load_wat("session");
    let state = Arc::new(MapState::default());
    for expected in ["n=1", "n=2", "n=3"] {
        assert_eq!(answer(&module, &state), expected);
    }
    assert_eq!(state.get("n").unwrap().as_ref(), &3i32.to_le_bytes());
}

#[test]
fn without_a_session_every_call_says_so() {
    let response = invoke(&load_wat("session"), request(b"{}"));
    assert_eq!(String::from_utf8_lossy(&response.body), "n=-");
}

#[test]
fn a_pointer_outside_the_guests_memory_traps() {
    let mut req = request(b"x");
    req.session = Some(Arc::new(MapState::default()));
    let response = invoke(&load_wat("session"), req);
    assert_eq!(error_type(&response), "Runtime.ExitError");
    let logs = String::from_utf8_lossy(&response.logs);
    assert!(logs.contains("outside the guest's memory"), "{logs}");
}

#[test]
fn the_c_header_reaches_the_state_and_pre_initialisation_has_no_session() {
    let Some(wasm) = compiled_fixture("c-session") else {
        return;
    };
    let module = shared().cache.load(&wasm).unwrap();
    assert!(
        matches!(module.preinit(), PreInit::Snapshot { .. }),
        "{:?}",
        module.preinit()
    );
    let state = Arc::new(MapState::default());
    for n in 1..=2 {
        assert_eq!(
            answer(&module, &state),
            format!("n={n} keys=n, undone=1 bad_json=1 init=-2")
        );
    }
    let response = invoke(&module, request(b"{}"));
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        "no session init=-2"
    );
}
