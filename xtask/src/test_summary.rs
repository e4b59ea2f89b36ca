//! Runs `cargo test`, passing its output through, and ends with one line that totals every
//! test binary's result (`tests: N passed, N failed, N skipped`): cargo's own last line is
//! the result of whichever binary ran last (often a doc-test run of zero tests), which says
//! nothing about the suite.

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Adds a libtest line like `test result: ok. 14 passed; 0 failed; 1 ignored; ...`.
    fn add(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

pub fn run(root: &Path, args: &[&str]) -> Result<()> {
    let mut child = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    let mut totals = Totals::default();
    let stdout = child.stdout.take().expect("piped");
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        totals.add(&line);
        writeln!(out, "{line}")?;
    }
    let status = child.wait()?;
    // The closing line CI reads: "N passed, N failed" with ignored tests as "skipped".
    writeln!(
        out,
        "\ntests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    )?;
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    if totals.passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_libtest_lines() {
        let mut t = Totals::default();
        t.add("test result: ok. 14 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.78s");
        t.add("test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out");
        t.add("running 3 tests");
        assert_eq!((t.passed, t.failed, t.ignored), (16, 3, 1));
    }
}
