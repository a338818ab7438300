//! Text conversions the builtins share: case mapping, and `parseInt` and `parseFloat`.

use super::ops::is_js_whitespace;

/// Lower or upper case, per code point (JavaScript's full case mappings, as Rust's).
pub fn change_case(units: &[u16], upper: bool) -> Vec<u16> {
    let mut out = Vec::with_capacity(units.len());
    for c in char::decode_utf16(units.iter().copied()) {
        match c {
            Ok(c) => {
                let mut buffer = [0u16; 2];
                if upper {
                    for m in c.to_uppercase() {
                        out.extend_from_slice(m.encode_utf16(&mut buffer));
                    }
                } else if c == 'Σ' {
                    // The final-sigma rule depends on context: not taken.
                    out.extend_from_slice('σ'.encode_utf16(&mut buffer));
                } else {
                    for m in c.to_lowercase() {
                        out.extend_from_slice(m.encode_utf16(&mut buffer));
                    }
                }
            }
            Err(e) => out.push(e.unpaired_surrogate()),
        }
    }
    out
}

/// `parseInt(string, radix)`.
pub fn parse_int(text: &[u16], radix: Option<i32>) -> f64 {
    let s = String::from_utf16_lossy(text);
    let mut s = s.trim_start_matches(is_js_whitespace);
    let mut sign = 1.0;
    if let Some(rest) = s.strip_prefix('-') {
        sign = -1.0;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    let mut radix = radix.unwrap_or(0);
    if radix != 0 && !(2..=36).contains(&radix) {
        return f64::NAN;
    }
    if radix == 0 || radix == 16 {
        if let Some(rest) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            s = rest;
            radix = 16;
        }
    }
    if radix == 0 {
        radix = 10;
    }
    let digits: Vec<u32> = s.chars().map_while(|c| c.to_digit(radix as u32)).collect();
    if digits.is_empty() {
        return f64::NAN;
    }
    if radix == 10 {
        // Decimal digits are read exactly, as JavaScript reads them.
        let text: String = digits.iter().map(|d| char::from(b'0' + *d as u8)).collect();
        return sign * text.parse::<f64>().unwrap_or(f64::NAN);
    }
    sign * digits
        .iter()
        .fold(0.0, |acc, d| acc * f64::from(radix) + f64::from(*d))
}

/// `parseFloat(string)`: the longest decimal prefix.
pub fn parse_float(text: &[u16]) -> f64 {
    let s = String::from_utf16_lossy(text);
    let s = s.trim_start_matches(is_js_whitespace);
    for (prefix, value) in [
        ("Infinity", f64::INFINITY),
        ("+Infinity", f64::INFINITY),
        ("-Infinity", f64::NEG_INFINITY),
    ] {
        if s.starts_with(prefix) {
            return value;
        }
    }
    let mut best = f64::NAN;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        if !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-')) {
            break;
        }
        end = i + 1;
    }
    for stop in (1..=end).rev() {
        if let Ok(n) = s[..stop].parse::<f64>() {
            if !s[..stop].ends_with(['e', 'E', '+', '-']) {
                best = n;
                break;
            }
        }
    }
    best
}
