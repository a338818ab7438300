//! Which process sent a request to a sandbox's object store listener. The forks of one zygote
//! share its network namespace and so its listener; when their invocations carry different tags
//! (sequence runs, admission), a connection is told apart by the process that holds its other
//! end: the socket with the connection's addresses in the namespace's `/proc/PID/net/tcp`, and
//! the candidate process with that socket among its file descriptors.

use std::net::SocketAddr;

/// Which of `pids` (processes in the listener's network namespace) holds the client end of the
/// connection from `peer` to `local`; None if none does, or more than one (a socket inherited
/// from the zygote).
pub fn owner(peer: SocketAddr, local: SocketAddr, pids: &[u32]) -> Option<u32> {
    let first = *pids.first()?;
    let table = if peer.is_ipv4() { "tcp" } else { "tcp6" };
    let text = std::fs::read_to_string(format!("/proc/{first}/net/{table}")).ok()?;
    let link = format!("socket:[{}]", socket_inode(&text, peer, local)?);
    let mut holders = pids.iter().copied().filter(|&pid| holds(pid, &link));
    let owner = holders.next()?;
    holders.next().is_none().then_some(owner)
}

/// Whether process `pid` has a descriptor of `link` (`socket:[INODE]`).
fn holds(pid: u32, link: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == link))
}

/// The inode of the socket whose own address is `peer` and whose remote is `local`, from a
/// `/proc/net/tcp` or `tcp6` table.
fn socket_inode(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    let (own, remote) = (proc_address(peer), proc_address(local));
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&own.as_str()) && fields.get(2) == Some(&remote.as_str()) {
            fields.get(9)?.parse().ok()
        } else {
            None
        }
    })
}

/// An address as `/proc/net/tcp` prints it: the address's 32-bit words in host byte order, in
/// hex, then the port.
fn proc_address(addr: SocketAddr) -> String {
    let words: String = match addr {
        SocketAddr::V4(a) => format!("{:08X}", u32::from_ne_bytes(a.ip().octets())),
        SocketAddr::V6(a) => a
            .ip()
            .octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{words}:{:04X}", addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_process_holding_the_client_end_owns_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(client.local_addr().unwrap(), peer);
        let me = std::process::id();
        assert_eq!(owner(peer, local, &[me]), Some(me));
        // Among candidates, the one holding it (pid 1 does not; the table is read through the
        // first candidate, this process).
        assert_eq!(owner(peer, local, &[me, 1]), Some(me));
        // No such connection.
        let gone = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1));
        assert_eq!(owner(gone, local, &[me]), None);
        drop(client);
    }

    #[test]
    fn addresses_are_printed_as_the_kernel_does() {
        let v4: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let expected = if cfg!(target_endian = "little") {
            "0100007F:2328"
        } else {
            "7F000001:2328"
        };
        assert_eq!(proc_address(v4), expected);
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:A1B2 0100007F:2328 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 20 4 30 10 -1\n";
        if cfg!(target_endian = "little") {
            let peer: SocketAddr = "127.0.0.1:41394".parse().unwrap();
            assert_eq!(socket_inode(table, peer, v4), Some(4242));
            assert_eq!(socket_inode(table, v4, peer), None);
        }
    }
}
