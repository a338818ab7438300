//! Canned ACLs. kiln has one owner (every key acts for it), so of S3's canned ACLs it can
//! keep those that open a bucket or object to callers it can tell apart: `public-read` (anyone,
//! unsigned, may read), `public-read-write` (on a bucket, anyone may also write and delete its
//! objects; on an object, S3 records the WRITE grant and it opens nothing more than reads) and
//! `authenticated-read` (any key kiln accepts may read, which every key may anyway). `private`
//! and the bucket-owner ACLs are the owner alone (the bucket's owner is every object's owner).
//! Grants to other accounts and log or EC2 grants are ACLs kiln cannot enforce: it answers
//! NotImplemented rather than store a promise it would not keep, and a grant to an account or
//! e-mail address kiln does not have is refused as S3 refuses it (400).

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
        Some(
            acl @ (ObjectCannedACL::PUBLIC_READ
            | ObjectCannedACL::PUBLIC_READ_WRITE
            | ObjectCannedACL::AUTHENTICATED_READ),
        ) => Ok(Some(acl.to_string())),
        Some(acl @ (ObjectCannedACL::AWS_EXEC_READ | "log-delivery-write")) => Err(s3_error!(
            NotImplemented,
            "kiln does not enforce the canned ACL {acl}: use private, public-read, public-read-write or authenticated-read"
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

/// The grants S3 answers for a stored ACL: the group's grants the ACL opens (READ, and WRITE
/// for `public-read-write`), if any, and the owner's FULL_CONTROL.
pub fn grants(acl: Option<&str>) -> Grants {
    let owner = owner();
    let grants = vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name,
            id: owner.id,
            type_: Type::from_static(Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    let group: &[(&str, &'static str)] = match acl {
        Some(ObjectCannedACL::PUBLIC_READ) => &[(ALL_USERS, Permission::READ)],
        Some(ObjectCannedACL::PUBLIC_READ_WRITE) => &[
            (ALL_USERS, Permission::READ),
            (ALL_USERS, Permission::WRITE),
        ],
        Some(ObjectCannedACL::AUTHENTICATED_READ) => &[(AUTHENTICATED_USERS, Permission::READ)],
        _ => &[],
    };
    // Ahead of the owner's: S3 gives grants no order, and this is the one S3-compatible
    // stores and their conformance suite use.
    let groups = group.iter().map(|&(uri, permission)| Grant {
        grantee: Some(Grantee {
            display_name: None,
            id: None,
            type_: Type::from_static(Type::GROUP),
            email_address: None,
            uri: Some(uri.to_string()),
        }),
        permission: Some(Permission::from_static(permission)),
    });
    groups.chain(grants).collect()
}

/// The ACL a PutBucketAcl or PutObjectAcl body describes, if it is one kiln answers (the owner
/// with FULL_CONTROL, and perhaps READ for all users, READ and WRITE for all users, or READ
/// for authenticated users). A grantee kiln does not have (another account's canonical id, an
/// e-mail address) is refused as S3 refuses an account it does not have.
pub fn from_policy(policy: &AccessControlPolicy) -> S3Result<Option<String>> {
    let given = policy.grants.as_deref().unwrap_or_default();
    for grantee in given.iter().filter_map(|g| g.grantee.as_ref()) {
        unknown_grantee(grantee)?;
    }
    let known = [
        None,
        Some(ObjectCannedACL::PUBLIC_READ),
        Some(ObjectCannedACL::PUBLIC_READ_WRITE),
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

/// S3's refusal of a grant to an account it does not have: kiln has one, its owner.
fn unknown_grantee(grantee: &Grantee) -> S3Result<()> {
    if let Some(email) = &grantee.email_address {
        return Err(s3_error!(
            UnresolvableGrantByEmailAddress,
            "The e-mail address {email} you provided does not match any account on record."
        ));
    }
    match &grantee.id {
        Some(id) if Some(id) != owner().id.as_ref() => Err(s3_error!(
            InvalidArgument,
            "Invalid id: the canonical user {id} does not exist"
        )),
        _ => Ok(()),
    }
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
    matches!(
        acl,
        Some(ObjectCannedACL::PUBLIC_READ | ObjectCannedACL::PUBLIC_READ_WRITE)
    )
}

/// Whether a bucket's stored ACL lets anyone write and delete its objects without signing.
pub fn public_write(acl: Option<&str>) -> bool {
    acl == Some(ObjectCannedACL::PUBLIC_READ_WRITE)
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
        assert_eq!(
            canned(Some("public-read-write")).unwrap().as_deref(),
            Some("public-read-write")
        );
        for refused in ["aws-exec-read", "log-delivery-write"] {
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
        for acl in [
            None,
            Some("public-read"),
            Some("public-read-write"),
            Some("authenticated-read"),
        ] {
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
        assert!(public_read(Some("public-read-write")) && public_write(Some("public-read-write")));
        assert!(!public_write(Some("public-read")) && !public_write(None));
    }

    #[test]
    fn a_grant_to_an_account_kiln_does_not_have_is_refused_as_s3_refuses_it() {
        let to = |id: Option<&str>, email: Option<&str>| AccessControlPolicy {
            grants: Some(vec![Grant {
                grantee: Some(Grantee {
                    display_name: None,
                    id: id.map(str::to_string),
                    type_: Type::from_static(if email.is_some() {
                        Type::AMAZON_CUSTOMER_BY_EMAIL
                    } else {
                        Type::CANONICAL_USER
                    }),
                    email_address: email.map(str::to_string),
                    uri: None,
                }),
                permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
            }]),
            owner: None,
        };
        let code =
            |p: AccessControlPolicy| from_policy(&p).unwrap_err().code().as_str().to_string();
        assert_eq!(code(to(Some("someone-else"), None)), "InvalidArgument");
        assert_eq!(
            code(to(None, Some("a@example.com"))),
            "UnresolvableGrantByEmailAddress"
        );
        assert_eq!(from_policy(&to(Some("kiln"), None)).unwrap(), None);
    }
}
