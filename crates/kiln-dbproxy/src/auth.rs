//! SCRAM-SHA-256's server side (RFC 5802/7677, as PostgreSQL speaks it), pure over strings:
//! the proxy checks its clients against the configured credentials. The client side, used
//! to log in to PostgreSQL, is `postgres-protocol`'s.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

pub const ITERATIONS: u32 = 4096;

/// Why a SCRAM exchange failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// the client's SCRAM message is malformed
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// channel binding was requested, but the proxy has no TLS to bind to
    #[error("SCRAM channel binding is not supported (the connection has no TLS)")]
    ChannelBinding,
    /// the proof does not match the password
    #[error("password authentication failed")]
    WrongPassword,
}

/// What the server keeps of a password: PostgreSQL's SCRAM verifier.
#[derive(Clone)]
pub struct ScramVerifier {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: [u8; 32],
    server_key: [u8; 32],
    /// A verifier no proof matches, for unknown users (as PostgreSQL's mock authentication).
    mock: bool,
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScramVerifier(..)")
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

impl ScramVerifier {
    pub fn new(password: &str, salt: Vec<u8>, iterations: u32) -> ScramVerifier {
        // PostgreSQL uses the SASLprep'd password when it is valid UTF-8 that SASLprep accepts,
        // the raw bytes otherwise.
        let prepped = stringprep::saslprep(password)
            .map(|p| p.into_owned())
            .unwrap_or_else(|_| password.to_owned());
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(prepped.as_bytes(), &salt, iterations, &mut salted);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        let server_key = hmac(&salted, b"Server Key");
        ScramVerifier {
            salt,
            iterations,
            stored_key,
            server_key,
            mock: false,
        }
    }

    pub fn random(password: &str) -> ScramVerifier {
        ScramVerifier::new(password, random_bytes(16), ITERATIONS)
    }

    pub fn mock() -> ScramVerifier {
        ScramVerifier {
            mock: true,
            ..ScramVerifier::new("", random_bytes(16), ITERATIONS)
        }
    }
}

pub fn random_bytes(n: usize) -> Vec<u8> {
    use rand::RngCore;
    let mut v = vec![0; n];
    rand::thread_rng().fill_bytes(&mut v);
    v
}

/// A SCRAM exchange after the server's first message.
#[derive(Debug)]
pub struct ScramExchange {
    client_first_bare: String,
    server_first: String,
    nonce: String,
    gs2_header: String,
}

/// Handles the client's first message; returns the exchange and the server's first message.
pub fn server_first(
    verifier: &ScramVerifier,
    client_first: &[u8],
    server_nonce: &str,
) -> Result<(ScramExchange, String), AuthError> {
    let msg = std::str::from_utf8(client_first).map_err(|_| AuthError::Malformed("not UTF-8"))?;
    let (cbind, rest) = msg
        .split_once(',')
        .ok_or(AuthError::Malformed("no GS2 header"))?;
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => return Err(AuthError::ChannelBinding),
        _ => return Err(AuthError::Malformed("invalid channel binding flag")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(AuthError::Malformed("no GS2 header"))?;
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(AuthError::Malformed("invalid authorization identity"));
    }
    let gs2_header = format!("{cbind},{authzid},");
    let mut client_nonce = None;
    for attr in bare.split(',') {
        if let Some(v) = attr.strip_prefix("r=") {
            client_nonce = Some(v);
        }
        if attr.starts_with("m=") {
            return Err(AuthError::Malformed(
                "mandatory extensions are not supported",
            ));
        }
    }
    let client_nonce = client_nonce.ok_or(AuthError::Malformed("no nonce"))?;
    if client_nonce.is_empty()
        || !client_nonce
            .chars()
            .all(|c| c.is_ascii_graphic() && c != ',')
    {
        return Err(AuthError::Malformed("invalid nonce"));
    }
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!(
        "r={nonce},s={},i={}",
        STANDARD.encode(&verifier.salt),
        verifier.iterations
    );
    let exchange = ScramExchange {
        client_first_bare: bare.to_owned(),
        server_first: server_first.clone(),
        nonce,
        gs2_header,
    };
    Ok((exchange, server_first))
}

impl ScramExchange {
    /// Checks the client's final message; returns the server's final message.
    pub fn finish(
        &self,
        verifier: &ScramVerifier,
        client_final: &[u8],
    ) -> Result<String, AuthError> {
        let msg =
            std::str::from_utf8(client_final).map_err(|_| AuthError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or(AuthError::Malformed("no proof"))?;
        let mut cbind = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(v) = attr.strip_prefix("c=") {
                cbind = Some(v);
            } else if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            }
        }
        let cbind = cbind.ok_or(AuthError::Malformed("no channel binding"))?;
        if STANDARD.decode(cbind).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(AuthError::Malformed("channel binding does not match"));
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(AuthError::Malformed("nonce does not match"));
        }
        let proof = STANDARD
            .decode(proof)
            .map_err(|_| AuthError::Malformed("proof is not base64"))?;
        if proof.len() != 32 {
            return Err(AuthError::Malformed("proof has the wrong length"));
        }
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac(&verifier.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
        let stored: [u8; 32] = Sha256::digest(&client_key).into();
        let same = stored
            .iter()
            .zip(verifier.stored_key)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
        if !same || verifier.mock {
            return Err(AuthError::WrongPassword);
        }
        let server_signature = hmac(&verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
    use proptest::prelude::*;

    fn run(server_password: &str, client_password: &str) -> Result<(), AuthError> {
        let verifier = ScramVerifier::new(server_password, b"0123456789abcdef".to_vec(), 4096);
        let mut client =
            ScramSha256::new(client_password.as_bytes(), ChannelBinding::unsupported());
        let (exchange, first) = server_first(&verifier, client.message(), "servernonce")?;
        client.update(first.as_bytes()).unwrap();
        let last = exchange.finish(&verifier, client.message())?;
        client
            .finish(last.as_bytes())
            .expect("the client accepts the server's signature");
        Ok(())
    }

    #[test]
    fn postgres_protocol_client_logs_in() {
        run("s3cret", "s3cret").unwrap();
        run("pässwörd", "pässwörd").unwrap();
    }

    #[test]
    fn wrong_password_is_refused() {
        assert_eq!(run("s3cret", "guess"), Err(AuthError::WrongPassword));
    }

    #[test]
    fn mock_verifier_refuses_everything() {
        let verifier = ScramVerifier::mock();
        let mut client = ScramSha256::new(b"", ChannelBinding::unsupported());
        let (exchange, first) = server_first(&verifier, client.message(), "n").unwrap();
        client.update(first.as_bytes()).unwrap();
        assert_eq!(
            exchange.finish(&verifier, client.message()),
            Err(AuthError::WrongPassword)
        );
    }

    #[test]
    fn channel_binding_is_refused() {
        let verifier = ScramVerifier::random("x");
        let err = server_first(&verifier, b"p=tls-server-end-point,,n=,r=abc", "n").unwrap_err();
        assert_eq!(err, AuthError::ChannelBinding);
    }

    proptest! {
        #[test]
        fn arbitrary_messages_never_panic(a in proptest::collection::vec(any::<u8>(), 0..200),
                                          b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let verifier = ScramVerifier::new("pw", b"salt".to_vec(), 1);
            if let Ok((ex, _)) = server_first(&verifier, &a, "n") {
                let _ = ex.finish(&verifier, &b);
            }
        }
    }
}
