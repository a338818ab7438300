//! The features of one invocation (OFC §5.1): only what the request tells before the function
//! runs. The payload's size; the function's own arguments, the top-level scalars of the event
//! (numbers as numbers, strings and booleans as nominal values); and, when the event names an
//! object of the store (`{"bucket": …, "key": …}` or an S3 notification's first record), that
//! object's features as the store keeps them.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// Strings longer than this are not nominal arguments (ids, texts): they would make one
/// category per request.
const MAX_NOMINAL_CHARS: usize = 64;
/// Arguments kept per request, in the event's order.
const MAX_ARGUMENTS: usize = 32;
/// A feature the request does not have (trees split it apart from every real value).
pub const MISSING: f64 = -1.0;
/// Distinct values a nominal feature keeps; later ones are [`MISSING`].
pub const MAX_NOMINAL_VALUES: usize = 32;
/// Events larger than this are not parsed for arguments: parsing is on the invocation's path,
/// and a large event is data rather than arguments (its size is still a feature).
const MAX_PARSED_BYTES: usize = 64 * 1024;

/// One feature's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Number(f64),
    Nominal(String),
}

/// The features of one invocation, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Features(pub BTreeMap<String, Value>);

/// An object of the store that an event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub bucket: String,
    pub key: String,
}

impl Features {
    /// The features of an event (a JSON payload), without the input object's.
    pub fn of_event(payload: &[u8]) -> (Features, Option<ObjectRef>) {
        let mut features = BTreeMap::new();
        features.insert(
            "payload_bytes".to_string(),
            Value::Number(payload.len() as f64),
        );
        if payload.len() > MAX_PARSED_BYTES {
            return (Features(features), None);
        }
        let Ok(serde_json::Value::Object(event)) = serde_json::from_slice(payload) else {
            return (Features(features), None);
        };
        for (name, value) in event.iter().take(MAX_ARGUMENTS) {
            let value = match value {
                serde_json::Value::Number(n) => n.as_f64().map(Value::Number),
                serde_json::Value::Bool(b) => Some(Value::Nominal(b.to_string())),
                serde_json::Value::String(s) if s.chars().count() <= MAX_NOMINAL_CHARS => {
                    Some(Value::Nominal(s.clone()))
                }
                _ => None,
            };
            if let Some(value) = value {
                features.insert(format!("arg.{name}"), value);
            }
        }
        let object = object_ref(&event);
        if object.is_some() {
            // The object's name is not a feature (each key would be a value of its own): what
            // the object is (its size, its media metadata) is, through `add_object`.
            for (name, _) in &event {
                if name.eq_ignore_ascii_case("bucket") || name.eq_ignore_ascii_case("key") {
                    features.remove(&format!("arg.{name}"));
                }
            }
        }
        (Features(features), object)
    }

    /// Adds the input object's features (`object.size`, and what the store extracted).
    pub fn add_object(&mut self, object: impl IntoIterator<Item = (String, Value)>) {
        for (name, value) in object {
            self.0.insert(format!("object.{name}"), value);
        }
    }
}

/// The object an event names: `bucket` and `key` (any case) at its top level, or the first
/// record of an S3 event notification.
fn object_ref(event: &serde_json::Map<String, serde_json::Value>) -> Option<ObjectRef> {
    let field = |map: &serde_json::Map<String, serde_json::Value>, name: &str| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_str())
            .map(str::to_string)
    };
    if let (Some(bucket), Some(key)) = (field(event, "bucket"), field(event, "key")) {
        return Some(ObjectRef { bucket, key });
    }
    let s3 = event.get("Records")?.get(0)?.get("s3")?;
    Some(ObjectRef {
        bucket: s3.get("bucket")?.get("name")?.as_str()?.to_string(),
        // Notifications carry keys URL-encoded, spaces as '+'.
        key: percent_encoding::percent_decode_str(
            &s3.get("object")?.get("key")?.as_str()?.replace('+', " "),
        )
        .decode_utf8()
        .ok()?
        .into_owned(),
    })
}

/// How one function's features become the columns of its model: names in the order they were
/// first seen, and each nominal value's number. Grows as new names and values appear; rows made
/// before have [`MISSING`] in the new columns.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Schema {
    columns: Vec<String>,
    #[serde(skip)]
    index: HashMap<String, usize>,
    nominals: HashMap<String, HashMap<String, f64>>,
}

impl Schema {
    /// Learns the names and nominal values of `features`.
    pub fn learn(&mut self, features: &Features) {
        self.reindex();
        for (name, value) in &features.0 {
            if !self.index.contains_key(name) {
                self.index.insert(name.clone(), self.columns.len());
                self.columns.push(name.clone());
            }
            if let Value::Nominal(v) = value {
                let values = self.nominals.entry(name.clone()).or_default();
                // An argument with ever new values (an output key, an id) names things rather
                // than describing them: past a bound its new values are unknown.
                if values.len() < MAX_NOMINAL_VALUES {
                    let next = values.len() as f64;
                    values.entry(v.clone()).or_insert(next);
                }
            }
        }
    }

    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// The features' names, in column order.
    pub fn names(&self) -> &[String] {
        &self.columns
    }

    /// `features` as a row of this schema: unknown names are ignored, absent ones and unknown
    /// nominal values are [`MISSING`].
    pub fn row(&self, features: &Features, out: &mut Vec<f64>) {
        out.clear();
        out.resize(self.columns.len(), MISSING);
        for (name, value) in &features.0 {
            let Some(&column) = self.index.get(name) else {
                continue;
            };
            out[column] = match value {
                Value::Number(n) => *n,
                Value::Nominal(v) => self
                    .nominals
                    .get(name)
                    .and_then(|values| values.get(v))
                    .copied()
                    .unwrap_or(MISSING),
            };
        }
    }

    /// Rebuilds the name index (it is not stored).
    fn reindex(&mut self) {
        if self.index.len() != self.columns.len() {
            self.index = self
                .columns
                .iter()
                .enumerate()
                .map(|(i, name)| (name.clone(), i))
                .collect();
        }
    }

    /// Ready for [`Schema::row`] after being read back.
    pub fn loaded(mut self) -> Self {
        self.reindex();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_gives_its_size_arguments_and_object() {
        let event = br#"{"radius": 3, "mode": "fast", "big": true, "nested": {"x": 1}, "bucket": "img", "key": "a b.jpg"}"#;
        let (features, object) = Features::of_event(event);
        assert_eq!(
            features.0["payload_bytes"],
            Value::Number(event.len() as f64)
        );
        assert_eq!(features.0["arg.radius"], Value::Number(3.0));
        assert_eq!(features.0["arg.mode"], Value::Nominal("fast".into()));
        assert_eq!(features.0["arg.big"], Value::Nominal("true".into()));
        assert!(!features.0.contains_key("arg.nested"));
        // The object's name is not a feature: every key would be a class of its own.
        assert!(!features.0.contains_key("arg.bucket") && !features.0.contains_key("arg.key"));
        assert_eq!(
            object,
            Some(ObjectRef {
                bucket: "img".into(),
                key: "a b.jpg".into()
            })
        );
        let notification = br#"{"Records": [{"s3": {"bucket": {"name": "in"}, "object": {"key": "photos/a+b%21.png"}}}]}"#;
        assert_eq!(
            Features::of_event(notification).1,
            Some(ObjectRef {
                bucket: "in".into(),
                key: "photos/a b!.png".into()
            })
        );
        let (features, object) = Features::of_event(b"not json");
        assert_eq!(features.0.len(), 1);
        assert_eq!(object, None);
    }

    #[test]
    fn a_schema_grows_and_keeps_its_columns() {
        let mut schema = Schema::default();
        let (a, _) = Features::of_event(br#"{"n": 5, "mode": "x"}"#);
        schema.learn(&a);
        let mut row = Vec::new();
        schema.row(&a, &mut row);
        assert_eq!(schema.width(), 3);
        let (b, _) = Features::of_event(br#"{"mode": "y", "extra": 1}"#);
        schema.learn(&b);
        schema.row(&a, &mut row);
        assert_eq!(row.len(), 4);
        assert_eq!(row[3], MISSING, "a column a row never had is missing");
        let mut other = Vec::new();
        schema.row(&b, &mut other);
        assert_ne!(row, other);
        // Read back from JSON, it maps the same way.
        let text = serde_json::to_string(&schema).unwrap();
        let back: Schema = serde_json::from_str::<Schema>(&text).unwrap().loaded();
        let mut again = Vec::new();
        back.row(&b, &mut again);
        assert_eq!(again, other);
    }
}
