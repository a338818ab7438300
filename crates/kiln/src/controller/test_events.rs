//! A function's shareable test events: saved from the console's test tab for every viewer of
//! the function (a viewer's private events stay in their browser, as the Lambda console's do),
//! kept in the registry beside the function and deleted with it.

use chrono::Utc;

use super::registry::TestEvent;
use super::{Controller, ControllerError};
use crate::sync::LockExt;

/// As many as the Lambda console keeps per function.
pub const MAX_TEST_EVENTS: usize = 10;
/// The largest event kept, in bytes of JSON.
pub const MAX_TEST_EVENT_BYTES: usize = 256 * 1024;

/// The Lambda console's rule for a test event's name: 1 to 25 letters, digits, `-` and `_`.
fn valid_event_name(name: &str) -> bool {
    (1..=25).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Controller {
    /// The function's shareable test events, by name.
    pub fn test_events(&self, function: &str) -> Result<Vec<TestEvent>, ControllerError> {
        let name = self.get(function)?.name;
        Ok(self.registry.test_events(&name)?)
    }

    /// Saves a test event (JSON text), replacing one of the same name.
    pub fn put_test_event(
        &self,
        function: &str,
        event_name: &str,
        event: &[u8],
    ) -> Result<TestEvent, ControllerError> {
        if !valid_event_name(event_name) {
            return Err(ControllerError::InvalidParameter(format!(
                "A test event's name has 1 to 25 letters, digits, '-' and '_': '{event_name}' does not"
            )));
        }
        if event.len() > MAX_TEST_EVENT_BYTES {
            return Err(ControllerError::TooLarge(format!(
                "A test event is at most {MAX_TEST_EVENT_BYTES} bytes; this one has {}",
                event.len()
            )));
        }
        let text = std::str::from_utf8(event)
            .ok()
            .filter(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok())
            .ok_or_else(|| {
                ControllerError::InvalidRequestContent(
                    "A test event must be a JSON document".into(),
                )
            })?;
        let _mutation = self.mutation.locked();
        let name = self.get(function)?.name;
        let saved = self.registry.test_events(&name)?;
        if saved.len() >= MAX_TEST_EVENTS && !saved.iter().any(|e| e.name == event_name) {
            return Err(ControllerError::InvalidParameter(format!(
                "Function {name} has {MAX_TEST_EVENTS} shareable test events, the most it may keep: \
                 delete one first"
            )));
        }
        let test_event = TestEvent {
            name: event_name.to_string(),
            event: text.to_string(),
            last_modified: Utc::now(),
        };
        if !self.registry.put_test_event(&name, &test_event)? {
            return Err(ControllerError::NotFound(format!(
                "Function not found: {name} (deleted while its test event was saved)"
            )));
        }
        Ok(test_event)
    }

    /// Deletes a test event; NotFound if the function has none of that name.
    pub fn delete_test_event(
        &self,
        function: &str,
        event_name: &str,
    ) -> Result<(), ControllerError> {
        let _mutation = self.mutation.locked();
        let name = self.get(function)?.name;
        if self.registry.delete_test_event(&name, event_name)? {
            Ok(())
        } else {
            Err(ControllerError::NotFound(format!(
                "Function {name} has no test event named '{event_name}'"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::valid_event_name;

    #[test]
    fn event_names_follow_the_lambda_consoles_rule() {
        for name in ["a", "order-1", "Big_Event", &"x".repeat(25)] {
            assert!(valid_event_name(name), "{name}");
        }
        for name in [
            "",
            "has space",
            "slash/",
            "dot.json",
            "<b>",
            &"x".repeat(26),
        ] {
            assert!(!valid_event_name(name), "{name}");
        }
    }
}
