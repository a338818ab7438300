//! Media metadata of objects the cache streams through without keeping them: the first bytes of
//! the body are copied as they pass (at most [`media::HEADER_BYTES`]), and what they hold (an
//! image header, or none) is learnt once they are all there or the body ends. The client's
//! stream is not held back: each chunk goes on as it came.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use s3s::dto::StreamingBlob;
use s3s::stream::{ByteStream, RemainingLength};
use s3s::StdError;

use crate::objects::media::{self, Media};

type Learn = Box<dyn FnOnce(Option<Media>) + Send + Sync>;

pub(super) struct Peeked {
    inner: StreamingBlob,
    head: BytesMut,
    want: usize,
    /// Taken when the head is complete (or the body ended); dropped on an error.
    learn: Option<Learn>,
}

impl Peeked {
    /// `body`, of `size` bytes, with `learn` called with its media metadata (`None`: not an
    /// image) once enough of it passed.
    pub(super) fn new(
        body: StreamingBlob,
        size: u64,
        learn: impl FnOnce(Option<Media>) + Send + Sync + 'static,
    ) -> Self {
        let want =
            usize::try_from(size).map_or(media::HEADER_BYTES, |s| s.min(media::HEADER_BYTES));
        Self {
            inner: body,
            head: BytesMut::with_capacity(want),
            want,
            learn: Some(Box::new(learn)),
        }
    }

    fn finish(&mut self) {
        if let Some(learn) = self.learn.take() {
            learn(Media::of(&self.head));
            self.head = BytesMut::new();
        }
    }
}

impl Stream for Peeked {
    type Item = Result<Bytes, StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let next = Pin::new(&mut this.inner).poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(chunk))) if this.learn.is_some() => {
                let take = (this.want - this.head.len()).min(chunk.len());
                this.head.extend_from_slice(&chunk[..take]);
                if this.head.len() >= this.want {
                    this.finish();
                }
            }
            // A body that ended short of its length teaches nothing (the head may be cut).
            Poll::Ready(None) if this.head.len() >= this.want => this.finish(),
            Poll::Ready(None) => this.learn = None,
            Poll::Ready(Some(Err(_))) => this.learn = None,
            _ => {}
        }
        next
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ByteStream for Peeked {
    fn remaining_length(&self) -> RemainingLength {
        self.inner.remaining_length()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::media::png_header;
    use futures_util::StreamExt;
    use std::sync::{Arc, Mutex};

    async fn pass(chunks: Vec<Vec<u8>>) -> (Vec<u8>, Option<Option<Media>>) {
        let size: usize = chunks.iter().map(Vec::len).sum();
        pass_declaring(chunks, size as u64).await
    }

    async fn pass_declaring(chunks: Vec<Vec<u8>>, size: u64) -> (Vec<u8>, Option<Option<Media>>) {
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
        );
        let found = Arc::new(Mutex::new(None));
        let seen = found.clone();
        let mut body = Peeked::new(StreamingBlob::wrap(stream), size, move |m| {
            *seen.lock().unwrap() = Some(m);
        });
        let mut out = Vec::new();
        while let Some(chunk) = body.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        let found = found.lock().unwrap().take();
        (out, found)
    }

    #[tokio::test]
    async fn an_image_header_split_across_chunks_is_learnt_and_the_bytes_pass_unchanged() {
        let mut image = png_header(640, 480);
        image.extend(std::iter::repeat_n(7u8, 100_000));
        let chunks: Vec<Vec<u8>> = image
            .chunks(5)
            .take(4)
            .map(<[u8]>::to_vec)
            .chain([image[20..].to_vec()])
            .collect();
        let (out, found) = pass(chunks).await;
        assert_eq!(out, image);
        let found = found.expect("learnt").expect("a png");
        assert_eq!(
            (found.format.as_str(), found.width, found.height),
            ("png", 640, 480)
        );
    }

    #[tokio::test]
    async fn a_body_cut_short_teaches_nothing() {
        let head = png_header(64, 48);
        let (out, found) = pass_declaring(vec![head.clone()], 1000).await;
        assert_eq!(out, head);
        assert_eq!(found, None, "not even that it is no image");
    }

    #[tokio::test]
    async fn other_bytes_teach_nothing() {
        let (out, found) = pass(vec![b"just text".to_vec()]).await;
        assert_eq!(out, b"just text");
        assert_eq!(found, Some(None), "learnt: not an image");
    }
}
