//! Where sandbox helpers are started: one thread that lives as long as kiln.
//!
//! A helper asks the kernel to kill it when its parent dies (`PR_SET_PDEATHSIG`), so that no
//! sandbox outlives the agent. The kernel means the parent *thread*: the thread that forked the
//! helper. tokio moves work between threads (`block_in_place` hands a worker's core to a new
//! thread; idle blocking threads exit after a while), so a helper forked from whatever thread
//! an async task happened to run on could be killed while kiln runs on. Every helper is
//! therefore forked here, on a thread that never exits.

use std::os::fd::OwnedFd;
use std::sync::mpsc;
use std::sync::OnceLock;

use kiln_sandbox::{NetNs, SandboxError, SandboxSpec, SpawnFds};

type Job = Box<dyn FnOnce() + Send>;

static JOBS: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

fn jobs() -> &'static mpsc::Sender<Job> {
    JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        // Child processes are registered with the runtime that starts them.
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("kiln-spawner".into())
            .spawn(move || {
                let _entered = runtime.enter();
                for job in rx {
                    job();
                }
            })
            .expect("the spawner thread starts");
        tx
    })
}

/// Starts a sandbox (see [`kiln_sandbox::spawn`]) from the spawner thread; the network
/// namespace is handed back with the helper.
pub(super) async fn spawn(
    spec: SandboxSpec,
    output: OwnedFd,
    control: Option<OwnedFd>,
    netns: Option<NetNs>,
    tmp: Option<kiln_sandbox::TmpDisk>,
) -> (Result<tokio::process::Child, SandboxError>, Option<NetNs>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let child = kiln_sandbox::spawn(
            &spec,
            SpawnFds {
                output,
                control,
                netns: netns.as_ref(),
                tmp: tmp.as_ref(),
            },
        );
        // The helper holds its own descriptor of the disk; the sandbox's mount namespace holds
        // the disk once it is moved onto /tmp.
        drop(tmp);
        let _ = tx.send((child, netns));
    });
    if jobs().send(job).is_err() {
        unreachable!("the spawner thread lives as long as the process");
    }
    rx.await.expect("the spawner thread answers every job")
}
