//! Listings through the cache. A sequence's intermediate outputs live only in memory (OFC
//! §6.3), so a listing of a prefix that holds some merges them into the backing store's pages
//! ([`listing::merge`]), as a GET finds them: a stage that lists what the previous one wrote
//! sees it. Continuation tokens are the cache's own (a position in the listing), so that a
//! listing that began with nothing to merge picks intermediates up from where it is; a page
//! with nothing to merge passes through otherwise untouched.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::{internal_request, ObjectCache};
use crate::objects::listing::{self, url_encode, Cursor, ListRequest, Page};
use crate::objects::shared::{encodes_url, listed_object, max_keys, owners_if_fetched};
use percent_encoding::percent_decode_str;

/// Continuation tokens of merged listings: this, then a [`Cursor`] token.
const TOKEN_PREFIX: &str = "kiln~";

fn token_of(cursor: &Cursor) -> String {
    format!("{TOKEN_PREFIX}{}", cursor.token())
}

fn common_prefixes(prefixes: Option<CommonPrefixList>) -> Vec<String> {
    prefixes
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.prefix)
        .collect()
}

fn key_of(object: &Object) -> &str {
    object.key.as_deref().unwrap_or_default()
}

/// Where the listing goes on after a page the backing store answered, in the cache's terms.
fn after(output: &ListObjectsV2Output, url: bool) -> Option<Cursor> {
    let decode = |s: &str| -> String {
        if url {
            percent_decode_str(s).decode_utf8_lossy().into_owned()
        } else {
            s.to_string()
        }
    };
    let key = output
        .contents
        .as_ref()
        .and_then(|c| c.last())
        .map(|o| decode(key_of(o)));
    let prefix = output
        .common_prefixes
        .as_ref()
        .and_then(|p| p.last())
        .and_then(|p| p.prefix.as_deref())
        .map(decode);
    listing::after_page(key.as_deref(), prefix.as_deref())
}

/// The last key or common prefix on a backing store's page.
fn last_of(objects: Option<&[Object]>, prefixes: Option<&[CommonPrefix]>) -> Option<String> {
    let key = objects.and_then(<[Object]>::last).map(key_of);
    let prefix = prefixes
        .and_then(<[CommonPrefix]>::last)
        .and_then(|p| p.prefix.as_deref());
    key.max(prefix).map(str::to_string)
}

/// A backing store's page, merged with `extra`.
fn merged(
    request: &ListRequest,
    objects: Option<Vec<Object>>,
    prefixes: Option<CommonPrefixList>,
    truncated: bool,
    extra: &[Object],
) -> Page<Object> {
    listing::merge(
        request,
        objects.unwrap_or_default(),
        common_prefixes(prefixes),
        truncated,
        extra.to_vec(),
        key_of,
    )
}

/// What a merged page answers, its keys URL-encoded when the client asked for that.
struct Answer {
    contents: Vec<Object>,
    common_prefixes: Vec<CommonPrefix>,
}

impl Answer {
    fn of(page: Page<Object>, encode: &impl Fn(String) -> String) -> Self {
        Self {
            contents: page
                .objects
                .into_iter()
                .map(|mut o| {
                    o.key = o.key.map(encode);
                    o
                })
                .collect(),
            common_prefixes: page
                .common_prefixes
                .into_iter()
                .map(|p| CommonPrefix {
                    prefix: Some(encode(p)),
                })
                .collect(),
        }
    }

    fn count(&self) -> i32 {
        (self.contents.len() + self.common_prefixes.len()) as i32
    }
}

impl ObjectCache {
    /// The intermediate outputs under `prefix` in `bucket`, as listing entries.
    fn listed_intermediates(&self, bucket: &str, prefix: &str) -> Vec<Object> {
        self.entries()
            .intermediates(bucket, prefix)
            .into_iter()
            .map(|(key, meta)| listed_object(key, &meta.stored()))
            .collect()
    }

    pub(super) async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let asked = &req.input;
        let prefix = asked.prefix.clone().unwrap_or_default();
        let ours = asked
            .continuation_token
            .as_deref()
            .and_then(|t| t.strip_prefix(TOKEN_PREFIX));
        let extra = self.listed_intermediates(&asked.bucket, &prefix);
        let max_keys = max_keys(asked.max_keys)?;
        let url = encodes_url(asked.encoding_type.as_ref())?;
        let Some(start) = ours
            .map(|token| {
                Cursor::from_token(token).ok_or_else(|| {
                    s3_error!(
                        InvalidArgument,
                        "The continuation token provided is incorrect"
                    )
                })
            })
            .transpose()?
            // Nothing to merge, or a token the backing store gave out: its page as it is.
            .or_else(|| {
                (!extra.is_empty() && asked.continuation_token.is_none())
                    .then(|| Cursor::start(&prefix, asked.start_after.as_deref()))
            })
        else {
            let mut out = self.backend.list_objects_v2(req).await?;
            if out.output.is_truncated == Some(true) {
                if let Some(next) = after(&out.output, url) {
                    out.output.next_continuation_token = Some(token_of(&next));
                }
            }
            return Ok(out);
        };
        let request = ListRequest {
            prefix,
            delimiter: asked.delimiter.clone(),
            start,
            max_keys: max_keys as usize,
        };
        let mut input = asked.clone();
        input.encoding_type = None;
        input.max_keys = Some(max_keys);
        input.continuation_token = None;
        input.start_after = listing::start_after(&request.start);
        let page = loop {
            let out = self
                .backend
                .list_objects_v2(internal_request(input.clone()))
                .await?
                .output;
            let truncated = out.is_truncated.unwrap_or(false);
            let page = merged(
                &request,
                out.contents,
                out.common_prefixes,
                truncated,
                &extra,
            );
            // The store's page held only what comes before the cursor (rolled up under a
            // common prefix this listing is past): ask for its next one.
            match out.next_continuation_token {
                Some(token)
                    if truncated
                        && max_keys > 0
                        && page.is_empty()
                        && input.continuation_token.as_ref() != Some(&token) =>
                {
                    input.continuation_token = Some(token)
                }
                _ => break page,
            }
        };
        let next = page.next.as_ref().map(token_of);
        let encode = |s: String| if url { url_encode(&s) } else { s };
        let answer = Answer::of(page, &encode);
        let asked = req.input;
        let key_count = answer.count();
        let mut contents = Some(answer.contents);
        owners_if_fetched(&mut contents, asked.fetch_owner);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(asked.bucket),
            prefix: asked.prefix.map(encode),
            delimiter: asked.delimiter.map(encode),
            start_after: asked.start_after.map(encode),
            continuation_token: asked.continuation_token,
            max_keys: Some(max_keys),
            key_count: Some(key_count),
            is_truncated: Some(next.is_some()),
            next_continuation_token: next,
            encoding_type: asked.encoding_type,
            contents,
            common_prefixes: Some(answer.common_prefixes),
            ..Default::default()
        }))
    }

    pub(super) async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let asked = &req.input;
        let prefix = asked.prefix.clone().unwrap_or_default();
        let extra = self.listed_intermediates(&asked.bucket, &prefix);
        if extra.is_empty() {
            return self.backend.list_objects(req).await;
        }
        let max_keys = max_keys(asked.max_keys)?;
        let url = encodes_url(asked.encoding_type.as_ref())?;
        let request = ListRequest {
            start: Cursor::start(&prefix, asked.marker.as_deref()),
            prefix,
            delimiter: asked.delimiter.clone(),
            max_keys: max_keys as usize,
        };
        let mut input = asked.clone();
        input.encoding_type = None;
        input.max_keys = Some(max_keys);
        let page = loop {
            let out = self
                .backend
                .list_objects(internal_request(input.clone()))
                .await?
                .output;
            let truncated = out.is_truncated.unwrap_or(false);
            let last = last_of(out.contents.as_deref(), out.common_prefixes.as_deref())
                .or(out.next_marker);
            let page = merged(
                &request,
                out.contents,
                out.common_prefixes,
                truncated,
                &extra,
            );
            match last {
                Some(last)
                    if truncated
                        && page.is_empty()
                        && input.marker.as_ref().is_none_or(|m| last > *m) =>
                {
                    input.marker = Some(last)
                }
                _ => break page,
            }
        };
        let truncated = page.next.is_some();
        let encode = |s: String| if url { url_encode(&s) } else { s };
        // S3 only returns NextMarker with a delimiter; without one, clients use the last key.
        let next_marker = (truncated && asked.delimiter.is_some())
            .then(|| page.last.clone())
            .flatten()
            .map(encode);
        let answer = Answer::of(page, &encode);
        let asked = req.input;
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(asked.bucket),
            // S3 leaves v1's own Prefix as sent, encoding type or not (SDKs decode it in v2 only).
            prefix: asked.prefix,
            delimiter: asked.delimiter.map(encode),
            marker: Some(asked.marker.map(encode).unwrap_or_default()),
            next_marker,
            max_keys: Some(max_keys),
            is_truncated: Some(truncated),
            encoding_type: asked.encoding_type,
            contents: Some(answer.contents),
            common_prefixes: Some(answer.common_prefixes),
            ..Default::default()
        }))
    }
}
