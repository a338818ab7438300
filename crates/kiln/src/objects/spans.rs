//! Which bytes a read covers: the whole object, a `Range`, or one part of it (`partNumber`).
//! S3 reads a part by its place in the object (the n-th part completed), and takes part 1 of
//! an object uploaded in one piece to be all of it.

use std::ops::Range as Span;

use s3s::dto::Range;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};

/// S3's highest part number.
const MAX_PART_NUMBER: i32 = 10_000;

/// What a GetObject or HeadObject asks for.
#[derive(Debug, Clone)]
pub enum Read {
    Whole,
    Range(Range),
    Part(i32),
}

/// The bytes a read covers, and whether it answers 206 with a Content-Range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    pub span: Span<u64>,
    pub partial: bool,
}

impl Read {
    /// A read's `Range` header and `partNumber`; S3 refuses both at once.
    pub fn of(range: Option<Range>, part_number: Option<i32>) -> S3Result<Self> {
        match (range, part_number) {
            (Some(_), Some(_)) => Err(s3_error!(
                InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter"
            )),
            (Some(range), None) => Ok(Self::Range(range)),
            (None, Some(n)) if !(1..=MAX_PART_NUMBER).contains(&n) => Err(s3_error!(
                InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive"
            )),
            (None, Some(n)) => Ok(Self::Part(n)),
            (None, None) => Ok(Self::Whole),
        }
    }

    /// The bytes this read covers of an object of `size` bytes whose parts have `part_sizes`
    /// (None: uploaded in one piece).
    pub fn cover(&self, size: u64, part_sizes: Option<&[u64]>) -> S3Result<Covered> {
        let whole = Covered {
            span: 0..size,
            partial: false,
        };
        match self {
            Self::Whole => Ok(whole),
            Self::Range(range) => Ok(Covered {
                span: range.check(size)?,
                partial: true,
            }),
            Self::Part(n) => {
                let index = (*n - 1) as usize;
                let Some(sizes) = part_sizes else {
                    return match index {
                        // An empty object has no bytes to give a Content-Range for.
                        0 if size == 0 => Ok(whole),
                        0 => Ok(Covered {
                            partial: true,
                            ..whole
                        }),
                        _ => Err(invalid_part_number()),
                    };
                };
                let part = sizes.get(index).ok_or_else(invalid_part_number)?;
                let start: u64 = sizes[..index].iter().sum();
                Ok(Covered {
                    span: start..start + part,
                    partial: *part > 0,
                })
            }
        }
    }

    pub fn is_part(&self) -> bool {
        matches!(self, Self::Part(_))
    }
}

/// S3's answer to a part number past the object's parts.
pub fn invalid_part_number() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("InvalidPartNumber".into()),
        "The requested partnumber is not satisfiable",
    );
    e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
    e
}

/// A covered read's Content-Range.
pub fn content_range(covered: &Covered, size: u64) -> Option<String> {
    covered.partial.then(|| {
        format!(
            "bytes {}-{}/{size}",
            covered.span.start,
            covered.span.end - 1
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: S3Error) -> String {
        e.code().as_str().to_string()
    }

    #[test]
    fn parts_are_counted_by_their_place_in_the_object() {
        let sizes = [5u64, 5, 2];
        let part = |n| Read::Part(n).cover(12, Some(&sizes));
        assert_eq!(part(1).unwrap().span, 0..5);
        assert_eq!(part(2).unwrap().span, 5..10);
        let last = part(3).unwrap();
        assert_eq!((last.span.clone(), last.partial), (10..12, true));
        assert_eq!(content_range(&last, 12).unwrap(), "bytes 10-11/12");
        let past = part(4).unwrap_err();
        assert_eq!(
            past.status_code(),
            Some(http::StatusCode::RANGE_NOT_SATISFIABLE)
        );
        assert_eq!(code(past), "InvalidPartNumber");
    }

    #[test]
    fn part_one_of_a_single_part_object_is_all_of_it() {
        let one = Read::Part(1).cover(7, None).unwrap();
        assert_eq!((one.span.clone(), one.partial), (0..7, true));
        assert_eq!(content_range(&one, 7).unwrap(), "bytes 0-6/7");
        let empty = Read::Part(1).cover(0, None).unwrap();
        assert_eq!(content_range(&empty, 0), None);
        assert_eq!(
            code(Read::Part(2).cover(7, None).unwrap_err()),
            "InvalidPartNumber"
        );
    }

    #[test]
    fn a_read_takes_a_range_or_a_part_number_not_both() {
        let range = Range::Int {
            first: 0,
            last: Some(1),
        };
        assert_eq!(
            code(Read::of(Some(range), Some(1)).unwrap_err()),
            "InvalidRequest"
        );
        for bad in [0, -1, 10_001] {
            assert_eq!(
                code(Read::of(None, Some(bad)).unwrap_err()),
                "InvalidArgument"
            );
        }
        assert!(Read::of(None, Some(10_000)).unwrap().is_part());
        let whole = Read::of(None, None).unwrap().cover(3, None).unwrap();
        assert_eq!(content_range(&whole, 3), None);
        let ranged = Read::of(Some(range), None).unwrap().cover(3, None).unwrap();
        assert_eq!(content_range(&ranged, 3).unwrap(), "bytes 0-1/3");
    }
}
