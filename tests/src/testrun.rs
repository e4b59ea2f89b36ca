//! Runs the real XDP program in the kernel on given bytes with `BPF_PROG_TEST_RUN`, with its
//! maps behind the same [`Dataplane`] the CLI uses.
//!
//! Without a context argument the kernel runs the program as if the frame arrived on the
//! loopback device, so [`IFINDEX`] (1) is the interface index VIPs must be keyed with.

use announcer::dataplane::{Dataplane, loader::OBJECT};
use announcer_ebpf::maps::{PROGRAM, STATS_V4, STATS_V6, VIPS_V4, VIPS_V6};
use aya::{
    Ebpf, EbpfLoader,
    programs::{TestRun, TestRunOptions, Xdp},
};

use crate::model::Verdict;

/// Interface index test_run frames arrive on (the loopback device).
pub const IFINDEX: u32 = 1;

/// XDP_PASS.
pub const XDP_PASS: u32 = 2;
/// XDP_TX.
pub const XDP_TX: u32 = 3;

/// The program, loaded but not attached, and its VIP table.
pub struct Harness {
    ebpf: Ebpf,
    /// The VIP table (keys use [`IFINDEX`]).
    pub dp: Dataplane,
}

impl Harness {
    /// Loads a fresh copy of the program with empty maps.
    pub fn new() -> Self {
        Self::with_capacity(None)
    }

    /// Like [`new`](Self::new), with the VIP and stats maps sized to `capacity` entries.
    pub fn with_capacity(capacity: Option<u32>) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the kernel tests load BPF programs and must run as root (they never skip)"
        );
        let mut loader = EbpfLoader::new();
        if let Some(n) = capacity {
            for m in [VIPS_V4, VIPS_V6, STATS_V4, STATS_V6] {
                loader.map_max_entries(m, n);
            }
        }
        let mut ebpf = loader.load(OBJECT).expect("load the XDP object");
        let prog: &mut Xdp = ebpf.program_mut(PROGRAM).unwrap().try_into().unwrap();
        prog.load().expect("the verifier accepts the program");
        let dp = Dataplane::from_ebpf(&mut ebpf, "test_run", IFINDEX).unwrap();
        Self { ebpf, dp }
    }

    fn prog(&self) -> &Xdp {
        self.ebpf.program(PROGRAM).unwrap().try_into().unwrap()
    }

    /// `BPF_PROG_TEST_RUN` of `frame`, `repeat` times in one syscall: the action,
    /// the frame the last run left, and the kernel's mean time per run.
    fn test_run(&self, frame: &[u8], repeat: u32) -> (u32, Vec<u8>, std::time::Duration) {
        let mut out = vec![0u8; frame.len() + 512];
        let r = self
            .prog()
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                repeat,
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(r.data_size_out as usize);
        (r.return_value, out, r.duration)
    }

    /// Runs the program once on `frame`; returns the action and the frame it left.
    pub fn run(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        let (action, out, _) = self.test_run(frame, 1);
        (action, out)
    }

    /// Runs the program and returns it as a [`Verdict`], checking that a pass leaves the frame
    /// untouched.
    pub fn verdict(&self, frame: &[u8]) -> Verdict {
        let (action, out) = self.run(frame);
        match action {
            XDP_PASS => {
                assert_eq!(out, frame, "a passed frame must reach the kernel untouched");
                Verdict::Pass
            }
            XDP_TX => Verdict::Tx(out),
            other => panic!("unexpected XDP action {other}"),
        }
    }

    /// Runs the program `repeat` times on `frame` in one syscall; returns the action and the
    /// kernel's mean time per run. Beware: each run sees the frame the previous one left.
    pub fn time(&self, frame: &[u8], repeat: u32) -> (u32, std::time::Duration) {
        let (action, _, mean) = self.test_run(frame, repeat);
        (action, mean)
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}
