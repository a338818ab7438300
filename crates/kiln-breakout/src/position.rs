//! Source positions: byte offsets (what oxc's spans hold) to 1-based line and column.
//!
//! Lines end at every ECMAScript line terminator (LF, CR, CRLF, U+2028, U+2029), and columns
//! count UTF-16 code units, as V8's stack traces do, so a site's `file:line:col` points at the
//! same place as Node's own messages.

/// The starts of a text's lines, for turning offsets into line and column.
#[derive(Debug)]
pub struct LineIndex<'s> {
    text: &'s str,
    /// The byte offset where each line starts; the first is 0.
    starts: Vec<usize>,
}

impl<'s> LineIndex<'s> {
    pub fn new(text: &'s str) -> Self {
        let mut starts = vec![0];
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '\r' => {
                    if let Some(&(j, '\n')) = chars.peek() {
                        chars.next();
                        starts.push(j + 1);
                    } else {
                        starts.push(i + 1);
                    }
                }
                '\n' => starts.push(i + 1),
                '\u{2028}' | '\u{2029}' => starts.push(i + c.len_utf8()),
                _ => {}
            }
        }
        LineIndex { text, starts }
    }

    /// The 1-based line and column of a byte offset. An offset past the end, or inside a
    /// character, is clamped to the nearest character boundary before it.
    pub fn line_col(&self, offset: u32) -> (u32, u32) {
        let mut offset = (offset as usize).min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        // The last line start at or before the offset.
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let col: usize = self.text[start..offset].chars().map(char::len_utf16).sum();
        (to_u32(line + 1), to_u32(col + 1))
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_character_is_line_1_column_1() {
        assert_eq!(LineIndex::new("abc").line_col(0), (1, 1));
        assert_eq!(LineIndex::new("").line_col(0), (1, 1));
    }

    #[test]
    fn every_line_terminator_starts_a_line() {
        let text = "a\nb\r\nc\rd\u{2028}e\u{2029}f";
        let index = LineIndex::new(text);
        for (letter, line) in [("b", 2), ("c", 3), ("d", 4), ("e", 5), ("f", 6)] {
            let offset = text.find(letter).unwrap() as u32;
            assert_eq!(index.line_col(offset), (line, 1), "{letter}");
        }
    }

    #[test]
    fn columns_count_utf16_code_units() {
        // 'é' is one UTF-16 unit (two bytes), '😀' two units (four bytes).
        let text = "é😀x";
        let offset = text.find('x').unwrap() as u32;
        assert_eq!(LineIndex::new(text).line_col(offset), (1, 4));
    }

    #[test]
    fn offsets_past_the_end_or_inside_a_character_are_clamped() {
        let index = LineIndex::new("ab\né");
        assert_eq!(index.line_col(100), (2, 2));
        // Offset 4 is the middle of 'é' (bytes 3..5).
        assert_eq!(index.line_col(4), (2, 1));
    }
}
