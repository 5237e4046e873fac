//! `sonde user`: manages the users file that the web console and the API log people in with.

use anyhow::{anyhow, bail, Result};
use clap::{Parser, Subcommand};
use sonde_server::users::{self, Kind, Role, Users};
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "sonde user",
    about = "Manage the users and API tokens of the web console and the REST API"
)]
pub struct UserCli {
    /// The users file (the one sonde is started with as --users); default
    /// ~/.config/sonde/users.
    #[arg(long, value_name = "FILE", global = true)]
    users: Option<PathBuf>,
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Add a user, or set a user's password and role. The password is read from standard input
    /// (one line), or prompted for on a terminal.
    Add {
        name: String,
        #[arg(long, default_value = "viewer", value_parser = ["admin", "viewer"])]
        role: String,
    },
    /// Remove a user.
    Del { name: String },
    /// Create an API token for scripts (sent as 'Authorization: Bearer TOKEN'); printed once.
    Token {
        name: String,
        #[arg(long, default_value = "viewer", value_parser = ["admin", "viewer"])]
        role: String,
    },
    /// Remove an API token.
    DelToken { name: String },
    /// List users and tokens with their roles.
    List,
}

fn role(r: &str) -> Result<Role> {
    Role::parse(r).ok_or_else(|| anyhow!("role {r:?}: use admin or viewer"))
}

/// The password from standard input; on a terminal it is not echoed while typed.
fn read_password() -> Result<String> {
    let stdin = std::io::stdin();
    let hidden = stdin.is_terminal().then(EchoOff::new).flatten();
    if stdin.is_terminal() {
        eprint!("password: ");
    }
    let mut line = String::new();
    // ECHONL still shows the newline the user typed.
    let r = stdin.lock().read_line(&mut line);
    drop(hidden);
    r?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// The terminal's echo turned off until dropped (restored even on an error).
struct EchoOff(libc::termios);

impl EchoOff {
    fn new() -> Option<EchoOff> {
        // SAFETY: tcgetattr/tcsetattr on standard input with a termios struct we own.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return None;
            }
            let saved = t;
            t.c_lflag &= !libc::ECHO;
            t.c_lflag |= libc::ECHONL;
            if libc::tcsetattr(0, libc::TCSANOW, &t) != 0 {
                return None;
            }
            Some(EchoOff(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `new` on the same descriptor.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.0);
        }
    }
}

pub fn run(args: impl Iterator<Item = std::ffi::OsString>) -> Result<()> {
    let cli = UserCli::parse_from(args);
    let path = cli.users.unwrap_or_else(users::default_path);
    // The password is read before the lock: nobody waits while a person types.
    let password = match &cli.what {
        What::Add { .. } => Some(read_password()?),
        _ => None,
    };
    // Locked while read, changed and saved: a running server's console edits wait for it.
    let _lock = users::lock(&path).map_err(anyhow::Error::msg)?;
    let mut u = Users::load(&path).map_err(anyhow::Error::msg)?;
    match cli.what {
        What::Add { name, role: r } => {
            let password = password.unwrap_or_default();
            u.set_user(&name, role(&r)?, &password)
                .map_err(anyhow::Error::msg)?;
            u.save().map_err(anyhow::Error::msg)?;
            eprintln!("sonde: user {name} ({r}) saved in {}", path.display());
        }
        What::Del { name } => {
            if !u.remove(Kind::User, &name) {
                bail!("no user {name:?} in {}", path.display());
            }
            u.save().map_err(anyhow::Error::msg)?;
        }
        What::Token { name, role: r } => {
            let token = u.add_token(&name, role(&r)?).map_err(anyhow::Error::msg)?;
            u.save().map_err(anyhow::Error::msg)?;
            println!("{token}");
            eprintln!(
                "sonde: token {name} ({r}) saved (hashed) in {}; it is shown only now",
                path.display()
            );
        }
        What::DelToken { name } => {
            if !u.remove(Kind::Token, &name) {
                bail!("no token {name:?} in {}", path.display());
            }
            u.save().map_err(anyhow::Error::msg)?;
        }
        What::List => {
            for e in &u.entries {
                let kind = if e.kind == Kind::User {
                    "user"
                } else {
                    "token"
                };
                println!("{kind}\t{}\t{}", e.name, e.role);
            }
        }
    }
    Ok(())
}
