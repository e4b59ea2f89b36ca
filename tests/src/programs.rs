//! Where the programs the tests run are found: system tools on `$PATH` ([`find_program`],
//! [`require_program`]) and the upstream Kubernetes programs `cargo xtask setup` builds
//! ([`kube_program`]).
//!
//! Why a module of its own: the namespace harness ([`crate::netns`]) needs `ip` before any
//! tool wrapper ([`crate::tools`]) can run inside a namespace, so the lookup sits below both.

use std::path::{Path, PathBuf};

/// Finds `name` in `$PATH` or the usual sbin/bin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Absolute path of `name`; panics with an install hint (`package`) if missing.
pub fn require_program(name: &str, package: &str) -> PathBuf {
    find_program(name).unwrap_or_else(|| {
        panic!("required program `{name}` not found; run `apt-get install {package}`")
    })
}

/// An upstream program that `cargo xtask setup` builds from a Go module under `tests/kube/`
/// into `target/kube/bin/` (`kubectl`, `kube-apiserver`, ..., `helm`). Panics, naming the
/// command that builds it, if it is not there: tests that need it fail rather than skip.
pub fn kube_program(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .join("target/kube/bin")
        .join(name);
    use std::os::unix::fs::PermissionsExt;
    let ok = path
        .metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    assert!(
        ok,
        "{name} is not built: {} is missing; run `cargo xtask setup` (it builds {name} with Go \
         from tests/kube/)",
        path.display()
    );
    path
}
