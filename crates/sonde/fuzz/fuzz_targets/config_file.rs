//! Fuzzes the config file (`--config FILE`): `config_file::parse` over any text, and when it
//! is accepted, `config_file::apply` laying it under an empty command line. Neither may panic;
//! a bad file must come back as an error naming the line and key.
#![no_main]
#![allow(dead_code)]

#[path = "../../src/cli.rs"]
mod cli;
#[path = "../../src/config_file.rs"]
mod config_file;

use clap::{CommandFactory, FromArgMatches};
use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match config_file::parse(&text) {
        Ok(file) => {
            let m = cli::Cli::command().get_matches_from(["sonde"]);
            let mut cli = cli::Cli::from_arg_matches(&m).expect("an empty command line parses");
            config_file::apply(file, Path::new("/etc/sonde"), &mut cli, &m);
        }
        Err(e) => assert!(!e.trim().is_empty(), "a refusal says why"),
    }
});
