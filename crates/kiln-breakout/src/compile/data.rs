//! The module's data: string constants, laid out as the runtime's strings so the code holds
//! them as values, and the reasons of its misses. It is placed at
//! [`DATA_START`](crate::runtime::heap::DATA_START); the heap starts after it.

use std::collections::HashMap;

use crate::runtime::heap::{string_hash, DATA_START};
use crate::runtime::value::{Value, TAG_STRING};

#[derive(Default)]
pub struct Data {
    pub bytes: Vec<u8>,
    strings: HashMap<String, u32>,
    reasons: HashMap<(String, Option<String>), (u32, u32)>,
}

impl Data {
    fn align(&mut self) {
        while !self.bytes.len().is_multiple_of(8) {
            self.bytes.push(0);
        }
    }

    fn address(&self) -> u32 {
        DATA_START + self.bytes.len() as u32
    }

    /// A string constant as a value (each text once).
    pub fn string(&mut self, text: &str) -> Value {
        if let Some(&address) = self.strings.get(text) {
            return Value::reference(TAG_STRING, address);
        }
        self.align();
        let address = self.address();
        let units: Vec<u16> = text.encode_utf16().collect();
        self.bytes
            .extend_from_slice(&(units.len() as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&string_hash(units.iter().copied()).to_le_bytes());
        for unit in units {
            self.bytes.extend_from_slice(&unit.to_le_bytes());
        }
        self.strings.insert(text.to_string(), address);
        Value::reference(TAG_STRING, address)
    }

    /// A miss's reason and position, as the address and length of `reason` NUL `at`.
    pub fn reason(&mut self, reason: &str, at: Option<&str>) -> (u32, u32) {
        let key = (reason.to_string(), at.map(String::from));
        if let Some(&found) = self.reasons.get(&key) {
            return found;
        }
        let address = self.address();
        self.bytes.extend_from_slice(reason.as_bytes());
        if let Some(at) = at {
            self.bytes.push(0);
            self.bytes.extend_from_slice(at.as_bytes());
        }
        let found = (address, self.address() - address);
        self.reasons.insert(key, found);
        found
    }

    /// Where the heap starts: after the data, aligned.
    pub fn end(&mut self) -> u32 {
        self.align();
        self.address()
    }
}
