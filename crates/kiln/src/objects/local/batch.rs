//! Several object writes committed all or none: each body received into a file of its own
//! first, then every file published and every row written in one SQLite transaction. Until
//! that transaction commits no reader sees any of them; if it fails, none is there.

use super::meta::MetaWrite;
use super::{blocking, write_error, LocalStore};
use crate::objects::shared::internal;
use crate::objects::{AtomicWrites, ObjectWrite};
use s3s::S3Result;

#[async_trait::async_trait]
impl AtomicWrites for LocalStore {
    async fn commit_writes(&self, writes: Vec<ObjectWrite>) -> S3Result<()> {
        let mut batch = Vec::new();
        let mut received: Vec<String> = Vec::new();
        for write in writes {
            match write {
                ObjectWrite::Put(req) => match self.receive_put(*req).await {
                    Ok((bucket, row, _)) => {
                        received.push(row.file_id.clone());
                        batch.push((bucket, MetaWrite::Put(Box::new(row))));
                    }
                    Err(e) => {
                        for id in &received {
                            self.files.remove_tmp(id);
                        }
                        return Err(e);
                    }
                },
                ObjectWrite::Delete { bucket, key } => batch.push((bucket, MetaWrite::Delete(key))),
            }
        }
        let (meta, files) = (self.meta.clone(), self.files.clone());
        let rows = batch.clone();
        blocking(move || {
            let mut published = Vec::new();
            for (i, id) in received.iter().enumerate() {
                if let Err(e) = files.publish(id) {
                    files.remove(&published);
                    for rest in &received[i..] {
                        files.remove_tmp(rest);
                    }
                    return Err(internal("publishing an object file", e));
                }
                published.push(id.clone());
            }
            match meta.commit_writes(&batch) {
                Ok(replaced) => {
                    files.remove(&replaced);
                    Ok(())
                }
                Err(e) => {
                    files.remove(&published);
                    Err(write_error(e))
                }
            }
        })
        .await?;
        for (bucket, write) in rows {
            if let MetaWrite::Put(row) = write {
                self.learn_media(bucket, &row);
            }
        }
        Ok(())
    }
}
