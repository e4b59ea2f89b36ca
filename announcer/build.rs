//! Builds the XDP program (`announcer-ebpf`, bin `announcer-xdp`) for `bpfel-unknown-none` with
//! aya-build, so that `include_bytes_aligned!` in the loader embeds the object.
//!
//! The eBPF crate is built with Debian's rustc-web toolchain linked into rustup as `debian-bpf`
//! (rustup's toolchains ship no `rust-src`), with `-Z build-std=core` enabled through
//! `RUSTC_BOOTSTRAP=1`. `cargo xtask` installs that toolchain and bpf-linker on first use.
//! Override the toolchain with `ANNOUNCER_BPF_TOOLCHAIN`.

#[path = "btf_fixup.rs"]
mod btf_fixup;

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=ANNOUNCER_BPF_TOOLCHAIN");
    // announcer-ebpf reads it with `option_env!` (a build whose program differs: version.rs);
    // the inner cargo tracks it, but only if this script runs again when it changes.
    println!("cargo:rerun-if-env-changed=ANNOUNCER_XDP_VERSION");
    let toolchain =
        std::env::var("ANNOUNCER_BPF_TOOLCHAIN").unwrap_or_else(|_| "debian-bpf".to_owned());
    // SAFETY: build scripts are single-threaded; aya-build reads this to enable build-std.
    unsafe { std::env::set_var("RUSTC_BOOTSTRAP", "1") };
    let toolchain: &'static str = Box::leak(toolchain.into_boxed_str());
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "announcer-ebpf",
            root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../announcer-ebpf"),
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(toolchain),
    )?;
    let obj = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("announcer-xdp");
    if obj.exists() {
        let mut bytes = std::fs::read(&obj)?;
        btf_fixup::sanitize(&mut bytes).map_err(anyhow::Error::msg)?;
        std::fs::write(&obj, bytes)?;
    }
    Ok(())
}
