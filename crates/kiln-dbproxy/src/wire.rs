//! PostgreSQL v3 wire framing: the startup packet, typed messages, and the few messages the
//! proxy writes itself. Decoding is pure over byte slices so that arbitrary input is
//! property-tested; the async readers only gather bytes.

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest message the proxy accepts from a client (PostgreSQL's own limit for most
/// messages is 1 GB; a function's queries stay far below this).
pub const MAX_MESSAGE_LEN: usize = 64 * 1024 * 1024;
/// The largest startup packet: PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`.
pub const MAX_STARTUP_LEN: usize = 10_000;

pub const PROTOCOL_V3: u32 = 196_608;
pub const SSL_REQUEST: u32 = 80_877_103;
pub const GSSENC_REQUEST: u32 = 80_877_104;
pub const CANCEL_REQUEST: u32 = 80_877_102;

/// What the client sent to begin a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Startup {
    Ssl,
    GssEnc,
    Cancel {
        pid: u32,
        secret: u32,
    },
    /// Protocol 3.x; a minor version above 0 is answered with NegotiateProtocolVersion.
    V3 {
        minor: u16,
        params: Vec<(String, String)>,
    },
}

/// A framing error: the peer sent something that is not the protocol.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// the connection ended
    #[error("the connection ended")]
    Eof,
    /// reading or writing the socket failed
    #[error("socket error")]
    Io(#[from] std::io::Error),
    /// a message breaks the protocol
    #[error("invalid message: {0}")]
    Protocol(String),
}

/// Decodes a startup packet body (the bytes after the length word).
pub fn parse_startup(body: &[u8]) -> Result<Startup, WireError> {
    if body.len() < 4 {
        return Err(WireError::Protocol("startup packet too short".into()));
    }
    let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let rest = &body[4..];
    match code {
        SSL_REQUEST if rest.is_empty() => Ok(Startup::Ssl),
        GSSENC_REQUEST if rest.is_empty() => Ok(Startup::GssEnc),
        CANCEL_REQUEST if rest.len() == 8 => Ok(Startup::Cancel {
            pid: u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]),
            secret: u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]),
        }),
        v if v >> 16 == 3 => {
            let mut params = Vec::new();
            let mut cur = rest;
            loop {
                let key = take_cstr(&mut cur)?;
                if key.is_empty() {
                    break;
                }
                let value = take_cstr(&mut cur)?;
                params.push((key, value));
            }
            if !cur.is_empty() {
                return Err(WireError::Protocol(
                    "trailing bytes after startup parameters".into(),
                ));
            }
            Ok(Startup::V3 {
                minor: (code & 0xffff) as u16,
                params,
            })
        }
        other => Err(WireError::Protocol(format!(
            "unsupported frontend protocol {}.{}: kiln's database proxy speaks 3.0",
            other >> 16,
            other & 0xffff
        ))),
    }
}

/// Reads one length-prefixed startup packet.
pub async fn read_startup<R: AsyncRead + Unpin>(r: &mut R) -> Result<Startup, WireError> {
    let len = read_u32(r).await? as usize;
    if !(8..=MAX_STARTUP_LEN).contains(&len) {
        return Err(WireError::Protocol(format!(
            "invalid startup packet length {len}"
        )));
    }
    let mut body = vec![0; len - 4];
    r.read_exact(&mut body).await.map_err(eof)?;
    parse_startup(&body)
}

/// One typed message: its tag and body (without the length word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub tag: u8,
    pub body: Bytes,
}

impl Message {
    pub fn new(tag: u8, body: impl Into<Bytes>) -> Message {
        Message {
            tag,
            body: body.into(),
        }
    }

    /// Appends the framed message to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.tag);
        out.put_u32(self.body.len() as u32 + 4);
        out.put_slice(&self.body);
    }
}

/// Splits one framed message off the front of `buf`, if it is complete.
pub fn split_message(buf: &mut BytesMut, max: usize) -> Result<Option<Message>, WireError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len < 4 {
        return Err(WireError::Protocol(format!(
            "invalid length {len} for message '{}'",
            tag as char
        )));
    }
    if len > max {
        return Err(WireError::Protocol(format!(
            "message '{}' of {len} bytes is over the proxy's limit of {max} bytes",
            tag as char
        )));
    }
    if buf.len() < len + 1 {
        buf.reserve(len + 1 - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(len + 1);
    let body = frame.split_off(5).freeze();
    Ok(Some(Message { tag, body }))
}

/// A buffered reader of typed messages.
pub struct MessageReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
}

impl<R: AsyncRead + Unpin> MessageReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        MessageReader {
            inner,
            buf: BytesMut::with_capacity(8192),
            max,
        }
    }

    /// The next message; cancel-safe (a partial message stays buffered).
    pub async fn next(&mut self) -> Result<Message, WireError> {
        loop {
            if let Some(msg) = split_message(&mut self.buf, self.max)? {
                return Ok(msg);
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return Err(WireError::Eof);
            }
        }
    }

    /// A message already buffered, without reading the socket.
    pub fn buffered(&mut self) -> Result<Option<Message>, WireError> {
        split_message(&mut self.buf, self.max)
    }

    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// Whether a whole message is already buffered.
    pub fn has_buffered(&self) -> bool {
        self.buf.len() >= 5 && {
            let len =
                u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
            self.buf.len() > len
        }
    }
}

async fn read_u32<R: AsyncRead + Unpin>(r: &mut R) -> Result<u32, WireError> {
    let mut b = [0; 4];
    r.read_exact(&mut b).await.map_err(eof)?;
    Ok(u32::from_be_bytes(b))
}

fn eof(e: std::io::Error) -> WireError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        WireError::Eof
    } else {
        WireError::Io(e)
    }
}

/// Takes a NUL-terminated UTF-8 string off the front of `cur`.
pub fn take_cstr(cur: &mut &[u8]) -> Result<String, WireError> {
    let end = cur
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| WireError::Protocol("string not terminated".into()))?;
    let s = std::str::from_utf8(&cur[..end])
        .map_err(|_| WireError::Protocol("string is not UTF-8".into()))?
        .to_owned();
    *cur = &cur[end + 1..];
    Ok(s)
}

pub fn take_u16(cur: &mut &[u8]) -> Result<u16, WireError> {
    if cur.len() < 2 {
        return Err(WireError::Protocol("message too short".into()));
    }
    let v = u16::from_be_bytes([cur[0], cur[1]]);
    *cur = &cur[2..];
    Ok(v)
}

pub fn take_i32(cur: &mut &[u8]) -> Result<i32, WireError> {
    if cur.len() < 4 {
        return Err(WireError::Protocol("message too short".into()));
    }
    let v = i32::from_be_bytes([cur[0], cur[1], cur[2], cur[3]]);
    *cur = &cur[4..];
    Ok(v)
}

fn put_cstr(out: &mut BytesMut, s: &str) {
    out.put_slice(s.as_bytes());
    out.put_u8(0);
}

/// Severity of an error the proxy reports itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
}

/// An ErrorResponse the proxy writes on its own behalf.
pub fn error_response(severity: Severity, code: &str, message: &str) -> Message {
    let sev = match severity {
        Severity::Error => "ERROR",
        Severity::Fatal => "FATAL",
    };
    let mut b = BytesMut::new();
    for (field, value) in [(b'S', sev), (b'V', sev), (b'C', code), (b'M', message)] {
        b.put_u8(field);
        put_cstr(&mut b, value);
    }
    b.put_u8(0);
    Message::new(b'E', b)
}

pub fn ready_for_query(status: u8) -> Message {
    Message::new(b'Z', vec![status])
}

pub fn parameter_status(name: &str, value: &str) -> Message {
    let mut b = BytesMut::new();
    put_cstr(&mut b, name);
    put_cstr(&mut b, value);
    Message::new(b'S', b)
}

pub fn backend_key_data(pid: u32, secret: u32) -> Message {
    let mut b = BytesMut::new();
    b.put_u32(pid);
    b.put_u32(secret);
    Message::new(b'K', b)
}

pub fn authentication(code: i32, data: &[u8]) -> Message {
    let mut b = BytesMut::new();
    b.put_i32(code);
    b.put_slice(data);
    Message::new(b'R', b)
}

/// NegotiateProtocolVersion: the proxy speaks 3.0 and none of the `_pq_.` options asked for.
pub fn negotiate_protocol_version(unrecognized: &[&str]) -> Message {
    let mut b = BytesMut::new();
    b.put_u32(PROTOCOL_V3);
    b.put_u32(unrecognized.len() as u32);
    for o in unrecognized {
        put_cstr(&mut b, o);
    }
    Message::new(b'v', b)
}

/// A simple Query message.
pub fn query(sql: &str) -> Message {
    let mut b = BytesMut::new();
    put_cstr(&mut b, sql);
    Message::new(b'Q', b)
}

pub fn command_complete(tag: &str) -> Message {
    let mut b = BytesMut::new();
    put_cstr(&mut b, tag);
    Message::new(b'C', b)
}

/// A Parse message.
pub fn parse(name: &str, sql: &str, param_types: &[u32]) -> Message {
    let mut b = BytesMut::new();
    put_cstr(&mut b, name);
    put_cstr(&mut b, sql);
    b.put_u16(param_types.len() as u16);
    for t in param_types {
        b.put_u32(*t);
    }
    Message::new(b'P', b)
}

/// The SQLSTATE and message of an ErrorResponse or NoticeResponse body.
pub fn error_fields(body: &[u8]) -> (String, String) {
    let (mut code, mut message) = (String::new(), String::new());
    let mut cur = body;
    while let Some((&field, rest)) = cur.split_first() {
        if field == 0 {
            break;
        }
        cur = rest;
        let Ok(value) = take_cstr(&mut cur) else {
            break;
        };
        match field {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    (code, message)
}

/// A parsed Parse message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseMsg {
    pub name: String,
    pub sql: String,
    pub param_types: Vec<u32>,
}

pub fn decode_parse(body: &[u8]) -> Result<ParseMsg, WireError> {
    let mut cur = body;
    let name = take_cstr(&mut cur)?;
    let sql = take_cstr(&mut cur)?;
    let n = take_u16(&mut cur)? as usize;
    if cur.len() != n * 4 {
        return Err(WireError::Protocol(
            "Parse parameter types do not match their count".into(),
        ));
    }
    let param_types = cur
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(ParseMsg {
        name,
        sql,
        param_types,
    })
}

/// The portal and statement names at the head of a Bind message, and where the rest begins.
pub fn decode_bind_head(body: &[u8]) -> Result<(String, String, usize), WireError> {
    let mut cur = body;
    let portal = take_cstr(&mut cur)?;
    let stmt = take_cstr(&mut cur)?;
    Ok((portal, stmt, body.len() - cur.len()))
}

/// Rebuilds a Bind message naming another statement.
pub fn rebind(body: &[u8], rest_at: usize, portal: &str, stmt: &str) -> Message {
    let mut b = BytesMut::with_capacity(body.len() + 32);
    put_cstr(&mut b, portal);
    put_cstr(&mut b, stmt);
    b.put_slice(&body[rest_at..]);
    Message::new(b'B', b)
}

/// The kind byte ('S' statement, 'P' portal) and name of a Describe or Close message.
pub fn decode_target(body: &[u8]) -> Result<(u8, String), WireError> {
    let (&kind, mut cur) = body
        .split_first()
        .ok_or_else(|| WireError::Protocol("empty message".into()))?;
    if kind != b'S' && kind != b'P' {
        return Err(WireError::Protocol(format!(
            "invalid target kind '{}'",
            kind as char
        )));
    }
    let name = take_cstr(&mut cur)?;
    Ok((kind, name))
}

pub fn target(tag: u8, kind: u8, name: &str) -> Message {
    let mut b = BytesMut::new();
    b.put_u8(kind);
    put_cstr(&mut b, name);
    Message::new(tag, b)
}

/// The portal an Execute message runs.
pub fn decode_execute(body: &[u8]) -> Result<String, WireError> {
    let mut cur = body;
    let portal = take_cstr(&mut cur)?;
    take_i32(&mut cur)?;
    Ok(portal)
}

/// Encodes messages into one buffer for a single write.
pub fn encode_all<'a>(msgs: impl IntoIterator<Item = &'a Message>) -> BytesMut {
    let mut out = BytesMut::new();
    for m in msgs {
        m.encode(&mut out);
    }
    out
}

/// The first column of a DataRow as an unsigned integer; None for NULL or anything else.
pub fn first_column_u64(body: &[u8]) -> Option<u64> {
    let mut cur = body;
    take_u16(&mut cur).ok()?;
    let len = take_i32(&mut cur).ok()?;
    if len < 0 {
        return None;
    }
    std::str::from_utf8(cur.get(..len as usize)?)
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn startup_parameters_decode() {
        let mut body = PROTOCOL_V3.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0app\0database\0blog\0\0");
        let s = parse_startup(&body).unwrap();
        assert_eq!(
            s,
            Startup::V3 {
                minor: 0,
                params: vec![
                    ("user".into(), "app".into()),
                    ("database".into(), "blog".into())
                ]
            }
        );
    }

    #[test]
    fn ssl_and_cancel_decode() {
        assert_eq!(
            parse_startup(&SSL_REQUEST.to_be_bytes()).unwrap(),
            Startup::Ssl
        );
        let mut c = CANCEL_REQUEST.to_be_bytes().to_vec();
        c.extend_from_slice(&7u32.to_be_bytes());
        c.extend_from_slice(&9u32.to_be_bytes());
        assert_eq!(
            parse_startup(&c).unwrap(),
            Startup::Cancel { pid: 7, secret: 9 }
        );
    }

    #[test]
    fn oversized_message_is_refused() {
        let mut buf = BytesMut::new();
        buf.put_u8(b'Q');
        buf.put_u32(1_000_000);
        let err = split_message(&mut buf, 1000).unwrap_err();
        assert!(err.to_string().contains("over the proxy's limit"), "{err}");
    }

    #[test]
    fn parse_round_trips() {
        let m = parse("s1", "select $1", &[23]);
        let p = decode_parse(&m.body).unwrap();
        assert_eq!(
            p,
            ParseMsg {
                name: "s1".into(),
                sql: "select $1".into(),
                param_types: vec![23]
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_startup(&data);
            let _ = decode_parse(&data);
            let _ = decode_bind_head(&data);
            let _ = decode_target(&data);
            let _ = decode_execute(&data);
            let _ = error_fields(&data);
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(_)) = split_message(&mut buf, 4096) {}
        }

        #[test]
        fn framing_round_trips(tag in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let m = Message::new(tag, body);
            let mut buf = BytesMut::new();
            m.encode(&mut buf);
            let back = split_message(&mut buf, 4096).unwrap().unwrap();
            prop_assert_eq!(back, m);
            prop_assert!(buf.is_empty());
        }
    }
}
