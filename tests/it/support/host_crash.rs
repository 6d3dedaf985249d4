//! A host crash for a real `redis-server`: the process dies (`kill -9`) and its files keep only
//! what reached the disk. Killing the process alone loses nothing the kernel was given (the
//! page cache survives it), so the files must be cut back by hand to what `fsync` had made
//! durable. A small preloaded library of ours (`SHIM`, built with the machine's C compiler)
//! records, after every successful `fsync`/`fdatasync` Redis makes, the file and its size at
//! that moment; [`cut_to_synced`] then truncates each recorded file to its size at the last sync
//! up to a given time. Each test picks the worst case its `appendfsync` policy allows: `always`
//! loses nothing Redis acknowledged (cut to the last sync), `everysec` loses up to about a
//! second, or two (cut to the last sync before a moment the test chose).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The preloaded library's source. Each record is one `write` of one line to a file opened with
/// `O_APPEND` (atomic below `PIPE_BUF`), so records from Redis's main and background threads
/// never interleave.
const SHIM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void record(int fd) {
    const char *log = getenv("CG_SYNC_LOG");
    if (!log) return;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    char line[PATH_MAX + 64];
    int len = snprintf(line, sizeof line, "%lld %lld %s\n", ms, (long long)st.st_size, path);
    int out = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (out < 0) return;
    if (write(out, line, len) < 0) {}
    close(out);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int r = real(fd);
    if (r == 0) record(fd);
    return r;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int r = real(fd);
    if (r == 0) record(fd);
    return r;
}
"#;

/// The built library's path (built once per test run).
pub fn shim() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("host-crash");
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("syncshim.c");
        // Built under a name of this process, then renamed: tests of parallel runs never load
        // a half-written library.
        let built = dir.join(format!("syncshim-{}.so", std::process::id()));
        std::fs::write(&source, SHIM).unwrap();
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&built)
            .arg(&source)
            .arg("-ldl")
            .output()
            .expect("a C compiler (cc) on PATH");
        assert!(
            out.status.success(),
            "building the sync shim failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = dir.join("syncshim.so");
        std::fs::rename(&built, &lib).unwrap();
        lib
    })
}

/// The environment that makes a `redis-server` record its syncs into `log`.
pub fn env(log: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), shim().display().to_string()),
        ("CG_SYNC_LOG".into(), log.display().to_string()),
    ]
}

/// Whether Redis synced a file after `at` (Unix ms).
pub fn synced_since(log: &Path, at: u64) -> bool {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
        .any(|t| t > at)
}

/// Cuts every file the log names back to its size at its last sync at or before `until` (Unix
/// ms; `None`: its last sync): what a host crash leaves of files written since. Files never
/// synced in that time are cut to nothing. Returns the bytes cut.
pub fn cut_to_synced(log: &Path, until: Option<u64>) -> u64 {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut synced: HashMap<String, u64> = HashMap::new();
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(at), Some(size), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(at), Ok(size)) = (at.parse::<u64>(), size.parse::<u64>()) else {
            continue;
        };
        if !seen.contains(&path.to_owned()) {
            seen.push(path.to_owned());
        }
        if until.is_none_or(|u| at <= u) {
            synced.insert(path.to_owned(), size);
        }
    }
    let mut cut = 0;
    for path in seen {
        let Ok(meta) = std::fs::metadata(&path) else {
            // Renamed or removed since (a rewrite's temporary file): nothing to cut.
            continue;
        };
        let keep = synced.get(&path).copied().unwrap_or(0);
        if meta.len() > keep {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(keep).unwrap();
            cut += meta.len() - keep;
        }
    }
    cut
}
