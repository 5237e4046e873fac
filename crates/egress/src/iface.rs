//! Frames sent out of an interface as they came in: an AF_PACKET raw socket bound to the
//! interface, one `send` a frame, never blocking (a full queue counts the frame as dropped
//! rather than slowing the shard).

use std::io;

pub struct IfaceTx {
    fd: libc::c_int,
    pub name: String,
}

impl IfaceTx {
    /// Opens a sending socket on `name`. The errors say what to fix: a name `ip link` does not
    /// list, or no CAP_NET_RAW.
    pub fn open(name: &str) -> Result<IfaceTx, String> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| format!("--egress-iface '{name}': an interface name has no NUL byte"))?;
        // SAFETY: a NUL-terminated name; the call only reads it.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if index == 0 {
            return Err(format!(
                "--egress-iface {name}: no such interface (ip link lists them)"
            ));
        }
        // Protocol 0: this socket sends only, the kernel hands it nothing to read.
        // SAFETY: plain system call, the result is checked.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => format!(
                    "--egress-iface {name}: sending raw frames needs CAP_NET_RAW: run as root, or \
                     sudo setcap cap_net_raw,cap_net_admin=eip on the sonde binary"
                ),
                _ => format!("--egress-iface {name}: cannot open a packet socket: {e}"),
            });
        }
        let tx = IfaceTx {
            fd,
            name: name.to_string(),
        };
        // SAFETY: zeroed sockaddr_ll is a valid value; the fields set are the ones bind reads.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = index as i32;
        // SAFETY: addr lives across the call and its size is passed.
        let rc = unsafe {
            libc::bind(
                fd,
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(format!(
                "--egress-iface {name}: cannot bind a packet socket to it: {}",
                io::Error::last_os_error()
            ));
        }
        Ok(tx)
    }

    /// Sends one Ethernet frame. An error (queue full, interface down, frame over the MTU) is
    /// returned for the caller to count; nothing waits.
    #[inline]
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: the slice is valid for its length during the call.
        let n = unsafe {
            libc::send(
                self.fd,
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for IfaceTx {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_named() {
        let e = IfaceTx::open("sonde-no-such0").err().unwrap();
        assert!(e.contains("no such interface"), "{e}");
    }
}
