//! The system-call filter of a sandboxed runtime.
//!
//! A deny list in the spirit of Docker's default profile: runtimes (Node, CPython, Go, arbitrary
//! `provided` binaries) use a wide and changing set of system calls, so an allow list would break
//! them, while the calls below are only useful for escaping or attacking the host.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
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
        DENIED.iter().map(|&nr| (nr as i64, Vec::new())).collect();
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
    rules.insert(libc::SYS_clone as i64, clone_rules);
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(err)?;
    // clone3 passes its flags in memory, which a seccomp filter cannot read. ENOSYS makes glibc
    // and Go fall back to clone(2), whose flags the filter above does check.
    let clone3: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3 as i64, Vec::new())].into();
    let no_clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(err)?;
    [deny, no_clone3]
        .into_iter()
        .map(|f| BpfProgram::try_from(f).map_err(|e| SandboxError::Seccomp(e.to_string())))
        .collect()
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
    #[test]
    fn filters_compile_for_this_architecture() {
        let programs = super::build().unwrap();
        assert_eq!(programs.len(), 2);
        assert!(programs.iter().all(|p| !p.is_empty()));
    }
}
