//! Installs what the build and the tests need, once; each step checks before it acts.
//!
//! * Debian's `rustc-web`, `rust-web-src` and `cargo-web`: rustc 1.96 with LLVM 22 and the
//!   `core` sources at `/usr`. rustup's toolchains ship no `rust-src`, which `-Z build-std=core`
//!   needs for the `bpfel-unknown-none` target.
//! * `rustup toolchain link debian-bpf /usr`, the name `announcer/build.rs` builds the eBPF
//!   crate with.
//! * `bpf-linker` 0.10.0 (LLVM 22, loaded from that toolchain at run time).
//! * Test and bench tools: iproute2, bpftool, arping, ndisc6, tcpdump, ethtool, and
//!   libfaketime (the testbed runs an agent with its wall clock offset, `LD_PRELOAD`ing
//!   `libfaketime.so.1`; `faketime` is its command-line wrapper, for trying it by hand), and
//!   stress-ng (the failover bench's `stress` scenario keeps every CPU busy with it).
//! * `kubernetes-validate` from PyPI, which checks `deploy/` against the Kubernetes OpenAPI
//!   schemas it bundles, offline (`tests/tests/deploy/`).
//! * Upstream Kubernetes programs the tests run against (for now `kubectl`, whose `kubectl
//!   kustomize` renders `deploy/` as `kubectl apply -k` does), built with the machine's Go from
//!   the module proxy into `target/kube/bin/`. The Go module `tests/kube/` pins their versions
//!   (`tests/kube/update-go-mod.sh` regenerates it); nothing of the product is Go.
//! * MetalLB's `IPAddressPool` and `L2Advertisement` CRDs, copied from its Go module
//!   ([`METALLB_VERSION`], fetched by `go mod download` from the module proxy) into
//!   `target/metallb/crds/`: the migration tests (`tests/tests/deploy/metallb.rs`) install
//!   the real schemas, so that `announcer migrate metallb` is tested on objects MetalLB's own
//!   API accepts. Only the YAML is used; nothing of MetalLB is built or run.
//! * Helm (`tests/kube/helm/`, built like the Kubernetes programs into `target/kube/bin/helm`):
//!   the chart's tests (`tests/tests/deploy/chart.rs`) lint, render and install
//!   `deploy/chart/` with it.
//! * The Prometheus Operator's `PodMonitor` and `PrometheusRule` CRDs, copied from its Go
//!   module ([`PROMETHEUS_OPERATOR_VERSION`]) into `target/prometheus-operator/crds/` as
//!   MetalLB's are: the chart's tests install them to check the chart's monitoring objects
//!   against the real schemas. Nothing of the operator is built or run.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::run;

const APT_PACKAGES: &[&str] = &[
    "rustc-web",
    "rust-web-src",
    "cargo-web",
    "iproute2",
    "bpftool",
    "arping",
    "keepalived",
    "ndisc6",
    "tcpdump",
    "ethtool",
    "util-linux",
    "libfaketime",
    "faketime",
    "stress-ng",
    // kube-proxy (nftables mode runs `nft`; it clears UDP conntrack entries with `conntrack`).
    "nftables",
    "conntrack",
    // `cargo xtask image`: strips the binary, and takes the CA bundle from the package's own
    // certificates.
    "binutils",
    "ca-certificates",
];
const TOOLCHAIN: &str = "debian-bpf";
const BPF_LINKER_VERSION: &str = "0.10.0";
/// Bundles the schemas of Kubernetes 1.25 to 1.37.
const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";

/// What a command needs installed. Each `xtask` command asks for the least that works, so a
/// fresh machine running the embedded demo does not first spend 20 minutes building the Go
/// control plane it never starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// The Rust and eBPF toolchains and the network tools (`build`, `build-and-load`, the
    /// embedded demo).
    Build,
    /// Also the real control plane, [`CONTROL_PLANE`] (`demo --apiserver kube`, `kube up`).
    ControlPlane,
    /// Everything the test suite and the benchmarks run (`setup`, `test`, `bench`).
    Everything,
}

/// The programs of a real control plane: what `demo --apiserver kube` and `kube up` start.
const CONTROL_PLANE: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// Runs every step `need` asks for that is not already done.
pub fn ensure(need: Need) -> Result<()> {
    apt()?;
    link_toolchain()?;
    bpf_linker()?;
    if need >= Need::ControlPlane {
        kube_programs(need)?;
    }
    if need >= Need::Everything {
        kubernetes_validate()?;
        metallb_crds()?;
        prometheus_operator_crds()?;
    }
    Ok(())
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn apt() -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {} with apt-get", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .context("apt-get install (are you root, with the Debian mirrors reachable?)")
}

fn link_toolchain() -> Result<()> {
    let out = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("running rustup")?;
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with(TOOLCHAIN))
    {
        return Ok(());
    }
    if !Path::new("/usr/lib/rustlib/src/rust/library/core").exists() {
        bail!("/usr/lib/rustlib/src/rust/library/core is missing: is rust-web-src installed?");
    }
    eprintln!("xtask: linking Debian's rustc-web as the rustup toolchain {TOOLCHAIN}");
    run(Command::new("rustup").args(["toolchain", "link", TOOLCHAIN, "/usr"]))
}

fn bpf_linker() -> Result<()> {
    let ok = Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION));
    if ok {
        return Ok(());
    }
    eprintln!("xtask: installing bpf-linker {BPF_LINKER_VERSION} (a minute or two)");
    run(Command::new("cargo").args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION]))
}

/// `kubernetes-validate`, for the `python3` on PATH (the one the deploy test runs). Installed
/// with pip past PEP 668's guard, because Debian's python3 refuses plain `pip install` and the
/// package has no Debian build; it adds one small pure-Python package and its two dependencies.
fn kubernetes_validate() -> Result<()> {
    let ok = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim() == KUBERNETES_VALIDATE_VERSION
        });
    if ok {
        return Ok(());
    }
    let has_pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pip {
        eprintln!("xtask: installing python3-pip with apt-get");
        run(Command::new("apt-get").args(["update", "-q"]))?;
        run(Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "python3-pip",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    eprintln!("xtask: installing kubernetes-validate {KUBERNETES_VALIDATE_VERSION} with pip");
    run(Command::new("python3").args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--break-system-packages",
        "--root-user-action=ignore",
        &format!("kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"),
    ]))
    .context("pip install kubernetes-validate (is PyPI reachable?)")
}

/// An upstream program built from a Go module under `tests/kube/`, into
/// `target/kube/bin/NAME`.
struct GoProgram {
    /// The binary's name under `target/kube/bin/`.
    name: &'static str,
    /// Its main package; a `tool` line of the module's go.mod (see its `update-go-mod.sh`).
    package: &'static str,
    /// The module whose version (as the go.mod requires it) the binary reports.
    module: &'static str,
    /// The Go module that pins it, relative to the workspace.
    dir: &'static str,
}

const KUBERNETES: &str = "tests/kube";
const ETCD: &str = "tests/kube/etcd";
const METALLB: &str = "tests/kube/metallb";
const KUBE_VIP: &str = "tests/kube/kube-vip";
const HELM: &str = "tests/kube/helm";

/// What `cargo xtask setup` builds from `tests/kube/`. To add a program, list its package in
/// the module's `update-go-mod.sh`, run that, and list it here; programs of one module share
/// the Go build cache, so each more costs little beyond its own packages and a link. etcd has a
/// module of its own, so its dependencies never move Kubernetes' (or the reverse).
const KUBE_PROGRAMS: &[GoProgram] = &[
    GoProgram {
        name: "kubectl",
        package: "k8s.io/kubernetes/cmd/kubectl",
        module: "k8s.io/kubernetes",
        dir: KUBERNETES,
    },
    GoProgram {
        name: "kube-apiserver",
        package: "k8s.io/kubernetes/cmd/kube-apiserver",
        module: "k8s.io/kubernetes",
        dir: KUBERNETES,
    },
    GoProgram {
        name: "kube-controller-manager",
        package: "k8s.io/kubernetes/cmd/kube-controller-manager",
        module: "k8s.io/kubernetes",
        dir: KUBERNETES,
    },
    GoProgram {
        name: "kube-scheduler",
        package: "k8s.io/kubernetes/cmd/kube-scheduler",
        module: "k8s.io/kubernetes",
        dir: KUBERNETES,
    },
    GoProgram {
        name: "kube-proxy",
        package: "k8s.io/kubernetes/cmd/kube-proxy",
        module: "k8s.io/kubernetes",
        dir: KUBERNETES,
    },
    GoProgram {
        name: "metallb-speaker",
        package: "go.universe.tf/metallb/speaker",
        module: "go.universe.tf/metallb",
        dir: METALLB,
    },
    GoProgram {
        name: "metallb-controller",
        package: "go.universe.tf/metallb/controller",
        module: "go.universe.tf/metallb",
        dir: METALLB,
    },
    GoProgram {
        name: "kube-vip",
        package: "github.com/kube-vip/kube-vip",
        module: "github.com/kube-vip/kube-vip",
        dir: KUBE_VIP,
    },
    GoProgram {
        name: "helm",
        package: "helm.sh/helm/v4/cmd/helm",
        module: "helm.sh/helm/v4",
        dir: HELM,
    },
    GoProgram {
        name: "etcd",
        package: "go.etcd.io/etcd/server/v3",
        module: "go.etcd.io/etcd/server/v3",
        dir: ETCD,
    },
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// The version of `module` that a go.mod requires (a `require` line, not a `replace`).
fn required_version<'a>(go_mod: &'a str, module: &str) -> Option<&'a str> {
    go_mod.lines().find_map(|l| {
        let l = l.trim();
        if l.contains("=>") {
            return None;
        }
        let mut f = l.strip_prefix("require ").unwrap_or(l).split_whitespace();
        (f.next() == Some(module)).then(|| f.next()).flatten()
    })
}

/// `-ldflags` that stamp `version` of `module` into the binary, so that it reports it
/// (`kubectl version --client`), as upstream's release build does.
fn version_ldflags(module: &str, version: &str) -> Result<String> {
    match module {
        "k8s.io/kubernetes" => {
            let mut parts = version.trim_start_matches('v').split('.');
            let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
                bail!("unexpected version {version} of {module}");
            };
            let v = "k8s.io/component-base/version";
            // `-s -w` as upstream's release build: no symbol table and DWARF (a third smaller).
            Ok(format!(
                "-s -w -X {v}.gitVersion={version} -X {v}.gitMajor={major} -X {v}.gitMinor={minor}"
            ))
        }
        // etcd's version is a constant of its source (`etcd --version`); strip as upstream.
        "go.etcd.io/etcd/server/v3" => Ok("-s -w".into()),
        // MetalLB and kube-vip print their version from ldflags their release builds set; the
        // bench reads the version from the go.mod instead, so strip only.
        "go.universe.tf/metallb" | "github.com/kube-vip/kube-vip" => Ok("-s -w".into()),
        // Helm's release build stamps its version (`helm version`), and strips.
        "helm.sh/helm/v4" => Ok(format!(
            "-s -w -X helm.sh/helm/v4/internal/version.version={version}"
        )),
        other => bail!("no version stamp known for {other}"),
    }
}

/// FNV-1a: a stable digest of the build's inputs, for the stamp next to each binary.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Builds each of [`KUBE_PROGRAMS`] that `need` asks for whose binary is missing or was built
/// from other inputs (go.mod, go.sum, package, flags: recorded in `target/kube/stamps/NAME`). A
/// first build downloads the modules into Go's module cache and compiles into its build cache,
/// both under $HOME, which later builds (other programs, other checkouts) reuse. Each build
/// says which program it is, what is left, and every [`PROGRESS_EVERY`] how long it has run:
/// a cold build of the control plane takes many minutes.
fn kube_programs(need: Need) -> Result<()> {
    let root = workspace_root();
    let bin_dir = root.join("target/kube/bin");
    let stamp_dir = root.join("target/kube/stamps");
    let mut stale = Vec::new();
    for p in KUBE_PROGRAMS {
        if need < Need::Everything && !CONTROL_PLANE.contains(&p.name) {
            continue;
        }
        let build = GoBuild::of(&root, p)?;
        let current =
            std::fs::read_to_string(stamp_dir.join(p.name)).is_ok_and(|s| s == build.stamp);
        if !(bin_dir.join(p.name).is_file() && current) {
            stale.push(build);
        }
    }
    if stale.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(&bin_dir)?;
    std::fs::create_dir_all(&stamp_dir)?;
    let go_version = Command::new("go")
        .arg("version")
        .output()
        .context("running `go` (Go 1.26 or newer is needed to build the test tools)")?;
    eprintln!(
        "xtask: building {} with {} (the first build takes minutes; later ones reuse Go's \
         module and build caches)",
        stale
            .iter()
            .map(|b| b.program.name)
            .collect::<Vec<_>>()
            .join(", "),
        String::from_utf8_lossy(&go_version.stdout).trim()
    );
    let all = Instant::now();
    let n = stale.len();
    for (i, b) in stale.iter().enumerate() {
        let p = b.program;
        let left: Vec<&str> = stale[i + 1..].iter().map(|b| b.program.name).collect();
        eprintln!(
            "xtask: [{}/{n}] building {} {} from {}/{}",
            i + 1,
            p.name,
            b.version,
            p.dir,
            if left.is_empty() {
                String::new()
            } else {
                format!(" (then {})", left.join(", "))
            }
        );
        let started = Instant::now();
        let partial = bin_dir.join(format!("{}.partial", p.name));
        run_with_progress(
            Command::new("go")
                .args(["build", "-mod=readonly", "-buildvcs=false", "-trimpath"])
                .arg("-ldflags")
                .arg(&b.ldflags)
                .arg("-o")
                .arg(&partial)
                .arg(p.package)
                .current_dir(root.join(p.dir))
                // Upstream's release binaries are static; and never fetch a newer Go behind
                // our back: a module that needs one fails here, saying so.
                .env("CGO_ENABLED", "0")
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", ""),
            p.name,
        )
        .with_context(|| format!("building {} (is the Go module proxy reachable?)", p.package))?;
        let bin = bin_dir.join(p.name);
        std::fs::rename(&partial, &bin)?;
        std::fs::write(stamp_dir.join(p.name), &b.stamp)?;
        eprintln!(
            "xtask: [{}/{n}] built {} in {:.0?} ({:.0?} so far)",
            i + 1,
            bin.display(),
            started.elapsed(),
            all.elapsed()
        );
    }
    Ok(())
}

/// One program's build: its inputs, and the stamp they make.
struct GoBuild {
    program: &'static GoProgram,
    version: String,
    ldflags: String,
    stamp: String,
}

impl GoBuild {
    fn of(root: &Path, p: &'static GoProgram) -> Result<Self> {
        let module_dir = root.join(p.dir);
        let go_mod = std::fs::read_to_string(module_dir.join("go.mod"))
            .with_context(|| format!("{}/go.mod", p.dir))?;
        let go_sum = std::fs::read_to_string(module_dir.join("go.sum"))
            .with_context(|| format!("{}/go.sum", p.dir))?;
        let version = required_version(&go_mod, p.module)
            .with_context(|| format!("{}/go.mod does not require {}", p.dir, p.module))?;
        let ldflags = version_ldflags(p.module, version)?;
        let inputs = fnv1a(&[
            go_mod.as_bytes(),
            go_sum.as_bytes(),
            p.package.as_bytes(),
            ldflags.as_bytes(),
        ]);
        Ok(GoBuild {
            program: p,
            version: version.to_owned(),
            stamp: format!("{} {} {version} inputs={inputs:016x}\n", p.name, p.package),
            ldflags,
        })
    }
}

/// How often a long build says it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Runs `cmd` to completion, printing every [`PROGRESS_EVERY`] that `what` is still building.
fn run_with_progress(cmd: &mut Command, what: &str) -> Result<()> {
    let started = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("running {cmd:?}"))?;
    let mut said = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
        let t = started.elapsed();
        if t >= said + PROGRESS_EVERY {
            said = t;
            eprintln!("xtask:   still building {what} ({}s)", t.as_secs());
        }
    };
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// The MetalLB release whose CRDs the migration tests install (`go.universe.tf/metallb`).
const METALLB_VERSION: &str = "v0.16.1";
/// The CRDs copied from its module, under `config/crd/bases/` there.
const METALLB_CRDS: &[&str] = &[
    "metallb.io_ipaddresspools.yaml",
    "metallb.io_l2advertisements.yaml",
];

/// Copies [`METALLB_CRDS`] of [`METALLB_VERSION`] into `target/metallb/crds/`.
fn metallb_crds() -> Result<()> {
    module_files(&ModuleFiles {
        module: "go.universe.tf/metallb",
        version: METALLB_VERSION,
        dir: "config/crd/bases",
        files: METALLB_CRDS,
        target: "target/metallb",
    })
}

/// The Prometheus Operator release whose CRDs the chart's tests install.
const PROMETHEUS_OPERATOR_VERSION: &str = "v0.85.0";
/// The CRDs copied from its module, under `example/prometheus-operator-crd/` there.
const PROMETHEUS_OPERATOR_CRDS: &[&str] = &[
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
];

/// Copies [`PROMETHEUS_OPERATOR_CRDS`] of [`PROMETHEUS_OPERATOR_VERSION`] into
/// `target/prometheus-operator/crds/`.
fn prometheus_operator_crds() -> Result<()> {
    module_files(&ModuleFiles {
        module: "github.com/prometheus-operator/prometheus-operator",
        version: PROMETHEUS_OPERATOR_VERSION,
        dir: "example/prometheus-operator-crd",
        files: PROMETHEUS_OPERATOR_CRDS,
        target: "target/prometheus-operator",
    })
}

/// Some files of an upstream Go module, copied out of it: only the YAML is used; nothing of
/// the module is built or run.
struct ModuleFiles {
    module: &'static str,
    version: &'static str,
    /// Where the files are inside the module.
    dir: &'static str,
    files: &'static [&'static str],
    /// Relative to the workspace: the files go to `crds/` there, beside a `stamp`.
    target: &'static str,
}

/// Copies `m`'s files unless the stamp says they are already that version's. `go mod download`
/// puts the module in Go's module cache (read-only) and prints where (`Dir`); outside any Go
/// module, so no go.mod of ours changes.
fn module_files(m: &ModuleFiles) -> Result<()> {
    let root = workspace_root().join(m.target);
    let out_dir = root.join("crds");
    let stamp_path = root.join("stamp");
    let stamp = format!("{} {} {}\n", m.module, m.version, m.files.join(" "));
    if m.files.iter().all(|f| out_dir.join(f).is_file())
        && std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp)
    {
        return Ok(());
    }
    std::fs::create_dir_all(&out_dir)?;
    eprintln!(
        "xtask: fetching {} {}'s CRDs from the Go module proxy",
        m.module, m.version
    );
    let at = format!("{}@{}", m.module, m.version);
    let out = Command::new("go")
        .args(["mod", "download", "-json", &at])
        .current_dir(&root)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .output()
        .context("running `go mod download` (Go is needed for the test tools)")?;
    if !out.status.success() {
        bail!(
            "go mod download {at} failed (is the Go module proxy reachable?): {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let info: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("go mod download -json output")?;
    let dir = info["Dir"]
        .as_str()
        .with_context(|| format!("go mod download printed no Dir: {info}"))?;
    for f in m.files {
        let from = Path::new(dir).join(m.dir).join(f);
        let to = out_dir.join(f);
        // The module cache is read-only: write the content, not a copy of the permissions.
        let text = std::fs::read(&from).with_context(|| format!("{}", from.display()))?;
        std::fs::write(&to, text).with_context(|| format!("{}", to.display()))?;
    }
    std::fs::write(&stamp_path, stamp)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program setup builds is pinned by tests/kube/go.mod (a `tool` line, so that
    /// `go mod tidy` keeps what it needs), and its version stamp can be made.
    #[test]
    fn kube_programs_are_tools_of_the_go_module() {
        for p in KUBE_PROGRAMS {
            let go_mod =
                std::fs::read_to_string(workspace_root().join(p.dir).join("go.mod")).unwrap();
            assert!(
                tools(&go_mod).contains(&p.package),
                "{} is not a tool of {}/go.mod: add it to update-go-mod.sh and run that",
                p.package,
                p.dir
            );
            let version = required_version(&go_mod, p.module).unwrap();
            assert!(version.starts_with('v') && !version.starts_with("v0.0.0"));
            version_ldflags(p.module, version).unwrap();
        }
    }

    /// `demo --apiserver kube` and `kube up` build only [`CONTROL_PLANE`]: each of its names
    /// must be a program setup knows how to build, or they would start without it.
    #[test]
    fn the_control_plane_needs_only_programs_setup_builds() {
        for name in CONTROL_PLANE {
            assert!(
                KUBE_PROGRAMS.iter().any(|p| p.name == *name),
                "{name} is in CONTROL_PLANE but not in KUBE_PROGRAMS"
            );
        }
        assert!(Need::Build < Need::ControlPlane && Need::ControlPlane < Need::Everything);
    }

    /// The `tool` lines of a go.mod, on their own or in a `tool ( ... )` block.
    fn tools(go_mod: &str) -> Vec<&str> {
        let mut block = false;
        let mut out = Vec::new();
        for l in go_mod.lines().map(str::trim) {
            match (block, l) {
                (false, "tool (") => block = true,
                (true, ")") => block = false,
                (true, t) if !t.is_empty() => out.push(t),
                (false, t) => out.extend(t.strip_prefix("tool ")),
                _ => {}
            }
        }
        out
    }

    #[test]
    fn kubernetes_version_stamp() {
        let m = "require (\n\tk8s.io/api v0.0.0\n\tk8s.io/kubernetes v1.37.2 // indirect\n)\n\
                 replace k8s.io/kubernetes => k8s.io/kubernetes v9.9.9\n";
        assert_eq!(required_version(m, "k8s.io/kubernetes"), Some("v1.37.2"));
        assert_eq!(
            version_ldflags("k8s.io/kubernetes", "v1.37.2").unwrap(),
            "-s -w -X k8s.io/component-base/version.gitVersion=v1.37.2 \
             -X k8s.io/component-base/version.gitMajor=1 \
             -X k8s.io/component-base/version.gitMinor=37"
        );
    }
}
