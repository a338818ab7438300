//! Media metadata of stored objects (OFC §5.1's input features): an image's width, height and
//! format, read from its header (the `imagesize` crate reads a few hundred bytes, no decoding).

use serde::{Deserialize, Serialize};

/// Enough of any common image format's header for its dimensions.
pub const HEADER_BYTES: usize = 64 * 1024;

/// An image's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Media {
    pub format: String,
    pub width: u64,
    pub height: u64,
}

impl Media {
    /// The metadata of `data` (the object, or its first [`HEADER_BYTES`]), if it is an image.
    pub fn of(data: &[u8]) -> Option<Media> {
        let head = &data[..data.len().min(HEADER_BYTES)];
        let format = imagesize::image_type(head).ok()?;
        let size = imagesize::blob_size(head).ok()?;
        Some(Media {
            format: format!("{format:?}").to_ascii_lowercase(),
            width: size.width as u64,
            height: size.height as u64,
        })
    }

    /// As a metadata value: `FORMAT WIDTHxHEIGHT`.
    pub fn encode(&self) -> String {
        format!("{} {}x{}", self.format, self.width, self.height)
    }

    pub fn decode(value: &str) -> Option<Media> {
        let (format, dims) = value.split_once(' ')?;
        let (w, h) = dims.split_once('x')?;
        Some(Media {
            format: format.to_string(),
            width: w.parse().ok()?,
            height: h.parse().ok()?,
        })
    }
}

/// A PNG's header: signature, then the IHDR chunk (the rest is not needed for the size).
#[cfg(test)]
pub(crate) fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut data = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    data.extend_from_slice(&width.to_be_bytes());
    data.extend_from_slice(&height.to_be_bytes());
    data.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_give_their_format_and_size() {
        let media = Media::of(&png_header(3, 2)).unwrap();
        assert_eq!(
            media,
            Media {
                format: "png".into(),
                width: 3,
                height: 2
            }
        );
        assert_eq!(Media::decode(&media.encode()), Some(media));
        assert_eq!(Media::of(b"plain text, not an image"), None);
        assert_eq!(Media::decode("nonsense"), None);
    }
}
