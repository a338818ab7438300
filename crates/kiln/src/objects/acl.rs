//! Canned ACLs. kiln has one owner (every key acts for it), so of S3's canned ACLs it can
//! keep those that only add readers it can tell apart: `public-read` (anyone, unsigned, may
//! read) and `authenticated-read` (any key kiln accepts may read, which every key may anyway).
//! `private` and the bucket-owner ACLs are the owner alone. Grants to other accounts, writes by
//! anyone, and log or EC2 grants are ACLs kiln cannot enforce: it answers NotImplemented rather
//! than store a promise it would not keep.

use s3s::dto::*;
use s3s::{s3_error, S3Result};

use super::shared::owner;

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// A request made without credentials, let through to read what `public-read` opens. The
/// store checks the ACL of what it reads; requests the cache itself makes carry no mark.
#[derive(Debug, Clone, Copy)]
pub struct Anonymous;

/// The ACL to store for a canned ACL name: None for the owner alone.
pub fn canned(name: Option<&str>) -> S3Result<Option<String>> {
    match name {
        None
        | Some(
            ObjectCannedACL::PRIVATE
            | ObjectCannedACL::BUCKET_OWNER_READ
            | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL,
        ) => Ok(None),
        Some(acl @ (ObjectCannedACL::PUBLIC_READ | ObjectCannedACL::AUTHENTICATED_READ)) => {
            Ok(Some(acl.to_string()))
        }
        Some(
            acl @ (ObjectCannedACL::PUBLIC_READ_WRITE
            | ObjectCannedACL::AWS_EXEC_READ
            | "log-delivery-write"),
        ) => Err(s3_error!(
            NotImplemented,
            "kiln does not enforce the canned ACL {acl}: use private, public-read or authenticated-read"
        )),
        Some(other) => Err(s3_error!(
            InvalidArgument,
            "{other} is not a canned ACL"
        )),
    }
}

/// Refuses `x-amz-grant-*` headers: grants to named accounts kiln cannot enforce.
pub fn refuse_grants(grants: &[Option<&str>]) -> S3Result<()> {
    if grants.iter().any(Option::is_some) {
        return Err(s3_error!(
            NotImplemented,
            "kiln does not enforce grants to other accounts (x-amz-grant-*): use a canned ACL (x-amz-acl)"
        ));
    }
    Ok(())
}

/// The ACL an input asks for: its `x-amz-acl` ([`canned`]), refusing its `x-amz-grant-*`
/// headers (those named after the input, besides the four every ACL-bearing input has).
macro_rules! requested_acl {
    ($input:expr $(, $grant:ident)*) => {{
        $crate::objects::acl::refuse_grants(&[
            $input.grant_full_control.as_deref(),
            $input.grant_read.as_deref(),
            $input.grant_read_acp.as_deref(),
            $input.grant_write_acp.as_deref(),
            $($input.$grant.as_deref(),)*
        ])
        .and_then(|()| $crate::objects::acl::canned($input.acl.as_ref().map(|a| a.as_str())))
    }};
}
pub(crate) use requested_acl;

/// The grants S3 answers for a stored ACL: READ for the group the ACL opens reads to, if any,
/// and the owner's FULL_CONTROL.
pub fn grants(acl: Option<&str>) -> Grants {
    let owner = owner();
    let mut grants = vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name,
            id: owner.id,
            type_: Type::from_static(Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    let group = match acl {
        Some(ObjectCannedACL::PUBLIC_READ) => Some(ALL_USERS),
        Some(ObjectCannedACL::AUTHENTICATED_READ) => Some(AUTHENTICATED_USERS),
        _ => None,
    };
    if let Some(uri) = group {
        // Ahead of the owner's: S3 gives grants no order, and this is the one S3-compatible
        // stores and their conformance suite use.
        grants.insert(
            0,
            Grant {
                grantee: Some(Grantee {
                    display_name: None,
                    id: None,
                    type_: Type::from_static(Type::GROUP),
                    email_address: None,
                    uri: Some(uri.to_string()),
                }),
                permission: Some(Permission::from_static(Permission::READ)),
            },
        );
    }
    grants
}

/// The ACL a PutBucketAcl or PutObjectAcl body describes, if it is one kiln answers (the owner
/// with FULL_CONTROL, and perhaps READ for all users or for authenticated users).
pub fn from_policy(policy: &AccessControlPolicy) -> S3Result<Option<String>> {
    let given = policy.grants.as_deref().unwrap_or_default();
    let known = [
        None,
        Some(ObjectCannedACL::PUBLIC_READ),
        Some(ObjectCannedACL::AUTHENTICATED_READ),
    ];
    for acl in known {
        if same_grants(given, &grants(acl)) {
            return Ok(acl.map(str::to_string));
        }
    }
    Err(s3_error!(
        NotImplemented,
        "kiln enforces the owner's FULL_CONTROL with READ for AllUsers or AuthenticatedUsers only: use a canned ACL (x-amz-acl)"
    ))
}

/// Whether two grant lists name the same grantees and permissions, in any order.
fn same_grants(given: &[Grant], expected: &[Grant]) -> bool {
    let key = |g: &Grant| {
        let grantee = g.grantee.as_ref();
        (
            grantee.and_then(|g| g.id.clone()),
            grantee.and_then(|g| g.uri.clone()),
            g.permission.as_ref().map(|p| p.as_str().to_string()),
        )
    };
    let mut a: Vec<_> = given.iter().map(key).collect();
    let mut b: Vec<_> = expected.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// Whether a stored ACL lets anyone read without signing.
pub fn public_read(acl: Option<&str>) -> bool {
    acl == Some(ObjectCannedACL::PUBLIC_READ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_acls_kiln_enforces_are_kept_and_others_refused() {
        assert_eq!(canned(None).unwrap(), None);
        assert_eq!(canned(Some("private")).unwrap(), None);
        assert_eq!(canned(Some("bucket-owner-full-control")).unwrap(), None);
        assert_eq!(
            canned(Some("public-read")).unwrap().as_deref(),
            Some("public-read")
        );
        for refused in ["public-read-write", "aws-exec-read", "log-delivery-write"] {
            let e = canned(Some(refused)).unwrap_err();
            assert_eq!(e.code().as_str(), "NotImplemented", "{refused}");
        }
        assert_eq!(
            canned(Some("open")).unwrap_err().code().as_str(),
            "InvalidArgument"
        );
        assert!(refuse_grants(&[None, Some("id=x")]).is_err());
        assert!(refuse_grants(&[None; 5]).is_ok());
    }

    #[test]
    fn a_policy_round_trips_through_its_grants() {
        for acl in [None, Some("public-read"), Some("authenticated-read")] {
            let policy = AccessControlPolicy {
                grants: Some(grants(acl).into_iter().rev().collect()),
                owner: Some(owner()),
            };
            assert_eq!(from_policy(&policy).unwrap().as_deref(), acl);
        }
        let mut writable = grants(Some("public-read"));
        writable[1].permission = Some(Permission::from_static(Permission::WRITE));
        let policy = AccessControlPolicy {
            grants: Some(writable),
            owner: None,
        };
        assert_eq!(
            from_policy(&policy).unwrap_err().code().as_str(),
            "NotImplemented"
        );
        assert!(public_read(Some("public-read")) && !public_read(Some("authenticated-read")));
    }
}
