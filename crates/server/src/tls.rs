//! TLS for `--https-cert FILE --https-key FILE`: a listener that hands axum decrypted streams.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A slow client must not hold the accept loop: handshakes that take longer are dropped.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Handshakes one client (an IPv4 address, an IPv6 /64) may have in progress: past that its
/// new connections are closed at once, so silent sockets from one place cannot fill the
/// handshake slots everyone else needs.
const HANDSHAKES_PER_CLIENT: usize = 16;

/// Connections closed before their handshake (a client over its share, or every slot taken),
/// for `/metrics`.
pub static REFUSED_HANDSHAKES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Loads a PEM certificate chain and private key into a TLS configuration.
pub fn config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--https-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--https-cert {}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--https-key {}: {e} (expected a PEM private key: PKCS#8, RSA or EC)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            format!(
                "--https-cert {} / --https-key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    Ok(Arc::new(cfg))
}

/// Accepts TCP connections and runs each TLS handshake in a task of its own, so a slow or
/// silent client never holds up the others; finished handshakes queue for axum.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(Stream, SocketAddr)>,
    addr: SocketAddr,
}

type Stream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// Handshakes in progress at once, from all clients.
const MAX_HANDSHAKES: usize = 1024;

impl TlsListener {
    /// Must be called inside the server's runtime (it spawns the accept loop).
    pub fn new(tcp: tokio::net::TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let addr = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let per_client: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>> = Default::default();
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    // Out of file descriptors and the like: wait a little, as axum's loop does.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let key = crate::auth::client_key(peer.ip());
                let refuse = || {
                    REFUSED_HANDSHAKES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                };
                {
                    let mut m = per_client.lock().unwrap_or_else(|e| e.into_inner());
                    let n = m.entry(key).or_insert(0);
                    if *n >= HANDSHAKES_PER_CLIENT {
                        refuse();
                        continue; // `tcp` is dropped: closed
                    }
                    *n += 1;
                }
                let release = {
                    let per_client = per_client.clone();
                    move || {
                        let mut m = per_client.lock().unwrap_or_else(|e| e.into_inner());
                        if let Some(n) = m.get_mut(&key) {
                            *n -= 1;
                            if *n == 0 {
                                m.remove(&key);
                            }
                        }
                    }
                };
                // Every slot taken (many clients at once): close rather than queue behind them.
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    release();
                    refuse();
                    continue;
                };
                let (acceptor, ready) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    // A failed handshake (plain HTTP, a scanner) is that client's problem only.
                    let done = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await;
                    release();
                    drop(permit);
                    if let Ok(Ok(s)) = done {
                        let _ = ready.send((s, peer)).await;
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(TlsListener { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Stream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop is gone (shutdown): never hand out another connection.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
