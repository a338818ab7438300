//! Network namespaces with only a loopback interface.
//!
//! A socket belongs to the namespace it was created in, whatever thread later uses it. kiln
//! uses that to serve the Lambda Runtime API *inside* an isolated sandbox: a short-lived thread
//! enters the namespace, binds a listener there, and the agent accepts on it from its own
//! namespace. The sandbox can reach exactly the listeners kiln puts there and nothing else.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::sys;

/// An isolated network namespace, kept alive by an open descriptor.
#[derive(Debug)]
pub struct NetNs {
    fd: OwnedFd,
}

impl NetNs {
    /// Creates a namespace whose loopback interface is up.
    pub fn new() -> io::Result<Self> {
        in_thread(|| {
            sys::unshare(libc::CLONE_NEWNET)?;
            sys::loopback_up()?;
            let file = File::open("/proc/thread-self/ns/net")?;
            Ok(NetNs { fd: file.into() })
        })
    }

    /// Another descriptor of the same namespace, so that listeners can be added to it later
    /// (a service configured after the sandbox started).
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(NetNs {
            fd: self.fd.try_clone()?,
        })
    }

    /// Binds a TCP listener inside the namespace.
    pub fn listen_tcp(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        let fd = self.fd.as_raw_fd();
        in_thread(move || {
            sys::setns(fd, libc::CLONE_NEWNET)?;
            let listener = TcpListener::bind(addr)?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Runs `f` on a fresh thread, so that the namespace switch dies with that thread and never
/// leaks into the agent's async runtime.
fn in_thread<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    std::thread::spawn(f)
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("network namespace thread panicked")))
}
