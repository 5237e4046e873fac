//! ZMQ CURVE encryption between `--zmq-export` probes and a `--collect zmq+tcp://` collector
//! (libzmq's CurveZMQ, as nProbe and ntopng use for their ZMQ link).
//!
//! The collector holds a key pair: `zmq+tcp://ADDR:PORT?curve=NAME_secret` (its secret key).
//! Probes know its public key: `--zmq-export tcp://HOST:PORT?curve=NAME` (the public key file);
//! each probe makes a fresh key pair of its own at start. A producer without the collector's
//! public key (or with another one, or in plain text) never completes the handshake, so none of
//! its messages is taken; what crosses the network is encrypted and authenticated.
//!
//! Key files are czmq's certificate format, which `sonde zmq-keygen NAME` writes: `NAME` holds
//! the public key, `NAME_secret` (mode 0600) both keys, as Z85 text:
//!
//! ```text
//! curve
//!     public-key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
//!     secret-key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
//! ```

use std::path::Path;

/// Which key of a certificate file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Public,
    Secret,
}

impl Key {
    fn field(self) -> &'static str {
        match self {
            Key::Public => "public-key",
            Key::Secret => "secret-key",
        }
    }
}

/// Fails unless this libzmq was built with CURVE (libsodium).
fn need_curve(what: &str) -> Result<(), String> {
    if zmq::has("curve") == Some(true) {
        Ok(())
    } else {
        Err(format!(
            "{what}: this libzmq has no CURVE support (build it with libsodium)"
        ))
    }
}

/// Reads one key of a certificate file (see the module docs).
pub fn read_key(path: &Path, key: Key, what: &str) -> Result<[u8; 32], String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{what}: cannot read the key file {}: {e}", path.display()))?;
    let value = text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key.field()).then(|| v.trim().trim_matches('"').to_string())
    });
    let Some(z85) = value else {
        return Err(format!(
            "{what}: {} has no {} line (make key files with 'sonde zmq-keygen NAME': NAME is the \
             public key, NAME_secret the secret one)",
            path.display(),
            key.field()
        ));
    };
    let bytes = zmq::z85_decode(&z85).map_err(|_| {
        format!(
            "{what}: the {} in {} is not a Z85 key of 40 characters",
            key.field(),
            path.display()
        )
    })?;
    bytes.try_into().map_err(|_| {
        format!(
            "{what}: the {} in {} is not 32 bytes long",
            key.field(),
            path.display()
        )
    })
}

/// Makes the collector's socket a CURVE server with the secret key in `secret_file`.
pub fn serve(socket: &zmq::Socket, secret_file: &Path, what: &str) -> Result<(), String> {
    need_curve(what)?;
    let secret = read_key(secret_file, Key::Secret, what)?;
    socket
        .set_curve_server(true)
        .and_then(|_| socket.set_curve_secretkey(&secret))
        .map_err(|e| format!("{what}: cannot set up CURVE: {e}"))
}

/// Makes a producer's socket a CURVE client of the server whose public key is in
/// `server_public_file`, with a fresh key pair of its own.
pub fn connect(socket: &zmq::Socket, server_public_file: &Path, what: &str) -> Result<(), String> {
    need_curve(what)?;
    let server = read_key(server_public_file, Key::Public, what)?;
    let mine = zmq::CurveKeyPair::new().map_err(|e| format!("{what}: no key pair: {e}"))?;
    socket
        .set_curve_serverkey(&server)
        .and_then(|_| socket.set_curve_publickey(&mine.public_key))
        .and_then(|_| socket.set_curve_secretkey(&mine.secret_key))
        .map_err(|e| format!("{what}: cannot set up CURVE: {e}"))
}

/// Writes a new key pair: `name` (the public key, to give to producers) and `name_secret`
/// (both keys, readable by the owner only, for the collector). Existing files are not
/// overwritten.
pub fn keygen(name: &Path) -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    need_curve("zmq-keygen")?;
    let pair = zmq::CurveKeyPair::new().map_err(|e| format!("zmq-keygen: {e}"))?;
    let z85 = |k: &[u8]| zmq::z85_encode(k).map_err(|e| format!("zmq-keygen: {e:?}"));
    let (public, secret) = (z85(&pair.public_key)?, z85(&pair.secret_key)?);
    let secret_path = {
        let mut s = name.as_os_str().to_owned();
        s.push("_secret");
        std::path::PathBuf::from(s)
    };
    let header = "#   ZMQ CURVE certificate written by 'sonde zmq-keygen'\n";
    write_new(
        name,
        &format!("{header}curve\n    public-key = \"{public}\"\n"),
        0o644,
    )?;
    write_new(
        &secret_path,
        &format!(
            "{header}#   SECRET: give only to the collector\ncurve\n    public-key = \"{public}\"\n    \
             secret-key = \"{secret}\"\n"
        ),
        0o600,
    )?;
    Ok((name.to_path_buf(), secret_path))
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("zmq-keygen: cannot create {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("zmq-keygen: cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_written_read_back_and_checked() {
        let dir = std::env::temp_dir().join(format!("sonde-curve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = dir.join("collector");
        let (public, secret) = keygen(&name).unwrap();
        let p = read_key(&public, Key::Public, "t").unwrap();
        assert_eq!(read_key(&secret, Key::Public, "t").unwrap(), p);
        read_key(&secret, Key::Secret, "t").unwrap();
        // The public file has no secret; the files are not overwritten.
        assert!(read_key(&public, Key::Secret, "t")
            .unwrap_err()
            .contains("no secret-key"));
        assert!(keygen(&name).is_err());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the secret file is the owner's only");
        let bad = dir.join("bad");
        std::fs::write(&bad, "curve\n    public-key = \"not z85!\"\n").unwrap();
        assert!(read_key(&bad, Key::Public, "t")
            .unwrap_err()
            .contains("not a Z85 key"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
