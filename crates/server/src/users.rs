//! The users file (`--users FILE`): who may use the console and the API, and with which role.
//!
//! One entry per line, `#` starts a comment:
//!
//! ```text
//! user  NAME  ROLE  $argon2id$v=19$m=19456,t=2,p=1$…   # a person: password hashed with argon2id
//! token NAME  ROLE  sha256:HEX                        # a script: an API token, stored hashed
//! ```
//!
//! ROLE is `admin` (everything, including managing users) or `viewer` (read only). Passwords are
//! slow to check on purpose (argon2id); tokens are 256 random bits, so a fast hash is enough.
//! The file is rewritten atomically (temporary file, fsync, rename) with mode 0600.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Viewer,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    User,
    Token,
}

/// One line of the file: a user with a password hash, or an API token's hash.
#[derive(Clone, Debug)]
pub struct Entry {
    pub kind: Kind,
    pub name: String,
    pub role: Role,
    pub hash: String,
}

/// The users file, as loaded.
#[derive(Debug)]
pub struct Users {
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

/// Names are shown in the console and written to the file: keep them plain.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "user name {name:?}: use 1 to 64 letters, digits, '.', '_', '-' or '@'"
        ))
    }
}

/// Passwords shorter than this are refused when set.
pub const MIN_PASSWORD: usize = 8;

pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| format!("no random numbers: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Checks `password` against an argon2 PHC string; a malformed hash never matches.
/// What tells one version of the users file from another: its inode (every save renames a new
/// file into place), modification time and length. None when there is no file.
pub type Stamp = (u64, std::time::SystemTime, u64);

pub fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((ino, m.modified().ok()?, m.len()))
}

/// Holds an exclusive lock on `PATH.lock` while the users file is read, changed and saved, so
/// the server and `sonde user` never write over each other's change. Released when dropped.
pub fn lock(path: &Path) -> Result<std::fs::File, String> {
    let lock = path.with_extension("lock");
    if let Some(dir) = lock.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|e| format!("--users: cannot lock '{}': {e}", lock.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock on a descriptor we own; it blocks until the other holder is done.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!(
                "--users: cannot lock '{}': {}",
                lock.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(f)
}

/// Argon2 costs a hash may ask for: a hand-edited file with `m=4000000000` would otherwise make
/// the first login allocate terabytes and abort the process.
const MAX_MEMORY_KIB: u64 = 256 * 1024;
const MAX_TIME_COST: u64 = 16;
const MAX_LANES: u64 = 16;

/// Whether an argon2 hash's parameters are within the costs sonde accepts.
pub fn hash_cost_ok(hash: &str) -> Result<(), String> {
    let Ok(h) = PasswordHash::new(hash) else {
        return Ok(()); // not a PHC string: reported as such elsewhere
    };
    for (key, max) in [
        ("m", MAX_MEMORY_KIB),
        ("t", MAX_TIME_COST),
        ("p", MAX_LANES),
    ] {
        if let Some(v) = h.params.get_decimal(key) {
            if u64::from(v) > max {
                return Err(format!(
                    "asks for argon2 {key}={v}, over the {max} sonde accepts"
                ));
            }
        }
    }
    Ok(())
}

pub fn verify_password(hash: &str, password: &str) -> bool {
    if hash_cost_ok(hash).is_err() {
        return false;
    }
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    format!("sha256:{}", hex(&digest))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` random bytes as hex.
pub fn random_hex(n: usize) -> Result<String, String> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| format!("no random numbers: {e}"))?;
    Ok(hex(&b))
}

/// A new API token: `sonde_` and 256 random bits.
pub fn new_token() -> Result<String, String> {
    Ok(format!("sonde_{}", random_hex(32)?))
}

/// A generated password: 20 characters from an alphabet without look-alikes (about 110 bits).
pub fn new_password() -> Result<String, String> {
    const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut b = [0u8; 20];
    getrandom::fill(&mut b).map_err(|e| format!("no random numbers: {e}"))?;
    // 256 % 57 != 0 leaves a small bias; at 20 characters it does not matter.
    Ok(b.iter()
        .map(|x| ALPHABET[*x as usize % ALPHABET.len()] as char)
        .collect())
}

impl Users {
    /// Reads `path`; a missing file is an empty list (the caller decides what that means).
    pub fn load(path: &Path) -> Result<Users, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("--users {}: {e}", path.display())),
        };
        let mut entries: Vec<Entry> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = || format!("--users {} line {}", path.display(), i + 1);
            let f: Vec<&str> = line.split_whitespace().collect();
            let [kind, name, role, hash] = f[..] else {
                return Err(format!(
                    "{}: expected 'user NAME ROLE HASH' or 'token NAME ROLE HASH' (create \
                     entries with 'sonde user add NAME --role admin|viewer')",
                    at()
                ));
            };
            let kind = match kind {
                "user" => Kind::User,
                "token" => Kind::Token,
                other => return Err(format!("{}: {other:?} is neither user nor token", at())),
            };
            check_name(name).map_err(|e| format!("{}: {e}", at()))?;
            let role = Role::parse(role)
                .ok_or_else(|| format!("{}: role {role:?}: use admin or viewer", at()))?;
            if kind == Kind::User {
                if let Err(e) = hash_cost_ok(hash) {
                    return Err(format!(
                        "{}: the hash of {name:?} {e}; reset it with 'sonde user add {name} --role {role}'",
                        at()
                    ));
                }
            }
            let valid = match kind {
                Kind::User => PasswordHash::new(hash).is_ok(),
                Kind::Token => hash
                    .strip_prefix("sha256:")
                    .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())),
            };
            if !valid {
                return Err(format!(
                    "{}: the hash of {name:?} is not an argon2 PHC string (users) or \
                     sha256:HEX (tokens); reset it with 'sonde user add {name} --role {role}'",
                    at()
                ));
            }
            if entries.iter().any(|e| e.kind == kind && e.name == name) {
                return Err(format!("{}: {name:?} is listed twice", at()));
            }
            entries.push(Entry {
                kind,
                name: name.to_string(),
                role,
                hash: hash.to_string(),
            });
        }
        Ok(Users {
            path: path.to_path_buf(),
            entries,
        })
    }

    pub fn has_users(&self) -> bool {
        self.entries.iter().any(|e| e.kind == Kind::User)
    }

    /// Adds or replaces a user (a new password replaces the old one).
    pub fn set_user(&mut self, name: &str, role: Role, password: &str) -> Result<(), String> {
        check_name(name)?;
        if password.chars().count() < MIN_PASSWORD {
            return Err(format!(
                "the password of {name:?} is too short: use at least {MIN_PASSWORD} characters"
            ));
        }
        let hash = hash_password(password)?;
        self.put(Kind::User, name, role, hash);
        Ok(())
    }

    /// Creates an API token named `name` and returns it (only its hash is kept).
    pub fn add_token(&mut self, name: &str, role: Role) -> Result<String, String> {
        check_name(name)?;
        let token = new_token()?;
        self.put(Kind::Token, name, role, hash_token(&token));
        Ok(token)
    }

    fn put(&mut self, kind: Kind, name: &str, role: Role, hash: String) {
        self.entries.retain(|e| !(e.kind == kind && e.name == name));
        self.entries.push(Entry {
            kind,
            name: name.to_string(),
            role,
            hash,
        });
    }

    /// Removes a user or token; false when there was none.
    pub fn remove(&mut self, kind: Kind, name: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| !(e.kind == kind && e.name == name));
        self.entries.len() != before
    }

    pub fn user(&self, name: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.kind == Kind::User && e.name == name)
    }

    pub fn token(&self, token: &str) -> Option<&Entry> {
        let h = hash_token(token);
        self.entries
            .iter()
            .find(|e| e.kind == Kind::Token && e.hash == h)
    }

    /// Writes the file atomically, readable by its owner only.
    pub fn save(&self) -> Result<(), String> {
        let err =
            |e: std::io::Error| format!("--users {}: cannot write ({e})", self.path.display());
        let mut text = String::from(
            "# sonde users: 'user NAME ROLE ARGON2-HASH' or 'token NAME ROLE sha256:HEX'.\n\
             # Manage with 'sonde user add|del|token|list --users FILE'.\n",
        );
        for e in &self.entries {
            let kind = match e.kind {
                Kind::User => "user",
                Kind::Token => "token",
            };
            text.push_str(&format!("{kind} {} {} {}\n", e.name, e.role, e.hash));
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        // A fresh temporary name, created exclusively and never through a link: a file or a
        // symlink someone left at a fixed name cannot take the write or its permissions.
        let tmp = self.path.with_extension(format!("tmp.{}", random_hex(8)?));
        {
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
            }
            let mut f = o.open(&tmp).map_err(err)?;
            let written = f.write_all(text.as_bytes()).and_then(|_| f.sync_all());
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(err(e));
            }
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })
    }
}

/// The default users file: `$XDG_CONFIG_HOME/sonde/users` or `~/.config/sonde/users`.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("sonde").join("users")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sonde-users-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join("users")
    }

    #[test]
    fn extreme_argon2_costs_are_refused_not_computed() {
        let path = tmp("cost");
        let good = hash_password("correct horse").unwrap();
        let huge = good.replacen("m=19456", "m=4000000000", 1);
        assert_ne!(good, huge);
        std::fs::write(&path, format!("user root admin {huge}\n")).unwrap();
        let e = Users::load(&path).unwrap_err();
        assert!(e.contains("line 1") && e.contains("m=4000000000"), "{e}");
        assert!(
            !verify_password(&huge, "correct horse"),
            "refused without hashing"
        );
        assert!(verify_password(&good, "correct horse"));
    }

    #[test]
    #[cfg(unix)]
    fn saving_ignores_what_was_left_at_the_old_temporary_name() {
        use std::os::unix::fs::PermissionsExt;
        let path = tmp("tmpname");
        let dir = path.parent().unwrap().to_path_buf();
        // A world-readable file and a symlink at the names an older save used.
        let old_tmp = path.with_extension("tmp");
        std::fs::write(&old_tmp, "left over").unwrap();
        std::fs::set_permissions(&old_tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        let target = dir.join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.join("users.tmp.link")).unwrap();
        let mut u = Users::load(&path).unwrap();
        u.set_user("alice", Role::Admin, "correct horse").unwrap();
        u.save().unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the users file is private");
        assert!(!target.exists(), "no write through a link");
        assert_eq!(std::fs::read_to_string(&old_tmp).unwrap(), "left over");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("users.tmp.") && n != "users.tmp.link")
            .collect();
        assert!(left.is_empty(), "no temporary file left: {left:?}");
    }

    #[test]
    fn users_and_tokens_round_trip_through_the_file() {
        let path = tmp("rt");
        let mut u = Users::load(&path).unwrap();
        assert!(!u.has_users());
        u.set_user("alice", Role::Viewer, "correct horse").unwrap();
        let token = u.add_token("grafana", Role::Viewer).unwrap();
        u.save().unwrap();
        let u = Users::load(&path).unwrap();
        let alice = u.user("alice").unwrap();
        assert_eq!(alice.role, Role::Viewer);
        assert!(verify_password(&alice.hash, "correct horse"));
        assert!(!verify_password(&alice.hash, "correct horsE"));
        assert_eq!(u.token(&token).unwrap().name, "grafana");
        assert!(u.token("sonde_00").is_none());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn bad_lines_are_named() {
        let path = tmp("bad");
        for (text, needle) in [
            ("user alice admin\n", "line 1: expected"),
            (
                "# c\nuser alice root $argon2id$x\n",
                "line 2: role \"root\"",
            ),
            ("user alice admin nothash\n", "not an argon2"),
            ("user a<b admin x\n", "user name"),
            ("group a admin x\n", "neither user nor token"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Users::load(&path).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn short_passwords_and_odd_names_are_refused() {
        let mut u = Users::load(&tmp("short")).unwrap();
        assert!(u.set_user("bob", Role::Admin, "short").is_err());
        assert!(u.set_user("bob smith", Role::Admin, "long enough").is_err());
        assert!(u.set_user("bob", Role::Admin, "long enough").is_ok());
        assert!(u.remove(Kind::User, "bob"));
        assert!(!u.remove(Kind::User, "bob"));
    }
}
