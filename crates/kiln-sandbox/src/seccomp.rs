//! The system-call filter of a sandboxed runtime.
//!
//! A deny list in the spirit of Docker's default profile: runtimes (Node, CPython, Go, arbitrary
//! `provided` binaries) use a wide and changing set of system calls, so an allow list would break
//! them, while the calls below are only useful for escaping or attacking the host.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

use crate::SandboxError;

/// Calls refused with EPERM whatever their arguments.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_syslog,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_lookup_dcookie,
    libc::SYS_vhangup,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    // io_uring runs system calls from kernel workers, out of this filter's sight, and has been a
    // steady source of kernel exploits; Docker's default profile refuses it too. Node's libuv and
    // Go fall back to ordinary calls.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// Namespace-creating flags of clone(2): a new user namespace would hand the function fresh
/// capabilities over its own namespaces.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

fn arch() -> Result<seccompiler::TargetArch, SandboxError> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e| SandboxError::Seccomp(format!("unsupported architecture: {e}")))
}

/// Builds the filters, in the order they must be installed.
pub fn build() -> Result<Vec<BpfProgram>, SandboxError> {
    let err = |e: seccompiler::BackendError| SandboxError::Seccomp(e.to_string());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .map_err(err)?;
            SeccompRule::new(vec![cond]).map_err(err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(err)?;
    // clone3 passes its flags in memory, which a seccomp filter cannot read. ENOSYS makes glibc
    // and Go fall back to clone(2), whose flags the filter above does check.
    let clone3: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, Vec::new())].into();
    let no_clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(err)?;
    let mut programs = [deny, no_clone3]
        .into_iter()
        .map(|f| BpfProgram::try_from(f).map_err(|e| SandboxError::Seccomp(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(x32) = no_x32() {
        programs.push(x32);
    }
    Ok(programs)
}

/// On x86_64 the x32 ABI reaches the same kernel entry points under numbers with bit 30 set and
/// the same audit architecture, so a filter keyed on syscall numbers would let `x32 mount` by.
/// This filter refuses every such number (ENOSYS, as on a kernel built without x32).
fn no_x32() -> Option<BpfProgram> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    // struct seccomp_data { int nr; __u32 arch; ... }
    const NR_OFFSET: u32 = 0;
    const ARCH_OFFSET: u32 = 4;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        op(LD_W_ABS, 0, 0, ARCH_OFFSET),
        op(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        op(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        op(LD_W_ABS, 0, 0, NR_OFFSET),
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ])
}

/// Installs the filters on the calling thread (which then executes the runtime).
pub fn install(programs: &[BpfProgram]) -> Result<(), SandboxError> {
    for program in programs {
        seccompiler::apply_filter(program).map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    #[test]
    fn filters_compile_for_this_architecture() {
        let programs = super::build().unwrap();
        assert_eq!(
            programs.len(),
            if cfg!(target_arch = "x86_64") { 3 } else { 2 }
        );
        assert!(programs.iter().all(|p| !p.is_empty()));
    }

    /// Runs `argv` under the filters (and no_new_privs, which installing them requires).
    fn run_filtered(argv: &[&str]) -> std::process::ExitStatus {
        let programs = super::build().unwrap();
        let mut command = Command::new(argv[0]);
        command
            .args(&argv[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: between fork and exec the closure only calls prctl and seccomp through
        // seccompiler on memory (`programs`) that was allocated before the fork.
        unsafe {
            command.pre_exec(move || {
                super::install(&programs).map_err(|e| std::io::Error::other(e.to_string()))
            });
        }
        command.status().unwrap()
    }

    #[test]
    fn ordinary_programs_run_under_the_filters() {
        if std::path::Path::new("/bin/sh").exists() {
            assert!(run_filtered(&["/bin/sh", "-c", "ls / > /dev/null && sleep 0"]).success());
        }
    }

    #[test]
    fn namespace_creation_is_refused() {
        if std::path::Path::new("/usr/bin/unshare").exists() {
            assert!(!run_filtered(&["/usr/bin/unshare", "--user", "/bin/true"]).success());
            assert!(!run_filtered(&["/usr/bin/unshare", "--mount", "/bin/true"]).success());
        }
    }
}
