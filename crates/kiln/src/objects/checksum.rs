//! The digests S3 clients send and check: MD5 (Content-MD5 and ETags) and the flexible
//! checksums (`x-amz-checksum-*`) that today's SDKs attach to every upload, in headers or in
//! aws-chunked trailers.

use std::fmt::Write as _;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::HeaderMap;
use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Md5, Sha1, Sha256};
use s3s::{s3_error, S3Error, S3Result};
use serde::{Deserialize, Serialize};

/// A flexible-checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Crc32,
        Algorithm::Crc32c,
        Algorithm::Crc64Nvme,
        Algorithm::Sha1,
        Algorithm::Sha256,
    ];

    /// Parses S3's name for an algorithm (`CRC32`, `crc64nvme`, …).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Crc64Nvme => "CRC64NVME",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    /// The header (or trailer) that carries this checksum.
    pub fn header(self) -> &'static str {
        match self {
            Self::Crc32 => "x-amz-checksum-crc32",
            Self::Crc32c => "x-amz-checksum-crc32c",
            Self::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Self::Sha1 => "x-amz-checksum-sha1",
            Self::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// CRCs of parts can be combined into the whole object's CRC; hashes cannot.
    pub fn supports_full_object(self) -> bool {
        matches!(self, Self::Crc32 | Self::Crc32c | Self::Crc64Nvme)
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Crc32 => Crc32::checksum(data).to_vec(),
            Self::Crc32c => Crc32c::checksum(data).to_vec(),
            Self::Crc64Nvme => Crc64Nvme::checksum(data).to_vec(),
            Self::Sha1 => Sha1::checksum(data).to_vec(),
            Self::Sha256 => Sha256::checksum(data).to_vec(),
        }
    }
}

/// Whether a multipart object's checksum covers the whole object or the parts' checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChecksumKind {
    FullObject,
    Composite,
}

impl ChecksumKind {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "FULL_OBJECT" => Some(Self::FullObject),
            "COMPOSITE" => Some(Self::Composite),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::FullObject => "FULL_OBJECT",
            Self::Composite => "COMPOSITE",
        }
    }
}

/// Base64 checksum values by algorithm, as S3 stores and returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Checksums {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc64nvme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ChecksumKind>,
}

impl Checksums {
    pub fn get(&self, algorithm: Algorithm) -> Option<&str> {
        match algorithm {
            Algorithm::Crc32 => self.crc32.as_deref(),
            Algorithm::Crc32c => self.crc32c.as_deref(),
            Algorithm::Crc64Nvme => self.crc64nvme.as_deref(),
            Algorithm::Sha1 => self.sha1.as_deref(),
            Algorithm::Sha256 => self.sha256.as_deref(),
        }
    }

    pub fn set(&mut self, algorithm: Algorithm, value: Option<String>) {
        let slot = match algorithm {
            Algorithm::Crc32 => &mut self.crc32,
            Algorithm::Crc32c => &mut self.crc32c,
            Algorithm::Crc64Nvme => &mut self.crc64nvme,
            Algorithm::Sha1 => &mut self.sha1,
            Algorithm::Sha256 => &mut self.sha256,
        };
        *slot = value;
    }

    /// The algorithms that have a value.
    pub fn algorithms(&self) -> impl Iterator<Item = Algorithm> + '_ {
        Algorithm::ALL
            .into_iter()
            .filter(|a| self.get(*a).is_some())
    }

    /// Only the given algorithm's value (and the kind), for responses that name one algorithm.
    pub fn only(&self, algorithm: Algorithm) -> Checksums {
        let mut out = Checksums {
            kind: self.kind,
            ..Checksums::default()
        };
        out.set(algorithm, self.get(algorithm).map(str::to_string));
        out
    }
}

/// Hashes a body as it streams: MD5 for the ETag, plus the requested checksums.
pub struct BodyHasher {
    md5: Option<Md5>,
    crc32: Option<Crc32>,
    crc32c: Option<Crc32c>,
    crc64nvme: Option<Crc64Nvme>,
    sha1: Option<Sha1>,
    sha256: Option<Sha256>,
}

impl BodyHasher {
    pub fn new(algorithms: &[Algorithm]) -> Self {
        Self {
            md5: Some(Md5::new()),
            ..Self::without_md5(algorithms)
        }
    }

    /// For contents whose ETag is not their MD5 (multipart objects).
    pub fn without_md5(algorithms: &[Algorithm]) -> Self {
        let wants = |a| algorithms.contains(&a);
        Self {
            md5: None,
            crc32: wants(Algorithm::Crc32).then(Crc32::new),
            crc32c: wants(Algorithm::Crc32c).then(Crc32c::new),
            crc64nvme: wants(Algorithm::Crc64Nvme).then(Crc64Nvme::new),
            sha1: wants(Algorithm::Sha1).then(Sha1::new),
            sha256: wants(Algorithm::Sha256).then(Sha256::new),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        if let Some(h) = &mut self.md5 {
            h.update(data);
        }
        if let Some(h) = &mut self.crc32 {
            h.update(data);
        }
        if let Some(h) = &mut self.crc32c {
            h.update(data);
        }
        if let Some(h) = &mut self.crc64nvme {
            h.update(data);
        }
        if let Some(h) = &mut self.sha1 {
            h.update(data);
        }
        if let Some(h) = &mut self.sha256 {
            h.update(data);
        }
    }

    /// The raw MD5 (zeros without one) and the base64 checksums.
    pub fn finish(self) -> ([u8; 16], Checksums) {
        let encode = |bytes: &[u8]| BASE64.encode(bytes);
        let checksums = Checksums {
            crc32: self.crc32.map(|h| encode(&h.finalize())),
            crc32c: self.crc32c.map(|h| encode(&h.finalize())),
            crc64nvme: self.crc64nvme.map(|h| encode(&h.finalize())),
            sha1: self.sha1.map(|h| encode(h.finalize().as_ref())),
            sha256: self.sha256.map(|h| encode(h.finalize().as_ref())),
            kind: None,
        };
        (self.md5.map(Md5::finalize).unwrap_or_default(), checksums)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What an upload declares about its checksums: values sent as headers, and the algorithms
/// named by `x-amz-sdk-checksum-algorithm` or `x-amz-trailer`, whose values arrive after the body.
#[derive(Debug, Default)]
pub struct Declared {
    pub values: Checksums,
    pub algorithms: Vec<Algorithm>,
    pub trailer: Option<Algorithm>,
}

impl Declared {
    pub fn new(
        values: Checksums,
        sdk_algorithm: Option<&str>,
        headers: &HeaderMap,
    ) -> S3Result<Self> {
        let mut algorithms: Vec<Algorithm> = values.algorithms().collect();
        if let Some(name) = sdk_algorithm {
            let algorithm = Algorithm::parse(name).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "Value for x-amz-sdk-checksum-algorithm header is invalid."
                )
            })?;
            algorithms.push(algorithm);
        }
        let mut trailer = None;
        if let Some(value) = headers.get("x-amz-trailer") {
            let name = value
                .to_str()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            let algorithm = Algorithm::ALL
                .into_iter()
                .find(|a| a.header() == name)
                .ok_or_else(|| {
                    s3_error!(
                        InvalidRequest,
                        "The value specified in the x-amz-trailer header is not supported"
                    )
                })?;
            algorithms.push(algorithm);
            trailer = Some(algorithm);
        }
        algorithms.sort_by_key(|a| *a as u8);
        algorithms.dedup();
        for algorithm in values.algorithms() {
            let value = values.get(algorithm).unwrap_or_default();
            if BASE64.decode(value).is_err() {
                return Err(s3_error!(
                    InvalidRequest,
                    "Value for {} header is invalid.",
                    algorithm.header()
                ));
            }
        }
        Ok(Self {
            values,
            algorithms,
            trailer,
        })
    }

    /// Takes the trailing checksum (if one was announced) from the body's trailers.
    pub fn add_trailer(&mut self, trailers: Option<&HeaderMap>) -> S3Result<()> {
        let Some(algorithm) = self.trailer else {
            return Ok(());
        };
        let value = trailers
            .and_then(|t| t.get(algorithm.header()))
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "The trailing checksum {} announced in x-amz-trailer is missing.",
                    algorithm.header()
                )
            })?;
        self.values.set(algorithm, Some(value));
        Ok(())
    }

    /// Fails with BadDigest unless every declared value matches what was computed.
    pub fn verify(&self, computed: &Checksums) -> S3Result<()> {
        for algorithm in self.values.algorithms() {
            if self.values.get(algorithm) != computed.get(algorithm) {
                return Err(bad_digest(algorithm));
            }
        }
        Ok(())
    }
}

pub fn bad_digest(algorithm: Algorithm) -> S3Error {
    s3_error!(
        BadDigest,
        "The {} you specified did not match the calculated checksum.",
        algorithm.name()
    )
}

/// Checks a Content-MD5 header against the body's MD5.
pub fn verify_content_md5(content_md5: Option<&str>, md5: &[u8; 16]) -> S3Result<()> {
    let Some(value) = content_md5 else {
        return Ok(());
    };
    match BASE64.decode(value.trim()) {
        Ok(expected) if expected.len() == 16 => {
            if expected == md5 {
                Ok(())
            } else {
                Err(s3_error!(
                    BadDigest,
                    "The Content-MD5 you specified did not match what we received."
                ))
            }
        }
        _ => Err(s3_error!(
            InvalidDigest,
            "The Content-MD5 you specified was invalid."
        )),
    }
}

/// A multipart object's ETag: the MD5 of the parts' binary MD5s, then `-N`.
pub fn multipart_etag(part_etags: &[String]) -> String {
    let mut md5 = Md5::new();
    for etag in part_etags {
        let raw: Vec<u8> = (0..etag.len() / 2)
            .filter_map(|i| u8::from_str_radix(etag.get(2 * i..2 * i + 2)?, 16).ok())
            .collect();
        md5.update(&raw);
    }
    format!("{}-{}", hex(&md5.finalize()), part_etags.len())
}

/// A composite checksum: the checksum of the parts' binary checksums, then `-N`.
pub fn composite(algorithm: Algorithm, part_values: &[String]) -> Option<String> {
    let mut raw = Vec::new();
    for value in part_values {
        raw.extend(BASE64.decode(value).ok()?);
    }
    Some(format!(
        "{}-{}",
        BASE64.encode(algorithm.digest(&raw)),
        part_values.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_hasher_matches_known_values() {
        let mut h = BodyHasher::new(&[Algorithm::Crc32, Algorithm::Sha256]);
        h.update(b"hello ");
        h.update(b"world");
        let (md5, sums) = h.finish();
        assert_eq!(hex(&md5), "5eb63bbbe01eeed093cb22bb8f5acdc3");
        // python: base64.b64encode(zlib.crc32(b"hello world").to_bytes(4, "big"))
        assert_eq!(sums.crc32.as_deref(), Some("DUoRhQ=="));
        assert_eq!(
            sums.sha256.as_deref(),
            Some("uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=")
        );
        assert!(sums.crc32c.is_none());
    }

    #[test]
    fn multipart_etag_is_md5_of_md5s() {
        // Two parts "a" and "b": md5(md5("a") || md5("b")) = the ETag S3 reports for them.
        let a = hex(&Md5::checksum(b"a"));
        let b = hex(&Md5::checksum(b"b"));
        let mut raw = Md5::checksum(b"a").to_vec();
        raw.extend(Md5::checksum(b"b"));
        assert_eq!(
            multipart_etag(&[a, b]),
            format!("{}-2", hex(&Md5::checksum(&raw)))
        );
    }

    #[test]
    fn declared_checksums_come_from_headers_and_trailers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-trailer", "x-amz-checksum-crc32".parse().unwrap());
        let mut declared = Declared::new(Checksums::default(), Some("CRC32"), &headers).unwrap();
        assert_eq!(declared.algorithms, vec![Algorithm::Crc32]);
        let mut trailers = HeaderMap::new();
        trailers.insert("x-amz-checksum-crc32", "DUoRhQ==".parse().unwrap());
        declared.add_trailer(Some(&trailers)).unwrap();
        let mut h = BodyHasher::new(&declared.algorithms);
        h.update(b"hello world");
        assert!(declared.verify(&h.finish().1).is_ok());
        let mut h = BodyHasher::new(&declared.algorithms);
        h.update(b"hello there");
        let err = declared.verify(&h.finish().1).unwrap_err();
        assert_eq!(err.code().as_str(), "BadDigest");
    }

    #[test]
    fn bad_content_md5_is_invalid_digest_and_wrong_one_bad_digest() {
        let md5 = Md5::checksum(b"x");
        assert_eq!(
            verify_content_md5(Some("nope"), &md5)
                .unwrap_err()
                .code()
                .as_str(),
            "InvalidDigest"
        );
        let other = BASE64.encode(Md5::checksum(b"y"));
        assert_eq!(
            verify_content_md5(Some(&other), &md5)
                .unwrap_err()
                .code()
                .as_str(),
            "BadDigest"
        );
        assert!(verify_content_md5(Some(&BASE64.encode(md5)), &md5).is_ok());
    }
}
