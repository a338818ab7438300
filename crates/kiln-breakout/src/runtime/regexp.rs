//! `RegExp.prototype.test` for regular expression literals, on the subset of JavaScript's
//! pattern syntax whose meaning `regex-lite` shares: each pattern is translated (every
//! literal character spelled as a hex escape, `.` as JavaScript's "not a line terminator")
//! and anything outside the subset misses.
//!
//! The subset: characters, `.`, `^` and `$` (without the `m` flag), classes with ranges and
//! `\d \D \w \W \s \S`, groups `( )` and `(?: )`, `|`, the quantifiers `* + ? {n} {n,} {n,m}`
//! (greedy or lazy), `\b \B`, and the escapes `\t \n \r \f \v \0` and of punctuation; the
//! flags `i` and `s`. Not in it: backreferences, lookaround, named groups, `\u`/`\x`/`\c`
//! escapes, the flags `g` and `y` (`lastIndex`), `m`, `u`, `d`, `v`. The pattern must be ASCII;
//! the string tested may not hold surrogates (where JavaScript counts UTF-16 units and
//! `regex-lite` code points). On ASCII text both engines agree on `\d`, `\w`, `\s`, `\b` and
//! on case-insensitive matching.

use std::cell::RefCell;
use std::collections::HashMap;

use super::builtin::Builtin;
use super::heap::Heap;
use super::value::{Value, TAG_OBJECT};
use super::{ops, Miss};

fn refuse(what: &str) -> Miss {
    Miss::new(format!("a regular expression with {what} not compiled"))
}

/// A JavaScript pattern (with its flags) in `regex-lite`'s syntax.
pub fn translate(pattern: &str, flags: &str) -> Result<String, Miss> {
    let mut out = String::new();
    for flag in flags.chars() {
        match flag {
            'i' => out.push_str("(?i)"),
            's' => {}
            'g' | 'y' => return Err(refuse("the flag g or y (lastIndex)")),
            _ => return Err(refuse(&format!("the flag {flag}"))),
        }
    }
    let dot_all = flags.contains('s');
    if !pattern.is_ascii() {
        return Err(refuse("a character outside ASCII"));
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    let mut in_class = false;
    // Whether the last thing emitted can take a quantifier.
    let mut quantifiable = false;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c == '\\' {
            let Some(&e) = chars.get(i) else {
                return Err(refuse("a trailing backslash"));
            };
            i += 1;
            match e {
                'd' | 'D' | 'w' | 'W' | 's' | 'S' => out.push_str(&format!("\\{e}")),
                'b' if in_class => out.push_str("\\x{08}"),
                'b' | 'B' => out.push_str(&format!("\\{e}")),
                't' => out.push_str("\\x{09}"),
                'n' => out.push_str("\\x{0A}"),
                'v' => out.push_str("\\x{0B}"),
                'f' => out.push_str("\\x{0C}"),
                'r' => out.push_str("\\x{0D}"),
                '0' if !chars.get(i).is_some_and(char::is_ascii_digit) => out.push_str("\\x{00}"),
                e if e.is_ascii_punctuation() => out.push_str(&format!("\\x{{{:02X}}}", e as u32)),
                _ => return Err(refuse(&format!("the escape \\{e}"))),
            }
            quantifiable = !matches!(e, 'b' | 'B') || in_class;
            continue;
        }
        if in_class {
            match c {
                ']' => {
                    in_class = false;
                    out.push(']');
                    quantifiable = true;
                }
                '-' => {
                    // A range's dash between two characters; a literal one at either end.
                    let at_start = out.ends_with('[') || out.ends_with("[^");
                    if at_start || chars.get(i) == Some(&']') {
                        out.push_str("\\x{2D}");
                    } else {
                        out.push('-');
                    }
                }
                c if c.is_ascii_alphanumeric() => out.push(c),
                c => out.push_str(&format!("\\x{{{:02X}}}", c as u32)),
            }
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                out.push('[');
                if chars.get(i) == Some(&'^') {
                    i += 1;
                    out.push('^');
                }
                if chars.get(i) == Some(&']') {
                    // `[]` matches nothing and `[^]` anything in JavaScript.
                    return Err(refuse("an empty class"));
                }
            }
            '(' => {
                if chars.get(i) == Some(&'?') {
                    if chars.get(i + 1) == Some(&':') {
                        i += 2;
                        out.push_str("(?:");
                    } else {
                        return Err(refuse("lookaround or a named group"));
                    }
                } else {
                    out.push('(');
                }
                quantifiable = false;
                continue;
            }
            ')' | '|' => {
                out.push(c);
                quantifiable = c == ')';
                continue;
            }
            '^' | '$' => {
                out.push(c);
                quantifiable = false;
                continue;
            }
            '.' => out.push_str(if dot_all {
                "(?s:.)"
            } else {
                "[^\\x{0A}\\x{0D}]"
            }),
            '*' | '+' | '?' => {
                if !quantifiable {
                    return Err(refuse("a quantifier of nothing"));
                }
                out.push(c);
                if chars.get(i) == Some(&'?') {
                    i += 1;
                    out.push('?');
                }
                quantifiable = false;
                continue;
            }
            '{' => {
                // A quantifier `{n}`, `{n,}` or `{n,m}`; JavaScript reads any other brace as
                // a character, `regex-lite` does not: refused.
                let close = chars[i..].iter().position(|&c| c == '}');
                let body: String =
                    close.map_or(String::new(), |n| chars[i..i + n].iter().collect());
                let valid = close.is_some() && {
                    let (low, high) = body.split_once(',').unwrap_or((&body, ""));
                    !low.is_empty()
                        && low.chars().all(|c| c.is_ascii_digit())
                        && high.chars().all(|c| c.is_ascii_digit())
                        && low.len() <= 4
                        && high.len() <= 4
                };
                if !valid || !quantifiable {
                    return Err(refuse("a brace that is not a quantifier"));
                }
                i += body.len() + 1;
                out.push_str(&format!("{{{body}}}"));
                if chars.get(i) == Some(&'?') {
                    i += 1;
                    out.push('?');
                }
                quantifiable = false;
                continue;
            }
            ']' | '}' => return Err(refuse("an unmatched bracket")),
            c if c.is_ascii_alphanumeric() => out.push(c),
            c => out.push_str(&format!("\\x{{{:02X}}}", c as u32)),
        }
        quantifiable = true;
    }
    if in_class {
        return Err(refuse("an unterminated class"));
    }
    Ok(out)
}

thread_local! {
    /// Patterns compiled on this thread, by their text: a literal is tested once a request.
    static COMPILED: RefCell<HashMap<String, Option<regex_lite::Regex>>> = RefCell::new(HashMap::new());
}

/// `/…/flags.test(value)` for a literal's object.
pub fn test(heap: &mut Heap<'_>, this: Value, value: Value) -> Result<bool, Miss> {
    if this.tag() != TAG_OBJECT || heap.proto(this)? != Builtin::RegExpPrototype.value() {
        return Err(Miss::new(
            "TypeError: RegExp.prototype.test of a value that is not a RegExp",
        ));
    }
    let literal = heap.rust_string(heap.host_slot(this)?)?;
    let text = ops::to_string(heap, value)?;
    let units = heap.units(text)?;
    if units.iter().any(|u| (0xD800..0xE000).contains(u)) {
        return Err(refuse("a string holding surrogates"));
    }
    let haystack = String::from_utf16(&units).map_err(|_| refuse("a string holding surrogates"))?;
    COMPILED.with(|compiled| {
        let mut compiled = compiled.borrow_mut();
        if !compiled.contains_key(&literal) {
            let regex = match literal[1..].rsplit_once('/') {
                Some((pattern, flags)) => regex_lite::Regex::new(&translate(pattern, flags)?).ok(),
                None => None,
            };
            if compiled.len() >= 256 {
                compiled.clear();
            }
            compiled.insert(literal.clone(), regex);
        }
        match &compiled[&literal] {
            Some(regex) => Ok(regex.is_match(&haystack)),
            None => Err(refuse("a pattern the engine does not take")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, flags: &str, text: &str) -> Option<bool> {
        let translated = translate(pattern, flags).ok()?;
        Some(regex_lite::Regex::new(&translated).ok()?.is_match(text))
    }

    #[test]
    fn patterns_in_the_subset_match_as_javascript_does() {
        // Each answer is Node's for the same pattern, flags and text.
        let cases = [
            ("^[0-9a-f]{7,40}$", "i", "ABCDEF1", true),
            ("^[0-9a-f]{7,40}$", "i", "abcde", false),
            ("^[0-9a-f]{7,40}$", "", "ABCDEF1", false),
            ("a.c", "", "a\nc", false),
            ("a.c", "", "a\rc", false),
            ("a.c", "s", "a\nc", true),
            ("^\\w+@\\w+\\.com$", "", "me@x.com", true),
            ("^\\w+@\\w+\\.com$", "", "me@xycom", false),
            ("[-a]", "", "-", true),
            ("[a-]", "", "-", true),
            ("[\\b]", "", "\u{8}", true),
            ("\\bfoo\\b", "", "a foo b", true),
            ("(?:ab)+?c|d{2,}", "", "xdd", true),
            ("[[]", "", "[", true),
            ("a&&b", "", "a&&b", true),
            ("[a&&b]", "", "&", true),
            ("\\s", "", "\t", true),
            ("^$", "", "", true),
            ("é?", "", "", false),
        ];
        for (pattern, flags, text, want) in cases {
            if pattern.is_ascii() {
                assert_eq!(
                    matches(pattern, flags, text),
                    Some(want),
                    "/{pattern}/{flags} on {text:?}"
                );
            } else {
                assert_eq!(matches(pattern, flags, text), None);
            }
        }
    }

    #[test]
    fn what_the_engines_read_differently_is_refused() {
        for (pattern, flags) in [
            ("a", "g"),
            ("a", "y"),
            ("a", "m"),
            ("a", "u"),
            ("(a)\\1", ""),
            ("(?=a)", ""),
            ("(?<n>a)", ""),
            ("\\u0041", ""),
            ("\\x41", ""),
            ("a{,3}", ""),
            ("a{x}", ""),
            ("{", ""),
            ("]", ""),
            ("[]", ""),
            ("[^]", ""),
            ("\\cA", ""),
        ] {
            assert!(translate(pattern, flags).is_err(), "/{pattern}/{flags}");
        }
    }
}
