//! Who may reach the daemon. The run directory is `0750` and the control socket `0660`, both
//! owned by root and by the group given with `--socket-group` (root's group by default), so
//! only root and that group's members can connect; nothing depends on the umask. The socket is
//! bound with a umask that keeps it closed until its mode is set.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use crate::error::DaemonError;

/// The run directory's mode.
pub const RUN_DIR_MODE: u32 = 0o750;
/// The control socket's mode.
pub const SOCKET_MODE: u32 = 0o660;

/// The id of group `name`.
pub fn group_id(name: &str) -> Result<u32, DaemonError> {
    let group = |why| DaemonError::Group { name: name.to_string(), why };
    let c = std::ffi::CString::new(name).map_err(|_| group("not a group name"))?;
    // SAFETY: getgrnam reads a NUL-terminated name; the entry is read at once, before any other
    // call could reuse its static storage (the daemon's start is single-threaded here).
    let entry = unsafe { libc::getgrnam(c.as_ptr()) };
    if entry.is_null() {
        return Err(group("no such group"));
    }
    // SAFETY: non-null, just returned by getgrnam.
    Ok(unsafe { (*entry).gr_gid })
}

fn access(what: String) -> impl FnOnce(std::io::Error) -> DaemonError {
    move |cause| DaemonError::Access { what, cause }
}

fn chown(path: &Path, gid: u32) -> Result<(), DaemonError> {
    std::os::unix::fs::chown(path, None, Some(gid))
        .map_err(access(format!("cannot give {} to group {gid}", path.display())))
}

fn chmod(path: &Path, mode: u32) -> Result<(), DaemonError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(access(format!("cannot set {} to mode {mode:o}", path.display())))
}

/// Gives the run directory its mode and group.
pub fn secure_run_dir(dir: &Path, gid: u32) -> Result<(), DaemonError> {
    chown(dir, gid)?;
    chmod(dir, RUN_DIR_MODE)
}

/// Binds the control socket at `path` with its mode and group.
pub fn bind_control_socket(path: &Path, gid: u32) -> Result<UnixListener, DaemonError> {
    let _ = std::fs::remove_file(path);
    // SAFETY: umask only changes this process's file-creation mask; restored below.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound.map_err(access(format!("cannot listen on {}", path.display())))?;
    chown(path, gid)?;
    chmod(path, SOCKET_MODE)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_and_its_directory_get_their_modes_whatever_the_umask() {
        let dir = std::env::temp_dir().join(format!("slaswitch-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: test-local umask change.
        let old = unsafe { libc::umask(0) };
        let gid = group_id("root").unwrap_or(0);
        secure_run_dir(&dir, gid).unwrap();
        let sock = dir.join("ctl");
        let _l = bind_control_socket(&sock, gid).unwrap();
        unsafe { libc::umask(old) };
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o750);
        assert_eq!(mode(&sock), 0o660);
        assert!(group_id("no-such-group-here").unwrap_err().to_string().contains("no such group"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
