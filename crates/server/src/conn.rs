//! Plain-HTTP connections with limits: at most [`PER_CLIENT`] open connections per client (an
//! IPv4 address, an IPv6 /64) and [`TOTAL`] in all, and a connection that neither reads nor
//! writes for [`IDLE`] is closed. Idle or half-open sockets then cannot use up descriptors or
//! memory, and one client cannot take every slot. (HTTPS has the same per-client idea for
//! handshakes, in `tls.rs`.)

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Open connections one client may hold.
pub const PER_CLIENT: usize = 128;
/// Open connections in all.
pub const TOTAL: usize = 8192;
/// A connection with no byte read or written for this long is closed (the console's event
/// stream writes every second, so it never looks idle).
pub const IDLE: Duration = Duration::from_secs(120);

/// Connections closed at once because their client (or everyone) was at the cap.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Connections closed for being idle.
pub static IDLE_CLOSED: AtomicU64 = AtomicU64::new(0);

type Counts = Arc<Mutex<(HashMap<IpAddr, usize>, usize)>>;

/// A TCP listener that hands axum [`Limited`] streams.
pub struct Listener {
    tcp: tokio::net::TcpListener,
    counts: Counts,
}

impl Listener {
    pub fn new(tcp: tokio::net::TcpListener) -> Listener {
        Listener {
            tcp,
            counts: Arc::default(),
        }
    }
}

impl axum::serve::Listener for Listener {
    type Io = Limited;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (tcp, peer) = match self.tcp.accept().await {
                Ok(c) => c,
                // Out of descriptors and the like: wait a little, as axum's own loop does.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let key = crate::auth::client_key(peer.ip());
            {
                let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                let (per, total) = &mut *c;
                let n = per.entry(key).or_insert(0);
                if *n >= PER_CLIENT || *total >= TOTAL {
                    if *n == 0 {
                        per.remove(&key);
                    }
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                    continue; // `tcp` dropped: closed
                }
                *n += 1;
                *total += 1;
            }
            let _ = tcp.set_nodelay(true);
            return (
                Limited {
                    tcp,
                    key,
                    counts: self.counts.clone(),
                    idle: Box::pin(tokio::time::sleep(IDLE)),
                },
                peer,
            );
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A connection counted against its client's share, closed when idle for [`IDLE`].
pub struct Limited {
    tcp: tokio::net::TcpStream,
    key: IpAddr,
    counts: Counts,
    idle: Pin<Box<Sleep>>,
}

impl Limited {
    fn touched(&mut self) {
        self.idle.as_mut().reset(Instant::now() + IDLE);
    }

    fn timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        if self.idle.as_mut().poll(cx).is_ready() {
            IDLE_CLOSED.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let (per, total) = &mut *c;
        *total = total.saturating_sub(1);
        if let Some(n) = per.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.key);
            }
        }
    }
}

use std::future::Future;

impl AsyncRead for Limited {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.tcp).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.touched();
                }
                Poll::Ready(r)
            }
            Poll::Pending if self.timed_out(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "idle connection closed",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Limited {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.tcp).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.touched();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.timed_out(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "idle connection closed",
            ))),
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
